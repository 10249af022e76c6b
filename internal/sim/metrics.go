package sim

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// Result is what one policy made of a workload. METRICS.md defines every field.
type Result struct {
	Policy string

	Jobs         int
	Succeeded    int
	TimedOut     int
	Failed       int
	NeverStarted int
	// Unfinished jobs started but had not ended when nothing more could happen.
	Unfinished int

	JCT      Stats
	Wait     Stats
	Slowdown float64
	// Makespan is from the first submit to the last end.
	Makespan time.Duration

	// Utilisation is allocated GPU-time over available GPU-time, first submit to last end.
	Utilisation float64
	// AllocRatio is the same ratio counted only while at least one job waits; NaN if none
	// ever waited.
	AllocRatio float64
	// Saturated is how long at least one job waited.
	Saturated time.Duration
	// FillAlloc100 and FillAllocEnd are the FGD measure, for a FillWorkload only (NaN
	// otherwise): allocated GPUs over capacity when the arrived GPU requests first reach
	// the capacity, and when all jobs have arrived.
	FillAlloc100, FillAllocEnd float64

	Preemptions        int
	PreemptionGPUHours float64
	NodeFailures       int
	JobsLostToFailures int
	FailureGPUHours    float64

	Teams []TeamResult

	// Events and Plans count what the replay did: simulator events and scheduler calls.
	Events int
	Plans  int
}

// Stats summarise a distribution of durations.
type Stats struct {
	N    int
	Mean time.Duration
	P50  time.Duration
	P95  time.Duration
	P99  time.Duration
}

// TeamResult is one team's part of a Result.
type TeamResult struct {
	Team     string
	Jobs     int
	GPUHours float64
	// Share is the team's part of all GPU-hours held.
	Share float64
	// Slowdown is the mean bounded slowdown of the team's succeeded jobs; NaN if none.
	Slowdown float64
}

// slowdownFloor bounds the slowdown of very short jobs (bounded slowdown): a 1-second job
// that waits a minute would otherwise weigh as much as a day-long job waiting two months.
const slowdownFloor = 10 * time.Second

// result computes the metrics from the engine's state after a replay.
func (e *engine) result() *Result {
	r := &Result{
		Policy: e.policy, Jobs: len(e.jobs),
		Preemptions: e.stats.preemptions, PreemptionGPUHours: e.stats.preemptedSec / 3600,
		NodeFailures: e.stats.failures, JobsLostToFailures: e.stats.lostJobs,
		FailureGPUHours: e.stats.lostSec / 3600,
		Events:          e.stats.events, Plans: e.stats.plans,
		AllocRatio: math.NaN(), FillAlloc100: math.NaN(), FillAllocEnd: math.NaN(),
	}
	type teamSum struct {
		jobs, succeeded int
		slow            float64
	}
	sums := make([]teamSum, len(e.teams))
	jct := make([]int64, 0, len(e.jobs))
	wait := make([]int64, 0, len(e.jobs))
	var slowAll float64
	for i := range e.jobs {
		j := &e.jobs[i]
		sums[j.team].jobs++
		if j.firstStart >= 0 {
			wait = append(wait, j.firstStart-j.arrive)
		}
		switch j.state {
		case api.StateSucceeded:
			r.Succeeded++
			s := max(1, float64(j.end-j.arrive)/float64(max(e.w.Jobs[i].Duration, slowdownFloor)))
			sums[j.team].succeeded++
			sums[j.team].slow += s
			slowAll += s
		case api.StateTimeout:
			r.TimedOut++
		case api.StateFailed:
			r.Failed++
			continue
		default:
			if j.firstStart < 0 {
				r.NeverStarted++
			} else {
				r.Unfinished++
			}
			continue
		}
		jct = append(jct, j.end-j.arrive)
	}
	r.JCT, r.Wait = summarise(jct), summarise(wait)
	r.Slowdown = math.NaN()
	if r.Succeeded > 0 {
		r.Slowdown = slowAll / float64(r.Succeeded)
	}
	r.Makespan = time.Duration(e.stats.lastEnd)
	if e.capSec > 0 {
		r.Utilisation = e.allocSec / e.capSec
	}
	if e.satCap > 0 {
		r.AllocRatio = e.satAlloc / e.satCap
	}
	r.Saturated = time.Duration(e.satTime)
	var total float64
	for ti := range e.teams {
		e.accrue(&e.teams[ti])
		total += e.teams[ti].gpuSec
	}
	for ti, t := range e.teams {
		if sums[ti].jobs == 0 {
			continue // a team of the cluster file with no jobs in the trace
		}
		tr := TeamResult{Team: t.name, Jobs: sums[ti].jobs, GPUHours: t.gpuSec / 3600, Slowdown: math.NaN()}
		if total > 0 {
			tr.Share = t.gpuSec / total
		}
		if sums[ti].succeeded > 0 {
			tr.Slowdown = sums[ti].slow / float64(sums[ti].succeeded)
		}
		r.Teams = append(r.Teams, tr)
	}
	slices.SortFunc(r.Teams, func(a, b TeamResult) int { return strings.Compare(a.Team, b.Team) })
	return r
}

// summarise returns the mean and nearest-rank percentiles of v (which it sorts).
func summarise(v []int64) Stats {
	s := Stats{N: len(v)}
	if len(v) == 0 {
		return s
	}
	slices.Sort(v)
	var sum float64
	for _, x := range v {
		sum += float64(x)
	}
	s.Mean = time.Duration(math.Round(sum / float64(len(v))))
	s.P50, s.P95, s.P99 = rank(v, 50), rank(v, 95), rank(v, 99)
	return s
}

// rank is the nearest-rank percentile: the smallest value with at least p% of values at or
// below it.
func rank(sorted []int64, p int) time.Duration {
	k := (p*len(sorted) + 99) / 100
	return time.Duration(sorted[max(k, 1)-1])
}
