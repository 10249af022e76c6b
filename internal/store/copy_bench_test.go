package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/rotahq/rota/internal/store/storetest"
)

// benchJobs is the size of the store the benchmarks copy: jobs, each with an attempt and
// benchEventsPerJob events, the shape a month of a busy cluster has.
const (
	benchJobs         = 10000
	benchEventsPerJob = 5
)

// fillBench writes the benchmarks' store at url, in batches of 500 jobs.
func fillBench(b *testing.B, url string) {
	b.Helper()
	s, err := Open(context.Background(), url, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for start := int64(1); start <= benchJobs; start += 500 {
		batch := &Batch{}
		for id := start; id < start+500 && id <= benchJobs; id++ {
			batch.Jobs = append(batch.Jobs, fullJob(id))
			batch.Attempts = append(batch.Attempts, fullAttempt(id, 1))
			for range benchEventsPerJob {
				batch.Events = append(batch.Events, fullEvent(id))
			}
		}
		if err := s.Commit(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
}

func reportRows(b *testing.B) {
	b.ReportMetric(float64(benchJobs*(2+benchEventsPerJob))*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkBackup: go test -run '^$' -bench Backup ./internal/store/
func BenchmarkBackup(b *testing.B) {
	dir := b.TempDir()
	url := "sqlite://" + filepath.Join(dir, "rota.db")
	fillBench(b, url)
	i := 0
	for b.Loop() {
		i++
		to := filepath.Join(dir, fmt.Sprintf("backup-%d.db", i))
		if _, err := Backup(context.Background(), url, to); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.Remove(to)
		b.StartTimer()
	}
	reportRows(b)
}

// BenchmarkMigrate: go test -run '^$' -bench Migrate ./internal/store/
func BenchmarkMigrate(b *testing.B) {
	dir := b.TempDir()
	url := "sqlite://" + filepath.Join(dir, "rota.db")
	fillBench(b, url)
	b.Run("sqlite-to-sqlite", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			to := filepath.Join(dir, fmt.Sprintf("copy-%d.db", i))
			if _, err := Copy(context.Background(), url, "sqlite://"+to, nil); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			removeSQLiteFiles(to)
			os.Remove(to + ".lock")
			b.StartTimer()
		}
		reportRows(b)
	})
	pg := storetest.NewPostgres(b)
	b.Run("sqlite-to-postgres", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			to := pg.NewDatabase(b)
			b.StartTimer()
			if _, err := Copy(context.Background(), url, to, nil); err != nil {
				b.Fatal(err)
			}
		}
		reportRows(b)
	})
}
