package cluster

import (
	"math"
	"slices"
	"strings"
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
func (s *State) Snapshot(now time.Time, keep func(*api.Job) bool) *sched.Snapshot {
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
			snap.Reservations = append(snap.Reservations, sched.Reservation{Name: r.Name, Team: r.Team, Nodes: r.Nodes, Start: r.Start, End: r.End})
		}
	}
	pools := s.Pools()
	for _, n := range s.Nodes() {
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
			HealthFailed:     n.HealthCheck != nil && !n.HealthCheck.OK,
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
		if m := n.Maintenance; m != nil {
			sm := sched.Maintenance{Node: n.Name, Reason: m.Reason, Start: m.Start}
			if m.End != nil {
				sm.End = *m.End
			}
			snap.Maintenance = append(snap.Maintenance, sm)
		}
		snap.Nodes = append(snap.Nodes, sn)
	}
	for _, q := range s.queues {
		snap.Queues[q.Name] = sched.Queue{Name: q.Name, Tier: q.Tier, Preemptible: q.Preemptible, NeverPreempt: q.NeverPreempt,
			Pools: q.Pools, UserGPULimit: q.UserGPULimit}
	}
	for _, id := range s.ActiveIDs() {
		j := s.jobs[id]
		a, ok := s.CurrentAttempt(id)
		if !ok {
			continue
		}
		sv := s.serviceOf(id, now)
		r := sched.Running{ID: id, Queue: j.Spec.Queue, Team: j.Spec.Team, Project: j.Spec.Project, User: j.Spec.User, Start: a.AssignTime,
			Borrowing: j.Borrowing, BorrowingInTeam: j.BorrowingInTeam, Preempting: j.PreemptRequested || j.CancelRequested || j.Stopping != "",
			AttainedService: sv.attained, LastRun: sv.lastRun, Requeued: sv.requeued}
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
		snap.Running = append(snap.Running, r)
	}
	for _, id := range s.PendingIDs() {
		j := s.jobs[id]
		if keep != nil && !keep(j) {
			continue
		}
		sv := s.serviceOf(id, now)
		snap.Pending = append(snap.Pending, sched.Job{
			ID: id, Queue: j.Spec.Queue, Team: j.Spec.Team, Project: j.Spec.Project, User: j.Spec.User, SubmitTime: j.SubmitTime, Nice: j.Spec.Nice,
			TimeLimit: time.Duration(j.Spec.TimeLimit) * time.Second, Image: j.Spec.Image,
			AttainedService: sv.attained, LastRun: sv.lastRun, Requeued: sv.requeued,
			StartBy: j.Spec.LatestStart(),
			Request: sched.Request{
				GPUs: j.Spec.GPUs, Nodes: j.Spec.Nodes, GPUsPerNode: j.Spec.GPUsPerNode, GPUModel: j.Spec.GPUModel,
				GPUModels: GPUModels(j.Spec.GPUModel), CPUs: j.Spec.CPUs, MemoryMB: j.Spec.MemoryMB,
				GPUShare: MilliOf(j.Spec.GPUShare), GPUMemoryMB: j.Spec.GPUMemoryMB,
				CUDA: j.Spec.CUDA, Driver: j.Spec.Driver,
			},
		})
	}
	return snap
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
