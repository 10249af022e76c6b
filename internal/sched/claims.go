package sched

import (
	"cmp"
	"fmt"
	"slices"
)

// Claims carry a preemption from the cycle that chose the victims to the cycle in which the
// job starts. Victims take time to stop (their grace period), and a requeued victim is
// pending again in the next cycle: without a claim, the GPUs it freed would be free to
// anyone, itself included, and the job they were freed for could find itself preempting
// again. So the plan that chooses victims for a job also claims what the job will take on
// its node(s): the GPUs the victims free plus any free ones it needs, and its CPUs and
// memory. The caller passes the claim back while the job is pending, and each cycle:
//
//   - holds the claimed resources before any job is served: they are not free to other
//     jobs, now or in the backfill timeline, until the claimant's time limit after now;
//     the claimant's CPUs and memory are held even while victims still hold theirs;
//   - serves the claimant on its claim alone: it starts there once nothing running holds
//     the claimed GPUs and its nodes have the CPUs and memory, and otherwise waits with
//     WaitingForPreemption, choosing no new victims, so no job is stopped twice for it;
//   - drops a claim that can no longer be met (see checkClaim), and the job then
//     searches afresh like any other.
//
// With no claims none of this runs: a cycle without them pays one length check.

// claim is a claim this cycle honours.
type claim struct {
	job    int64
	dur    int64 // the job's time limit; forever without one
	allocs []claimAlloc
	// held counts the claimed GPUs still held by running jobs (victims on their way out).
	held int
	// victims are the stopping jobs the claimant waits for, in ID order.
	victims []int64
	// placed is set once the claimant starts on the claim in this cycle.
	placed bool
}

// claimAlloc is the part of a claim on one node.
type claimAlloc struct {
	cand
	alloc     Alloc
	positions []int // of the claimed GPUs in the group
	// took counts the claimed GPUs no job held when the claim was applied: the ones the
	// claim keeps from other jobs that would otherwise find them free.
	took int
}

// releaseAt is when a running job's resources come back in the cycle's timeline: at its
// End, or now when it is overdue or stopping; forever when it has no End.
func releaseAt(r *Running, now int64) int64 {
	end := nanos(r.End)
	if end < now || r.Preempting {
		return now
	}
	return end
}

// applyClaims takes the snapshot's claims that can still be met out of the state, before
// any job is served, in job ID order (a GPU claimed twice goes to the first).
func (c *cycle) applyClaims() {
	s, st := c.s, c.st
	// The claimants, found in one pass over the pending jobs.
	jobs := make(map[int64]*Job, len(s.Claims))
	for i := range s.Claims {
		jobs[s.Claims[i].JobID] = nil
	}
	for i := range s.Pending {
		if j, ok := jobs[s.Pending[i].ID]; ok && j == nil {
			jobs[s.Pending[i].ID] = &s.Pending[i]
		}
	}
	in := make([]*Claim, 0, len(s.Claims))
	for i := range s.Claims {
		if jobs[s.Claims[i].JobID] != nil {
			in = append(in, &s.Claims[i])
		}
	}
	slices.SortStableFunc(in, func(a, b *Claim) int { return cmp.Compare(a.JobID, b.JobID) })

	c.claims = map[int64]*claim{}
	c.claimed = map[int]int64{}
	onNode := map[int][]*claim{}
	var ks []*claim
	for _, cl := range in {
		if c.claims[cl.JobID] != nil {
			continue // a second claim for one job: the first stands
		}
		k, ok := c.checkClaim(cl, jobs[cl.JobID])
		if !ok {
			continue
		}
		c.claims[k.job] = k
		ks = append(ks, k)
		for _, a := range k.allocs {
			onNode[a.node] = append(onNode[a.node], k)
			c.claimSlots(a, k.job)
		}
	}
	if len(ks) == 0 {
		c.claims, c.claimed = nil, nil
		return
	}

	// Who holds what on the claimed nodes: a claimed GPU held by a job that is not stopping
	// will not come free, which breaks the claim; stopping jobs are what claimants wait for.
	bad := map[*claim]bool{}
	type usage struct {
		cpus     int
		mem      int64
		stopping []int64
	}
	busy := map[int]*usage{}
	for ri := range s.Running {
		r := &s.Running[ri]
		for _, a := range r.Allocs {
			ni, ok := st.byName[a.Node]
			if !ok || onNode[ni] == nil {
				continue
			}
			u := busy[ni]
			if u == nil {
				u = &usage{}
				busy[ni] = u
			}
			if r.Preempting {
				u.stopping = append(u.stopping, r.ID)
			} else {
				u.cpus += a.CPUs
				u.mem += a.MemoryMB
			}
			for _, idx := range a.GPUIndices {
				k := c.claimOf(ni, idx)
				if k == nil {
					continue
				}
				if !r.Preempting {
					bad[k] = true
				} else if !slices.Contains(k.victims, r.ID) {
					k.victims = append(k.victims, r.ID)
				}
			}
		}
	}
	// What jobs that are not stopping hold on a node, and the claims before, must leave
	// room for the claim's CPUs and memory, or it would wait for ever.
	cpus, mem := map[int]int{}, map[int]int64{}
	for _, k := range ks {
		fits := true
		for _, a := range k.allocs {
			ns := &st.nodes[a.node]
			var u usage
			if busy[a.node] != nil {
				u = *busy[a.node]
			}
			if u.cpus+cpus[a.node]+a.alloc.CPUs > ns.n.CPUs || u.mem+mem[a.node]+a.alloc.MemoryMB > ns.n.MemoryMB {
				fits = false
			}
		}
		if !fits || bad[k] {
			bad[k] = true
			continue
		}
		for _, a := range k.allocs {
			cpus[a.node] += a.alloc.CPUs
			mem[a.node] += a.alloc.MemoryMB
		}
	}

	for _, k := range ks {
		if bad[k] {
			delete(c.claims, k.job)
			for _, a := range k.allocs {
				for _, p := range a.positions {
					delete(c.claimed, st.groups[a.group].off+p)
				}
			}
			continue
		}
		for i := range k.allocs {
			a := &k.allocs[i]
			var free []int
			for _, p := range a.positions {
				if st.groups[a.group].free[p] {
					free = append(free, p)
				}
			}
			a.took = len(free)
			k.held += len(a.positions) - a.took
			// The holders stop now, and their release at now goes to the claim instead.
			c.holdClaim(a, free, nil, k.dur)
		}
		if k.held == 0 {
			// Only CPUs or memory are missing: the claimant waits for whatever stops there.
			for _, a := range k.allocs {
				if u := busy[a.node]; u != nil {
					k.victims = append(k.victims, u.stopping...)
				}
			}
		}
		slices.Sort(k.victims)
		k.victims = slices.Compact(k.victims)
		c.noteHolding(k)
	}
	if len(c.claims) == 0 {
		c.claims, c.claimed = nil, nil
	}
}

// checkClaim turns a Claim into the cycle's terms, or reports that it cannot be met: it
// must give the job what it asks for, on each node one group of a model the job takes (one
// class for a gang) and its CPUs and memory, on schedulable nodes of the job's pools that
// no other team's window covers during the job's run, on healthy GPUs no earlier claim
// holds.
func (c *cycle) checkClaim(cl *Claim, j *Job) (*claim, bool) {
	st := c.st
	q, ok := c.s.Queues[j.Queue]
	if !ok {
		return nil, false
	}
	d, bad := newDemand(st, j, &q)
	if bad != "" || len(cl.Allocs) != d.nodes {
		return nil, false
	}
	k := &claim{job: j.ID, dur: d.dur, allocs: make([]claimAlloc, 0, len(cl.Allocs))}
	class := -1
	for _, a := range cl.Allocs {
		ni, ok := st.byName[a.Node]
		if !ok || len(a.GPUIndices) != d.gpus || a.CPUs != d.cpus || a.MemoryMB != d.mem ||
			!st.eligible(ni, &d) || st.foreignWindow(ni, &d, st.now) {
			return nil, false
		}
		ca := claimAlloc{cand: cand{ni, -1}, alloc: a}
		for _, b := range k.allocs {
			if b.node == ni {
				return nil, false
			}
		}
		if d.gpus > 0 {
			gi, positions, ok := st.locate(ni, a.GPUIndices)
			if !ok || !d.takes(st.groups[gi].model) || (class >= 0 && st.groups[gi].class != class) {
				return nil, false
			}
			class = st.groups[gi].class
			for _, p := range positions {
				if _, taken := c.claimed[st.groups[gi].off+p]; taken {
					return nil, false
				}
			}
			ca.group, ca.positions = gi, positions
		}
		k.allocs = append(k.allocs, ca)
	}
	return k, true
}

// locate finds the group of node ni that holds all the GPU indices, and their positions in
// it; false when one is missing, unhealthy, repeated, or in another group.
func (st *state) locate(ni int, indices []int) (int, []int, bool) {
	for _, gi := range st.nodes[ni].groups {
		g := &st.groups[gi]
		if _, ok := slices.BinarySearch(g.index, indices[0]); !ok {
			continue
		}
		positions := make([]int, len(indices))
		for i, idx := range indices {
			p, ok := slices.BinarySearch(g.index, idx)
			if !ok {
				return 0, nil, false
			}
			positions[i] = p
		}
		slices.Sort(positions)
		if len(slices.Compact(slices.Clone(positions))) != len(positions) {
			return 0, nil, false
		}
		return gi, positions, true
	}
	return 0, nil, false
}

// claimOf returns the claim on GPU idx of node ni, if any.
func (c *cycle) claimOf(ni, idx int) *claim {
	for _, gi := range c.st.nodes[ni].groups {
		g := &c.st.groups[gi]
		if p, ok := slices.BinarySearch(g.index, idx); ok {
			if job, ok := c.claimed[g.off+p]; ok {
				return c.claims[job]
			}
			return nil
		}
	}
	return nil
}

// isClaimed reports whether the GPU at position p of group gi is claimed.
func (c *cycle) isClaimed(gi, p int) bool {
	if c.claimed == nil {
		return false
	}
	_, ok := c.claimed[c.st.groups[gi].off+p]
	return ok
}

func (c *cycle) claimSlots(a claimAlloc, job int64) {
	if a.group < 0 {
		return
	}
	if c.claimed == nil {
		c.claimed = map[int]int64{}
	}
	for _, p := range a.positions {
		c.claimed[c.st.groups[a.group].off+p] = job
	}
}

// holdClaim takes a claim's part on one node out of the state: the free claimed GPUs and
// the CPUs and memory now, and the claimed GPUs running jobs hold at their release. held
// gives those per victim of this cycle (indices into preemptor.victims); without it the
// holders are stopping, and release them now. The claimant is expected to start now and
// to give everything back dur later, at its time limit.
func (c *cycle) holdClaim(a *claimAlloc, free []int, held []heldGPUs, dur int64) {
	st := c.st
	ns := &st.nodes[a.node]
	st.take(a.node, a.group, free, a.alloc.CPUs, a.alloc.MemoryMB)
	if n := len(a.positions) - len(free); n > 0 && held == nil {
		ns.addEvent(event{at: st.now, group: a.group, gpus: -n})
	}
	for _, h := range held {
		if h.gpus == 0 {
			continue
		}
		if t := releaseAt(c.pre.victims[h.victim].r, st.now); t != forever {
			ns.addEvent(event{at: t, group: a.group, gpus: -h.gpus})
		}
	}
	if end := addSat(st.now, dur); end != forever {
		ns.addEvent(event{at: end, group: a.group, gpus: len(a.positions), cpus: a.alloc.CPUs, mem: a.alloc.MemoryMB})
	}
}

// heldGPUs counts the claimed GPUs one victim holds.
type heldGPUs struct{ victim, gpus int }

// serveClaim is step 4 for a job that holds a claim: it starts on the claim when nothing
// running holds the claimed GPUs and the nodes have its CPUs and memory again, and waits
// for its victims otherwise. The state already counts the claim as the job's, so starting
// changes nothing in it: the claim's release at the job's time limit is the job's.
func (c *cycle) serveClaim(j *Job, pj PendingJob, d *demand, k *claim) {
	// A job that takes any model passed admission on some model; its claim fixes one,
	// which its team's quota must allow. If it does not, the claim lapses.
	if gi := k.allocs[0].group; gi >= 0 && c.quotas.teams != nil {
		if v := c.quotas.admit(d.team, d.project, c.st.models[c.st.groups[gi].model].name, d.gpus*d.nodes*MilliGPU); !v.ok {
			pj.Reason = c.quotaReason(d.team, v, d)
			c.plan.Pending = append(c.plan.Pending, pj)
			return
		}
	}
	ready := k.held == 0
	for _, a := range k.allocs {
		ns := &c.st.nodes[a.node]
		ready = ready && ns.freeCPU >= 0 && ns.freeMem >= 0
	}
	if ready {
		k.placed = true
		c.st.gpuVersion++ // reasons that named the claim are out of date
		pl := Placement{JobID: j.ID, Allocs: k.clone()}
		pl.Borrowing, pl.BorrowingInTeam = c.charge(j, d, k.allocs[0].group, d.gpus*d.nodes*MilliGPU)
		c.plan.Placements = append(c.plan.Placements, pl)
		return
	}
	pj.Reason = c.waitingReason(k.victims, k.nodes(c.st))
	c.plan.Pending = append(c.plan.Pending, pj)
	c.plan.Claims = append(c.plan.Claims, Claim{JobID: j.ID, Allocs: k.clone()})
}

// clone returns the claim's allocs, for a plan that must not share the snapshot's memory.
func (k *claim) clone() []Alloc {
	out := make([]Alloc, len(k.allocs))
	for i, a := range k.allocs {
		out[i] = a.alloc
		out[i].GPUIndices = slices.Clone(a.alloc.GPUIndices)
	}
	return out
}

func (k *claim) nodes(st *state) []string {
	out := make([]string, len(k.allocs))
	for i, a := range k.allocs {
		out[i] = st.nodes[a.node].n.Name
	}
	return out
}

// pick is a node chosen for a preemptor, with the victims chosen there (indices into
// preemptor.victims).
type pick struct {
	cd      cand
	victims []int
}

// newClaim claims for job j, on each picked node, the GPUs its victims free there and the
// free ones it needs besides (claimGPUs chooses), and its CPUs and memory, and takes the
// claim out of the state at once so that the jobs below in this cycle cannot use it
// either.
func (c *cycle) newClaim(j *Job, d *demand, picks []pick) Claim {
	st, p := c.st, c.pre
	k := &claim{job: j.ID, dur: d.dur, allocs: make([]claimAlloc, len(picks))}
	for i, pk := range picks {
		ns := &st.nodes[pk.cd.node]
		a := claimAlloc{cand: pk.cd, alloc: Alloc{Node: ns.n.Name, CPUs: d.cpus, MemoryMB: d.mem}}
		var free []int
		var held []heldGPUs
		if gi := pk.cd.group; gi >= 0 {
			g := &st.groups[gi]
			owner := map[int]int{} // position -> victim, for the GPUs the victims hold
			cands := make([]int, 0, g.nfree+d.gpus)
			for pos, f := range g.free {
				if f {
					cands = append(cands, pos)
				}
			}
			for _, vi := range pk.victims {
				for _, al := range p.victims[vi].r.Allocs {
					if al.Node != ns.n.Name {
						continue
					}
					for _, idx := range al.GPUIndices {
						if pos, ok := slices.BinarySearch(g.index, idx); ok && !g.free[pos] && !c.isClaimed(gi, pos) {
							if _, dup := owner[pos]; !dup {
								owner[pos] = vi
								cands = append(cands, pos)
							}
						}
					}
				}
			}
			a.positions = st.claimGPUs(g, cands, len(owner), d.gpus)
			a.alloc.GPUIndices = make([]int, len(a.positions))
			held = make([]heldGPUs, len(pk.victims))
			for n, pos := range a.positions {
				a.alloc.GPUIndices[n] = g.index[pos]
				vi, ok := owner[pos]
				if !ok {
					free = append(free, pos)
					continue
				}
				for h := range held {
					if pk.victims[h] == vi {
						held[h].victim = vi
						held[h].gpus++
					}
				}
			}
			a.took = len(free)
		}
		c.claimSlots(a, j.ID)
		c.holdClaim(&a, free, held, d.dur)
		k.allocs[i] = a
	}
	c.noteHolding(k)
	// The plan may share the allocs: the cycle never changes them.
	out := Claim{JobID: j.ID, Allocs: make([]Alloc, len(k.allocs))}
	for i, a := range k.allocs {
		out.Allocs[i] = a.alloc
	}
	return out
}

// claimGPUs chooses n of the candidates, the free GPUs of group g followed by the held
// ones the victims free. With NVLink information it takes the best-connected set, as a
// placement would. Without, it takes the victims' GPUs first: they are lost to others
// until the victims stop anyway, and the free ones it leaves may serve other jobs now.
func (st *state) claimGPUs(g *group, cands []int, held, n int) []int {
	if st.links(g, cands) != nil {
		sorted := slices.Sorted(slices.Values(cands))
		return st.choose(g, sorted, n)
	}
	free, victims := cands[:len(cands)-held], cands[len(cands)-held:]
	slices.Sort(victims)
	out := slices.Clone(victims[:min(n, len(victims))])
	out = append(out, free[:n-len(out)]...)
	slices.Sort(out)
	return out
}

// heldReason explains a single-node job that some claim keeps from starting: a node of its
// model and pools would have the GPUs free but for what the claim holds there.
func (c *cycle) heldReason(d *demand) (Reason, bool) {
	st := c.st
	for _, h := range c.holding {
		k, a := h.claim, &h.claim.allocs[h.alloc]
		if k.placed {
			continue
		}
		g := &st.groups[a.group]
		if !d.takes(g.model) || !st.eligible(a.node, d) || g.nfree >= d.gpus || g.nfree+a.took < d.gpus {
			continue
		}
		name := st.nodes[a.node].n.Name
		r := Reason{Code: ReasonResources, BestNode: name, Missing: map[string]int64{"gpus": int64(d.gpus - g.nfree)}}
		if !c.opts.Terse {
			r.Message = fmt.Sprintf("no node has %s: %d on %s %s held for job %d until the jobs preempted for it stop",
				gpusOf(d.gpus, "free ", d.modelName), a.took, name, isAre(a.took), k.job)
		}
		return r, true
	}
	return Reason{}, false
}

// heldNodes counts the nodes where a claim keeps a gang from GPUs it would find free
// enough, and names the first claimant.
func (c *cycle) heldNodes(d *demand) (int, int64) {
	st := c.st
	n, job := 0, int64(0)
	for _, h := range c.holding {
		k, a := h.claim, &h.claim.allocs[h.alloc]
		g := &st.groups[a.group]
		if k.placed || !d.takes(g.model) || !st.eligible(a.node, d) || g.nfree >= d.gpus || g.nfree+a.took < d.gpus {
			continue
		}
		if n == 0 {
			job = k.job
		}
		n++
	}
	return n, job
}

// holding is a part of a claim that keeps GPUs from others that they would find free.
type holding struct {
	claim *claim
	alloc int
}

// noteHolding lists the parts of claim k that hold free GPUs, for heldReason.
func (c *cycle) noteHolding(k *claim) {
	for i, a := range k.allocs {
		if a.group >= 0 && a.took > 0 {
			c.holding = append(c.holding, holding{k, i})
		}
	}
}
