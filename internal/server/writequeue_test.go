package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
)

// reportGateStore holds, once armed, the first commit that records a running rank until
// the test opens the gate, and then commits it, or fails it without writing anything.
type reportGateStore struct {
	store.Store
	armed   atomic.Bool
	fail    atomic.Bool
	entered chan struct{}
	gate    chan struct{}
	open    sync.Once
	mu      sync.Mutex
	commits int // commits made after the gate opened
}

var errDiskGone = errors.New("disk gone")

func (g *reportGateStore) Commit(ctx context.Context, b *store.Batch) error {
	reports := slices.ContainsFunc(b.Attempts, func(a api.Attempt) bool {
		return slices.ContainsFunc(a.Placements, func(p api.Placement) bool { return p.State == api.StateRunning })
	})
	if reports && g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.gate
		if g.fail.Load() {
			return errDiskGone
		}
	}
	g.mu.Lock()
	g.commits++
	g.mu.Unlock()
	return g.Store.Commit(ctx, b)
}

// newReportGateStore returns a store gate that a failing test still opens, before the
// server it holds up is closed.
func newReportGateStore(t *testing.T, h *harness) *reportGateStore {
	g := &reportGateStore{entered: make(chan struct{}), gate: make(chan struct{})}
	h.wrap = func(st store.Store) store.Store { g.Store = st; return g }
	h.open()
	t.Cleanup(g.openGate) // runs before the harness's own clean-up, made earlier
	return g
}

func (g *reportGateStore) openGate() { g.open.Do(func() { close(g.gate) }) }

// reportRunning sends node's heartbeat reporting jobs as running, and returns the status
// and the acknowledged answer; safe to call from any goroutine.
func (h *harness) reportRunning(node string, jobs ...int64) (int, api.HeartbeatResponse) {
	hb := api.Heartbeat{Node: node, Instance: "agent-" + node, Synced: true, ClusterID: h.srv.ClusterID(),
		Inventory: api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake",
			GPUs: []api.GPU{{Index: 0, UUID: "GPU-" + node + "-0", Model: "H100", MemoryMB: 81559, Healthy: true}}}}
	now := h.clock.Now()
	for _, id := range jobs {
		hb.Tasks = append(hb.Tasks, api.TaskStatus{JobID: id, Attempt: 1, State: api.StateRunning, PID: 100, StartTime: &now})
	}
	body, _ := json.Marshal(hb)
	resp, err := h.agent.Post("http://rota-up/api/v1/agents/"+node+"/heartbeat", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, api.HeartbeatResponse{}
	}
	defer resp.Body.Close()
	var out api.HeartbeatResponse
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// placedPair registers nodes n1 and n2 of one GPU and places one job on each.
func placedPair(t *testing.T, h *harness) (onN1, onN2 int64) {
	t.Helper()
	h.reportRunning("n1")
	h.reportRunning("n2")
	a := h.submit(api.JobSpec{GPUs: 1, Command: []string{"a"}})
	c := h.submit(api.JobSpec{GPUs: 1, Command: []string{"c"}})
	h.cycle()
	ja, jc := h.job(a.ID), h.job(c.ID)
	if ja.State != api.StateAssigned || jc.State != api.StateAssigned || ja.Nodes[0] == jc.Nodes[0] {
		t.Fatalf("jobs %s on %v and %s on %v; want both assigned, on two nodes", ja.State, ja.Nodes, jc.State, jc.Nodes)
	}
	if ja.Nodes[0] == "n2" {
		a, c = c, a
	}
	return a.ID, c.ID
}

// storedStates reads every job's state from the store itself.
func storedStates(t *testing.T, st store.Store) map[int64]api.JobState {
	t.Helper()
	jobs, err := st.LoadJobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]api.JobState{}
	for _, j := range jobs {
		out[j.ID] = j.State
	}
	return out
}

// answered runs f in a goroutine and returns a channel that gets its status.
func answered(f func() int) chan int {
	c := make(chan int, 1)
	go func() { c <- f() }()
	return c
}

func notYet(t *testing.T, c chan int, what string) {
	t.Helper()
	select {
	case code := <-c:
		t.Fatalf("%s was answered (%d) before its write was durable", what, code)
	case <-time.After(150 * time.Millisecond):
	}
}

// A heartbeat's report is written behind the lock: while its transaction is held up in
// the store, the server still answers other requests. Nothing that rests on the report
// is answered before it is durable: the report's own heartbeat, a later report queued
// behind it, and a cancel committed under the lock, which carries the queued report in
// its own transaction. In the end memory and the store agree.
func TestReportsAreWrittenBehindTheLockInOrder(t *testing.T) {
	h := &harness{t: t, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir()}
	gs := newReportGateStore(t, h)
	a, c := placedPair(t, h)

	gs.armed.Store(true)
	first := answered(func() int { code, _ := h.reportRunning("n1", a); return code })
	<-gs.entered
	// The store holds the write; the lock is free: a submit is answered.
	done := make(chan struct{})
	go func() {
		h.postSubmit(api.JobSpec{GPUs: 1, Command: []string{"later"}}, "")
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a submit waited for a heartbeat's write: the lock is held through it")
	}
	notYet(t, first, "the heartbeat")
	// A read of the job waits for the write, so that the page shows the job and its
	// events (read from the store) alike.
	read := answered(func() int { return h.do("GET", fmt.Sprintf("/api/v1/jobs/%d", a), nil, nil) })
	notYet(t, read, "a read of the job")
	second := answered(func() int { code, _ := h.reportRunning("n2", c); return code })
	notYet(t, second, "a heartbeat queued behind it")
	cancel := answered(func() int {
		return h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", c), nil, nil)
	})
	notYet(t, cancel, "a cancel made after it")

	gs.openGate()
	for what, ch := range map[string]chan int{"first heartbeat": first, "second heartbeat": second, "cancel": cancel, "read": read} {
		if code := <-ch; code != http.StatusOK {
			t.Errorf("%s: %d", what, code)
		}
	}
	ja, jc := h.job(a), h.job(c)
	if ja.State != api.StateRunning || jc.State != api.StateRunning || !jc.CancelRequested {
		t.Fatalf("job %d %s, job %d %s cancel requested %v; want both running, the second asked to stop", a, ja.State, c, jc.State, jc.CancelRequested)
	}
	started := 0
	for _, ev := range ja.Events {
		if ev.Kind == api.EventTransition && ev.To == api.StateRunning {
			started++
		}
	}
	if started != 1 {
		t.Errorf("job %d is RUNNING with %d transitions to RUNNING among its events; want 1", a, started)
	}
	stored := storedStates(t, gs.Store)
	if stored[a] != api.StateRunning || stored[c] != api.StateRunning {
		t.Fatalf("stored states %v; want both running", stored)
	}
	jobs, _ := gs.Store.LoadJobs(context.Background())
	for _, j := range jobs {
		if j.ID == c && !j.CancelRequested {
			t.Fatal("the cancel, committed after the queued report, did not land after it")
		}
	}
}

// A queued write the store fails takes every write queued after it down with it: they
// were made from memory that held it. None is acknowledged, memory is read again from the
// store, and the agents' next reports, sent again as agents do, are recorded once.
func TestAFailedReportFailsTheWritesQueuedAfterIt(t *testing.T) {
	h := &harness{t: t, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir()}
	gs := newReportGateStore(t, h)
	a, c := placedPair(t, h)

	gs.armed.Store(true)
	gs.fail.Store(true)
	first := answered(func() int { code, _ := h.reportRunning("n1", a); return code })
	<-gs.entered
	second := answered(func() int { code, _ := h.reportRunning("n2", c); return code })
	notYet(t, second, "a heartbeat queued behind a write under way")
	gs.openGate()
	for what, ch := range map[string]chan int{"failed heartbeat": first, "heartbeat queued after it": second} {
		if code := <-ch; code == http.StatusOK {
			t.Errorf("%s was acknowledged though its write never reached the store", what)
		}
	}
	// Memory was read again: it holds what the store holds, both still assigned.
	stored := storedStates(t, gs.Store)
	for _, id := range []int64{a, c} {
		if got := h.job(id).State; got != stored[id] || got != api.StateAssigned {
			t.Errorf("job %d: %s in memory, %s stored; want ASSIGNED in both", id, got, stored[id])
		}
	}
	// The agents report again, and the reports are recorded.
	for node, id := range map[string]int64{"n1": a, "n2": c} {
		if code, _ := h.reportRunning(node, id); code != http.StatusOK {
			t.Fatalf("%s's report again: %d", node, code)
		}
	}
	stored = storedStates(t, gs.Store)
	for _, id := range []int64{a, c} {
		if got := h.job(id).State; got != api.StateRunning || stored[id] != api.StateRunning {
			t.Errorf("job %d: %s in memory, %s stored; want RUNNING in both", id, got, stored[id])
		}
	}
}

// Many agents report at once, a cycle and cancels run meanwhile, under -race: every
// report is acknowledged, and the store ends holding what memory holds.
func TestConcurrentReportsLeaveMemoryAsTheStore(t *testing.T) {
	h := newHarness(t)
	const nodes = 12
	var ids []int64
	for i := range nodes {
		h.reportRunning(fmt.Sprintf("n%02d", i))
	}
	for range nodes {
		ids = append(ids, h.submit(api.JobSpec{GPUs: 1, Command: []string{"x"}}).ID)
	}
	h.cycle()
	where := map[string]int64{}
	for _, id := range ids {
		j := h.job(id)
		if len(j.Nodes) != 1 {
			t.Fatalf("job %d not placed: %s", id, j.State)
		}
		where[j.Nodes[0]] = id
	}
	var wg sync.WaitGroup
	var bad atomic.Int32
	for node, id := range where {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				if code, resp := h.reportRunning(node, id); code != http.StatusOK || len(resp.Tasks) != 1 {
					bad.Add(1)
				}
			}
		}()
	}
	for _, id := range ids[:3] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code := h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", id), nil, nil); code != http.StatusOK {
				bad.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Fatalf("%d reports or cancels failed", n)
	}
	h.srv.mu.Lock()
	if err := h.srv.settleWriting(); err != nil {
		t.Fatal(err)
	}
	memory := map[int64]api.Job{}
	for _, id := range ids {
		memory[id], _ = h.srv.state.Job(id)
	}
	h.srv.mu.Unlock()
	stored, err := h.srv.store.LoadJobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range stored {
		m := memory[j.ID]
		if m.State != j.State || m.CancelRequested != j.CancelRequested || m.State != api.StateRunning {
			t.Errorf("job %d: memory %s (cancel %v), store %s (cancel %v); want the same, running", j.ID, m.State, m.CancelRequested, j.State, j.CancelRequested)
		}
	}
}
