package sched

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// demand is a job's request in the form the checks use.
type demand struct {
	// modelName names the requested model for messages and cache keys: "" for any model,
	// "A100 or H100" for a list.
	modelName string
	// models is the list of acceptable models of a job that names several
	// (Request.GPUModels), in its order of preference; nil otherwise.
	models []string
	// prefer numbers the listed models schedulable nodes have, in the list's order: the
	// order a placement tries them in at equal fit. nil without a list. With speeds
	// (bySpeed), fastest first, and a placement tries them in that order before fit.
	prefer  []int
	bySpeed bool
	// model is the number of the requested model in state.models; anyModel when the job
	// takes any model, or any of a list (those deny does not mark), noModel when no
	// schedulable node has the model (or any listed one).
	model int
	gpus  int // per node
	nodes int
	cpus  int // per node
	mem   int64
	dur   int64 // forever when the job has no time limit
	team  string
	// project is the job's project, "" for none; scope is the team's name, or for a job
	// of a project scopeOf(team, project), which cache keys use.
	project, scope string
	// pools are the node pools the job's queue may use; nil: any node.
	pools []string
	// image is set for a job with a container image: it needs a node with a runtime.
	image bool
	// cuda and driver are the versions the job accepts (Request.CUDA, Request.Driver);
	// zero: any, a node that reports none included.
	cuda, driver VersionRange
	// poolKey names the restriction on nodes in cache keys: the queue's name when it
	// limits the pools, or "", followed by imageKey for an image job and the version
	// ranges for a job that has them.
	poolKey string
	// deny marks the models a job that takes any model, or any of a list, may not use:
	// those its list leaves out and those its team's quota rules out.
	deny []bool
	// share and gmem are a shared request's milli-GPU or memory slice (Request.GPUShare,
	// GPUMemoryMB); both zero for whole GPUs.
	share int
	gmem  int64
}

// shared reports whether the job asks for a share of one GPU.
func (d *demand) shared() bool { return d.share > 0 || d.gmem > 0 }

// rank is model m's place in the job's order of preference: its position in the list,
// or 0 for every model without a list.
func (d *demand) rank(m int) int {
	if i := slices.Index(d.prefer, m); i >= 0 {
		return i
	}
	return 0
}

// takes reports whether the job may use GPUs of model m.
func (d *demand) takes(m int) bool {
	if d.model != anyModel {
		return d.model == m
	}
	return d.deny == nil || !d.deny[m]
}

const (
	anyModel = -1
	noModel  = -2
)

// imageKey marks, in a poolKey, a job that needs a container runtime. Queue names
// cannot hold a NUL, so no queue's key ends the same way.
const imageKey = "\x00image"

// restricted reports whether only some schedulable nodes may run the job at all (its
// pools, a container runtime, versions); such jobs search st.poolNodes where that is
// shorter.
func (d *demand) restricted() bool { return d.pools != nil || d.image || d.versioned() }

// versioned reports whether the job constrains the driver or CUDA version.
func (d *demand) versioned() bool { return !d.cuda.IsZero() || !d.driver.IsZero() }

// versionsFit reports whether node n reports driver and CUDA versions the job accepts.
func (d *demand) versionsFit(n *Node) bool {
	// Most jobs name no versions; this is asked of every node for every waiting job.
	if len(d.cuda.terms) == 0 && len(d.driver.terms) == 0 {
		return true
	}
	return d.cuda.Match(n.CUDAVersion) && d.driver.Match(n.DriverVersion)
}

// fitsNode reports whether node n, schedulable or not, could run the job whatever is
// free: it is in the job's pools, has a container runtime for an image job, and
// versions the job accepts.
func (d *demand) fitsNode(n *Node) bool {
	return inPoolsNode(n, d.pools) && (!d.image || n.ContainerRuntime != "") && d.versionsFit(n)
}

// versionNote names the job's version constraints for messages, e.g. " with CUDA
// >=12.4 and driver >=550"; "" without any.
func (d *demand) versionNote() string {
	var parts []string
	if !d.cuda.IsZero() {
		parts = append(parts, "CUDA "+d.cuda.String())
	}
	if !d.driver.IsZero() {
		parts = append(parts, "driver "+d.driver.String())
	}
	if parts == nil {
		return ""
	}
	return " with " + strings.Join(parts, " and ")
}

// newDemand normalises a request: a gang's per-node share, one node when Nodes is unset.
// It returns a message instead when the request cannot be read as whole GPUs per node.
func newDemand(st *state, j *Job, q *Queue) (demand, string) {
	r := j.Request
	d := demand{modelName: r.GPUModel, nodes: max(r.Nodes, 1), cpus: r.CPUs, mem: r.MemoryMB, team: j.Team, project: j.Project, scope: j.Team, dur: forever}
	if j.Project != "" {
		d.scope = scopeOf(j.Team, j.Project)
	}
	if len(q.Pools) > 0 {
		d.pools, d.poolKey = q.Pools, q.Name
	}
	if j.Image != "" {
		d.image = true
		d.poolKey += imageKey
	}
	if j.TimeLimit > 0 {
		d.dur = int64(j.TimeLimit)
	}
	if r.CUDA != "" || r.Driver != "" {
		var msg string
		if d.cuda, msg = st.versionRange("CUDA", r.CUDA); msg != "" {
			return d, msg
		}
		if d.driver, msg = st.versionRange("driver", r.Driver); msg != "" {
			return d, msg
		}
		d.poolKey += "\x00cuda" + d.cuda.String() + "\x00driver" + d.driver.String()
	}
	switch {
	case r.GPUs < 0 || r.GPUsPerNode < 0 || r.CPUs < 0 || r.MemoryMB < 0 || r.GPUShare < 0 || r.GPUMemoryMB < 0:
		return d, "the request has a negative amount"
	case r.Shared() && (r.GPUShare > 0 && r.GPUMemoryMB > 0 || r.GPUShare >= MilliGPU):
		return d, "a request for a share of a GPU gives either a share below one GPU or a memory slice"
	case r.Shared() && (d.nodes > 1 || r.GPUs > 1 || r.GPUsPerNode > 1):
		return d, "a share of a GPU is one GPU on one node"
	case r.Shared():
		d.gpus, d.share, d.gmem = 1, r.GPUShare, r.GPUMemoryMB
	case d.nodes == 1:
		d.gpus = max(r.GPUs, r.GPUsPerNode)
	case r.GPUs == 0 && r.GPUsPerNode == 0:
		return d, "a job on several nodes must ask for GPUs on each"
	case r.GPUsPerNode > 0:
		d.gpus = r.GPUsPerNode
	case r.GPUs%d.nodes != 0:
		return d, fmt.Sprintf("%d GPUs do not divide evenly over %d nodes", r.GPUs, d.nodes)
	default:
		d.gpus = r.GPUs / d.nodes
	}
	model := r.GPUModel
	switch len(r.GPUModels) {
	case 0:
	case 1:
		model = r.GPUModels[0]
	default:
		d.listModels(st, r.GPUModels)
		d.orderBySpeed(st, r.Speeds)
		return d, ""
	}
	d.modelName = model
	switch m, ok := st.modelByName[model]; {
	case model == "":
		d.model = anyModel
	case ok:
		d.model = m
	default:
		d.model = noModel
	}
	return d, ""
}

// versionRange parses a job's version range, once per text and cycle. The server
// validates ranges at submit, so a message here means a snapshot built by other means.
func (st *state) versionRange(what, text string) (VersionRange, string) {
	r, ok := st.ranges[text]
	if !ok {
		var err error
		if r, err = ParseVersionRange(text); err != nil {
			return r, fmt.Sprintf("the job's %s range %v", what, err)
		}
		if st.ranges != nil {
			st.ranges[text] = r
		}
	}
	return r, ""
}

// listModels sets the demand of a job that accepts any of several models: every model
// the list leaves out is denied.
func (d *demand) listModels(st *state, models []string) {
	d.models = models
	d.modelName = strings.Join(models, " or ")
	d.model = noModel
	for _, name := range models {
		if m, ok := st.modelByName[name]; ok && !slices.Contains(d.prefer, m) {
			d.prefer = append(d.prefer, m)
			d.model = anyModel
		}
	}
	if d.model == noModel {
		return
	}
	d.deny = make([]bool, len(st.models))
	for m := range d.deny {
		d.deny[m] = !slices.Contains(d.prefer, m)
	}
}

// orderBySpeed puts the listed models fastest first, where the job's speeds say they
// differ; the list's order breaks ties.
func (d *demand) orderBySpeed(st *state, speeds map[string]float64) {
	if len(speeds) == 0 || len(d.prefer) < 2 {
		return
	}
	speed := func(m int) float64 {
		if v, ok := speeds[st.models[m].name]; ok && v > 0 {
			return v
		}
		return 1
	}
	for _, m := range d.prefer[1:] {
		if speed(m) != speed(d.prefer[0]) {
			d.bySpeed = true
		}
	}
	if d.bySpeed {
		slices.SortStableFunc(d.prefer, func(a, b int) int { return cmp.Compare(speed(b), speed(a)) })
	}
}

// shape is what makes two requests identical for the scheduler: a request that failed to
// fit is not tried again in the same cycle by a job of the same shape.
type shape struct {
	model string
	list  bool // model is a list's modelName, not one model's name
	gpus  int
	nodes int
	cpus  int
	mem   int64
	// team is the demand's scope: admin reservations and quotas depend on the team, and a
	// project's quotas can deny models, which the failed cache must not share.
	team  string
	pools string // the demand's poolKey: the queue's name when it limits the pools, the image mark
	share int
	gmem  int64
}

func (d *demand) shape() shape {
	return shape{model: d.modelName, list: d.models != nil, gpus: d.gpus, nodes: d.nodes, cpus: d.cpus, mem: d.mem, team: d.scope, pools: d.poolKey,
		share: d.share, gmem: d.gmem}
}

// capacity is a kind of node: its GPUs of one model, CPUs and memory, and how many nodes
// of the snapshot (schedulable or not) are of that kind. Clusters are built from a few
// kinds of machine, so the static check runs over a handful of kinds, not every node.
type capacity struct {
	gpus  int
	cpus  int
	mem   int64
	count int
}

// capacities lists the node kinds per model; the key "" holds, for each node, its
// largest group of one model (a job that takes any model still uses one model per node).
// Only nodes the job could run on count (demand.fitsNode): the key "" is empty when no
// such node exists.
func capacities(nodes []Node, d *demand) map[string][]capacity {
	type kind struct {
		model string
		capacity
	}
	counts := map[kind]int{}
	perModel := map[string]int{}
	for i := range nodes {
		n := &nodes[i]
		if !d.fitsNode(n) {
			continue
		}
		if single(n.GPUs) {
			// The common case, without the per-model count.
			if len(n.GPUs) > 0 {
				counts[kind{n.GPUs[0].Model, capacity{gpus: len(n.GPUs), cpus: n.CPUs, mem: n.MemoryMB}}]++
			}
			counts[kind{"", capacity{gpus: len(n.GPUs), cpus: n.CPUs, mem: n.MemoryMB}}]++
			continue
		}
		clear(perModel)
		largest := 0
		for _, g := range n.GPUs {
			perModel[g.Model]++
			largest = max(largest, perModel[g.Model])
		}
		for m, k := range perModel {
			counts[kind{m, capacity{gpus: k, cpus: n.CPUs, mem: n.MemoryMB}}]++
		}
		counts[kind{"", capacity{gpus: largest, cpus: n.CPUs, mem: n.MemoryMB}}]++
	}
	out := map[string][]capacity{}
	for k, c := range counts {
		k.count = c
		out[k.model] = append(out[k.model], k.capacity)
	}
	// Sorted, so that messages and results never depend on map order.
	for _, cs := range out {
		slices.SortFunc(cs, func(a, b capacity) int {
			return cmp.Or(cmp.Compare(b.gpus, a.gpus), cmp.Compare(b.cpus, a.cpus), cmp.Compare(b.mem, a.mem))
		})
	}
	return out
}

// single reports whether all GPUs are of one model.
func single(gpus []GPU) bool {
	for i := 1; i < len(gpus); i++ {
		if gpus[i].Model != gpus[0].Model {
			return false
		}
	}
	return true
}

// neverFits is the static chain over every kind of node, schedulable or not: model, then
// GPU count, then CPUs, then memory, then the number of such nodes a gang needs. It
// returns "" when some node could run the request one day, else a sentence naming the
// constraint no node meets.
func neverFits(kinds map[string][]capacity, d *demand) string {
	if d.image && len(kinds[""]) == 0 {
		return noRuntime
	}
	var (
		largest, maxCPUs int
		maxMem           int64
		// enough counts the nodes with everything the request needs on one node, of the
		// listed model that has most of them: a gang runs on one model.
		enough int
		found  int // kinds of node with GPUs of the model (of a listed one)
	)
	for _, c := range kinds[""] {
		maxCPUs = max(maxCPUs, c.cpus)
		maxMem = max(maxMem, c.mem)
	}
	models := d.models
	if models == nil {
		models = []string{d.modelName}
	}
	for _, m := range models {
		n := 0
		for _, c := range kinds[m] {
			largest = max(largest, c.gpus)
			if c.gpus >= d.gpus && c.cpus >= d.cpus && c.mem >= d.mem {
				n += c.count
			}
		}
		found += len(kinds[m])
		enough = max(enough, n)
	}
	switch {
	case d.gpus > 0 && found == 0:
		return fmt.Sprintf("no node has GPUs of model %s", d.modelName)
	case d.gpus > largest:
		return fmt.Sprintf("no node has %s; the largest has %d", gpusOf(d.gpus, "", d.modelName), largest)
	case d.cpus > maxCPUs:
		return fmt.Sprintf("no node has %d CPUs; the largest has %d", d.cpus, maxCPUs)
	case d.mem > maxMem:
		return fmt.Sprintf("no node has %d MB of memory; the largest has %d MB", d.mem, maxMem)
	case enough == 0:
		return fmt.Sprintf("no node has %s, %d CPUs and %d MB of memory together", gpusOf(d.gpus, "", d.modelName), d.cpus, d.mem)
	case enough < d.nodes:
		return fmt.Sprintf("the job needs %d nodes with %s each; there are %d", d.nodes, gpusOf(d.gpus, "", d.modelName), enough)
	}
	return ""
}

// whereNote names what the job needs of a node beyond GPUs, CPUs and memory, for
// messages: " with a container runtime", " with CUDA >=12.4", or both; "" for none.
func (d *demand) whereNote() string {
	s := ""
	if d.image {
		s = " with a container runtime"
	}
	if note := d.versionNote(); note != "" {
		if s != "" {
			note = " and" + strings.TrimPrefix(note, " with")
		}
		s += note
	}
	return s
}

// versionMismatch is the static answer for a job whose version constraints no node it
// could otherwise use satisfies (schedulable or not), naming what the nodes report, e.g.
// "needs CUDA >=12.4; nodes report 12.2 (4 nodes)". It is "" when some node satisfies
// them, or when no node could run the job anyway (the other checks say why).
func versionMismatch(nodes []Node, d *demand) string {
	if !d.versioned() {
		return ""
	}
	var others []*Node
	for i := range nodes {
		n := &nodes[i]
		if inPoolsNode(n, d.pools) && (!d.image || n.ContainerRuntime != "") {
			if d.versionsFit(n) {
				return ""
			}
			others = append(others, n)
		}
	}
	if len(others) == 0 {
		return ""
	}
	where := "nodes"
	if d.image {
		where += " with a container runtime"
	}
	if d.pools != nil {
		where += " in pools " + strings.Join(d.pools, ", ")
	}
	cudaOK := slices.ContainsFunc(others, func(n *Node) bool { return d.cuda.Match(n.CUDAVersion) })
	driverOK := slices.ContainsFunc(others, func(n *Node) bool { return d.driver.Match(n.DriverVersion) })
	switch {
	case !cudaOK:
		return fmt.Sprintf("needs CUDA %s; %s report %s", d.cuda, where, reportedVersions(others, func(n *Node) string { return n.CUDAVersion }))
	case !driverOK:
		return fmt.Sprintf("needs driver %s; %s report %s", d.driver, where, reportedVersions(others, func(n *Node) string { return n.DriverVersion }))
	}
	return fmt.Sprintf("needs CUDA %s and driver %s on one node; no node reports both (%s report CUDA %s; driver %s)", d.cuda, d.driver, where,
		reportedVersions(others, func(n *Node) string { return n.CUDAVersion }), reportedVersions(others, func(n *Node) string { return n.DriverVersion }))
}

// reportedVersions lists the versions nodes report with how many report each, most
// first, e.g. "12.2 (4 nodes), 12.1 (1 node)"; at most four, then how many more.
func reportedVersions(nodes []*Node, of func(*Node) string) string {
	counts := map[string]int{}
	for _, n := range nodes {
		counts[of(n)]++
	}
	vs := make([]string, 0, len(counts))
	for v := range counts {
		vs = append(vs, v)
	}
	slices.SortFunc(vs, func(a, b string) int { return cmp.Or(cmp.Compare(counts[b], counts[a]), cmp.Compare(a, b)) })
	const named = 4
	parts := make([]string, 0, named+1)
	for i, v := range vs {
		if i == named {
			parts = append(parts, fmt.Sprintf("%d more versions", len(vs)-named))
			break
		}
		name := v
		if v == "" {
			name = "no version"
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", name, plural(counts[v], "node")))
	}
	return strings.Join(parts, ", ")
}

// noRuntime is the static answer for an image job where no node has a container runtime.
const noRuntime = "no node has a container runtime for image jobs"

// gpusOf names n GPUs of a model for messages, e.g. "4 GPUs of model H100"; free is
// put before the noun when given.
func gpusOf(n int, free, model string) string {
	s := fmt.Sprintf("%d %sGPUs", n, free)
	if n == 1 {
		s = s[:len(s)-1]
	}
	if model != "" {
		s += " of model " + model
	}
	return s
}

// cand is a node, and the GPU group on it (-1 for a CPU-only job), that the index offers.
type cand struct{ node, group int }

// nodeCheck is one link of the feasibility chain run on every candidate the bucket index
// yields. The index has already settled the first links of the chain: only schedulable
// nodes are indexed (state), only groups of the requested model are searched (model),
// and only buckets with at least the requested free GPUs (capacity, free GPUs). lack
// returns what the candidate is short of, zero when it passes.
type nodeCheck struct {
	name string
	lack func(st *state, c cand, d *demand) int64
}

// The chain, cheapest first: the pool is a label lookup and the container runtime a
// field test, and the versions a few number comparisons, all ruling a node out for good;
// CPUs and memory are comparisons; administrative windows are a short list per node; the
// backfill check walks the node's future events.
var candidateChain = [...]nodeCheck{
	{"pool", func(st *state, c cand, d *demand) int64 {
		if st.inPools(c.node, d) {
			return 0
		}
		return 1
	}},
	// A job with an image runs only through a container runtime: "no container runtime".
	{"runtime", func(st *state, c cand, d *demand) int64 {
		if !d.image || st.nodes[c.node].n.ContainerRuntime != "" {
			return 0
		}
		return 1
	}},
	// A job that constrains versions runs only where the node reports versions it accepts.
	{"versions", func(st *state, c cand, d *demand) int64 {
		if d.versionsFit(st.nodes[c.node].n) {
			return 0
		}
		return 1
	}},
	{"cpus", func(st *state, c cand, d *demand) int64 {
		return max(0, int64(d.cpus-st.nodes[c.node].freeCPU))
	}},
	{"memory_mb", func(st *state, c cand, d *demand) int64 {
		return max(0, d.mem-st.nodes[c.node].freeMem)
	}},
	// A window held for another team blocks the node unless the job ends before it opens.
	{"reservation", func(st *state, c cand, d *demand) int64 {
		if st.foreignWindow(c.node, d, st.now) {
			return 1
		}
		return 0
	}},
	// GPUs held by count for another team: the job may take them only while enough stay
	// free for that team, or if it ends before the window opens.
	{"held", func(st *state, c cand, d *demand) int64 {
		if st.held(c, d, st.now) {
			return 1
		}
		return 0
	}},
	// Higher jobs' backfill reservations: the job may take what they need only if it
	// gives it back before they start (EASY backfill).
	{"backfill", func(st *state, c cand, d *demand) int64 {
		if st.delaysReservation(c, d) {
			return 1
		}
		return 0
	}},
}

const (
	checkPool = iota
	checkRuntime
	checkVersions
	checkCPUs
	checkMemory
	checkWindow
	checkHold
	checkBackfill
	numChecks
)

// diag records what the chain rejected, for the reason.
type diag struct {
	rejected [numChecks]int
	first    [numChecks]cand // first candidate each check rejected (best-fit order)
	// gangFound is, for a gang, the most feasible nodes one model and driver offered.
	gangFound int
}

// passes runs the chain on one candidate, recording the first check that fails.
func (st *state) passes(c cand, d *demand, dg *diag) bool {
	for i := range candidateChain {
		if candidateChain[i].lack(st, c, d) > 0 {
			if dg.rejected[i] == 0 {
				dg.first[i] = c
			}
			dg.rejected[i]++
			return false
		}
	}
	return true
}

// inPools reports whether node ni belongs to one of the job's pools.
func (st *state) inPools(ni int, d *demand) bool {
	return inPoolsNode(st.nodes[ni].n, d.pools)
}

// eligible reports whether node ni may run the job at all, whatever is free (see
// demand.fitsNode).
func (st *state) eligible(ni int, d *demand) bool {
	return d.fitsNode(st.nodes[ni].n)
}

// inPoolsNode is inPools for a node of the snapshot, schedulable or not: a job whose
// queue names no pools may use every node outside the exclusive pools.
func inPoolsNode(n *Node, pools []string) bool {
	if pools == nil {
		return !n.ExclusivePool
	}
	return slices.Contains(pools, n.Labels["pool"])
}

// foreignWindow reports whether an administrative window for another team overlaps the
// job's run if it starts at start on node ni.
func (st *state) foreignWindow(ni int, d *demand, start int64) bool {
	end := addSat(start, d.dur)
	for _, w := range st.nodes[ni].windows {
		if w.blocks(d.team) && w.start < end && start < w.end {
			return true
		}
	}
	return false
}

// delaysReservation reports whether starting the job now on the candidate would leave a
// later backfill reservation on the node short: what is free must cover the job at every
// moment of its run, reservations included.
func (st *state) delaysReservation(c cand, d *demand) bool {
	ns := &st.nodes[c.node]
	if ns.reserved == 0 {
		return false // what is free only grows, and it covers the job now
	}
	g := 0
	if c.group >= 0 {
		g = st.groups[c.group].nfree
	}
	cpus, mem := ns.freeCPU, ns.freeMem
	end := addSat(st.now, d.dur)
	for i := 0; i < len(ns.events) && ns.events[i].at < end; {
		at := ns.events[i].at
		for ; i < len(ns.events) && ns.events[i].at == at; i++ {
			e := &ns.events[i]
			if e.group == c.group && e.group >= 0 {
				g += e.gpus
			}
			cpus += e.cpus
			mem += e.mem
		}
		if g < d.gpus || cpus < d.cpus || mem < d.mem {
			return true
		}
	}
	return false
}

// findNode returns the best candidate for a single-node job that can start now, searching
// the buckets in placement order and running the chain on each candidate.
func (st *state) findNode(d *demand, worst bool, dg *diag) (cand, bool) {
	if d.model == noModel && d.gpus > 0 {
		return cand{}, false
	}
	if d.restricted() {
		// The buckets span all nodes. For a small pool (or few nodes with a container
		// runtime), walking its own nodes beats walking the buckets past all the others.
		if nodes := st.poolNodes(d); len(nodes)*4 < len(st.nodes) {
			return st.findInPool(nodes, d, worst, dg)
		}
	}
	if d.gpus == 0 {
		return st.findCPUOnly(d, worst, dg)
	}
	lo, hi := d.gpus, 0
	for m := range st.models {
		if d.takes(m) {
			hi = max(hi, st.models[m].maxCap)
		}
	}
	if d.bySpeed {
		// The fastest listed model that can start the job, at its best fit.
		for _, m := range d.prefer {
			if !d.takes(m) {
				continue
			}
			for step := 0; step <= hi-lo; step++ {
				k := lo + step
				if worst {
					k = hi - step
				}
				if gi := st.firstIn(m, k, d, dg, -1); gi >= 0 {
					return cand{st.groups[gi].node, gi}, true
				}
			}
		}
		return cand{}, false
	}
	for step := 0; step <= hi-lo; step++ {
		k := lo + step // best fit: fewest free GPUs first
		if worst {
			k = hi - step
		}
		best := -1
		if d.prefer != nil {
			// A list: at equal fit, the first listed model that has a candidate.
			for _, m := range d.prefer {
				if d.takes(m) {
					if best = st.firstIn(m, k, d, dg, -1); best >= 0 {
						break
					}
				}
			}
		} else {
			for m := range st.models {
				if d.takes(m) {
					if gi := st.firstIn(m, k, d, dg, best); gi >= 0 {
						best = gi
					}
				}
			}
		}
		if best >= 0 {
			return cand{st.groups[best].node, best}, true
		}
	}
	return cand{}, false
}

// firstIn returns the first group, in name order, of model m with k free GPUs that passes
// the chain, looking only below group below when that is not negative; -1 when none.
func (st *state) firstIn(m, k int, d *demand, dg *diag, below int) int {
	mi := &st.models[m]
	if k >= len(mi.buckets) || mi.counts[k] == 0 {
		return -1
	}
	b := mi.buckets[k]
	for gi := b.next(0); gi >= 0 && (below < 0 || gi < below); gi = b.next(gi + 1) {
		if st.passes(cand{st.groups[gi].node, gi}, d, dg) {
			return gi
		}
	}
	return -1
}

// poolNodes lists, in name order, the schedulable nodes eligible for the job: those of
// its pools, with a container runtime for an image job.
func (st *state) poolNodes(d *demand) []int {
	if nodes, ok := st.pools[d.poolKey]; ok {
		return nodes
	}
	var nodes []int
	for ni := range st.nodes {
		if st.eligible(ni, d) {
			nodes = append(nodes, ni)
		}
	}
	st.pools[d.poolKey] = nodes
	return nodes
}

// findInPool is findNode over a list of nodes: the candidates with enough free GPUs, in
// placement order (free GPUs left, then name), each run through the chain.
func (st *state) findInPool(nodes []int, d *demand, worst bool, dg *diag) (cand, bool) {
	type option struct {
		c    cand
		free int
		rank int // of the group's model in the job's list
	}
	var opts []option
	for _, ni := range nodes {
		if d.gpus == 0 {
			opts = append(opts, option{cand{ni, -1}, st.nodes[ni].freeGPUs, 0})
			continue
		}
		for _, gi := range st.nodes[ni].groups {
			if g := &st.groups[gi]; d.takes(g.model) && g.nfree >= d.gpus {
				opts = append(opts, option{cand{ni, gi}, g.nfree, d.rank(g.model)})
			}
		}
	}
	slices.SortStableFunc(opts, func(a, b option) int {
		if d.bySpeed {
			fit := cmp.Compare(a.free, b.free)
			if worst {
				fit = -fit
			}
			return cmp.Or(cmp.Compare(a.rank, b.rank), fit)
		}
		if worst {
			return cmp.Or(cmp.Compare(b.free, a.free), cmp.Compare(a.rank, b.rank))
		}
		return cmp.Or(cmp.Compare(a.free, b.free), cmp.Compare(a.rank, b.rank))
	})
	for _, o := range opts {
		if st.passes(o.c, d, dg) {
			return o.c, true
		}
	}
	return cand{}, false
}

// findCPUOnly places a job without GPUs on the node with the fewest free GPUs (so that it
// does not take CPUs a GPU job will need), or the most under worst fit.
func (st *state) findCPUOnly(d *demand, worst bool, dg *diag) (cand, bool) {
	hi := len(st.nodeBuckets) - 1
	for step := 0; step <= hi; step++ {
		k := step
		if worst {
			k = hi - step
		}
		b := st.nodeBuckets[k]
		for ni := b.next(0); ni >= 0; ni = b.next(ni + 1) {
			if st.passes(cand{ni, -1}, d, dg) {
				return cand{ni, -1}, true
			}
		}
	}
	return cand{}, false
}
