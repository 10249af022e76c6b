package cluster

import (
	"time"

	"github.com/rotahq/rota/internal/api"
)

// gpuSeconds is what an attempt used: its GPUs times the time it ran.
func gpuSeconds(a api.Attempt, end time.Time) float64 {
	start := attemptStart(a)
	if !end.After(start) {
		return 0
	}
	return float64(attemptGPUs(a)) * end.Sub(start).Seconds()
}

// attemptStart is when an attempt began to use its GPUs: when its agent started it, else
// when it was assigned.
func attemptStart(a api.Attempt) time.Time {
	if a.StartTime != nil {
		return *a.StartTime
	}
	return a.AssignTime
}

// attemptGPUs counts the GPUs an attempt holds over all its nodes, a share of one as
// that share.
func attemptGPUs(a api.Attempt) float64 {
	gpus := 0.0
	for i := range a.Placements {
		gpus += a.Placements[i].GPUs()
	}
	return gpus
}

// fairShare returns the teams' usage, made on first use so that it decays by the HalfLife
// set before Load.
func (s *State) fairShare() *FairShare {
	if s.usage == nil {
		s.usage = NewFairShare(s.HalfLife)
	}
	return s.usage
}

// chargeUsage brings fair share up to date with attempt a, whose record was prev until
// now (a zero Attempt if a is new); prev had not ended. What prev held is taken back and
// what a holds is recorded afresh, from its start to its end if it has one, so a start time
// reported late or a placement that changed is counted once, as it is now. An attempt that
// had already ended is never charged again (a duplicate report).
func (s *State) chargeUsage(prev, a api.Attempt) {
	j, ok := s.jobs[a.JobID]
	if !ok {
		return
	}
	fs := s.fairShare()
	fs.Hold(j.Spec.Team, -attemptGPUs(prev), attemptStart(prev))
	start, gpus := attemptStart(a), attemptGPUs(a)
	if a.EndTime != nil && !a.EndTime.After(start) {
		return
	}
	fs.Hold(j.Spec.Team, gpus, start)
	if a.EndTime != nil {
		fs.Hold(j.Spec.Team, -gpus, *a.EndTime)
	}
}

// TeamUsage returns each team's decayed GPU-seconds at now (FairShare), running attempts
// included up to now.
func (s *State) TeamUsage(now time.Time) map[string]float64 {
	return s.fairShare().Usages(now)
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
		sv.lastRun, sv.requeued = max(a.EndTime.Sub(attemptStart(a)), 0), *a.EndTime
	}
	return sv
}

// serviceParts is what serviceOf sums, read once from a job's attempts: the attempts that
// ended, summed in their order, and the one still open, whose share grows with time. A job
// whose attempts have another shape (an open attempt before an ended one, or two open)
// is not split: exact is false, and refOf reads its attempts each time.
type serviceParts struct {
	ended     service
	open      bool
	openStart time.Time
	openGPUs  float64
	exact     bool
}

// servicePartsOf splits job id's attempts for serviceParts.at.
func (s *State) servicePartsOf(id int64) serviceParts {
	var p serviceParts
	for _, a := range s.attempts[id] {
		if p.open {
			return serviceParts{} // an attempt after the open one
		}
		if a.EndTime == nil {
			p.open, p.openStart, p.openGPUs = true, attemptStart(a), attemptGPUs(a)
			continue
		}
		p.ended.attained += gpuSeconds(a, *a.EndTime)
		p.ended.lastRun, p.ended.requeued = max(a.EndTime.Sub(attemptStart(a)), 0), *a.EndTime
	}
	p.exact = true
	return p
}

// at is the service at now of a job whose parts are exact, serviceOf's to the bit: the
// same sums in the same order. It reads nothing of the state.
func (p *serviceParts) at(now time.Time) service {
	sv := p.ended
	if p.open && now.After(p.openStart) {
		sv.attained += p.openGPUs * now.Sub(p.openStart).Seconds()
	}
	return sv
}

// Span is one attempt's use of GPUs: from Start to End (now, for an attempt still
// running), GPUs at once, charged to the job's team and project.
type Span struct {
	Team, Project string
	Start, End    time.Time
	GPUs          float64
}

// SpanOf is the span of attempt a of job j at now; false for one that used no GPU time.
func SpanOf(j *api.Job, a api.Attempt, now time.Time) (Span, bool) {
	// From assignment, as accounting counts allocated GPU-hours: the GPUs are held from then.
	start, end := a.AssignTime, now
	if a.EndTime != nil {
		end = *a.EndTime
	}
	gpus := attemptGPUs(a)
	if gpus == 0 || !end.After(start) {
		return Span{}, false
	}
	return Span{Team: j.Spec.Team, Project: j.Spec.Project, Start: start, End: end, GPUs: gpus}, true
}

// Spans returns the spans of the attempts in memory that used GPUs after since, of the
// teams keep accepts. Jobs evicted from memory are the caller's to add from the store.
func (s *State) Spans(since, now time.Time, keep func(team string) bool) []Span {
	var out []Span
	for id, list := range s.attempts {
		j, ok := s.jobs[id]
		if !ok || !keep(j.Spec.Team) {
			continue
		}
		for _, a := range list {
			if sp, ok := SpanOf(j, a, now); ok && sp.End.After(since) {
				out = append(out, sp)
			}
		}
	}
	return out
}
