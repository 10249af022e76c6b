package sched

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

// world applies plans cycle after cycle the way the server and the simulator do: victims
// are told to stop, placed jobs start, and the claims of the jobs still pending come back
// in the next snapshot. Stopping jobs end, and are requeued, when the test says so.
type world struct {
	t       *testing.T
	s       *Snapshot
	now     time.Time
	opts    Options
	planner *Planner // plans the same cycles; must agree with ScheduleWith
	// jobs holds each job's request, for requeuing it.
	jobs map[int64]Job
	// victimsOf holds, for each job still waiting, the victims chosen for it so far: no
	// job may be chosen twice for one job in one episode.
	victimsOf map[int64]map[int64]bool
}

func newWorld(t *testing.T, s *Snapshot, opts Options) *world {
	w := &world{t: t, s: s, now: t0, opts: opts, jobs: map[int64]Job{}, victimsOf: map[int64]map[int64]bool{}}
	for _, j := range s.Pending {
		w.jobs[j.ID] = j
	}
	var err error
	if w.planner, err = NewPlanner(opts); err != nil {
		t.Fatal(err)
	}
	s.NodesVersion = 1
	return w
}

// cycle plans, checks the plan and applies it.
func (w *world) cycle() Plan {
	w.t.Helper()
	p, err := ScheduleWith(w.s, w.now, w.opts)
	if err != nil {
		w.t.Fatal(err)
	}
	o, _ := w.opts.withDefaults()
	checkPlanAt(w.t, w.s, p, w.now, o.MinRuntime)
	if q := w.planner.Schedule(w.s, w.now); !reflect.DeepEqual(decisions(q), decisions(p)) {
		w.t.Fatalf("at %v the planner's plan differs from ScheduleWith's", w.now.Sub(t0))
	}
	for _, pr := range p.Preemptions {
		if w.victimsOf[pr.ForJob] == nil {
			w.victimsOf[pr.ForJob] = map[int64]bool{}
		}
		if w.victimsOf[pr.ForJob][pr.JobID] {
			w.t.Fatalf("at %v job %d preempted a second time for job %d", w.now.Sub(t0), pr.JobID, pr.ForJob)
		}
		w.victimsOf[pr.ForJob][pr.JobID] = true
		for i := range w.s.Running {
			if w.s.Running[i].ID == pr.JobID {
				w.s.Running[i].Preempting = true
			}
		}
	}
	for _, pl := range p.Placements {
		j := w.jobs[pl.JobID]
		w.s.Pending = slices.DeleteFunc(w.s.Pending, func(x Job) bool { return x.ID == j.ID })
		r := Running{ID: j.ID, Queue: j.Queue, Team: j.Team, User: j.User, Start: w.now, Allocs: pl.Allocs, Borrowing: pl.Borrowing}
		if j.TimeLimit > 0 {
			r.End = w.now.Add(j.TimeLimit)
		}
		w.s.Running = append(w.s.Running, r)
		delete(w.victimsOf, j.ID) // the episode is over
	}
	w.s.Claims = p.Claims
	return p
}

// endStopping ends the jobs told to stop and requeues them, as new attempts.
func (w *world) endStopping() {
	var keep []Running
	for _, r := range w.s.Running {
		if !r.Preempting {
			keep = append(keep, r)
			continue
		}
		j, ok := w.jobs[r.ID]
		if !ok {
			// Running from the start: rebuild its request from what it holds.
			j = Job{ID: r.ID, Queue: r.Queue, Team: r.Team, User: r.User, TimeLimit: time.Hour,
				Request: Request{CPUs: r.Allocs[0].CPUs, MemoryMB: r.Allocs[0].MemoryMB}}
			for _, a := range r.Allocs {
				j.Request.GPUs += len(a.GPUIndices)
			}
			if len(r.Allocs) > 1 {
				j.Request.Nodes, j.Request.GPUsPerNode = len(r.Allocs), len(r.Allocs[0].GPUIndices)
			}
			w.jobs[r.ID] = j
		}
		j.SubmitTime = w.now
		w.s.Pending = append(w.s.Pending, j)
	}
	w.s.Running = keep
}

// endFinished ends the jobs whose time limit has passed.
func (w *world) endFinished() {
	w.s.Running = slices.DeleteFunc(w.s.Running, func(r Running) bool { return !r.End.IsZero() && !r.End.After(w.now) })
}

func (w *world) running(id int64) (Running, bool) {
	for _, r := range w.s.Running {
		if r.ID == id {
			return r, true
		}
	}
	return Running{}, false
}

// Claims over many cycles of random clusters, with gangs, quotas and urgent work, and with
// no minimum runtime so that restarted victims are fair game: every plan keeps the claim
// invariants of checkPlan, no job is preempted twice for the same waiting job, and once
// nothing is stopping, no job with a claim waits for preemption.
func TestClaimsOverCycles(t *testing.T) {
	for seed := range uint64(30) {
		for _, opts := range []Options{{MinRuntime: -1}, {MinRuntime: -1, Placement: PlacementWorstFit}, {MinRuntime: -1, ReservationDepth: 3}} {
			t.Run(fmt.Sprintf("seed%d/%s-%d", seed, opts.Placement, opts.ReservationDepth), func(t *testing.T) {
				r := rand.New(rand.NewPCG(seed, 0xc1a1))
				s := genCluster(r, 8+r.IntN(30), r.IntN(150), 0.4+0.5*r.Float64(), true)
				if seed%2 == 1 {
					// Short of CPUs, so that claims and victims are about CPUs too.
					for i := range s.Nodes {
						s.Nodes[i].CPUs = 24 + r.IntN(24)
					}
				}
				w := newWorld(t, s, opts)
				claims := 0
				for cycle := range 12 {
					stopping := slices.ContainsFunc(w.s.Running, func(r Running) bool { return r.Preempting })
					live, _ := liveClaims(w.s, w.now)
					p := w.cycle()
					claims += len(p.Claims)
					if !stopping && len(p.Preemptions) == 0 {
						for id := range live {
							if pj, ok := pendingOf(p, id); ok && pj.Reason.Code == ReasonWaitingForPreemption {
								t.Fatalf("cycle %d: job %d waits on its claim with nothing stopping: %s", cycle, id, pj.Reason.Message)
							}
						}
					}
					// Victims take one cycle to stop, or two.
					if cycle%3 != 0 {
						w.endStopping()
					}
					w.now = w.now.Add(time.Minute)
					w.endFinished()
				}
				if seed == 0 && claims == 0 {
					t.Error("no claims made: the test exercises nothing")
				}
			})
		}
	}
}

// claimNodes are the nodes of the claim tests: gpu-01 and gpu-02 with 8 H100 each.
func claimNodes() []Node {
	return []Node{gpuNode("gpu-01", "H100", 8), gpuNode("gpu-02", "H100", 8)}
}

func inQueue(r Running, queue string) Running {
	r.Queue = queue
	return r
}

func urgentJob(id int64, gpus int) Job {
	j := job(id, gpus, "H100")
	j.Queue = "urgent"
	return j
}

// An urgent job preempts two batch jobs on gpu-01. While the second still stops, the GPUs
// the first freed go to no one: not to the first when it is requeued, not to a job of
// higher priority than the claimant, whose reason says what holds them. Once both victims
// are gone the urgent job starts on exactly its claim.
func TestClaimHoldsFreedGPUs(t *testing.T) {
	qs := queues()
	qs["vip"] = Queue{Name: "vip", Tier: 5}
	s := snapshot(claimNodes(), []Running{
		inQueue(busy(90, "gpu-01", 10*time.Hour, 0, 1, 2, 3), "batch"),
		inQueue(busy(91, "gpu-01", 10*time.Hour, 4, 5, 6, 7), "batch"),
		busy(92, "gpu-02", 10*time.Hour, 0, 1, 2, 3, 4, 5), // train: no one may stop it
	}, urgentJob(1, 8))
	s.Queues = qs
	w := newWorld(t, s, Options{})

	p := w.cycle()
	claim := []Claim{{JobID: 1, Allocs: []Alloc{{Node: "gpu-01", GPUIndices: []int{0, 1, 2, 3, 4, 5, 6, 7}, CPUs: 1, MemoryMB: 1024}}}}
	if len(p.Preemptions) != 2 || !reflect.DeepEqual(p.Claims, claim) {
		t.Fatalf("first cycle: preemptions %+v, claims %+v; want jobs 90 and 91 stopped and gpu-01 claimed", p.Preemptions, p.Claims)
	}

	// Job 90 has stopped and is pending again; 91 is still stopping. A vip job arrives.
	w.s.Running = slices.DeleteFunc(w.s.Running, func(r Running) bool { return r.ID == 90 })
	requeued := job(90, 4, "H100")
	requeued.Queue = "batch"
	vip := job(2, 4, "H100")
	vip.Queue = "vip"
	w.s.Pending = append(w.s.Pending, requeued, vip)
	w.jobs[90], w.jobs[2] = requeued, vip
	p = w.cycle()
	if len(p.Placements) != 0 || len(p.Preemptions) != 0 || !reflect.DeepEqual(p.Claims, claim) {
		t.Fatalf("while job 91 stops: placements %+v, preemptions %+v, claims %+v; want none, none, the same claim", p.Placements, p.Preemptions, p.Claims)
	}
	pj, _ := pendingOf(p, 1)
	want := Reason{Code: ReasonWaitingForPreemption, BestNode: "gpu-01", Victims: []int64{91}, Message: "waiting for 1 job to stop on gpu-01: 91"}
	if !reflect.DeepEqual(pj.Reason, want) {
		t.Errorf("urgent job:\n got %+v\nwant %+v", pj.Reason, want)
	}
	pj, _ = pendingOf(p, 2)
	want = Reason{Code: ReasonResources, BestNode: "gpu-01", Missing: map[string]int64{"gpus": 4},
		Message: "no node has 4 free GPUs of model H100: 4 on gpu-01 are held for job 1 until the jobs preempted for it stop"}
	if !reflect.DeepEqual(pj.Reason, want) {
		t.Errorf("vip job:\n got %+v\nwant %+v", pj.Reason, want)
	}

	// Job 91 has stopped too: the urgent job starts on its claim, and nothing else does.
	w.endStopping()
	p = w.cycle()
	if len(p.Placements) != 1 || !reflect.DeepEqual(p.Placements[0].Allocs, claim[0].Allocs) || len(p.Claims) != 0 {
		t.Fatalf("after the victims: placements %+v, claims %+v; want job 1 on its claim and no claims", p.Placements, p.Claims)
	}
}

// A claim names what its job will take, not merely a node: a job that another job's claim
// holds GPUs from starts elsewhere or waits, and it cannot reach them through backfill
// either. The backfill timeline counts the claimed GPUs as busy until the claimant's time
// limit after now, so the reservation of a blocked job lands there, not now.
func TestBackfillLeavesClaimedGPUs(t *testing.T) {
	stopping := inQueue(busy(91, "gpu-01", 10*time.Hour, 4, 5, 6, 7), "batch")
	stopping.Preempting = true
	s := snapshot(claimNodes(), []Running{stopping, busy(92, "gpu-02", 2*time.Hour, 0, 1, 2, 3, 4, 5, 6, 7)},
		urgentJob(1, 8), job(2, 8, "H100"), func() Job { j := job(3, 4, "H100"); j.TimeLimit = 10 * time.Minute; return j }())
	s.Claims = []Claim{{JobID: 1, Allocs: []Alloc{{Node: "gpu-01", GPUIndices: []int{0, 1, 2, 3, 4, 5, 6, 7}, CPUs: 1, MemoryMB: 1024}}}}
	p := mustSchedule(s, Options{})
	checkPlan(t, s, p)
	if len(p.Placements) != 0 {
		t.Fatalf("placed %+v on claimed or busy GPUs", p.Placements)
	}
	// Job 2 is expected on gpu-01 once the urgent job's hour is over, not before.
	if len(p.Reservations) == 0 || p.Reservations[0].JobID != 2 || !p.Reservations[0].Start.Equal(t0.Add(time.Hour)) ||
		!reflect.DeepEqual(p.Reservations[0].Nodes, []string{"gpu-01"}) {
		t.Errorf("reservations %+v; want job 2 on gpu-01 at +1h", p.Reservations)
	}
	// A job that would start now on gpu-01 but for the claim is expected there when the
	// claimant's hour is over, not now: the stopping job's GPUs go to the claim.
	long := job(4, 4, "H100")
	long.TimeLimit = 5 * time.Hour
	only := *s
	only.Pending = []Job{s.Pending[0], long}
	if pj, _ := pendingOf(mustSchedule(&only, Options{}), 4); !pj.EstimatedStart.Equal(t0.Add(time.Hour)) {
		t.Errorf("job 4 expected at %v, want +1h", pj.EstimatedStart.Sub(t0))
	}
	// Behind job 2, the short job is told it waits for the same resources.
	if pj, _ := pendingOf(p, 3); pj.Reason.Code != ReasonPriority || pj.Reason.BestNode != "gpu-01" {
		t.Errorf("short job 3: %+v; want Priority on gpu-01", pj.Reason)
	}
	// Alone, it is told what holds the GPUs.
	s.Pending = []Job{s.Pending[0], s.Pending[2]}
	p = mustSchedule(s, Options{})
	checkPlan(t, s, p)
	want := "no node has 4 free GPUs of model H100: 4 on gpu-01 are held for job 1 until the jobs preempted for it stop"
	if pj, _ := pendingOf(p, 3); pj.Reason.Code != ReasonResources || pj.Reason.Message != want {
		t.Errorf("short job 3 alone: %+v", pj.Reason)
	}
}

// A claim that can no longer be met is dropped, and its job searches afresh: here it
// preempts again, on the other node.
func TestClaimDroppedWhenBroken(t *testing.T) {
	stopping := inQueue(busy(91, "gpu-01", 10*time.Hour, 4, 5, 6, 7), "batch")
	stopping.Preempting = true
	claim := []Claim{{JobID: 1, Allocs: []Alloc{{Node: "gpu-01", GPUIndices: []int{0, 1, 2, 3, 4, 5, 6, 7}, CPUs: 1, MemoryMB: 1024}}}}
	onGPU02 := []Claim{{JobID: 1, Allocs: []Alloc{{Node: "gpu-02", GPUIndices: []int{0, 1, 2, 3, 4, 5, 6, 7}, CPUs: 1, MemoryMB: 1024}}}}
	for _, tt := range []struct {
		name    string
		breakIt func(s *Snapshot)
		victim  int64
		claims  []Claim
	}{
		{"node unschedulable", func(s *Snapshot) { s.Nodes[0].Schedulable = false }, 92, onGPU02},
		{"node gone", func(s *Snapshot) { s.Nodes = s.Nodes[1:] }, 92, onGPU02},
		{"GPU unhealthy", func(s *Snapshot) { s.Nodes[0].GPUs[2].Healthy = false }, 92, onGPU02},
		{"window for another team", func(s *Snapshot) {
			s.Reservations = []Reservation{{Name: "demo", Team: "nlp", Nodes: []string{"gpu-01"}, Start: t0, End: t0.Add(time.Hour)}}
		}, 92, onGPU02},
		// A job that is not stopping holds the CPUs the claim needs: it would wait for ever.
		{"CPUs held by a job not stopping", func(s *Snapshot) {
			s.Running = append(s.Running, Running{ID: 93, Queue: "train", Start: t0.Add(-time.Hour), Allocs: []Alloc{{Node: "gpu-01", CPUs: 64}}})
		}, 92, onGPU02},
		// Job 91 was never told to stop (the caller did not apply the plan): it is the
		// cheapest victim still, and no one has preempted it yet.
		{"held by a job not stopping", func(s *Snapshot) { s.Running[0].Preempting = false }, 91, claim},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := snapshot(claimNodes(), []Running{stopping, inQueue(busy(92, "gpu-02", 10*time.Hour, 0, 1, 2, 3, 4, 5, 6, 7), "batch")}, urgentJob(1, 8))
			s.Claims = claim
			tt.breakIt(s)
			p := mustSchedule(s, Options{})
			checkPlan(t, s, p)
			if !reflect.DeepEqual(p.Claims, tt.claims) || len(p.Preemptions) != 1 || p.Preemptions[0].JobID != tt.victim {
				t.Errorf("claims %+v, preemptions %+v; want job %d preempted and claims %+v", p.Claims, p.Preemptions, tt.victim, tt.claims)
			}
		})
	}
	t.Run("claimant no longer pending", func(t *testing.T) {
		s := snapshot(claimNodes(), []Running{stopping}, job(2, 4, "H100"))
		s.Claims = claim
		p := mustSchedule(s, Options{})
		if pl, ok := placementOf(p, 2); !ok || pl.Allocs[0].Node != "gpu-01" || len(p.Claims) != 0 {
			t.Errorf("the claim of a job not pending must be ignored: %+v", p)
		}
	})
}

// Two batch jobs stop for an urgent job on gpu-01. The first stops at once, is requeued and
// starts on gpu-02 while the second takes its time; a vip gang ahead of the urgent job
// waits all along, so the urgent job is not first in line for the GPUs. Nothing chooses
// the requeued job as a victim again for the urgent job (whose claim already covers what
// it needs), and the urgent job starts on its claim. Under the greedy policy no backfill
// reservation protects gpu-01 either: only the claim does.
func TestNoVictimPreemptedTwice(t *testing.T) {
	for _, opts := range []Options{{MinRuntime: -1}, {MinRuntime: -1, ReservationDepth: -1}} {
		t.Run(fmt.Sprintf("depth%d", opts.ReservationDepth), func(t *testing.T) { noVictimPreemptedTwice(t, opts) })
	}
}

func noVictimPreemptedTwice(t *testing.T, opts Options) {
	qs := queues()
	qs["vip"] = Queue{Name: "vip", Tier: 5}
	gang := gangJob(3, 2, 8, "H100")
	gang.Queue = "vip"
	s := snapshot(claimNodes(), []Running{
		inQueue(busy(90, "gpu-01", 10*time.Hour, 0, 1, 2, 3), "batch"),
		inQueue(busy(91, "gpu-01", 10*time.Hour, 4, 5, 6, 7), "batch"),
		busy(92, "gpu-02", 3*time.Hour, 0, 1, 2, 3),
	}, urgentJob(1, 8))
	s.Queues = qs
	w := newWorld(t, s, opts)
	w.jobs[90] = Job{ID: 90, Queue: "batch", Team: "vision", TimeLimit: time.Hour, Request: Request{GPUs: 4, GPUModel: "H100", CPUs: 1, MemoryMB: 1024}}

	if p := w.cycle(); len(p.Preemptions) != 2 {
		t.Fatalf("cycle 1: preemptions %+v, want jobs 90 and 91", p.Preemptions)
	}
	w.s.Pending = append(w.s.Pending, gang)
	w.jobs[3] = gang
	// Job 90 ends and is requeued; 91 stops only after three more cycles.
	var started bool
	for cycle := 2; cycle <= 6 && !started; cycle++ {
		w.now = w.now.Add(time.Minute)
		if cycle == 2 {
			w.s.Running = slices.DeleteFunc(w.s.Running, func(r Running) bool { return r.ID == 90 })
			w.s.Pending = append(w.s.Pending, w.jobs[90])
		}
		if cycle == 5 {
			w.endStopping()
		}
		p := w.cycle()
		if r, ok := w.running(90); ok && r.Allocs[0].Node != "gpu-02" {
			t.Fatalf("cycle %d: the requeued victim restarted on %s, in the claim", cycle, r.Allocs[0].Node)
		}
		if _, ok := w.running(90); cycle >= 2 && !ok {
			t.Fatalf("cycle %d: the requeued victim should restart on gpu-02's free GPUs: %+v", cycle, p)
		}
		if pl, ok := placementOf(p, 1); ok {
			if pl.Allocs[0].Node != "gpu-01" || cycle != 5 {
				t.Fatalf("cycle %d: urgent job placed on %+v", cycle, pl.Allocs)
			}
			started = true
		}
	}
	if !started {
		t.Fatal("the urgent job never started")
	}
}

// A gang preempts too: all its victims at once, on nodes of one class that together fit
// it, losing the least; nodes where it fits already need no victim. It waits for them
// with one claim over its nodes and starts there once they are gone.
func TestGangPreemption(t *testing.T) {
	other := labelled("n5", "H100", "535", "r1", "s1") // another driver: not with the others
	nodes := []Node{labelled("n1", "H100", "550", "r1", "s1"), labelled("n2", "H100", "550", "r1", "s1"),
		labelled("n3", "H100", "550", "r1", "s1"), labelled("n4", "H100", "550", "r1", "s1"), other}
	batch := func(id int64, node string, checkpoint time.Duration) Running {
		r := inQueue(busy(id, node, 10*time.Hour, 0, 1, 2, 3, 4, 5, 6, 7), "batch")
		if checkpoint > 0 {
			r.LastCheckpoint = t0.Add(-checkpoint)
		}
		return r
	}
	urgentGang := func() Job { j := gangJob(1, 2, 8, "H100"); j.Queue = "urgent"; return j }

	t.Run("on two nodes in one cycle, then placed", func(t *testing.T) {
		// n1 loses an hour, n2 and n3 a minute or two, n4 runs train work; n5 would lose
		// nothing but has another driver.
		s := snapshot(nodes, []Running{batch(90, "n1", 0), batch(91, "n2", 2*time.Minute), batch(92, "n3", time.Minute),
			busy(93, "n4", 10*time.Hour, 0, 1, 2, 3, 4, 5, 6, 7), func() Running { r := batch(94, "n5", 0); r.LastCheckpoint = t0; return r }()},
			urgentGang())
		w := newWorld(t, s, Options{})
		p := w.cycle()
		var victims []int64
		for _, pr := range p.Preemptions {
			victims = append(victims, pr.JobID)
		}
		want := []Claim{{JobID: 1, Allocs: []Alloc{
			{Node: "n2", GPUIndices: []int{0, 1, 2, 3, 4, 5, 6, 7}, CPUs: 1, MemoryMB: 1024},
			{Node: "n3", GPUIndices: []int{0, 1, 2, 3, 4, 5, 6, 7}, CPUs: 1, MemoryMB: 1024},
		}}}
		if !reflect.DeepEqual(victims, []int64{91, 92}) || !reflect.DeepEqual(p.Claims, want) {
			t.Fatalf("victims %v, claims %+v; want 91 and 92, n2 and n3 claimed", victims, p.Claims)
		}
		pj, _ := pendingOf(p, 1)
		if pj.Reason.Code != ReasonWaitingForPreemption || pj.Reason.Message != "waiting for 2 jobs to stop on n2 and n3: 91, 92" {
			t.Errorf("gang: %+v", pj.Reason)
		}
		// While they stop: no new victims, the same claim.
		p = w.cycle()
		if len(p.Preemptions) != 0 || len(p.Placements) != 0 || !reflect.DeepEqual(p.Claims, want) {
			t.Fatalf("while the victims stop: %+v", p)
		}
		// Gone and requeued: the gang starts on its claim; the victims find no room there.
		w.endStopping()
		p = w.cycle()
		pl, ok := placementOf(p, 1)
		if !ok || !reflect.DeepEqual(pl.Allocs, want[0].Allocs) || len(p.Placements) != 1 {
			t.Fatalf("after the victims: %+v", p)
		}
	})
	t.Run("nodes with room need no victims", func(t *testing.T) {
		s := snapshot(nodes, []Running{batch(90, "n1", 0), batch(91, "n2", 2*time.Minute), busy(93, "n4", 10*time.Hour, 0, 1, 2, 3, 4, 5, 6, 7),
			busy(94, "n5", 10*time.Hour, 0)}, urgentGang())
		// n3 is free; the gang needs one more node of its class.
		p := mustSchedule(s, Options{})
		checkPlan(t, s, p)
		want := []Claim{{JobID: 1, Allocs: []Alloc{
			{Node: "n2", GPUIndices: []int{0, 1, 2, 3, 4, 5, 6, 7}, CPUs: 1, MemoryMB: 1024},
			{Node: "n3", GPUIndices: []int{0, 1, 2, 3, 4, 5, 6, 7}, CPUs: 1, MemoryMB: 1024},
		}}}
		if len(p.Preemptions) != 1 || p.Preemptions[0].JobID != 91 || !reflect.DeepEqual(p.Claims, want) {
			t.Errorf("preemptions %+v, claims %+v; want only 91 stopped, n2 and n3 claimed", p.Preemptions, p.Claims)
		}
	})
	t.Run("protected work is left alone", func(t *testing.T) {
		young := batch(90, "n1", 0)
		young.Start = t0.Add(-5 * time.Minute)
		service := inQueue(busy(91, "n2", 10*time.Hour, 0, 1, 2, 3, 4, 5, 6, 7), "inference")
		service.Borrowing = true
		running := []Running{young, service, batch(92, "n3", 0), busy(93, "n4", 10*time.Hour, 0), busy(94, "n5", 10*time.Hour, 0)}
		s := snapshot(nodes, running, urgentGang())
		if p := mustSchedule(s, Options{}); len(p.Preemptions) != 0 || len(p.Claims) != 0 {
			t.Errorf("only n3 may be stopped, which is one node short: %+v", p)
		}
		// Without the minimum runtime the young job may go; the service never.
		p := mustSchedule(s, Options{MinRuntime: -1})
		checkPlanAt(t, s, p, t0, -1)
		var victims []int64
		for _, pr := range p.Preemptions {
			victims = append(victims, pr.JobID)
		}
		if !reflect.DeepEqual(victims, []int64{90, 92}) {
			t.Errorf("victims %v, want 90 and 92", victims)
		}
	})
	t.Run("not under research orders", func(t *testing.T) {
		s := snapshot(nodes, []Running{batch(90, "n1", 0), batch(91, "n2", 0)}, urgentGang())
		s.Nodes = s.Nodes[:2]
		for _, opts := range []Options{{Order: OrderFIFO}, {NoPreemption: true}} {
			if p := mustSchedule(s, opts); len(p.Preemptions) != 0 || len(p.Claims) != 0 {
				t.Errorf("%+v: preempted %+v", opts, p.Preemptions)
			}
		}
	})
}

// A claim holds its job's CPUs and memory too, even while the victims still hold theirs:
// otherwise a job that needs only CPUs could take them, and the claimant would find its
// GPUs free but not the CPUs to run with.
func TestClaimHoldsCPUs(t *testing.T) {
	stopping := inQueue(busy(91, "gpu-01", 10*time.Hour, 4, 5, 6, 7), "batch")
	stopping.Preempting = true
	urgent := urgentJob(1, 8)
	urgent.Request.CPUs = 56
	cpuOnly := job(2, 0, "")
	cpuOnly.Request.CPUs = 8
	s := snapshot(claimNodes()[:1], []Running{stopping}, urgent, cpuOnly)
	s.Claims = []Claim{{JobID: 1, Allocs: []Alloc{{Node: "gpu-01", GPUIndices: []int{0, 1, 2, 3, 4, 5, 6, 7}, CPUs: 56, MemoryMB: 1024}}}}
	p := mustSchedule(s, Options{})
	checkPlan(t, s, p)
	if len(p.Placements) != 0 {
		t.Errorf("placed %+v on the claim's CPUs", p.Placements)
	}
	// Once the victim is gone, the claimant starts; 8 CPUs are left, for the other job.
	s.Running = nil
	p = mustSchedule(s, Options{})
	checkPlan(t, s, p)
	if len(p.Placements) != 2 || p.Placements[0].JobID != 1 {
		t.Errorf("placements %+v; want both jobs, the claimant first", p.Placements)
	}
}

// Within the cycle that makes a claim, the jobs below see the victims' GPUs as the
// claimant's until its time limit, and not, besides, as freed at the victims' own limits.
func TestNewClaimInTimeline(t *testing.T) {
	h, h2 := job(2, 8, "H100"), job(3, 8, "H100")
	h.TimeLimit = 5 * time.Hour
	s := snapshot(claimNodes(), []Running{
		inQueue(busy(90, "gpu-01", 2*time.Hour, 0, 1, 2, 3, 4, 5, 6, 7), "batch"),
		busy(91, "gpu-02", 10*time.Hour, 0, 1, 2, 3, 4, 5, 6, 7),
	}, urgentJob(1, 8), h, h2)
	p := mustSchedule(s, Options{})
	checkPlan(t, s, p)
	if len(p.Claims) != 1 || len(p.Preemptions) != 1 {
		t.Fatalf("claims %+v, preemptions %+v; want job 90 preempted for job 1", p.Claims, p.Preemptions)
	}
	// Job 2 follows the urgent job's hour on gpu-01 and runs five; job 3 follows it.
	for id, at := range map[int64]time.Duration{2: time.Hour, 3: 6 * time.Hour} {
		if pj, _ := pendingOf(p, id); !pj.EstimatedStart.Equal(t0.Add(at)) {
			t.Errorf("job %d expected at %v, want +%v", id, pj.EstimatedStart.Sub(t0), at)
		}
	}
}

// A gang that a claim keeps from nodes it would fit is told so, in one sentence.
func TestGangToldOfClaim(t *testing.T) {
	stopping := inQueue(busy(91, "gpu-01", 10*time.Hour, 4, 5, 6, 7), "batch")
	stopping.Preempting = true
	gang := gangJob(2, 2, 4, "H100")
	s := snapshot(claimNodes(), []Running{stopping, busy(92, "gpu-02", 10*time.Hour, 0, 1, 2, 3, 4, 5, 6, 7)}, urgentJob(1, 8), gang)
	s.Claims = []Claim{{JobID: 1, Allocs: []Alloc{{Node: "gpu-01", GPUIndices: []int{0, 1, 2, 3, 4, 5, 6, 7}, CPUs: 1, MemoryMB: 1024}}}}
	p := mustSchedule(s, Options{})
	checkPlan(t, s, p)
	want := "the job needs 2 nodes with 4 GPUs of model H100 free each, of one model and driver; 0 have them now, " +
		"and 1 more would but for the GPUs held there for job 1 until the jobs preempted for it stop"
	if pj, _ := pendingOf(p, 2); pj.Reason.Code != ReasonResources || pj.Reason.Message != want {
		t.Errorf("gang: %+v", pj.Reason)
	}
}

// A job that takes any model passed admission on some model, but its claim fixes one:
// when its team's quota no longer allows that model, the claim lapses and the job waits
// on the quota.
func TestClaimLapsesOverQuota(t *testing.T) {
	nodes := []Node{gpuNode("gpu-01", "H100", 8), gpuNode("gpu-02", "A100", 8)}
	anyModel := urgentJob(1, 8)
	anyModel.Request.GPUModel = ""
	s := snapshot(nodes, []Running{busy(90, "gpu-02", 10*time.Hour, 0, 1, 2, 3, 4, 5, 6, 7)}, anyModel)
	s.Claims = []Claim{{JobID: 1, Allocs: []Alloc{{Node: "gpu-01", GPUIndices: []int{0, 1, 2, 3, 4, 5, 6, 7}, CPUs: 1, MemoryMB: 1024}}}}
	s.Teams = map[string]Team{"vision": {Quota: map[string]Quota{"H100": {Guaranteed: 4, Limit: 4}}}}
	p := mustSchedule(s, Options{})
	checkPlan(t, s, p)
	if pj, _ := pendingOf(p, 1); pj.Reason.Code != ReasonQuotaExceeded || len(p.Claims) != 0 || len(p.Placements) != 0 {
		t.Errorf("plan %+v", p)
	}
	// With room in the quota it starts on its claim.
	s.Teams = nil
	if pl, ok := placementOf(mustSchedule(s, Options{}), 1); !ok || pl.Allocs[0].Node != "gpu-01" {
		t.Errorf("job 1 not placed on its claim: %+v", pl)
	}
}
