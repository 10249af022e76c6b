package sched

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// countResv holds gpus H100 GPUs for team vision from start to end after t0.
func countResv(gpus int, start, end time.Duration) Reservation {
	return Reservation{ID: 4, Name: "resv-4", Team: "vision", GPUs: gpus, Model: "H100", Start: t0.Add(start), End: t0.Add(end)}
}

func teamJob(id int64, team string, gpus int, limit time.Duration) Job {
	j := job(id, gpus, "H100")
	j.Team, j.TimeLimit = team, limit
	return j
}

// During an open window, another team's jobs take only what the team does not need: of
// 16 free H100s with 4 held, a 12-GPU job of nlp starts but a further 2-GPU one waits,
// naming the hold in one sentence; the team's own job then takes the held GPUs.
func TestHoldDuringWindow(t *testing.T) {
	nodes := []Node{gpuNode("gpu-01", "H100", 8), gpuNode("gpu-02", "H100", 8)}
	big := teamJob(1, "nlp", 8, time.Hour)
	big2 := teamJob(2, "nlp", 4, time.Hour)
	small := teamJob(3, "nlp", 2, time.Hour)
	s := snapshot(nodes, nil, big, big2, small)
	s.Reservations = []Reservation{countResv(4, -time.Hour, 6*time.Hour)}
	p := mustSchedule(s, Options{})
	for _, id := range []int64{1, 2} {
		if _, ok := placementOf(p, id); !ok {
			t.Fatalf("job %d of nlp within the spare capacity did not start: %+v", id, p.Pending)
		}
	}
	pj, ok := pendingOf(p, 3)
	if !ok {
		t.Fatalf("nlp's job 3 took GPUs held for vision: %+v", p.Placements)
	}
	const want = "4 of the 4 free H100 GPUs are held for team vision by reservation 4 until 15:00"
	if pj.Reason.Code != ReasonReserved || pj.Reason.Team != "vision" || pj.Reason.Message != want {
		t.Errorf("reason %+v; want Reserved for team vision: %q", pj.Reason, want)
	}

	// The team's job uses the held GPUs, even behind the others.
	own := teamJob(4, "vision", 4, 10*time.Hour)
	s = snapshot(nodes, nil, big, big2, small, own)
	s.Reservations = []Reservation{countResv(4, -time.Hour, 6*time.Hour)}
	p = mustSchedule(s, Options{})
	if _, ok := placementOf(p, 4); !ok {
		t.Errorf("vision's job did not get its held GPUs: %+v", p.Pending)
	}
	if _, ok := placementOf(p, 3); ok {
		t.Errorf("nlp's job 3 started: nothing was free after vision's")
	}
}

// What the team already runs on matching GPUs counts toward the hold: with 2 of its 4 in
// use, only 2 more are kept, and other teams may take the rest.
func TestHoldCountsTeamUse(t *testing.T) {
	nodes := []Node{gpuNode("gpu-01", "H100", 8)}
	running := []Running{busy(10, "gpu-01", 3*time.Hour, 0, 1)} // vision's, 2 GPUs
	other := teamJob(1, "nlp", 4, time.Hour)
	s := snapshot(nodes, running, other)
	s.Reservations = []Reservation{countResv(4, -time.Hour, 6*time.Hour)}
	p := mustSchedule(s, Options{})
	if _, ok := placementOf(p, 1); !ok {
		t.Fatalf("nlp's 4-GPU job did not start with 6 free and 2 still held: %+v", p.Pending)
	}
	s = snapshot(nodes, running, teamJob(2, "nlp", 5, time.Hour))
	s.Reservations = []Reservation{countResv(4, -time.Hour, 6*time.Hour)}
	p = mustSchedule(s, Options{})
	if pj, ok := pendingOf(p, 2); !ok || !strings.HasPrefix(pj.Reason.Message, "2 of the 6 free H100 GPUs are held") {
		t.Errorf("nlp's 5-GPU job: %+v; want pending, 2 of the 6 free held", pj)
	}
}

// Before the window, a job of another team whose time limit ends before Start may use the
// held GPUs; one that would run into the window may take only what the window will not
// need, like a job near a maintenance window. Its estimated start is the window's end.
func TestHoldBeforeWindow(t *testing.T) {
	nodes := []Node{gpuNode("gpu-01", "H100", 8)}
	resv := []Reservation{countResv(6, 2*time.Hour, 5*time.Hour)}

	short := teamJob(1, "nlp", 8, time.Hour)
	s := snapshot(nodes, nil, short)
	s.Reservations = resv
	if p := mustSchedule(s, Options{}); len(p.Placements) != 1 {
		t.Fatalf("a job ending before the window did not start: %+v", p.Pending)
	}

	long := teamJob(2, "nlp", 4, 3*time.Hour)
	s = snapshot(nodes, nil, long)
	s.Reservations = resv
	p := mustSchedule(s, Options{})
	pj, ok := pendingOf(p, 2)
	if !ok {
		t.Fatalf("a job running into the window took GPUs it needs: %+v", p.Placements)
	}
	if pj.Reason.Code != ReasonReserved || !strings.Contains(pj.Reason.Message, "from 11:00 until 14:00") ||
		!strings.Contains(pj.Reason.Message, "ends before 11:00") {
		t.Errorf("reason %+v; want Reserved naming the window", pj.Reason)
	}
	if !pj.EstimatedStart.Equal(t0.Add(5 * time.Hour)) {
		t.Errorf("estimated start %v; want the window's end, %v", pj.EstimatedStart, t0.Add(5*time.Hour))
	}

	// 2 GPUs are not needed by the window: a 2-GPU job may run into it.
	s = snapshot(nodes, nil, teamJob(3, "nlp", 2, 3*time.Hour))
	s.Reservations = resv
	if p := mustSchedule(s, Options{}); len(p.Placements) != 1 {
		t.Errorf("a 2-GPU job within what the window leaves did not start: %+v", p.Pending)
	}

	// A running job of nlp that ends before the start gives its GPUs back in time: the
	// long job still waits, as 6 are needed and only 4 are free now.
	s = snapshot(nodes, []Running{{ID: 20, Queue: "train", Team: "nlp", Start: t0, End: t0.Add(time.Hour),
		Allocs: []Alloc{{Node: "gpu-01", GPUIndices: []int{0, 1, 2, 3}, CPUs: 1, MemoryMB: 1024}}}}, long)
	s.Reservations = resv
	if p := mustSchedule(s, Options{}); len(p.Placements) != 0 {
		t.Errorf("the long job took GPUs the window needs: %+v", p.Placements)
	}
}

// Holds match their model and pool only; unknown models hold nothing; holds that have
// ended hold nothing.
func TestHoldScopeAndExpiry(t *testing.T) {
	a100 := gpuNode("gpu-a", "A100", 8)
	h100 := gpuNode("gpu-h", "H100", 8)
	h100.Labels = map[string]string{"pool": "train"}
	nodes := []Node{a100, h100}
	j := job(1, 8, "A100")
	j.Team = "nlp"
	for _, tc := range []struct {
		name  string
		r     Reservation
		start bool
	}{
		{"other model", countResv(8, -time.Hour, time.Hour), true},
		{"any model", Reservation{Team: "vision", GPUs: 9, Start: t0.Add(-time.Hour), End: t0.Add(time.Hour)}, false},
		{"other pool", Reservation{Team: "vision", GPUs: 8, Pool: "train", Start: t0.Add(-time.Hour), End: t0.Add(time.Hour)}, true},
		{"ended", Reservation{Team: "vision", GPUs: 16, Start: t0.Add(-2 * time.Hour), End: t0}, true},
		{"unknown model", Reservation{Team: "vision", GPUs: 8, Model: "B200", Start: t0.Add(-time.Hour), End: t0.Add(time.Hour)}, true},
		{"own team", Reservation{Team: "nlp", GPUs: 16, Start: t0.Add(-time.Hour), End: t0.Add(time.Hour)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := snapshot(nodes, nil, j)
			s.Reservations = []Reservation{tc.r}
			p := mustSchedule(s, Options{})
			if started := len(p.Placements) == 1; started != tc.start {
				t.Errorf("started %v, want %v: %+v", started, tc.start, p.Pending)
			}
		})
	}
}

// At End the hold lets go: the same job blocked at t0 starts once the window is over.
func TestHoldExpires(t *testing.T) {
	nodes := []Node{gpuNode("gpu-01", "H100", 8)}
	s := snapshot(nodes, nil, teamJob(1, "nlp", 8, time.Hour))
	s.Reservations = []Reservation{countResv(8, -time.Hour, time.Hour)}
	if p := mustSchedule(s, Options{}); len(p.Placements) != 0 {
		t.Fatalf("started during the window: %+v", p.Placements)
	}
	p, err := ScheduleWith(s, t0.Add(time.Hour), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Placements) != 1 {
		t.Errorf("not started at the window's end: %+v", p.Pending)
	}
}

// A hold never preempts other teams' running jobs, and a higher tier of another team
// does not preempt its way onto held GPUs; the team's running jobs are untouched either way.
func TestHoldNoPreemption(t *testing.T) {
	nodes := []Node{gpuNode("gpu-01", "H100", 8)}
	running := []Running{{ID: 10, Queue: "train", Team: "nlp", Start: t0.Add(-time.Hour), End: t0.Add(5 * time.Hour),
		Allocs: []Alloc{{Node: "gpu-01", GPUIndices: []int{0, 1, 2, 3, 4, 5}, CPUs: 1, MemoryMB: 1024}}}}
	own := teamJob(1, "vision", 4, time.Hour)
	s := snapshot(nodes, running, own)
	s.Reservations = []Reservation{countResv(4, -time.Hour, 6*time.Hour)}
	p := mustSchedule(s, Options{})
	if len(p.Preemptions) != 0 || len(p.Placements) != 0 {
		t.Errorf("placed %+v, preempted %+v for a hold; holds do not preempt", p.Placements, p.Preemptions)
	}
	// It waits for nlp's job to end, and is told when.
	if pj, _ := pendingOf(p, 1); !pj.EstimatedStart.Equal(t0.Add(5 * time.Hour)) {
		t.Errorf("vision's job: %+v; want an estimated start when nlp's job ends (+5h)", pj)
	}

	// Another team's urgent job would preempt the batch job for free GPUs, but not for
	// the held ones.
	running[0].Queue = "batch"
	if p := mustSchedule(snapshot(nodes, running, func() Job { j := teamJob(2, "ml", 4, time.Hour); j.Queue = "urgent"; return j }()), Options{}); len(p.Preemptions) != 1 {
		t.Fatalf("without the hold the urgent job preempts nothing (%+v): the case below proves nothing", p)
	}

	urgent := teamJob(2, "ml", 4, time.Hour)
	urgent.Queue = "urgent"
	s = snapshot(nodes, running, urgent)
	s.Reservations = []Reservation{countResv(4, -time.Hour, 6*time.Hour)}
	p = mustSchedule(s, Options{})
	if len(p.Preemptions) != 0 || len(p.Placements) != 0 {
		t.Errorf("urgent job of another team: placements %+v, preemptions %+v; want neither onto held GPUs", p.Placements, p.Preemptions)
	}
}

// Two holds that may take the same GPUs are met from different ones: with 6 and 4 of 16
// H100s held, for two teams, and the second of any model, a third team may take 6, not 7.
func TestHoldsAddUp(t *testing.T) {
	nodes := []Node{gpuNode("gpu-01", "H100", 8), gpuNode("gpu-02", "H100", 8)}
	resv := []Reservation{
		countResv(6, -time.Hour, 6*time.Hour),
		{ID: 5, Team: "audio", GPUs: 4, Start: t0.Add(-time.Hour), End: t0.Add(6 * time.Hour)},
	}
	for _, tc := range []struct {
		gpus  int
		start bool
	}{{6, true}, {7, false}} {
		s := snapshot(nodes, nil, teamJob(1, "nlp", tc.gpus, time.Hour))
		s.Reservations = resv
		p := mustSchedule(s, Options{})
		if started := len(p.Placements) == 1; started != tc.start {
			t.Errorf("%d GPUs: started %v, want %v (%+v)", tc.gpus, started, tc.start, p.Pending)
		}
		if pj, ok := pendingOf(p, 1); ok && !strings.HasPrefix(pj.Reason.Message, "10 of the 16 free GPUs are held for team audio by reservation 5") {
			t.Errorf("reason %q; want the 10 held GPUs named", pj.Reason.Message)
		}
	}
}

// GPUs on a node reserved whole for another team, or going into maintenance, during the
// window are no use to the team: its hold is met from the other nodes, and other teams'
// jobs may use those GPUs as the node's own window allows.
func TestHoldBesideNodeWindows(t *testing.T) {
	nodes := []Node{gpuNode("gpu-01", "H100", 8), gpuNode("gpu-02", "H100", 8)}
	hold := countResv(6, -time.Hour, 6*time.Hour)

	// audio holds gpu-01 whole: nlp's 4 GPUs would leave 4 on gpu-02 for vision's 6.
	s := snapshot(nodes, nil, teamJob(1, "nlp", 4, 30*time.Minute))
	s.Reservations = []Reservation{hold, {Name: "whole", Team: "audio", Nodes: []string{"gpu-01"}, Start: t0, End: t0.Add(6 * time.Hour)}}
	if p := mustSchedule(s, Options{}); len(p.Placements) != 0 {
		t.Errorf("nlp's job took %+v; only gpu-02's 8 can be vision's", p.Placements)
	}

	// gpu-01 goes into maintenance in an hour: short jobs of nlp may fill it, but not
	// take gpu-02's GPUs from vision.
	s = snapshot(nodes, nil, teamJob(1, "nlp", 4, 30*time.Minute), teamJob(2, "nlp", 4, 30*time.Minute), teamJob(3, "nlp", 4, 30*time.Minute))
	s.Reservations = []Reservation{hold}
	s.Maintenance = []Maintenance{{Node: "gpu-01", Start: t0.Add(time.Hour)}}
	p := mustSchedule(s, Options{})
	if len(p.Placements) != 2 || p.Placements[0].Allocs[0].Node != "gpu-01" || p.Placements[1].Allocs[0].Node != "gpu-01" {
		t.Errorf("placements %+v; want jobs 1 and 2 on gpu-01 and job 3 waiting", p.Placements)
	}
}

// checkHolds verifies, for each reservation by GPU count open at now that no other open
// one falls within, that a plan which gives another team's job any of its GPUs leaves as
// many of them free as the team still lacks. Its GPUs are the healthy ones of its model
// and pool on schedulable nodes that no maintenance window or other team's reservation
// closes during it; free means held by no running job, live claim or placement.
func checkHolds(t *testing.T, s *Snapshot, p Plan, now time.Time, claimed map[gpuKey]int64) {
	t.Helper()
	within := func(a, b Reservation) bool { // a's GPUs are among b's
		return (b.Model == "" || b.Model == a.Model) && (b.Pool == "" || b.Pool == a.Pool)
	}
	jobs := map[int64]*Job{}
	for i := range s.Pending {
		jobs[s.Pending[i].ID] = &s.Pending[i]
	}
	for hi, h := range s.Reservations {
		if h.GPUs == 0 || len(h.Nodes) > 0 || now.Before(h.Start) || !now.Before(h.End) {
			continue
		}
		nested := false
		for oi, o := range s.Reservations {
			nested = nested || (oi != hi && o.GPUs > 0 && len(o.Nodes) == 0 && !now.Before(o.Start) && now.Before(o.End) && within(o, h))
		}
		if nested {
			continue
		}
		theirs := map[gpuKey]bool{}
		for _, n := range s.Nodes {
			closed := !n.Schedulable || n.HealthFailed
			for _, m := range s.Maintenance {
				closed = closed || (m.Node == n.Name && m.Start.Before(h.End) && (m.End.IsZero() || h.Start.Before(m.End)))
			}
			for _, w := range s.Reservations {
				closed = closed || (w.Team != h.Team && slices.Contains(w.Nodes, n.Name) && w.Start.Before(h.End) && h.Start.Before(w.End))
			}
			if closed || (h.Pool != "" && n.Labels["pool"] != h.Pool) {
				continue
			}
			for _, g := range n.GPUs {
				if g.Healthy && !g.Held && (h.Model == "" || g.Model == h.Model) {
					theirs[gpuKey{n.Name, g.Index}] = true
				}
			}
		}
		busy := map[gpuKey]bool{}
		used := 0
		for _, r := range s.Running {
			for _, a := range r.Allocs {
				for _, i := range a.GPUIndices {
					k := gpuKey{a.Node, i}
					if theirs[k] && r.Team == h.Team && !r.Preempting && a.GPUShare == 0 {
						used++
					}
					busy[k] = true
				}
			}
		}
		for k := range claimed {
			busy[k] = true
		}
		foreign := 0
		for _, pl := range p.Placements {
			j := jobs[pl.JobID]
			for _, a := range pl.Allocs {
				for _, i := range a.GPUIndices {
					k := gpuKey{a.Node, i}
					if !theirs[k] || busy[k] {
						continue // not the hold's, or a share of a GPU already taken
					}
					busy[k] = true
					if j.Team == h.Team {
						used++
					} else {
						foreign++
					}
				}
			}
		}
		free := 0
		for k := range theirs {
			if !busy[k] {
				free++
			}
		}
		if need := max(0, h.GPUs-used); foreign > 0 && free < need {
			t.Fatalf("reservation %d holds %d GPUs for team %s, which uses %d: other teams took %d, leaving %d free of the %d it lacks",
				h.ID, h.GPUs, h.Team, used, foreign, free, need)
		}
	}
}
