package cluster

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/batch"
)

func TestTransitionFollowsTheLifecycle(t *testing.T) {
	now := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		from, to api.JobState
		ok       bool
	}{
		{api.StatePending, api.StateAssigned, true},
		{api.StateAssigned, api.StateRunning, true},
		{api.StateRunning, api.StatePending, true}, // preempted or node lost: a new attempt
		{api.StateRunning, api.StateSucceeded, true},
		{api.StateHeld, api.StatePending, true},
		{api.StateSucceeded, api.StateRunning, false}, // a late report cannot revive a finished job
		{api.StateCancelled, api.StatePending, false},
		{api.StatePending, api.StateRunning, false}, // only through ASSIGNED
		{api.StateHeld, api.StateAssigned, false},
	}
	for _, tc := range cases {
		j := api.Job{ID: 1, State: tc.from}
		ev, err := Transition(&j, tc.to, "r", "m", "test", now)
		if (err == nil) != tc.ok {
			t.Errorf("%s -> %s: err %v; want ok=%v", tc.from, tc.to, err, tc.ok)
			continue
		}
		if !tc.ok {
			if j.State != tc.from {
				t.Errorf("%s -> %s refused but the job changed to %s", tc.from, tc.to, j.State)
			}
			continue
		}
		if ev.From != tc.from || ev.To != tc.to || j.State != tc.to || (tc.to.Terminal() != (j.EndTime != nil)) {
			t.Errorf("%s -> %s: event %+v, job %s end %v", tc.from, tc.to, ev, j.State, j.EndTime)
		}
	}
}

func TestUsageDecaysByHalfLife(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	s := New()
	s.HalfLife = time.Hour
	start, end := t0, t0.Add(time.Hour)
	job := api.Job{ID: 1, Spec: api.JobSpec{Team: "vision"}, State: api.StateSucceeded}
	a := api.Attempt{JobID: 1, N: 1, AssignTime: start, StartTime: &start, EndTime: &end,
		Placements: []api.Placement{{Node: "n1", GPUIndices: []int{0, 1}}}}
	s.Apply(&batch.Batch{Jobs: []api.Job{job}, Attempts: []api.Attempt{a}})
	// Two GPUs for one half-life, each GPU-second decayed from when it was used, is
	// 2·h/(2 ln 2) = 3600/ln 2 GPU-seconds at the end (FairShare); one half-life later, half.
	want := 3600 / math.Ln2
	if got := s.TeamUsage(end)["vision"]; math.Abs(got-want) > 1e-6 {
		t.Errorf("usage at the end %v; want %v", got, want)
	}
	if got := s.TeamUsage(end.Add(time.Hour))["vision"]; math.Abs(got-want/2) > 1e-6 {
		t.Errorf("usage one half-life later %v; want %v", got, want/2)
	}
	// Re-applying the same ended attempt (a duplicate report) does not charge it twice.
	s.Apply(&batch.Batch{Attempts: []api.Attempt{a}})
	if got := s.TeamUsage(end)["vision"]; math.Abs(got-want) > 1e-6 {
		t.Errorf("usage after a duplicate %v; want %v", got, want)
	}
}

// The count of a user's jobs that have not started follows every state a job moves
// through, so the per-user limit a submit checks never needs a scan.
func TestWaitingFollowsStates(t *testing.T) {
	s := New()
	job := func(id int64, user string, st api.JobState) api.Job {
		return api.Job{ID: id, State: st, Spec: api.JobSpec{User: user}}
	}
	for _, step := range []struct {
		jobs     []api.Job
		ada, bob int
	}{
		{[]api.Job{job(1, "ada", api.StatePending), job(2, "ada", api.StateHeld), job(3, "bob", api.StatePending)}, 2, 1},
		{[]api.Job{job(1, "ada", api.StateAssigned)}, 1, 1},
		{[]api.Job{job(1, "ada", api.StatePending)}, 2, 1},
		{[]api.Job{job(2, "ada", api.StateCancelled), job(3, "bob", api.StateRunning)}, 1, 0},
		{[]api.Job{job(3, "bob", api.StateSucceeded), job(1, "ada", api.StateFailed)}, 0, 0},
	} {
		s.Apply(&batch.Batch{Jobs: step.jobs})
		if s.Waiting("ada") != step.ada || s.Waiting("bob") != step.bob {
			t.Fatalf("after %v: ada %d bob %d; want %d and %d", step.jobs, s.Waiting("ada"), s.Waiting("bob"), step.ada, step.bob)
		}
	}
}

// The oldest submit key is known as keys come, in any order, and again after a prune.
func TestOldestIdempotencyFollowsKeysAndPrunes(t *testing.T) {
	s := New()
	at := func(h int) time.Time { return time.Date(2026, 11, 30, h, 0, 0, 0, time.UTC) }
	rec := func(key string, h int) batch.IdempotencyRecord {
		return batch.IdempotencyRecord{User: "ada", Key: key, Created: at(h)}
	}
	for _, step := range []struct {
		name  string
		b     batch.Batch
		want  time.Time
		count int
	}{
		{"none", batch.Batch{}, time.Time{}, 0},
		{"first", batch.Batch{Idempotency: []batch.IdempotencyRecord{rec("a", 5)}}, at(5), 1},
		{"later", batch.Batch{Idempotency: []batch.IdempotencyRecord{rec("b", 7)}}, at(5), 2},
		{"earlier, as a load brings", batch.Batch{Idempotency: []batch.IdempotencyRecord{rec("c", 3), rec("d", 9)}}, at(3), 4},
		{"pruned below 6", batch.Batch{PruneIdempotency: at(6)}, at(7), 2},
		{"pruned with a key", batch.Batch{Idempotency: []batch.IdempotencyRecord{rec("e", 10)}, PruneIdempotency: at(8)}, at(9), 2},
		{"all pruned", batch.Batch{PruneIdempotency: at(11)}, time.Time{}, 0},
		{"again", batch.Batch{Idempotency: []batch.IdempotencyRecord{rec("f", 12)}}, at(12), 1},
	} {
		s.Apply(&step.b)
		if got := s.OldestIdempotency(); !got.Equal(step.want) || len(s.id.idempotent) != step.count {
			t.Fatalf("%s: oldest %v of %d keys, want %v of %d", step.name, got, len(s.id.idempotent), step.want, step.count)
		}
	}
}

// A snapshot's service, from the parts its entry keeps, is serviceOf's to the bit, for
// attempts of every shape and at times before, at and after they start.
func TestSnapshotServiceIsServiceOf(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { x := t0.Add(d); return &x }
	gpus := func(n int) []api.Placement { return []api.Placement{{Node: "n1", GPUIndices: make([]int, n)}} }
	shared := []api.Placement{{Node: "n1", GPUIndices: []int{0}, GPUShare: 0.3}}
	ended := func(start, end time.Duration, p []api.Placement) api.Attempt {
		return api.Attempt{AssignTime: t0.Add(start - time.Second), StartTime: at(start), EndTime: at(end), Placements: p}
	}
	open := func(start time.Duration, p []api.Placement) api.Attempt {
		return api.Attempt{AssignTime: t0.Add(start), Placements: p} // not started: from assignment
	}
	for name, attempts := range map[string][]api.Attempt{
		"none":            nil,
		"open":            {open(time.Minute, gpus(8))},
		"ended":           {ended(0, 3*time.Hour+time.Nanosecond/3, gpus(3))},
		"two ended":       {ended(0, time.Hour, gpus(1)), ended(2*time.Hour, 2*time.Hour+7*time.Second, gpus(7))},
		"ended then open": {ended(0, 1100*time.Millisecond, gpus(2)), ended(time.Hour, 2*time.Hour, shared), open(3*time.Hour, gpus(4))},
		"open then ended": {open(0, gpus(1)), ended(time.Hour, 2*time.Hour, gpus(2))},
		"two open":        {open(0, gpus(1)), open(time.Hour, gpus(2))},
		"shared open":     {open(13*time.Millisecond, shared)},
		"ended backwards": {ended(time.Hour, 0, gpus(2))},
	} {
		s := New()
		s.attempts[1] = attempts
		p := s.servicePartsOf(1)
		for _, now := range []time.Time{t0.Add(-time.Hour), t0, t0.Add(time.Minute), t0.Add(3*time.Hour + 17*time.Millisecond), t0.Add(1000 * time.Hour)} {
			ref := s.refOf(1, &snapJob{sv: p}, now)
			got, want := ref.service(now), s.serviceOf(1, now)
			if math.Float64bits(got.attained) != math.Float64bits(want.attained) || got.lastRun != want.lastRun || !got.requeued.Equal(want.requeued) {
				t.Errorf("%s at %v: %+v, want serviceOf's %+v", name, now.Sub(t0), got, want)
			}
		}
	}
}

// The jobs a cycle checks for a passed deadline are those not ended whose deadline is
// open, whatever state they go through.
func TestOpenDeadlinesFollowJobs(t *testing.T) {
	s := New()
	by := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	job := func(id int64, st api.JobState, deadline bool, result string) api.Job {
		j := api.Job{ID: id, State: st, DeadlineResult: result}
		if deadline {
			j.Spec.Deadline = &by
		}
		return j
	}
	for _, step := range []struct {
		jobs []api.Job
		want []int64
	}{
		{[]api.Job{job(1, api.StatePending, true, ""), job(2, api.StatePending, false, ""), job(3, api.StateHeld, true, "")}, []int64{1, 3}},
		{[]api.Job{job(1, api.StateRunning, true, ""), job(3, api.StatePending, true, "")}, []int64{1, 3}},
		{[]api.Job{job(3, api.StatePending, true, api.DeadlineMissed)}, []int64{1}},
		{[]api.Job{job(1, api.StateSucceeded, true, "")}, nil},
		{[]api.Job{job(4, api.StateAssigned, true, "")}, []int64{4}},
	} {
		s.Apply(&batch.Batch{Jobs: step.jobs})
		if got := s.OpenDeadlineIDs(); !slices.Equal(got, step.want) {
			t.Fatalf("after %+v: open deadlines %v, want %v", step.jobs, got, step.want)
		}
	}
}

// The jobs admission checks are those not ended with an array limit or a backoff.
func TestGatedFollowJobs(t *testing.T) {
	s := New()
	later := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	for _, step := range []struct {
		jobs []api.Job
		want []int64
	}{
		{[]api.Job{{ID: 1, State: api.StatePending, ArrayID: 1, ArrayLimit: 2}, {ID: 2, State: api.StatePending, ArrayID: 1},
			{ID: 3, State: api.StatePending, NotBefore: &later}, {ID: 4, State: api.StatePending}}, []int64{1, 3}},
		{[]api.Job{{ID: 1, State: api.StateRunning, ArrayID: 1, ArrayLimit: 2}, {ID: 3, State: api.StatePending}}, []int64{1}},
		{[]api.Job{{ID: 1, State: api.StateFailed, ArrayID: 1, ArrayLimit: 2}}, nil},
	} {
		s.Apply(&batch.Batch{Jobs: step.jobs})
		if got := s.GatedIDs(); !slices.Equal(got, step.want) {
			t.Fatalf("after %+v: gated %v, want %v", step.jobs, got, step.want)
		}
	}
}
