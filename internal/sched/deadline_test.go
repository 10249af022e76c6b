package sched

import (
	"testing"
	"time"
)

// Within a tier the job whose deadline is nearer goes first, and the factor grows as the
// latest start nears; a deadline never lifts a job above a higher tier's.
func TestDeadlineOrder(t *testing.T) {
	// One free GPU and three one-GPU train jobs: the first submitted has no deadline,
	// the second a far one (beyond the horizon), the third a near one.
	none := job(1, 1, "H100")
	far := job(2, 1, "H100")
	far.StartBy = t0.Add(48 * time.Hour)
	near := job(3, 1, "H100")
	near.StartBy = t0.Add(2 * time.Hour)
	s := snapshot([]Node{gpuNode("gpu-01", "H100", 1)}, nil, none, far, near)
	p := mustSchedule(s, Options{})
	if _, ok := placementOf(p, 3); !ok {
		t.Fatalf("the job with the near deadline did not go first: placed %+v", p.Placements)
	}
	pNone, _ := pendingOf(p, 1)
	pFar, _ := pendingOf(p, 2)
	if pNone.Priority.Deadline != 0 || pFar.Priority.Deadline != 0 {
		t.Errorf("deadline factors: none %v, far %v; want 0 for both (far is beyond the horizon)", pNone.Priority.Deadline, pFar.Priority.Deadline)
	}

	// The factor: 22/24 of the weight two hours before, all of it once the start is due.
	for _, c := range []struct {
		startBy time.Duration
		want    float64
	}{{2 * time.Hour, DefaultWeightDeadline * 22 / 24.0}, {0, DefaultWeightDeadline}, {-time.Hour, DefaultWeightDeadline}, {24 * time.Hour, 0}} {
		j := job(9, 1, "H100")
		j.StartBy = t0.Add(c.startBy)
		opts, _ := Options{}.withDefaults()
		got := priority(&j, &Queue{Tier: 1}, 1, 8, &opts, t0.UnixNano())
		if d := got.Deadline - c.want; d > 1e-6 || d < -1e-6 {
			t.Errorf("latest start at %+v: deadline factor %v, want %v", c.startBy, got.Deadline, c.want)
		}
		if got.Score != got.FairShare+got.Age+got.Size+got.Deadline {
			t.Errorf("score %v does not add the deadline factor: %+v", got.Score, got)
		}
	}

	// A batch job (tier 0) whose deadline is overdue still goes after a train job (tier 1)
	// without one.
	late := job(4, 1, "H100")
	late.Queue = "batch"
	late.StartBy = t0.Add(-time.Hour)
	s = snapshot([]Node{gpuNode("gpu-01", "H100", 1)}, nil, late, job(5, 1, "H100"))
	p = mustSchedule(s, Options{})
	if _, ok := placementOf(p, 5); !ok {
		t.Errorf("an overdue deadline lifted a batch job above a train job: placed %+v", p.Placements)
	}
	if pj, _ := pendingOf(p, 4); pj.Priority.Deadline != DefaultWeightDeadline || pj.Priority.Tier != 0 {
		t.Errorf("overdue batch job's priority %+v; want the full deadline factor in tier 0", pj.Priority)
	}
}
