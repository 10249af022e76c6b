package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
)

// BenchmarkEndedJobs loads a store of 200,000 jobs that ended two days ago, keeping them
// in memory (keep=30d, as every job was before KeepEnded) or not (keep=24h, the default),
// and reports the live heap after the load (heap-MB) and what one first page of
// GET /api/v1/jobs?state=all costs.
func BenchmarkEndedJobs(b *testing.B) {
	const jobs = 200_000
	dir := b.TempDir()
	url := "sqlite://" + filepath.Join(dir, "rota.db")
	st, err := store.Open(context.Background(), url, nil)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	ended := now.Add(-48 * time.Hour)
	for first := 1; first <= jobs; first += 10_000 {
		batch := &store.Batch{}
		for id := first; id < first+10_000; id++ {
			end := ended.Add(time.Duration(id) * time.Millisecond)
			start := end.Add(-time.Hour)
			batch.Jobs = append(batch.Jobs, api.Job{ID: int64(id), State: api.StateSucceeded, SubmitTime: start, EndTime: &end, Attempts: 1,
				Spec: api.JobSpec{User: "admin", Team: "default", Queue: "batch", GPUs: 1, Command: []string{"python", "train.py", fmt.Sprint(id)}}})
			batch.Attempts = append(batch.Attempts, api.Attempt{JobID: int64(id), N: 1, State: api.StateSucceeded, AssignTime: start, StartTime: &start, EndTime: &end,
				Placements: []api.Placement{{Node: "n1", GPUIndices: []int{id % 8}, GPUIDs: []string{fmt.Sprintf("GPU-%d", id%8)}, CPUs: 4, MemoryMB: 16000}}})
		}
		if err := st.Commit(context.Background(), batch); err != nil {
			b.Fatal(err)
		}
	}
	st.Close()
	for _, keep := range []time.Duration{30 * 24 * time.Hour, 24 * time.Hour} {
		b.Run(fmt.Sprintf("keep=%s", keep), func(b *testing.B) {
			st, err := store.Open(context.Background(), url, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			srv, err := New(context.Background(), Config{DataDir: dir, KeepEnded: keep, Clock: &fakeClock{t: now}}, st, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer srv.Close()
			runtime.GC()
			runtime.ReadMemStats(&after)
			heap := float64(after.HeapAlloc-before.HeapAlloc) / (1 << 20)
			srv.mu.Lock()
			inMemory := srv.state.JobCount()
			srv.mu.Unlock()
			hs := httptest.NewUnstartedServer(srv.Handler())
			hs.Config.ConnContext = srv.ConnContext
			hs.Start()
			defer hs.Close()
			token, err := os.ReadFile(filepath.Join(dir, "admin-token"))
			if err != nil {
				b.Fatal(err)
			}
			client := &http.Client{}
			b.ResetTimer()
			for range b.N {
				req, _ := http.NewRequest("GET", hs.URL+"/api/v1/jobs?state=all&limit=500", nil)
				req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				var list api.JobList
				err = json.NewDecoder(resp.Body).Decode(&list)
				resp.Body.Close()
				if err != nil || len(list.Jobs) != 500 || list.Jobs[0].ID != 1 || list.Next != "500" {
					b.Fatalf("page of %d jobs, next %q, err %v", len(list.Jobs), list.Next, err)
				}
			}
			b.ReportMetric(heap, "heap-MB")
			b.ReportMetric(float64(inMemory), "jobs-in-memory")
			runtime.KeepAlive(srv)
		})
	}
}
