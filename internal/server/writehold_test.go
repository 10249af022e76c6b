package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
)

// refusingStore refuses every commit while refuse is set, as a store on a full disk
// does, and counts the reads of the whole state.
type refusingStore struct {
	store.Store
	refuse  atomic.Bool
	commits atomic.Int32 // commits tried
	loads   atomic.Int32
}

var errStoreFull = errors.New("store: commit: commit transaction: database or disk is full (13)")

func (r *refusingStore) Commit(ctx context.Context, b *store.Batch) error {
	r.commits.Add(1)
	if r.refuse.Load() {
		return errStoreFull
	}
	return r.Store.Commit(ctx, b)
}

func (r *refusingStore) LoadRecentJobs(ctx context.Context, since time.Time) ([]api.Job, error) {
	r.loads.Add(1)
	return r.Store.LoadRecentJobs(ctx, since)
}

// submitRaw posts a job and returns the answer's status, Retry-After and error.
func (h *harness) submitRaw(spec api.JobSpec) (int, string, api.Error) {
	h.t.Helper()
	body, _ := json.Marshal(spec)
	req, _ := http.NewRequest("POST", h.http.URL+"/api/v1/jobs", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+h.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	var e api.Error
	json.NewDecoder(resp.Body).Decode(&e)
	return resp.StatusCode, resp.Header.Get("Retry-After"), e
}

// TestStoreRefusingWritesHoldsChanges gives the server a store that refuses every write.
// A single failure is retried at once, as a lost connection needs; from the second in a
// row the server refuses changes for a hold that doubles, with 503 and Retry-After,
// without reading its store again for each, and says so in the status. Once the store
// takes a write, changes go on.
func TestStoreRefusingWritesHoldsChanges(t *testing.T) {
	rs := &refusingStore{}
	h := &harness{t: t, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir(),
		wrap: func(st store.Store) store.Store { rs.Store = st; return rs }}
	h.open()
	h.beat("n1", 1)
	running := h.submit(api.JobSpec{GPUs: 1, Command: []string{"train"}})
	h.cycle()
	h.beat("n1", 1, api.TaskStatus{JobID: running.ID, Attempt: 1, State: api.StateRunning})

	rs.refuse.Store(true)
	spec := api.JobSpec{GPUs: 1, Command: []string{"eval"}}
	for i := range 2 {
		if code, retry, e := h.submitRaw(spec); code != http.StatusInternalServerError || retry != "" || !strings.Contains(e.Message, "database or disk is full") {
			t.Fatalf("failed write %d: %d (Retry-After %q) %+v, want 500 with the store's error", i+1, code, retry, e)
		}
	}
	commits, loads := rs.commits.Load(), rs.loads.Load()
	for range 20 {
		code, retry, e := h.submitRaw(spec)
		if code != http.StatusServiceUnavailable || retry != "1" || e.Code != api.CodeUnavailable ||
			!strings.Contains(e.Message, "the store refused the server's last writes (store: commit: commit transaction: database or disk is full (13)): it takes no changes for 1s, then tries again") {
			t.Fatalf("a submit in the hold: %d (Retry-After %q) %+v, want 503 with Retry-After 1", code, retry, e)
		}
	}
	// A heartbeat reporting the job's end is refused too, and changes nothing.
	zero := 0
	end := api.TaskStatus{JobID: running.ID, Attempt: 1, State: api.StateSucceeded, ExitCode: &zero}
	if code, _, _ := h.beatAs("n1", api.Heartbeat{Instance: "agent-n1", Synced: true, Tasks: []api.TaskStatus{end}}); code != http.StatusServiceUnavailable {
		t.Errorf("a report in the hold: %d, want 503", code)
	}
	h.cycle()
	if got, want := rs.commits.Load(), commits; got != want {
		t.Errorf("the store was asked for %d commits in the hold, want none", got-want)
	}
	if got := rs.loads.Load(); got != loads {
		t.Errorf("the server read its store %d times in the hold, want none", got-loads)
	}
	if got := h.job(running.ID); got.State != api.StateRunning {
		t.Errorf("the job is %s after a refused report of its end, want RUNNING", got.State)
	}
	var st api.ClusterStatus
	if h.do("GET", "/api/v1/status", nil, &st); len(st.Problems) != 1 || !strings.Contains(st.Problems[0], "the store has refused every write since 2026-11-01T09:00:00Z (2 in a row; the last: store: commit: commit transaction: database or disk is full (13))") {
		t.Errorf("status problems %q, want the store's refusals", st.Problems)
	}

	// After the hold, the next change is tried; refused again, the hold doubles.
	h.clock.Add(time.Second)
	if code, _, _ := h.submitRaw(spec); code != http.StatusInternalServerError {
		t.Fatalf("the first change after the hold: %d, want it tried, and refused by the store", code)
	}
	if code, retry, _ := h.submitRaw(spec); code != http.StatusServiceUnavailable || retry != "2" {
		t.Fatalf("a submit in the second hold: %d with Retry-After %q, want 503 and 2", code, retry)
	}

	// A refusal that lasts longer than a node may be silent: the node, heard from all
	// along with its report refused, is neither not ready nor lost once the store takes
	// writes again, and its job is not requeued.
	for range 15 {
		h.clock.Add(10 * time.Second)
		h.beatAs("n1", api.Heartbeat{Instance: "agent-n1", Synced: true, Tasks: []api.TaskStatus{end}})
		h.srv.checkNodes(context.Background())
	}
	rs.refuse.Store(false)
	for range holdWritesMax / (5 * time.Second) {
		h.clock.Add(5 * time.Second)
		h.srv.checkNodes(context.Background()) // first, so that it writes what it finds as soon as it may
		if n := h.node("n1"); n.State != api.NodeReady {
			t.Fatalf("node n1, heard from all through the refusals, is %s, want READY", n.State)
		}
		h.beatAs("n1", api.Heartbeat{Instance: "agent-n1", Synced: true, Tasks: []api.TaskStatus{end}})
	}
	if code, _, e := h.submitRaw(spec); code != http.StatusCreated {
		t.Fatalf("a submit once the store takes writes: %d %+v", code, e)
	}
	h.submit(spec)
	h.beat("n1", 1, end)
	if got := h.job(running.ID); got.State != api.StateSucceeded || got.Attempts != 1 {
		t.Errorf("the job is %s after %d attempts once its end was reported again, want SUCCEEDED after 1", got.State, got.Attempts)
	}
	st = api.ClusterStatus{}
	if h.do("GET", "/api/v1/status", nil, &st); len(st.Problems) != 0 {
		t.Errorf("problems once the store takes writes: %q", st.Problems)
	}
}
