package sched

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// batchJob is a pending job of the preemptible batch queue, submitted at t0 minus ago.
func batchJob(id int64, gpus int, ago time.Duration) Job {
	j := job(id, gpus, "H100")
	j.Queue, j.SubmitTime, j.TimeLimit = "batch", t0.Add(-ago), 0
	return j
}

// batchRun is a batch job running on node n1 since t0 minus ran, on the given GPUs, with
// the service that gives it (and none before).
func batchRun(id int64, ran time.Duration, idx ...int) Running {
	r := busy(id, "n1", 0, idx...)
	r.Queue, r.Start = "batch", t0.Add(-ran)
	r.AttainedService = float64(len(idx)) * ran.Seconds()
	return r
}

func victimsOf(p Plan) []int64 {
	var ids []int64
	for _, pr := range p.Preemptions {
		ids = append(ids, pr.JobID)
	}
	return ids
}

// The LAS golden scenario, cycle by cycle as the server would see it: a short experiment
// overtakes a long training by preemption, and the training, once it has waited its
// starvation limit, is promoted and takes the node back from a job that has sunk.
func TestLASShortOvertakesLongAndNothingStarves(t *testing.T) {
	las := Options{Order: OrderLAS}
	node := []Node{gpuNode("n1", "H100", 8)}

	// 1. A training has had the whole node for two hours: 57,600 GPU-seconds, LAS queue
	// 2. A one-GPU experiment arrives: it has had nothing, queue 0, and preempts it.
	long := batchRun(1, 2*time.Hour, 0, 1, 2, 3, 4, 5, 6, 7)
	short := batchJob(2, 1, 0)
	p := mustSchedule(snapshot(node, []Running{long}, short), las)
	if got := victimsOf(p); !reflect.DeepEqual(got, []int64{1}) {
		t.Fatalf("LAS preempted %v, want [1]; pending %+v", got, p.Pending)
	}
	if !strings.Contains(p.Preemptions[0].Reason, "less GPU time") {
		t.Errorf("reason %q does not say why", p.Preemptions[0].Reason)
	}
	if pj, _ := pendingOf(p, 2); pj.Reason.Code != ReasonWaitingForPreemption || pj.Priority.LASQueue != 0 {
		t.Errorf("short job %+v, want WaitingForPreemption in LAS queue 0", pj)
	}
	// The same snapshot under the default policy and FIFO: the experiment waits behind.
	for _, o := range []Options{{}, {Order: OrderFIFO}} {
		if q := mustSchedule(snapshot(node, []Running{long}, short), o); len(q.Preemptions) != 0 {
			t.Errorf("order %q preempted %v", o.Order, victimsOf(q))
		}
	}

	// 2. A minute later the training has stopped and is requeued; the experiment starts on
	// its claim, and the training waits in queue 2.
	now := t0.Add(time.Minute)
	requeued := batchJob(1, 1, 3*time.Hour)
	requeued.Request.GPUs = 8
	requeued.AttainedService, requeued.LastRun, requeued.Requeued = long.AttainedService, 2*time.Hour, now
	s := snapshot(node, nil, requeued, short)
	s.Claims = p.Claims
	p, _ = ScheduleWith(s, now, las)
	if _, ok := placementOf(p, 2); !ok {
		t.Fatalf("short job not placed on its claim: %+v", p.Pending)
	}
	if pj, _ := pendingOf(p, 1); pj.Priority.LASQueue != 2 {
		t.Errorf("requeued training in LAS queue %d, want 2", pj.Priority.LASQueue)
	}

	// 3. Other work takes the node: a job that has now run for three hours on it has sunk
	// to queue 2 too, where the training cannot preempt it.
	other := batchRun(3, 3*time.Hour, 0, 1, 2, 3, 4, 5, 6, 7)
	at := func(d time.Duration) Plan {
		p, _ := ScheduleWith(snapshot(node, []Running{other}, requeued), requeued.Requeued.Add(d), las)
		return p
	}
	// Fifteen hours on (under 8 × its two-hour run) the training still waits, and the
	// plan says when to look again: when it reaches the limit.
	p = at(15 * time.Hour)
	if len(p.Preemptions) != 0 {
		t.Fatalf("preempted %v before the starvation limit", victimsOf(p))
	}
	if want := requeued.Requeued.Add(16 * time.Hour); !p.Recheck.Equal(want) {
		t.Errorf("recheck at %v, want the starvation limit %v", p.Recheck, want)
	}
	// 4. At sixteen hours it is promoted to queue 0 and preempts the job that sank.
	p = at(16 * time.Hour)
	if got := victimsOf(p); !reflect.DeepEqual(got, []int64{3}) {
		t.Fatalf("promoted training preempted %v, want [3]; pending %+v", got, p.Pending)
	}
	if pj, _ := pendingOf(p, 1); pj.Priority.LASQueue != 0 || pj.Reason.Code != ReasonWaitingForPreemption {
		t.Errorf("promoted training %+v, want LAS queue 0, waiting for preemption", pj)
	}

	// 5. Once it runs, its promoted attempt counts service from its own start: five
	// minutes in (2,400 GPU-seconds) it is in queue 0, and a fresh job cannot take the
	// node back, MinRuntime or not.
	promoted := batchRun(1, 5*time.Minute, 0, 1, 2, 3, 4, 5, 6, 7)
	promoted.AttainedService += requeued.AttainedService
	promoted.LastRun, promoted.Requeued = requeued.LastRun, promoted.Start.Add(-16*time.Hour)
	fresh := batchJob(4, 1, 0)
	on8, _ := Options{Order: OrderLAS}.withDefaults()
	if p := mustSchedule(snapshot(node, []Running{promoted}, fresh), Options{Order: OrderLAS, MinRuntime: -1}); len(p.Preemptions) != 0 {
		t.Errorf("a fresh job preempted %v, the promoted attempt in queue 0", victimsOf(p))
	}
	// Five minutes later (4,800 GPU-seconds) it has sunk to queue 1 and yields.
	promoted.Start, promoted.Requeued = promoted.Start.Add(-5*time.Minute), promoted.Requeued.Add(-5*time.Minute)
	if got := (&on8).runningService(&promoted, 8, t0.UnixNano()); got != 4800 {
		t.Fatalf("promoted attempt's service %v, want 4800", got)
	}
	if p := mustSchedule(snapshot(node, []Running{promoted}, fresh), Options{Order: OrderLAS, MinRuntime: -1}); !reflect.DeepEqual(victimsOf(p), []int64{1}) {
		t.Errorf("a fresh job preempted %v, want the promoted attempt now in queue 1", victimsOf(p))
	}
}

// LAS stays below the tier order and within preemptible work: no victim inside its
// minimum runtime, of a queue that is not preemptible, or of a higher tier.
func TestLASPreemptsOnlyWhereAllowed(t *testing.T) {
	node := []Node{gpuNode("n1", "H100", 8)}
	short := batchJob(9, 8, 0)
	tests := []struct {
		name string
		run  Running
		job  Job
	}{
		{"inside MinRuntime", batchRun(1, 5*time.Minute, 0, 1, 2, 3, 4, 5, 6, 7), short},
		{"not preemptible", func() Running {
			r := batchRun(1, 5*time.Hour, 0, 1, 2, 3, 4, 5, 6, 7)
			r.Queue = "train"
			return r
		}(), func() Job { j := short; j.Queue = "train"; return j }()},
		{"higher tier", func() Running {
			r := batchRun(1, 5*time.Hour, 0, 1, 2, 3, 4, 5, 6, 7)
			r.Queue = "train"
			return r
		}(), short},
		{"same LAS queue", batchRun(1, 20*time.Minute, 0, 1, 2, 3, 4, 5, 6, 7), func() Job {
			j := short
			j.AttainedService = 7200 * 8
			return j
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := snapshot(node, []Running{tt.run}, tt.job)
			if tt.name == "same LAS queue" {
				s.Running[0].AttainedService = 7300 * 8
			}
			if p := mustSchedule(s, Options{Order: OrderLAS}); len(p.Preemptions) != 0 {
				t.Errorf("preempted %v: %s", victimsOf(p), p.Preemptions[0].Reason)
			}
		})
	}
}

// Within a tier LAS serves the lower LAS queue first, then submit order; other queues stay
// in queue 0 whatever their service.
func TestLASOrder(t *testing.T) {
	a := batchJob(1, 8, 3*time.Hour) // oldest, but has had two GPU-hours: queue 2
	a.AttainedService = 7200
	b := batchJob(2, 8, time.Hour) // an hour of one GPU: queue 1
	b.AttainedService = 3600
	c := batchJob(3, 8, 0) // fresh: queue 0
	d := job(4, 8, "H100") // train, tier 1: ahead of batch, LAS queue 0
	d.AttainedService = 1e6
	p := mustSchedule(snapshot([]Node{gpuNode("n1", "H100", 8)}, nil, a, b, c, d), Options{Order: OrderLAS})
	got := []int64{p.Placements[0].JobID}
	for _, pj := range p.Pending {
		got = append(got, pj.JobID)
	}
	if want := []int64{4, 3, 2, 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

// A running job about to sink makes the plan ask to be looked at again when it does.
func TestLASRecheckAtThreshold(t *testing.T) {
	run := batchRun(1, time.Hour, 0, 1, 2, 3, 4, 5, 6, 7)
	run.AttainedService = 3000 // 250 GPU-seconds under the first threshold, on 8 GPUs
	p := mustSchedule(snapshot([]Node{gpuNode("n1", "H100", 8)}, []Running{run}, batchJob(2, 8, 0)), Options{Order: OrderLAS})
	want := t0.Add(250 * time.Second / 8).Add(time.Millisecond)
	if p.Recheck.Before(want) || p.Recheck.After(want.Add(time.Millisecond)) {
		t.Errorf("recheck at %v, want about %v", p.Recheck, want)
	}
}

// Strict FIFO: the head of the queue blocks everything behind it, even a job that backfill
// would start because it ends before the head could.
func TestFIFOStrictBlocksBehindHead(t *testing.T) {
	node := []Node{gpuNode("n1", "H100", 8)}
	running := []Running{busy(1, "n1", time.Hour, 0, 1, 2, 3, 4, 5)}
	head := job(2, 8, "H100")
	small := job(3, 1, "H100")
	small.TimeLimit = 30 * time.Minute
	fifo, _ := OptionsFor("fifo")
	if p := mustSchedule(snapshot(node, running, head, small), fifo); len(p.Placements) != 1 || p.Placements[0].JobID != 3 {
		t.Fatalf("fifo did not backfill job 3: %+v", p)
	}
	strict, _ := OptionsFor("fifo-strict")
	p := mustSchedule(snapshot(node, running, head, small), strict)
	if len(p.Placements) != 0 {
		t.Fatalf("fifo-strict started %+v behind the head", p.Placements)
	}
	pj, _ := pendingOf(p, 3)
	if pj.Reason.Code != ReasonPriority || !strings.Contains(pj.Reason.Message, "job 2") {
		t.Errorf("job 3 waits with %+v, want Priority behind job 2", pj.Reason)
	}
	// Jobs ahead of the head still start.
	early := job(1, 1, "H100")
	early.ID, early.SubmitTime = 4, t0.Add(-time.Hour)
	if p := mustSchedule(snapshot(node, running, head, small, early), strict); len(p.Placements) != 1 || p.Placements[0].JobID != 4 {
		t.Errorf("fifo-strict placed %+v, want job 4 ahead of the head", p.Placements)
	}
}

// The service factor of the default policy, when on, holds back a requeued long job of a
// preemptible queue behind a fresh one, and leaves other queues alone.
func TestServiceFactor(t *testing.T) {
	node := []Node{gpuNode("n1", "H100", 8)}
	old := batchJob(1, 8, 2*time.Hour)
	old.AttainedService = 7 * 24 * 3600 * 8 // a week on a node
	fresh := batchJob(2, 8, 0)
	on, _ := OptionsFor("service")
	p := mustSchedule(snapshot(node, nil, old, fresh), on)
	if p.Placements[0].JobID != 2 {
		t.Errorf("service factor placed job %d, want the fresh job 2", p.Placements[0].JobID)
	}
	if pj, _ := pendingOf(p, 1); pj.Priority.Service < WeightServiceOn*0.99 {
		t.Errorf("service factor %v, want about %v", pj.Priority.Service, WeightServiceOn)
	}
	if p := mustSchedule(snapshot(node, nil, old, fresh), Options{}); p.Placements[0].JobID != 1 {
		t.Errorf("default policy placed job %d, want the older job 1 (the factor is off)", p.Placements[0].JobID)
	}
	old.Queue, fresh.Queue = "train", "train"
	if p := mustSchedule(snapshot(node, nil, old, fresh), on); p.Placements[0].JobID != 1 {
		t.Errorf("service factor reordered a queue that is not preemptible")
	}
}
