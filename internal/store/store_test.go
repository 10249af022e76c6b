package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store/storetest"
)

func TestMain(m *testing.M) {
	if url := os.Getenv(killChildEnv); url != "" {
		os.Exit(runKillChild(url))
	}
	if url := os.Getenv(leaseChildEnv); url != "" {
		os.Exit(runLeaseChild(url))
	}
	if path := os.Getenv(sqliteChildEnv); path != "" {
		os.Exit(runSQLiteChild(path))
	}
	os.Exit(m.Run())
}

func TestSQLite(t *testing.T) {
	runConformance(t, func(t *testing.T) string {
		return "sqlite://" + filepath.Join(t.TempDir(), "rota.db")
	})
}

func TestPostgres(t *testing.T) {
	pg := storetest.NewPostgres(t)
	runConformance(t, func(t *testing.T) string { return pg.NewDatabase(t) })
}

func TestOpenUnsupportedURL(t *testing.T) {
	for _, url := range []string{"", "rota.db", "/var/lib/rota/rota.db", "mysql://db/rota", "sqlite:", "sqlite://", "file:rota.db"} {
		s, err := Open(context.Background(), url, nil)
		if err == nil {
			s.Close()
		}
		if !errors.Is(err, ErrUnsupportedURL) {
			t.Errorf("Open(%q): got %v, want ErrUnsupportedURL", url, err)
		}
	}
}

// TestSQLiteRelativePath checks that sqlite://relative/path.db is relative to the working
// directory and that Open creates the missing directory.
func TestSQLiteRelativePath(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	s := openStore(t, "sqlite://data/rota.db")
	commit(t, s, &Batch{Queues: []api.Queue{fullQueue("train")}})
	if _, err := os.Stat(filepath.Join(dir, "data", "rota.db")); err != nil {
		t.Errorf("database file not where the URL says: %v", err)
	}
}

func TestMigrationsWellFormed(t *testing.T) {
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		t.Fatal("no migrations embedded")
	}
}

// BenchmarkCommitSubmit measures the commonest write: one submitted job and its event.
func BenchmarkCommitSubmit(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) {
		benchmarkCommitSubmit(b, "sqlite://"+filepath.Join(b.TempDir(), "rota.db"))
	})
	b.Run("postgres", func(b *testing.B) {
		benchmarkCommitSubmit(b, storetest.StartPostgres(b))
	})
}

// BenchmarkCommitSubmitGroup measures what the server's group commit writes when many
// clients submit at once: n jobs and their events in one transaction, each op one job.
// The scale suite's 64 clients make groups of 14 to 23 on a 2-core machine, and up to 64
// where the commit is slower than the submits' checks.
func BenchmarkCommitSubmitGroup(b *testing.B) {
	for _, n := range []int{16, 64} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			benchmarkCommitSubmit(b, "sqlite://"+filepath.Join(b.TempDir(), "rota.db"), n)
		})
	}
}

func benchmarkCommitSubmit(b *testing.B, url string, group ...int) {
	s, err := Open(context.Background(), url, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	n := 1
	if len(group) > 0 {
		n = group[0]
	}
	event := api.Event{Time: t0, Actor: "ada", Kind: api.EventSubmit, To: api.StatePending}
	batch := &Batch{Jobs: make([]api.Job, n), Events: make([]api.Event, n)}
	for i := range n {
		batch.Jobs[i], batch.Events[i] = fullJob(0), event
	}
	b.ReportAllocs()
	cpu0 := processCPU(b)
	defer func() {
		// CPU time: without the commit's wait for fsync, which wall time holds.
		b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/1000/float64(b.N), "cpu-µs/op")
	}()
	var id int64
	for i := 0; b.Loop(); i++ {
		id++
		batch.Jobs[i%n].ID, batch.Events[i%n].JobID = id, id
		if i%n < n-1 {
			continue
		}
		if err := s.Commit(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSQLiteSettings checks the settings the durability and concurrency promises rest on
// (see openSQLite): they are applied per connection, so a typo would fail silently.
func TestSQLiteSettings(t *testing.T) {
	s := openStore(t, "sqlite://"+filepath.Join(t.TempDir(), "rota.db")).(*sqlStore)
	for _, tc := range []struct {
		pragma string
		want   string
	}{
		{"journal_mode", "wal"},
		{"synchronous", "2"}, // FULL
		{"foreign_keys", "1"},
		{"busy_timeout", sqliteBusyTimeoutMS},
		{"temp_store", "2"}, // MEMORY
	} {
		var got string
		if err := s.write.QueryRowContext(context.Background(), "PRAGMA "+tc.pragma).Scan(&got); err != nil {
			t.Fatalf("PRAGMA %s: %v", tc.pragma, err)
		}
		if got != tc.want {
			t.Errorf("PRAGMA %s on the write connection = %q, want %q", tc.pragma, got, tc.want)
		}
	}
	var readOnly string
	if err := s.read.QueryRowContext(context.Background(), "PRAGMA query_only").Scan(&readOnly); err != nil {
		t.Fatalf("PRAGMA query_only: %v", err)
	}
	if readOnly != "1" {
		t.Errorf("read connections are not query_only")
	}
}

// TestLastByKey checks the deduplication every commit runs: a batch with each key once is
// written as it is, not copied; with a key twice, the last row wins, in the place of the
// first.
func TestLastByKey(t *testing.T) {
	key := func(j *api.Job) int64 { return j.ID }
	rows := []api.Job{{ID: 1}, {ID: 2}, {ID: 3}}
	if got := lastByKey(rows, key); len(got) != 3 || &got[0] != &rows[0] {
		t.Errorf("unique keys: got %d rows at %p, want the 3 rows given, at %p", len(got), &got[0], &rows[0])
	}
	rows = []api.Job{{ID: 1, Message: "a"}, {ID: 2}, {ID: 1, Message: "b"}, {ID: 3}}
	got := lastByKey(rows, key)
	if len(got) != 3 || got[0].ID != 1 || got[0].Message != "b" || got[1].ID != 2 || got[2].ID != 3 {
		t.Errorf("key 1 twice: got %+v, want job 1 (b), 2, 3", got)
	}
	if rows[0].Message != "a" {
		t.Errorf("the rows given were changed: %+v", rows[0])
	}
}

// processCPU is the CPU time the process has used, user and system, every thread.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
