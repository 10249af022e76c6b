package server

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
)

// The idle policy reclaims GPUs that jobs hold without using them. A queue with IdleAfter
// set watches its running jobs: a job all of whose GPUs, on every rank, read below the
// queue's threshold is idle from the first such reading (Job.IdleSince), and stops being
// idle at the first reading that shows use. After IdleAfter it is warned once (IdleWarned,
// an event, a line in its notice file); under action "stop" it is then stopped, as a
// cancel would, IdleAfter plus its grace after it went idle, and ends CANCELLED with
// reason idle_reclaimed. Jobs without GPUs, and jobs whose GPUs send no telemetry, are
// never idle. The policy is applied as readings arrive, so it costs nothing per job
// between readings and never acts on stale figures.

// idlePolicy is a queue's idle rule with its defaults filled in; after 0 means none.
type idlePolicy struct {
	after     time.Duration
	action    string
	threshold float64
}

func queueIdlePolicy(q api.Queue) idlePolicy {
	p := idlePolicy{after: time.Duration(max(q.IdleAfter, 0)) * time.Second, action: q.IdleAction, threshold: q.IdleThresholdPct}
	if p.action == "" {
		p.action = api.IdleWarn
	}
	if p.threshold <= 0 {
		p.threshold = api.DefaultIdleThresholdPct
	}
	return p
}

// idlePolicy is the policy of the named queue. Callers hold s.mu.
func (s *Server) idlePolicy(queue string) idlePolicy {
	q, _ := s.state.Queue(queue)
	return queueIdlePolicy(q)
}

// rankIdle says what one reading shows of a rank's GPUs: in use as soon as one is at or
// above the threshold, idle only when every one was read and is below it.
func rankIdle(gpus []int, samples map[int]api.GPUSample, threshold float64) idleState {
	if len(gpus) == 0 {
		return idleUnknown
	}
	state := idleYes
	for _, i := range gpus {
		g, ok := samples[i]
		switch {
		case !ok || g.UtilizationUnknown:
			// A MIG device tells no utilisation: its job is never called idle.
			state = idleUnknown
		case g.UtilizationPct >= threshold:
			return idleNo
		}
	}
	return state
}

// jobIdle combines the last readings of the attempt's running ranks: in use if one rank
// is, idle if all are.
func (s *Server) jobIdle(a api.Attempt) idleState {
	state := idleUnknown
	for rank, p := range a.Placements {
		if p.State.Terminal() {
			continue
		}
		switch s.tel.idle(rankKey{a.JobID, a.N, rank}) {
		case idleNo:
			return idleNo
		case idleUnknown:
			return idleUnknown
		}
		state = idleYes
	}
	return state
}

// checkIdle applies the queues' idle policies to the jobs a reading had news of. Jobs
// already changed in b (a rank ended, the job started) are left for the next reading.
// Callers hold s.mu.
func (s *Server) checkIdle(b *store.Batch, ids []int64, now time.Time) {
	for _, id := range ids {
		if slices.ContainsFunc(b.Jobs, func(j api.Job) bool { return j.ID == id }) {
			continue
		}
		job, ok := s.state.Job(id)
		a, hasAttempt := s.state.CurrentAttempt(id)
		if !ok || !hasAttempt || job.State != api.StateRunning {
			continue
		}
		evs, changed := s.idleStep(&job, a, now)
		if changed {
			b.Jobs = append(b.Jobs, job)
			b.Events = append(b.Events, evs...)
		}
	}
}

// idleStep moves one running job through the idle policy and reports whether it changed.
func (s *Server) idleStep(job *api.Job, a api.Attempt, now time.Time) ([]api.Event, bool) {
	p := s.idlePolicy(job.Spec.Queue)
	clear := func() bool {
		changed := job.IdleSince != nil || job.IdleWarned
		job.IdleSince, job.IdleWarned = nil, false
		return changed
	}
	if p.after <= 0 || len(job.GPUIDs) == 0 {
		// The queue's policy was removed: the job is no longer flagged.
		return nil, clear()
	}
	if job.CancelRequested || job.PreemptRequested || job.Stopping != "" {
		return nil, false
	}
	switch s.jobIdle(a) {
	case idleNo:
		return nil, clear()
	case idleUnknown:
		return nil, false
	}
	changed := false
	if job.IdleSince == nil {
		t := now
		job.IdleSince, changed = &t, true
	}
	event := func(reason, msg string) api.Event {
		return api.Event{Time: now, Actor: "system", Kind: api.EventIdle, JobID: job.ID, Attempt: a.N, Reason: reason, Message: msg}
	}
	switch {
	case now.Before(job.IdleSince.Add(p.after)):
		return nil, changed
	case !job.IdleWarned:
		// Warned in one reading, stopped at a later one at the earliest, so the warning
		// always reaches the job before the stop.
		job.IdleWarned = true
		return []api.Event{event("", idleNotice(job, p))}, true
	case p.action != api.IdleStop || now.Before(idleDeadline(job, p)):
		return nil, changed
	}
	job.CancelRequested = true
	job.Reason = api.ReasonIdle
	job.Message = fmt.Sprintf("its GPUs were not used since %s (below %s%% utilisation); stopped by queue %s's idle policy",
		job.IdleSince.Format("15:04 MST"), strconv.FormatFloat(p.threshold, 'f', -1, 64), job.Spec.Queue)
	return []api.Event{event(api.ReasonIdle, "stopping: "+job.Message)}, true
}

// idleDeadline is when a job that went idle is stopped under action "stop": its queue's
// IdleAfter and then its grace after it went idle.
func idleDeadline(job *api.Job, p idlePolicy) time.Time {
	return job.IdleSince.Add(p.after + time.Duration(job.Spec.Grace)*time.Second)
}

// idleNotice is what the agent writes to a warned job's notice file. It stays the same
// while the job stays idle, so the file gets it once.
func idleNotice(job *api.Job, p idlePolicy) string {
	msg := fmt.Sprintf("this job has not used its GPUs for %s (below %s%% utilisation)",
		fmtSeconds(int64(p.after/time.Second)), strconv.FormatFloat(p.threshold, 'f', -1, 64))
	if p.action == api.IdleStop {
		return msg + "; it will be stopped at " + idleDeadline(job, p).Format("15:04 MST") + " unless they are used"
	}
	return msg + " and is flagged as idle"
}

// taskNotice is the notice a running job's task carries: the idle warning while it holds.
func (s *Server) taskNotice(job *api.Job) string {
	if !job.IdleWarned || job.IdleSince == nil {
		return ""
	}
	p := s.idlePolicy(job.Spec.Queue)
	if p.after <= 0 {
		return ""
	}
	return idleNotice(job, p)
}
