package cluster

import (
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/sched"
)

// Snapshot builds the scheduler's view of the state: nodes with their GPUs, the queues, what
// active jobs hold and the jobs waiting. Occupancy is derived from attempts, never stored
// twice, so the scheduler and the API cannot disagree about which GPU is whose.
//
// Pending jobs that keep is false for are left out: the server uses it for rules the core
// does not know (array and per-user limits).
//
// Every job carries the service it has received (serviceOf): GPU-seconds over its attempts,
// the current one up to now, for the "las" order and the default policy's service factor.
//
// A snapshot's parts are read under the server's lock, so they cost what changed since the
// last one, not what the cluster holds: each node's and each job's entry is kept from one
// snapshot to the next (snapCache) and made again only when Apply says it changed. What
// a snapshot returns is never written again, by the state or by the scheduler: entries
// are replaced, not updated, and the node list is a new slice whenever a node changed, so
// a plan may be made from it while the state moves on. Its NodesVersion changes exactly
// when its nodes do, so that a sched.Planner keeps its node layout between cycles.
func (s *State) Snapshot(now time.Time, keep func(id int64) bool) *sched.Snapshot {
	return s.SnapshotParts(now, keep).Build()
}

// SnapshotParts is Snapshot in two steps: it reads under the caller's lock what only the
// state can say (which jobs, their entries, the service each has received), and the
// parts' Build, which needs no lock, then copies the jobs' entries into the snapshot.
// Copying 100,000 jobs' entries was most of the time a cycle held the server's lock.
func (s *State) SnapshotParts(now time.Time, keep func(id int64) bool) *SnapshotParts {
	parts, _ := s.SnapshotPartsPausing(now, keep, 0, nil)
	return parts
}

// SnapshotPartsPausing is SnapshotParts for a caller whose lock others wait on. Every
// chunk jobs it calls pause, which may let go of the lock and take it again; it then
// goes on from the job after the last one it read, found again by ID, since the jobs
// may have moved meanwhile. When pause returns false the walk stops, and it returns no
// parts and false. A chunk of 0, or a nil pause, never pauses.
//
// At 104,000 jobs the walk held the server's lock for 20 to 90 ms a cycle, and up to
// 430 ms while many jobs changed, and every submit and heartbeat arriving meanwhile
// waited for it. With pauses, a job that changes during the walk may be read as it was
// before the change or after it, or, if it moved between the running and the pending
// lists, in both or in neither; the nodes and the queues, teams and reservations are read
// before the first pause. So the caller must treat every job and node changed since the
// walk began (the state's Seq then: JobChangedSince, NodeChangedSince) as unknown to the
// plan, as it must for changes made while the plan is made.
func (s *State) SnapshotPartsPausing(now time.Time, keep func(id int64) bool, chunk int, pause func() bool) (*SnapshotParts, bool) {
	snap := &sched.Snapshot{Queues: map[string]sched.Queue{}, Teams: map[string]sched.Team{}}
	usage := s.TeamUsage(now)
	for _, t := range s.teams {
		st := sched.Team{Name: t.Name, Weight: t.Weight, Usage: usage[t.Name], Quota: schedQuotas(t.Quotas),
			CPU: schedQuota(t.CPUQuota), Memory: schedQuota(t.MemoryQuotaMB)}
		if len(t.Projects) > 0 {
			st.Projects = make(map[string]sched.Project, len(t.Projects))
			for _, p := range t.Projects {
				st.Projects[p.Name] = sched.Project{Name: p.Name, Quota: schedQuotas(p.Quotas),
					CPU: schedQuota(p.CPUQuota), Memory: schedQuota(p.MemoryQuotaMB)}
			}
		}
		snap.Teams[t.Name] = st
	}
	if _, ok := snap.Teams["default"]; !ok {
		snap.Teams["default"] = sched.Team{Name: "default", Weight: 1, Usage: usage["default"]}
	}
	for _, r := range s.Reservations() {
		if r.End.After(now) {
			sr := sched.Reservation{ID: r.ID, Name: r.Name, Team: r.Team, Nodes: r.Nodes, Start: r.Start, End: r.End}
			if r.ByCount() {
				sr.GPUs, sr.Model, sr.Pool = r.GPUs, r.Model, r.Pool
			}
			snap.Reservations = append(snap.Reservations, sr)
		}
	}
	s.snapNodes()
	snap.Nodes, snap.Maintenance, snap.NodesVersion = s.snap.nodes, s.snap.maint, s.snap.version
	for _, q := range s.queues {
		snap.Queues[q.Name] = sched.Queue{Name: q.Name, Tier: q.Tier, Preemptible: q.Preemptible, NeverPreempt: q.NeverPreempt,
			Pools: q.Pools, UserGPULimit: q.UserGPULimit}
	}
	x := &s.jobIdx
	parts := &SnapshotParts{snap: snap, now: now, running: make([]snapRef, 0, len(s.active)), pending: make([]snapRef, 0, len(s.pending))}
	// Per job, only its entry is read, from the index it is walked in: the rest of what
	// it says was read from the job and its attempts when the entry was made, which any
	// change to them drops. The service each has received is worked out by Build,
	// outside the lock, unless its attempts need reading.
	w := snapWalk{s: s, chunk: chunk, pause: pause}
	ok := w.walk([]api.JobState{api.StateAssigned, api.StateRunning}, func(pos int, id int64) {
		e := x.entry(pos)
		if e == nil || e.running == nil {
			j := s.jobs[id]
			a, ok := s.CurrentAttempt(id)
			if !ok {
				return
			}
			r := runningOf(j, &a)
			e = &snapJob{running: &r, sv: s.servicePartsOf(id)}
			x.setEntry(pos, e)
		}
		parts.running = append(parts.running, s.refOf(id, e, now))
	}) && w.walk([]api.JobState{api.StatePending}, func(pos int, id int64) {
		if keep != nil && !keep(id) {
			return
		}
		e := x.entry(pos)
		if e == nil || e.pending == nil {
			p := pendingOf(s.jobs[id])
			e = &snapJob{pending: &p, sv: s.servicePartsOf(id)}
			x.setEntry(pos, e)
		}
		parts.pending = append(parts.pending, s.refOf(id, e, now))
	})
	if !ok {
		return nil, false
	}
	return parts, true
}

// snapWalk walks the job index for SnapshotPartsPausing, pausing every chunk jobs.
type snapWalk struct {
	s     *State
	chunk int
	pause func() bool
	n     int // jobs read since the last pause
}

// walk calls read with the position and ID of each job in any of states, ascending by
// ID, pausing as its chunk says. It reports false when a pause said to stop.
func (w *snapWalk) walk(states []api.JobState, read func(pos int, id int64)) bool {
	x := &w.s.jobIdx
	start := 0
	for {
		var last int64
		paused := false
		for pos := range x.positionsFrom(start, states...) {
			last = x.order[pos]
			read(pos, last)
			if w.n++; w.pause != nil && w.chunk > 0 && w.n >= w.chunk {
				paused = true
				break
			}
		}
		if !paused {
			return true
		}
		w.n = 0
		if !w.pause() {
			return false
		}
		// Jobs may have been loaded or evicted meanwhile: positions move, IDs do not.
		var found bool
		if start, found = slices.BinarySearch(x.order, last); found {
			start++
		}
	}
}

// refOf is job id's entry e for Build, with the service the job has received at now
// when it must be read from the job's attempts (its parts are not exact).
func (s *State) refOf(id int64, e *snapJob, now time.Time) snapRef {
	if e.sv.exact {
		return snapRef{e: e}
	}
	return snapRef{e: e, sv: s.serviceOf(id, now), read: true}
}

// SnapshotParts is a snapshot read from the state but not yet built (see
// State.SnapshotParts).
type SnapshotParts struct {
	snap             *sched.Snapshot
	now              time.Time
	running, pending []snapRef
}

// snapRef is a job's entry for Build to copy, with the service it has received where
// that was read under the lock (read). Entries are never written once made, so Build may
// read them while the state moves on.
type snapRef struct {
	e    *snapJob
	sv   service
	read bool
}

// service is the service ref's job has received at now.
func (ref *snapRef) service(now time.Time) service {
	if ref.read {
		return ref.sv
	}
	return ref.e.sv.at(now)
}

// Pending is how many pending jobs the snapshot will hold.
func (p *SnapshotParts) Pending() int { return len(p.pending) }

// Build completes the snapshot. It reads nothing of the state, so the caller need not
// hold the lock it took the parts under.
func (p *SnapshotParts) Build() *sched.Snapshot {
	snap := p.snap
	snap.Running = make([]sched.Running, len(p.running))
	for i := range p.running {
		ref := &p.running[i]
		r := &snap.Running[i]
		*r = *ref.e.running
		sv := ref.service(p.now)
		r.AttainedService, r.LastRun, r.Requeued = sv.attained, sv.lastRun, sv.requeued
	}
	snap.Pending = make([]sched.Job, len(p.pending))
	for i := range p.pending {
		ref := &p.pending[i]
		j := &snap.Pending[i]
		*j = *ref.e.pending
		sv := ref.service(p.now)
		j.AttainedService, j.LastRun, j.Requeued = sv.attained, sv.lastRun, sv.requeued
	}
	return snap
}

// snapCache is what the last snapshot was made of (see Snapshot).
type snapCache struct {
	// nodes and maint are the last snapshot's node list and maintenance windows, made at
	// seq under the configuration of configSeq; version is their NodesVersion.
	nodes     []sched.Node
	maint     []sched.Maintenance
	seq       uint64
	configSeq uint64
	version   uint64
	// Each active and pending job's entry is kept in the job index (jobIndex.entries);
	// Apply and Evict drop the entry of every job they touch.
}

// snapJob is a job's entry in the snapshot: running for an active job, pending for a
// pending one (the other is nil). The service it has received is filled in at each
// snapshot, from sv: a running job's grows with time.
type snapJob struct {
	running *sched.Running
	pending *sched.Job
	sv      serviceParts
}

// forgetSnapJob drops job id's snapshot entry: the job, or its attempts, changed.
func (s *State) forgetSnapJob(id int64) { s.jobIdx.forgetEntry(id) }

// snapNodes brings the cached node list up to date: the same slice when no node changed
// since it was made, else a new one in which only the changed nodes are made again.
func (s *State) snapNodes() {
	c := &s.snap
	if c.seq == s.seq && c.version != 0 {
		return
	}
	fresh := c.version == 0 || c.configSeq != s.configSeq || len(c.nodes) != len(s.nodes)
	var changed []int
	if !fresh {
		for i := range c.nodes {
			name := c.nodes[i].Name
			if _, ok := s.nodes[name]; !ok {
				fresh = true // one went and another came
				break
			}
			if s.nodeSeq[name] > c.seq {
				changed = append(changed, i)
			}
		}
	}
	c.seq = s.seq
	if !fresh && len(changed) == 0 {
		return
	}
	pools := s.Pools()
	var nodes []sched.Node
	if fresh {
		names := make([]string, 0, len(s.nodes))
		for name := range s.nodes {
			names = append(names, name)
		}
		slices.Sort(names)
		nodes = make([]sched.Node, len(names))
		for i, name := range names {
			nodes[i] = nodeOf(s.nodes[name], pools)
		}
	} else {
		nodes = slices.Clone(c.nodes)
		for _, i := range changed {
			nodes[i] = nodeOf(s.nodes[nodes[i].Name], pools)
		}
	}
	var maint []sched.Maintenance
	for i := range nodes {
		if m := s.nodes[nodes[i].Name].Maintenance; m != nil {
			sm := sched.Maintenance{Node: nodes[i].Name, Reason: m.Reason, Start: m.Start}
			if m.End != nil {
				sm.End = *m.End
			}
			maint = append(maint, sm)
		}
	}
	c.nodes, c.maint, c.configSeq = nodes, maint, s.configSeq
	c.version = nodesVersions.Add(1)
}

// nodesVersions numbers node lists across every State of the process, so that a planner
// that outlives a State (a server that reads the store afresh) never takes another
// State's list for the one it has seen.
var nodesVersions atomic.Uint64

// nodeOf is node n as the scheduler sees it.
func nodeOf(n *api.Node, pools map[string]api.Pool) sched.Node {
	sn := sched.Node{
		Name:   n.Name,
		Labels: n.Labels,
		// A syncing node may still run attempts the server gave up on (it was lost,
		// or its agent changed): nothing new goes there until its agent says so.
		Schedulable:   n.State == api.NodeReady && !n.Syncing,
		CPUs:          n.CPUs,
		MemoryMB:      n.MemoryMB,
		DriverVersion: n.DriverVersion,
		CUDAVersion:   n.CUDAVersion,
		// Only the last run counts: a node whose check passes again takes work again.
		HealthFailed:     (n.HealthCheck != nil && !n.HealthCheck.OK) || n.DataDirProblem != "",
		CannotRun:        n.DataDirProblem != "",
		ContainerRuntime: n.ContainerRuntime,
		Sharing:          pools[n.Labels["pool"]].Sharing,
		ExclusivePool:    pools[n.Labels["pool"]].Exclusive,
	}
	if len(n.GPUs) > 0 {
		sn.GPUs = make([]sched.GPU, 0, len(n.GPUs))
	}
	for _, g := range n.GPUs {
		sn.GPUs = append(sn.GPUs, sched.GPU{Index: g.Index, ID: g.UUID, Model: g.Model, MemoryMB: g.MemoryMB,
			// A GPU that fell off the bus is not healthy, whatever its last report said.
			Healthy: g.Healthy && !g.Missing,
			// Leftover processes keep the GPU from new work until they are gone; the
			// list is a handful of indices at most.
			Held:        slices.Contains(n.HeldGPUs, g.Index),
			NVLinkPeers: g.NVLinkPeers,
		})
	}
	return sn
}

// runningOf is active job j, on its current attempt a, as the scheduler sees it, without
// the service it has received.
func runningOf(j *api.Job, a *api.Attempt) sched.Running {
	r := sched.Running{ID: j.ID, Queue: j.Spec.Queue, Team: j.Spec.Team, Project: j.Spec.Project, User: j.Spec.User, Start: a.AssignTime,
		Borrowing: j.Borrowing, BorrowingInTeam: j.BorrowingInTeam, Preempting: j.PreemptRequested || j.CancelRequested || j.Stopping != ""}
	if j.LastCheckpoint != nil {
		r.LastCheckpoint = *j.LastCheckpoint
	}
	if j.Spec.TimeLimit > 0 {
		r.End = a.AssignTime.Add(time.Duration(j.Spec.TimeLimit) * time.Second)
	}
	for _, p := range a.Placements {
		r.Allocs = append(r.Allocs, sched.Alloc{Node: p.Node, GPUIndices: p.GPUIndices, CPUs: p.CPUs, MemoryMB: p.MemoryMB,
			GPUShare: MilliOf(p.GPUShare), GPUMemoryMB: p.GPUMemoryMB})
	}
	return r
}

// pendingOf is pending job j as the scheduler sees it, without the service it has received.
func pendingOf(j *api.Job) sched.Job {
	return sched.Job{
		ID: j.ID, Queue: j.Spec.Queue, Team: j.Spec.Team, Project: j.Spec.Project, User: j.Spec.User, SubmitTime: j.SubmitTime, Nice: j.Spec.Nice,
		TimeLimit: time.Duration(j.Spec.TimeLimit) * time.Second, Image: j.Spec.Image,
		StartBy: j.Spec.LatestStart(),
		Request: sched.Request{
			GPUs: j.Spec.GPUs, Nodes: j.Spec.Nodes, GPUsPerNode: j.Spec.GPUsPerNode, GPUModel: j.Spec.GPUModel,
			GPUModels: GPUModels(j.Spec.GPUModel), CPUs: j.Spec.CPUs, MemoryMB: j.Spec.MemoryMB,
			GPUShare: MilliOf(j.Spec.GPUShare), GPUMemoryMB: j.Spec.GPUMemoryMB,
			CUDA: j.Spec.CUDA, Driver: j.Spec.Driver,
		},
	}
}

// MilliOf turns a share of a GPU (0.25) into milli-GPU (250), the scheduler's unit.
func MilliOf(share float64) int { return int(math.Round(share * sched.MilliGPU)) }

// GPUModels reads a job's gpu_model as a list of models ("A100,H100": either), or nil
// when it names one model or none. The server stores the list as validated: full
// names, no spaces, no repeats.
func GPUModels(spec string) []string {
	if !strings.Contains(spec, ",") {
		return nil
	}
	return strings.Split(spec, ",")
}

// schedQuotas turns a team's or project's GPU quotas into the core's, where "" is any
// model the map does not name.
func schedQuotas(quotas map[string]api.Quota) map[string]sched.Quota {
	out := make(map[string]sched.Quota, len(quotas))
	for model, q := range quotas {
		if model == "*" {
			model = ""
		}
		out[model] = sched.Quota{Guaranteed: q.Guaranteed, Limit: q.Limit}
	}
	return out
}

// schedQuota is a CPU or memory quota for the core; nil for none.
func schedQuota(q *api.Quota) *sched.Quota {
	if q == nil {
		return nil
	}
	return &sched.Quota{Guaranteed: q.Guaranteed, Limit: q.Limit}
}
