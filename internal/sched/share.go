package sched

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// This file places requests for a share of one GPU (Request.GPUShare, GPUMemoryMB).
//
// A GPU's capacity is 1000 milli-GPU, and a share is counted in it: a request for half a
// GPU takes 500, a memory slice takes its share of the GPU's memory, rounded up (20 GB of
// an 80 GB GPU is 250). A GPU holds either whole-GPU jobs or tenants, never both: a GPU
// with a tenant is not free for whole-GPU jobs, and a shared request lands on a free GPU
// or on one whose tenants leave it room. The GPU comes free, for backfill, when the last
// of its tenants ends. Tenants are never chosen as preemption victims (stopping one frees
// no whole GPU), and a shared request neither preempts nor reserves: it waits for room.

// sharePlacer ranks a GPU for a shared request: lower is better. v is the GPU's node, i
// the GPU's place in v.rooms, need what the request takes of it.
type sharePlacer interface {
	score(st *state, v *shareView, i, need int) float64
}

// shareView is a node as the share placements look at it: the room of each of its usable
// GPUs, and, for FGD, its fragmentation as it is, worked out on first use.
type shareView struct {
	ni     int
	rooms  []int
	before float64
	frag   bool // before is set
}

// newSharePlacer returns the placer a SharePlacement names, chosen once per cycle.
func newSharePlacer(name string) (sharePlacer, error) {
	switch name {
	case SharePlacementFGD:
		return fgdShare{}, nil
	case SharePlacementBestFit:
		return bestFitShare{}, nil
	case SharePlacementPacking:
		return packingShare{}, nil
	}
	return nil, fmt.Errorf("sched: unknown share placement %q (want fgd, bestfit or packing)", name)
}

// bestFitShare: the GPU with the least room left after the request, then the node with
// the fewest free GPUs.
type bestFitShare struct{}

func (bestFitShare) score(st *state, v *shareView, i, need int) float64 {
	return float64(v.rooms[i]-need)*1e6 + float64(st.nodes[v.ni].freeGPUs)
}

// packingShare, in three bands: a GPU with tenants (the less room left the better), a
// free GPU on a node already in use (the fewer free GPUs the better), a free GPU on an
// unused node (the smaller the node the better).
type packingShare struct{}

func (packingShare) score(st *state, v *shareView, i, need int) float64 {
	ns := &st.nodes[v.ni]
	switch {
	case v.rooms[i] < MilliGPU:
		return float64(v.rooms[i] - need)
	case ns.freeGPUs < len(v.rooms):
		return 1e6 + float64(ns.freeGPUs)
	}
	return 2e6 + float64(len(v.rooms))
}

// fgdShare is fragmentation gradient descent: the GPU whose node's expected
// fragmentation, given the mix of requests, grows least; ties to the tightest GPU.
type fgdShare struct{}

func (fgdShare) score(st *state, v *shareView, i, need int) float64 {
	if !v.frag {
		v.before, v.frag = st.mix.frag(v.rooms), true
	}
	v.rooms[i] -= need
	growth := st.mix.frag(v.rooms) - v.before
	v.rooms[i] += need
	// Growth is in milli-GPU; the room left breaks ties (best fit).
	return growth*1e4 + float64(v.rooms[i]-need)
}

// shareMix is the mix of requests FGD weighs fragmentation by: the GPU request kinds of
// the jobs that wait and those that run, each by its share of them.
type shareMix struct {
	kinds []mixKind
}

type mixKind struct {
	gpus, milli int // GPUs per node, milli-GPU on each
	share       float64
}

// newShareMix counts the kinds of GPU requests in the snapshot: pending jobs by their
// request, running ones by what they hold per node. CPU-only work leaves every GPU's room
// unusable alike, so it changes no comparison and is left out.
func newShareMix(s *Snapshot) *shareMix {
	count := map[[2]int]int{}
	total := 0
	add := func(gpus, milli int) {
		if gpus > 0 && milli > 0 {
			count[[2]int{gpus, milli}]++
			total++
		}
	}
	for i := range s.Pending {
		r := &s.Pending[i].Request
		switch {
		case r.GPUShare > 0:
			add(1, r.GPUShare)
		case r.GPUMemoryMB > 0:
			add(1, 0) // its milli depends on the GPU; counted below through running ones
		case r.Nodes > 1 && r.GPUsPerNode > 0:
			add(r.GPUsPerNode, MilliGPU)
		case r.Nodes > 1:
			add(r.GPUs/r.Nodes, MilliGPU)
		default:
			add(r.GPUs, MilliGPU)
		}
	}
	for i := range s.Running {
		for _, a := range s.Running[i].Allocs {
			if a.GPUShare > 0 {
				add(1, a.GPUShare)
			} else {
				add(len(a.GPUIndices), MilliGPU)
			}
		}
	}
	// The typical kinds only, as the FGD paper's simulator weighs them: the most frequent
	// first (equals in a fixed order, map order being random), until they make up
	// typicalShare of the requests; their shares renormalised over what is kept.
	keys := make([][2]int, 0, len(count))
	for k := range count {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]int) int {
		return cmp.Or(cmp.Compare(count[b], count[a]), cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
	})
	kept := 0
	for i, k := range keys {
		if float64(kept) >= typicalShare*float64(total) {
			keys = keys[:i]
			break
		}
		kept += count[k]
	}
	m := &shareMix{}
	for _, k := range keys {
		m.kinds = append(m.kinds, mixKind{gpus: k[0], milli: k[1], share: float64(count[k]) / float64(kept)})
	}
	// Sums of floats depend on their order: keep one.
	slices.SortFunc(m.kinds, func(a, b mixKind) int { return cmp.Or(cmp.Compare(a.gpus, b.gpus), cmp.Compare(a.milli, b.milli)) })
	return m
}

// typicalShare is the share of the requests the FGD mix describes; the rarest kinds
// beyond it are left out, so that a GPU share only they could use does not count as
// usable (the "typical pods" of the FGD paper's simulator, 95%).
const typicalShare = 0.95

// frag is a node's expected fragmentation in milli-GPU (FGD's F_n(M)) given the room of
// each of its GPUs: for each kind of request, the room it could not use, weighted by the
// kind's share. A kind the node cannot take at all (too few GPUs with room for it) leaves
// all the room unusable; otherwise the room of the GPUs with less than it needs.
func (m *shareMix) frag(rooms []int) float64 {
	total := 0
	for _, r := range rooms {
		total += r
	}
	if total == 0 {
		return 0
	}
	var f float64
	for _, k := range m.kinds {
		fit, small := 0, 0
		for _, r := range rooms {
			if r >= k.milli {
				fit++
			} else {
				small += r
			}
		}
		if fit < k.gpus {
			f += k.share * float64(total)
		} else {
			f += k.share * float64(small)
		}
	}
	return f
}

// ensureShares makes the per-GPU share arrays, on first need in a cycle.
func (st *state) ensureShares() {
	if st.shareUsed == nil {
		st.shareUsed = make([]int, len(st.frees))
		st.tenantEnd = make([]int64, len(st.frees))
	}
}

// room is what GPU k (its place in frees) of group g at position p has for a tenant, in
// milli-GPU: all of it when free, what its tenants leave when it has some, none when a
// whole-GPU job holds it.
func (st *state) room(g *group, p int) int {
	if g.free[p] {
		return MilliGPU
	}
	if st.shareUsed != nil && st.shareUsed[g.off+p] > 0 {
		return MilliGPU - st.shareUsed[g.off+p]
	}
	return 0
}

// gpuMemory is the memory of the GPU at position p of group g.
func (st *state) gpuMemory(g *group, p int) int64 {
	return st.nodes[g.node].n.GPUs[g.pos[p]].MemoryMB
}

// need is what a shared request takes of a GPU with mem MB of memory, in milli-GPU, and
// the memory slice that goes with it; 0 when the GPU cannot hold it.
func (d *demand) need(mem int64) (int, int64) {
	if d.share > 0 {
		return d.share, int64(d.share) * mem / MilliGPU
	}
	if mem <= 0 || d.gmem > mem {
		return 0, 0
	}
	return int(min((d.gmem*MilliGPU+mem-1)/mem, MilliGPU)), d.gmem
}

// applyTenant takes what a running tenant holds of its GPU on node ni: the GPU is no
// longer free for whole-GPU jobs, and comes free when its last tenant ends.
func (st *state) applyTenant(ni int, a *Alloc, end int64) {
	ns := &st.nodes[ni]
	for _, gi := range ns.groups {
		g := &st.groups[gi]
		p, ok := slices.BinarySearch(g.index, a.GPUIndices[0])
		if !ok {
			continue
		}
		st.ensureShares()
		k := g.off + p
		if g.free[p] {
			g.free[p] = false
			g.nfree--
		} else if st.shareUsed[k] == 0 {
			return // a whole-GPU job holds it too: nothing more to take
		}
		st.shareUsed[k] += a.GPUShare
		st.tenantEnd[k] = max(st.tenantEnd[k], end)
		return
	}
}

// tenantEvents schedules the release of each GPU with tenants at its last tenant's end.
func (st *state) tenantEvents() {
	if st.shareUsed == nil {
		return
	}
	for gi := range st.groups {
		g := &st.groups[gi]
		for p := range g.index {
			if k := g.off + p; st.shareUsed[k] > 0 && st.tenantEnd[k] != forever {
				st.nodes[g.node].addEvent(event{at: st.tenantEnd[k], group: gi, gpus: 1})
			}
		}
	}
}

// shareNodes lists the schedulable nodes that allow sharing and may run the job.
func (st *state) shareNodes(d *demand) []int {
	key := d.poolKey + "\x00share"
	if nodes, ok := st.pools[key]; ok {
		return nodes
	}
	var nodes []int
	for ni := range st.nodes {
		if st.nodes[ni].n.Sharing && st.eligible(ni, d) {
			nodes = append(nodes, ni)
		}
	}
	st.pools[key] = nodes
	return nodes
}

// shareSpot is a GPU a shared request may take.
type shareSpot struct {
	c     cand
	p     int // position in the group
	milli int
	mem   int64
}

// findShared returns the GPU the placement prefers for a shared request among those with
// room that pass the chain.
func (c *cycle) findShared(d *demand, dg *diag) (shareSpot, bool) {
	st := c.st
	if c.sharePlacer == nil {
		c.sharePlacer, _ = newSharePlacer(c.opts.SharePlacement) // checked by withDefaults
	}
	if _, fgd := c.sharePlacer.(fgdShare); fgd && st.mix == nil {
		st.mix = newShareMix(c.s)
	}
	best, bestScore, found := shareSpot{}, 0.0, false
	v := &c.shareView
	for _, ni := range st.shareNodes(d) {
		*v = shareView{ni: ni, rooms: v.rooms[:0]}
		for _, gi := range st.nodes[ni].groups {
			g := &st.groups[gi]
			for p := range g.index {
				v.rooms = append(v.rooms, st.room(g, p))
			}
		}
		// The chain once per node for a fresh GPU (which, for backfill, takes a whole
		// GPU until the job ends) and once for joining tenants.
		fresh, join, i := -1, -1, -1
		for _, gi := range st.nodes[ni].groups {
			g := &st.groups[gi]
			for p := range g.index {
				i++
				room := v.rooms[i]
				if room == 0 || !d.takes(g.model) {
					continue
				}
				milli, mem := d.need(st.gpuMemory(g, p))
				if milli == 0 || milli > room {
					continue
				}
				k := g.off + p
				ok := false
				if room == MilliGPU {
					if fresh < 0 {
						fresh = b2i(st.passes(cand{ni, gi}, d, dg))
					}
					ok = fresh == 1
				} else {
					ok = st.joinPasses(cand{ni, gi}, k, d, dg, &join)
				}
				if !ok {
					continue
				}
				score := c.sharePlacer.score(st, v, i, milli)
				if !found || score < bestScore {
					best, bestScore, found = shareSpot{cand{ni, gi}, p, milli, mem}, score, true
				}
			}
		}
	}
	return best, found
}

// joinPasses runs the chain for joining the tenants of GPU k. Ending no later than they
// do, the job holds the GPU no longer than it is held already and backfill has only its
// CPUs and memory to check; ending later, it is checked as if it took the GPU whole.
func (st *state) joinPasses(cd cand, k int, d *demand, dg *diag, cached *int) bool {
	if addSat(st.now, d.dur) > st.tenantEnd[k] {
		return st.passes(cd, d, dg)
	}
	if *cached < 0 {
		dd := *d
		dd.gpus = 0
		*cached = b2i(st.passes(cand{cd.node, -1}, &dd, dg))
	}
	return *cached == 1
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// placeShared gives a shared request its share of the chosen GPU.
func (c *cycle) placeShared(j *Job, d *demand, s shareSpot) {
	st := c.st
	g := &st.groups[s.c.group]
	k := g.off + s.p
	st.ensureShares()
	end := addSat(st.now, d.dur)
	if g.free[s.p] {
		st.take(s.c.node, s.c.group, []int{s.p}, d.cpus, d.mem)
		st.tenantEnd[k] = end
		st.release(s.c, 1, d)
		if len(st.holds) > 0 {
			st.useHolds(s.c.group, 1, d.team, st.now, end, true)
		}
	} else {
		st.take(s.c.node, -1, nil, d.cpus, d.mem)
		if old := st.tenantEnd[k]; end > old {
			// The GPU now comes free when this job ends, not at old.
			st.nodes[s.c.node].moveGPURelease(s.c.group, old, end)
			st.tenantEnd[k] = end
		}
		st.release(cand{s.c.node, -1}, 0, d)
	}
	st.shareUsed[k] += s.milli
	alloc := Alloc{Node: st.nodes[s.c.node].n.Name, GPUIndices: []int{g.index[s.p]}, CPUs: d.cpus, MemoryMB: d.mem,
		GPUShare: s.milli, GPUMemoryMB: s.mem}
	pl := Placement{JobID: j.ID, Allocs: []Alloc{alloc}}
	pl.Borrowing, pl.BorrowingInTeam = c.charge(j, d, s.c.group, s.milli)
	c.plan.Placements = append(c.plan.Placements, pl)
}

// moveGPURelease moves one GPU of group gi from the release at old to one at end.
func (ns *nodeState) moveGPURelease(gi int, old, end int64) {
	for i := range ns.events {
		if e := &ns.events[i]; e.at == old && e.group == gi && e.gpus > 0 {
			e.gpus--
			break
		}
	}
	if end != forever {
		ns.addEvent(event{at: end, group: gi, gpus: 1})
	}
}

// neverShared is neverShares, cached per request.
func (c *cycle) neverShared(d *demand) string {
	key := d.shape()
	key.team = ""
	msg, ok := c.never[key]
	if !ok {
		msg = c.neverShares(d)
		c.never[key] = msg
	}
	return msg
}

// neverShares is the static check of a shared request: a node that allows sharing, in
// the job's pools, with a GPU large enough and the CPUs and memory, schedulable or not.
func (c *cycle) neverShares(d *demand) string {
	var (
		sharing, models    bool
		maxGPU             int64
		maxCPUs            int
		maxMem             int64
		runtime, enoughAll bool
		versions           bool
	)
	for i := range c.s.Nodes {
		n := &c.s.Nodes[i]
		if !n.Sharing || !inPoolsNode(n, d.pools) {
			continue
		}
		sharing = true
		if d.image && n.ContainerRuntime == "" {
			continue
		}
		runtime = true
		if !d.versionsFit(n) {
			continue
		}
		versions = true
		maxCPUs, maxMem = max(maxCPUs, n.CPUs), max(maxMem, n.MemoryMB)
		for _, g := range n.GPUs {
			if !d.acceptsName(g.Model) {
				continue
			}
			models = true
			maxGPU = max(maxGPU, g.MemoryMB)
			if g.MemoryMB >= d.gmem && n.CPUs >= d.cpus && n.MemoryMB >= d.mem {
				enoughAll = true
			}
		}
	}
	where := ""
	if d.pools != nil {
		where = " in pools " + strings.Join(d.pools, ", ")
	}
	switch {
	case !sharing:
		return "no node" + where + " is in a pool that allows GPU sharing" + c.exclusiveNote(d)
	case !runtime:
		return noRuntime + " among the nodes that allow GPU sharing" + where
	case !versions:
		return "no node that allows GPU sharing" + where + " reports" + strings.TrimPrefix(d.versionNote(), " with")
	case !models && d.modelName != "":
		return fmt.Sprintf("no node that allows GPU sharing%s has GPUs of model %s", where, d.modelName)
	case !models:
		return "no node that allows GPU sharing" + where + " has GPUs"
	case d.gmem > maxGPU:
		return fmt.Sprintf("no GPU that may be shared%s has %s of memory; the largest has %s", where, fmtMB(d.gmem), fmtMB(maxGPU))
	case d.cpus > maxCPUs:
		return fmt.Sprintf("no node that allows GPU sharing%s has %d CPUs; the largest has %d", where, d.cpus, maxCPUs)
	case d.mem > maxMem:
		return fmt.Sprintf("no node that allows GPU sharing%s has %d MB of memory; the largest has %d MB", where, d.mem, maxMem)
	case !enoughAll:
		return fmt.Sprintf("no node that allows GPU sharing%s has the GPU, CPUs and memory together", where)
	}
	return ""
}

// acceptsName reports whether the job takes GPUs of the named model.
func (d *demand) acceptsName(model string) bool {
	switch {
	case d.models != nil:
		return slices.Contains(d.models, model)
	case d.modelName == "":
		return true
	}
	return d.modelName == model
}

// shareReason explains why a shared request found no GPU: a node lacked CPUs or memory,
// the GPUs with room have too little of it each (fragmented), or none has room.
func (c *cycle) shareReason(d *demand, dg *diag) Reason {
	if dg.rejected[checkBackfill]+dg.rejected[checkWindow]+dg.rejected[checkCPUs]+dg.rejected[checkMemory] > 0 {
		return c.reason(d, dg)
	}
	st := c.st
	withRoom := 0
	var most int
	var mostMem, needMem int64
	for _, ni := range st.shareNodes(d) {
		for _, gi := range st.nodes[ni].groups {
			g := &st.groups[gi]
			if !d.takes(g.model) {
				continue
			}
			for p := range g.index {
				room := st.room(g, p)
				if room == 0 {
					continue
				}
				withRoom++
				mem := st.gpuMemory(g, p)
				if room > most {
					most, mostMem = room, int64(room)*mem/MilliGPU
					_, needMem = d.need(mem)
				}
			}
		}
	}
	r := Reason{Code: ReasonResources, Missing: map[string]int64{"gpus": 1}}
	if withRoom == 0 {
		if !c.opts.Terse {
			r.Message = "every GPU of the nodes that allow sharing is taken"
			if d.modelName != "" {
				r.Message = fmt.Sprintf("every GPU of model %s on the nodes that allow sharing is taken", d.modelName)
			}
		}
		return r
	}
	r.Code = ReasonFragmented
	if !c.opts.Terse {
		have, want := fmt.Sprintf("%.3g of a GPU", float64(most)/MilliGPU), fmt.Sprintf("%.3g", float64(d.share)/MilliGPU)
		if d.gmem > 0 {
			have, want = fmtMB(mostMem), fmtMB(needMem)
			if needMem == 0 {
				want = fmtMB(d.gmem)
			}
		}
		r.Message = fmt.Sprintf("fragmented: %s with room, the most %s free, but none has %s", plural(withRoom, "GPU"), have, want)
		if withRoom == 1 {
			r.Message = fmt.Sprintf("fragmented: 1 GPU has %s free, but this job needs %s", have, want)
		}
	}
	return r
}

// fmtMB writes a memory size for messages: "40 GB" for whole gigabytes (of 1024 MB),
// else "1536 MB".
func fmtMB(mb int64) string {
	if mb >= 1024 && mb%1024 == 0 {
		return fmt.Sprintf("%d GB", mb/1024)
	}
	if mb >= 10*1024 {
		return fmt.Sprintf("%.1f GB", float64(mb)/1024)
	}
	return fmt.Sprintf("%d MB", mb)
}

// milliOf is a demand's GPUs in milli-GPU, for quotas and caps before placement: a
// memory slice counts at its share of the largest GPU that may take it.
func (c *cycle) milliOf(d *demand) int {
	switch {
	case d.share > 0:
		return d.share
	case d.gmem > 0:
		largest := int64(0)
		for _, ni := range c.st.shareNodes(d) {
			for _, gi := range c.st.nodes[ni].groups {
				g := &c.st.groups[gi]
				if d.takes(g.model) {
					for p := range g.index {
						largest = max(largest, c.st.gpuMemory(g, p))
					}
				}
			}
		}
		if largest == 0 {
			return 1
		}
		return int(max(1, min(int64(math.Ceil(float64(d.gmem)*MilliGPU/float64(largest))), MilliGPU)))
	}
	return d.gpus * d.nodes * MilliGPU
}
