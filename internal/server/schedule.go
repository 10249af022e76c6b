package server

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/sched"
	"github.com/rotahq/rota/internal/store"
)

// Cycle runs the scheduler once and applies its plan in one commit. The lock is held from the
// snapshot to the commit, so the plan is always applied to the state it was made from.
//
// 1. Release held jobs whose dependencies are now met (or fail those that never can be).
// 2. Mark draining nodes with nothing left on them drained.
// 3. Keep out of the snapshot the jobs that rules outside the core hold back.
// 4. Plan, then apply placements and preemption orders, and record every pending reason.
func (s *Server) Cycle(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Clock.Now()
	b := &store.Batch{}
	s.releaseHeld(b, now)
	s.finishDrains(b, now)
	if err := s.commit(ctx, b); err != nil {
		return fmt.Errorf("commit held and drained: %w", err)
	}

	held := s.admission()
	snap := s.state.Snapshot(now, func(j *api.Job) bool { _, out := held[j.ID]; return !out })
	if len(snap.Pending) == 0 && len(held) == 0 {
		return nil
	}
	plan, err := sched.ScheduleWith(snap, now, s.cfg.Policy)
	if err != nil {
		return fmt.Errorf("scheduling policy: %w", err)
	}

	b = &store.Batch{}
	for _, p := range plan.Placements {
		// A placement the state cannot honour is a bug in the core; it is logged and
		// skipped rather than allowed to wedge every later cycle.
		job, ok := s.state.Job(p.JobID)
		if !ok || job.State != api.StatePending {
			s.log.Error("plan places a job that is not pending", "job", p.JobID)
			continue
		}
		a, err := s.newAttempt(&job, p.Allocs, now)
		if err != nil {
			s.log.Error("plan cannot be applied", "job", p.JobID, "err", err)
			continue
		}
		job.Borrowing = p.Borrowing
		msg := "placed on " + strings.Join(job.Nodes, ",")
		if p.Borrowing {
			msg += ", borrowing beyond team " + job.Spec.Team + "'s guaranteed quota (preemptible)"
		}
		ev, err := cluster.Transition(&job, api.StateAssigned, "", msg, "scheduler", now)
		if err != nil {
			return err
		}
		b.Jobs = append(b.Jobs, job)
		b.Attempts = append(b.Attempts, a)
		b.Events = append(b.Events, ev)
	}
	for _, p := range plan.Preemptions {
		job, ok := s.state.Job(p.JobID)
		if !ok || !job.State.Active() || job.PreemptRequested {
			continue
		}
		// The agent signals the job, waits its grace, kills it and reports; the job is
		// then requeued as a new attempt with its checkpoint directory kept.
		job.PreemptRequested = true
		b.Jobs = append(b.Jobs, job)
		b.Events = append(b.Events, api.Event{Time: now, Actor: "scheduler", Kind: "preempt", JobID: job.ID, Attempt: job.Attempts,
			Reason: api.ReasonPreempted, Message: fmt.Sprintf("preempted for job %d: %s", p.ForJob, p.Reason)})
	}
	if err := s.commit(ctx, b); err != nil {
		return fmt.Errorf("commit plan: %w", err)
	}
	s.reasons = make(map[int64]sched.Reason, len(plan.Pending))
	for _, p := range plan.Pending {
		s.reasons[p.JobID] = p.Reason
		var est *time.Time
		if !p.EstimatedStart.IsZero() {
			t := p.EstimatedStart
			est = &t
		}
		pr := p.Priority
		s.state.SetPendingReason(p.JobID, string(p.Reason.Code), p.Reason.Message, est, &api.Priority{
			Tier: pr.Tier, Score: pr.Score, FairShare: pr.FairShare, Age: pr.Age, Size: pr.Size, Nice: pr.Nice})
	}
	for id, r := range held {
		s.state.SetPendingReason(id, r[0], r[1], nil, nil)
	}
	if len(plan.Placements) > 0 || len(plan.Preemptions) > 0 {
		s.log.Info("scheduling cycle", "placed", len(plan.Placements), "preempting", len(plan.Preemptions), "pending", len(plan.Pending)+len(held))
	}
	return nil
}

// releaseHeld moves held jobs whose dependencies are met to PENDING, and fails those whose
// after-ok dependency ended badly.
func (s *Server) releaseHeld(b *store.Batch, now time.Time) {
	for _, id := range s.state.HeldIDs() {
		job, _ := s.state.Job(id)
		if job.UserHold {
			continue
		}
		to, reason, msg := s.initialState(&job)
		if to == api.StateHeld {
			continue
		}
		if to == api.StatePending {
			msg = "dependencies met"
		}
		ev, err := cluster.Transition(&job, to, reason, msg, "scheduler", now)
		if err != nil {
			s.log.Error("release held job", "job", id, "err", err)
			continue
		}
		b.Jobs, b.Events = append(b.Jobs, job), append(b.Events, ev)
	}
}

// finishDrains marks a draining node drained once no job holds anything on it.
func (s *Server) finishDrains(b *store.Batch, now time.Time) {
	usage := s.state.Usage()
	for _, n := range s.state.Nodes() {
		if n.State != api.NodeDraining || usage[n.Name] != nil {
			continue
		}
		n.State = api.NodeDrained
		b.Nodes = append(b.Nodes, n)
		b.Events = append(b.Events, api.Event{Time: now, Actor: "scheduler", Kind: api.EventNode, Node: n.Name,
			Message: "node " + n.Name + " drained: no jobs left on it"})
	}
}

// admission applies the one rule the scheduling core does not know: an array's limit on
// active members. It returns the pending jobs held back, each with its reason code and
// sentence.
func (s *Server) admission() map[int64][2]string {
	out := map[int64][2]string{}
	arrayActive := map[int64]int{}
	for _, id := range s.state.ActiveIDs() {
		if j, _ := s.state.Job(id); j.ArrayID != 0 {
			arrayActive[j.ArrayID]++
		}
	}
	for _, id := range s.state.PendingIDs() {
		j, _ := s.state.Job(id)
		if j.ArrayID == 0 || j.ArrayLimit == 0 {
			continue
		}
		if arrayActive[j.ArrayID] >= j.ArrayLimit {
			out[id] = [2]string{reasonArrayLimit, fmt.Sprintf("array %d already has %d of its at most %d jobs active", j.ArrayID, arrayActive[j.ArrayID], j.ArrayLimit)}
			continue
		}
		// Counted as if placed, so one cycle cannot start more than the limit.
		arrayActive[j.ArrayID]++
	}
	return out
}

// newAttempt turns the scheduler's allocations into the job's next attempt, naming GPUs by
// UUID so the record stays right even if a node's indices change after a reboot.
func (s *Server) newAttempt(job *api.Job, allocs []sched.Alloc, now time.Time) (api.Attempt, error) {
	job.Attempts++
	a := api.Attempt{JobID: job.ID, N: job.Attempts, State: api.StateAssigned, AssignTime: now}
	job.Nodes, job.GPUIDs, job.ExitCode, job.StartTime, job.EndTime = nil, nil, nil, nil, nil
	job.CancelRequested = false
	for _, al := range allocs {
		node, ok := s.state.Node(al.Node)
		if !ok {
			return api.Attempt{}, fmt.Errorf("plan places job %d on unknown node %s", job.ID, al.Node)
		}
		p := api.Placement{Node: al.Node, GPUIndices: al.GPUIndices, CPUs: al.CPUs, MemoryMB: al.MemoryMB}
		for _, idx := range al.GPUIndices {
			uuid := ""
			for _, g := range node.GPUs {
				if g.Index == idx {
					uuid = g.UUID
				}
			}
			if uuid == "" {
				return api.Attempt{}, fmt.Errorf("plan gives job %d GPU %d of node %s, which it does not have", job.ID, idx, al.Node)
			}
			p.GPUIDs = append(p.GPUIDs, uuid)
		}
		a.Placements = append(a.Placements, p)
		job.Nodes = append(job.Nodes, al.Node)
		job.GPUIDs = append(job.GPUIDs, p.GPUIDs...)
	}
	return a, nil
}

// endAttempt records how the job's current attempt ended and moves the job on: to a terminal
// state, or back to PENDING when the end was not the job's doing and it may run again.
func (s *Server) endAttempt(job *api.Job, st api.TaskStatus, now time.Time, actor string) (api.Attempt, api.Event, error) {
	a, _ := s.state.CurrentAttempt(job.ID)
	end := now
	if st.EndTime != nil {
		end = *st.EndTime
	}
	a.EndTime, a.ExitCode, a.Reason = &end, st.ExitCode, st.Reason
	if a.StartTime == nil && st.StartTime != nil {
		a.StartTime = st.StartTime
	}
	to, reason, msg := st.State, st.Reason, st.Message
	switch {
	case st.State == api.StateSucceeded:
		// A job that finished before a cancel or preemption reached it did its work:
		// the record says so.
	case job.CancelRequested:
		to, reason = api.StateCancelled, api.ReasonCancelled
		if msg == "" {
			msg = "cancelled by user"
		}
	case st.Reason == api.ReasonNodeLost && job.Attempts <= retries(job.Spec):
		to = api.StatePending
		msg = fmt.Sprintf("node %s lost; requeued (attempt %d of %d)", strings.Join(job.Nodes, ","), job.Attempts+1, retries(job.Spec)+1)
	case job.PreemptRequested || st.Reason == api.ReasonPreempted:
		to, reason = api.StatePending, api.ReasonPreempted
		msg = fmt.Sprintf("preempted; requeued as attempt %d with its checkpoint directory kept", job.Attempts+1)
	case !to.Terminal():
		to = api.StateFailed
	}
	if msg == "" {
		msg = describeEnd(to, st.ExitCode)
	}
	a.State = to
	if to == api.StatePending {
		a.State = api.StateFailed
	}
	job.ExitCode = st.ExitCode
	if job.StartTime == nil {
		job.StartTime = a.StartTime
	}
	ev, err := cluster.Transition(job, to, reason, msg, actor, now)
	if err != nil {
		return api.Attempt{}, api.Event{}, err
	}
	if to == api.StatePending {
		job.StartTime, job.EndTime = nil, nil
	}
	job.PreemptRequested, job.Borrowing = false, false
	return a, ev, nil
}

func describeEnd(to api.JobState, code *int) string {
	switch {
	case to == api.StateSucceeded:
		return "exited with code 0"
	case to == api.StateTimeout:
		return "stopped at its time limit"
	case code != nil:
		return fmt.Sprintf("exited with code %d", *code)
	}
	return strings.ToLower(string(to))
}

// checkNodes marks silent nodes NOT_READY (no new work) and, after LostAfter, LOST: their jobs
// end with reason node_lost and are requeued while retries remain.
func (s *Server) checkNodes(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Clock.Now()
	b := &store.Batch{}
	lost := map[string]bool{}
	for _, n := range s.state.Nodes() {
		silent := now.Sub(n.LastHeartbeat)
		to := n.State
		switch {
		case silent >= s.cfg.LostAfter && n.State != api.NodeLost:
			to = api.NodeLost
		case silent >= s.cfg.NotReadyAfter && n.State == api.NodeReady:
			to = api.NodeNotReady
		}
		if to == n.State {
			continue
		}
		b.Events = append(b.Events, api.Event{Time: now, Actor: "system", Kind: api.EventNode, Node: n.Name,
			Message: fmt.Sprintf("node %s: %s -> %s after %s without a heartbeat", n.Name, n.State, to, silent.Round(time.Second))})
		n.State = to
		b.Nodes = append(b.Nodes, n)
		if to == api.NodeLost {
			lost[n.Name] = true
		}
	}
	for _, id := range s.state.ActiveIDs() {
		job, _ := s.state.Job(id)
		onLost := false
		for _, name := range job.Nodes {
			onLost = onLost || lost[name]
		}
		if !onLost {
			continue
		}
		a, ev, err := s.endAttempt(&job, api.TaskStatus{State: api.StateFailed, Reason: api.ReasonNodeLost,
			Message: "node " + strings.Join(job.Nodes, ",") + " stopped reporting"}, now, "system")
		if err != nil {
			s.log.Error("node lost: end attempt", "job", id, "err", err)
			continue
		}
		b.Jobs, b.Attempts, b.Events = append(b.Jobs, job), append(b.Attempts, a), append(b.Events, ev)
	}
	if err := s.commit(ctx, b); err != nil {
		s.log.Error("node liveness: commit failed", "err", err)
		return
	}
	for _, ev := range b.Events {
		if ev.Kind == api.EventNode {
			s.log.Warn(ev.Message)
		}
	}
}

func retries(spec api.JobSpec) int {
	if spec.Retries == nil {
		return defaultRetries
	}
	return *spec.Retries
}
