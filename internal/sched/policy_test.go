package sched

import (
	"math"
	"reflect"
	"testing"
	"time"
)

func TestQuota(t *testing.T) {
	teams := map[string]Team{
		"vision": {Name: "vision", Weight: 1, Quota: map[string]Quota{"H100": {Guaranteed: 8, Limit: 16}}},
		"nlp":    {Name: "nlp", Weight: 1, Quota: map[string]Quota{"": {Guaranteed: 4, Limit: 4}}},
	}
	nodes := []Node{gpuNode("gpu-01", "H100", 8), gpuNode("gpu-02", "H100", 8), gpuNode("gpu-03", "H100", 8), gpuNode("gpu-04", "A100", 8)}
	running := []Running{busy(90, "gpu-01", time.Hour, 0, 1, 2, 3, 4, 5)} // vision holds 6 H100
	nlp := func(id int64, gpus int, model string) Job { j := job(id, gpus, model); j.Team = "nlp"; return j }
	s := snapshot(nodes, running, job(1, 2, "H100"), job(2, 4, "H100"), job(3, 8, "H100"), nlp(4, 4, "A100"), nlp(5, 1, ""), job(6, 4, "A100"))
	s.Teams = teams
	p := mustSchedule(s, Options{Order: OrderFIFO})

	for id, borrowing := range map[int64]bool{1: false, 2: true, 4: false, 6: false} {
		pl, ok := placementOf(p, id)
		if !ok || pl.Borrowing != borrowing {
			t.Errorf("job %d: placed %v, borrowing %v; want placed, borrowing %v", id, ok, pl.Borrowing, borrowing)
		}
	}
	pj, _ := pendingOf(p, 3)
	want := Reason{Code: ReasonQuotaExceeded, Team: "vision", Used: 12, Limit: 16,
		Message: "team vision uses 12 of its 16-GPU H100 limit; this job needs 8"}
	if !reflect.DeepEqual(pj.Reason, want) {
		t.Errorf("job 3:\n got %+v\nwant %+v", pj.Reason, want)
	}
	// nlp's "" quota covers every model: 4 A100 in use leave no room for one more GPU.
	pj, _ = pendingOf(p, 5)
	if pj.Reason.Code != ReasonQuotaExceeded || pj.Reason.Message != "team nlp uses 4 of its 4-GPU limit; this job needs 1" {
		t.Errorf("job 5: %+v", pj.Reason)
	}

	// A job that takes any model is kept off the models its quota refuses.
	s = snapshot(nodes, running, job(1, 8, ""))
	s.Teams = map[string]Team{"vision": {Quota: map[string]Quota{"H100": {Guaranteed: 6, Limit: 6}}}}
	p = mustSchedule(s, Options{})
	if pl, ok := placementOf(p, 1); !ok || pl.Allocs[0].Node != "gpu-04" {
		t.Errorf("any-model job should go to the A100 node: %+v", p)
	}
}

// A running job may hold GPUs of a node that no longer reports them (its agent restarted
// without them): counting the team's quota must not trip over the node's empty GPU list.
// The spec-driven fuzz test found this as a panic of the whole server.
func TestQuotaWithGPUsTheNodeNoLongerReports(t *testing.T) {
	cpuOnly := gpuNode("gpu-01", "H100", 0)
	s := snapshot([]Node{cpuOnly}, []Running{busy(90, "gpu-01", time.Hour, 0)}, job(1, 0, ""))
	s.Teams = map[string]Team{"vision": {Name: "vision", Weight: 1, Quota: map[string]Quota{"": {Guaranteed: 1, Limit: 8}}}}
	p := mustSchedule(s, Options{})
	if _, ok := placementOf(p, 1); !ok {
		t.Errorf("the CPU-only job should start: %+v", p)
	}
}

func TestPriorityFactors(t *testing.T) {
	s := snapshot([]Node{gpuNode("gpu-01", "H100", 1)}, nil)
	s.Teams = map[string]Team{
		"vision": {Weight: 1, Usage: 3000},
		"nlp":    {Weight: 1, Usage: 1000},
		"ghost":  {Weight: 0},
	}
	a := job(1, 1, "H100")
	a.SubmitTime = t0.Add(-7 * 24 * time.Hour) // full age factor
	b := job(2, 1, "H100")
	b.Team, b.SubmitTime = "nlp", t0
	c := job(3, 1, "H100")
	c.Team, c.Nice, c.SubmitTime = "nlp", 100, t0
	d := job(4, 1, "H100")
	d.Team = "ghost"
	s.Pending = []Job{a, b, c, d}
	p := mustSchedule(s, Options{})
	if p.Placements[0].JobID != 2 {
		t.Fatalf("nlp, under its share, should go first: %+v", p.Placements)
	}
	// vision: usage 0.75 of a 0.5 share: F = 2^-1.5; nlp: 2^-0.5.
	pj, _ := pendingOf(p, 1)
	want := Priority{Tier: 1, FairShare: 10000 * 0.35355339059327373, Age: 1000}
	want.Score = want.FairShare + want.Age
	if !reflect.DeepEqual(pj.Priority, want) {
		t.Errorf("job 1 priority %+v, want %+v", pj.Priority, want)
	}
	pj, _ = pendingOf(p, 3)
	if pj.Priority.Nice != 100 || math.Abs(pj.Priority.Score-(10000*math.Sqrt2/2-100)) > 1e-6 {
		t.Errorf("job 3 priority %+v", pj.Priority)
	}
	var order []int64
	for _, pj := range p.Pending {
		order = append(order, pj.JobID)
	}
	if !reflect.DeepEqual(order, []int64{3, 1, 4}) {
		t.Errorf("pending order %v, want [3 1 4] (a team without a share goes last)", order)
	}
}

func TestPreemption(t *testing.T) {
	node := []Node{gpuNode("gpu-01", "H100", 8)}
	runningIn := func(id int64, queue string, idx ...int) Running {
		r := busy(id, "gpu-01", 10*time.Hour, idx...)
		r.Queue = queue
		return r
	}
	urgent := job(1, 4, "H100")
	urgent.Queue = "urgent"

	t.Run("higher tier takes the job that loses least", func(t *testing.T) {
		a := runningIn(90, "batch", 0, 1, 2, 3)
		b := runningIn(91, "batch", 4, 5, 6, 7)
		b.LastCheckpoint = t0.Add(-time.Minute) // b loses a minute, a an hour
		p := mustSchedule(snapshot(node, []Running{a, b}, urgent), Options{})
		want := []Preemption{{JobID: 91, ForJob: 1, Reason: "preempted on gpu-01 by job 1 of higher tier (queue urgent)"}}
		if !reflect.DeepEqual(p.Preemptions, want) {
			t.Errorf("preemptions %+v, want %+v", p.Preemptions, want)
		}
		pj, _ := pendingOf(p, 1)
		if pj.Reason.Code != ReasonWaitingForPreemption || !reflect.DeepEqual(pj.Reason.Victims, []int64{91}) {
			t.Errorf("urgent job: %+v", pj.Reason)
		}
		if len(p.Placements) != 0 {
			t.Errorf("placed onto GPUs still held: %+v", p.Placements)
		}
	})
	t.Run("non-preemptible and never-preempt queues are safe", func(t *testing.T) {
		inf := runningIn(92, "inference", 4, 5, 6, 7)
		inf.Borrowing = true
		p := mustSchedule(snapshot(node, []Running{runningIn(90, "train", 0, 1, 2, 3), inf}, urgent), Options{})
		if len(p.Preemptions) != 0 {
			t.Errorf("preempted %+v", p.Preemptions)
		}
	})
	t.Run("in-quota job reclaims borrowed GPUs", func(t *testing.T) {
		borrower := runningIn(90, "train", 0, 1, 2, 3, 4, 5, 6, 7)
		borrower.Team, borrower.Borrowing = "nlp", true
		s := snapshot(node, []Running{borrower}, job(1, 2, "H100"))
		s.Teams = map[string]Team{"vision": {Quota: map[string]Quota{"H100": {Guaranteed: 4, Limit: 8}}}}
		p := mustSchedule(s, Options{})
		want := []Preemption{{JobID: 90, ForJob: 1, Reason: "borrowed GPUs on gpu-01 reclaimed by team vision's in-quota job 1"}}
		if !reflect.DeepEqual(p.Preemptions, want) {
			t.Errorf("preemptions %+v, want %+v", p.Preemptions, want)
		}
		// A borrowing job has no such right.
		s.Teams["vision"] = Team{Quota: map[string]Quota{"H100": {Guaranteed: 1, Limit: 8}}}
		if p := mustSchedule(s, Options{}); len(p.Preemptions) != 0 {
			t.Errorf("borrowing job preempted: %+v", p.Preemptions)
		}
	})
	t.Run("minimum runtime protects", func(t *testing.T) {
		young := runningIn(90, "batch", 0, 1, 2, 3, 4, 5, 6, 7)
		young.Start = t0.Add(-5 * time.Minute)
		p := mustSchedule(snapshot(node, []Running{young}, urgent), Options{})
		if len(p.Preemptions) != 0 {
			t.Errorf("preempted a job inside its minimum runtime: %+v", p.Preemptions)
		}
		if p := mustSchedule(snapshot(node, []Running{young}, urgent), Options{MinRuntime: -1}); len(p.Preemptions) != 1 {
			t.Errorf("without protection the job should be preempted: %+v", p.Preemptions)
		}
	})
	t.Run("jobs already stopping are waited for, not preempted again", func(t *testing.T) {
		stopping := runningIn(90, "batch", 0, 1, 2, 3)
		stopping.Preempting = true
		p := mustSchedule(snapshot(node, []Running{stopping, runningIn(91, "batch", 4, 5, 6, 7)}, urgent), Options{})
		if len(p.Preemptions) != 0 {
			t.Errorf("new preemptions %+v", p.Preemptions)
		}
		if pj, _ := pendingOf(p, 1); !reflect.DeepEqual(pj.Reason.Victims, []int64{90}) {
			t.Errorf("urgent job: %+v", pj.Reason)
		}
	})
	t.Run("the free GPUs the preemptor needs are claimed for it", func(t *testing.T) {
		// The batch victim frees 2 GPUs; the urgent job needs the 2 free ones too.
		small := job(2, 2, "H100")
		running := []Running{runningIn(90, "batch", 0, 1), runningIn(91, "train", 2, 3, 4, 5)}
		p := mustSchedule(snapshot(node, running, urgent, small), Options{})
		want := []Claim{{JobID: 1, Allocs: []Alloc{{Node: "gpu-01", GPUIndices: []int{0, 1, 6, 7}, CPUs: 1, MemoryMB: 1024}}}}
		if len(p.Preemptions) != 1 || len(p.Placements) != 0 || !reflect.DeepEqual(p.Claims, want) {
			t.Errorf("plan %+v", p)
		}
		if pj, _ := pendingOf(p, 2); pj.Reason.Code != ReasonResources ||
			pj.Reason.Message != "no node has 2 free GPUs of model H100: 2 on gpu-01 are held for job 1 until the jobs preempted for it stop" {
			t.Errorf("small job: %+v", pj.Reason)
		}
	})
	t.Run("free GPUs the preemptor does not need stay free", func(t *testing.T) {
		// The victim holds 6 GPUs; the claim takes 4 of them, and the 2 free ones serve
		// the small job while the victim stops.
		small := job(2, 2, "H100")
		p := mustSchedule(snapshot(node, []Running{runningIn(90, "batch", 0, 1, 2, 3, 4, 5)}, urgent, small), Options{})
		want := []Claim{{JobID: 1, Allocs: []Alloc{{Node: "gpu-01", GPUIndices: []int{0, 1, 2, 3}, CPUs: 1, MemoryMB: 1024}}}}
		if len(p.Preemptions) != 1 || !reflect.DeepEqual(p.Claims, want) {
			t.Errorf("plan %+v", p)
		}
		if pl, ok := placementOf(p, 2); !ok || !reflect.DeepEqual(pl.Allocs[0].GPUIndices, []int{6, 7}) {
			t.Errorf("small job: %+v", p)
		}
	})
	t.Run("only victims that free what is missing", func(t *testing.T) {
		cpuJob := Running{ID: 89, Queue: "batch", Start: t0.Add(-time.Hour), LastCheckpoint: t0,
			Allocs: []Alloc{{Node: "gpu-01", CPUs: 2, MemoryMB: 1024}}}
		p := mustSchedule(snapshot(node, []Running{cpuJob, runningIn(90, "batch", 0, 1, 2, 3, 4, 5, 6, 7)}, urgent), Options{})
		if len(p.Preemptions) != 1 || p.Preemptions[0].JobID != 90 {
			t.Errorf("preemptions %+v, want only job 90", p.Preemptions)
		}
	})
	t.Run("switched off", func(t *testing.T) {
		p := mustSchedule(snapshot(node, []Running{runningIn(90, "batch", 0, 1, 2, 3, 4, 5, 6, 7)}, urgent), Options{NoPreemption: true})
		if len(p.Preemptions) != 0 {
			t.Errorf("preempted with preemption off: %+v", p.Preemptions)
		}
	})
}

func TestPools(t *testing.T) {
	inPool := func(name, pool string, gpus int) Node {
		n := gpuNode(name, "H100", gpus)
		n.Labels = map[string]string{"pool": pool}
		return n
	}
	nodes := []Node{inPool("inf-01", "inference", 8), inPool("train-01", "train", 4)}
	qs := queues()
	qs["inference"] = Queue{Name: "inference", Tier: 1, NeverPreempt: true, Pools: []string{"inference"}}
	qs["train"] = Queue{Name: "train", Tier: 1, Pools: []string{"train"}}
	serve := job(1, 2, "H100")
	serve.Queue = "inference"
	s := &Snapshot{Nodes: nodes, Queues: qs, Pending: []Job{serve, job(2, 2, "H100"), job(3, 8, "H100"), job(4, 4, "H100")}}
	p := mustSchedule(s, Options{})
	if pl, _ := placementOf(p, 1); pl.Allocs[0].Node != "inf-01" {
		t.Errorf("inference job on %+v", pl)
	}
	if pl, _ := placementOf(p, 2); pl.Allocs[0].Node != "train-01" {
		t.Errorf("train job on %+v", pl)
	}
	pj, _ := pendingOf(p, 3)
	if pj.Reason.Code != ReasonNoNodeMatches || pj.Reason.Message != "no node has 8 GPUs of model H100; the largest has 4 in pools train" {
		t.Errorf("8-GPU train job: %+v", pj.Reason)
	}
	// The train pool has 2 GPUs left; the inference node's 6 free do not count.
	pj, _ = pendingOf(p, 4)
	want := Reason{Code: ReasonResources, BestNode: "train-01", Missing: map[string]int64{"gpus": 2},
		Message: "no node has 4 free GPUs of model H100: best is train-01 with 2 free"}
	if !reflect.DeepEqual(pj.Reason, want) {
		t.Errorf("4-GPU train job:\n got %+v\nwant %+v", pj.Reason, want)
	}
}

func TestUserLimit(t *testing.T) {
	qs := queues()
	q := qs["interactive"]
	q.UserGPULimit = 2
	qs["interactive"] = q
	held := busy(90, "gpu-01", time.Hour, 0)
	held.Queue, held.User = "interactive", "ada"
	a, b, c := job(1, 1, "H100"), job(2, 1, "H100"), job(3, 1, "H100")
	a.Queue, b.Queue, c.Queue = "interactive", "interactive", "interactive"
	c.User = "bob"
	s := &Snapshot{Nodes: []Node{gpuNode("gpu-01", "H100", 8)}, Queues: qs, Running: []Running{held}, Pending: []Job{a, b, c}}
	p := mustSchedule(s, Options{})
	if len(p.Placements) != 2 {
		t.Fatalf("placements %+v, want jobs 1 and 3", p.Placements)
	}
	pj, _ := pendingOf(p, 2)
	want := Reason{Code: ReasonUserLimit, User: "ada", Used: 2, Limit: 2,
		Message: "user ada holds 2 of the 2 GPUs one user may hold in queue interactive; this job needs 1"}
	if !reflect.DeepEqual(pj.Reason, want) {
		t.Errorf("job 2:\n got %+v\nwant %+v", pj.Reason, want)
	}
}
