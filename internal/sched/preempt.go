package sched

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Preemption, when a job cannot start: it may stop running work it has a right over, in
// this order of right (DESIGN.md, "The scheduling core"):
//   - an in-quota job reclaims GPUs from other teams' jobs that borrow;
//   - a job of a higher tier takes from a lower tier whose queue is preemptible.
// Queues marked NeverPreempt are never touched. Jobs inside Options.MinRuntime are
// protected, to avoid thrashing. Among the nodes where enough can be freed, the victims
// chosen lose the least: lowest tier first, then the fewest GPU-seconds since their last
// checkpoint. Jobs already stopping are counted first, at no cost, so a preemptor does not
// ask for more victims while earlier ones are still on their way out.
//
// The preemptor is not placed in this cycle: the victims still hold the GPUs. It waits
// with WaitingForPreemption, and the GPUs already free on its node are reserved for it.
// Gangs do not preempt.

// victim is a running job that preemption may stop.
type victim struct {
	r        *Running
	tier     int
	byTier   bool    // its queue yields to higher tiers
	reclaim  bool    // it borrows beyond its team's guarantee
	stopping bool    // already told to stop
	cost     float64 // GPU-seconds lost if stopped now
	claimed  bool    // given to a preemptor in this cycle
}

// hold is what a victim holds in one GPU group (or, with group -1, just CPUs and memory)
// of a node.
type hold struct {
	victim int
	group  int
	gpus   int
	cpus   int
	mem    int64
}

type preemptor struct {
	victims []victim
	holds   [][]hold // by node
	nodes   []int    // nodes with holds, ascending
	// What rights could find anything, so that most jobs skip the search.
	lowestTier  int
	anyBorrower bool
	anyStopping bool
	failed      map[preemptKey]bool
}

type preemptKey struct {
	shape
	tier    int
	inQuota bool
}

// newPreemptor lists the running jobs that some right could stop, in ID order.
func newPreemptor(c *cycle) *preemptor {
	st := c.st
	p := &preemptor{holds: make([][]hold, len(st.nodes)), lowestTier: int(^uint(0) >> 1), failed: map[preemptKey]bool{}}
	// Filter first and sort what is left: on most clusters few running jobs may be stopped.
	for i := range c.s.Running {
		r := &c.s.Running[i]
		q, ok := c.s.Queues[r.Queue]
		if q.NeverPreempt {
			continue
		}
		v := victim{r: r, tier: q.Tier, byTier: ok && q.Preemptible, reclaim: r.Borrowing, stopping: r.Preempting}
		if !v.stopping && c.opts.MinRuntime > 0 && st.now-nanos(r.Start) < int64(c.opts.MinRuntime) {
			continue
		}
		if !v.byTier && !v.reclaim && !v.stopping {
			continue
		}
		p.victims = append(p.victims, v)
	}
	slices.SortFunc(p.victims, func(a, b victim) int { return cmp.Compare(a.r.ID, b.r.ID) })
	for vi := range p.victims {
		v := &p.victims[vi]
		r := v.r
		since := max(nanos(r.Start), nanos(r.LastCheckpoint))
		if r.LastCheckpoint.IsZero() {
			since = nanos(r.Start)
		}
		gpus := 0
		for _, a := range r.Allocs {
			gpus += len(a.GPUIndices)
		}
		if since < st.now {
			v.cost = float64(gpus) * float64(st.now-since) / 1e9
		}
		for _, a := range r.Allocs {
			ni, ok := st.byName[a.Node]
			if !ok {
				continue
			}
			cpus, mem := a.CPUs, a.MemoryMB
			for _, gi := range st.nodes[ni].groups {
				n := 0
				for _, idx := range a.GPUIndices {
					if _, ok := slices.BinarySearch(st.groups[gi].index, idx); ok {
						n++
					}
				}
				if n > 0 {
					p.holds[ni] = append(p.holds[ni], hold{victim: vi, group: gi, gpus: n, cpus: cpus, mem: mem})
					cpus, mem = 0, 0
				}
			}
			if cpus != 0 || mem != 0 {
				p.holds[ni] = append(p.holds[ni], hold{victim: vi, group: -1, cpus: cpus, mem: mem})
			}
		}
		if v.byTier {
			p.lowestTier = min(p.lowestTier, v.tier)
		}
		p.anyBorrower = p.anyBorrower || v.reclaim
		p.anyStopping = p.anyStopping || v.stopping
	}
	for ni, hs := range p.holds {
		if len(hs) > 0 {
			p.nodes = append(p.nodes, ni)
		}
	}
	return p
}

// mayStop reports whether a job of the given tier and team, in quota or not, has a right
// over the victim.
func (v *victim) mayStop(tier int, team string, inQuota bool) bool {
	if v.claimed {
		return false
	}
	return v.stopping || (v.byTier && v.tier < tier) || (v.reclaim && inQuota && v.r.Team != team)
}

// preempt looks for the node where stopping the fewest-loss victims lets the job start.
// On success it claims the victims, reserves what is already free there for the job, and
// returns the victims' IDs and the node.
func (c *cycle) preempt(r *ranked, d *demand, inQuota bool) ([]int64, string, bool) {
	// Preemption rests on the tier order: under the research orders (fifo, sjf, las) a
	// victim could be placed again ahead of the job it made room for, losing work for
	// nothing, so they do not preempt.
	if c.opts.NoPreemption || c.opts.Order != OrderPriority || d.nodes > 1 || len(c.s.Running) == 0 {
		return nil, "", false
	}
	if c.pre == nil {
		c.pre = newPreemptor(c)
	}
	p := c.pre
	tier := r.queue.Tier
	if !(tier > p.lowestTier || (inQuota && p.anyBorrower) || p.anyStopping) {
		return nil, "", false
	}
	key := preemptKey{d.shape(), tier, inQuota}
	if p.failed[key] {
		return nil, "", false
	}
	st := c.st
	type choice struct {
		cd                cand
		victims           []int
		maxTier, n        int
		cost              float64
		freeGPUs, freeCPU int
		freeMem           int64
	}
	var best *choice
	var chosen []int
	for _, ni := range p.nodes {
		ns := &st.nodes[ni]
		if ns.n.CPUs < d.cpus || ns.n.MemoryMB < d.mem || !st.inPools(ni, d) {
			continue
		}
		groups := ns.groups
		if d.gpus == 0 {
			groups = []int{-1}
		}
		for _, gi := range groups {
			if gi >= 0 && (!d.takes(st.groups[gi].model) || len(st.groups[gi].index) < d.gpus) {
				continue
			}
			if st.foreignWindow(ni, d, st.now) {
				continue
			}
			gpus := 0
			if gi >= 0 {
				gpus = st.groups[gi].nfree
			}
			cpus, mem := ns.freeCPU, ns.freeMem
			// Candidates on this group, cheapest loss first.
			chosen = chosen[:0]
			var cands []hold
			for _, h := range p.holds[ni] {
				if (h.group == gi || h.group == -1 || gi == -1) && p.victims[h.victim].mayStop(tier, d.team, inQuota) {
					cands = append(cands, h)
				}
			}
			slices.SortFunc(cands, func(a, b hold) int {
				va, vb := &p.victims[a.victim], &p.victims[b.victim]
				if va.stopping != vb.stopping {
					if va.stopping {
						return -1
					}
					return 1
				}
				return cmp.Or(cmp.Compare(va.tier, vb.tier), cmp.Compare(va.cost, vb.cost), cmp.Compare(va.r.ID, vb.r.ID))
			})
			maxTier, cost := -1<<31, 0.0
			for _, h := range cands {
				if gpus >= d.gpus && cpus >= d.cpus && mem >= d.mem {
					break
				}
				// Stop only what helps: a CPU-only job frees no GPUs.
				helps := (h.group == gi && h.gpus > 0 && gpus < d.gpus) || (h.cpus > 0 && cpus < d.cpus) || (h.mem > 0 && mem < d.mem)
				if !helps {
					continue
				}
				// A victim may hold several groups of the node; what it holds elsewhere
				// frees CPUs and memory too, but only this group's GPUs count.
				if !slices.Contains(chosen, h.victim) {
					chosen = append(chosen, h.victim)
					v := &p.victims[h.victim]
					if !v.stopping {
						maxTier = max(maxTier, v.tier)
						cost += v.cost
					}
				}
				if h.group == gi {
					gpus += h.gpus
				}
				cpus += h.cpus
				mem += h.mem
			}
			if gpus < d.gpus || cpus < d.cpus || mem < d.mem || len(chosen) == 0 {
				continue
			}
			ch := choice{cd: cand{ni, gi}, maxTier: maxTier, cost: cost, n: len(chosen)}
			if best == nil || cmp.Or(cmp.Compare(ch.maxTier, best.maxTier), cmp.Compare(ch.cost, best.cost), cmp.Compare(ch.n, best.n)) < 0 {
				ch.victims = slices.Clone(chosen)
				if gi >= 0 {
					ch.freeGPUs = min(st.groups[gi].nfree, d.gpus)
				}
				ch.freeCPU, ch.freeMem = max(min(ns.freeCPU, d.cpus), 0), max(min(ns.freeMem, d.mem), 0)
				best = &ch
			}
		}
	}
	if best == nil {
		p.failed[key] = true
		return nil, "", false
	}
	// What is free there now is the job's for this cycle; the rest comes from the victims.
	if best.freeGPUs > 0 || best.freeCPU > 0 || best.freeMem > 0 {
		st.reserve(best.cd, &demand{gpus: best.freeGPUs, cpus: best.freeCPU, mem: best.freeMem, dur: d.dur}, st.now)
	}
	node := st.nodes[best.cd.node].n.Name
	var ids []int64
	for _, vi := range best.victims {
		v := &p.victims[vi]
		v.claimed = true
		ids = append(ids, v.r.ID)
		if v.stopping {
			continue
		}
		why := fmt.Sprintf("preempted on %s by job %d of higher tier (queue %s)", node, r.job.ID, r.queue.Name)
		if !(v.byTier && v.tier < tier) {
			why = fmt.Sprintf("borrowed GPUs on %s reclaimed by team %s's in-quota job %d", node, d.team, r.job.ID)
		}
		c.plan.Preemptions = append(c.plan.Preemptions, Preemption{JobID: v.r.ID, ForJob: r.job.ID, Reason: why})
	}
	return ids, node, true
}

// waitingReason explains a job waiting for its victims.
func (c *cycle) waitingReason(ids []int64, node string) Reason {
	r := Reason{Code: ReasonWaitingForPreemption, BestNode: node, Victims: ids}
	if !c.opts.Terse {
		s := make([]string, len(ids))
		for i, id := range ids {
			s[i] = fmt.Sprint(id)
		}
		r.Message = fmt.Sprintf("waiting for %s to stop on %s: %s", plural(len(ids), "job"), node, strings.Join(s, ", "))
	}
	return r
}
