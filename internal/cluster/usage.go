package cluster

import (
	"math"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// decayed is a sum that halves every half-life: value as of at.
type decayed struct {
	value float64
	at    time.Time
}

// valueAt returns the sum decayed to t.
func (d decayed) valueAt(t time.Time, halfLife time.Duration) float64 {
	if halfLife <= 0 || !t.After(d.at) {
		return d.value
	}
	return d.value * math.Exp2(-float64(t.Sub(d.at))/float64(halfLife))
}

// gpuSeconds is what an attempt used: its GPUs times the time it ran.
func gpuSeconds(a api.Attempt, end time.Time) float64 {
	start := a.AssignTime
	if a.StartTime != nil {
		start = *a.StartTime
	}
	if !end.After(start) {
		return 0
	}
	gpus := 0
	for _, p := range a.Placements {
		gpus += len(p.GPUIndices)
	}
	return float64(gpus) * end.Sub(start).Seconds()
}

// chargeUsage adds an ended attempt's GPU-seconds to its team, decayed from when it ended,
// so fair share remembers recent use more than old use.
func (s *State) chargeUsage(a api.Attempt) {
	j, ok := s.jobs[a.JobID]
	if !ok || a.EndTime == nil {
		return
	}
	gs := gpuSeconds(a, *a.EndTime)
	if gs == 0 {
		return
	}
	d := s.usage[j.Spec.Team]
	if d == nil {
		d = &decayed{at: *a.EndTime}
		s.usage[j.Spec.Team] = d
	}
	// Bring both to the later of the two times before adding.
	if a.EndTime.After(d.at) {
		d.value, d.at = d.valueAt(*a.EndTime, s.HalfLife), *a.EndTime
		d.value += gs
	} else {
		d.value += (decayed{value: gs, at: *a.EndTime}).valueAt(d.at, s.HalfLife)
	}
}

// TeamUsage returns each team's decayed GPU-seconds at now, counting running attempts so far.
func (s *State) TeamUsage(now time.Time) map[string]float64 {
	out := map[string]float64{}
	for team, d := range s.usage {
		out[team] = d.valueAt(now, s.HalfLife)
	}
	for id := range s.active {
		if a, ok := s.CurrentAttempt(id); ok {
			out[s.jobs[id].Spec.Team] += gpuSeconds(a, now)
		}
	}
	return out
}

// service is what one job has received, for the scheduler's least-attained-service order
// and service factor (sched.Job.AttainedService and its neighbours).
type service struct {
	// attained is GPU-seconds over all attempts, the current one up to now.
	attained float64
	// lastRun and requeued are the run time and end of the latest attempt that ended.
	lastRun  time.Duration
	requeued time.Time
}

// serviceOf sums job id's attempts at now. Attempts are few per job, so it reads them all
// rather than keeping a running total that every transition would have to maintain.
func (s *State) serviceOf(id int64, now time.Time) service {
	var sv service
	for _, a := range s.attempts[id] {
		if a.EndTime == nil {
			sv.attained += gpuSeconds(a, now)
			continue
		}
		sv.attained += gpuSeconds(a, *a.EndTime)
		start := a.AssignTime
		if a.StartTime != nil {
			start = *a.StartTime
		}
		sv.lastRun, sv.requeued = max(a.EndTime.Sub(start), 0), *a.EndTime
	}
	return sv
}
