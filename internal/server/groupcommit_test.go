package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
)

// gateStore holds the first commit that inserts pending jobs until the test opens the
// gate, and counts the commits that insert jobs and how many each carried.
type gateStore struct {
	store.Store
	entered chan struct{}
	gate    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	sizes   []int // jobs per commit that inserted submitted jobs
	lie     atomic.Int32
}

func newGateStore() *gateStore {
	return &gateStore{entered: make(chan struct{}), gate: make(chan struct{})}
}

func (g *gateStore) Commit(ctx context.Context, b *store.Batch) error {
	submits := len(b.Jobs) > 0 && b.Jobs[0].Attempts == 0 && (b.Jobs[0].State == api.StatePending || b.Jobs[0].State == api.StateHeld)
	if submits {
		g.once.Do(func() {
			close(g.entered)
			<-g.gate
		})
	}
	if err := g.Store.Commit(ctx, b); err != nil {
		return err
	}
	if submits {
		g.mu.Lock()
		g.sizes = append(g.sizes, len(b.Jobs))
		g.mu.Unlock()
		if g.lie.Add(-1) >= 0 {
			return errLostCommit
		}
	}
	return nil
}

func (g *gateStore) commitSizes() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.sizes...)
}

// postSubmit sends one submit and returns the status, the job and the response headers.
func (h *harness) postSubmit(spec api.JobSpec, key string) (int, api.Job, http.Header) {
	var buf bytes.Buffer
	json.NewEncoder(&buf).Encode(spec)
	req, _ := http.NewRequest("POST", h.http.URL+"/api/v1/jobs", &buf)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+h.token)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Error(err)
		return 0, api.Job{}, nil
	}
	defer resp.Body.Close()
	var j api.Job
	json.NewDecoder(resp.Body).Decode(&j)
	return resp.StatusCode, j, resp.Header
}

func gatedHarness(t *testing.T, gs *gateStore, cfg func(*Config)) *harness {
	h := &harness{t: t, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir(),
		wrap: func(st store.Store) store.Store { gs.Store = st; return gs }, cfg: cfg}
	h.open()
	return h
}

// waitInflight waits until n jobs wait for a group commit.
func waitInflight(t *testing.T, s *Server, n int) {
	t.Helper()
	waitUntil(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.groups.jobs == n
	})
}

// Submits that arrive while a commit is being written go into the next transaction
// together; each is answered only after that transaction, with its own job, and every
// job is stored once with its own ID.
func TestSubmitsShareOneCommit(t *testing.T) {
	gs := newGateStore()
	h := gatedHarness(t, gs, nil)

	type answer struct {
		code int
		job  api.Job
	}
	first := make(chan answer, 1)
	go func() {
		code, j, _ := h.postSubmit(api.JobSpec{Command: []string{"first"}}, "")
		first <- answer{code, j}
	}()
	<-gs.entered // the first submit's commit is being written, and held there

	// Half of them send an Idempotency-Key: the group's transaction stores those keys,
	// and every submit's event, along with the jobs.
	const n = 20
	answers := make(chan answer, n)
	for i := range n {
		key := ""
		if i%2 == 0 {
			key = "key-" + string(rune('a'+i))
		}
		go func() {
			code, j, _ := h.postSubmit(api.JobSpec{Command: []string{"train"}, Name: "job-" + string(rune('a'+i))}, key)
			answers <- answer{code, j}
		}()
	}
	waitInflight(t, h.srv, n+1)
	// None is answered, or in memory, before its commit.
	select {
	case a := <-answers:
		t.Fatalf("a submit was answered (%d) before its commit", a.code)
	default:
	}
	var list api.JobList
	h.do("GET", "/api/v1/jobs?state=all", nil, &list)
	if len(list.Jobs) != 0 {
		t.Fatalf("%d jobs listed before any commit", len(list.Jobs))
	}

	close(gs.gate)
	if a := <-first; a.code != http.StatusCreated || a.job.ID != 1 {
		t.Fatalf("first submit: %d job %d", a.code, a.job.ID)
	}
	ids := map[int64]string{}
	for range n {
		a := <-answers
		if a.code != http.StatusCreated {
			t.Fatalf("submit answered %d", a.code)
		}
		if other, dup := ids[a.job.ID]; dup {
			t.Fatalf("job %d given to %s and %s", a.job.ID, other, a.job.Spec.Name)
		}
		ids[a.job.ID] = a.job.Spec.Name
	}
	if sizes := gs.commitSizes(); len(sizes) != 2 || sizes[0] != 1 || sizes[1] != n {
		t.Fatalf("commits carried %v jobs; want [1 %d]: the waiting submits in one transaction", sizes, n)
	}
	stored, err := h.st.LoadJobs(context.Background())
	if err != nil || len(stored) != n+1 {
		t.Fatalf("stored %d jobs, %v; want %d", len(stored), err, n+1)
	}
	for _, j := range stored {
		if j.ID != 1 && ids[j.ID] != j.Spec.Name {
			t.Fatalf("stored job %d is %q; its submitter was told %q", j.ID, j.Spec.Name, ids[j.ID])
		}
		events, err := h.st.Events(context.Background(), store.EventFilter{JobID: j.ID, Kind: string(api.EventSubmit)})
		if err != nil || len(events) != 1 {
			t.Fatalf("job %d: %d submit events stored, %v; want 1", j.ID, len(events), err)
		}
	}
	keys, err := h.st.LoadIdempotency(context.Background(), time.Time{})
	if err != nil || len(keys) != n/2 {
		t.Fatalf("stored %d idempotency keys, %v; want %d", len(keys), err, n/2)
	}
	for _, k := range keys {
		if want := "job-" + k.Key[len("key-"):]; ids[k.JobID] != want {
			t.Fatalf("key %s stored for job %d (%q); want it for the job named %q", k.Key, k.JobID, ids[k.JobID], want)
		}
	}
	// After a restart the next job takes the next ID.
	h.restart()
	if code, j, _ := h.postSubmit(api.JobSpec{Command: []string{"after"}}, ""); code != http.StatusCreated || j.ID != n+2 {
		t.Fatalf("after a restart: %d job %d; want job %d", code, j.ID, n+2)
	}
}

// Two submits with one Idempotency-Key in flight at once make one job: the second waits
// for the first's commit and is answered with its job.
func TestSameKeyInFlight(t *testing.T) {
	gs := newGateStore()
	h := gatedHarness(t, gs, nil)
	spec := api.JobSpec{Command: []string{"train"}}
	type answer struct {
		code     int
		job      api.Job
		replayed string
	}
	answers := make(chan answer, 2)
	send := func() {
		code, j, hdr := h.postSubmit(spec, "same")
		answers <- answer{code, j, hdr.Get("Idempotent-Replayed")}
	}
	go send()
	<-gs.entered
	go send()
	time.Sleep(50 * time.Millisecond) // the second reaches the server and waits on the first
	close(gs.gate)
	a, b := <-answers, <-answers
	if a.job.ID != 1 || b.job.ID != 1 {
		t.Fatalf("jobs %d and %d; want job 1 for both", a.job.ID, b.job.ID)
	}
	if a.replayed == b.replayed {
		t.Fatalf("replayed %q and %q; want exactly one replay", a.replayed, b.replayed)
	}
	stored, _ := h.st.LoadJobs(context.Background())
	if len(stored) != 1 {
		t.Fatalf("%d jobs stored; want 1", len(stored))
	}
}

// A group whose commit reports an error, though it was written, leaves the server
// reading the store again: submitters with a key get their stored job, those without get
// an error, and memory equals the store.
func TestGroupCommitOfUnknownOutcome(t *testing.T) {
	gs := newGateStore()
	h := gatedHarness(t, gs, nil)
	go h.postSubmit(api.JobSpec{Command: []string{"first"}}, "")
	<-gs.entered
	type answer struct {
		code int
		job  api.Job
	}
	keyed, bare := make(chan answer, 3), make(chan answer, 3)
	for i := range 3 {
		go func() {
			code, j, _ := h.postSubmit(api.JobSpec{Command: []string{"train"}}, "k"+string(rune('0'+i)))
			keyed <- answer{code, j}
		}()
		go func() {
			code, j, _ := h.postSubmit(api.JobSpec{Command: []string{"train"}}, "")
			bare <- answer{code, j}
		}()
	}
	waitInflight(t, h.srv, 7)
	gs.lie.Store(2) // the first commit and the group's both "fail" after writing
	close(gs.gate)
	for range 3 {
		if a := <-keyed; a.code != http.StatusOK || a.job.ID == 0 {
			t.Fatalf("keyed submit after an unknown outcome: %d job %d; want 200 with the stored job", a.code, a.job.ID)
		}
		if a := <-bare; a.code != http.StatusInternalServerError {
			t.Fatalf("unkeyed submit after an unknown outcome: %d; want 500", a.code)
		}
	}
	var list api.JobList
	h.do("GET", "/api/v1/jobs?state=all", nil, &list)
	stored, _ := h.st.LoadJobs(context.Background())
	if len(list.Jobs) != 7 || len(stored) != 7 {
		t.Fatalf("memory lists %d jobs, the store holds %d; want 7 in both", len(list.Jobs), len(stored))
	}
	// Two failed commits in a row hold changes for a second (writehold.go).
	if code, _, _ := h.postSubmit(api.JobSpec{Command: []string{"held"}}, ""); code != http.StatusServiceUnavailable {
		t.Fatalf("a submit right after two failed commits: %d; want 503", code)
	}
	// After it, the next submit takes a fresh ID.
	h.clock.Add(holdWritesMin)
	if code, j, _ := h.postSubmit(api.JobSpec{Command: []string{"next"}}, ""); code != http.StatusCreated || j.ID != 8 {
		t.Fatalf("next submit: %d job %d; want 201 job 8", code, j.ID)
	}
}

// A flood beyond the bound on submits waiting to be stored is refused with 429 and
// Retry-After; nothing refused is stored, and those taken are.
func TestSubmitBackpressure(t *testing.T) {
	gs := newGateStore()
	h := gatedHarness(t, gs, func(c *Config) { c.MaxInflightSubmits = 3 })
	done := make(chan int, 3)
	for range 3 {
		go func() {
			code, _, _ := h.postSubmit(api.JobSpec{Command: []string{"train"}}, "")
			done <- code
		}()
	}
	waitInflight(t, h.srv, 3)
	code, _, hdr := h.postSubmit(api.JobSpec{Command: []string{"one too many"}}, "")
	if code != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" {
		t.Fatalf("a submit beyond the bound: %d Retry-After %q; want 429 with Retry-After", code, hdr.Get("Retry-After"))
	}
	close(gs.gate)
	for range 3 {
		if c := <-done; c != http.StatusCreated {
			t.Fatalf("a submit within the bound: %d", c)
		}
	}
	stored, _ := h.st.LoadJobs(context.Background())
	if len(stored) != 3 {
		t.Fatalf("%d jobs stored; want the 3 taken", len(stored))
	}
	if code, _, _ := h.postSubmit(api.JobSpec{Command: []string{"later"}}, ""); code != http.StatusCreated {
		t.Fatalf("a submit once the queue drained: %d", code)
	}
}

// The limit on a user's waiting jobs counts the jobs still being stored.
func TestWaitingLimitCountsInflight(t *testing.T) {
	gs := newGateStore()
	h := gatedHarness(t, gs, nil)
	if code, e := h.putConfig("limits:\n  max_pending_per_user: 2\n"); code != 200 {
		t.Fatalf("config: %d %v", code, e)
	}
	done := make(chan int, 2)
	for range 2 {
		go func() {
			code, _, _ := h.postSubmit(api.JobSpec{Command: []string{"train"}}, "")
			done <- code
		}()
	}
	waitInflight(t, h.srv, 2)
	if code, _, _ := h.postSubmit(api.JobSpec{Command: []string{"third"}}, ""); code != http.StatusTooManyRequests {
		t.Fatalf("a third waiting job while two are being stored: %d; want 429", code)
	}
	close(gs.gate)
	<-done
	<-done
}

// A submit made when the oldest key is more than an hour past the window deletes the
// keys older than the window, in its group's transaction, whichever of the group's
// submits asked for it; the keys of the window stay.
func TestSubmitsPruneOldKeys(t *testing.T) {
	gs := newGateStore()
	h := gatedHarness(t, gs, nil)
	close(gs.gate)
	if code, _, _ := h.postSubmit(api.JobSpec{Command: []string{"old"}}, "old-key"); code != http.StatusCreated {
		t.Fatalf("first submit: %d", code)
	}
	h.clock.Add(2 * time.Hour)
	if code, _, _ := h.postSubmit(api.JobSpec{Command: []string{"kept"}}, "kept-key"); code != http.StatusCreated {
		t.Fatalf("second submit: %d", code)
	}
	h.clock.Add(idempotencyWindow - 30*time.Minute) // old-key is 25.5 h old, kept-key 23.5 h
	var wg sync.WaitGroup
	for i, key := range []string{"new-a", "", "new-b"} {
		wg.Go(func() {
			if code, _, _ := h.postSubmit(api.JobSpec{Command: []string{"new", string(rune('a' + i))}}, key); code != http.StatusCreated {
				t.Errorf("submit with key %q: %d", key, code)
			}
		})
	}
	wg.Wait()
	recs, err := h.st.LoadIdempotency(context.Background(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, r := range recs {
		keys = append(keys, r.Key)
	}
	slices.Sort(keys)
	if want := []string{"kept-key", "new-a", "new-b"}; !slices.Equal(keys, want) {
		t.Fatalf("stored keys %q; want %q: the key past the window deleted, the others kept", keys, want)
	}
}
