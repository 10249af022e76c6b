package cluster

import (
	"iter"
	"maps"
	"math/bits"
	"slices"

	"github.com/rotahq/rota/internal/api"
)

// What a glance at the cluster (GET /api/v1/top) reads: counts from the state sets'
// bits, the jobs of some states in ID order, and what active jobs hold on each node from
// the per-node index, so that its cost follows the nodes and the jobs it looks at.

// EachJob yields the state's own record of each job in any of states, ascending by ID. The
// records are for reading only.
func (s *State) EachJob(states ...api.JobState) iter.Seq[*api.Job] {
	return func(yield func(*api.Job) bool) {
		for pos := range s.jobIdx.positions(states...) {
			if !yield(s.jobIdx.recs[pos]) {
				return
			}
		}
	}
}

// CountJobs returns how many jobs are in any of states.
func (s *State) CountJobs(states ...api.JobState) int {
	n := 0
	for _, st := range slices.Compact(slices.Sorted(slices.Values(states))) {
		for _, w := range s.jobIdx.byState[st] {
			n += bits.OnesCount64(w)
		}
	}
	return n
}

// NodeNames returns the name of every node, sorted. The slice is shared until a node
// comes or goes, and must not be changed.
func (s *State) NodeNames() []string {
	if s.nodeNames == nil {
		s.nodeNames = slices.Sorted(maps.Keys(s.nodes))
	}
	return s.nodeNames
}

// UsedGPUs appends to buf the indices, ascending, of the node's GPUs that active jobs
// hold, whole or in shares, and returns it.
func (s *State) UsedGPUs(node string, buf []int) []int {
	start := len(buf)
	for g := range s.gpuHolds[node] {
		buf = append(buf, g)
	}
	slices.Sort(buf[start:])
	return buf
}

// GPUHolds returns, by GPU index, how many ranks of active jobs hold each of node's GPUs
// that any holds. The map is the state's: read it only, under the lock.
func (s *State) GPUHolds(node string) map[int]int { return s.gpuHolds[node] }

// countDepth adds d of job j to its queue's depth, by its state; an ended job counts in
// none. A queue left with nothing counted is dropped.
func (s *State) countDepth(j *api.Job, d int) {
	if j.State.Terminal() {
		return
	}
	q := s.depth[j.Spec.Queue]
	if q == nil {
		q = &api.QueueDepth{Queue: j.Spec.Queue}
		s.depth[j.Spec.Queue] = q
	}
	q.Add(j, d)
	if *q == (api.QueueDepth{Queue: q.Queue}) {
		delete(s.depth, j.Spec.Queue)
	}
}

// QueueDepths returns the depth of every queue that holds a job not ended, by name.
func (s *State) QueueDepths() []api.QueueDepth {
	out := make([]api.QueueDepth, 0, len(s.depth))
	for _, name := range slices.Sorted(maps.Keys(s.depth)) {
		out = append(out, *s.depth[name])
	}
	return out
}
