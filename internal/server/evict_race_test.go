package server

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// historyPages follows GET /api/v1/history page by page, limit records at a time, and
// returns the records' job IDs in the order given.
func (h *harness) historyPages(token string, query url.Values, limit int) []int64 {
	h.t.Helper()
	return followCursor(h, token, "/api/v1/history", query, limit, 1000, func(p *api.HistoryList) ([]int64, string) {
		ids := make([]int64, 0, len(p.Records))
		for _, r := range p.Records {
			ids = append(ids, r.ID)
		}
		return ids, p.Next
	})
}

// endedJobs gives h n single jobs and then an array of 4 that all ended, a minute apart
// (the array's elements together), more than KeepEnded (an hour) ago, none yet let go
// from memory, and one job still held. It returns every job's ID in order, the IDs of the
// ended ones, the array's ID and the end times in the order the jobs ended: n for the
// singles, then the array's.
func endedJobs(h *harness, n int) (all, ended []int64, array int64, ends []time.Time) {
	h.cfg = func(c *Config) { c.KeepEnded = time.Hour }
	h.open()
	for range n {
		h.clock.Add(time.Minute)
		j := h.submit(api.JobSpec{GPUs: 1, Command: []string{"x"}, Hold: true})
		if code := h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", j.ID), nil, nil); code != http.StatusOK {
			h.t.Fatalf("cancel job %d: %d", j.ID, code)
		}
		ended = append(ended, j.ID)
		ends = append(ends, h.clock.Now())
	}
	h.clock.Add(time.Minute)
	var arr api.Job
	if code := h.do("POST", "/api/v1/jobs", api.JobSpec{GPUs: 1, Command: []string{"sweep"}, Array: "0-3", Hold: true}, &arr); code != http.StatusCreated {
		h.t.Fatalf("submit an array: %d", code)
	}
	if code := h.do("POST", fmt.Sprintf("/api/v1/arrays/%d/cancel", arr.ArrayID), nil, nil); code != http.StatusOK {
		h.t.Fatalf("cancel the array: %d", code)
	}
	for id := arr.ArrayID; id < arr.ArrayID+4; id++ {
		ended = append(ended, id)
	}
	ends = append(ends, h.clock.Now())
	held := h.submit(api.JobSpec{GPUs: 1, Command: []string{"wait"}, Hold: true})
	h.clock.Add(2 * time.Hour)
	all = append(slices.Clone(ended), held.ID)
	return all, ended, arr.ArrayID, ends
}

// evictUpTo lets go from memory the jobs that ended at or before end.
func (h *harness) evictUpTo(end time.Time) {
	h.srv.mu.Lock()
	h.srv.state.Evict(end.Add(time.Second))
	h.srv.mu.Unlock()
}

// Listings read memory under the lock and the store without it. Jobs that leave memory
// in between must be neither lost nor listed twice: here one more group of jobs leaves
// memory at every store read of the job list, the history and an array.
func TestListingsWhileJobsLeaveMemory(t *testing.T) {
	const n = 20
	// start makes a server with the jobs of endedJobs, the first of them gone from
	// memory (a listing reads the store only once some job has), and the others leaving
	// one at a time at each store read, up to upTo.
	start := func(t *testing.T) (h *harness, all, ended []int64, array int64, next, upTo *int) {
		h = &harness{t: t, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir()}
		all, ended, array, ends := endedJobs(h, n)
		h.evictUpTo(ends[0])
		next, upTo = new(int), new(int)
		*next, *upTo = 1, n
		h.srv.betweenReads = func() {
			if *next < *upTo {
				h.evictUpTo(ends[*next])
				*next++
			}
		}
		return h, all, ended, array, next, upTo
	}
	for _, limit := range []int{1, 3} {
		t.Run(fmt.Sprintf("list by %d", limit), func(t *testing.T) {
			h, all, _, _, next, _ := start(t)
			if got := h.pageThrough(h.token, url.Values{"state": {"all"}}, limit); fmt.Sprint(got) != fmt.Sprint(all) {
				t.Errorf("list while jobs leave memory: %v; want %v", got, all)
			}
			if *next < n/limit {
				t.Errorf("only %d jobs left memory during the listing", *next)
			}
		})
		t.Run(fmt.Sprintf("history by %d", limit), func(t *testing.T) {
			h, _, ended, _, next, _ := start(t)
			if got := h.historyPages(h.token, nil, limit); fmt.Sprint(got) != fmt.Sprint(ended) {
				t.Errorf("history while jobs leave memory: %v; want %v", got, ended)
			}
			if *next < n/limit {
				t.Errorf("only %d jobs left memory during the listing", *next)
			}
		})
	}
	t.Run("array", func(t *testing.T) {
		h, _, ended, array, next, upTo := start(t)
		// An array read takes memory first, then the store: the array leaves between.
		*next, *upTo = n, n+1
		var arr api.JobList
		if code := h.do("GET", fmt.Sprintf("/api/v1/arrays/%d", array), nil, &arr); code != http.StatusOK || fmt.Sprint(jobIDs(arr.Jobs)) != fmt.Sprint(ended[n:]) {
			t.Errorf("reading the array while it leaves memory: %d %v; want %v", code, jobIDs(arr.Jobs), ended[n:])
		}
		h, _, ended, array, next, upTo = start(t)
		// An array action reads the store first, then memory: the array leaves between.
		*next, *upTo = n, n+1
		if code := h.do("POST", fmt.Sprintf("/api/v1/arrays/%d/cancel", array), nil, &arr); code != http.StatusOK || fmt.Sprint(jobIDs(arr.Jobs)) != fmt.Sprint(ended[n:]) {
			t.Errorf("cancelling the array while it leaves memory: %d %v; want %v", code, jobIDs(arr.Jobs), ended[n:])
		}
		if *next != n+1 {
			t.Fatal("the array did not leave memory during the array action")
		}
		// Now it has left: the store alone answers, the same.
		if code := h.do("GET", fmt.Sprintf("/api/v1/arrays/%d", array), nil, &arr); code != http.StatusOK || fmt.Sprint(jobIDs(arr.Jobs)) != fmt.Sprint(ended[n:]) {
			t.Errorf("the array from the store: %d %v; want %v", code, jobIDs(arr.Jobs), ended[n:])
		}
	})
}

// The same with the jobs leaving memory from another goroutine while listings run, for
// the race detector: the store reads must touch nothing the lock guards.
func TestListingsRaceEviction(t *testing.T) {
	h := &harness{t: t, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir()}
	all, ended, array, ends := endedJobs(h, 30)
	h.evictUpTo(ends[0])
	// The evictor lets one more group go each time a listing starts, so the two overlap
	// throughout and every group leaves while some listing runs.
	var wg sync.WaitGroup
	tick, done := make(chan struct{}, 1), make(chan struct{})
	wg.Go(func() {
		defer close(done)
		for _, end := range ends[1:] {
			<-tick
			h.evictUpTo(end)
		}
	})
	start := func() {
		select {
		case tick <- struct{}{}:
		default:
		}
	}
	for rounds := 0; ; rounds++ {
		start()
		if got := h.pageThrough(h.token, url.Values{"state": {"all"}}, 4); fmt.Sprint(got) != fmt.Sprint(all) {
			t.Fatalf("list in round %d: %v; want %v", rounds, got, all)
		}
		start()
		if got := h.historyPages(h.token, nil, 4); fmt.Sprint(got) != fmt.Sprint(ended) {
			t.Fatalf("history in round %d: %v; want %v", rounds, got, ended)
		}
		start()
		var arr api.JobList
		if code := h.do("POST", fmt.Sprintf("/api/v1/arrays/%d/cancel", array), nil, &arr); code != http.StatusOK || fmt.Sprint(jobIDs(arr.Jobs)) != fmt.Sprint(ended[len(ended)-4:]) {
			t.Fatalf("array cancel in round %d: %d %v; want %v", rounds, code, jobIDs(arr.Jobs), ended[len(ended)-4:])
		}
		select {
		case <-done:
			wg.Wait()
			return
		default:
		}
	}
}

// The history's paging parameters are checked like the job list's.
func TestHistoryBadInput(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct{ query, field string }{
		{"limit=0", "limit"},
		{"limit=5001", "limit"},
		{"limit=x", "limit"},
		{"after=-1", "after"},
		{"after=x", "after"},
		{"since=2026-11-02T00:00:00Z&until=2026-11-01T00:00:00Z", "until"},
		{"since=yesterday", "since"},
	} {
		var e api.Error
		if code := h.do("GET", "/api/v1/history?"+tc.query, nil, &e); code != http.StatusBadRequest || e.Field != tc.field || e.Message == "" {
			t.Errorf("history?%s: %d %+v; want 400 naming %s", tc.query, code, e, tc.field)
		}
	}
}
