package sched

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// listJob is job with a list of acceptable models.
func listJob(id int64, gpus int, models ...string) Job {
	j := job(id, gpus, "")
	j.Request.GPUModels = models
	return j
}

// nodeModel returns the model of the GPUs a placement got, failing on a mix.
func nodeModel(t *testing.T, s *Snapshot, pl Placement) string {
	t.Helper()
	model := ""
	for _, a := range pl.Allocs {
		for _, n := range s.Nodes {
			if n.Name != a.Node {
				continue
			}
			for _, idx := range a.GPUIndices {
				for _, g := range n.GPUs {
					if g.Index == idx {
						if model != "" && g.Model != model {
							t.Fatalf("job %d runs on %s and %s", pl.JobID, model, g.Model)
						}
						model = g.Model
					}
				}
			}
		}
	}
	return model
}

func TestModelList(t *testing.T) {
	tests := []struct {
		name  string
		snap  *Snapshot
		model string // the model job 1 lands on; "" for none (pending)
		node  string
	}{
		{
			name: "lands on whichever listed model is free",
			snap: snapshot([]Node{gpuNode("a-01", "A100", 8), gpuNode("h-01", "H100", 8), gpuNode("l-01", "L40S", 8)},
				[]Running{busy(90, "a-01", time.Hour, 0, 1, 2, 3, 4, 5, 6, 7)}, listJob(1, 4, "A100", "H100")),
			model: "H100", node: "h-01",
		},
		{
			name: "never on a model the list leaves out",
			snap: snapshot([]Node{gpuNode("a-01", "A100", 8), gpuNode("l-01", "L40S", 8)},
				[]Running{busy(90, "a-01", time.Hour, 0, 1, 2, 3, 4, 5, 6, 7)}, listJob(1, 4, "A100", "H100")),
		},
		{
			name:  "the first listed model when both fit as well",
			snap:  snapshot([]Node{gpuNode("a-01", "A100", 8), gpuNode("h-01", "H100", 8)}, nil, listJob(1, 2, "H100", "A100")),
			model: "H100", node: "h-01",
		},
		{
			name:  "the first listed model, the other way round",
			snap:  snapshot([]Node{gpuNode("a-01", "A100", 8), gpuNode("h-01", "H100", 8)}, nil, listJob(1, 2, "A100", "H100")),
			model: "A100", node: "a-01",
		},
		{
			name: "best fit before list order",
			snap: snapshot([]Node{gpuNode("a-01", "A100", 8), gpuNode("h-01", "H100", 8)},
				[]Running{busy(90, "h-01", time.Hour, 0, 1, 2, 3, 4, 5)}, listJob(1, 2, "A100", "H100")),
			model: "H100", node: "h-01",
		},
		{
			name: "one listed name means that model",
			snap: snapshot([]Node{gpuNode("a-01", "A100", 8), gpuNode("h-01", "H100", 4)}, nil,
				listJob(1, 4, "A100")),
			model: "A100", node: "a-01",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustSchedule(tc.snap, Options{})
			checkPlan(t, tc.snap, p)
			pl, ok := placementOf(p, 1)
			if tc.model == "" {
				if ok {
					t.Fatalf("job 1 placed on %+v, want pending", pl.Allocs)
				}
				return
			}
			if !ok {
				pj, _ := pendingOf(p, 1)
				t.Fatalf("job 1 pending: %s", pj.Reason.Message)
			}
			if got := nodeModel(t, tc.snap, pl); got != tc.model || pl.Allocs[0].Node != tc.node {
				t.Fatalf("job 1 on %s (%s), want %s (%s)", pl.Allocs[0].Node, got, tc.node, tc.model)
			}
		})
	}
}

// A list in a small pool goes through findInPool, which must keep the same order.
func TestModelListInPool(t *testing.T) {
	var nodes []Node
	for i, m := range []string{"H100", "A100", "H100", "A100"} {
		n := gpuNode("n-0"+string(rune('1'+i)), m, 8)
		n.Labels = map[string]string{"pool": "train"}
		nodes = append(nodes, n)
	}
	for i := range 20 {
		n := gpuNode("z-"+string(rune('a'+i)), "L40S", 8)
		n.Labels = map[string]string{"pool": "other"}
		nodes = append(nodes, n)
	}
	s := snapshot(nodes, nil, listJob(1, 2, "A100", "H100"))
	q := s.Queues["train"]
	q.Pools = []string{"train"}
	s.Queues["train"] = q
	p := mustSchedule(s, Options{})
	checkPlan(t, s, p)
	pl, ok := placementOf(p, 1)
	if !ok || pl.Allocs[0].Node != "n-02" {
		t.Fatalf("placements %+v, want job 1 on n-02 (the first A100 node)", p.Placements)
	}
}

func TestModelListQuota(t *testing.T) {
	nodes := []Node{gpuNode("a-01", "A100", 8), gpuNode("h-01", "H100", 8)}
	running := []Running{busy(90, "h-01", time.Hour, 0, 1, 2, 3)}
	s := snapshot(nodes, running, listJob(1, 2, "H100", "A100"))
	s.Teams = map[string]Team{"vision": {Name: "vision", Weight: 1, Quota: map[string]Quota{"H100": {Guaranteed: 4, Limit: 4}}}}
	p := mustSchedule(s, Options{})
	checkPlan(t, s, p)
	pl, ok := placementOf(p, 1)
	if !ok {
		pj, _ := pendingOf(p, 1)
		t.Fatalf("job 1 pending: %s", pj.Reason.Message)
	}
	if got := nodeModel(t, s, pl); got != "A100" {
		t.Fatalf("job 1 on %s, want A100: the H100 quota is full", got)
	}

	// With the A100 quota full too, it waits, and the reason names its first choice.
	s.Teams["vision"].Quota["A100"] = Quota{Guaranteed: 0, Limit: 0}
	p = mustSchedule(s, Options{})
	checkPlan(t, s, p)
	pj, ok := pendingOf(p, 1)
	if !ok || pj.Reason.Code != ReasonQuotaExceeded || !strings.Contains(pj.Reason.Message, "H100") {
		t.Fatalf("job 1: %+v, want QuotaExceeded naming the H100 limit", pj.Reason)
	}

	// The "" entry covers the models without their own: here only L40S, listed with the
	// full H100.
	s = snapshot([]Node{gpuNode("h-01", "H100", 8), gpuNode("l-01", "L40S", 8)}, running, listJob(1, 2, "H100", "L40S"))
	s.Teams = map[string]Team{"vision": {Name: "vision", Weight: 1, Quota: map[string]Quota{
		"H100": {Guaranteed: 4, Limit: 4}, "": {Guaranteed: 2, Limit: 2}}}}
	p = mustSchedule(s, Options{})
	checkPlan(t, s, p)
	if pl, ok := placementOf(p, 1); !ok || nodeModel(t, s, pl) != "L40S" {
		t.Fatalf("placements %+v, want job 1 on the L40S", p.Placements)
	}
}

func TestModelListGang(t *testing.T) {
	// Two free A100 nodes and two free H100 nodes: a gang of three fits on neither model.
	nodes := []Node{gpuNode("a-01", "A100", 8), gpuNode("a-02", "A100", 8), gpuNode("h-01", "H100", 8), gpuNode("h-02", "H100", 8)}
	gang := listJob(1, 0, "A100", "H100")
	gang.Request.Nodes, gang.Request.GPUsPerNode, gang.Request.GPUs = 3, 8, 24
	s := snapshot(nodes, nil, gang)
	p := mustSchedule(s, Options{})
	checkPlan(t, s, p)
	pj, ok := pendingOf(p, 1)
	if !ok || pj.Reason.Code != ReasonNoNodeMatches || !strings.Contains(pj.Reason.Message, "A100 or H100") {
		t.Fatalf("job 1: %+v, want NoNodeMatches naming A100 or H100", pj.Reason)
	}

	// A gang of two lands on one model, the first listed at equal fit.
	gang.Request.Nodes, gang.Request.GPUs = 2, 16
	gang.Request.GPUModels = []string{"H100", "A100"}
	s = snapshot(nodes, nil, gang)
	p = mustSchedule(s, Options{})
	checkPlan(t, s, p)
	pl, ok := placementOf(p, 1)
	if !ok || nodeModel(t, s, pl) != "H100" {
		t.Fatalf("placements %+v, want the gang on the two H100 nodes", p.Placements)
	}

	// With one H100 node busy, it takes the A100 pair.
	s = snapshot(nodes, []Running{busy(90, "h-02", time.Hour, 0)}, gang)
	p = mustSchedule(s, Options{})
	checkPlan(t, s, p)
	if pl, ok := placementOf(p, 1); !ok || nodeModel(t, s, pl) != "A100" {
		t.Fatalf("placements %+v, want the gang on the two A100 nodes", p.Placements)
	}
}

func TestModelListReasons(t *testing.T) {
	nodes := []Node{gpuNode("a-01", "A100", 8), gpuNode("h-01", "H100", 8), gpuNode("l-01", "L40S", 8)}
	full := []Running{busy(90, "a-01", 2*time.Hour, 0, 1, 2, 3, 4, 5, 6, 7), busy(91, "h-01", time.Hour, 0, 1, 2, 3, 4, 5, 6, 7)}
	tests := []struct {
		name string
		snap *Snapshot
		code ReasonCode
		want string
	}{
		{
			name: "no free GPUs of any listed model",
			snap: snapshot(nodes, full, listJob(1, 2, "A100", "H100")),
			code: ReasonResources,
			want: "no node has 2 free GPUs of model A100 or H100",
		},
		{
			name: "no node has the listed models",
			snap: snapshot(nodes, nil, listJob(1, 2, "V100", "T4")),
			code: ReasonNoNodeMatches,
			want: "no node has GPUs of model V100 or T4",
		},
		{
			name: "too many GPUs for any listed model",
			snap: snapshot(nodes, nil, listJob(1, 16, "A100", "H100")),
			code: ReasonNoNodeMatches,
			want: "no node has 16 GPUs of model A100 or H100; the largest has 8",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustSchedule(tc.snap, Options{})
			checkPlan(t, tc.snap, p)
			pj, ok := pendingOf(p, 1)
			if !ok || pj.Reason.Code != tc.code || !strings.HasPrefix(pj.Reason.Message, tc.want) {
				t.Fatalf("job 1: %+v, want %s %q", pj.Reason, tc.code, tc.want)
			}
		})
	}

	// The backfill reservation is on the listed model free first: H100 in one hour.
	s := snapshot(nodes, full, listJob(1, 2, "A100", "H100"))
	p := mustSchedule(s, Options{})
	if len(p.Reservations) != 1 || p.Reservations[0].Nodes[0] != "h-01" || !p.Reservations[0].Start.Equal(t0.Add(time.Hour)) {
		t.Fatalf("reservations %+v, want h-01 at t0+1h", p.Reservations)
	}
}

func TestModelListAhead(t *testing.T) {
	// All A100 and H100 GPUs are busy; an L40S job is not behind a blocked A100-or-H100 job,
	// an H100 job is.
	nodes := []Node{gpuNode("a-01", "A100", 8), gpuNode("h-01", "H100", 8), gpuNode("l-01", "L40S", 2)}
	full := []Running{busy(90, "a-01", time.Hour, 0, 1, 2, 3, 4, 5, 6, 7), busy(91, "h-01", time.Hour, 0, 1, 2, 3, 4, 5, 6, 7),
		busy(92, "l-01", time.Hour, 0, 1)}
	s := snapshot(nodes, full, listJob(1, 2, "A100", "H100"), job(2, 2, "L40S"), job(3, 2, "H100"))
	p := mustSchedule(s, Options{ReservationDepth: -1})
	for id, ahead := range map[int64]int{2: 0, 3: 1} {
		pj, _ := pendingOf(p, id)
		if pj.Reason.Ahead != ahead {
			t.Errorf("job %d: %+v, want %d ahead", id, pj.Reason, ahead)
		}
	}
}

func TestModelListPreemption(t *testing.T) {
	// A batch job holds the only L40S node, out of the list; the urgent job's victim must
	// be on the A100 node.
	nodes := []Node{gpuNode("a-01", "A100", 8), gpuNode("l-01", "L40S", 8)}
	onA := busy(90, "a-01", 0, 0, 1, 2, 3, 4, 5, 6, 7)
	onA.Queue = "batch"
	onL := busy(91, "l-01", 0, 0, 1, 2, 3, 4, 5, 6, 7)
	onL.Queue = "batch"
	onL.Start = t0.Add(-time.Minute) // cheaper to stop, were its model listed
	urgent := listJob(1, 4, "A100", "H100")
	urgent.Queue = "urgent"
	s := snapshot(nodes, []Running{onA, onL}, urgent)
	p := mustSchedule(s, Options{})
	checkPlan(t, s, p)
	if len(p.Preemptions) != 1 || p.Preemptions[0].JobID != 90 {
		t.Fatalf("preemptions %+v, want job 90 on the A100 node", p.Preemptions)
	}
}

func TestListedModelsFastestFirstWhereSpeedsAreKnown(t *testing.T) {
	// A T4 node with 1 GPU free fits a 1-GPU job tightly; the H100 node has 8 free. By
	// fit the job takes the T4; knowing it runs 3x as fast on an H100, it takes the H100.
	nodes := []Node{gpuNode("h-01", "H100", 8), gpuNode("t-01", "T4", 2)}
	running := []Running{busy(90, "t-01", time.Hour, 0)}
	j := job(1, 1, "")
	j.Request.GPUModels = []string{"T4", "H100"}
	p := mustSchedule(snapshot(nodes, running, j), Options{})
	if a := allocOf(t, p, 1); a.Node != "t-01" {
		t.Fatalf("without speeds: %s; want the tight T4", a.Node)
	}
	j.Request.Speeds = map[string]float64{"H100": 3, "T4": 1}
	p = mustSchedule(snapshot(nodes, running, j), Options{})
	if a := allocOf(t, p, 1); a.Node != "h-01" {
		t.Fatalf("with speeds: %s; want the H100", a.Node)
	}
	// The fastest model that can start it now: with the H100s busy, the T4.
	busyH := busy(91, "h-01", time.Hour, 0, 1, 2, 3, 4, 5, 6, 7)
	p = mustSchedule(snapshot(nodes, append(running, busyH), j), Options{})
	if a := allocOf(t, p, 1); a.Node != "t-01" {
		t.Fatalf("H100s busy: %s; want the T4", a.Node)
	}
	// Equal speeds change nothing.
	j.Request.Speeds = map[string]float64{"H100": 2, "T4": 2}
	p = mustSchedule(snapshot(nodes, running, j), Options{})
	if a := allocOf(t, p, 1); a.Node != "t-01" {
		t.Fatalf("equal speeds: %s; want the tight T4", a.Node)
	}
	// In a small pool (the per-pool search), the same.
	q := queues()
	tr := q["train"]
	tr.Pools = []string{"p"}
	q["train"] = tr
	for i := range nodes {
		nodes[i].Labels = map[string]string{"pool": "p"}
	}
	others := []Node{}
	for i := range 20 {
		others = append(others, gpuNode(fmt.Sprintf("x-%02d", i), "H100", 8))
	}
	j.Request.Speeds = map[string]float64{"H100": 3, "T4": 1}
	s := snapshot(append(nodes, others...), running, j)
	s.Queues = q
	if a := allocOf(t, mustSchedule(s, Options{}), 1); a.Node != "h-01" {
		t.Fatalf("in a pool with speeds: %s; want the H100", a.Node)
	}
}
