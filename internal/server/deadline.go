package server

import (
	"fmt"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
)

// Deadlines: a job may say when it must have finished (the default) or started. The
// scheduler raises it within its tier as its latest start nears (sched.Job.StartBy); the
// API warns when the estimated start cannot meet it; the job records whether it was met
// (cluster.Transition decides at the start or the end, missedDeadlines when it passes
// first); rota usage counts the results per team.

// deadlineAhead is how far ahead a deadline may lie.
const deadlineAhead = 366 * 24 * time.Hour

// validateDeadline checks a job's deadline against now, after validateSpec has filled in
// the queue's default time limit, and spells out the kind.
func validateDeadline(spec *api.JobSpec, now time.Time) *api.Error {
	switch spec.DeadlineKind {
	case "", api.DeadlineFinish, api.DeadlineStart:
	default:
		return invalid("deadline_kind", "unknown kind %q: want %s (finish by the deadline, the default) or %s (start by it)", spec.DeadlineKind, api.DeadlineFinish, api.DeadlineStart)
	}
	if spec.Deadline == nil {
		if spec.DeadlineKind != "" {
			return invalid("deadline_kind", "is given without a deadline")
		}
		return nil
	}
	d := spec.Deadline.UTC()
	spec.Deadline = &d
	if spec.DeadlineKind == "" {
		spec.DeadlineKind = api.DeadlineFinish
	}
	switch {
	case !d.After(now):
		return invalid("deadline", "%s is in the past (now is %s)", d.Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	case d.After(now.Add(deadlineAhead)):
		return invalid("deadline", "%s is more than %d days ahead", d.Format(time.RFC3339), int(deadlineAhead.Hours()/24))
	case spec.DeadlineKind == api.DeadlineStart:
		return nil
	case spec.TimeLimit == 0:
		return invalid("deadline", "a finish-by deadline needs a time limit, and the job has none: give time_limit_s, or make it a start-by deadline (deadline_kind %s)", api.DeadlineStart)
	case now.Add(time.Duration(spec.TimeLimit) * time.Second).After(d):
		return invalid("deadline", "%s leaves %s, less than the time limit of %s: the job could not finish by it even if it started now",
			d.Format(time.RFC3339), fmtSeconds(int64(d.Sub(now).Seconds())), fmtSeconds(spec.TimeLimit))
	}
	return nil
}

// missedDeadlines marks the jobs whose deadline passed while they waited (start-by, never
// started) or while they waited or ran (finish-by): each gets DeadlineMissed and an event.
// The cycle runs it before it plans, so the scheduler and rota usage see the result.
// It starts from the jobs that already changed in b (releaseHeld's), since the last change
// of a job in a batch is the one stored.
func (s *Server) missedDeadlines(b *store.Batch, now time.Time) {
	changed := map[int64]int{}
	for i := range b.Jobs {
		changed[b.Jobs[i].ID] = i
	}
	for _, id := range s.state.OpenDeadlineIDs() {
		j, _ := s.state.Job(id)
		if i, ok := changed[id]; ok {
			j = b.Jobs[i]
		}
		if j.Spec.Deadline == nil || j.DeadlineResult != "" || !now.After(*j.Spec.Deadline) || j.State.Terminal() {
			continue
		}
		if j.Spec.DeadlineKind == api.DeadlineStart && j.Attempts > 0 {
			continue // decided when it started
		}
		j.DeadlineResult = api.DeadlineMissed
		b.Jobs = append(b.Jobs, j)
		b.Events = append(b.Events, api.Event{Time: now, Actor: "scheduler", Kind: api.EventDeadline, JobID: j.ID, Attempt: j.Attempts,
			Message: fmt.Sprintf("deadline missed: the job was to %s by %s and is still %s", j.Spec.DeadlineKind, j.Spec.Deadline.Format(time.RFC3339), j.State)})
	}
}

// deadlineWarning says why a job's open deadline looks unreachable, or "" when it does
// not: its latest start has passed, or the estimated start is after it.
func deadlineWarning(j *api.Job, now time.Time) string {
	if j.Spec.Deadline == nil || j.DeadlineResult != "" || j.State.Terminal() {
		return ""
	}
	if j.Spec.DeadlineKind == api.DeadlineStart && j.Attempts > 0 {
		return ""
	}
	if j.State.Active() {
		// Running: a finish-by deadline is reachable if the time limit ends it in time,
		// and the limit is the most it can run.
		return ""
	}
	verb := "finish"
	if j.Spec.DeadlineKind == api.DeadlineStart {
		verb = "start"
	}
	latest := j.Spec.LatestStart()
	dl := j.Spec.Deadline.UTC().Format(time.RFC3339)
	switch {
	case now.After(latest):
		return fmt.Sprintf("the deadline (%s by %s) can no longer be met: the job would have had to start by %s", verb, dl, latest.UTC().Format(time.RFC3339))
	case j.EstimatedStart != nil && j.EstimatedStart.After(latest):
		return fmt.Sprintf("the deadline (%s by %s) looks unreachable: the estimated start %s is after the latest start that meets it, %s",
			verb, dl, j.EstimatedStart.UTC().Format(time.RFC3339), latest.UTC().Format(time.RFC3339))
	}
	return ""
}
