package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
	"github.com/rotahq/rota/internal/store/storetest"
)

// The execution layer's promises, through the agent protocol: one live agent per node, a
// returning node syncs before it takes work, gangs end together, retries follow the
// restart policy, and no commit's outcome is ever guessed.

// beatAs sends a heartbeat as a given agent instance, and returns the status and the
// answer or the error.
func (h *harness) beatAs(node string, hb api.Heartbeat) (int, api.HeartbeatResponse, api.Error) {
	h.t.Helper()
	if hb.Node == "" {
		hb.Node = node
	}
	if hb.ClusterID == "" {
		hb.ClusterID = h.srv.ClusterID()
	}
	if hb.Inventory.DeviceSource == "" {
		hb.Inventory = api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake", Hostname: node + ".example"}
		hb.Inventory.GPUs = []api.GPU{{Index: 0, UUID: "GPU-" + node + "-0", Model: "H100", MemoryMB: 81559, Healthy: true}}
	}
	var buf bytes.Buffer
	json.NewEncoder(&buf).Encode(hb)
	req, _ := http.NewRequest("POST", "http://rota-up/api/v1/agents/"+node+"/heartbeat", &buf)
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.agent.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	var ok api.HeartbeatResponse
	var e api.Error
	if resp.StatusCode == http.StatusOK {
		json.NewDecoder(resp.Body).Decode(&ok)
	} else {
		json.NewDecoder(resp.Body).Decode(&e)
	}
	return resp.StatusCode, ok, e
}

func (h *harness) node(name string) api.Node {
	h.t.Helper()
	var list api.NodeList
	h.do("GET", "/api/v1/nodes", nil, &list)
	for _, n := range list.Nodes {
		if n.Name == name {
			return n
		}
	}
	h.t.Fatalf("no node %s", name)
	return api.Node{}
}

// One node name, one live agent: a second process is refused with a message naming the
// first, a restart of the first on its data dir takes over at once, and a node whose agent
// went quiet can be taken over by another.
func TestOneLiveAgentPerNode(t *testing.T) {
	h := newHarness(t)
	if code, _, e := h.beatAs("n1", api.Heartbeat{Instance: "aaa", PID: 100, Synced: true}); code != 200 {
		t.Fatalf("first agent: %d %s", code, e.Message)
	}
	code, _, e := h.beatAs("n1", api.Heartbeat{Instance: "bbb", PID: 200})
	if code != http.StatusConflict || !strings.Contains(e.Message, "aaa") || !strings.Contains(e.Message, "pid 100") {
		t.Fatalf("second agent with the same name: %d %q; want 409 naming instance aaa and pid 100", code, e.Message)
	}
	if n := h.node("n1"); n.Agent.Instance != "aaa" || n.Syncing {
		t.Fatalf("the refused agent changed the node: %+v syncing %v", n.Agent, n.Syncing)
	}
	// A copied data dir on another host cannot take over by naming the live instance.
	impostor := api.Heartbeat{Instance: "ccc", PreviousInstance: "aaa"}
	impostor.Inventory = api.Inventory{DeviceSource: "fake", Hostname: "elsewhere"}
	if code, _, _ := h.beatAs("n1", impostor); code != http.StatusConflict {
		t.Fatalf("an agent on another host naming the live instance: %d; want 409", code)
	}
	// The same agent restarted on its data dir takes over at once, and the node syncs.
	if code, _, e := h.beatAs("n1", api.Heartbeat{Instance: "ddd", PreviousInstance: "aaa", PID: 300, Synced: true}); code != 200 {
		t.Fatalf("restarted agent: %d %s", code, e.Message)
	}
	if n := h.node("n1"); n.Agent.Instance != "ddd" || !n.Syncing {
		t.Fatalf("after a restart: agent %+v syncing %v; want ddd and syncing until it confirms", n.Agent, n.Syncing)
	}
	h.beatAs("n1", api.Heartbeat{Instance: "ddd", PID: 300, Synced: true})
	if n := h.node("n1"); n.Syncing {
		t.Fatal("still syncing after the agent confirmed")
	}
	// Quiet past NotReadyAfter, the node may be taken by another agent.
	h.clock.Add(11 * time.Second)
	if code, _, e := h.beatAs("n1", api.Heartbeat{Instance: "eee", PID: 400}); code != 200 {
		t.Fatalf("taking over a quiet node: %d %s", code, e.Message)
	}
	// The old one, back, is now the second agent.
	if code, _, _ := h.beatAs("n1", api.Heartbeat{Instance: "ddd", PID: 300}); code != http.StatusConflict {
		t.Fatalf("the superseded agent came back: %d; want 409", code)
	}
}

// A node declared lost whose agent returns takes no new work until its agent reports
// that it runs nothing the server does not list: the old attempt, requeued meanwhile, is
// no longer listed, so the agent stops it before any new attempt can land on its GPUs.
func TestReturningNodeSyncsBeforeNewWork(t *testing.T) {
	h := newHarness(t)
	h.beatAs("n1", api.Heartbeat{Instance: "aaa", Synced: true})
	j := h.submit(api.JobSpec{GPUs: 1, Command: []string{"train"}})
	h.cycle()
	h.beatAs("n1", api.Heartbeat{Instance: "aaa", Synced: true, Tasks: []api.TaskStatus{{JobID: j.ID, Attempt: 1, State: api.StateRunning}}})

	h.clock.Add(2 * time.Minute) // past LostAfter
	h.srv.checkNodes(context.Background())
	if got := h.job(j.ID); got.State != api.StatePending || got.Reason != api.ReasonNodeLost {
		t.Fatalf("after the node was lost: %s (%s)", got.State, got.Reason)
	}
	// The same agent process is back, still running attempt 1, and says it is synced: but
	// that speaks of the answer it had before it was lost.
	_, resp, _ := h.beatAs("n1", api.Heartbeat{Instance: "aaa", Synced: true, Tasks: []api.TaskStatus{{JobID: j.ID, Attempt: 1, State: api.StateRunning}}})
	if len(resp.Tasks) != 0 {
		t.Fatalf("desired tasks for the returning node: %+v; want none (attempt 1 is over)", resp.Tasks)
	}
	h.cycle()
	if got := h.job(j.ID); got.State != api.StatePending {
		t.Fatalf("attempt 2 placed on a node that may still run attempt 1: %s on %v", got.State, got.Nodes)
	}
	if n := h.node("n1"); !n.Syncing {
		t.Fatal("the returning node is not syncing")
	}
	// Its agent stopped attempt 1 and says so; now the node takes work.
	code := 143
	_, resp, _ = h.beatAs("n1", api.Heartbeat{Instance: "aaa", Synced: true,
		Tasks:   []api.TaskStatus{{JobID: j.ID, Attempt: 1, State: api.StateCancelled, ExitCode: &code}},
		Stopped: []api.StoppedTask{{JobID: j.ID, Attempt: 1, Reason: api.StoppedNotListed, Message: "stopped after grace"}}})
	if len(resp.Acked) != 1 || len(resp.StoppedAcked) != 1 {
		t.Fatalf("acked %v stopped %v; want both acknowledged", resp.Acked, resp.StoppedAcked)
	}
	h.cycle()
	got := h.job(j.ID)
	if got.State != api.StateAssigned || got.Attempts != 2 {
		t.Fatalf("after the node synced: %s attempt %d; want ASSIGNED attempt 2", got.State, got.Attempts)
	}
	found := false
	for _, ev := range got.Events {
		found = found || (ev.Kind == api.EventNode && strings.Contains(ev.Message, "stopped attempt 1"))
	}
	if !found {
		t.Error("the agent's report of what it stopped was not recorded")
	}
	// A heartbeat of an agent holding another cluster's attempts marks the node syncing.
	_, resp, _ = h.beatAs("n1", api.Heartbeat{Instance: "aaa", Synced: true, ClusterID: "0123456789abcdef"})
	if n := h.node("n1"); !n.Syncing || resp.ClusterID != h.srv.ClusterID() {
		t.Fatalf("an agent of another cluster: syncing %v, answered cluster %q", n.Syncing, resp.ClusterID)
	}
}

// A heartbeat composed before the node was lost (held up in flight, or sent by an agent
// process that was frozen and resumed) says Synced of the answers it had then. Arriving
// after the node started syncing again, it must not let new work in: only a heartbeat
// about the current sync epoch ends syncing.
func TestStaleSyncedHeartbeatKeepsNodeSyncing(t *testing.T) {
	h := newHarness(t)
	_, first, _ := h.beatAs("n1", api.Heartbeat{Instance: "aaa", Synced: true})
	if first.SyncEpoch == 0 {
		t.Fatal("a registering node got no sync epoch")
	}
	j := h.submit(api.JobSpec{GPUs: 1, Command: []string{"train"}})
	h.cycle()
	running := []api.TaskStatus{{JobID: j.ID, Attempt: 1, State: api.StateRunning}}
	_, before, _ := h.beatAs("n1", api.Heartbeat{Instance: "aaa", Synced: true, SyncEpoch: first.SyncEpoch, Tasks: running})

	h.clock.Add(2 * time.Minute) // past LostAfter
	h.srv.checkNodes(context.Background())
	// The agent is back and told the node is syncing, with a new epoch.
	_, back, _ := h.beatAs("n1", api.Heartbeat{Instance: "aaa", Synced: false, SyncEpoch: before.SyncEpoch, Tasks: running})
	if back.SyncEpoch <= before.SyncEpoch {
		t.Fatalf("sync epoch %d after the node returned; want above %d", back.SyncEpoch, before.SyncEpoch)
	}
	// A heartbeat composed before the loss arrives late: synced, of the old epoch.
	h.beatAs("n1", api.Heartbeat{Instance: "aaa", Synced: true, SyncEpoch: before.SyncEpoch, Tasks: running})
	h.cycle()
	if n := h.node("n1"); !n.Syncing {
		t.Fatal("a stale heartbeat ended syncing")
	}
	if got := h.job(j.ID); got.State != api.StatePending {
		t.Fatalf("attempt 2 placed while the node may still run attempt 1: %s on %v", got.State, got.Nodes)
	}
	// The agent stopped attempt 1 and says so about the current epoch: now it takes work.
	code := 143
	h.beatAs("n1", api.Heartbeat{Instance: "aaa", Synced: true, SyncEpoch: back.SyncEpoch,
		Tasks:   []api.TaskStatus{{JobID: j.ID, Attempt: 1, State: api.StateCancelled, ExitCode: &code}},
		Stopped: []api.StoppedTask{{JobID: j.ID, Attempt: 1, Reason: api.StoppedNotListed}}})
	h.cycle()
	if n := h.node("n1"); n.Syncing {
		t.Fatal("a heartbeat about the current epoch did not end syncing")
	}
	if got := h.job(j.ID); got.State != api.StateAssigned || got.Attempts != 2 {
		t.Fatalf("after the node synced: %s attempt %d; want ASSIGNED attempt 2", got.State, got.Attempts)
	}
}

// A multi-node attempt succeeds only when every rank has exited 0; one failed rank stops
// the others, and the job fails naming the rank, node and exit code.
func TestGangEndsTogether(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	h.beat("n2", 8)
	ok := h.submit(api.JobSpec{Nodes: 2, GPUsPerNode: 8, Command: []string{"torchrun", "train.py"}})
	h.cycle()
	d := h.job(ok.ID)
	n0, n1 := d.AttemptList[0].Placements[0].Node, d.AttemptList[0].Placements[1].Node
	zero, three := 0, 3
	h.beat(n0, 8, api.TaskStatus{JobID: ok.ID, Attempt: 1, State: api.StateRunning})
	h.beat(n1, 8, api.TaskStatus{JobID: ok.ID, Attempt: 1, State: api.StateRunning})
	resp := h.beat(n0, 8, api.TaskStatus{JobID: ok.ID, Attempt: 1, State: api.StateSucceeded, ExitCode: &zero})
	if got := h.job(ok.ID); got.State != api.StateRunning || len(resp.Acked) != 1 {
		t.Fatalf("after rank 0 exited 0: %s, acked %v; want RUNNING with rank 0's end acknowledged", got.State, resp.Acked)
	}
	if resp := h.beat(n1, 8); len(resp.Tasks) != 1 || resp.Tasks[0].Stop {
		t.Fatalf("rank 1 after rank 0 succeeded: %+v; want it left running", resp.Tasks)
	}
	h.beat(n1, 8, api.TaskStatus{JobID: ok.ID, Attempt: 1, State: api.StateSucceeded, ExitCode: &zero})
	if got := h.job(ok.ID); got.State != api.StateSucceeded || !strings.Contains(got.Message, "all 2 ranks") {
		t.Fatalf("after both ranks exited 0: %s %q", got.State, got.Message)
	}

	bad := h.submit(api.JobSpec{Nodes: 2, GPUsPerNode: 8, Command: []string{"torchrun", "train.py"}})
	h.cycle()
	d = h.job(bad.ID)
	n0, n1 = d.AttemptList[0].Placements[0].Node, d.AttemptList[0].Placements[1].Node
	h.beat(n0, 8, api.TaskStatus{JobID: bad.ID, Attempt: 1, State: api.StateRunning})
	h.beat(n1, 8, api.TaskStatus{JobID: bad.ID, Attempt: 1, State: api.StateFailed, Reason: api.ReasonExitCode, ExitCode: &three, Message: "exited with code 3"})
	got := h.job(bad.ID)
	if got.State != api.StateRunning || !strings.Contains(got.Stopping, "rank 1 on "+n1) {
		t.Fatalf("after rank 1 failed: %s stopping %q; want RUNNING while rank 0 stops", got.State, got.Stopping)
	}
	resp = h.beat(n0, 8)
	if len(resp.Tasks) != 1 || !resp.Tasks[0].Stop || resp.Tasks[0].StopReason != api.ReasonRankFailed {
		t.Fatalf("rank 0's desired task: %+v; want a stop for rank_failed", resp.Tasks)
	}
	code := 143
	h.beat(n0, 8, api.TaskStatus{JobID: bad.ID, Attempt: 1, State: api.StateFailed, Reason: api.ReasonRankFailed, ExitCode: &code})
	got = h.job(bad.ID)
	want := fmt.Sprintf("rank 1 on %s: exited with code 3; the other ranks were stopped", n1)
	if got.State != api.StateFailed || got.Message != want || got.ExitCode == nil || *got.ExitCode != 3 {
		t.Fatalf("the gang's end: %s %q exit %v; want FAILED %q exit 3", got.State, got.Message, got.ExitCode, want)
	}
	a := h.job(bad.ID).AttemptList[0]
	if a.Placements[1].ExitCode == nil || *a.Placements[1].ExitCode != 3 || a.Placements[0].Reason != api.ReasonRankFailed {
		t.Fatalf("per-rank record: %+v", a.Placements)
	}
}

// A rank whose node is lost ends the attempt with node_lost once the surviving ranks have
// stopped; until then their GPUs stay held.
func TestGangNodeLost(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	h.beat("n2", 8)
	j := h.submit(api.JobSpec{Nodes: 2, GPUsPerNode: 8, Command: []string{"torchrun"}})
	h.cycle()
	h.beat("n1", 8, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateRunning})
	h.clock.Add(2 * time.Minute)
	h.beat("n1", 8) // n1 is alive; n2 went silent
	h.srv.checkNodes(context.Background())
	got := h.job(j.ID)
	if got.State != api.StateRunning || !strings.Contains(got.Stopping, "n2") {
		t.Fatalf("after n2 was lost: %s stopping %q; want RUNNING until rank 0 stops", got.State, got.Stopping)
	}
	if resp := h.beat("n1", 8); len(resp.Tasks) != 1 || !resp.Tasks[0].Stop {
		t.Fatalf("rank 0 not told to stop: %+v", resp.Tasks)
	}
	code := 143
	h.beat("n1", 8, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateFailed, Reason: api.ReasonRankFailed, ExitCode: &code})
	if got := h.job(j.ID); got.State != api.StatePending || got.Reason != api.ReasonNodeLost || got.Failures != 0 {
		t.Fatalf("after rank 0 stopped: %s (%s) failures %d; want PENDING (node_lost), no retry spent", got.State, got.Reason, got.Failures)
	}
}

// --retries requeues after a non-zero exit, with growing backoff, up to the number asked;
// restart policy "always" restarts services after any end; node loss never counts.
func TestRetriesOnFailure(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 1)
	j := h.submit(api.JobSpec{GPUs: 1, Command: []string{"flaky"}, Retries: intp(2)})
	if j.Spec.RestartPolicy != api.RestartOnFailure {
		t.Fatalf("--retries 2 without a policy gave policy %q; want on-failure", j.Spec.RestartPolicy)
	}
	one := 1
	for attempt := 1; attempt <= 3; attempt++ {
		h.cycle()
		got := h.job(j.ID)
		if got.State != api.StateAssigned || got.Attempts != attempt {
			t.Fatalf("attempt %d: %s attempt %d", attempt, got.State, got.Attempts)
		}
		h.beat("n1", 1, api.TaskStatus{JobID: j.ID, Attempt: attempt, State: api.StateFailed, Reason: api.ReasonExitCode, ExitCode: &one})
		got = h.job(j.ID)
		if attempt == 3 {
			if got.State != api.StateFailed || !strings.Contains(got.Message, "no retries left (2 used)") {
				t.Fatalf("after the last retry: %s %q", got.State, got.Message)
			}
			break
		}
		wait := backoffFirst << (attempt - 1)
		if got.State != api.StatePending || got.Failures != attempt || got.NotBefore == nil || !got.NotBefore.Equal(h.clock.Now().Add(wait)) {
			t.Fatalf("after failure %d: %s failures %d not before %v; want PENDING, %d, now+%s", attempt, got.State, got.Failures, got.NotBefore, attempt, wait)
		}
		h.cycle()
		if got := h.job(j.ID); got.State != api.StatePending || got.Reason != reasonBackoff {
			t.Fatalf("during the backoff: %s (%s); want PENDING (Backoff)", got.State, got.Reason)
		}
		h.clock.Add(wait)
	}

	// "always": an inference service that exits 0 is started again; one that crashes
	// after running long enough does not use up its retries.
	// The inference queue runs on the nodes of the inference pool only.
	inf := api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake", Labels: map[string]string{"pool": "inference"},
		GPUs: []api.GPU{{Index: 0, UUID: "GPU-inf1-0", Model: "H100", MemoryMB: 81559, Healthy: true}}}
	h.heartbeat("inf1", inf, nil)
	svc := h.submit(api.JobSpec{GPUs: 1, Queue: "inference", Command: []string{"serve"}})
	if svc.Spec.RestartPolicy != api.RestartAlways || *svc.Spec.Retries != defaultRetries {
		t.Fatalf("inference default: policy %q retries %d", svc.Spec.RestartPolicy, *svc.Spec.Retries)
	}
	h.cycle()
	zero := 0
	h.heartbeat("inf1", inf, []api.TaskStatus{{JobID: svc.ID, Attempt: 1, State: api.StateSucceeded, ExitCode: &zero}})
	h.cycle()
	if got := h.job(svc.ID); got.State != api.StateAssigned || got.Attempts != 2 {
		t.Fatalf("service after exiting 0: %s attempt %d; want restarted as attempt 2", got.State, got.Attempts)
	}
	start := h.clock.Now()
	h.heartbeat("inf1", inf, []api.TaskStatus{{JobID: svc.ID, Attempt: 2, State: api.StateRunning, StartTime: &start}})
	h.clock.Add(failureReset + time.Minute)
	h.heartbeat("inf1", inf, []api.TaskStatus{{JobID: svc.ID, Attempt: 2, State: api.StateFailed, Reason: api.ReasonExitCode, ExitCode: &one}})
	if got := h.job(svc.ID); got.State != api.StatePending || got.Failures != 1 {
		t.Fatalf("service after a crash: %s failures %d; want PENDING with 1 (earlier ones forgotten)", got.State, got.Failures)
	}
	// Cancelled, it stays cancelled.
	h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", svc.ID), nil, nil)
	if got := h.job(svc.ID); got.State != api.StateCancelled {
		t.Fatalf("cancelled service: %s", got.State)
	}
	var e api.Error
	if code := h.do("POST", "/api/v1/jobs", api.JobSpec{Command: []string{"x"}, Retries: intp(1000)}, &e); code != 400 || e.Field != "retries" {
		t.Errorf("retries 1000: %d %s; want 400 naming retries", code, e.Field)
	}
	if code := h.do("POST", "/api/v1/jobs", api.JobSpec{Command: []string{"x"}, RestartPolicy: "sometimes"}, &e); code != 400 || e.Field != "restart_policy" {
		t.Errorf("restart policy sometimes: %d %s; want 400 naming restart_policy", code, e.Field)
	}
}

// An attempt that a live node's agent never starts is requeued after AssignTimeout,
// without spending a retry, and is not listed to that node any more.
func TestAssignTimeoutRequeues(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 1)
	j := h.submit(api.JobSpec{GPUs: 1, Command: []string{"x"}})
	h.cycle()
	h.clock.Add(90 * time.Second)
	h.beat("n1", 1) // alive, but never reports the task
	h.srv.checkNodes(context.Background())
	if got := h.job(j.ID); got.State != api.StateAssigned {
		t.Fatalf("before the timeout: %s", got.State)
	}
	h.clock.Add(31 * time.Second)
	h.beat("n1", 1)
	h.srv.checkNodes(context.Background())
	got := h.job(j.ID)
	if got.State != api.StatePending || got.Reason != api.ReasonNotStarted || got.Failures != 0 || !strings.Contains(got.Message, "did not start it within 2m0s") {
		t.Fatalf("after the timeout: %s (%s) %q failures %d", got.State, got.Reason, got.Message, got.Failures)
	}
	if resp := h.beat("n1", 1); len(resp.Tasks) != 0 {
		t.Fatalf("the timed-out attempt is still listed: %+v", resp.Tasks)
	}
}

// Array elements know their index; actions on the array reach every element.
func TestArrays(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 4)
	var first api.Job
	if code := h.do("POST", "/api/v1/jobs", api.JobSpec{GPUs: 1, Command: []string{"sweep"}, Array: "0-9:3"}, &first); code != 201 {
		t.Fatalf("submit array: %d", code)
	}
	h.cycle()
	resp := h.beat("n1", 4)
	seen := map[string]bool{}
	for _, task := range resp.Tasks {
		if task.Env[api.EnvArrayJobID] != fmt.Sprint(first.ID) {
			t.Errorf("task %d: ROTA_ARRAY_JOB_ID %q", task.JobID, task.Env[api.EnvArrayJobID])
		}
		seen[task.Env[api.EnvArrayIndex]] = true
	}
	if len(seen) != 4 || !seen["0"] || !seen["3"] || !seen["6"] || !seen["9"] {
		t.Fatalf("array indices in the environment: %v; want 0 3 6 9", seen)
	}
	var list api.JobList
	if code := h.do("POST", fmt.Sprintf("/api/v1/arrays/%d/cancel", first.ID), nil, &list); code != 200 || len(list.Jobs) != 4 {
		t.Fatalf("cancel the array: %d, %d elements", code, len(list.Jobs))
	}
	for _, j := range list.Jobs {
		if !j.CancelRequested {
			t.Errorf("element %d: cancel not requested", j.ID)
		}
	}
	if code := h.do("POST", "/api/v1/arrays/999/cancel", nil, nil); code != 404 {
		t.Errorf("cancel a missing array: %d", code)
	}
	held := h.submit(api.JobSpec{GPUs: 4, Command: []string{"x"}, Array: "1-3"})
	h.do("POST", fmt.Sprintf("/api/v1/arrays/%d/hold", held.ID), nil, &list)
	for _, j := range list.Jobs {
		if j.State != api.StateHeld {
			t.Errorf("element %d after holding the array: %s", j.ID, j.State)
		}
	}
	h.do("POST", fmt.Sprintf("/api/v1/arrays/%d/release", held.ID), nil, &list)
	for _, j := range list.Jobs {
		if j.State != api.StatePending {
			t.Errorf("element %d after releasing the array: %s", j.ID, j.State)
		}
	}
}

// With a checkpoint root, every attempt of a job gets the same ROTA_CHECKPOINT_DIR on every
// node; without one, the job says its checkpoints are node-local.
func TestCheckpointRoot(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 1)
	h.beat("n2", 1)
	local := h.submit(api.JobSpec{GPUs: 1, Command: []string{"x"}})
	if got := h.job(local.ID); !strings.HasPrefix(got.Checkpoints, "node-local") {
		t.Fatalf("checkpoints without a root: %q", got.Checkpoints)
	}
	if code, e := h.putConfig("execution:\n  checkpoint_root: /mnt/ckpt\nqueues:\n- name: scratch\n  tier: 10\n  checkpoint_root: /scratch\n"); code != 200 {
		t.Fatalf("set the checkpoint root: %d %s", code, e.Message)
	}
	if code, e := h.putConfig("execution:\n  checkpoint_root: relative/path\n"); code != 400 || e.Field != "execution.checkpoint_root" {
		t.Fatalf("a relative root: %d %s", code, e.Field)
	}
	h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", local.ID), nil, nil)
	j := h.submit(api.JobSpec{GPUs: 1, Command: []string{"x"}, Retries: intp(1)})
	s := h.submit(api.JobSpec{GPUs: 1, Queue: "scratch", Command: []string{"x"}})
	h.cycle()
	dirs := map[string]bool{}
	for _, n := range []string{"n1", "n2"} {
		for _, task := range h.beat(n, 1).Tasks {
			want := fmt.Sprintf("/mnt/ckpt/%s/%d", h.srv.ClusterID(), j.ID)
			if task.JobID == s.ID {
				want = fmt.Sprintf("/scratch/%s/%d", h.srv.ClusterID(), s.ID)
			}
			if task.CheckpointDir != want {
				t.Errorf("job %d: checkpoint dir %q; want %q", task.JobID, task.CheckpointDir, want)
			}
			if task.JobID == j.ID {
				dirs[task.CheckpointDir] = true
				one := 1
				h.beat(n, 1, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateFailed, Reason: api.ReasonExitCode, ExitCode: &one})
			}
		}
	}
	h.clock.Add(time.Minute)
	h.cycle()
	for _, n := range []string{"n1", "n2"} {
		for _, task := range h.beat(n, 1).Tasks {
			if task.JobID == j.ID {
				dirs[task.CheckpointDir] = true
			}
		}
	}
	if got := h.job(j.ID); got.Attempts != 2 || len(dirs) != 1 || !strings.HasPrefix(got.Checkpoints, "shared: /mnt/ckpt/") {
		t.Fatalf("attempts %d, checkpoint dirs %v, note %q; want 2 attempts sharing one dir", got.Attempts, dirs, got.Checkpoints)
	}
}

// A retried submit with the same Idempotency-Key gets the first job, even after a restart;
// the key with another request is refused.
func TestIdempotentSubmit(t *testing.T) {
	h := newHarness(t)
	submit := func(key string, spec api.JobSpec) (int, api.Job, http.Header) {
		var buf bytes.Buffer
		json.NewEncoder(&buf).Encode(spec)
		req, _ := http.NewRequest("POST", h.http.URL+"/api/v1/jobs", &buf)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+h.token)
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var j api.Job
		json.NewDecoder(resp.Body).Decode(&j)
		return resp.StatusCode, j, resp.Header
	}
	spec := api.JobSpec{Command: []string{"train"}, Array: "0-2"}
	code, first, _ := submit("k-1", spec)
	if code != 201 {
		t.Fatalf("first submit: %d", code)
	}
	code, again, hdr := submit("k-1", spec)
	if code != 200 || again.ID != first.ID || hdr.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %d job %d replayed %q; want 200 job %d replayed", code, again.ID, hdr.Get("Idempotent-Replayed"), first.ID)
	}
	if code, _, _ := submit("k-1", api.JobSpec{Command: []string{"other"}}); code != http.StatusConflict {
		t.Fatalf("same key, other request: %d; want 409", code)
	}
	if code, _, _ := submit("bad key!", spec); code != 400 {
		t.Fatalf("a malformed key: %d; want 400", code)
	}
	h.restart()
	if code, again, _ := submit("k-1", spec); code != 200 || again.ID != first.ID {
		t.Fatalf("retry after a restart: %d job %d", code, again.ID)
	}
	var list api.JobList
	h.do("GET", "/api/v1/jobs?state=all", nil, &list)
	if len(list.Jobs) != 3 {
		t.Fatalf("%d jobs stored; want the array's 3 once", len(list.Jobs))
	}
}

// faultyStore commits for real and then, when told to, says it failed: the outcome the
// server sees is wrong, which is what a connection lost during COMMIT looks like.
type faultyStore struct {
	store.Store
	lie atomic.Int32 // commits left to misreport
}

var errLostCommit = errors.New("connection lost during COMMIT")

func (f *faultyStore) Commit(ctx context.Context, b *store.Batch) error {
	if err := f.Store.Commit(ctx, b); err != nil {
		return err
	}
	if f.lie.Add(-1) >= 0 {
		return errLostCommit
	}
	return nil
}

// A commit that succeeded but reported an error leaves the server re-reading the store
// before anything else changes: memory never diverges from the store, a retried submit
// finds its job, and an ended job is never run again.
func TestUnknownCommitOutcome(t *testing.T) {
	fs := &faultyStore{}
	h := &harness{t: t, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir(),
		wrap: func(st store.Store) store.Store { fs.Store = st; return fs }}
	h.open()
	h.beat("n1", 1)

	// A submit whose commit "failed": the key tells the server the job was stored.
	fs.lie.Store(1)
	var buf bytes.Buffer
	json.NewEncoder(&buf).Encode(api.JobSpec{GPUs: 1, Command: []string{"train"}})
	req, _ := http.NewRequest("POST", h.http.URL+"/api/v1/jobs", &buf)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+h.token)
	req.Header.Set("Idempotency-Key", "once")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var j api.Job
	json.NewDecoder(resp.Body).Decode(&j)
	resp.Body.Close()
	if resp.StatusCode != 200 || j.ID != 1 {
		t.Fatalf("submit whose commit reported an error: %d job %d; want 200 with the stored job", resp.StatusCode, j.ID)
	}

	// The job runs and ends; the commit of its end "fails". The agent is not told it was
	// recorded, so it reports the end again: the server, having re-read the store, knows
	// the job is over and never puts it back to PENDING.
	h.cycle()
	h.beat("n1", 1, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateRunning})
	fs.lie.Store(1)
	zero := 0
	end := api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateSucceeded, ExitCode: &zero}
	code, _, _ := h.beatAs("n1", api.Heartbeat{Instance: "agent-n1", Synced: true, Tasks: []api.TaskStatus{end}})
	if code != http.StatusInternalServerError {
		t.Fatalf("heartbeat whose commit reported an error: %d; want 500", code)
	}
	resp2 := h.beat("n1", 1, end)
	if got := h.job(j.ID); got.State != api.StateSucceeded || got.Attempts != 1 || len(resp2.Acked) != 1 {
		t.Fatalf("after the repeated report: %s attempt %d acked %v; want SUCCEEDED once", got.State, got.Attempts, resp2.Acked)
	}
	h.cycle()
	if got := h.job(j.ID); got.State != api.StateSucceeded || got.Attempts != 1 {
		t.Fatalf("a finished job ran again: %s attempt %d", got.State, got.Attempts)
	}
	// Memory and store agree.
	stored, err := fs.Store.LoadJobs(context.Background())
	if err != nil || len(stored) != 1 || stored[0].State != api.StateSucceeded {
		t.Fatalf("stored jobs %+v, %v", stored, err)
	}
}

// blockingStore holds each commit until it is released, so a test can make the client go
// away in the middle of one.
type blockingStore struct {
	store.Store
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blockingStore) Commit(ctx context.Context, batch *store.Batch) error {
	if len(batch.Jobs) > 0 && batch.Jobs[0].State == api.StatePending {
		b.once.Do(func() {
			close(b.entered)
			<-b.release
		})
	}
	return b.Store.Commit(ctx, batch)
}

// On PostgreSQL, a client that hangs up while its submit is being committed cannot cancel
// the commit: the job is stored, memory agrees, and a retry with the key finds it.
func TestClientHangUpMidCommitOnPostgres(t *testing.T) {
	url := storetest.StartPostgres(t)
	bs := &blockingStore{entered: make(chan struct{}), release: make(chan struct{})}
	h := &harness{t: t, url: url, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir(),
		wrap: func(st store.Store) store.Store { bs.Store = st; return bs }}
	h.open()

	ctx, hangUp := context.WithCancel(context.Background())
	body, _ := json.Marshal(api.JobSpec{Command: []string{"train"}})
	req, _ := http.NewRequestWithContext(ctx, "POST", h.http.URL+"/api/v1/jobs", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+h.token)
	req.Header.Set("Idempotency-Key", "hang-up")
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	<-bs.entered
	hangUp()
	if err := <-done; err == nil {
		t.Fatal("the client's request was not cut off")
	}
	time.Sleep(100 * time.Millisecond) // the server notices the closed connection
	close(bs.release)

	// The commit went through; memory and store agree.
	waitUntil(t, func() bool {
		var list api.JobList
		h.do("GET", "/api/v1/jobs?state=all", nil, &list)
		return len(list.Jobs) == 1
	})
	stored, err := bs.Store.LoadJobs(context.Background())
	if err != nil || len(stored) != 1 {
		t.Fatalf("stored jobs %d, %v; want the one job", len(stored), err)
	}
	req2, _ := http.NewRequest("POST", h.http.URL+"/api/v1/jobs", bytes.NewReader(body))
	req2.Header.Set("Content-Type", "application/json")
	req2.Header.Set("Authorization", "Bearer "+h.token)
	req2.Header.Set("Idempotency-Key", "hang-up")
	resp, err := http.DefaultClient.Do(req2)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the retry: %d replayed %q; want 200 replayed", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
	}
}

func waitUntil(t *testing.T, ok func() bool) {
	t.Helper()
	for range 100 {
		if ok() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("timed out")
}
