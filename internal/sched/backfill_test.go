package sched

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// One node, 4 of 8 GPUs busy for two hours. An 8-GPU job must wait for them and gets a
// reservation at +2h; a 4-GPU job that ends within the hour backfills; one that would run
// three hours would delay the reservation and waits.
func TestBackfill(t *testing.T) {
	big := job(1, 8, "H100")
	short := job(2, 4, "H100")
	long := job(3, 4, "H100")
	long.TimeLimit = 3 * time.Hour
	s := snapshot([]Node{gpuNode("gpu-01", "H100", 8)}, []Running{busy(90, "gpu-01", 2*time.Hour, 0, 1, 2, 3)}, big, short, long)
	p := mustSchedule(s, Options{})

	if _, ok := placementOf(p, 2); !ok {
		t.Errorf("short job 2 did not backfill: %+v", p)
	}
	pj, _ := pendingOf(p, 1)
	if pj.Reason.Code != ReasonResources || !pj.EstimatedStart.Equal(t0.Add(2*time.Hour)) {
		t.Errorf("big job 1: %+v, want Resources starting at +2h", pj)
	}
	pj, _ = pendingOf(p, 3)
	if pj.Reason.Code != ReasonPriority || pj.Reason.Ahead != 1 || pj.Reason.BestNode != "gpu-01" {
		t.Errorf("long job 3: %+v, want Priority behind job 1 on gpu-01", pj.Reason)
	}
	// Job 3 runs after job 1: from +3h, when job 1's one-hour limit ends.
	if !pj.EstimatedStart.Equal(t0.Add(3 * time.Hour)) {
		t.Errorf("long job 3 estimated start %v, want +3h", pj.EstimatedStart.Sub(t0))
	}
	if len(p.Reservations) != 2 || p.Reservations[0].JobID != 1 || p.Reservations[0].Nodes[0] != "gpu-01" {
		t.Errorf("reservations = %+v", p.Reservations)
	}

	// Without reservations every job that fits starts, and the big one may starve.
	s.Pending = []Job{big, long}
	p = mustSchedule(s, Options{ReservationDepth: -1})
	if _, ok := placementOf(p, 3); !ok {
		t.Errorf("greedy: long job 3 should start: %+v", p)
	}
}

// Estimates stack: each blocked job starts after the reservations of those before it.
func TestEstimatedStarts(t *testing.T) {
	s := snapshot([]Node{gpuNode("gpu-01", "H100", 8), gpuNode("gpu-02", "H100", 8)},
		[]Running{busy(90, "gpu-01", time.Hour, 0, 1, 2, 3, 4, 5, 6, 7), busy(91, "gpu-02", 30*time.Minute, 0, 1, 2, 3, 4, 5, 6, 7)},
		job(1, 8, "H100"), job(2, 8, "H100"), job(3, 8, "H100"), job(4, 1, "H100"))
	p := mustSchedule(s, Options{})
	want := map[int64]time.Duration{1: 30 * time.Minute, 2: time.Hour, 3: 90 * time.Minute, 4: 2 * time.Hour}
	for id, d := range want {
		pj, ok := pendingOf(p, id)
		if !ok || !pj.EstimatedStart.Equal(t0.Add(d)) {
			t.Errorf("job %d: estimated start %v, want +%v", id, pj.EstimatedStart.Sub(t0), d)
		}
	}

	// A running job without a time limit never frees its GPUs: no estimate.
	s = snapshot([]Node{gpuNode("gpu-01", "H100", 8)}, []Running{busy(90, "gpu-01", 0, 0)}, job(1, 8, "H100"))
	p = mustSchedule(s, Options{})
	if pj, _ := pendingOf(p, 1); !pj.EstimatedStart.IsZero() {
		t.Errorf("estimate %v behind an unlimited job, want none", pj.EstimatedStart)
	}

	// Jobs beyond the reservation depth get no estimate.
	s = snapshot([]Node{gpuNode("gpu-01", "H100", 8)}, []Running{busy(90, "gpu-01", time.Hour, 0)},
		job(1, 8, "H100"), job(2, 8, "H100"))
	p = mustSchedule(s, Options{ReservationDepth: 1})
	if pj, _ := pendingOf(p, 2); !pj.EstimatedStart.IsZero() {
		t.Errorf("job beyond the depth has estimate %v", pj.EstimatedStart)
	}
}

// A job that fails to fit is not searched again for the same request, but a shorter one is,
// since it may backfill where the longer one could not.
func TestFailureCacheRespectsDuration(t *testing.T) {
	long := job(2, 4, "H100")
	long.TimeLimit = 3 * time.Hour
	short := job(3, 4, "H100")
	s := snapshot([]Node{gpuNode("gpu-01", "H100", 8)}, []Running{busy(90, "gpu-01", 2*time.Hour, 0, 1, 2, 3)},
		job(1, 8, "H100"), long, short)
	p := mustSchedule(s, Options{})
	if _, ok := placementOf(p, 3); !ok {
		t.Errorf("short job 3 should backfill after long job 2 failed: %+v", p)
	}
}

// The earliest starts a cycle keeps between reservations (earliestMemo) are those worked
// out afresh: a long run of reservations and placements on a busy cluster, each answer
// checked against one computed with an empty memo.
func TestEarliestMemo(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 1))
	var nodes []Node
	var running []Running
	for n := range 6 {
		name := fmt.Sprintf("gpu-%02d", n)
		nodes = append(nodes, gpuNode(name, "H100", 8))
		for g := 0; g < 8; g += 2 {
			if rng.IntN(4) > 0 {
				running = append(running, busy(int64(100+n*8+g), name, time.Duration(1+rng.IntN(8))*30*time.Minute, g, g+1))
			}
		}
	}
	s := snapshot(nodes, running)
	st := newState(s, t0.UnixNano())
	q := queues()["train"]
	hits := 0
	for i := range 300 {
		j := job(int64(i+1), []int{1, 2, 4, 8}[rng.IntN(4)], "H100")
		j.TimeLimit = time.Duration(1+rng.IntN(2)) * time.Hour
		d, bad := newDemand(st, &j, &q)
		if bad != "" {
			t.Fatal(bad)
		}
		kept := st.early
		st.early = nil
		wantC, wantT := st.earliestSingle(&d)
		st.early = kept
		if kept != nil {
			hits++
		}
		gotC, gotT := st.earliestSingle(&d)
		if gotC != wantC || gotT != wantT {
			t.Fatalf("request %d (%d GPUs, %v): kept answer %+v at %d, afresh %+v at %d", i, d.gpus, j.TimeLimit, gotC, gotT, wantC, wantT)
		}
		switch {
		case wantT == st.now && rng.IntN(2) == 0:
			// It fits now: place it, as a backfilled job would be; now and then as one
			// without a time limit, whose placement adds no event.
			st.take(wantC.node, wantC.group, st.pickGPUs(wantC.group, d.gpus), d.cpus, d.mem)
			if rng.IntN(3) > 0 {
				st.release(wantC, d.gpus, &d)
			}
		case wantT != forever:
			st.reserve(wantC, &d, wantT)
		}
	}
	if hits == 0 {
		t.Fatal("the memo was never used")
	}
}

// A cluster full of jobs without time limits gives a blocked job no start at all. The
// answer is kept for the request's shape until the state changes, so the many identical
// jobs behind it do not each walk every GPU group, and the plan is the one a search of
// every job afresh makes.
func TestNoStartIsKeptUntilTheStateChanges(t *testing.T) {
	var nodes []Node
	var running []Running
	for i := range 4 {
		name := fmt.Sprintf("gpu-%02d", i)
		nodes = append(nodes, gpuNode(name, "H100", 8))
		running = append(running, busy(int64(900+i), name, 0, 0, 1, 2, 3, 4, 5, 6, 7))
	}
	nodes = append(nodes, gpuNode("gpu-09", "A100", 8))
	var pending []Job
	for id := int64(1); id <= 40; id++ {
		j := job(id, 1+int(id%3), "H100")
		j.TimeLimit = 0
		if id%5 == 0 {
			j.Request.GPUModel = "" // any model: the A100s take it
		}
		pending = append(pending, j)
	}
	s := snapshot(nodes, running, pending...)
	p := mustSchedule(s, Options{})
	for _, pj := range p.Pending {
		if !pj.EstimatedStart.IsZero() {
			t.Errorf("job %d: estimated start %v, want none: every H100 is held without a limit", pj.JobID, pj.EstimatedStart)
		}
	}
	o, _ := Options{}.withDefaults()
	c := newCycle(s, t0, o, newState(s, t0.UnixNano()), nil)
	c.noCache = true
	if q := c.run(); !reflect.DeepEqual(decisions(p), decisions(q)) {
		t.Fatalf("keeping no-start answers changed the plan:\n%+v\nsearching afresh:\n%+v", decisions(p), decisions(q))
	}

	st := newState(s, t0.UnixNano())
	d, bad := newDemand(st, &pending[0], &Queue{Name: "train"})
	if bad != "" {
		t.Fatal(bad)
	}
	if _, at := st.earliestSingle(&d); at != forever {
		t.Fatalf("earliest start %d, want none", at)
	}
	st.noteNeverStarts(&d)
	if !st.neverStarts(&d) {
		t.Fatal("the answer was not kept")
	}
	other := d
	other.dur = int64(time.Hour)
	denied := d
	denied.deny = []bool{true, false}
	bigger := d
	bigger.gpus++
	for name, e := range map[string]*demand{"another duration": &other, "other models denied": &denied, "another size": &bigger} {
		if st.neverStarts(e) {
			t.Errorf("%s: the kept answer was used for it", name)
		}
	}
	// Any change to what starts rest on drops the answer: a reservation, then a placement.
	a100 := st.byName["gpu-09"]
	st.reserve(cand{a100, st.nodes[a100].groups[0]}, &bigger, st.now+int64(time.Hour))
	if st.neverStarts(&d) {
		t.Error("the answer outlived a reservation")
	}
	st.noteNeverStarts(&d)
	st.take(a100, st.nodes[a100].groups[0], []int{0}, 1, 1024)
	if st.neverStarts(&d) {
		t.Error("the answer outlived a placement")
	}
}
