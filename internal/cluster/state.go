package cluster

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/batch"
)

// State is the authoritative in-memory copy of what the store holds. It changes only through
// Apply, with batches that the store has already committed, so memory never runs ahead of
// disk. It is not safe for concurrent use: the server serialises access.
type State struct {
	jobs     map[int64]*api.Job
	attempts map[int64][]api.Attempt // by job, attempt N at index N-1
	nodes    map[string]*api.Node
	// nodeNames is every node's name, sorted; nil when a node came or went since.
	nodeNames []string
	queues    map[string]api.Queue
	teams     map[string]api.Team
	resv      map[int64]api.Reservation
	maxID     int64
	maxResv   int64

	// pending is the set of jobs in PENDING, kept so a scheduling cycle need not scan
	// finished jobs.
	pending map[int64]struct{}
	// active is the set of jobs that hold resources (ASSIGNED or RUNNING).
	active map[int64]struct{}
	// held is the set of jobs in HELD, rechecked every cycle for met dependencies.
	held map[int64]struct{}
	// deadlined is the set of jobs not ended whose deadline is not yet decided, which
	// every cycle checks for a deadline passed: few jobs have one.
	deadlined map[int64]struct{}
	// idle is the set of active jobs flagged idle (Job.IdleSince), few at any time.
	idle map[int64]struct{}
	// gated is the set of jobs not ended that an array limit or a retry's backoff may hold
	// back, which every cycle checks: most jobs have neither.
	gated map[int64]struct{}
	// waiting counts each user's jobs that have not started (pending or held), for the
	// per-user limit a submit checks.
	waiting map[string]int
	// depth counts each queue's jobs that have not ended, by state (top.go).
	depth map[string]*api.QueueDepth
	// usage is every team's fair-share usage, kept up to date as attempts start and end;
	// made on first use (fairShare).
	usage *FairShare
	// HalfLife is how fast fair-share usage decays. Set it before Load.
	HalfLife time.Duration

	// The indexes of index.go.
	jobIdx   jobIndex
	onNode   map[string]map[int64]struct{} // node -> active jobs with a rank there
	jobNodes map[int64][]string            // job -> the nodes onNode files it under
	// gpuHolds counts, per node and GPU index, the ranks of active jobs' current attempts
	// that hold the GPU, whole or in a share; jobGPUs is what each job adds to it.
	gpuHolds map[string]map[int]int
	jobGPUs  map[int64][]heldGPU
	// unstarted: active jobs whose current attempt has a rank not yet reported.
	unstarted map[int64]struct{}
	fit       map[fitKey]map[string]struct{}
	models    map[string]int // GPU model -> nodes reporting it

	id identity

	// ended holds the final state of each job evicted from memory (evict.go);
	// evictedBefore is the latest eviction cutoff.
	ended         map[int64]api.JobState
	evictedBefore time.Time

	// Change sequence (see Seq): seq counts the batches applied; jobSeq and nodeSeq say
	// when each job and node last changed, configSeq when queues, teams, reservations,
	// settings or users last did.
	seq       uint64
	jobSeq    map[int64]uint64
	nodeSeq   map[string]uint64
	configSeq uint64

	// snap is what the last Snapshot was made of (snapshot.go).
	snap snapCache
}

// New returns an empty state.
func New() *State {
	return &State{
		jobs:      map[int64]*api.Job{},
		attempts:  map[int64][]api.Attempt{},
		nodes:     map[string]*api.Node{},
		queues:    map[string]api.Queue{},
		teams:     map[string]api.Team{},
		resv:      map[int64]api.Reservation{},
		pending:   map[int64]struct{}{},
		active:    map[int64]struct{}{},
		held:      map[int64]struct{}{},
		deadlined: map[int64]struct{}{},
		idle:      map[int64]struct{}{},
		gated:     map[int64]struct{}{},
		waiting:   map[string]int{},
		depth:     map[string]*api.QueueDepth{},
		HalfLife:  7 * 24 * time.Hour,
		jobIdx:    jobIndex{byState: map[api.JobState][]uint64{}},
		onNode:    map[string]map[int64]struct{}{},
		jobNodes:  map[int64][]string{},
		gpuHolds:  map[string]map[int]int{},
		jobGPUs:   map[int64][]heldGPU{},
		unstarted: map[int64]struct{}{},
		fit:       map[fitKey]map[string]struct{}{},
		models:    map[string]int{},
		id:        newIdentity(),
		jobSeq:    map[int64]uint64{},
		nodeSeq:   map[string]uint64{},
	}
}

// Seq returns the state's change sequence: it grows with every change that may alter a
// scheduling decision, so a plan made from a snapshot taken at Seq() can be checked
// against what changed since (JobChangedSince, NodeChangedSince, ConfigChangedSince),
// and a scheduling loop can skip a cycle when nothing did.
func (s *State) Seq() uint64 { return s.seq }

// JobChangedSince reports whether job id, or one of its attempts, changed after sequence
// seq.
func (s *State) JobChangedSince(id int64, seq uint64) bool { return s.jobSeq[id] > seq }

// NodeChangedSince reports whether node name changed (or went) after sequence seq.
func (s *State) NodeChangedSince(name string, seq uint64) bool { return s.nodeSeq[name] > seq }

// ConfigChangedSince reports whether queues, teams, reservations, settings or users
// changed after sequence seq.
func (s *State) ConfigChangedSince(seq uint64) bool { return s.configSeq > seq }

// Apply makes a committed batch part of the in-memory state; at start, the whole store is
// applied as one batch.
func (s *State) Apply(b *batch.Batch) {
	s.seq++
	for i := range b.Jobs {
		s.jobSeq[b.Jobs[i].ID] = s.seq
		s.forgetSnapJob(b.Jobs[i].ID)
	}
	for i := range b.Attempts {
		s.jobSeq[b.Attempts[i].JobID] = s.seq
		s.forgetSnapJob(b.Attempts[i].JobID)
	}
	for i := range b.Nodes {
		s.nodeSeq[b.Nodes[i].Name] = s.seq
	}
	for _, name := range b.DeleteNodes {
		s.nodeSeq[name] = s.seq
	}
	if len(b.Queues)+len(b.Teams)+len(b.Reservations)+len(b.Settings)+len(b.Users)+
		len(b.DeleteQueues)+len(b.DeleteTeams)+len(b.DeleteReservations)+len(b.DeleteUsers) > 0 {
		s.configSeq = s.seq
	}
	inOrder := true
	for i := range b.Jobs {
		j := b.Jobs[i]
		old, known := s.jobs[j.ID]
		var was api.JobState
		if known {
			was = old.State
			if isWaiting(old.State) {
				s.waiting[old.Spec.User]--
			}
			s.countDepth(old, -1)
		}
		if isWaiting(j.State) {
			s.waiting[j.Spec.User]++
		}
		s.countDepth(&j, 1)
		s.jobs[j.ID] = &j
		if inOrder {
			inOrder = s.indexJob(&j, was, known)
		}
		if j.ID > s.maxID {
			s.maxID = j.ID
		}
		delete(s.pending, j.ID)
		delete(s.active, j.ID)
		delete(s.held, j.ID)
		delete(s.deadlined, j.ID)
		delete(s.gated, j.ID)
		delete(s.idle, j.ID)
		if j.State.Active() && j.IdleSince != nil {
			s.idle[j.ID] = struct{}{}
		}
		if !j.State.Terminal() {
			if j.Spec.Deadline != nil && j.DeadlineResult == "" {
				s.deadlined[j.ID] = struct{}{}
			}
			if j.ArrayLimit != 0 || j.NotBefore != nil {
				s.gated[j.ID] = struct{}{}
			}
		}
		switch {
		case j.State == api.StatePending:
			s.pending[j.ID] = struct{}{}
		case j.State == api.StateHeld:
			s.held[j.ID] = struct{}{}
		case j.State.Active():
			s.active[j.ID] = struct{}{}
		}
	}
	for _, a := range b.Attempts {
		list := s.attempts[a.JobID]
		for len(list) < a.N {
			list = append(list, api.Attempt{})
		}
		prev := list[a.N-1]
		list[a.N-1] = a
		s.attempts[a.JobID] = list
		if prev.EndTime == nil {
			s.chargeUsage(prev, a)
		}
	}
	if !inOrder {
		s.jobIdx.rebuild(s.jobs)
	}
	// A job's placements follow from its state and its current attempt: either may have
	// changed.
	for _, j := range b.Jobs {
		s.indexAttempt(j.ID)
	}
	for _, a := range b.Attempts {
		s.indexAttempt(a.JobID)
	}
	for i := range b.Nodes {
		n := b.Nodes[i]
		if old, ok := s.nodes[n.Name]; ok {
			s.indexNode(old, false)
		} else {
			s.nodeNames = nil
		}
		s.nodes[n.Name] = &n
		s.indexNode(&n, true)
	}
	for _, q := range b.Queues {
		s.queues[q.Name] = q
	}
	for _, t := range b.Teams {
		s.teams[t.Name] = t
	}
	for _, r := range b.Reservations {
		s.resv[r.ID] = r
		s.maxResv = max(s.maxResv, r.ID)
	}
	for _, name := range b.DeleteQueues {
		delete(s.queues, name)
	}
	for _, name := range b.DeleteTeams {
		delete(s.teams, name)
	}
	for _, id := range b.DeleteReservations {
		delete(s.resv, id)
	}
	s.applyIdentity(b)
}

func isWaiting(st api.JobState) bool { return st == api.StatePending || st == api.StateHeld }

// Waiting counts the user's jobs that have not started: pending or held.
func (s *State) Waiting(user string) int { return s.waiting[user] }

// NextJobID returns the ID the next submitted job gets. IDs that were handed out but never
// committed are reused, which is harmless: nobody was told about them.
func (s *State) NextJobID() int64 { return s.maxID + 1 }

// Job returns a copy of the job with the given ID.
func (s *State) Job(id int64) (api.Job, bool) {
	j, ok := s.jobs[id]
	if !ok {
		return api.Job{}, false
	}
	return *j, true
}

// Attempts returns the job's attempts, oldest first.
func (s *State) Attempts(id int64) []api.Attempt {
	return slices.Clone(s.attempts[id])
}

// CurrentAttempt returns the job's latest attempt. Its Placements are the state's own:
// clone them before changing any.
func (s *State) CurrentAttempt(id int64) (api.Attempt, bool) {
	list := s.attempts[id]
	if len(list) == 0 {
		return api.Attempt{}, false
	}
	return list[len(list)-1], true
}

// Jobs returns copies of the jobs accepted by keep, ordered by ID.
func (s *State) Jobs(keep func(*api.Job) bool) []api.Job {
	var out []api.Job
	for _, j := range s.jobs {
		if keep == nil || keep(j) {
			out = append(out, *j)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out
}

// PendingIDs returns the IDs of pending jobs, ascending.
func (s *State) PendingIDs() []int64 { return s.jobIdx.ids(len(s.pending), api.StatePending) }

// UnfinishedIDs returns the IDs of the jobs not yet ended (held, pending or active),
// ascending.
func (s *State) UnfinishedIDs() []int64 {
	return s.jobIdx.ids(len(s.held)+len(s.pending)+len(s.active), api.StateHeld, api.StatePending, api.StateAssigned, api.StateRunning)
}

// OpenDeadlineIDs returns the IDs of the jobs not ended whose deadline is not yet decided,
// ascending.
func (s *State) OpenDeadlineIDs() []int64 { return sortedKeys(s.deadlined) }

// IdleIDs returns the active jobs flagged idle (Job.IdleSince), in ID order.
func (s *State) IdleIDs() []int64 { return sortedKeys(s.idle) }

// GatedIDs returns the IDs of the jobs not ended that have an array limit or a time not to
// start before, ascending.
func (s *State) GatedIDs() []int64 { return sortedKeys(s.gated) }

// ActiveIDs returns the IDs of jobs holding resources, ascending.
func (s *State) ActiveIDs() []int64 {
	return s.jobIdx.ids(len(s.active), api.StateAssigned, api.StateRunning)
}

func sortedKeys(m map[int64]struct{}) []int64 {
	out := make([]int64, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// Node returns a copy of the named node.
func (s *State) Node(name string) (api.Node, bool) {
	n, ok := s.nodes[name]
	if !ok {
		return api.Node{}, false
	}
	return *n, true
}

// NodesWhere returns copies of the nodes keep accepts, ordered by name. keep reads the
// state's own node and must not change it.
func (s *State) NodesWhere(keep func(*api.Node) bool) []api.Node {
	var out []api.Node
	for _, n := range s.nodes {
		if keep(n) {
			out = append(out, *n)
		}
	}
	slices.SortFunc(out, func(a, b api.Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Peek returns the state's own record of job id, or nil, for reading only: a cycle reads
// every pending and active job, and a copy of each would cost more than the reading.
// Callers hold the lock that guards the state and must not change the record, which
// the next Apply may replace.
func (s *State) Peek(id int64) *api.Job { return s.jobs[id] }

// PeekNode returns the state's own record of the named node, or nil, for reading only, on
// the terms of Peek.
func (s *State) PeekNode(name string) *api.Node { return s.nodes[name] }

// PeekAttempt returns the state's own record of job id's current attempt, or nil, for
// reading only, on the terms of Peek.
func (s *State) PeekAttempt(id int64) *api.Attempt {
	list := s.attempts[id]
	if len(list) == 0 {
		return nil
	}
	return &list[len(list)-1]
}

// Nodes returns copies of all nodes, ordered by name.
func (s *State) Nodes() []api.Node {
	out := make([]api.Node, 0, len(s.nodes))
	for _, n := range s.nodes {
		out = append(out, *n)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// SetLastHeartbeat records when a node was last heard from. Heartbeat times change every few
// seconds and are not worth a write each; the store keeps the value of the last node change.
func (s *State) SetLastHeartbeat(name string, t time.Time) {
	if n, ok := s.nodes[name]; ok {
		n.LastHeartbeat = t
	}
}

// SetNodeLive records what a node's last telemetry reading shows: the reading, the GPU
// processes of no live attempt, and the GPUs those hold (which take no new work). They
// change with every reading and live in memory only: a restart learns them from the next.
func (s *State) SetNodeLive(name string, tel *api.Telemetry, leftovers []api.GPUProcess, held []int) {
	if n, ok := s.nodes[name]; ok {
		if !slices.Equal(n.HeldGPUs, held) {
			// GPUs held by leftovers take or give back room: a scheduling change.
			s.seq++
			s.nodeSeq[name] = s.seq
		}
		n.Telemetry, n.Leftovers, n.HeldGPUs = tel, leftovers, held
	}
}

// SetNodeClock records how far node name's clock is behind the server's (see
// api.Node.ClockOffsetS). It is not stored and changes no scheduling.
func (s *State) SetNodeClock(name string, off time.Duration) {
	if n, ok := s.nodes[name]; ok {
		n.ClockOffsetS = int64(off / time.Second)
	}
}

// SetNodeHealth records a node's last health check and what degrades it when only their
// wording changed, which is not worth a write; changes of substance are stored through
// Apply.
func (s *State) SetNodeHealth(name string, hc *api.HealthCheck, dataDir string, degraded []string) {
	if n, ok := s.nodes[name]; ok {
		n.HealthCheck, n.DataDirProblem, n.Degraded = hc, dataDir, degraded
	}
}

// Team returns the named team.
func (s *State) Team(name string) (api.Team, bool) {
	t, ok := s.teams[name]
	return t, ok
}

// Teams returns all teams, ordered by name.
func (s *State) Teams() []api.Team {
	out := make([]api.Team, 0, len(s.teams))
	for _, t := range s.teams {
		out = append(out, t)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// TeamOf returns the team a user's jobs go to when they name none: the first team, by
// name, that lists the user as a member, else "default".
func (s *State) TeamOf(user string) string {
	for _, t := range s.Teams() {
		if slices.Contains(t.Members, user) {
			return t.Name
		}
	}
	return "default"
}

// Reservations returns all reservations, ordered by ID.
func (s *State) Reservations() []api.Reservation {
	out := make([]api.Reservation, 0, len(s.resv))
	for _, r := range s.resv {
		out = append(out, r)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out
}

// NextReservationID returns the ID the next reservation gets.
func (s *State) NextReservationID() int64 { return s.maxResv + 1 }

// HeldIDs returns the IDs of held jobs, ascending.
func (s *State) HeldIDs() []int64 { return s.jobIdx.ids(len(s.held), api.StateHeld) }

// Queue returns the named queue.
func (s *State) Queue(name string) (api.Queue, bool) {
	q, ok := s.queues[name]
	return q, ok
}

// Queues returns all queues, ordered by name.
func (s *State) Queues() []api.Queue {
	out := make([]api.Queue, 0, len(s.queues))
	for _, q := range s.queues {
		out = append(out, q)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// SetPendingReason records why a pending job waits. Reasons are recomputed every cycle and
// live in memory only; a restart recomputes them in its first cycle.
func (s *State) SetPendingReason(id int64, code, msg string, est *time.Time, prio *api.Priority) {
	if j, ok := s.jobs[id]; ok && j.State == api.StatePending {
		j.Reason, j.Message, j.EstimatedStart, j.Priority = code, msg, est, prio
	}
}

// NodeUsage is what active jobs hold on one node.
type NodeUsage struct {
	GPUs     map[int]int64 // GPU index -> job ID (one of them for a shared GPU)
	CPUs     int
	MemoryMB int64
	Jobs     []int64
	// Tenants lists, per shared GPU, the jobs that hold a share of it, in ID order.
	Tenants map[int][]api.Tenant
}

// Usage returns what active jobs hold on each node, from their current attempts.
func (s *State) Usage() map[string]*NodeUsage {
	out := map[string]*NodeUsage{}
	for _, id := range s.ActiveIDs() {
		a, ok := s.CurrentAttempt(id)
		if !ok {
			continue
		}
		for i := range a.Placements {
			p := &a.Placements[i]
			u := out[p.Node]
			if u == nil {
				u = &NodeUsage{GPUs: map[int]int64{}}
				out[p.Node] = u
			}
			u.add(id, p)
		}
	}
	return out
}

// NodeUsage returns what active jobs hold on one node, as Usage()[node] would, or nil when
// they hold nothing there. It reads the per-node index: its cost follows the node's jobs.
func (s *State) NodeUsage(node string) *NodeUsage {
	var u *NodeUsage
	for _, id := range s.ActiveOnNode(node) {
		a, ok := s.CurrentAttempt(id)
		if !ok {
			continue
		}
		for i := range a.Placements {
			p := &a.Placements[i]
			if p.Node != node {
				continue
			}
			if u == nil {
				u = &NodeUsage{GPUs: map[int]int64{}}
			}
			u.add(id, p)
		}
	}
	return u
}

// add counts what job id's rank p holds.
func (u *NodeUsage) add(id int64, p *api.Placement) {
	for _, g := range p.GPUIndices {
		u.GPUs[g] = id
		if p.GPUShare > 0 {
			if u.Tenants == nil {
				u.Tenants = map[int][]api.Tenant{}
			}
			u.Tenants[g] = append(u.Tenants[g], api.Tenant{JobID: id, Share: p.GPUShare, MemoryMB: p.GPUMemoryMB})
		}
	}
	u.CPUs += p.CPUs
	u.MemoryMB += p.MemoryMB
	u.Jobs = append(u.Jobs, id)
}

// transitions lists which state may follow which (DESIGN.md, "Job lifecycle").
var transitions = map[api.JobState][]api.JobState{
	api.StatePending:  {api.StateAssigned, api.StateHeld, api.StateCancelled, api.StateFailed},
	api.StateHeld:     {api.StatePending, api.StateCancelled, api.StateFailed},
	api.StateAssigned: {api.StateRunning, api.StatePending, api.StateSucceeded, api.StateFailed, api.StateCancelled, api.StateTimeout},
	api.StateRunning:  {api.StatePending, api.StateSucceeded, api.StateFailed, api.StateCancelled, api.StateTimeout},
}

// Transition moves j to state to and returns the event that records it. It refuses moves the
// lifecycle does not allow, so a late or duplicated report can never revive a finished job.
func Transition(j *api.Job, to api.JobState, reason, msg, actor string, now time.Time) (api.Event, error) {
	if !slices.Contains(transitions[j.State], to) {
		return api.Event{}, fmt.Errorf("job %d: no transition from %s to %s", j.ID, j.State, to)
	}
	ev := api.Event{
		Time: now, Actor: actor, Kind: api.EventTransition, JobID: j.ID, Attempt: j.Attempts,
		From: j.State, To: to, Reason: reason, Message: msg,
	}
	j.State, j.Reason, j.Message = to, reason, msg
	j.EstimatedStart, j.Priority = nil, nil
	if to.Terminal() {
		t := now
		j.EndTime = &t
	}
	decideDeadline(j, to, now)
	return ev, nil
}

// decideDeadline records whether the job met its deadline, at the transition that decides
// it: a start-by deadline at the first assignment; a finish-by one when the job ends,
// met only by success in time. A deadline already marked missed (it passed while the
// job waited or ran, see the server's missedDeadlines) gets its lateness. A job
// cancelled before its deadline has no result: it was not the schedule's doing.
func decideDeadline(j *api.Job, to api.JobState, now time.Time) {
	dl := j.Spec.Deadline
	if dl == nil || j.DeadlineResult == api.DeadlineMet || j.DeadlineMissedBy > 0 {
		return
	}
	late := now.After(*dl)
	switch {
	case j.Spec.DeadlineKind == api.DeadlineStart:
		if to != api.StateAssigned || (j.DeadlineResult == "" && j.Attempts > 1) {
			return
		}
	case !to.Terminal():
		return
	case to == api.StateCancelled && !late:
		return
	case to != api.StateSucceeded && !late:
		j.DeadlineResult = api.DeadlineMissed // failed or timed out: not done by it
		return
	}
	if late {
		j.DeadlineResult, j.DeadlineMissedBy = api.DeadlineMissed, int64(now.Sub(*dl).Seconds())
		return
	}
	j.DeadlineResult = api.DeadlineMet
}
