package sched

import (
	"math"
	"math/bits"
	"slices"
	"strings"
	"time"
)

// forever stands for "no end" in the nanosecond times a cycle works in.
const forever = math.MaxInt64

// nanos turns a time into the cycle's int64 clock; the zero time means "never".
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return forever
	}
	return t.UnixNano()
}

// addSat adds a duration to a time without overflowing past forever.
func addSat(t, d int64) int64 {
	if d >= forever-t {
		return forever
	}
	return t + d
}

// bitset holds group or node numbers; iterating it yields them in name order, which keeps
// tie-breaking deterministic without sorting in the hot path.
type bitset []uint64

func newBitset(n int) bitset { return make(bitset, (n+63)/64) }
func (b bitset) set(i int)   { b[i>>6] |= 1 << (i & 63) }
func (b bitset) unset(i int) { b[i>>6] &^= 1 << (i & 63) }

// next returns the lowest member >= i, or -1.
func (b bitset) next(i int) int {
	w := i >> 6
	if w >= len(b) {
		return -1
	}
	word := b[w] &^ (1<<(i&63) - 1)
	for {
		if word != 0 {
			return w<<6 + bits.TrailingZeros64(word)
		}
		w++
		if w == len(b) {
			return -1
		}
		word = b[w]
	}
}

// usable reports whether a GPU may take new work: healthy, and held by no leftover
// processes.
func (g *GPU) usable() bool { return g.Healthy && !g.Held }

// group is the usable GPUs of one model on one node: the unit a single-node job is placed
// on. Groups are numbered in (node name, model) order.
type group struct {
	node  int
	model int
	index []int  // GPU.Index of each GPU, ascending
	pos   []int  // position of each in Node.GPUs, for its NVLink peers
	free  []bool // parallel to index
	nfree int
	off   int // where free starts in state.frees
	// class numbers the group's model and its node's driver version in the order of
	// their names: a gang never mixes classes.
	class int
}

// nodeState is a schedulable node with what is free on it now and what will change.
type nodeState struct {
	n        *Node
	src      int // index of n in Snapshot.Nodes
	groups   []int
	freeCPU  int
	freeMem  int64
	freeGPUs int
	// events are future changes of what is free, in time order: releases when jobs end,
	// and the start (negative) and end of backfill reservations.
	events []event
	// reserved counts backfill reservations here; without any, what is free can only grow,
	// so the backfill check has nothing to walk.
	reserved int
	// windows are administrative reservations and maintenance windows that cover the node.
	windows []window
	// version counts the changes of what is free here and of events in a cycle, for
	// earliest starts kept between reservations (earliestMemo).
	version uint32
}

// event is a change of a node's free resources at a time; group is -1 when no GPUs change.
type event struct {
	at    int64
	group int
	gpus  int
	cpus  int
	mem   int64
}

// window is an administrative reservation of a node for a team, or a planned
// maintenance window (maint), which holds the node for no one.
type window struct {
	team       string
	start, end int64
	name       string
	maint      bool
}

// blocks reports whether the window keeps a job of team off the node while it is open.
func (w *window) blocks(team string) bool {
	return w.maint || w.team != team
}

// modelIndex finds groups of one model by their number of free GPUs.
type modelIndex struct {
	name string
	// buckets[k] holds the groups with exactly k free GPUs.
	buckets []bitset
	counts  []int
	groups  []int // every group of the model, in name order
	maxCap  int   // most healthy GPUs in one group
	free    int   // free GPUs of the model in all groups
}

// state is the cluster as one cycle sees it; placements made in the cycle update it.
type state struct {
	now         int64
	nodes       []nodeState // schedulable nodes in name order
	byName      map[string]int
	groups      []group
	models      []modelIndex // in name order
	modelByName map[string]int
	// nodeBuckets[k] holds the nodes with k free GPUs in all; CPU-only jobs search them.
	nodeBuckets []bitset
	// unschedulable counts the nodes left out, for messages; healthFailed holds those
	// of them whose health check failed, by their place in Snapshot.Nodes, in name order.
	unschedulable int
	healthFailed  []int
	totalGPUs     int
	// gpuVersion counts changes of free GPU counts, for answers cached on them.
	gpuVersion int
	// pools caches the nodes of each queue's pools, by the queue's name.
	pools map[string][]int
	// ranges caches the jobs' version ranges by their text, for the cycle: many jobs
	// share a few ranges.
	ranges map[string]VersionRange
	// frees backs every group's free slice, so a copy of the state can copy it in one go.
	frees []bool
	// Derived from the nodes alone, so copies of a base state share them:
	// allNodes finds every node of the snapshot, schedulable or not, by name;
	// kinds caches the node kinds for the static check per pool restriction.
	allNodes map[string]int
	kinds    map[string]map[string][]capacity
	// shareUsed is, per GPU (by its place in frees), the milli-GPU its tenants hold, and
	// tenantEnd when the last of them ends; both nil until a cycle meets a tenant.
	shareUsed []int
	tenantEnd []int64
	// mix is the request mix FGD weighs fragmentation by, built on first use.
	mix *shareMix
	// holds are the cycle's reservations by GPU count (hold.go).
	holds []gpuHold
	// early holds each group's last earliest start (earliestMemo); nil until a cycle
	// asks for one. Never shared between cycles: versions start again with each copy.
	early []earlyMemo
	// changes counts every change a start time depends on (take, addEvent, useHolds),
	// and noStart the requests found never to start, at that count (backfill.go).
	// Both start again with each copy.
	changes uint64
	noStart map[noStartKey]noStartEntry
}

// newState builds the cycle's view: schedulable nodes, their GPU groups, and what the
// running jobs hold and when they give it back.
func newState(s *Snapshot, now int64) *state {
	st := newBase(s)
	st.now = now
	st.finish(s.Running)
	return st
}

// newBase builds what a cycle derives from the nodes alone: everything free, nothing held.
func newBase(s *Snapshot) *state {
	st := &state{byName: make(map[string]int, len(s.Nodes)), modelByName: map[string]int{}, pools: map[string][]int{}, ranges: map[string]VersionRange{},
		allNodes: make(map[string]int, len(s.Nodes)), kinds: map[string]map[string][]capacity{}}
	for i := range s.Nodes {
		st.allNodes[s.Nodes[i].Name] = i
	}
	order := make([]int, 0, len(s.Nodes))
	for i := range s.Nodes {
		switch n := &s.Nodes[i]; {
		case n.HealthFailed:
			// Named in reasons: "not schedulable" alone would hide why.
			st.unschedulable++
			st.healthFailed = append(st.healthFailed, i)
		case n.Schedulable:
			order = append(order, i)
		default:
			st.unschedulable++
		}
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(s.Nodes[a].Name, s.Nodes[b].Name) })
	slices.SortFunc(st.healthFailed, func(a, b int) int { return strings.Compare(s.Nodes[a].Name, s.Nodes[b].Name) })

	// Model numbers first, so that groups can carry them.
	var names []string
	for _, i := range order {
		for _, g := range s.Nodes[i].GPUs {
			// Nodes are mostly of one model: skip repeats before sorting.
			if g.usable() && (len(names) == 0 || names[len(names)-1] != g.Model) {
				names = append(names, g.Model)
			}
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	for i, m := range names {
		st.modelByName[m] = i
		st.models = append(st.models, modelIndex{name: m})
	}

	// One backing array per field for all groups: a cycle at 10,000 nodes would
	// otherwise spend its time allocating.
	healthy := 0
	for _, i := range order {
		for _, g := range s.Nodes[i].GPUs {
			if g.usable() {
				healthy++
			}
		}
	}
	indexes, positions, frees := make([]int, 0, healthy), make([]int, 0, healthy), make([]bool, healthy)
	st.nodes = make([]nodeState, 0, len(order))
	st.groups = make([]group, 0, len(order))
	var models []int
	for _, i := range order {
		n := &s.Nodes[i]
		if _, dup := st.byName[n.Name]; dup {
			continue // a duplicate name is a caller bug; the first node wins
		}
		ni := len(st.nodes)
		st.byName[n.Name] = ni
		ns := nodeState{n: n, src: i, freeCPU: n.CPUs, freeMem: n.MemoryMB}
		models = models[:0]
		for _, g := range n.GPUs {
			if g.usable() {
				models = append(models, st.modelByName[g.Model])
			}
		}
		slices.Sort(models)
		models = slices.Compact(models)
		for _, m := range models {
			gr := group{node: ni, model: m}
			start := len(indexes)
			for p, g := range n.GPUs {
				if g.usable() && st.modelByName[g.Model] == m {
					indexes = append(indexes, g.Index)
					positions = append(positions, p)
				}
			}
			gr.index, gr.pos = indexes[start:len(indexes):len(indexes)], positions[start:len(positions):len(positions)]
			// Sorted by GPU index so that "lowest free indices" means what it says and
			// running jobs' indices can be found by binary search.
			if !slices.IsSorted(gr.index) {
				byIndex := make([][2]int, len(gr.index))
				for k := range byIndex {
					byIndex[k] = [2]int{gr.index[k], gr.pos[k]}
				}
				slices.SortFunc(byIndex, func(a, b [2]int) int { return a[0] - b[0] })
				for k, x := range byIndex {
					gr.index[k], gr.pos[k] = x[0], x[1]
				}
			}
			gr.free = frees[start : start+len(gr.index) : start+len(gr.index)]
			gr.off = start
			for k := range gr.free {
				gr.free[k] = true
			}
			gr.nfree = len(gr.index)
			ns.groups = append(ns.groups, len(st.groups))
			st.models[m].groups = append(st.models[m].groups, len(st.groups))
			st.models[m].maxCap = max(st.models[m].maxCap, len(gr.index))
			st.groups = append(st.groups, gr)
			st.totalGPUs += len(gr.index)
		}
		st.nodes = append(st.nodes, ns)
	}

	st.frees = frees
	st.numberClasses()
	return st
}

// numberClasses sets each group's class, numbered in the order of the classes' names, so
// that ordering gangs by class number orders them by name.
func (st *state) numberClasses() {
	names := make([]string, len(st.groups))
	for i, g := range st.groups {
		names[i] = st.models[g.model].name + "\x00" + st.nodes[g.node].n.DriverVersion
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	for i := range st.groups {
		st.groups[i].class, _ = slices.BinarySearch(sorted, names[i])
	}
}

// clone returns a fresh copy of a base state for a cycle at now on the snapshot s, whose
// nodes the caller promises are those the base was built from. Only what a cycle changes
// is copied; the node and GPU layout is shared. The copy takes over the memory of old, an
// earlier copy of the same base no longer in use, when given.
func (b *state) clone(s *Snapshot, now int64, old *state) *state {
	st := *b
	st.now = now
	st.early = nil
	if old == nil {
		old = &state{pools: map[string][]int{}, ranges: map[string]VersionRange{}}
	}
	st.holds = old.holds[:0]
	st.changes, st.noStart = 0, old.noStart
	clear(st.noStart)
	st.pools = old.pools
	clear(st.pools)
	st.ranges = old.ranges
	clear(st.ranges)
	st.frees = append(old.frees[:0], b.frees...)
	st.nodes = slices.Grow(old.nodes[:0], len(b.nodes))[:len(b.nodes)]
	for i := range st.nodes {
		// Each node's future events grow as the cycle goes: keep the old array.
		events := st.nodes[i].events[:0]
		st.nodes[i] = b.nodes[i]
		st.nodes[i].n = &s.Nodes[st.nodes[i].src]
		st.nodes[i].events = events
	}
	st.groups = append(old.groups[:0], b.groups...)
	for i := range st.groups {
		g := &st.groups[i]
		g.free = st.frees[g.off : g.off+len(g.index) : g.off+len(g.index)]
	}
	st.models = append(old.models[:0], b.models...)
	return &st
}

// finish takes what the running jobs hold and indexes nodes and groups by what is free.
func (st *state) finish(running []Running) {
	st.applyRunning(running)

	maxNode := 0
	for i := range st.nodes {
		ns := &st.nodes[i]
		for _, g := range ns.groups {
			ns.freeGPUs += st.groups[g].nfree
		}
		maxNode = max(maxNode, len(ns.n.GPUs))
	}
	st.nodeBuckets = make([]bitset, maxNode+1)
	for k := range st.nodeBuckets {
		st.nodeBuckets[k] = newBitset(len(st.nodes))
	}
	for i := range st.nodes {
		st.nodeBuckets[st.nodes[i].freeGPUs].set(i)
	}
	for m := range st.models {
		mi := &st.models[m]
		mi.buckets = make([]bitset, mi.maxCap+1)
		mi.counts = make([]int, mi.maxCap+1)
		for k := range mi.buckets {
			mi.buckets[k] = newBitset(len(st.groups))
		}
		for _, g := range mi.groups {
			nf := st.groups[g].nfree
			mi.buckets[nf].set(g)
			mi.counts[nf]++
			mi.free += nf
		}
	}
}

// applyRunning takes what running jobs hold and schedules its release at their End.
func (st *state) applyRunning(running []Running) {
	var freed []int // GPUs freed per group of the current alloc, reused
	defer st.tenantEvents()
	for ri := range running {
		r := &running[ri]
		end := nanos(r.End)
		if end < st.now || r.Preempting {
			end = st.now // overdue or told to stop: its resources come back at once
		}
		for ai := range r.Allocs {
			a := &r.Allocs[ai]
			ni, ok := st.byName[a.Node]
			if !ok {
				continue // unschedulable or unknown node: nothing here to subtract from
			}
			ns := &st.nodes[ni]
			ns.freeCPU -= a.CPUs
			ns.freeMem -= a.MemoryMB
			if a.GPUShare > 0 && len(a.GPUIndices) == 1 {
				// A tenant: its GPU comes free when the last of its tenants ends.
				st.applyTenant(ni, a, end)
				if end != forever && (a.CPUs != 0 || a.MemoryMB != 0) {
					ns.addEvent(event{at: end, group: -1, cpus: a.CPUs, mem: a.MemoryMB})
				}
				continue
			}
			freed = freed[:0]
			for _, gi := range ns.groups {
				n := 0
				g := &st.groups[gi]
				for _, idx := range a.GPUIndices {
					if p, ok := slices.BinarySearch(g.index, idx); ok && g.free[p] {
						g.free[p] = false
						g.nfree--
						n++
					}
				}
				freed = append(freed, n)
			}
			if end == forever {
				continue
			}
			cpus, mem := a.CPUs, a.MemoryMB
			for k, gi := range ns.groups {
				if freed[k] > 0 {
					ns.addEvent(event{at: end, group: gi, gpus: freed[k], cpus: cpus, mem: mem})
					cpus, mem = 0, 0
				}
			}
			if cpus != 0 || mem != 0 {
				ns.addEvent(event{at: end, group: -1, cpus: cpus, mem: mem})
			}
		}
	}
}

// addEvent inserts e after any event at the same time, keeping the order stable.
func (ns *nodeState) addEvent(e event) {
	i, _ := slices.BinarySearchFunc(ns.events, e.at, func(x event, t int64) int {
		if x.at <= t {
			return -1
		}
		return 1
	})
	ns.events = slices.Insert(ns.events, i, e)
	ns.version++
}

// take marks GPUs of a group (by position) and CPUs and memory of its node as used, and
// moves the group and node to their new buckets.
func (st *state) take(ni, gi int, positions []int, cpus int, mem int64) {
	ns := &st.nodes[ni]
	ns.freeCPU -= cpus
	ns.freeMem -= mem
	ns.version++
	st.changes++
	if gi < 0 || len(positions) == 0 {
		return
	}
	st.gpuVersion++
	g := &st.groups[gi]
	mi := &st.models[g.model]
	mi.buckets[g.nfree].unset(gi)
	mi.counts[g.nfree]--
	st.nodeBuckets[ns.freeGPUs].unset(ni)
	for _, p := range positions {
		g.free[p] = false
	}
	g.nfree -= len(positions)
	ns.freeGPUs -= len(positions)
	mi.free -= len(positions)
	mi.buckets[g.nfree].set(gi)
	mi.counts[g.nfree]++
	st.nodeBuckets[ns.freeGPUs].set(ni)
}
