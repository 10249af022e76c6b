package sched

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Preemption, when a job cannot start: it may stop running work it has a right over, in
// this order of right (DESIGN.md, "The scheduling core"):
//   - an in-quota job reclaims GPUs from other teams' jobs that borrow, and then from the
//     jobs of its own team's other projects that borrow inside the team;
//   - a job of a higher tier takes from a lower tier whose queue is preemptible;
//   - under the "las" order, a job of a preemptible queue takes from jobs of its own tier,
//     also of preemptible queues, that have sunk to a lower-priority LAS queue (las.go).
// Queues marked NeverPreempt are never touched. Jobs inside Options.MinRuntime are
// protected, to avoid thrashing. Among the nodes where enough can be freed, the victims
// chosen lose the least: lowest tier first, then the fewest GPU-seconds since their last
// checkpoint, then the fewest victims. Jobs already stopping are counted first, at no
// cost, so a preemptor does not ask for more victims while earlier ones are still on their
// way out; what they hold that a claim names is not theirs to give.
//
// A gang preempts on a set of nodes of one class (model and driver) that together fit it:
// each node's cheapest victims are found as for a single node (none where it fits
// already), and the set chosen is the one whose worst tier is lowest, then whose loss is
// least, then with the fewest victims.
//
// The preemptor is not placed in this cycle: the victims still hold the GPUs. It waits
// with WaitingForPreemption, and the plan claims for it what it will take (claims.go).

// victim is a running job that preemption may stop.
type victim struct {
	r        *Running
	tier     int
	byTier   bool    // its queue yields to higher tiers
	reclaim  bool    // it borrows beyond its team's guarantee
	inTeam   bool    // it borrows beyond its project's guarantee, within its team's
	las      bool    // its queue yields to jobs of its tier in a lower LAS queue
	level    int     // its LAS queue
	stopping bool    // already told to stop
	gpus     int     // in all
	cost     float64 // GPU-seconds lost if stopped now
	taken    bool    // given to a preemptor in this cycle
}

// hold is what a victim holds in one GPU group (or, with group -1, just CPUs and memory)
// of a node. GPUs a claim names are left out: they go to the claimant.
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
	// nodes are those with holds, with the least any victim set there can lose, in the
	// order of that loss: a search that has found an option losing less stops there.
	nodes []nodeLoss
	// What rights could find anything, so that most jobs skip the search.
	lowestTier  int
	highestLAS  int // the highest LAS queue of a victim; -1 without LAS victims
	anyBorrower bool
	anyStopping bool
	// anyInTeam is set when some victim borrows inside its team: victim sets are then
	// ordered by how many such victims they stop before their loss, which the per-node
	// bounds do not know, so the search visits every node.
	anyInTeam bool
	failed    map[preemptKey]bool
	// chosen is scratch for cheapest, reused from one node to the next.
	chosen []int
}

type preemptKey struct {
	shape
	tier    int
	inQuota bool
	level   int
}

// tenant reports whether a running job holds a share of a GPU.
func tenant(r *Running) bool {
	for _, a := range r.Allocs {
		if a.GPUShare > 0 {
			return true
		}
	}
	return false
}

// newPreemptor lists the running jobs that some right could stop, in ID order.
func newPreemptor(c *cycle) *preemptor {
	st := c.st
	p := &preemptor{holds: make([][]hold, len(st.nodes)), lowestTier: int(^uint(0) >> 1), highestLAS: -1, failed: map[preemptKey]bool{}}
	byLAS := c.opts.Order == OrderLAS
	// Filter first and sort what is left: on most clusters few running jobs may be stopped.
	for i := range c.s.Running {
		r := &c.s.Running[i]
		q, ok := c.s.Queues[r.Queue]
		if q.NeverPreempt || tenant(r) {
			continue // a tenant frees no whole GPU by stopping
		}
		v := victim{r: r, tier: q.Tier, byTier: ok && q.Preemptible, reclaim: r.Borrowing, inTeam: r.BorrowingInTeam && !r.Borrowing, stopping: r.Preempting,
			las: byLAS && ok && lasQueue(q)}
		if !v.stopping && c.opts.MinRuntime > 0 && st.now-nanos(r.Start) < int64(c.opts.MinRuntime) {
			continue
		}
		if !v.byTier && !v.reclaim && !v.inTeam && !v.stopping {
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
		for _, a := range r.Allocs {
			v.gpus += len(a.GPUIndices)
		}
		if since < st.now {
			v.cost = float64(v.gpus) * float64(st.now-since) / 1e9
		}
		if v.las {
			v.level = c.opts.lasLevel(c.opts.runningService(r, v.gpus, st.now))
			p.highestLAS = max(p.highestLAS, v.level)
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
					if p, ok := slices.BinarySearch(st.groups[gi].index, idx); ok && !c.isClaimed(gi, p) {
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
		p.anyBorrower = p.anyBorrower || v.reclaim || v.inTeam
		p.anyInTeam = p.anyInTeam || v.inTeam
		p.anyStopping = p.anyStopping || v.stopping
	}
	// Each node's holds in the order victims are chosen: stopping ones first (they cost
	// nothing), then those that borrow across teams before those that borrow inside their
	// team, then lowest tier, least loss, ID. The order does not depend on the
	// preemptor, so it is set once here rather than at every search.
	n := 0
	for _, hs := range p.holds {
		if len(hs) > 0 {
			n++
		}
	}
	p.nodes = make([]nodeLoss, 0, n)
	for ni, hs := range p.holds {
		if len(hs) > 0 {
			nl := nodeLoss{node: ni, tier: maxTier, age: math.Inf(1)}
			cost, stopping := math.Inf(1), false
			for _, h := range hs {
				v := &p.victims[h.victim]
				if v.stopping {
					stopping = true
					nl.stopping += h.gpus
					continue
				}
				nl.tier = min(nl.tier, v.tier)
				cost = min(cost, v.cost)
				if h.gpus > 0 {
					nl.age = min(nl.age, v.cost/float64(v.gpus))
				}
			}
			// Any victim set has at least one victim, so it stops at least the lowest tier
			// and loses at least the least loss of one; nothing if a stopping one will do.
			nl.least = loss{tier: nl.tier, cost: cost}
			if stopping {
				nl.least = loss{tier: minTier}
			}
			p.nodes = append(p.nodes, nl)
			slices.SortStableFunc(hs, func(a, b hold) int {
				va, vb := &p.victims[a.victim], &p.victims[b.victim]
				if va.stopping != vb.stopping {
					if va.stopping {
						return -1
					}
					return 1
				}
				if va.inTeam != vb.inTeam {
					if vb.inTeam {
						return -1
					}
					return 1
				}
				return cmp.Or(cmp.Compare(va.tier, vb.tier), cmp.Compare(va.cost, vb.cost), cmp.Compare(va.r.ID, vb.r.ID))
			})
		}
	}
	slices.SortFunc(p.nodes, func(a, b nodeLoss) int {
		return cmp.Or(cmp.Compare(a.least.tier, b.least.tier), cmp.Compare(a.least.cost, b.least.cost), cmp.Compare(a.node, b.node))
	})
	return p
}

// nodeLoss is a node with bounds on what stopping victims there loses. least bounds any
// victim set: nothing where a stopping job may do. A job short of more GPUs there than are
// free or held by stopping jobs (stopping counts those) needs jobs that are not stopping,
// of tier at least tier, each GPU of which loses at least age GPU-seconds.
type nodeLoss struct {
	node     int
	least    loss
	stopping int
	tier     int
	age      float64
}

// mayStop reports whether a job of the given tier, team and LAS queue (noLAS where LAS
// does not apply to it), in quota or not, has a right over the victim. Work borrowing
// inside a team is the team's own to take back.
func (v *victim) mayStop(tier int, team string, inQuota bool, level int) bool {
	if v.taken {
		return false
	}
	return v.stopping || (v.byTier && v.tier < tier) || (v.reclaim && inQuota && v.r.Team != team) ||
		(v.inTeam && inQuota && v.r.Team == team) || (v.las && v.tier == tier && v.level > level)
}

// noLAS is the LAS queue of a job that LAS gives no right to preempt.
const noLAS = maxTier

// preempt looks for the node, or for a gang the nodes, where stopping the fewest-loss
// victims lets the job start. On success it takes the victims, claims what the job will
// take there, and returns the victims' IDs and the nodes.
func (c *cycle) preempt(r *ranked, d *demand, inQuota bool) ([]int64, []string, bool) {
	// Preemption rests on the order: the victims must come after the job they make room
	// for, or they could be placed again ahead of it, losing work for nothing. The tier
	// order and LAS (tier, then LAS queue) keep that; the research orders (fifo, sjf) do
	// not preempt.
	if c.opts.NoPreemption || (c.opts.Order != OrderPriority && c.opts.Order != OrderLAS) || len(c.s.Running) == 0 {
		return nil, nil, false
	}
	if c.pre == nil {
		c.pre = newPreemptor(c)
	}
	p := c.pre
	tier := r.queue.Tier
	level := noLAS
	if c.opts.Order == OrderLAS && lasQueue(*r.queue) {
		level = r.prio.LASQueue
	}
	if !(tier > p.lowestTier || (inQuota && p.anyBorrower) || p.anyStopping || level < p.highestLAS) {
		return nil, nil, false
	}
	key := preemptKey{d.shape(), tier, inQuota, level}
	if p.failed[key] {
		return nil, nil, false
	}
	var picks []pick
	if d.nodes == 1 {
		picks = p.single(c.st, d, tier, inQuota, level)
	} else {
		picks = p.gang(c.st, d, tier, inQuota, level)
	}
	if picks == nil {
		p.failed[key] = true
		return nil, nil, false
	}
	c.plan.Claims = append(c.plan.Claims, c.newClaim(r.job, d, picks))
	var ids []int64
	nodes := make([]string, len(picks))
	for i, pk := range picks {
		node := c.st.nodes[pk.cd.node].n.Name
		nodes[i] = node
		for _, vi := range pk.victims {
			v := &p.victims[vi]
			if v.taken {
				continue // chosen on an earlier node of the gang
			}
			v.taken = true
			ids = append(ids, v.r.ID)
			if v.stopping {
				continue
			}
			var why string
			switch {
			case v.byTier && v.tier < tier:
				why = fmt.Sprintf("preempted on %s by job %d of higher tier (queue %s)", node, r.job.ID, r.queue.Name)
			case v.reclaim && inQuota && v.r.Team != d.team:
				why = fmt.Sprintf("borrowed GPUs on %s reclaimed by team %s's in-quota job %d", node, d.team, r.job.ID)
			case v.inTeam && inQuota && v.r.Team == d.team:
				who := "team " + d.team
				if d.project != "" {
					who = "project " + d.project
				}
				why = fmt.Sprintf("GPUs borrowed inside team %s on %s reclaimed by %s's in-quota job %d", d.team, node, who, r.job.ID)
			default:
				why = fmt.Sprintf("preempted on %s by job %d, which has had less GPU time (LAS queue %d, this job's %d)",
					node, r.job.ID, level, v.level)
			}
			c.plan.Preemptions = append(c.plan.Preemptions, Preemption{JobID: v.r.ID, ForJob: r.job.ID, Reason: why})
		}
	}
	return ids, nodes, true
}

// loss is what stopping victims loses: the highest tier stopped and the GPU-seconds lost.
type loss struct {
	tier int
	cost float64
}

// option is the cheapest way to make room for a job on one candidate.
type option struct {
	cd      cand
	victims []int
	maxTier int // of the victims not already stopping; minTier without any
	inTeam  int // victims that borrow inside their team: they go after those across teams
	cost    float64
}

const (
	minTier = -1 << 31
	maxTier = 1<<31 - 1
)

// worse orders options by what they lose: the highest tier stopped, the victims that
// borrow inside their team, the GPU-seconds lost, the number of victims.
func (o *option) worse(b *option) bool {
	return o.compare(b) > 0
}

func (o *option) compare(b *option) int {
	return cmp.Or(cmp.Compare(o.maxTier, b.maxTier), cmp.Compare(o.inTeam, b.inTeam), cmp.Compare(o.cost, b.cost), cmp.Compare(len(o.victims), len(b.victims)))
}

// nodeFits reports whether node ni could hold the job if nothing ran there, GPUs aside.
func (st *state) nodeFits(ni int, d *demand) bool {
	ns := &st.nodes[ni]
	return ns.n.CPUs >= d.cpus && ns.n.MemoryMB >= d.mem && st.eligible(ni, d) && !st.foreignWindow(ni, d, st.now)
}

// groupFits reports whether group gi (-1: none, for a CPU-only job) has the model and the
// GPUs the job needs, if nothing ran there. A job does not preempt its way onto GPUs held
// by count for another team (hold.go) any more than onto nodes reserved for one.
func (st *state) groupFits(gi int, d *demand) bool {
	return gi < 0 || (d.takes(st.groups[gi].model) && len(st.groups[gi].index) >= d.gpus &&
		!st.held(cand{st.groups[gi].node, gi}, d, st.now))
}

// single picks the one node where the cheapest victims let a single-node job start; among
// equal options, the first in name order.
func (p *preemptor) single(st *state, d *demand, tier int, inQuota bool, level int) []pick {
	var best option
	found := false
	noGroup := [1]int{-1}
	for _, nl := range p.nodes {
		ni := nl.node
		if found && !p.anyInTeam && cmp.Or(cmp.Compare(nl.least.tier, best.maxTier), cmp.Compare(nl.least.cost, best.cost)) > 0 {
			break // nothing here or further on can lose less
		}
		// The margin keeps float rounding from skipping a node that would tie.
		if need := d.gpus - st.nodes[ni].freeGPUs - nl.stopping; found && !p.anyInTeam && need > 0 &&
			cmp.Or(cmp.Compare(nl.tier, best.maxTier), cmp.Compare(float64(need)*nl.age*(1-1e-9), best.cost)) > 0 {
			continue
		}
		groups := st.nodes[ni].groups
		if d.gpus == 0 {
			groups = noGroup[:]
		}
		nodeFits := false
		for _, gi := range groups {
			// The group first: most nodes that fail, fail on the model.
			if !st.groupFits(gi, d) {
				continue
			}
			if !nodeFits {
				if !st.nodeFits(ni, d) {
					break
				}
				nodeFits = true
			}
			bound := &best
			if !found {
				bound = nil
			}
			o, ok := p.cheapest(st, cand{ni, gi}, d, tier, inQuota, level, bound)
			if !ok || len(o.victims) == 0 {
				continue
			}
			if c := o.compare(&best); !found || c < 0 || (c == 0 && cmp.Or(cmp.Compare(ni, best.cd.node), cmp.Compare(gi, best.cd.group)) < 0) {
				o.victims = slices.Clone(o.victims)
				best, found = o, true
			}
		}
	}
	if !found {
		return nil
	}
	return []pick{{best.cd, best.victims}}
}

// gang picks d.nodes nodes of one class where the gang fits once the cheapest victims on
// each have stopped: in each class, the nodes whose worst tier stopped is lowest, and
// among those the cheapest; then the class that loses least.
func (p *preemptor) gang(st *state, d *demand, tier int, inQuota bool, level int) []pick {
	var opts []option
	for m := range st.models {
		if !d.takes(m) {
			continue
		}
		for _, gi := range st.models[m].groups {
			g := &st.groups[gi]
			ns := &st.nodes[g.node]
			fitsFree := g.nfree >= d.gpus && ns.freeCPU >= d.cpus && ns.freeMem >= d.mem
			if len(p.holds[g.node]) == 0 && !fitsFree {
				continue
			}
			if !st.groupFits(gi, d) || !st.nodeFits(g.node, d) {
				continue
			}
			if o, ok := p.cheapest(st, cand{g.node, gi}, d, tier, inQuota, level, nil); ok {
				o.victims = slices.Clone(o.victims)
				opts = append(opts, o)
			}
		}
	}
	class := func(o *option) int { return st.groups[o.cd.group].class }
	slices.SortFunc(opts, func(a, b option) int {
		return cmp.Or(cmp.Compare(class(&a), class(&b)), cmp.Compare(a.maxTier, b.maxTier), cmp.Compare(a.cd.group, b.cd.group))
	})
	var best []option
	var bestAll option
	for lo := 0; lo < len(opts); {
		hi := lo
		for hi < len(opts) && class(&opts[hi]) == class(&opts[lo]) {
			hi++
		}
		run := opts[lo:hi]
		lo = hi
		if len(run) < d.nodes {
			continue
		}
		// No set of the class stops less than the d.nodes-th lowest tier; among the nodes
		// within it, the cheapest.
		top := run[d.nodes-1].maxTier
		n := d.nodes
		for n < len(run) && run[n].maxTier <= top {
			n++
		}
		set := slices.Clone(run[:n])
		slices.SortFunc(set, func(a, b option) int {
			return cmp.Or(cmp.Compare(a.cost, b.cost), cmp.Compare(len(a.victims), len(b.victims)), cmp.Compare(a.cd.group, b.cd.group))
		})
		set = set[:d.nodes]
		// The set's loss, each victim counted once even where it spans several nodes.
		all := option{maxTier: minTier}
		for _, o := range set {
			all.maxTier = max(all.maxTier, o.maxTier)
			for _, vi := range o.victims {
				if !slices.Contains(all.victims, vi) {
					all.victims = append(all.victims, vi)
					if !p.victims[vi].stopping {
						all.cost += p.victims[vi].cost
						if p.victims[vi].inTeam {
							all.inTeam++
						}
					}
				}
			}
		}
		if best == nil || bestAll.worse(&all) {
			best, bestAll = set, all
		}
	}
	if best == nil || len(bestAll.victims) == 0 {
		return nil // it fits without victims, but backfill or priority kept it out
	}
	slices.SortFunc(best, func(a, b option) int { return cmp.Compare(a.cd.node, b.cd.node) })
	picks := make([]pick, len(best))
	for i, o := range best {
		picks[i] = pick{o.cd, o.victims}
	}
	return picks
}

// cheapest finds the victims on candidate cd whose stopping frees what the job lacks
// there, losing the least: stopping ones first, then by tier and loss. It reports false
// when stopping every job it may stop there is not enough, or, given a bound, as soon as
// the victims would lose more than it. The victims it returns live in scratch memory
// until the next call.
func (p *preemptor) cheapest(st *state, cd cand, d *demand, tier int, inQuota bool, level int, bound *option) (option, bool) {
	ni, gi := cd.node, cd.group
	ns := &st.nodes[ni]
	gpus := 0
	if gi >= 0 {
		gpus = st.groups[gi].nfree
	}
	cpus, mem := ns.freeCPU, ns.freeMem
	o := option{cd: cd, maxTier: minTier}
	chosen := p.chosen[:0]
	// The holds are in the order victims are chosen (newPreemptor).
	for _, h := range p.holds[ni] {
		if gpus >= d.gpus && cpus >= d.cpus && mem >= d.mem {
			break
		}
		if !(h.group == gi || h.group == -1 || gi == -1) || !p.victims[h.victim].mayStop(tier, d.team, inQuota, level) {
			continue
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
				o.maxTier = max(o.maxTier, v.tier)
				o.cost += v.cost
				if v.inTeam {
					o.inTeam++
				}
			}
			// Tier and loss only grow from here: once worse than the bound, stop.
			if o.victims = chosen; bound != nil && o.worse(bound) {
				p.chosen = chosen
				return o, false
			}
		}
		if h.group == gi {
			gpus += h.gpus
		}
		cpus += h.cpus
		mem += h.mem
	}
	p.chosen = chosen
	o.victims = chosen
	return o, gpus >= d.gpus && cpus >= d.cpus && mem >= d.mem
}

// waitingReason explains a job waiting for its victims.
func (c *cycle) waitingReason(ids []int64, nodes []string) Reason {
	r := Reason{Code: ReasonWaitingForPreemption, BestNode: nodes[0], Victims: ids}
	if !c.opts.Terse {
		s := make([]string, len(ids))
		for i, id := range ids {
			s[i] = fmt.Sprint(id)
		}
		where := nodes[0]
		if len(nodes) > 1 {
			where = strings.Join(nodes[:len(nodes)-1], ", ") + " and " + nodes[len(nodes)-1]
		}
		switch len(ids) {
		case 0:
			// What it waits for was chosen in this cycle, for another job.
			r.Message = fmt.Sprintf("waiting for the jobs preempted on %s to stop", where)
		default:
			r.Message = fmt.Sprintf("waiting for %s to stop on %s: %s", plural(len(ids), "job"), where, strings.Join(s, ", "))
		}
	}
	return r
}
