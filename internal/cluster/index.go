package cluster

import (
	"iter"
	"math/bits"
	"slices"

	"github.com/rotahq/rota/internal/api"
)

// The indexes here are kept up to date by Apply, change by change, so that what a heartbeat,
// a page of the job list and a submit ask of the state costs what they touch, not the
// size of the cluster:
//
//   - onNode: the active jobs whose current attempt has a rank on each node (a heartbeat's
//     answer, and the jobs a lost node takes down);
//   - unstarted: the active jobs whose current attempt has a rank no agent has reported
//     yet (the liveness check's start deadline);
//   - order and byState: every job ID ascending, with one bit set per position in the set
//     of its state (a page of the job list walks the bits from its cursor);
//   - fit and models: the nodes grouped by how many GPUs of each model they have, and the
//     models any node reports (the checks a submit makes).
//
// index_test.go compares each with a full scan after random changes.

// jobIndex orders every job by ID and sets each one's bit in the set of its state.
type jobIndex struct {
	order   []int64                   // every job ID, ascending
	recs    []*api.Job                // recs[i] is the state's record of job order[i]
	byState map[api.JobState][]uint64 // bit i: order[i] is in the state
	// entries holds, at each job's position in order, its snapshot entry (snapshot.go),
	// or nil where none was made since the job last changed; it grows as entries are
	// made, so it may be shorter than order. A snapshot walks the bits of the states it
	// needs and reads each job's entry from here, with no lookup.
	entries []*snapJob
}

func (x *jobIndex) set(st api.JobState, pos int, on bool) {
	w := x.byState[st]
	for len(w) <= pos/64 {
		w = append(w, 0)
	}
	if on {
		w[pos/64] |= 1 << (pos % 64)
	} else {
		w[pos/64] &^= 1 << (pos % 64)
	}
	x.byState[st] = w
}

// rebuild orders every job again; Apply calls it when a job arrives out of order, which
// only a whole-store load does.
func (x *jobIndex) rebuild(jobs map[int64]*api.Job) {
	old, entries := x.order, x.entries
	x.order = make([]int64, 0, len(jobs))
	for id := range jobs {
		x.order = append(x.order, id)
	}
	slices.Sort(x.order)
	x.recs = make([]*api.Job, len(x.order))
	for i, id := range x.order {
		x.recs[i] = jobs[id]
	}
	x.byState = map[api.JobState][]uint64{}
	x.entries = make([]*snapJob, len(x.order))
	// The snapshot entries of the jobs still here stay theirs: both orders ascend, so
	// one walk of each finds them.
	k := 0
	for i, id := range x.order {
		x.set(jobs[id].State, i, true)
		for k < len(old) && old[k] < id {
			k++
		}
		if k < len(old) && old[k] == id && k < len(entries) {
			x.entries[i] = entries[k]
		}
	}
}

// positions yields the positions in order of the jobs in any of states, ascending.
func (x *jobIndex) positions(states ...api.JobState) func(yield func(int) bool) {
	return x.positionsFrom(0, states...)
}

// positionsFrom is positions from position start on.
func (x *jobIndex) positionsFrom(start int, states ...api.JobState) func(yield func(int) bool) {
	return func(yield func(int) bool) {
		var sets [][]uint64
		words := 0
		for _, st := range states {
			if w := x.byState[st]; w != nil {
				sets = append(sets, w)
				words = max(words, len(w))
			}
		}
		for w := start / 64; w < words; w++ {
			var word uint64
			for _, set := range sets {
				if w < len(set) {
					word |= set[w]
				}
			}
			if w == start/64 {
				word &^= 1<<(start%64) - 1
			}
			for word != 0 {
				pos := w*64 + bits.TrailingZeros64(word)
				word &= word - 1
				if pos >= len(x.order) || !yield(pos) {
					return
				}
			}
		}
	}
}

// entry is the snapshot entry at pos, nil when there is none.
func (x *jobIndex) entry(pos int) *snapJob {
	if pos < len(x.entries) {
		return x.entries[pos]
	}
	return nil
}

// setEntry makes e the snapshot entry at pos.
func (x *jobIndex) setEntry(pos int, e *snapJob) {
	for len(x.entries) <= pos {
		x.entries = append(x.entries, nil)
	}
	x.entries[pos] = e
}

// forgetEntry drops job id's snapshot entry, if it has one.
func (x *jobIndex) forgetEntry(id int64) {
	if pos, ok := slices.BinarySearch(x.order, id); ok && pos < len(x.entries) {
		x.entries[pos] = nil
	}
}

// ids returns the IDs of the jobs in any of states, ascending, from their sets rather than
// by sorting: n is how many there are, for the capacity.
func (x *jobIndex) ids(n int, states ...api.JobState) []int64 {
	out := make([]int64, 0, n)
	for pos := range x.positions(states...) {
		out = append(out, x.order[pos])
	}
	return out
}

// indexJob records that job j (now in the state) was in state old before, or is new when
// known is false. It reports false when the job cannot be placed in order without a rebuild.
func (s *State) indexJob(j *api.Job, old api.JobState, known bool) bool {
	x := &s.jobIdx
	if !known {
		if n := len(x.order); n > 0 && x.order[n-1] >= j.ID {
			return false
		}
		x.order = append(x.order, j.ID)
		x.recs = append(x.recs, j)
		x.set(j.State, len(x.order)-1, true)
		return true
	}
	pos, found := slices.BinarySearch(x.order, j.ID)
	if !found {
		return false
	}
	x.recs[pos] = j // a change replaces the record
	if old != j.State {
		x.set(old, pos, false)
		x.set(j.State, pos, true)
	}
	return true
}

// JobsPage returns copies of the first limit jobs, ascending by ID, with an ID above after,
// in one of states (any state when states is nil), that keep accepts (keep may be nil), and
// whether another such job follows. It walks the jobs of those states from the cursor on,
// 64 at a time, and stops at the first job past the page.
func (s *State) JobsPage(after int64, states []api.JobState, limit int, keep func(*api.Job) bool) ([]api.Job, bool) {
	out := []api.Job{}
	for j := range s.EachJobAfter(after, states) {
		if keep != nil && !keep(j) {
			continue
		}
		if len(out) == limit {
			return out, true
		}
		out = append(out, *j)
	}
	return out, false
}

// EachJobAfter yields the state's own records of the jobs with an ID above after, in one
// of states (any state when states is nil), ascending by ID: for reading only, under the
// caller's lock, as Peek's.
func (s *State) EachJobAfter(after int64, states []api.JobState) iter.Seq[*api.Job] {
	return func(yield func(*api.Job) bool) {
		x := &s.jobIdx
		// after+1 would overflow for the largest cursor; the position after after's does not.
		start, found := slices.BinarySearch(x.order, after)
		if found {
			start++
		}
		sets, none := x.stateSets(states)
		if none {
			return
		}
		for w := start / 64; w*64 < len(x.order); w++ {
			word := x.word(sets, states == nil, w)
			if w == start/64 {
				word &^= 1<<(start%64) - 1
			}
			for word != 0 {
				pos := w*64 + bits.TrailingZeros64(word)
				word &= word - 1
				if pos >= len(x.order) || !yield(x.recs[pos]) {
					return
				}
			}
		}
	}
}

// JobsPageBefore is JobsPage backwards: copies of the last limit jobs, ascending by ID,
// with an ID below before, in one of states, that keep accepts, and whether another such
// job comes before them. It walks from the cursor down and stops at the first job past
// the page.
func (s *State) JobsPageBefore(before int64, states []api.JobState, limit int, keep func(*api.Job) bool) ([]api.Job, bool) {
	var out []api.Job // newest first, reversed at the end
	more := false
	for j := range s.EachJobBefore(before, states) {
		if keep != nil && !keep(j) {
			continue
		}
		if len(out) == limit {
			more = true
			break
		}
		out = append(out, *j)
	}
	if out == nil {
		out = []api.Job{}
	}
	slices.Reverse(out)
	return out, more
}

// EachJobBefore is EachJobAfter backwards: the state's own records of the jobs with an ID
// below before, in one of states, descending by ID, 64 positions at a time.
func (s *State) EachJobBefore(before int64, states []api.JobState) iter.Seq[*api.Job] {
	return func(yield func(*api.Job) bool) {
		x := &s.jobIdx
		end, _ := slices.BinarySearch(x.order, before) // the positions below end
		sets, none := x.stateSets(states)
		if none || end == 0 {
			return
		}
		last := (end - 1) / 64
		for w := last; w >= 0; w-- {
			word := x.word(sets, states == nil, w)
			if n := (end-1)%64 + 1; w == last && n < 64 { // only the positions below end
				word &= 1<<n - 1
			}
			for word != 0 {
				b := 63 - bits.LeadingZeros64(word)
				word &^= 1 << b
				if !yield(x.recs[w*64+b]) {
					return
				}
			}
		}
	}
}

// stateSets returns the sets of the jobs in states (none for nil, which means every job),
// and whether no job can be in them.
func (x *jobIndex) stateSets(states []api.JobState) (sets [][]uint64, none bool) {
	for _, st := range states {
		if w := x.byState[st]; w != nil {
			sets = append(sets, w)
		}
	}
	return sets, states != nil && sets == nil
}

// word returns the w-th 64 positions of the union of sets, or of every position with all.
// Bits past the last job may be set with all: the walks stop at len(x.order).
func (x *jobIndex) word(sets [][]uint64, all bool, w int) uint64 {
	if all {
		return ^uint64(0)
	}
	var word uint64
	for _, set := range sets {
		if w < len(set) {
			word |= set[w]
		}
	}
	return word
}

// indexAttempt files the job's current attempt under each node it has a rank on while the
// job is active, and takes it out of those of its previous placements.
func (s *State) indexAttempt(id int64) {
	delete(s.unstarted, id)
	for _, node := range s.jobNodes[id] {
		set := s.onNode[node]
		delete(set, id)
		if len(set) == 0 {
			delete(s.onNode, node)
		}
	}
	delete(s.jobNodes, id)
	s.holdGPUs(id, nil)
	j, ok := s.jobs[id]
	if !ok || !j.State.Active() {
		return
	}
	a, ok := s.CurrentAttempt(id)
	if !ok {
		return
	}
	var nodes []string
	for _, p := range a.Placements {
		if p.State == "" {
			s.unstarted[id] = struct{}{}
		}
		if slices.Contains(nodes, p.Node) {
			continue
		}
		nodes = append(nodes, p.Node)
		set := s.onNode[p.Node]
		if set == nil {
			set = map[int64]struct{}{}
			s.onNode[p.Node] = set
		}
		set[id] = struct{}{}
	}
	if nodes != nil {
		s.jobNodes[id] = nodes
	}
	s.holdGPUs(id, a.Placements)
}

// heldGPU is one GPU a rank holds.
type heldGPU struct {
	node string
	gpu  int
}

// holdGPUs makes what job id holds in gpuHolds the GPUs of placements: it lets go of
// what the job held before, and holds nothing with none.
func (s *State) holdGPUs(id int64, placements []api.Placement) {
	for _, h := range s.jobGPUs[id] {
		m := s.gpuHolds[h.node]
		if m[h.gpu]--; m[h.gpu] <= 0 {
			delete(m, h.gpu)
		}
		if len(m) == 0 {
			delete(s.gpuHolds, h.node)
		}
	}
	delete(s.jobGPUs, id)
	var held []heldGPU
	for _, p := range placements {
		for _, g := range p.GPUIndices {
			held = append(held, heldGPU{p.Node, g})
			m := s.gpuHolds[p.Node]
			if m == nil {
				m = map[int]int{}
				s.gpuHolds[p.Node] = m
			}
			m[g]++
		}
	}
	if held != nil {
		s.jobGPUs[id] = held
	}
}

// ActiveOnNode returns the IDs, ascending, of the active jobs whose current attempt has a
// rank on the node, ended or not.
func (s *State) ActiveOnNode(node string) []int64 { return sortedKeys(s.onNode[node]) }

// UnstartedIDs returns the IDs, ascending, of the active jobs whose current attempt has a
// rank that its node's agent has not yet reported (placement state "").
func (s *State) UnstartedIDs() []int64 { return sortedKeys(s.unstarted) }

// fitKey groups nodes by how many GPUs of one model they have; model "" counts all.
type fitKey struct {
	model string
	gpus  int
}

// indexNode adds (add true) or removes what node n contributes to the submit checks'
// indexes. A lost node keeps its models known but fits no job.
func (s *State) indexNode(n *api.Node, add bool) {
	counts := map[string]int{"": len(n.GPUs)}
	for _, g := range n.GPUs {
		counts[g.Model]++
	}
	for model, c := range counts {
		if model != "" {
			if add {
				s.models[model]++
			} else if s.models[model]--; s.models[model] <= 0 {
				delete(s.models, model)
			}
		}
		if n.State == api.NodeLost {
			continue
		}
		k := fitKey{model, c}
		set := s.fit[k]
		switch {
		case add && set == nil:
			s.fit[k] = map[string]struct{}{n.Name: {}}
		case add:
			set[n.Name] = struct{}{}
		default:
			delete(set, n.Name)
			if len(set) == 0 {
				delete(s.fit, k)
			}
		}
	}
}

// HasNodes reports whether any node is registered.
func (s *State) HasNodes() bool { return len(s.nodes) > 0 }

// GPUModelNames returns the GPU models any registered node reports, sorted.
func (s *State) GPUModelNames() []string {
	out := make([]string, 0, len(s.models))
	for m := range s.models {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// FittingNodes counts the nodes, lost ones aside, with at least gpus GPUs of the model
// ("" for any), cpus CPUs and memMB of memory, stopping once it has found want of them;
// best is the most GPUs of the model any such node has, whatever its CPUs and memory. It
// looks only at nodes with enough GPUs, so a request the cluster can hold costs about want
// node checks.
func (s *State) FittingNodes(model string, gpus, cpus int, memMB int64, want int) (fitting, best int) {
	for k := range s.fit {
		if k.model == model {
			best = max(best, k.gpus)
		}
	}
	if gpus <= 0 {
		model = "" // every node has at least none of the model
	}
	for k, set := range s.fit {
		if k.model != model || k.gpus < gpus {
			continue
		}
		for name := range set {
			if n := s.nodes[name]; n.CPUs >= cpus && n.MemoryMB >= memMB {
				if fitting++; fitting >= want {
					return fitting, best
				}
			}
		}
	}
	return fitting, best
}
