package server

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// rankRef names one rank a node should run.
type rankRef struct {
	job     int64
	attempt int
	rank    int
	stop    bool
}

// scanDesired is what a node should run, found the slow way: every job, every placement
// of its current attempt. The heartbeat answers from the state's per-node index instead.
func (h *harness) scanDesired(node string) []rankRef {
	h.srv.mu.Lock()
	defer h.srv.mu.Unlock()
	out := []rankRef{}
	for _, j := range h.srv.state.Jobs(nil) {
		a, ok := h.srv.state.CurrentAttempt(j.ID)
		if !ok || !j.State.Active() {
			continue
		}
		for rank, p := range a.Placements {
			if p.Node == node && !p.State.Terminal() {
				stop := j.CancelRequested || j.PreemptRequested || j.Stopping != ""
				out = append(out, rankRef{j.ID, a.N, rank, stop})
			}
		}
	}
	return out
}

func refsOf(tasks []api.Task) []rankRef {
	out := []rankRef{}
	for _, t := range tasks {
		out = append(out, rankRef{t.JobID, t.Attempt, t.Rank, t.Stop})
	}
	return out
}

// checkDesired compares, for every node, what the server tells it to run with a scan of
// every job, and returns the answers by node.
func (h *harness) checkDesired(step string, nodes ...string) map[string][]rankRef {
	h.t.Helper()
	got := map[string][]rankRef{}
	for _, n := range nodes {
		h.srv.mu.Lock()
		tasks := h.srv.desiredTasks(n)
		answer := h.srv.desiredAnswer(n)
		h.srv.mu.Unlock()
		got[n] = refsOf(tasks)
		// The answer comes from the tasks kept encoded since the node's last heartbeat:
		// it must be what the state says now, encoded afresh.
		if kept, fresh := mustJSON(h.t, answer), mustJSON(h.t, tasks); !bytes.Equal(kept, fresh) {
			h.t.Fatalf("%s: %s is answered with kept tasks\n%s\nbut the state says\n%s", step, n, kept, fresh)
		}
		var indexed, scanned []int64
		h.srv.mu.Lock()
		indexed = h.srv.state.ActiveOnNode(n)
		for _, id := range h.srv.state.ActiveIDs() {
			if a, ok := h.srv.state.CurrentAttempt(id); ok && placedOn(a, n) {
				scanned = append(scanned, id)
			}
		}
		h.srv.mu.Unlock()
		if !slices.Equal(indexed, scanned) && len(indexed)+len(scanned) > 0 {
			h.t.Fatalf("%s: the index files %v under %s; a scan finds %v", step, indexed, n, scanned)
		}
		if want := h.scanDesired(n); !slices.Equal(got[n], want) {
			h.t.Fatalf("%s: %s is told to run %v; a scan of every job says %v", step, n, got[n], want)
		}
	}
	return got
}

func (h *harness) runningOn(node string, j api.JobDetail) api.TaskStatus {
	now := h.clock.Now()
	for _, p := range j.AttemptList[len(j.AttemptList)-1].Placements {
		if p.Node == node {
			return api.TaskStatus{JobID: j.ID, Attempt: j.Attempts, State: api.StateRunning, PID: 100, StartTime: &now}
		}
	}
	h.t.Fatalf("job %d has no rank on %s", j.ID, node)
	return api.TaskStatus{}
}

// TestNodeIndexFollowsTheJobs walks jobs through start, a gang rank ending, a failure and
// its retry, preemption, cancel, a lost node and its return, and a restart; after each
// step what every node is told to run must be what a scan of every job says.
func TestNodeIndexFollowsTheJobs(t *testing.T) {
	h := newHarness(t)
	nodes := []string{"n1", "n2", "n3"}
	for _, n := range nodes {
		h.beat(n, 2)
	}
	batch := h.submit(api.JobSpec{GPUs: 2, Queue: "batch", Command: []string{"sweep"}})
	gang := h.submit(api.JobSpec{GPUs: 2, Nodes: 2, GPUsPerNode: 1, Command: []string{"train"}})
	flaky := h.submit(api.JobSpec{GPUs: 1, Command: []string{"flaky"}, Retries: intp(1)})
	h.cycle()
	h.checkDesired("placed", nodes...)
	for _, id := range []int64{batch.ID, gang.ID, flaky.ID} {
		if got := h.job(id); got.State != api.StateAssigned {
			t.Fatalf("job %d: %s (%s); want ASSIGNED", id, got.State, got.Message)
		}
	}

	// Every rank reports RUNNING, through the heartbeat whose answer is the index's.
	reports := map[string][]api.TaskStatus{}
	for _, id := range []int64{batch.ID, gang.ID, flaky.ID} {
		j := h.job(id)
		for _, p := range j.AttemptList[len(j.AttemptList)-1].Placements {
			reports[p.Node] = append(reports[p.Node], h.runningOn(p.Node, j))
		}
	}
	for _, n := range nodes {
		resp := h.beat(n, 2, reports[n]...)
		if got, want := refsOf(resp.Tasks), h.scanDesired(n); !slices.Equal(got, want) {
			t.Fatalf("started: %s's heartbeat answer %v; a scan says %v", n, got, want)
		}
	}
	h.checkDesired("started", nodes...)

	// One rank of the gang ends well: its node forgets it, the other keeps its rank.
	g := h.job(gang.ID)
	first, second := g.Nodes[0], g.Nodes[1]
	zero := 0
	h.beat(first, 2, api.TaskStatus{JobID: gang.ID, Attempt: 1, State: api.StateSucceeded, ExitCode: &zero})
	got := h.checkDesired("gang rank ended", nodes...)
	if slices.ContainsFunc(got[first], func(r rankRef) bool { return r.job == gang.ID }) ||
		!slices.ContainsFunc(got[second], func(r rankRef) bool { return r.job == gang.ID }) {
		t.Fatalf("after rank 0 ended: %s runs %v, %s runs %v", first, got[first], second, got[second])
	}

	// The flaky job fails and is retried, as attempt 2.
	fl := h.job(flaky.ID)
	one := 1
	h.beat(fl.Nodes[0], 2, api.TaskStatus{JobID: flaky.ID, Attempt: 1, State: api.StateFailed, ExitCode: &one})
	h.checkDesired("failed", nodes...)
	for i := 0; h.job(flaky.ID).State == api.StatePending && i < 20; i++ {
		h.clock.Add(time.Minute) // past any backoff
		for _, n := range nodes {
			h.beat(n, 2)
		}
		h.cycle()
	}
	if fl = h.job(flaky.ID); fl.State != api.StateAssigned || fl.Attempts != 2 {
		t.Fatalf("the flaky job after its failure: %s attempt %d; want ASSIGNED attempt 2", fl.State, fl.Attempts)
	}
	h.checkDesired("retried", nodes...)

	// An urgent job preempts the batch job: its node is told to stop it, then runs the
	// urgent one.
	h.clock.Add(11 * time.Minute) // past the protection of a job that just started
	for _, n := range nodes {
		h.beat(n, 2)
	}
	urgent := h.submit(api.JobSpec{GPUs: 2, Queue: "urgent", Command: []string{"hotfix"}})
	h.cycle()
	b := h.job(batch.ID)
	if !b.PreemptRequested {
		t.Fatalf("the batch job was not chosen for preemption: %s", b.Message)
	}
	got = h.checkDesired("preempting", nodes...)
	if i := slices.IndexFunc(got[b.Nodes[0]], func(r rankRef) bool { return r.job == batch.ID }); i < 0 || !got[b.Nodes[0]][i].stop {
		t.Fatalf("%s is not told to stop the batch job: %v", b.Nodes[0], got[b.Nodes[0]])
	}
	code := 143
	h.beat(b.Nodes[0], 2, api.TaskStatus{JobID: batch.ID, Attempt: 1, State: api.StateFailed, ExitCode: &code, Reason: api.ReasonPreempted})
	h.cycle()
	if u := h.job(urgent.ID); u.State != api.StateAssigned {
		t.Fatalf("urgent job: %s (%s); want ASSIGNED", u.State, u.Message)
	}
	h.checkDesired("preempted", nodes...)

	// The urgent job is cancelled: a stop order, then nothing once the agent reports.
	if code := h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", urgent.ID), nil, nil); code != http.StatusOK {
		t.Fatalf("cancel: %d", code)
	}
	h.checkDesired("cancelling", nodes...)
	u := h.job(urgent.ID)
	h.beat(u.Nodes[0], 2, api.TaskStatus{JobID: urgent.ID, Attempt: 1, State: api.StateCancelled, ExitCode: &code, Reason: api.ReasonCancelled})
	got = h.checkDesired("cancelled", nodes...)
	if slices.ContainsFunc(got[u.Nodes[0]], func(r rankRef) bool { return r.job == urgent.ID }) {
		t.Fatalf("a cancelled job is still listed for %s: %v", u.Nodes[0], got[u.Nodes[0]])
	}

	// The node of the gang's running rank goes silent and is lost: its jobs are requeued
	// and it is told nothing; then it comes back, syncs and takes work again.
	lost := second
	h.clock.Add(2 * time.Minute)
	for _, n := range nodes {
		if n != lost {
			h.beat(n, 2)
		}
	}
	h.srv.checkNodes(context.Background())
	if n := h.node(lost); n.State != api.NodeLost {
		t.Fatalf("%s: %s; want LOST", lost, n.State)
	}
	got = h.checkDesired("node lost", nodes...)
	if len(got[lost]) != 0 {
		t.Fatalf("the lost node %s is still told to run %v", lost, got[lost])
	}
	h.beat(lost, 2) // back: syncing
	h.beat(lost, 2) // synced
	for range 3 {
		h.clock.Add(time.Minute)
		for _, n := range nodes {
			h.beat(n, 2)
		}
		h.cycle()
	}
	got = h.checkDesired("node back", nodes...)
	if len(got[lost]) == 0 {
		t.Fatalf("the node back from the dead takes no work; the jobs: %v", got)
	}

	// A restart rebuilds the index from the store: every node is told the same.
	h.restart()
	again := h.checkDesired("restarted", nodes...)
	for _, n := range nodes {
		if !slices.Equal(again[n], got[n]) {
			t.Fatalf("after a restart %s is told %v; before, %v", n, again[n], got[n])
		}
	}
}

// TestDeleteNodeFollowsTheIndex: a node that runs a job cannot be removed, and says which
// job; once the job ended it can, and the submit checks forget it; registering again, it
// is told to run nothing.
func TestDeleteNodeFollowsTheIndex(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 4)
	h.beat("n2", 2)
	j := h.startJob("n1", 4, api.JobSpec{GPUs: 4, Command: []string{"x"}})
	var e api.Error
	if code := h.do("DELETE", "/api/v1/nodes/n1", nil, &e); code != http.StatusConflict || e.Field != "name" || !strings.Contains(e.Message, fmt.Sprintf("[%d]", j.ID)) {
		t.Fatalf("removing a node that runs job %d: %d %s", j.ID, code, e.Message)
	}
	zero := 0
	h.beat("n1", 4, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateSucceeded, ExitCode: &zero})
	h.checkDesired("ended", "n1", "n2")
	if code := h.do("DELETE", "/api/v1/nodes/n1", nil, nil); code != http.StatusNoContent {
		t.Fatalf("removing an idle node: %d", code)
	}
	if code := h.do("POST", "/api/v1/jobs", api.JobSpec{GPUs: 4, Command: []string{"x"}}, &e); code != http.StatusBadRequest || !strings.Contains(e.Message, "the largest has 2") {
		t.Fatalf("a 4-GPU job after the 4-GPU node left: %d %s", code, e.Message)
	}
	if resp := h.beat("n1", 4); len(resp.Tasks) != 0 {
		t.Fatalf("a node registered again is told to run %+v", resp.Tasks)
	}
	h.submit(api.JobSpec{GPUs: 4, Command: []string{"x"}})
}
