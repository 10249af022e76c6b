package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// poolNode registers a node of a pool with gpus H100s of 80 GB (81,559 MB).
func (h *harness) poolNode(node, pool string, gpus int) api.Inventory {
	h.t.Helper()
	inv := api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake", Labels: map[string]string{"pool": pool}}
	for i := range gpus {
		inv.GPUs = append(inv.GPUs, api.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", node, i), Model: "H100", MemoryMB: 81559, Healthy: true})
	}
	h.heartbeat(node, inv, nil)
	return inv
}

func (h *harness) setPools(pools ...api.Pool) {
	h.t.Helper()
	var e api.Error
	if code := h.do("PUT", "/api/v1/config", api.Config{Pools: pools}, &e); code != http.StatusOK {
		h.t.Fatalf("put pools: %d %s", code, e.Message)
	}
}

func (h *harness) submitErr(spec api.JobSpec) (int, api.Error) {
	h.t.Helper()
	var e api.Error
	code := h.do("POST", "/api/v1/jobs", spec, &e)
	return code, e
}

func TestSharedGPUsEndToEnd(t *testing.T) {
	h := newHarness(t)
	// Without a pool that allows sharing, a share is refused, and nothing is stored.
	h.poolNode("s1", "shared", 2)
	if code, e := h.submitErr(api.JobSpec{GPUShare: 0.5, Command: []string{"x"}}); code != 400 || e.Field != "gpu_share" || !strings.Contains(e.Message, "no pool allows GPU sharing") {
		t.Fatalf("share without a sharing pool: %d %+v", code, e)
	}
	if n := len(h.listJobs()); n != 0 {
		t.Fatalf("%d jobs stored after refusals", n)
	}
	h.setPools(api.Pool{Name: "shared", Sharing: true}, api.Pool{Name: "inference", Exclusive: true})
	h.beat("n1", 2) // a node outside the sharing pool

	a := h.submit(api.JobSpec{GPUShare: 0.5, Command: []string{"a"}})
	b := h.submit(api.JobSpec{GPUShare: 0.5, Command: []string{"b"}})
	c := h.submit(api.JobSpec{GPUMemoryMB: 20 << 10, Command: []string{"c"}})
	if a.Spec.GPUs != 1 {
		t.Fatalf("a share is one GPU: spec gpus %d", a.Spec.GPUs)
	}
	h.cycle()
	pa, pb, pc := h.job(a.ID).AttemptList[0].Placements[0], h.job(b.ID).AttemptList[0].Placements[0], h.job(c.ID).AttemptList[0].Placements[0]
	if pa.Node != "s1" || pb.Node != "s1" || pa.GPUIndices[0] != pb.GPUIndices[0] {
		t.Fatalf("two halves: %+v and %+v; want one GPU of s1", pa, pb)
	}
	if pa.GPUShare != 0.5 || pa.GPUMemoryMB != 81559/2 {
		t.Fatalf("placement %+v: want share 0.5 and half the memory", pa)
	}
	if pc.Node != "s1" || pc.GPUIndices[0] == pa.GPUIndices[0] || pc.GPUMemoryMB != 20<<10 || pc.GPUShare != 0.252 {
		t.Fatalf("20 GB slice: %+v; want the other GPU of s1, share 0.252 (20480 of 81559 MB, rounded up)", pc)
	}
	// A restart keeps the tenants, their shares and the pool settings: a half does not
	// join a and b's full GPU but c's, which has 0.748 left.
	h.restart()
	if got := h.job(a.ID).AttemptList[0].Placements[0]; got.GPUShare != 0.5 || got.GPUMemoryMB != 81559/2 {
		t.Fatalf("after a restart: %+v", got)
	}
	d := h.submit(api.JobSpec{GPUShare: 0.5, Command: []string{"d"}})
	h.cycle()
	if pd := h.job(d.ID).AttemptList[0].Placements[0]; pd.Node != "s1" || pd.GPUIndices[0] != pc.GPUIndices[0] {
		t.Fatalf("after a restart a half went to %+v; want c's GPU", pd)
	}
	// A whole-GPU job does not land on s1's GPUs, which have tenants.
	w := h.submit(api.JobSpec{GPUs: 2, Command: []string{"w"}})
	h.cycle()
	if pw := h.job(w.ID).AttemptList[0].Placements[0]; pw.Node != "n1" {
		t.Fatalf("whole-GPU job on %s; want n1", pw.Node)
	}
	w2 := h.submit(api.JobSpec{GPUs: 1, Command: []string{"w2"}})
	h.cycle()
	if got := h.job(w2.ID); got.State != api.StatePending {
		t.Fatalf("a whole-GPU job started (%s on %v) with every free GPU shared", got.State, got.Nodes)
	}

	// The agent is told the share and the slice.
	resp := h.heartbeat("s1", api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake", Labels: map[string]string{"pool": "shared"},
		GPUs: []api.GPU{{Index: 0, UUID: "GPU-s1-0", Model: "H100", MemoryMB: 81559, Healthy: true}, {Index: 1, UUID: "GPU-s1-1", Model: "H100", MemoryMB: 81559, Healthy: true}}}, nil)
	found := 0
	for _, tk := range resp.Tasks {
		switch tk.JobID {
		case a.ID:
			found++
			if tk.GPUShare != 0.5 || tk.GPUMemoryLimitMB != 81559/2 {
				t.Errorf("task of a: share %v limit %d", tk.GPUShare, tk.GPUMemoryLimitMB)
			}
		case c.ID:
			found++
			if tk.GPUMemoryLimitMB != 20<<10 {
				t.Errorf("task of c: limit %d", tk.GPUMemoryLimitMB)
			}
		}
	}
	if found != 2 {
		t.Fatalf("s1's tasks %+v", resp.Tasks)
	}

	// A tenant over its slice ends FAILED gpu_memory_exceeded, with a message.
	start := h.clock.Now()
	inv := h.poolNode("s1", "shared", 2)
	h.heartbeat("s1", inv, []api.TaskStatus{{JobID: a.ID, Attempt: 1, State: api.StateRunning, StartTime: &start}})
	h.clock.Add(time.Hour)
	h.heartbeat("s1", inv, []api.TaskStatus{{JobID: a.ID, Attempt: 1, State: api.StateFailed, Reason: api.ReasonGPUMemoryExceeded, ExitCode: intp(137)}})
	got := h.job(a.ID)
	if got.State != api.StateFailed || got.Reason != api.ReasonGPUMemoryExceeded || !strings.Contains(got.Message, "40779 MB slice") {
		t.Fatalf("over its slice: %s (%s) %q", got.State, got.Reason, got.Message)
	}
	// Accounting charges the share: a, b, c and d held 0.5, 0.5, 0.252 and 0.5 of a GPU
	// for the hour, beside w's two whole GPUs.
	rep := h.usage(fmt.Sprintf("by=user&since=%s&until=%s", start.Add(-time.Minute).Format(time.RFC3339), h.clock.Now().Add(time.Minute).Format(time.RFC3339)))
	if !near(rep.Total.GPUHours, 3.752, 1e-6) {
		t.Errorf("charged %v GPU-hours; want 3.752 (shares as shares)", rep.Total.GPUHours)
	}
}

func TestSharedRequestsRefused(t *testing.T) {
	h := newHarness(t)
	h.setPools(api.Pool{Name: "shared", Sharing: true})
	h.poolNode("s1", "shared", 2)
	cases := []struct {
		spec  api.JobSpec
		field string
		says  string
	}{
		{api.JobSpec{GPUShare: 1.5}, "gpu_share", "below 1"},
		{api.JobSpec{GPUShare: -0.5}, "gpu_share", "above 0"},
		{api.JobSpec{GPUShare: 0.0005}, "gpu_share", "thousandths"},
		{api.JobSpec{GPUShare: 0.5, GPUMemoryMB: 1024}, "gpu_memory_mb", "not both"},
		{api.JobSpec{GPUShare: 0.5, GPUs: 2}, "gpus", "one GPU"},
		{api.JobSpec{GPUShare: 0.5, Nodes: 2, GPUsPerNode: 1}, "nodes", "one node"},
		{api.JobSpec{GPUMemoryMB: 100 << 10}, "gpu_memory_mb", "the largest has 81559 MB"},
		{api.JobSpec{GPUMemoryMB: -1}, "gpu_memory_mb", "between 0"},
		// A queue whose pools do not share.
		{api.JobSpec{GPUShare: 0.5, Queue: "inference"}, "gpu_share", "queue inference uses pools inference, and none allows GPU sharing"},
	}
	for _, tc := range cases {
		tc.spec.Command = []string{"x"}
		code, e := h.submitErr(tc.spec)
		if code != 400 || e.Field != tc.field || !strings.Contains(e.Message, tc.says) {
			t.Errorf("%+v: %d %s %q; want 400 naming %s and saying %q", tc.spec, code, e.Field, e.Message, tc.field, tc.says)
		}
	}
	if n := len(h.listJobs()); n != 0 {
		t.Fatalf("%d jobs stored after refusals", n)
	}
	// Pools are checked like queues.
	var e api.Error
	if code := h.do("PUT", "/api/v1/config", api.Config{Pools: []api.Pool{{Name: "a b"}}}, &e); code != 400 || e.Field != "pools.name" {
		t.Errorf("pool with a space: %d %+v", code, e)
	}
	if code := h.do("PUT", "/api/v1/config", api.Config{Pools: []api.Pool{{Name: "p"}, {Name: "p"}}}, &e); code != 400 || !strings.Contains(e.Message, "twice") {
		t.Errorf("pool twice: %d %+v", code, e)
	}
}

func TestExclusivePoolKeepsOtherQueuesOut(t *testing.T) {
	h := newHarness(t) // a new cluster: pool inference is exclusive to queue inference
	h.poolNode("i1", "inference", 8)
	h.beat("n1", 2)
	train := h.submit(api.JobSpec{GPUs: 2, Command: []string{"t"}})
	big := h.submit(api.JobSpec{GPUs: 8, Command: []string{"big"}})
	svc := h.submit(api.JobSpec{GPUs: 1, Queue: "inference", Command: []string{"serve"}})
	more := h.submit(api.JobSpec{GPUs: 1, Command: []string{"m"}})
	h.cycle()
	if got := h.job(train.ID); got.State != api.StateAssigned || got.Nodes[0] != "n1" {
		t.Fatalf("train job: %s on %v; want n1", got.State, got.Nodes)
	}
	if got := h.job(svc.ID); got.State != api.StateAssigned || got.Nodes[0] != "i1" {
		t.Fatalf("inference job: %s on %v; want i1", got.State, got.Nodes)
	}
	// Seven GPUs are free on i1, and still a train job waits.
	if got := h.job(more.ID); got.State != api.StatePending {
		t.Fatalf("a train job went to the inference pool: %s on %v", got.State, got.Nodes)
	}
	var why api.Why
	h.do("GET", fmt.Sprintf("/api/v1/jobs/%d/why", big.ID), nil, &why)
	if !strings.Contains(strings.Join(why.Reasons, " "), "pool inference is reserved for queue inference") {
		t.Fatalf("why for 8 GPUs: %q", why.Reasons)
	}
}

// listJobs lists every job, as the admin sees them.
func (h *harness) listJobs() []api.Job {
	h.t.Helper()
	var l api.JobList
	if code := h.do("GET", "/api/v1/jobs?all=true", nil, &l); code != http.StatusOK {
		h.t.Fatalf("list jobs: %d", code)
	}
	return l.Jobs
}
