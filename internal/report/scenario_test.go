package report

import (
	"time"

	"github.com/rotahq/rota/internal/api"
)

// The scenario every report test reads: known jobs on two nodes, whose figures are worked
// out by hand in the tests' comments.
//
// Nodes: a1 has 2 A100s, h1 has 4 H100s: 6 GPUs. Prices: H100 4.00 USD per GPU-hour;
// "*" 1.50 USD, which prices the A100s. Teams nlp (alice, bob) and vision (carol).
// 2026-10-31 is a Saturday; now is 2026-11-02 12:00 UTC, a Monday.
//
//	job  who           queue        GPUs          assigned → end                 how it ended        util
//	1    alice nlp     train        h1 0,1        10-31 08:30 → 10:30            succeeded           80
//	2    bob nlp       batch        a1 0          10-31 09:10 → 10:10            exit code 1         -
//	3    carol vision  train        a1 1          10-31 12:00 → 13:30            oom                 50
//	4.1  carol vision  batch        h1 2,3        10-31 14:00 → 15:45            preempted (event)   90
//	4.2                             h1 2,3        10-31 16:45 → 18:45            succeeded           70
//	5    alice nlp     interactive  a1 0          10-31 20:00 → 21:30            idle_reclaimed      5
//	6    bob nlp       train        h1 0-3        10-31 22:00 → 11-01 02:00      succeeded           60
//	7    carol vision  train        a1 0,1        11-02 09:00 → running          -                   -
//
// Submits: 1 at 08:00 (waits 30m), 2 at 09:00 (10m), 3 at 12:00 (0), 4 at 14:00 (0;
// attempt 2 waits from 4.1's end, 1h), 5 at 20:00 (0), 6 at 21:00 (1h), 7 at 11-02
// 08:00 (1h). Job 4 checkpointed at 15:00 in attempt 1 and at 17:45 in attempt 2 (its
// LastCheckpoint); the scheduler chose attempt 1 as a victim at 15:30 and it exited 143.
// Job 5 was flagged idle at 20:30.
var scenarioNow = time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)

func oct31(h, m int) time.Time { return time.Date(2026, 10, 31, h, m, 0, 0, time.UTC) }

func tp(t time.Time) *time.Time { return &t }

func ip(v int) *int { return &v }

func measured(util float64) *api.Usage {
	return &api.Usage{Samples: 10, GPUUtilPct: api.Stat{Mean: util}}
}

func scenario() Input {
	gpus := func(model string, n int) []api.GPU {
		var out []api.GPU
		for i := range n {
			out = append(out, api.GPU{Index: i, Model: model})
		}
		return out
	}
	job := func(id int64, user, team, queue string, submit time.Time, state api.JobState, attempts int) api.Job {
		return api.Job{ID: id, Spec: api.JobSpec{User: user, Team: team, Queue: queue}, State: state, SubmitTime: submit, Attempts: attempts}
	}
	place := func(node string, util *api.Usage, idx ...int) []api.Placement {
		return []api.Placement{{Node: node, GPUIndices: idx, Usage: util}}
	}
	ended := func(id int64, n int, p []api.Placement, from, to time.Time, state api.JobState, code int, reason string) api.Attempt {
		return api.Attempt{JobID: id, N: n, Placements: p, State: state, AssignTime: from, StartTime: tp(from), EndTime: tp(to),
			ExitCode: ip(code), Reason: reason}
	}
	j4 := job(4, "carol", "vision", "batch", oct31(14, 0), api.StateSucceeded, 2)
	j4.LastCheckpoint = tp(oct31(17, 45))
	j5 := job(5, "alice", "nlp", "interactive", oct31(20, 0), api.StateCancelled, 1)
	j5.IdleSince = tp(oct31(20, 30))
	return Input{
		Now: scenarioNow,
		Nodes: []api.Node{
			{Name: "a1", Inventory: api.Inventory{GPUs: gpus("A100", 2)}, State: api.NodeReady},
			{Name: "h1", Inventory: api.Inventory{GPUs: gpus("H100", 4)}, State: api.NodeReady},
		},
		Prices: []api.Price{{Model: "H100", PerGPUHour: 4, Currency: "USD"}, {Model: "*", PerGPUHour: 1.5, Currency: "USD"}},
		Jobs: []api.Job{
			job(1, "alice", "nlp", "train", oct31(8, 0), api.StateSucceeded, 1),
			job(2, "bob", "nlp", "batch", oct31(9, 0), api.StateFailed, 1),
			job(3, "carol", "vision", "train", oct31(12, 0), api.StateFailed, 1),
			j4, j5,
			job(6, "bob", "nlp", "train", oct31(21, 0), api.StateSucceeded, 1),
			job(7, "carol", "vision", "train", time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC), api.StateRunning, 1),
		},
		Attempts: []api.Attempt{
			ended(1, 1, place("h1", measured(80), 0, 1), oct31(8, 30), oct31(10, 30), api.StateSucceeded, 0, ""),
			ended(2, 1, place("a1", nil, 0), oct31(9, 10), oct31(10, 10), api.StateFailed, 1, api.ReasonExitCode),
			ended(3, 1, place("a1", measured(50), 1), oct31(12, 0), oct31(13, 30), api.StateFailed, 137, api.ReasonOOM),
			// Attempt 1 of job 4 exited of the signal: only the preempt event says why.
			ended(4, 1, place("h1", measured(90), 2, 3), oct31(14, 0), oct31(15, 45), api.StateFailed, 143, ""),
			ended(4, 2, place("h1", measured(70), 2, 3), oct31(16, 45), oct31(18, 45), api.StateSucceeded, 0, ""),
			ended(5, 1, place("a1", measured(5), 0), oct31(20, 0), oct31(21, 30), api.StateCancelled, 143, api.ReasonIdle),
			ended(6, 1, place("h1", measured(60), 0, 1, 2, 3), oct31(22, 0), time.Date(2026, 11, 1, 2, 0, 0, 0, time.UTC), api.StateSucceeded, 0, ""),
			{JobID: 7, N: 1, Placements: place("a1", nil, 0, 1), State: api.StateRunning,
				AssignTime: time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC), StartTime: tp(time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC))},
		},
		Events: []api.Event{
			{Kind: api.EventCheckpoint, JobID: 4, Attempt: 1, Time: oct31(15, 0)},
			{Kind: api.EventPreempt, JobID: 4, Attempt: 1, Time: oct31(15, 30), Reason: api.ReasonPreempted},
			{Kind: api.EventCheckpoint, JobID: 4, Attempt: 2, Time: oct31(17, 45)},
			// Other kinds are ignored.
			{Kind: api.EventTransition, JobID: 4, Attempt: 1, Time: oct31(15, 45)},
		},
	}
}

// scenarioWindow is the three days from 10-31 to 11-03; the last 36 hours are after now.
var scenarioWindow = Query{Since: oct31(0, 0), Until: time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC)}
