package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
)

// planPause makes the server's next cycle stop while it plans, without the lock, until
// the test lets it go on. It returns a channel that is closed once planning has begun,
// and the function that lets it finish; the cycle's error arrives on done.
func (h *harness) planPause() (planning <-chan struct{}, resume func(), done <-chan error) {
	started, gate, errc := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	once := false
	h.srv.planning = func() {
		if !once {
			once = true
			close(started)
			<-gate
		}
	}
	go func() { errc <- h.srv.Cycle(context.Background()) }()
	h.t.Cleanup(func() { h.srv.planning = nil })
	return started, func() { close(gate) }, errc
}

// While a cycle plans, the server answers submits, reads and heartbeats: planning does
// not hold the lock.
func TestSubmitsAndReadsGoOnWhilePlanning(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	h.submit(api.JobSpec{GPUs: 1, Command: []string{"train"}})
	planning, resume, done := h.planPause()
	<-planning

	finished := make(chan string, 1)
	go func() {
		code, j, _ := h.postSubmit(api.JobSpec{GPUs: 1, Command: []string{"second"}}, "")
		var list api.JobList
		lcode := h.do("GET", "/api/v1/jobs?state=all", nil, &list)
		h.beat("n1", 8)
		finished <- fmt.Sprintf("%d %d %d %d", code, j.ID, lcode, len(list.Jobs))
	}()
	select {
	case got := <-finished:
		if got != "201 2 200 2" {
			t.Fatalf("submit, list during planning: %s; want 201 job 2, 200 with 2 jobs", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a submit waited for the cycle's planning")
	}
	resume()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The first job was planned and placed; the second, submitted meanwhile, waits for
	// the next cycle, which places it.
	if st := h.job(1).State; st != api.StateAssigned {
		t.Fatalf("job 1 is %s after the cycle; want ASSIGNED", st)
	}
	if st := h.job(2).State; st != api.StatePending {
		t.Fatalf("job 2 is %s; want PENDING until a cycle sees it", st)
	}
	h.cycle()
	if st := h.job(2).State; st != api.StateAssigned {
		t.Fatalf("job 2 is %s after the next cycle; want ASSIGNED", st)
	}
}

// A job cancelled while the cycle that places it plans is not placed: the placement is
// dropped, and the job stays cancelled with no attempt.
func TestPlacementOfAJobCancelledWhilePlanningIsDropped(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	j := h.submit(api.JobSpec{GPUs: 8, Command: []string{"train"}})
	planning, resume, done := h.planPause()
	<-planning
	if code := h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", j.ID), nil, nil); code != http.StatusOK {
		t.Fatalf("cancel: %d", code)
	}
	resume()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := h.job(j.ID)
	if got.State != api.StateCancelled || got.Attempts != 0 {
		t.Fatalf("job is %s with %d attempts; want CANCELLED with none", got.State, got.Attempts)
	}
	// The node's GPUs are free for the next job.
	k := h.submit(api.JobSpec{GPUs: 8, Command: []string{"next"}})
	h.cycle()
	if st := h.job(k.ID).State; st != api.StateAssigned {
		t.Fatalf("next job is %s; want ASSIGNED on the freed node", st)
	}
}

// A node drained while a cycle plans a job onto it does not get the job; the next cycle
// places it on the other node.
func TestPlacementOnANodeDrainedWhilePlanningIsDropped(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	h.beat("n2", 8)
	j := h.submit(api.JobSpec{GPUs: 8, Command: []string{"train"}})
	planning, resume, done := h.planPause()
	<-planning
	// The plan may have picked either node; n1 is drained, and whichever it picked, the
	// job must end up on n2.
	if code := h.do("POST", "/api/v1/nodes/n1/drain", nil, nil); code != http.StatusOK {
		t.Fatalf("drain: %d", code)
	}
	resume()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := h.job(j.ID)
	if got.State == api.StateAssigned && len(got.Nodes) == 1 && got.Nodes[0] == "n1" {
		t.Fatalf("job placed on n1, drained while the plan was made")
	}
	if got.State == api.StatePending {
		h.cycle()
		got = h.job(j.ID)
	}
	if got.State != api.StateAssigned || len(got.Nodes) != 1 || got.Nodes[0] != "n2" {
		t.Fatalf("job is %s on %v; want ASSIGNED on n2", got.State, got.Nodes)
	}
}

// A placement onto a node that changed while planning is dropped, and asks for another
// cycle at once.
func TestStalePlacementAsksForAnotherCycle(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	j := h.submit(api.JobSpec{GPUs: 8, Command: []string{"train"}})
	planning, resume, done := h.planPause()
	<-planning
	// A GPU falls ill: the node's record changes.
	inv := api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake"}
	for i := range 8 {
		inv.GPUs = append(inv.GPUs, api.GPU{Index: i, UUID: fmt.Sprintf("GPU-n1-%d", i), Model: "H100", MemoryMB: 81559, Healthy: i != 3})
	}
	h.heartbeat("n1", inv, nil)
	select {
	case <-h.srv.kick:
	default:
	}
	resume()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := h.job(j.ID).State; st != api.StatePending {
		t.Fatalf("job is %s; want PENDING: its node lost a GPU while the plan was made", st)
	}
	select {
	case <-h.srv.kick:
	default:
		t.Fatal("a dropped placement did not ask for another cycle")
	}
	h.cycle()
	if st := h.job(j.ID).State; st != api.StatePending {
		t.Fatalf("job is %s; want PENDING: 7 healthy GPUs cannot hold 8", st)
	}
}

// Queues or teams changed while planning void the whole plan.
func TestConfigChangeWhilePlanningVoidsThePlan(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	j := h.submit(api.JobSpec{GPUs: 4, Command: []string{"train"}})
	planning, resume, done := h.planPause()
	<-planning
	if code, e := h.putConfig("teams:\n  - name: default\n    quotas: {\"*\": {guaranteed: 0, limit: 2}}\n"); code != http.StatusOK {
		t.Fatalf("config: %d %s", code, e.Message)
	}
	resume()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := h.job(j.ID).State; st != api.StatePending {
		t.Fatalf("job is %s; want PENDING: its team's limit fell to 2 GPUs while the plan was made", st)
	}
	h.cycle()
	if st := h.job(j.ID).State; st != api.StatePending {
		t.Fatalf("job is %s after a fresh cycle; want PENDING over its team's limit", st)
	}
}

// The scheduling loop runs a cycle when the state changed, when a held-back job's timer
// is due, or when RecomputeInterval has passed; otherwise none.
func TestCyclesAreCoalesced(t *testing.T) {
	h := &harness{t: t, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir(),
		cfg: func(c *Config) { c.RecomputeInterval = time.Hour }}
	h.open()
	h.beat("n1", 8)
	h.cycle()
	if h.srv.cycleDue() {
		t.Fatal("a cycle is due right after one, with nothing changed")
	}
	h.beat("n1", 8) // a heartbeat that changes nothing
	if h.srv.cycleDue() {
		t.Fatal("a heartbeat that changed nothing made a cycle due")
	}
	j := h.submit(api.JobSpec{GPUs: 1, Command: []string{"train"}})
	if !h.srv.cycleDue() {
		t.Fatal("no cycle due after a submit")
	}
	h.cycle()
	if st := h.job(j.ID).State; st != api.StateAssigned {
		t.Fatalf("job %s", st)
	}
	// The cycle's own placement gives the next cycle nothing to decide.
	if h.srv.cycleDue() {
		t.Fatal("a cycle is due after one that only applied its own plan")
	}

	// A failed job retried after a backoff: the loop wakes when the backoff ends, with
	// nothing else changing.
	r := h.submit(api.JobSpec{GPUs: 1, Command: []string{"flaky"}, Retries: intp(1)})
	h.cycle()
	h.beat("n1", 8, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateRunning}, api.TaskStatus{JobID: r.ID, Attempt: 1, State: api.StateRunning})
	one := 1
	h.beat("n1", 8, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateRunning}, api.TaskStatus{JobID: r.ID, Attempt: 1, State: api.StateFailed, ExitCode: &one})
	h.cycle()
	d := h.job(r.ID)
	if d.State != api.StatePending || d.NotBefore == nil {
		t.Fatalf("retried job is %s, not before %v; want PENDING with a backoff", d.State, d.NotBefore)
	}
	if h.srv.cycleDue() {
		t.Fatal("a cycle is due during the backoff with nothing changed")
	}
	h.clock.Add(d.NotBefore.Sub(h.clock.Now()) - time.Second)
	if h.srv.cycleDue() {
		t.Fatal("a cycle is due a second before the backoff ends")
	}
	h.clock.Add(time.Second)
	if !h.srv.cycleDue() {
		t.Fatal("no cycle due once the backoff ended")
	}
	h.cycle()
	if st := h.job(r.ID).State; st != api.StateAssigned {
		t.Fatalf("retried job is %s after its backoff; want ASSIGNED", st)
	}
	h.cycle()
	if h.srv.cycleDue() {
		t.Fatal("a cycle is due with nothing changed")
	}
	// Time alone makes a cycle due after RecomputeInterval.
	h.clock.Add(time.Hour)
	if !h.srv.cycleDue() {
		t.Fatal("no cycle due after RecomputeInterval")
	}
}

// After a long cycle the loop rests as long as the cycle took before it starts another,
// whatever changed meanwhile; after a short one it does not rest at all.
func TestLongCyclesAreFollowedByRest(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	// The node keeps room, so that each cycle places a job and none leaves the next
	// submit to the recompute (stall.go).
	h.submit(api.JobSpec{GPUs: 4, Command: []string{"train"}})
	h.srv.loopCycle(context.Background())
	h.submit(api.JobSpec{GPUs: 1, Command: []string{"train"}})
	if !h.srv.cycleDue() {
		t.Fatal("no cycle due after a submit that followed a short cycle")
	}

	const took = 300 * time.Millisecond
	h.srv.planning = func() { time.Sleep(took) }
	start := time.Now()
	h.srv.loopCycle(context.Background())
	ended := time.Now()
	h.srv.planning = nil
	h.submit(api.JobSpec{GPUs: 1, Command: []string{"train"}})
	for !h.srv.cycleDue() {
		if time.Since(ended) > 10*time.Second {
			t.Fatal("no cycle due 10 s after a submit that fits")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The rest is as long as the cycle, counted from its end (less the moments between
	// the loop's clock readings and the test's).
	if rested, cycle := time.Since(ended), ended.Sub(start); rested < took*9/10 {
		t.Fatalf("a cycle was due %v after one of %v", rested, cycle)
	}
}

// On a cluster whose cycles are long, the recompute that only time asks for waits ten
// cycles' length when that is longer than RecomputeInterval.
func TestRecomputeStretchesWithLongCycles(t *testing.T) {
	h := &harness{t: t, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir(),
		cfg: func(c *Config) { c.RecomputeInterval = time.Second }}
	h.open()
	h.beat("n1", 8)
	h.submit(api.JobSpec{GPUs: 8, Command: []string{"train"}})
	h.submit(api.JobSpec{GPUs: 8, Command: []string{"train"}}) // waits: a cycle has work
	const took = 150 * time.Millisecond
	h.srv.planning = func() { time.Sleep(took) }
	h.srv.loopCycle(context.Background())
	h.srv.planning = nil
	h.srv.restUntil.Store(0) // the rest after a long cycle is TestLongCyclesAreFollowedByRest's
	h.clock.Add(time.Second)
	if h.srv.cycleDue() {
		t.Fatal("a recompute was due after RecomputeInterval though the last cycle took over a tenth of it")
	}
	h.clock.Add(time.Minute) // well past ten cycles' length, however slow the machine
	if !h.srv.cycleDue() {
		t.Fatal("no recompute due after ten cycles' length")
	}
}

// A cycle writes every waiting job's reason, also past the first chunk it writes in one
// hold of the lock.
func TestCycleGivesEveryWaitingJobItsReason(t *testing.T) {
	h := newHarness(t)
	n := 2*reasonChunk + 5
	b := &store.Batch{}
	now := time.Now()
	for i := range n {
		b.Jobs = append(b.Jobs, api.Job{ID: int64(i + 1), Spec: api.JobSpec{Command: []string{"x"}, User: "alice", Team: "default", Queue: "default", GPUs: 1, CPUs: 1},
			State: api.StatePending, SubmitTime: now})
	}
	h.srv.mu.Lock()
	err := h.srv.commit(context.Background(), b)
	h.srv.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.srv.mu.Lock()
	defer h.srv.mu.Unlock()
	for id := int64(1); id <= int64(n); id++ {
		j, _ := h.srv.state.Job(id)
		if j.State != api.StatePending || j.Reason == "" || j.Priority == nil {
			t.Fatalf("job %d of %d after a cycle: state %s, reason %q, priority %v", id, n, j.State, j.Reason, j.Priority)
		}
	}
}

// snapshotPause makes the cycles' snapshots let go of the lock after every job and run
// during the first pause, without the lock.
func (h *harness) snapshotPause(during func()) {
	chunk, hold := snapshotChunk, snapshotHold
	snapshotChunk, snapshotHold = 1, 0
	once := false
	h.srv.snapshotPaused = func() {
		if !once {
			once = true
			during()
		}
	}
	h.t.Cleanup(func() { snapshotChunk, snapshotHold, h.srv.snapshotPaused = chunk, hold, nil })
}

// A cycle's snapshot lets go of the lock between chunks of jobs. What changes in a pause
// is left to the next cycle: a job cancelled then is not placed, no job goes to a node
// drained then, and a job submitted then is planned by the next cycle, which the change
// asks for.
func TestChangesDuringTheSnapshotWalk(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	h.beat("n2", 8)
	running := h.submit(api.JobSpec{GPUs: 1, Command: []string{"running"}})
	h.cycle()
	h.beat("n1", 8, api.TaskStatus{JobID: running.ID, Attempt: 1, State: api.StateRunning, PID: 10})
	h.beat("n2", 8, api.TaskStatus{JobID: running.ID, Attempt: 1, State: api.StateRunning, PID: 10})
	a := h.submit(api.JobSpec{GPUs: 7, Command: []string{"a"}})
	b := h.submit(api.JobSpec{GPUs: 7, Command: []string{"b"}})
	var late api.Job
	h.snapshotPause(func() {
		if code := h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", a.ID), nil, nil); code != http.StatusOK {
			t.Errorf("cancel during the walk: %d", code)
		}
		if code := h.do("POST", "/api/v1/nodes/n1/drain", nil, nil); code != http.StatusOK {
			t.Errorf("drain during the walk: %d", code)
		}
		late = h.submit(api.JobSpec{GPUs: 1, Command: []string{"late"}})
	})
	h.cycle()
	if got := h.job(a.ID); got.State != api.StateCancelled || got.Attempts != 0 {
		t.Fatalf("job a, cancelled during the walk, is %s with %d attempts; want CANCELLED with none", got.State, got.Attempts)
	}
	for _, id := range []int64{b.ID, late.ID} {
		if got := h.job(id); slices.Contains(got.Nodes, "n1") {
			t.Fatalf("job %d went to n1, drained during the walk", id)
		}
	}
	h.srv.mu.Lock()
	again := h.srv.state.Seq() != h.srv.cycled
	h.srv.mu.Unlock()
	if !again {
		t.Fatalf("the changes made during the walk do not ask for another cycle")
	}
	h.cycle()
	h.cycle()
	if got := h.job(b.ID); got.State != api.StateAssigned || !slices.Equal(got.Nodes, []string{"n2"}) {
		t.Fatalf("job b is %s on %v; want ASSIGNED on n2", got.State, got.Nodes)
	}
	// Job late fits beside b on n2 unless the running job is there too.
	got := h.job(late.ID)
	if onN2 := slices.Contains(h.job(running.ID).Nodes, "n2"); onN2 && (got.State != api.StatePending || !strings.Contains(got.Message, "free")) {
		t.Fatalf("job late is %s (%q); want PENDING for want of a free GPU, n1 drained and n2 full", got.State, got.Message)
	} else if !onN2 && (got.State != api.StateAssigned || !slices.Equal(got.Nodes, []string{"n2"})) {
		t.Fatalf("job late is %s on %v; want ASSIGNED on n2 beside job b", got.State, got.Nodes)
	}
}

// A state read again from the store during the walk ends the cycle with no plan: the
// snapshot would mix two states. The next cycle plans from the new one.
func TestSnapshotWalkStopsWhenTheStateIsReadAgain(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	for range 3 {
		h.submit(api.JobSpec{GPUs: 1, Command: []string{"x"}})
	}
	h.snapshotPause(func() {
		h.srv.mu.Lock()
		defer h.srv.mu.Unlock()
		h.srv.suspect = true
		if err := h.srv.resync(context.Background()); err != nil {
			t.Errorf("resync: %v", err)
		}
	})
	h.cycle()
	for id := int64(1); id <= 3; id++ {
		if st := h.job(id).State; st != api.StatePending {
			t.Fatalf("job %d is %s after a cycle whose walk saw the state read again; want PENDING", id, st)
		}
	}
	h.cycle()
	for id := int64(1); id <= 3; id++ {
		if st := h.job(id).State; st != api.StateAssigned {
			t.Fatalf("job %d is %s after the next cycle; want ASSIGNED", id, st)
		}
	}
}
