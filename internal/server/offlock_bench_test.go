package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
	"github.com/rotahq/rota/internal/store/storetest"
)

// BenchmarkSubmitWhileListingEnded measures submits on PostgreSQL (each op one POST
// /api/v1/jobs from one client, answered after its commit) while 4 other clients page
// through 20,000 jobs that ended before KeepEnded and so are read from the store. How
// long a submit waits shows whether those store reads hold the server's lock; lists/s is
// how many pages the readers got meanwhile.
func BenchmarkSubmitWhileListingEnded(b *testing.B) {
	const ended, readers = 20_000, 4
	url := storetest.StartPostgres(b)
	ctx := context.Background()
	st, err := store.Open(ctx, url, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	now := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	for first := 1; first <= ended; first += 5_000 {
		batch := &store.Batch{}
		for id := first; id < first+5_000; id++ {
			end := now.Add(-48 * time.Hour).Add(time.Duration(id) * time.Millisecond)
			start := end.Add(-time.Hour)
			batch.Jobs = append(batch.Jobs, api.Job{ID: int64(id), State: api.StateSucceeded, SubmitTime: start, EndTime: &end, Attempts: 1,
				Spec: api.JobSpec{User: "admin", Team: "default", Queue: "batch", GPUs: 1, Command: []string{"train", fmt.Sprint(id)}}})
			batch.Attempts = append(batch.Attempts, api.Attempt{JobID: int64(id), N: 1, State: api.StateSucceeded, AssignTime: start, StartTime: &start, EndTime: &end,
				Placements: []api.Placement{{Node: "n1", GPUIndices: []int{id % 8}, GPUIDs: []string{fmt.Sprintf("GPU-%d", id%8)}, CPUs: 4, MemoryMB: 16000}}})
		}
		if err := st.Commit(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	dir := b.TempDir()
	srv, err := New(ctx, Config{DataDir: dir, Clock: &fakeClock{t: now}}, st, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	srv.mu.Lock()
	_, e := srv.applyConfig(ctx, []byte("limits: {submits_per_second: 1000000, submit_burst: 10000000, max_pending_per_user: 10000000}\n"), api.Event{Actor: "bench"})
	srv.mu.Unlock()
	if e != nil {
		b.Fatal(e.Message)
	}
	tok, err := os.ReadFile(filepath.Join(dir, "admin-token"))
	if err != nil {
		b.Fatal(err)
	}
	token := strings.TrimSpace(string(tok))
	hs := httptest.NewUnstartedServer(srv.Handler())
	hs.Config.ConnContext = srv.ConnContext
	hs.Start()
	defer hs.Close()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var lists atomic.Int64
	for r := range readers {
		wg.Go(func() {
			client := &http.Client{}
			for i := r; ; i += readers {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", fmt.Sprintf("%s/api/v1/jobs?state=all&limit=500&after=%d", hs.URL, (i*500)%ended), nil)
				req.Header.Set("Authorization", "Bearer "+token)
				if status, err := doDrained(client, req); err != nil || status != http.StatusOK {
					b.Errorf("list: status %d, %v", status, err)
					return
				}
				lists.Add(1)
			}
		})
	}
	client := &http.Client{}
	spec := api.JobSpec{Command: []string{"true"}, Hold: true}
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if err := post(client, hs.URL+"/api/v1/jobs", token, spec, nil); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(lists.Load())/elapsed.Seconds(), "lists/s")
}
