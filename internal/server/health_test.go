package server

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// withProcesses adds a reading that lists GPU processes.
func withProcesses(now time.Time, procs ...api.GPUProcess) func(*api.Heartbeat) {
	return func(hb *api.Heartbeat) {
		hb.Telemetry = &api.Telemetry{Time: now, Processes: procs}
	}
}

// A process of no live attempt holds its GPU back from new work until it is gone, with one
// event when it appears and one when the last is gone.
func TestLeftoverHoldsItsGPU(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 2)
	j := h.startJob("n1", 2, api.JobSpec{GPUs: 1, Command: []string{"x"}})
	ownGPU := h.job(j.ID).AttemptList[0].Placements[0].GPUIndices[0]
	free := 1 - ownGPU
	own := api.GPUProcess{GPU: ownGPU, PID: 10, MemoryMB: 900, JobID: j.ID, Attempt: 1}
	stray := api.GPUProcess{GPU: free, PID: 4242, MemoryMB: 300, Command: "python leak.py"}
	for range 3 {
		h.clock.Add(5 * time.Second)
		h.beatFull("n1", 2, withProcesses(h.clock.Now(), own, stray))
	}
	n := h.node("n1")
	if !slices.Equal(n.HeldGPUs, []int{free}) || len(n.Leftovers) != 1 || n.Leftovers[0].PID != 4242 {
		t.Fatalf("held %v, leftovers %+v; want GPU %d held by pid 4242 (the job's own process is no leftover)", n.HeldGPUs, n.Leftovers, free)
	}
	if held := h.srv.state.Nodes()[0].HeldGPUs; !slices.Equal(held, []int{free}) {
		t.Errorf("the scheduler's state holds %v; want [%d]", held, free)
	}
	evs := h.events(api.EventHealth)
	if len(evs) != 1 || !strings.Contains(evs[0].Message, "pid 4242 (python leak.py) holds 300 MB on GPU") {
		t.Fatalf("health events %+v; want one naming the leftover", evs)
	}
	// The job ends; its process stays behind and now holds its GPU too.
	code := 0
	h.beat("n1", 2, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateSucceeded, ExitCode: &code})
	h.clock.Add(5 * time.Second)
	h.beatFull("n1", 2, withProcesses(h.clock.Now(), own, stray))
	if n := h.node("n1"); len(n.HeldGPUs) != 2 {
		t.Errorf("held %v; want both GPUs once the ended job's process stays behind", n.HeldGPUs)
	}
	if evs := h.events(api.EventHealth); len(evs) != 2 || !strings.Contains(evs[1].Message, fmt.Sprintf("of job %d attempt 1, which has ended", j.ID)) {
		t.Errorf("health events %+v; want a second naming the ended job's process", evs)
	}
	h.clock.Add(5 * time.Second)
	h.beatFull("n1", 2, withProcesses(h.clock.Now()))
	if n := h.node("n1"); len(n.HeldGPUs) != 0 || len(n.Leftovers) != 0 {
		t.Errorf("after the leftovers went: held %v, leftovers %v", n.HeldGPUs, n.Leftovers)
	}
	h.clock.Add(5 * time.Second)
	h.beatFull("n1", 2, withProcesses(h.clock.Now()))
	if evs := h.events(api.EventHealth); len(evs) != 3 || !strings.Contains(evs[2].Message, "no leftover GPU processes any more") {
		t.Errorf("health events %+v; want one saying the leftovers are gone", evs)
	}
}

// withGPUFault marks a GPU of the heartbeat's inventory unhealthy or missing.
func withGPUFault(index int, missing bool, why string) func(*api.Heartbeat) {
	return func(hb *api.Heartbeat) {
		g := &hb.Inventory.GPUs[index]
		g.Healthy, g.Missing, g.Health = false, missing, why
	}
}

// An unhealthy GPU takes no new work and degrades its node, with one event for each change.
func TestUnhealthyGPU(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 2)
	for range 2 {
		h.beatFull("n1", 2, withGPUFault(1, false, "XID 79: GPU has fallen off the bus"))
	}
	n := h.node("n1")
	if len(n.Degraded) != 1 || !strings.Contains(n.Degraded[0], "GPU 1 (GPU-n1-1) is unhealthy: XID 79") {
		t.Fatalf("degraded %q; want the unhealthy GPU named", n.Degraded)
	}
	evs := h.events(api.EventHealth)
	if len(evs) != 2 || !strings.Contains(evs[0].Message, "is unhealthy: XID 79") || !strings.Contains(evs[1].Message, "node n1 is degraded") {
		t.Fatalf("health events %+v; want the GPU turning unhealthy and the node degraded, once each", evs)
	}
	two := h.submit(api.JobSpec{GPUs: 2, Command: []string{"x"}})
	one := h.submit(api.JobSpec{GPUs: 1, Command: []string{"y"}})
	h.cycle()
	if got := h.job(two.ID); got.State != api.StatePending {
		t.Errorf("a 2-GPU job on a node with one healthy GPU: %s; want PENDING", got.State)
	}
	if got := h.job(one.ID); got.State != api.StateAssigned || !slices.Equal(got.AttemptList[0].Placements[0].GPUIndices, []int{0}) {
		t.Errorf("a 1-GPU job: %s on %+v; want GPU 0", got.State, got.AttemptList)
	}
	h.beat("n1", 2)
	if n := h.node("n1"); len(n.Degraded) != 0 {
		t.Errorf("degraded after recovery: %q", n.Degraded)
	}
	if evs := h.events(api.EventHealth); len(evs) != 3 || !strings.Contains(evs[2].Message, "recovered") {
		t.Errorf("health events %+v; want a recovery", evs)
	}
}

// A failing health check degrades the node, quoting its exit code and last line; with
// drain_on_health_failure the node drains, and both survive a restart.
func TestHealthCheckDrains(t *testing.T) {
	h := newHarness(t)
	if code, e := h.putConfig("execution:\n  drain_on_health_failure: true\n"); code != 200 {
		t.Fatalf("config: %d %s", code, e.Message)
	}
	h.beat("n1", 2)
	j := h.startJob("n1", 2, api.JobSpec{GPUs: 1, Command: []string{"x"}})
	failing := func(out string) func(*api.Heartbeat) {
		return func(hb *api.Heartbeat) {
			hb.HealthCheck = &api.HealthCheck{Time: h.clock.Now(), ExitCode: 3, Output: out}
		}
	}
	h.beatFull("n1", 2, failing("checking nvlink\nnvlink 2 down\x1b[0m\n"))
	n := h.node("n1")
	if len(n.Degraded) != 1 || n.Degraded[0] != "the health check failed with exit code 3: nvlink 2 down[0m" {
		t.Fatalf("degraded %q", n.Degraded)
	}
	if n.State != api.NodeDraining || n.HealthCheck == nil || n.HealthCheck.ExitCode != 3 {
		t.Fatalf("node %s with check %+v; want DRAINING", n.State, n.HealthCheck)
	}
	drains := h.events(api.EventDrain)
	if len(drains) != 1 || drains[0].Actor != "system" || !strings.Contains(drains[0].Message, "exit code 3") {
		t.Fatalf("drain events %+v; want one by the system naming the failure", drains)
	}
	// Another run of the check with other output is no news.
	h.clock.Add(time.Minute)
	h.beatFull("n1", 2, failing("nvlink 3 down too"))
	if evs := h.events(api.EventHealth); len(evs) != 1 {
		t.Errorf("health events %+v; want only the first failure", evs)
	}
	if n := h.node("n1"); !strings.HasSuffix(n.Degraded[0], "nvlink 3 down too") {
		t.Errorf("degraded %q; want the latest output quoted", n.Degraded)
	}
	h.cycle()
	if n := h.node("n1"); n.State != api.NodeDraining {
		t.Errorf("node %s while its job runs; want DRAINING", n.State)
	}
	h.restart()
	if n := h.node("n1"); n.HealthCheck == nil || n.HealthCheck.OK || len(n.Degraded) != 1 {
		t.Errorf("after a restart: check %+v, degraded %q; want both kept", n.HealthCheck, n.Degraded)
	}
	code := 0
	h.beatFull("n1", 2, failing("x"), api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateSucceeded, ExitCode: &code})
	h.cycle()
	if n := h.node("n1"); n.State != api.NodeDrained {
		t.Errorf("node %s once empty; want DRAINED", n.State)
	}
	// The check passes again: the node recovers, and stays drained until an operator
	// resumes it.
	h.beatFull("n1", 2, func(hb *api.Heartbeat) { hb.HealthCheck = &api.HealthCheck{Time: h.clock.Now(), OK: true} })
	if n := h.node("n1"); len(n.Degraded) != 0 || n.State != api.NodeDrained {
		t.Errorf("after the check passed: %s, degraded %q", n.State, n.Degraded)
	}
}

// Without the drain policy a degraded node keeps its state; a missing GPU degrades it.
func TestMissingGPUDegradesWithoutDraining(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 2)
	h.beatFull("n1", 2, withGPUFault(0, true, "not found on the PCI bus"))
	n := h.node("n1")
	if n.State != api.NodeReady || len(n.Degraded) != 1 || !strings.Contains(n.Degraded[0], "GPU 0 (GPU-n1-0) is missing") {
		t.Errorf("node %s, degraded %q; want READY and the missing GPU named", n.State, n.Degraded)
	}
}

// Bad health fields in the inventory are refused, naming the field.
func TestHeartbeatRefusesBadGPUFields(t *testing.T) {
	h := newHarness(t)
	for _, c := range []struct {
		field  string
		mutate func(*api.Heartbeat)
	}{
		{"inventory.gpus[0].health", func(hb *api.Heartbeat) { hb.Inventory.GPUs[0].Health = "bad\x00" }},
		{"inventory.gpus[0].nvlink_peers", func(hb *api.Heartbeat) { hb.Inventory.GPUs[0].NVLinkPeers = []int{-1} }},
		{"inventory.gpus[0].numa_node", func(hb *api.Heartbeat) { v := 99999; hb.Inventory.GPUs[0].NUMANode = &v }},
		{"inventory.gpus[0].mig_profile", func(hb *api.Heartbeat) { hb.Inventory.GPUs[0].MIGProfile = "3g.40gb\x1b[2J" }},
		{"inventory.gpus[0].mig_parent", func(hb *api.Heartbeat) { v := -1; hb.Inventory.GPUs[0].MIGParent = &v }},
		{"inventory.gpus[0].mig_parent", func(hb *api.Heartbeat) { v := 0; hb.Inventory.GPUs[0].MIGParent = &v }},
		{"tasks[0].image_digest", func(hb *api.Heartbeat) {
			hb.Tasks = []api.TaskStatus{{JobID: 1, Attempt: 1, State: api.StateRunning, ImageDigest: "latest"}}
		}},
		{"tasks[0].peak_memory_mb", func(hb *api.Heartbeat) {
			hb.Tasks = []api.TaskStatus{{JobID: 1, Attempt: 1, State: api.StateRunning, PeakMemoryMB: -1}}
		}},
		{"tasks[0].log_size", func(hb *api.Heartbeat) {
			hb.Tasks = []api.TaskStatus{{JobID: 1, Attempt: 1, State: api.StateSucceeded, LogSize: -1}}
		}},
		{"tasks[0].log_size", func(hb *api.Heartbeat) {
			hb.Tasks = []api.TaskStatus{{JobID: 1, Attempt: 1, State: api.StateSucceeded, LogSize: 1<<50 + 1}}
		}},
	} {
		inv := api.Inventory{CPUs: 8, MemoryMB: 1024, DeviceSource: "fake", GPUs: []api.GPU{{Index: 0, UUID: "GPU-0", Model: "H100", Healthy: true}}}
		hb := api.Heartbeat{Node: "n1", Inventory: inv, Instance: "agent-n1", ClusterID: h.srv.ClusterID()}
		c.mutate(&hb)
		var e api.Error
		if code := h.do("POST", "/api/v1/agents/n1/heartbeat", hb, &e); code != 400 || e.Field != c.field {
			t.Errorf("%s: %d %+v; want 400 naming it", c.field, code, e)
		}
	}
}

// A rank that fails with gpu_error requeues its job without spending a retry while it has
// retries; without, the job fails with the reason. A gang stops its other ranks first.
func TestGPUErrorRequeues(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	gpuErr := api.TaskStatus{Attempt: 1, State: api.StateFailed, Reason: api.ReasonGPUError, Message: "GPU 3 raised XID 79"}

	retried := h.startJob("n1", 8, api.JobSpec{GPUs: 1, Command: []string{"x"}, Retries: intp(1)})
	st := gpuErr
	st.JobID = retried.ID
	h.beat("n1", 8, st)
	got := h.job(retried.ID)
	if got.State != api.StatePending || got.Reason != api.ReasonGPUError || got.Failures != 0 || got.NotBefore != nil ||
		!strings.Contains(got.Message, "requeued as attempt 2") {
		t.Fatalf("after a GPU error with retries: %s %s %q, %d failures; want PENDING, no retry spent, no backoff", got.State, got.Reason, got.Message, got.Failures)
	}

	never := h.startJob("n1", 8, api.JobSpec{GPUs: 1, Command: []string{"y"}, RestartPolicy: api.RestartNever})
	st.JobID = never.ID
	h.beat("n1", 8, st)
	if got := h.job(never.ID); got.State != api.StateFailed || got.Reason != api.ReasonGPUError || !strings.Contains(got.Message, "XID 79") {
		t.Fatalf("after a GPU error without retries: %s %s %q; want FAILED gpu_error with the agent's message", got.State, got.Reason, got.Message)
	}

	h = newHarness(t)
	h.beat("n1", 8)
	h.beat("n2", 8)
	gang := h.submit(api.JobSpec{Nodes: 2, GPUsPerNode: 8, Command: []string{"torchrun"}, Retries: intp(2)})
	h.cycle()
	d := h.job(gang.ID)
	n0, n1 := d.AttemptList[0].Placements[0].Node, d.AttemptList[0].Placements[1].Node
	h.beat(n0, 8, api.TaskStatus{JobID: gang.ID, Attempt: 1, State: api.StateRunning})
	st.JobID = gang.ID
	h.beat(n1, 8, st)
	if resp := h.beat(n0, 8); len(resp.Tasks) != 1 || !resp.Tasks[0].Stop || resp.Tasks[0].StopReason != api.ReasonRankFailed {
		t.Fatalf("the other rank after a GPU error: %+v; want it stopped", resp.Tasks)
	}
	code := 143
	h.beat(n0, 8, api.TaskStatus{JobID: gang.ID, Attempt: 1, State: api.StateFailed, Reason: api.ReasonRankFailed, ExitCode: &code})
	if got := h.job(gang.ID); got.State != api.StatePending || got.Reason != api.ReasonGPUError || got.Failures != 0 {
		t.Errorf("gang after a GPU error: %s %s, %d failures; want requeued", got.State, got.Reason, got.Failures)
	}
}

// An OOM kill fails the job with reason oom, is charged to its retries, and keeps the
// limit and peak in its message.
func TestOOMIsKept(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	j := h.startJob("n1", 8, api.JobSpec{GPUs: 1, MemoryMB: 1024, Command: []string{"x"}, Retries: intp(1)})
	code := 137
	// Whatever state the agent gives it, an OOM kill is a failure.
	h.beat("n1", 8, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateCancelled, Reason: api.ReasonOOM, ExitCode: &code, PeakMemoryMB: 1100})
	got := h.job(j.ID)
	if got.State != api.StatePending || got.Reason != api.ReasonOOM || got.Failures != 1 || !strings.Contains(got.Message, "limit 1024 MB, peak 1100 MB") {
		t.Fatalf("after an OOM with a retry: %s %s %q, %d failures; want PENDING, a retry spent, limit and peak named", got.State, got.Reason, got.Message, got.Failures)
	}
	if p := got.AttemptList[0].Placements[0]; p.State != api.StateFailed || p.Usage == nil || p.Usage.PeakMemoryMB != 1100 {
		t.Errorf("placement %+v; want FAILED with the peak", p)
	}
	h.clock.Add(time.Hour)
	h.cycle()
	now := h.clock.Now()
	h.beat("n1", 8, api.TaskStatus{JobID: j.ID, Attempt: 2, State: api.StateRunning, StartTime: &now})
	h.beat("n1", 8, api.TaskStatus{JobID: j.ID, Attempt: 2, State: api.StateFailed, Reason: api.ReasonOOM, ExitCode: &code,
		Message: "the kernel killed it at 1024 MB (limit 1024 MB, peak 1024 MB)"})
	if got := h.job(j.ID); got.State != api.StateFailed || got.Reason != api.ReasonOOM || !strings.Contains(got.Message, "the kernel killed it at 1024 MB") {
		t.Errorf("after the second OOM: %s %s %q; want FAILED oom with the agent's message", got.State, got.Reason, got.Message)
	}
}

// The digest of the image a rank runs is recorded from the first report that carries it.
func TestImageDigestRecorded(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 1)
	j := h.startJob("n1", 1, api.JobSpec{GPUs: 1, Command: []string{"x"}})
	digest := "sha256:" + strings.Repeat("0f", 32)
	h.beat("n1", 1, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateRunning, ImageDigest: digest})
	h.restart()
	if p := h.job(j.ID).AttemptList[0].Placements[0]; p.ImageDigest != digest {
		t.Errorf("digest %q after a restart; want %q", p.ImageDigest, digest)
	}
}
