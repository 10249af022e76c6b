package sched

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// islands gives node n two NVLink islands of four GPUs: {0-3} and {4-7}.
func islands(n Node) Node {
	for i := range n.GPUs {
		for j := range n.GPUs {
			if i != j && i/4 == j/4 {
				n.GPUs[i].NVLinkPeers = append(n.GPUs[i].NVLinkPeers, j)
			}
		}
	}
	return n
}

// With GPU 0 busy, the lowest free indices {1,2,3,4} would straddle both islands; the
// NVLink-aware pick keeps the job on one.
func TestFourGPUsStayOnOneNVLinkIsland(t *testing.T) {
	s := snapshot([]Node{islands(gpuNode("a", "H100", 8))}, []Running{busy(1, "a", 0, 0)}, job(2, 4, "H100"))
	p := mustSchedule(s, Options{})
	pl, ok := placementOf(p, 2)
	if !ok {
		t.Fatalf("job 2 not placed: %+v", p.Pending)
	}
	if got := pl.Allocs[0].GPUIndices; !slices.Equal(got, []int{4, 5, 6, 7}) {
		t.Errorf("GPUs %v; want the island {4,5,6,7}", got)
	}
	checkPlan(t, s, p)
}

func imageJob(id int64, gpus int) Job {
	j := job(id, gpus, "")
	j.Image = "registry.example.com/ml/train:1"
	return j
}

func withRuntime(n Node) Node {
	n.ContainerRuntime = "podman"
	return n
}

func TestImageJobsRunOnlyWhereAContainerRuntimeIs(t *testing.T) {
	t.Run("skips nodes without one", func(t *testing.T) {
		// Best fit would take a (4 GPUs, exactly the job) for either job; the image job
		// must go to b.
		s := snapshot([]Node{gpuNode("a", "H100", 4), withRuntime(gpuNode("b", "H100", 8))}, nil, imageJob(1, 4), job(2, 4, ""))
		p := mustSchedule(s, Options{})
		checkPlan(t, s, p)
		if pl, ok := placementOf(p, 1); !ok || pl.Allocs[0].Node != "b" {
			t.Errorf("image job placed %+v; want on b", pl)
		}
		if pl, ok := placementOf(p, 2); !ok || pl.Allocs[0].Node != "a" {
			t.Errorf("plain job placed %+v; want on a, the best fit", pl)
		}
	})
	t.Run("waits when no node has one", func(t *testing.T) {
		for _, gpus := range []int{4, 0} {
			s := snapshot([]Node{gpuNode("a", "H100", 8)}, nil, imageJob(1, gpus))
			pj, ok := pendingOf(mustSchedule(s, Options{}), 1)
			if !ok || pj.Reason.Code != ReasonNoNodeMatches || pj.Reason.Message != "no node has a container runtime for image jobs" {
				t.Errorf("%d GPUs: reason %+v; want NoNodeMatches saying no node has a container runtime", gpus, pj.Reason)
			}
		}
	})
	t.Run("too small where there is one", func(t *testing.T) {
		s := snapshot([]Node{gpuNode("a", "H100", 8), withRuntime(gpuNode("b", "H100", 2))}, nil, imageJob(1, 4))
		pj, _ := pendingOf(mustSchedule(s, Options{}), 1)
		if pj.Reason.Code != ReasonNoNodeMatches || !strings.Contains(pj.Reason.Message, "among the nodes with a container runtime") {
			t.Errorf("reason %+v; want NoNodeMatches among the nodes with a runtime", pj.Reason)
		}
	})
	t.Run("busy where there is one", func(t *testing.T) {
		s := snapshot([]Node{gpuNode("a", "H100", 8), withRuntime(gpuNode("b", "H100", 8))},
			[]Running{busy(1, "b", time.Hour, 0, 1, 2, 3, 4, 5)}, imageJob(2, 4))
		p := mustSchedule(s, Options{})
		checkPlan(t, s, p)
		pj, ok := pendingOf(p, 2)
		if !ok || pj.Reason.Code != ReasonResources || pj.Reason.BestNode != "b" || pj.Reason.Missing["gpus"] != 2 {
			t.Errorf("reason %+v; want Resources on b, short of 2 GPUs (a has 8 free but no runtime)", pj.Reason)
		}
		if pj.EstimatedStart != t0.Add(time.Hour) {
			t.Errorf("estimated start %v; want when b's job ends", pj.EstimatedStart)
		}
	})
	t.Run("unschedulable where there is one", func(t *testing.T) {
		for _, gpus := range []int{4, 0} {
			b := withRuntime(gpuNode("b", "H100", 8))
			b.Schedulable = false
			s := snapshot([]Node{gpuNode("a", "H100", 8), b}, nil, imageJob(1, gpus))
			pj, _ := pendingOf(mustSchedule(s, Options{}), 1)
			if pj.Reason.Code != ReasonResources || !strings.Contains(pj.Reason.Message, "schedulable node with a container runtime") {
				t.Errorf("%d GPUs: reason %+v; want Resources naming the runtime", gpus, pj.Reason)
			}
		}
	})
	t.Run("gangs too", func(t *testing.T) {
		j := imageJob(1, 8)
		j.Request.Nodes, j.Request.GPUsPerNode = 2, 4
		nodes := []Node{gpuNode("a", "H100", 4), withRuntime(gpuNode("b", "H100", 4)), gpuNode("c", "H100", 4), withRuntime(gpuNode("d", "H100", 4))}
		s := snapshot(nodes, nil, j)
		p := mustSchedule(s, Options{})
		checkPlan(t, s, p)
		pl, ok := placementOf(p, 1)
		if !ok || pl.Allocs[0].Node != "b" || pl.Allocs[1].Node != "d" {
			t.Errorf("gang placed %+v; want on b and d", pl)
		}
	})
	t.Run("preempts only where it could run", func(t *testing.T) {
		victim := func(id int64, node string) Running {
			r := busy(id, node, 0, 0, 1, 2, 3)
			r.Queue = "batch"
			return r
		}
		j := imageJob(3, 4)
		j.Queue = "urgent"
		// a's victim started earlier and would lose more: without the runtime rule
		// b's would be chosen anyway, so make a's the cheaper one.
		va, vb := victim(1, "a"), victim(2, "b")
		va.Start = t0.Add(-time.Hour)
		vb.Start = t0.Add(-10 * time.Hour)
		s := snapshot([]Node{gpuNode("a", "H100", 4), withRuntime(gpuNode("b", "H100", 4))}, []Running{va, vb}, j)
		p := mustSchedule(s, Options{})
		checkPlan(t, s, p)
		if len(p.Preemptions) != 1 || p.Preemptions[0].JobID != 2 {
			t.Errorf("preemptions %+v; want job 2 on b only", p.Preemptions)
		}
	})
}

func TestHeldAndUnhealthyGPUsTakeNoNewWork(t *testing.T) {
	t.Run("held", func(t *testing.T) {
		n := gpuNode("a", "H100", 4)
		n.GPUs[1].Held = true
		s := snapshot([]Node{n}, nil, job(1, 1, ""), job(2, 1, ""), job(3, 1, ""), job(4, 1, ""))
		p := mustSchedule(s, Options{})
		checkPlan(t, s, p)
		var got []int
		for _, pl := range p.Placements {
			got = append(got, pl.Allocs[0].GPUIndices...)
		}
		slices.Sort(got)
		if !slices.Equal(got, []int{0, 2, 3}) {
			t.Errorf("GPUs given %v; want 0, 2 and 3, not the held 1", got)
		}
		pj, _ := pendingOf(p, 4)
		if !strings.Contains(pj.Reason.Message, "1 GPU of node a is held by leftover processes") {
			t.Errorf("reason %+v; want it to name the held GPU", pj.Reason)
		}
	})
	t.Run("unhealthy, what the job lacks", func(t *testing.T) {
		n := gpuNode("a", "H100", 4)
		n.GPUs[0].Healthy, n.GPUs[3].Healthy = false, false
		s := snapshot([]Node{n}, nil, job(1, 4, "H100"))
		pj, _ := pendingOf(mustSchedule(s, Options{}), 1)
		if pj.Reason.Code != ReasonResources || !strings.Contains(pj.Reason.Message, "2 GPUs of node a are unhealthy") {
			t.Errorf("reason %+v; want Resources naming the unhealthy GPUs", pj.Reason)
		}
	})
	t.Run("all of a model", func(t *testing.T) {
		n := gpuNode("a", "H100", 2)
		n.GPUs[0].Healthy = false
		n.GPUs[1].Held = true
		s := snapshot([]Node{n}, nil, job(1, 2, "H100"))
		pj, _ := pendingOf(mustSchedule(s, Options{}), 1)
		want := "1 GPU of node a is held by leftover processes and 1 is unhealthy"
		if pj.Reason.Code != ReasonResources || !strings.Contains(pj.Reason.Message, want) {
			t.Errorf("reason %+v; want Resources saying %q", pj.Reason, want)
		}
	})
	t.Run("best node short of free GPUs", func(t *testing.T) {
		n := gpuNode("a", "H100", 8)
		n.GPUs[7].Held = true
		s := snapshot([]Node{n}, []Running{busy(1, "a", time.Hour, 0, 1, 2, 3)}, job(2, 4, ""))
		pj, _ := pendingOf(mustSchedule(s, Options{}), 2)
		if pj.Reason.BestNode != "a" || pj.Reason.Missing["gpus"] != 1 || !strings.Contains(pj.Reason.Message, "held by leftover processes") {
			t.Errorf("reason %+v; want a short of 1 GPU, naming the held one", pj.Reason)
		}
	})
}

func TestNodesThatFailedTheirHealthCheckTakeNoNewWork(t *testing.T) {
	sick := gpuNode("a", "H100", 8)
	sick.HealthFailed = true
	s := snapshot([]Node{sick, gpuNode("b", "H100", 8)}, nil, job(1, 8, ""), job(2, 8, ""))
	p := mustSchedule(s, Options{})
	checkPlan(t, s, p)
	if pl, ok := placementOf(p, 1); !ok || pl.Allocs[0].Node != "b" {
		t.Errorf("job 1 placed %+v; want on b", pl)
	}
	pj, _ := pendingOf(p, 2)
	if pj.Reason.Code != ReasonPriority && pj.Reason.Code != ReasonResources {
		t.Errorf("job 2 reason %+v", pj.Reason)
	}

	only := snapshot([]Node{sick}, nil, job(1, 1, ""))
	pj, _ = pendingOf(mustSchedule(only, Options{}), 1)
	if pj.Reason.Code != ReasonResources || !strings.Contains(pj.Reason.Message, "node a failed its health check") {
		t.Errorf("reason %+v; want Resources naming a's failed health check", pj.Reason)
	}

	// Among other unschedulable nodes it is still named.
	drained := gpuNode("c", "H100", 2)
	drained.Schedulable = false
	two := snapshot([]Node{sick, gpuNode("b", "H100", 2), drained}, nil, job(1, 4, ""))
	pj, _ = pendingOf(mustSchedule(two, Options{}), 1)
	if !strings.Contains(pj.Reason.Message, "2 nodes are not schedulable (node a failed its health check)") {
		t.Errorf("reason %+v; want it to count the unschedulable nodes and name a", pj.Reason)
	}
}

func TestHealthNoteNamesAFew(t *testing.T) {
	var nodes []Node
	for _, name := range []string{"e", "d", "c", "b", "a"} {
		n := gpuNode(name, "H100", 8)
		n.HealthFailed = true
		nodes = append(nodes, n)
	}
	for k, want := range []string{
		1: "node e failed its health check",
		2: "nodes d and e failed their health checks",
		3: "nodes c, d and e failed their health checks",
		5: "nodes a, b, c and 2 more failed their health checks",
	} {
		if want == "" {
			continue
		}
		s := snapshot(nodes[:k], nil, job(1, 1, ""))
		if pj, _ := pendingOf(mustSchedule(s, Options{}), 1); pj.Reason.Message != "no node is schedulable; "+want {
			t.Errorf("%d nodes: reason %q; want %q", k, pj.Reason.Message, want)
		}
	}
}

// A CPU-only job of a queue whose pool has no schedulable node, while other nodes do,
// waits with a reason (the shortage search finds no group to name).
func TestCPUJobWithNoEligibleSchedulableNode(t *testing.T) {
	inf := gpuNode("i", "H100", 8)
	inf.Labels = map[string]string{"pool": "inference"}
	inf.Schedulable = false
	var nodes []Node
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		n := gpuNode(name, "H100", 8)
		n.Labels = map[string]string{"pool": "train"}
		nodes = append(nodes, n)
	}
	s := snapshot(append(nodes, inf), nil)
	q := s.Queues["inference"]
	q.Pools = []string{"inference"}
	s.Queues["inference"] = q
	j := job(1, 0, "")
	j.Queue = "inference"
	s.Pending = []Job{j}
	pj, ok := pendingOf(mustSchedule(s, Options{}), 1)
	if !ok || pj.Reason.Code != ReasonResources || pj.Reason.Message == "" {
		t.Errorf("reason %+v; want Resources with a message", pj.Reason)
	}
}

// A failed health check is named only where the node could run the job otherwise.
func TestHealthNoteOnlyForNodesTheJobCouldUse(t *testing.T) {
	sick := gpuNode("a", "H100", 8)
	sick.HealthFailed = true
	sick.Labels = map[string]string{"pool": "train"}
	other := gpuNode("b", "H100", 2)
	other.Labels = map[string]string{"pool": "inference"}
	other.ContainerRuntime = "podman"
	s := snapshot([]Node{sick, other}, nil)
	q := s.Queues["inference"]
	q.Pools = []string{"inference"}
	s.Queues["inference"] = q
	inPool := job(1, 4, "")
	inPool.Queue = "inference"
	s.Pending = []Job{inPool, imageJob(2, 4), job(3, 4, "")}
	p := mustSchedule(s, Options{})
	for id, named := range map[int64]bool{1: false, 2: false, 3: true} {
		pj, _ := pendingOf(p, id)
		if got := strings.Contains(pj.Reason.Message, "node a failed its health check"); got != named {
			t.Errorf("job %d: reason %q; naming a's health check: %v, want %v", id, pj.Reason.Message, got, named)
		}
	}
}
