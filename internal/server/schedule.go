package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/sched"
	"github.com/rotahq/rota/internal/store"
)

// Cycle runs the scheduler once and applies its plan in one commit. The plan is made on a
// snapshot without holding s.mu, so submits, heartbeats and reads go on meanwhile; it is
// then checked against what changed since (cluster.State.Seq) and applied in part or in
// whole, and any part dropped is planned again in the next cycle, which is asked for at
// once. Cycles run one at a time.
//
// 1. Release held jobs whose dependencies are now met (or fail those that never can be).
// 2. Mark emptied drains drained, open and close maintenance windows, mark passed deadlines;
// expire undecided requests and end grants whose time is up (requests.go).
// 3. Keep out of the snapshot the jobs that rules outside the core hold back.
// 4. Plan, then apply placements and preemption orders, and record every pending reason.
func (s *Server) Cycle(ctx context.Context) error {
	s.cycleMu.Lock()
	defer s.cycleMu.Unlock()
	cycleStart := time.Now()
	if err := s.refreshBudgets(ctx, s.cfg.Clock.Now()); err != nil {
		// Budgets then count from memory alone until the store answers again.
		s.log.Warn("budgets", "err", err)
	}
	s.mu.Lock()
	s.stall = stall{}
	heldSince := time.Now()
	locked := true
	defer func() {
		if locked {
			s.mu.Unlock()
		}
	}()
	if !s.isLeader() {
		return nil // a standby schedules nothing (ha.go)
	}
	defer s.observeCycle(time.Now())
	now := s.cfg.Clock.Now()
	b := &store.Batch{}
	s.releaseHeld(b, now)
	s.finishDrains(b, now)
	s.maintenanceWindows(b, now)
	s.missedDeadlines(b, now)
	s.expireRequests(b, now)
	crossed := s.checkBudgets(b, now)
	if err := s.commit(ctx, b); err != nil {
		return fmt.Errorf("commit held and drained: %w", err)
	}
	s.notifyBudgets(crossed)
	s.evictEnded()

	s.lastCycle = now
	held := s.admission(now)
	// The snapshot's walk of the jobs lets go of the lock once the cycle has held it for
	// snapshotHold, so that submits, heartbeats and reads wait for that, not for the
	// whole walk. What changes meanwhile changed after seq: the plan leaves those jobs
	// and nodes alone (placementCurrent), and the next cycle, which the change asks for,
	// plans them.
	state, seq := s.state, s.state.Seq()
	s.cycled = seq
	s.armStall()
	parts, current := s.state.SnapshotPartsPausing(now, func(id int64) bool { _, out := held[id]; return !out }, snapshotChunk, func() bool {
		if time.Since(heldSince) < snapshotHold {
			return true
		}
		s.mu.Unlock()
		if s.snapshotPaused != nil {
			s.snapshotPaused()
		}
		s.mu.Lock()
		heldSince = time.Now()
		return s.isLeader() && s.state == state
	})
	if !current {
		return nil // the state was read again, or another server leads: nothing to plan from
	}
	// Claims of jobs that are no longer pending are dropped: they started, or were
	// cancelled, and what was held for them is free for anyone.
	s.claims = slices.DeleteFunc(s.claims, func(c sched.Claim) bool {
		j, ok := s.state.Job(c.JobID)
		return !ok || j.State != api.StatePending
	})
	claims := slices.Clone(s.claims)
	if parts.Pending() == 0 && len(held) == 0 {
		return nil
	}
	var err error
	s.mu.Unlock()
	locked = false
	if s.planning != nil {
		s.planning()
	}
	snap := parts.Build()
	snap.Claims = claims
	if s.planner == nil {
		s.planner, err = sched.NewPlanner(s.cfg.Policy)
	}
	var plan sched.Plan
	if err == nil {
		// The planner keeps its node layout while the snapshot's NodesVersion stays the
		// same: cycles run one at a time, so only this one uses it.
		plan = s.planner.Schedule(snap, now)
	}
	// What the plan says of each pending job is made ready before the lock is taken again.
	// One array each for the estimates and priorities of every pending job, rather than
	// two small allocations per job per cycle.
	bestNodes := make([]bestNode, 0, len(plan.Pending))
	ests := make([]time.Time, len(plan.Pending)) // zero where there is no estimate
	prios := make([]api.Priority, len(plan.Pending))
	for i, p := range plan.Pending {
		if p.Reason.BestNode != "" {
			bestNodes = append(bestNodes, bestNode{p.JobID, p.Reason.BestNode})
		}
		ests[i] = p.EstimatedStart
		pr := p.Priority
		prios[i] = api.Priority{Tier: pr.Tier, Score: pr.Score, FairShare: pr.FairShare, Age: pr.Age, Size: pr.Size, Deadline: pr.Deadline, Nice: pr.Nice}
	}
	// A plan that places and stops nothing, made by a long cycle, may let the arrivals
	// that follow wait for the recompute (stall.go).
	fruitless := err == nil && len(plan.Placements) == 0 && len(plan.Preemptions) == 0
	var maxFree int
	var victims stallVictims
	if fruitless && time.Since(cycleStart) >= stallAfter {
		maxFree, victims = stallFacts(snap)
	}
	if s.planned != nil {
		s.planned()
	}
	s.mu.Lock()
	locked = true
	if err != nil {
		return fmt.Errorf("scheduling policy: %w", err)
	}
	if !s.isLeader() {
		return nil
	}
	if s.state != state || s.state.ConfigChangedSince(seq) {
		// The state was read again, or queues, teams or reservations changed: the plan's
		// premises are gone. Plan again.
		s.log.Debug("scheduling plan dropped: the configuration changed while it was made")
		s.wake()
		return nil
	}

	b = &store.Batch{}
	stale := 0
	for _, p := range plan.Placements {
		// A placement whose job or nodes changed while the plan was made is dropped and
		// planned again: the job may have been cancelled or held, a node drained, lost or
		// found with a GPU gone. Nothing else takes resources, since cycles run one at a
		// time, so a placement on unchanged nodes is still free to make.
		if !s.placementCurrent(p, seq) {
			stale++
			continue
		}
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
		job.Borrowing, job.BorrowingInTeam = p.Borrowing, p.BorrowingInTeam
		msg := "placed on " + strings.Join(job.Nodes, ",")
		switch {
		case p.Borrowing:
			msg += ", borrowing beyond team " + job.Spec.Team + "'s guaranteed quota (preemptible)"
		case p.BorrowingInTeam:
			msg += ", borrowing beyond project " + job.Spec.Project + "'s guaranteed quota inside team " + job.Spec.Team + " (preemptible by the team's in-quota jobs)"
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
		b.Events = append(b.Events, api.Event{Time: now, Actor: "scheduler", Kind: api.EventPreempt, JobID: job.ID, Attempt: job.Attempts,
			Reason: api.ReasonPreempted, Message: fmt.Sprintf("preempted for job %d: %s", p.ForJob, p.Reason)})
	}
	before := s.state.Seq()
	if err := s.commit(ctx, b); err != nil {
		return fmt.Errorf("commit plan: %w", err)
	}
	if before == s.cycled && !b.Empty() {
		// Nothing changed between the snapshot and this commit but the plan itself, which
		// gives the next cycle nothing new to decide.
		s.cycled = s.state.Seq()
	}
	if stale > 0 {
		s.log.Info("scheduling plan: placements dropped because their job or nodes changed meanwhile; planning again", "dropped", stale)
		s.wake()
	}
	s.claims = plan.Claims
	s.bestNodes = bestNodes
	// Each waiting job's reason, estimate and priority are written a chunk at a time, and
	// the lock let go between chunks: at 69,000 jobs waiting the writes took 20 ms, which
	// every heartbeat, submit and read arriving meanwhile waited through. Reasons are
	// advice, made again at every cycle, so a reader that finds some jobs with this
	// cycle's and others with the last one's is told nothing false.
	for start := 0; start < len(plan.Pending); start += reasonChunk {
		if start > 0 {
			s.mu.Unlock()
			s.mu.Lock()
			if !s.isLeader() || s.state != state {
				return nil // the next cycle, or the new leader, says why jobs wait
			}
		}
		for i := start; i < min(start+reasonChunk, len(plan.Pending)); i++ {
			p := &plan.Pending[i]
			var est *time.Time
			if !ests[i].IsZero() {
				est = &ests[i]
			}
			s.state.SetPendingReason(p.JobID, string(p.Reason.Code), p.Reason.Message, est, &prios[i])
		}
	}
	for id, r := range held {
		s.state.SetPendingReason(id, r[0], r[1], nil, nil)
	}
	if fruitless {
		s.holdStall(time.Since(cycleStart), maxFree, victims)
	}
	if len(plan.Placements) > 0 || len(plan.Preemptions) > 0 {
		s.log.Info("scheduling cycle", "placed", len(plan.Placements), "preempting", len(plan.Preemptions), "pending", len(plan.Pending)+len(held))
	}
	return nil
}

// reasonChunk is how many waiting jobs' reasons a cycle writes in one hold of the lock:
// about 2 ms of writes.
const reasonChunk = 8192

// A cycle's snapshot, every snapshotChunk jobs it reads, lets go of the lock if the cycle
// has held it for snapshotHold. The whole walk of 104,000 jobs held it for 20 to 90 ms a
// cycle, and up to 430 ms while many jobs changed (the scale suite); with these settings
// a steady cycle at that size pauses once or not at all. Tests set both to pause at every
// job.
var (
	snapshotChunk = 256
	snapshotHold  = 10 * time.Millisecond
)

// placementCurrent reports whether neither p's job nor any node it uses changed after
// seq. Callers hold s.mu.
func (s *Server) placementCurrent(p sched.Placement, seq uint64) bool {
	if s.state.JobChangedSince(p.JobID, seq) {
		return false
	}
	for _, al := range p.Allocs {
		if s.state.NodeChangedSince(al.Node, seq) {
			return false
		}
	}
	return true
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
	for _, n := range s.state.NodesWhere(func(n *api.Node) bool { return n.State == api.NodeDraining }) {
		if s.state.NodeUsage(n.Name) != nil {
			continue
		}
		n.State = api.NodeDrained
		b.Nodes = append(b.Nodes, n)
		b.Events = append(b.Events, api.Event{Time: now, Actor: "scheduler", Kind: api.EventNode, Node: n.Name,
			Message: "node " + n.Name + " drained: no jobs left on it"})
	}
}

// admission applies the rules the scheduling core does not know: an array's limit on active
// members, and the backoff of a job being retried. It returns the pending jobs held back,
// each with its reason code and sentence.
func (s *Server) admission(now time.Time) map[int64][2]string {
	out := map[int64][2]string{}
	s.wakeAt = time.Time{}
	// Only jobs with an array limit or a backoff can be held back, unless a budget is
	// spent: then every pending job of its team or project is.
	gated := s.state.GatedIDs()
	pending := gated
	if slices.ContainsFunc(s.budgets, func(b budgetState) bool { return b.hard() }) {
		pending = s.state.PendingIDs()
	}
	arrayActive := map[int64]int{}
	for _, id := range gated {
		if j := s.state.Peek(id); j.ArrayLimit != 0 && j.State.Active() {
			arrayActive[j.ArrayID]++
		}
	}
	for _, id := range pending {
		j := s.state.Peek(id)
		if j.State != api.StatePending {
			continue
		}
		if bs, ok := s.budgetHold(&j.Spec); ok {
			if s.wakeAt.IsZero() || bs.end.Before(s.wakeAt) {
				s.wakeAt = bs.end
			}
			out[id] = [2]string{reasonBudget, bs.holdMessage()}
			continue
		}
		if j.NotBefore != nil && now.Before(*j.NotBefore) {
			if s.wakeAt.IsZero() || j.NotBefore.Before(s.wakeAt) {
				s.wakeAt = *j.NotBefore
			}
			out[id] = [2]string{reasonBackoff, fmt.Sprintf("retrying after a failure (%d of %d retries used); starts no sooner than %s",
				j.Failures, retries(j.Spec), j.NotBefore.Format("15:04:05 MST"))}
			continue
		}
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
	job.CancelRequested, job.Stopping, job.NotBefore = false, "", nil
	for _, al := range allocs {
		node, ok := s.state.Node(al.Node)
		if !ok {
			return api.Attempt{}, fmt.Errorf("plan places job %d on unknown node %s", job.ID, al.Node)
		}
		p := api.Placement{Node: al.Node, GPUIndices: al.GPUIndices, CPUs: al.CPUs, MemoryMB: al.MemoryMB,
			GPUShare: float64(al.GPUShare) / sched.MilliGPU, GPUMemoryMB: al.GPUMemoryMB}
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

// Bounds on retrying.
const (
	// maxSystemRequeues bounds the requeues that are not the job's doing (node lost, not
	// started), so a job that takes every node it lands on down does not cycle forever:
	// the loss after that many requeues fails it.
	maxSystemRequeues = 20
	// failureReset is how long an attempt must run for the failures before it to be
	// forgotten under "always": a service that crashed once a month is not in a crash loop.
	failureReset = 10 * time.Minute
	backoffFirst = 10 * time.Second
	backoffMax   = 5 * time.Minute
	// reasonBackoff holds a job to be retried until its backoff has passed.
	reasonBackoff = "Backoff"
)

// attemptOutcome sums up how an attempt whose every rank has ended went: it succeeded if
// every rank did; otherwise the first rank that ended of itself (rather than being stopped
// because another failed) says why.
func attemptOutcome(a *api.Attempt, now time.Time) (state api.JobState, reason, msg string, code *int, end time.Time) {
	end = a.AssignTime
	cause := -1
	for i, p := range a.Placements {
		if p.EndTime != nil && p.EndTime.After(end) {
			end = *p.EndTime
		}
		if p.State == api.StateSucceeded || p.Reason == api.ReasonRankFailed {
			continue
		}
		if cause < 0 || (p.EndTime != nil && a.Placements[cause].EndTime != nil && p.EndTime.Before(*a.Placements[cause].EndTime)) {
			cause = i
		}
	}
	if end.IsZero() || len(a.Placements) == 0 {
		end = now
	}
	if cause < 0 {
		for i, p := range a.Placements {
			if p.State != api.StateSucceeded {
				cause = i
				break
			}
		}
	}
	if cause < 0 {
		zero := 0
		msg = "exited with code 0"
		if len(a.Placements) > 1 {
			msg = fmt.Sprintf("all %d ranks exited with code 0", len(a.Placements))
		}
		return api.StateSucceeded, "", msg, &zero, end
	}
	p := a.Placements[cause]
	state, reason, code = p.State, p.Reason, p.ExitCode
	if !state.Terminal() || state == api.StateSucceeded {
		state = api.StateFailed
	}
	msg = p.Message
	if msg == "" {
		msg = describeEnd(state, code)
	}
	if len(a.Placements) > 1 {
		msg = fmt.Sprintf("rank %d on %s: %s; the other ranks were stopped", cause, p.Node, msg)
	}
	return state, reason, msg, code, end
}

// endAttempt records how the job's current attempt ended, once every rank has, and moves
// the job on: to a terminal state, or back to PENDING as a new attempt when the end was not
// the job's doing (node lost, preempted) or its restart policy retries it.
func (s *Server) endAttempt(job *api.Job, a *api.Attempt, now time.Time) (api.Event, error) {
	state, reason, msg, code, end := attemptOutcome(a, now)
	a.EndTime, a.ExitCode, a.Reason, a.Message = &end, code, reason, msg
	a.State = state
	ran := time.Duration(0)
	if a.StartTime != nil {
		ran = end.Sub(*a.StartTime)
	}
	policy := job.Spec.RestartPolicy
	if policy == "" {
		policy = api.RestartNever // jobs stored before restart policies existed
	}
	to := state
	switch {
	case state == api.StateSucceeded && (policy != api.RestartAlways || job.CancelRequested):
		// A job that finished before a cancel or preemption reached it did its work:
		// the record says so.
	case job.CancelRequested && job.Reason == api.ReasonIdle:
		// Stopped by its queue's idle policy (see idle.go): reclaimed, not requeued.
		to, reason = api.StateCancelled, api.ReasonIdle
		msg = job.Message + "; " + msg
	case job.CancelRequested:
		to, reason = api.StateCancelled, api.ReasonCancelled
		msg = "cancelled; " + msg
	case systemEnd(reason):
		if n := s.systemRequeues(job.ID); n >= maxSystemRequeues {
			to = api.StateFailed
			msg = fmt.Sprintf("%s; not requeued again: %d attempts were lost this way", msg, n+1)
			break
		}
		to = api.StatePending
		msg = fmt.Sprintf("%s; requeued as attempt %d (not counted against retries)", msg, job.Attempts+1)
	case job.PreemptRequested || reason == api.ReasonPreempted:
		to, reason = api.StatePending, api.ReasonPreempted
		msg = fmt.Sprintf("preempted; requeued as attempt %d with its checkpoint directory kept", job.Attempts+1)
	case reason == api.ReasonGPUError:
		// A GPU that failed under the job is not the job's doing: it is requeued without
		// spending a retry (its agent reports the GPU unhealthy, so the next attempt lands
		// elsewhere), as long as it has retries at all and is not failing every GPU it gets.
		n := s.systemRequeues(job.ID)
		switch {
		case policy == api.RestartNever || job.Failures >= retries(job.Spec):
			to = api.StateFailed
			msg += "; not requeued: the job has no retries left"
		case n >= maxSystemRequeues:
			to = api.StateFailed
			msg = fmt.Sprintf("%s; not requeued again: %d attempts were lost this way", msg, n+1)
		default:
			to = api.StatePending
			msg = fmt.Sprintf("%s; requeued as attempt %d (a GPU error is not counted against retries)", msg, job.Attempts+1)
		}
	case state == api.StateTimeout:
	case state == api.StateSucceeded:
		// "always": a service that exited is started again.
		to = api.StatePending
		job.Failures = 0
		msg = fmt.Sprintf("%s; restarted (restart policy always) as attempt %d", msg, job.Attempts+1)
	default:
		if policy == api.RestartAlways && ran >= failureReset {
			job.Failures = 0
		}
		if policy == api.RestartNever || job.Failures >= retries(job.Spec) {
			if job.Failures > 0 {
				msg = fmt.Sprintf("%s; no retries left (%d used)", msg, job.Failures)
			}
			to = api.StateFailed
			break
		}
		job.Failures++
		wait := min(backoffFirst<<(job.Failures-1), backoffMax)
		notBefore := now.Add(wait)
		job.NotBefore = &notBefore
		to = api.StatePending
		msg = fmt.Sprintf("%s; retry %d of %d in %s", msg, job.Failures, retries(job.Spec), wait)
	}
	job.ExitCode = code
	if job.StartTime == nil {
		job.StartTime = a.StartTime
	}
	ev, err := cluster.Transition(job, to, reason, msg, "system", now)
	if err != nil {
		return api.Event{}, err
	}
	if to == api.StatePending {
		job.StartTime, job.EndTime = nil, nil
		job.IdleSince, job.IdleWarned = nil, false
	}
	job.PreemptRequested, job.Borrowing, job.BorrowingInTeam, job.Stopping = false, false, false, ""
	return ev, nil
}

// systemEnd reports whether an attempt ended through no doing of its job: its node was
// lost or shut down, could not start it, or no agent started it. Such ends requeue
// without spending retries.
func systemEnd(reason string) bool {
	return reason == api.ReasonNodeLost || reason == api.ReasonNodeShutdown || reason == api.ReasonNotStarted || reason == api.ReasonNodeError
}

// systemRequeues counts the job's attempts that ended through no doing of its own,
// GPU errors included.
func (s *Server) systemRequeues(id int64) int {
	n := 0
	for _, a := range s.state.Attempts(id) {
		if systemEnd(a.Reason) || a.Reason == api.ReasonGPUError {
			n++
		}
	}
	return n
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

// checkNodes marks silent nodes NOT_READY (no new work) and, after LostAfter, LOST: the
// ranks of active attempts there end with reason node_lost, the other ranks of those
// attempts are stopped, and the jobs are requeued once every rank has ended. It also ends
// ranks that a live node's agent did not start within AssignTimeout.
func (s *Server) checkNodes(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.isLeader() {
		return
	}
	now := s.cfg.Clock.Now()
	b := &store.Batch{}
	// This runs at every turn of the loop, under the lock: only the nodes whose state
	// changes now are copied, and only the jobs that may have a rank to end are looked at
	// (those on lost nodes, and those with a rank not yet started), not every active one.
	newly := map[string]api.NodeState{}
	var lostNodes []string
	reporting := 0
	for _, n := range s.state.NodesWhere(func(n *api.Node) bool {
		to := s.silenceMoves(n, now)
		if to == api.NodeLost {
			lostNodes = append(lostNodes, n.Name)
		} else {
			reporting++
		}
		return to != n.State
	}) {
		to, silent := s.silenceMoves(&n, now), now.Sub(n.LastHeartbeat)
		newly[n.Name] = to
		b.Events = append(b.Events, api.Event{Time: now, Actor: "system", Kind: api.EventNode, Node: n.Name,
			Message: fmt.Sprintf("node %s: %s -> %s after %s without a heartbeat", n.Name, n.State, to, silent.Round(time.Second))})
		n.State = to
		b.Nodes = append(b.Nodes, n)
	}
	// lost and live say what the nodes are once this batch is applied.
	lost := func(name string) bool {
		if to, ok := newly[name]; ok {
			return to == api.NodeLost
		}
		n := s.state.PeekNode(name)
		return n != nil && n.State == api.NodeLost
	}
	live := func(name string) bool {
		n := s.state.PeekNode(name)
		notReady, _ := s.silenceLimits(name)
		return n != nil && now.Sub(n.LastHeartbeat) < notReady && !lost(name)
	}
	ids := s.state.UnstartedIDs()
	for _, name := range lostNodes {
		ids = append(ids, s.state.ActiveOnNode(name)...)
	}
	if len(lostNodes) > 0 {
		slices.Sort(ids)
		ids = slices.Compact(ids)
	}
	for _, id := range ids {
		// Most of these have every rank on a live node, started: look before copying.
		a0 := s.state.PeekAttempt(id)
		if a0 == nil || !slices.ContainsFunc(a0.Placements, func(p api.Placement) bool {
			return !p.State.Terminal() && (lost(p.Node) || (p.State == "" && now.Sub(a0.AssignTime) >= s.cfg.AssignTimeout && live(p.Node)))
		}) {
			continue
		}
		job, _ := s.state.Job(id)
		a, ok := s.state.CurrentAttempt(id)
		if !ok {
			continue
		}
		var evs []api.Event
		changed := false
		// The placements are the state's own until the batch is applied: change a copy.
		a.Placements = slices.Clone(a.Placements)
		for rank := range a.Placements {
			p := &a.Placements[rank]
			if p.State.Terminal() {
				continue
			}
			switch {
			case lost(p.Node):
				p.State, p.Reason, p.Message = api.StateFailed, api.ReasonNodeLost, "node "+p.Node+" stopped reporting"
			case p.State == "" && live(p.Node) && now.Sub(a.AssignTime) >= s.cfg.AssignTimeout:
				p.State, p.Reason = api.StateFailed, api.ReasonNotStarted
				p.Message = fmt.Sprintf("the agent of node %s did not start it within %s", p.Node, s.cfg.AssignTimeout)
			default:
				continue
			}
			end := now
			p.EndTime = &end
			s.endRankUsage(p, rankKey{id, a.N, rank}, 0, now)
			changed = true
			evs = append(evs, s.rankEnded(&job, &a, rank, now)...)
			if job.State.Terminal() || job.State == api.StatePending {
				break
			}
		}
		if changed {
			b.Jobs, b.Attempts, b.Events = append(b.Jobs, job), append(b.Attempts, a), append(b.Events, evs...)
		}
	}
	if err := s.commit(ctx, b); err != nil {
		if !errors.Is(err, errWritesHeld) {
			s.log.Error("node liveness: commit failed", "err", err)
		}
		return
	}
	s.paceHeartbeats(reporting)
	s.pruneTelemetry(now)
	for _, ev := range b.Events {
		if ev.Kind == api.EventNode {
			s.log.Warn(ev.Message)
		}
	}
}

// silenceMoves is the state node n moves to after its silence until now: NOT_READY or
// LOST, or the state it is in.
func (s *Server) silenceMoves(n *api.Node, now time.Time) api.NodeState {
	silent := now.Sub(n.LastHeartbeat)
	notReady, lost := s.silenceLimits(n.Name)
	switch {
	case silent >= lost && n.State != api.NodeLost:
		return api.NodeLost
	case silent >= notReady && n.State == api.NodeReady:
		return api.NodeNotReady
	}
	return n.State
}

func retries(spec api.JobSpec) int {
	if spec.Retries == nil {
		return defaultRetries
	}
	return *spec.Retries
}
