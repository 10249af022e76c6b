package sched

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Gangs: a job with Request.Nodes > 1 needs GPUsPerNode GPUs on each of that many nodes,
// all at once or not at all, on nodes of one GPU model and one driver version (NCCL and
// the job's build must agree across them). Among the feasible nodes it prefers a set
// under one switch, then one rack, since the gang's collective traffic crosses those
// links; within a set, best fit as for single nodes.

// gangCand is a feasible group for a gang with the keys the choice needs.
type gangCand struct {
	cand
	free  int
	class int // group.class
	sw    string
	rack  string
}

// findGang returns the gang's nodes, or false with dg.gangFound saying how many feasible
// nodes the best class had. It scans candidates in placement order (best fit, then name)
// and stops as soon as one switch of one class holds enough of them: those are the best
// fitting nodes under that switch. Only when no switch can hold the gang does it look at
// racks and then whole classes, which needs every candidate.
func (st *state) findGang(d *demand, worst bool, dg *diag) ([]cand, bool) {
	type domain struct {
		class int
		sw    string
	}
	var cands []gangCand
	perSwitch := map[domain][]cand{}
	lo, hi := d.gpus, 0
	for m := range st.models {
		if d.takes(m) {
			hi = max(hi, st.models[m].maxCap)
		}
	}
	for step := 0; step <= hi-lo; step++ {
		k := lo + step
		if worst {
			k = hi - step
		}
		// A list's models in its order: at equal fit, the preferred model's switch
		// fills first.
		for i := range st.models {
			m := i
			if d.prefer != nil {
				if i >= len(d.prefer) {
					break
				}
				m = d.prefer[i]
			}
			mi := &st.models[m]
			if !d.takes(m) || k >= len(mi.buckets) || mi.counts[k] == 0 {
				continue
			}
			b := mi.buckets[k]
			for gi := b.next(0); gi >= 0; gi = b.next(gi + 1) {
				c := cand{st.groups[gi].node, gi}
				if !st.passes(c, d, dg) {
					continue
				}
				n := st.nodes[c.node].n
				gc := gangCand{cand: c, free: k, class: st.groups[gi].class, sw: n.Labels["switch"], rack: n.Labels["rack"]}
				cands = append(cands, gc)
				if gc.sw == "" {
					continue
				}
				key := domain{gc.class, gc.sw}
				perSwitch[key] = append(perSwitch[key], c)
				if set := perSwitch[key]; len(set) == d.nodes {
					out := slices.Clone(set)
					slices.SortFunc(out, func(a, b cand) int { return cmp.Compare(a.node, b.node) })
					return out, true
				}
			}
		}
	}
	// No switch holds the gang: group the candidates by class, in name order, and for a
	// list of models in its order first, so that a tie goes to the preferred model.
	slices.SortFunc(cands, func(a, b gangCand) int {
		return cmp.Or(cmp.Compare(d.rank(st.groups[a.group].model), d.rank(st.groups[b.group].model)),
			cmp.Compare(a.class, b.class), cmp.Compare(a.group, b.group))
	})
	var best []gangCand
	bestLevel := 3
	for lo := 0; lo < len(cands); {
		hi := lo
		for hi < len(cands) && cands[hi].class == cands[lo].class {
			hi++
		}
		class := cands[lo:hi]
		lo = hi
		dg.gangFound = max(dg.gangFound, len(class))
		if len(class) < d.nodes {
			continue
		}
		set, level := narrowest(class, d.nodes)
		if level < bestLevel {
			best, bestLevel = set, level
		}
	}
	if best == nil {
		return nil, false
	}
	set := slices.Clone(best)
	slices.SortFunc(set, func(a, b gangCand) int {
		if worst {
			return cmp.Or(cmp.Compare(b.free, a.free), cmp.Compare(a.group, b.group))
		}
		return cmp.Or(cmp.Compare(a.free, b.free), cmp.Compare(a.group, b.group))
	})
	out := make([]cand, d.nodes)
	for i := range out {
		out[i] = set[i].cand
	}
	slices.SortFunc(out, func(a, b cand) int { return cmp.Compare(a.node, b.node) })
	return out, true
}

// narrowest picks, from one class, the candidates under the rack with the fewest
// candidates that still hold the gang (level 0), else the whole class (level 1). The
// tightest rack that fits keeps larger ones whole for larger gangs.
func narrowest(class []gangCand, n int) ([]gangCand, int) {
	counts := map[string]int{}
	for _, c := range class {
		if c.rack != "" {
			counts[c.rack]++
		}
	}
	chosen, size := "", 0
	for r, k := range counts {
		if k >= n && (size == 0 || k < size || (k == size && r < chosen)) {
			chosen, size = r, k
		}
	}
	if size == 0 {
		return class, 1
	}
	var set []gangCand
	for _, c := range class {
		if c.rack == chosen {
			set = append(set, c)
		}
	}
	return set, 0
}

// placeGang gives each node of the gang its GPUs.
func (c *cycle) placeGang(j *Job, d *demand, cds []cand) {
	st := c.st
	pl := Placement{JobID: j.ID}
	for _, cd := range cds {
		positions := st.pickGPUs(cd.group, d.gpus)
		alloc := Alloc{Node: st.nodes[cd.node].n.Name, CPUs: d.cpus, MemoryMB: d.mem, GPUIndices: make([]int, len(positions))}
		for i, p := range positions {
			alloc.GPUIndices[i] = st.groups[cd.group].index[p]
		}
		st.take(cd.node, cd.group, positions, d.cpus, d.mem)
		st.release(cd, len(positions), d)
		if len(st.holds) > 0 {
			st.useHolds(cd.group, len(positions), d.team, st.now, addSat(st.now, d.dur), true)
		}
		pl.Allocs = append(pl.Allocs, alloc)
	}
	pl.Borrowing, pl.BorrowingInTeam = c.charge(j, d, cds[0].group, d.gpus*d.nodes*MilliGPU)
	c.plan.Placements = append(c.plan.Placements, pl)
}

// earliestGang finds the earliest time at which the gang's nodes are all free together
// for its duration, within one class. Each node's own earliest start is a lower bound;
// the gang's start is tried at the n-th smallest of them and then at the later ones, a
// bounded number of times, since reservations can make a node free early and busy later.
func (st *state) earliestGang(d *demand) ([]cand, int64) {
	type timed struct {
		c     cand
		class int
		t     int64
	}
	var all []timed
	for m := range st.models {
		if !d.takes(m) {
			continue
		}
		for _, gi := range st.models[m].groups {
			ni := st.groups[gi].node
			n := st.nodes[ni].n
			if len(st.groups[gi].index) < d.gpus || n.CPUs < d.cpus || n.MemoryMB < d.mem || !st.eligible(ni, d) {
				continue
			}
			c := cand{ni, gi}
			if t := st.earliestWithWindows(c, d, forever); t != forever {
				all = append(all, timed{c, st.groups[gi].class, t})
			}
		}
	}
	slices.SortFunc(all, func(a, b timed) int {
		return cmp.Or(cmp.Compare(a.class, b.class), cmp.Compare(a.t, b.t), cmp.Compare(a.c.group, b.c.group))
	})
	var best []cand
	bestT := int64(forever)
	const tries = 16
	for lo := 0; lo < len(all); {
		hi := lo
		for hi < len(all) && all[hi].class == all[lo].class {
			hi++
		}
		class := all[lo:hi]
		lo = hi
		for i := d.nodes - 1; i < len(class) && i < d.nodes-1+tries; i++ {
			t := class[i].t
			if t >= bestT {
				break
			}
			var set []cand
			for _, x := range class[:i+1] {
				if st.earliestOn(x.c, d, t, t) == t && !st.foreignWindow(x.c.node, d, t) && !st.held(x.c, d, t) {
					set = append(set, x.c)
					if len(set) == d.nodes {
						break
					}
				}
			}
			if len(set) == d.nodes {
				best, bestT = set, t
				break
			}
		}
	}
	return best, bestT
}

// gangShortage explains a gang that found too few nodes.
func (c *cycle) gangShortage(d *demand, dg *diag) Reason {
	r := Reason{Code: ReasonResources, Missing: map[string]int64{"nodes": int64(d.nodes - dg.gangFound)}}
	if c.opts.Terse {
		return r
	}
	r.Message = fmt.Sprintf("the job needs %d nodes with %s free each, of one model and driver%s; %d have them now",
		d.nodes, gpusOf(d.gpus, "", d.modelName), strings.Replace(d.whereNote(), " with", ", with", 1), dg.gangFound)
	if n, job := c.heldNodes(d); n > 0 {
		r.Message += fmt.Sprintf(", and %d more would but for the GPUs held there for job %d until the jobs preempted for it stop", n, job)
	}
	return r
}
