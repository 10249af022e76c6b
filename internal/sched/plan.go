package sched

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Schedule decides, for the snapshot at time now, which pending jobs start where, and why
// the others wait, under the default policy. (The contract's "Plan(snapshot, now)": Go
// does not let a function share the name of the Plan type.)
func Schedule(s *Snapshot, now time.Time) Plan {
	p, _ := ScheduleWith(s, now, Options{}) // the zero Options are always valid
	return p
}

// ScheduleWith is Schedule under the given policy. It fails only for unknown names in opts.
func ScheduleWith(s *Snapshot, now time.Time, opts Options) (Plan, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return Plan{}, err
	}
	return newCycle(s, now, opts, newState(s, now.UnixNano()), nil).run(), nil
}

// Planner schedules the same nodes many times, as the simulator and the server do: it keeps
// what a cycle derives from the nodes alone (their order, GPU groups and indexes) from one
// call to the next while Snapshot.NodesVersion stays the same, so a cycle costs what its
// jobs cost rather than what the cluster's size costs; and it keeps what a cycle derives
// from each pending job's request alone (memos) while the request stays the same, so a
// long queue is not worked out afresh at every call. It also reuses the previous cycle's
// buffers, so a Planner is not safe for concurrent use, and a plan's Placements, Pending
// and Reservations lists are overwritten by the next call: a caller that keeps one copies
// it. Its plans are those of ScheduleWith.
type Planner struct {
	opts    Options
	version uint64
	base    *state
	// last is the previous cycle's state, cloned from base; the next clone reuses its
	// memory. Plans never point into it.
	last *state
	// orderBuf is the previous cycle's ordering arrays, for the same reason.
	orderBuf orderBuf
	// buf is the previous cycle's plan arrays and caches, which the next cycle empties and
	// reuses: with a long queue they are most of what a cycle allocates, and collecting
	// them most of what a replay costs.
	buf cycleBuf
}

// cycleBuf holds what a cycle builds afresh each time, for a Planner to lend the next
// cycle. The plan's lists are emptied, not cleared: what they point to belongs to the
// previous plan, whose caller may still hold it.
type cycleBuf struct {
	placements   []Placement
	pending      []PendingJob
	reservations []JobReservation
	// resNodes holds the node names of all the plan's reservations, each reservation a
	// slice of it.
	resNodes       []string
	never          map[shape]string
	shortages      map[shortageKey]shortageEntry
	blockedByModel map[string]int
	// memos outlive the cycle, unlike the rest: a Planner drops them only when the node
	// layout changes.
	memos *memos
}

// reset empties the buffer for a cycle of s, making the maps that are missing.
func (b *cycleBuf) reset(s *Snapshot, st *state) {
	if n := min(len(s.Pending), st.totalGPUs+len(st.nodes)); b.placements == nil {
		b.placements = make([]Placement, 0, n) // never nil, even when empty
	} else {
		b.placements = slices.Grow(b.placements[:0], n)
	}
	b.pending = slices.Grow(b.pending[:0], len(s.Pending))
	b.reservations = b.reservations[:0]
	b.resNodes = b.resNodes[:0]
	if b.memos == nil {
		b.memos = newMemos(len(s.Pending), true)
	}
	if b.never == nil {
		b.never, b.shortages, b.blockedByModel = map[shape]string{}, map[shortageKey]shortageEntry{}, map[string]int{}
		return
	}
	clear(b.never)
	clear(b.shortages)
	clear(b.blockedByModel)
}

// NewPlanner returns a planner for the policy opts.
func NewPlanner(opts Options) (*Planner, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Planner{opts: opts}, nil
}

// Schedule plans one cycle. A snapshot whose NodesVersion is zero, or differs from the
// previous call's, rebuilds the node layout.
func (p *Planner) Schedule(s *Snapshot, now time.Time) Plan {
	if s.NodesVersion == 0 || s.NodesVersion != p.version || p.base == nil {
		p.base, p.version, p.last = newBase(s), s.NodesVersion, nil
		p.buf.memos = nil // a demand names models by their numbers in the layout
	}
	st := p.base.clone(s, now.UnixNano(), p.last)
	p.last = st
	st.finish(s.Running)
	c := newCycle(s, now, p.opts, st, &p.buf)
	c.orderBuf = &p.orderBuf
	plan := c.run()
	p.orderBuf.release()
	return plan
}

// run is one scheduling cycle.
func (c *cycle) run() Plan {
	// 1. Order the pending jobs: the order is the policy's first word.
	c.memos.begin()
	jobs := order(c.s, c.st, &c.opts, c.st.now, c.orderBuf, c.memos)
	// 2. Serve them one by one: each placement changes what the next job finds, and each
	//    blocked job's reservation bounds what the jobs below it may take.
	for _, r := range jobs {
		c.schedule(r)
	}
	c.memos.end()
	// 3. Under LAS, say when the queues shift with nothing else happening.
	c.plan.Recheck = c.recheck()
	// The lists may have grown: the next cycle reuses the larger arrays.
	c.buf.placements, c.buf.pending, c.buf.reservations = c.plan.Placements, c.plan.Pending, c.plan.Reservations
	if len(c.plan.Reservations) == 0 {
		c.plan.Reservations = nil // as a plan without the buffer has it
	}
	return c.plan
}

// cycle is one run of Schedule: the state it changes and what it has decided so far.
type cycle struct {
	s    *Snapshot
	opts Options
	st   *state
	plan Plan
	// never caches the static check per request (team left out): the sentence saying
	// why no node could ever run it, or "" when some node could.
	never map[shape]string
	// kinds holds the node kinds for the static check, per pool restriction (the
	// pools and the queue's name, "" for all nodes), built on first use.
	kinds map[string]map[string][]capacity
	// quotas tracks team usage for admission.
	quotas *quotas
	// users counts GPUs per user in queues with a per-user cap; nil without such queues.
	users map[userKey]int
	pre   *preemptor // built on first use
	// claims are the snapshot's claims this cycle honours, by claimant; nil without any.
	// claimed maps each claimed GPU (its place in state.frees) to its claimant, for the
	// snapshot's claims and those made in this cycle; nil without any. holding lists the
	// parts of both kinds that hold GPUs others would find free, for reasons.
	claims  map[int64]*claim
	claimed map[int]int64
	holding []holding
	// shortages caches gpuShortage answers while free GPU counts stay the same.
	shortages map[shortageKey]shortageEntry
	loc       *time.Location
	// memos holds each job's demand and the requests that did not fit now, by shape
	// (memos.failed): the shortest duration that failed (a longer run is no easier to
	// fit) and the reason found then, which the later identical jobs share.
	memos *memos
	// Jobs so far left waiting for resources, for the Ahead count of the later ones.
	blockedByModel map[string]int // jobs that name one model
	// blockedLists counts the jobs that list several models, by their modelName.
	blockedLists  map[string]*blockedList
	blockedAnyGPU int // GPU jobs that take any model
	blockedGPU    int // all GPU jobs
	blockedCPU    int // CPU-only jobs
	reservations  int
	// head is the first job left waiting for resources: under Options.NoBackfill no job
	// behind it starts. Zero while none waits.
	head int64
	// demand is the copy of the job's demand that admission may change (see schedule).
	demand demand
	// orderBuf lends order its arrays from a Planner's previous cycle; nil: fresh ones.
	orderBuf *orderBuf
	// buf holds the arrays the plan's lists start from, and the reservations' node names.
	buf *cycleBuf
	// noCache makes every job search afresh; tests use it to check the cache changes
	// nothing.
	noCache bool
	// sharePlacer places shared requests, chosen on first use from the options;
	// shareView is its view of one node, reused node after node.
	sharePlacer sharePlacer
	shareView   shareView
	// blockedShared counts the shared requests left waiting.
	blockedShared int
}

type failure struct {
	dur    int64
	reason Reason
}

// newCycle starts a cycle; its plan's lists and its caches reuse what buf holds.
func newCycle(s *Snapshot, now time.Time, opts Options, st *state, buf *cycleBuf) *cycle {
	st.addWindows(s.Reservations, s.Maintenance)
	if buf == nil {
		buf = &cycleBuf{memos: newMemos(len(s.Pending), false)}
	}
	buf.reset(s, st)
	c := &cycle{
		s: s, opts: opts, st: st,
		plan: Plan{
			Placements:   buf.placements,
			Pending:      buf.pending,
			Reservations: buf.reservations,
		},
		buf:            buf,
		never:          buf.never,
		kinds:          st.kinds,
		memos:          buf.memos,
		blockedByModel: buf.blockedByModel,
		quotas:         newQuotas(s, st),
		users:          userGPUs(s),
		shortages:      buf.shortages,
		loc:            now.Location(),
	}
	// Claims go before any job is served: what they hold is no one else's, whatever the
	// order. After the windows, which can break a claim.
	if len(s.Claims) > 0 {
		c.applyClaims()
	}
	// Holds by GPU count last: what running jobs and claims hold is not free for them.
	st.addHolds(s.Reservations, s.Running)
	return c
}

// schedule runs one job through the pipeline of DESIGN.md, in order. Holds (dependencies,
// begin time, user hold) are settled by the caller: held jobs are not pending.
func (c *cycle) schedule(r *ranked) {
	j := r.job
	pj := PendingJob{JobID: j.ID, Priority: r.prio}
	// 1. The queue must exist: it gives the tier, the pools and the preemption rules.
	if !r.hasQueue {
		pj.Reason = Reason{Code: ReasonNoQueue}
		if !c.opts.Terse {
			pj.Reason.Message = fmt.Sprintf("queue %q does not exist", j.Queue)
		}
		c.plan.Pending = append(c.plan.Pending, pj)
		return
	}
	// 2. The request must make sense and fit some node one day (static feasibility).
	// The demand is the job's memo, read, not changed: admission may deny a job that takes
	// any model some models for this cycle alone, and works on the cycle's copy then.
	m := c.memos.memo(c.st, r)
	d := &m.d
	if c.quotas.teams != nil && d.gpus > 0 && (d.model == anyModel || d.models != nil) {
		c.demand = m.d
		c.demand.deny = slices.Clone(d.deny)
		d = &c.demand
	}
	bad := m.bad
	// An identical request that failed to fit earlier in this cycle passed this check;
	// looked up once here, it serves step 4 too.
	f := c.memos.lookupFailed(m)
	failedBefore := f != nil
	if bad == "" && !failedBefore {
		if d.shared() {
			bad = c.neverShared(d)
		} else {
			bad = c.neverFits(d)
		}
	}
	if bad != "" {
		pj.Reason = Reason{Code: ReasonNoNodeMatches}
		if !c.opts.Terse {
			pj.Reason.Message = bad
		}
		c.plan.Pending = append(c.plan.Pending, pj)
		return
	}

	// 3. Admission: a job that would take its user beyond the queue's cap, or its team
	// beyond its quota limit, waits without counting as blocked, since the resources it
	// wants are no concern of the jobs below.
	if reason, over := c.userLimit(j, r.queue, c.milliOf(d)); over {
		pj.Reason = reason
		c.plan.Pending = append(c.plan.Pending, pj)
		return
	}
	v, ok := c.admitDemand(d)
	if !ok {
		pj.Reason = c.quotaReason(j.Team, v, d)
		c.plan.Pending = append(c.plan.Pending, pj)
		return
	}

	// Strict order: nothing starts behind a job that waits for resources.
	if c.opts.NoBackfill && c.head != 0 {
		c.behindHead(pj, d)
		return
	}

	// 4. Placement now. A job that holds a claim goes on it or waits for its victims: it
	// needs no search and must not choose new victims. Others search, unless an identical
	// request already failed in this cycle.
	if c.claims != nil {
		if k := c.claims[j.ID]; k != nil {
			c.serveClaim(j, pj, d, k)
			return
		}
	}
	inQuota := v.inQuota()
	if failedBefore && d.dur >= f.dur && !c.noCache {
		c.wait(r, pj, d, f.reason, inQuota)
		return
	}
	var dg diag
	worst := c.opts.Placement == PlacementWorstFit
	if d.shared() {
		if spot, ok := c.findShared(d, &dg); ok {
			c.placeShared(j, d, spot)
			return
		}
		reason := c.shareReason(d, &dg)
		if !failedBefore || d.dur < f.dur {
			c.memos.setFailed(m, failure{dur: d.dur, reason: reason})
		}
		c.wait(r, pj, d, reason, inQuota)
		return
	}
	if d.nodes == 1 {
		if cd, ok := c.st.findNode(d, worst, &dg); ok {
			c.placeSingle(j, d, cd)
			return
		}
	} else if cds, ok := c.st.findGang(d, worst, &dg); ok {
		c.placeGang(j, d, cds)
		return
	}
	// 5. It waits: explain why, then preempt or reserve (wait).
	reason := c.reason(d, &dg)
	if !failedBefore || d.dur < f.dur {
		c.memos.setFailed(m, failure{dur: d.dur, reason: reason})
	}
	c.wait(r, pj, d, reason, inQuota)
}

// neverFits is the static check, cached per request.
func (c *cycle) neverFits(d *demand) string {
	key := d.shape()
	key.team = ""
	msg, ok := c.never[key]
	if !ok {
		// The kinds outlive the cycle in a Planner, while a queue of the same name may
		// name other pools in the next snapshot: the key names the pools themselves.
		kindsKey := d.poolKey
		if d.pools != nil {
			kindsKey = strings.Join(d.pools, "\x00") + "\x00\x00" + d.poolKey
		}
		kinds, ok := c.kinds[kindsKey]
		if !ok {
			kinds = capacities(c.s.Nodes, d)
			c.kinds[kindsKey] = kinds
		}
		// Versions first: a job no node reports the versions for is told so, whatever
		// else it asks; the sentence names the pools itself.
		msg = versionMismatch(c.s.Nodes, d)
		if msg == "" {
			msg = neverFits(kinds, d)
			if msg != "" && msg != noRuntime && (d.image || d.versioned()) {
				msg += " among the nodes" + d.whereNote()
			}
			if msg != "" && d.pools != nil {
				msg += " in pools " + strings.Join(d.pools, ", ")
			}
		}
		if msg != "" {
			msg += c.exclusiveNote(d)
		}
		c.never[key] = msg
	}
	return msg
}

// exclusiveNote names the exclusive pools a job may not use, and the queues they are
// kept for, e.g. "; pool inference is reserved for queue inference"; "" when there are
// none.
func (c *cycle) exclusiveNote(d *demand) string {
	var pools []string
	for i := range c.s.Nodes {
		n := &c.s.Nodes[i]
		if p := n.Labels["pool"]; n.ExclusivePool && !slices.Contains(d.pools, p) && !slices.Contains(pools, p) {
			pools = append(pools, p)
		}
	}
	slices.Sort(pools)
	var notes []string
	for _, p := range pools {
		var queues []string
		for name, q := range c.s.Queues {
			if slices.Contains(q.Pools, p) {
				queues = append(queues, name)
			}
		}
		slices.Sort(queues)
		switch len(queues) {
		case 0:
			notes = append(notes, "pool "+p+" is reserved, and no queue names it")
		case 1:
			notes = append(notes, "pool "+p+" is reserved for queue "+queues[0])
		default:
			notes = append(notes, "pool "+p+" is reserved for queues "+strings.Join(queues, ", "))
		}
	}
	if notes == nil {
		return ""
	}
	return "; " + strings.Join(notes, "; ")
}

// placeSingle gives a single-node job its GPUs on the chosen candidate.
func (c *cycle) placeSingle(j *Job, d *demand, cd cand) {
	st := c.st
	alloc := Alloc{Node: st.nodes[cd.node].n.Name, CPUs: d.cpus, MemoryMB: d.mem}
	var positions []int
	if cd.group >= 0 {
		positions = st.pickGPUs(cd.group, d.gpus)
		alloc.GPUIndices = make([]int, len(positions))
		for i, p := range positions {
			alloc.GPUIndices[i] = st.groups[cd.group].index[p]
		}
	}
	st.take(cd.node, cd.group, positions, d.cpus, d.mem)
	st.release(cd, len(positions), d)
	if len(st.holds) > 0 && cd.group >= 0 {
		st.useHolds(cd.group, len(positions), d.team, st.now, addSat(st.now, d.dur), true)
	}
	pl := Placement{JobID: j.ID, Allocs: []Alloc{alloc}}
	pl.Borrowing, pl.BorrowingInTeam = c.charge(j, d, cd.group, d.gpus*d.nodes*MilliGPU)
	c.plan.Placements = append(c.plan.Placements, pl)
}

// at turns a cycle time back into a time.Time in the caller's location.
func (c *cycle) at(t int64) time.Time { return time.Unix(0, t).In(c.loc) }

// charge counts a placed job's milli-GPUs against its user's cap and its team's and
// project's quotas, and its CPUs and memory against their caps, and reports whether it
// borrows across teams, or inside its team.
func (c *cycle) charge(j *Job, d *demand, gi int, milli int) (borrowing, inTeam bool) {
	if c.quotas.compute {
		c.quotas.add(d.team, d.project, cpuKey, d.cpus*d.nodes)
		c.quotas.add(d.team, d.project, memKey, int(d.mem)*d.nodes)
	}
	if gi < 0 {
		return false, false
	}
	if c.users != nil {
		c.users[userKey{j.Queue, j.User}] += milli
	}
	if c.quotas.teams == nil {
		return false, false
	}
	model := c.st.models[c.st.groups[gi].model].name
	v := c.quotas.admit(d.team, d.project, model, milli)
	c.quotas.add(d.team, d.project, model, milli)
	return v.borrowing, v.inTeam
}

// wait records why a job stays pending. The first in line for its resources may preempt;
// otherwise, while reservations remain, it reserves its earliest start so that lower jobs
// cannot delay it.
func (c *cycle) wait(r *ranked, pj PendingJob, d *demand, reason Reason, inQuota bool) {
	pj.Reason = reason
	if d.shared() {
		c.waitShared(pj)
		return
	}
	ahead := c.ahead(d)
	// Only the first in line for these resources preempts: GPUs freed for a job behind
	// blocked higher ones would go to them in the next cycle, and it would preempt again.
	if ahead == 0 && pj.Reason.Code != ReasonPriority {
		if ids, nodes, ok := c.preempt(r, d, inQuota); ok {
			// Not counted as blocked: its resources are on their way, and the jobs
			// below may still use everything else.
			pj.Reason = c.waitingReason(ids, nodes)
			c.plan.Pending = append(c.plan.Pending, pj)
			return
		}
	}
	switch pj.Reason.Code {
	case ReasonPriority:
		// The job fits now but only by delaying reserved higher jobs.
		pj.Reason.Ahead = max(ahead, 1)
		if !c.opts.Terse {
			pj.Reason.Message = aheadMessage(pj.Reason.Ahead, "; starting now on "+pj.Reason.BestNode+" would delay their reserved start")
		}
	case ReasonResources, ReasonFragmented:
		if ahead > 0 {
			pj.Reason.Code = ReasonPriority
			pj.Reason.Ahead = ahead
			pj.Reason.Message = ""
			if !c.opts.Terse {
				pj.Reason.Message = aheadMessage(ahead, ", waiting for the same resources")
			}
		}
	}
	if c.opts.ReservationDepth > 0 && c.reservations < c.opts.ReservationDepth {
		var cds []cand
		t := int64(forever)
		// An identical request found no start since the state last changed: neither will this.
		if c.noCache || !c.st.neverStarts(d) {
			if d.nodes == 1 {
				var cd cand
				if cd, t = c.st.earliestSingle(d); t != forever {
					cds = []cand{cd}
				}
			} else {
				cds, t = c.st.earliestGang(d)
			}
			if t == forever {
				c.st.noteNeverStarts(d)
			}
		}
		if t != forever {
			res := JobReservation{JobID: pj.JobID, Start: c.at(t)}
			first := len(c.buf.resNodes)
			for _, cd := range cds {
				c.st.reserve(cd, d, t)
				c.buf.resNodes = append(c.buf.resNodes, c.st.nodes[cd.node].n.Name)
			}
			if n := len(c.buf.resNodes); n > first {
				res.Nodes = c.buf.resNodes[first:n:n]
			}
			c.reservations++
			pj.EstimatedStart = res.Start
			if end := addSat(t, d.dur); end != forever {
				res.End = c.at(end)
			}
			c.plan.Reservations = append(c.plan.Reservations, res)
		}
	}
	c.block(d)
	if c.head == 0 {
		c.head = pj.JobID
	}
	c.plan.Pending = append(c.plan.Pending, pj)
}

// waitShared records why a shared request waits. It neither preempts nor reserves, and
// competes only with the shared requests above it: whole-GPU jobs never wait for it.
func (c *cycle) waitShared(pj PendingJob) {
	if pj.Reason.Code == ReasonPriority {
		pj.Reason.Ahead = max(c.blockedGPU, 1)
		if !c.opts.Terse {
			pj.Reason.Message = fmt.Sprintf("the GPUs with room, first on %s, would be held past the reserved start of higher-priority jobs",
				pj.Reason.BestNode)
		}
	}
	if ahead := c.blockedShared; ahead > 0 && (pj.Reason.Code == ReasonResources || pj.Reason.Code == ReasonFragmented) {
		pj.Reason.Ahead = ahead
		if !c.opts.Terse {
			pj.Reason.Message += fmt.Sprintf("; %s for a share of a GPU %s ahead", plural(ahead, "job"), isAre(ahead))
		}
	}
	c.blockedShared++
	if c.head == 0 {
		c.head = pj.JobID
	}
	c.plan.Pending = append(c.plan.Pending, pj)
}

// behindHead leaves a job waiting behind the head of a strict order (Options.NoBackfill),
// whether or not it would fit.
func (c *cycle) behindHead(pj PendingJob, d *demand) {
	ahead := c.blockedGPU + c.blockedCPU
	pj.Reason = Reason{Code: ReasonPriority, Ahead: ahead}
	if !c.opts.Terse {
		pj.Reason.Message = fmt.Sprintf("%s of higher priority %s ahead; in strict order nothing starts behind job %d, which waits for resources",
			plural(ahead, "job"), isAre(ahead), c.head)
	}
	c.block(d)
	c.plan.Pending = append(c.plan.Pending, pj)
}

// blockedList counts the blocked jobs that list the same models.
type blockedList struct {
	models []string
	jobs   int
}

// ahead counts the jobs already left waiting that compete with d: GPU jobs that may use a
// model d may use (of any model, of one of d's, listing one of d's), or CPU-only jobs for
// a CPU-only one. Every job before this one in the order is of higher priority.
func (c *cycle) ahead(d *demand) int {
	switch {
	case d.gpus == 0:
		return c.blockedCPU
	case d.modelName == "":
		return c.blockedGPU
	}
	n := c.blockedAnyGPU
	if d.models == nil {
		n += c.blockedByModel[d.modelName]
		for _, l := range c.blockedLists {
			if slices.Contains(l.models, d.modelName) {
				n += l.jobs
			}
		}
		return n
	}
	for _, m := range d.models {
		n += c.blockedByModel[m]
	}
	for _, l := range c.blockedLists {
		if slices.ContainsFunc(l.models, func(m string) bool { return slices.Contains(d.models, m) }) {
			n += l.jobs
		}
	}
	return n
}

func (c *cycle) block(d *demand) {
	switch {
	case d.gpus == 0:
		c.blockedCPU++
		return
	case d.models != nil:
		l := c.blockedLists[d.modelName]
		if l == nil {
			if c.blockedLists == nil {
				c.blockedLists = map[string]*blockedList{}
			}
			l = &blockedList{models: d.models}
			c.blockedLists[d.modelName] = l
		}
		l.jobs++
	case d.modelName == "":
		c.blockedAnyGPU++
	default:
		c.blockedByModel[d.modelName]++
	}
	c.blockedGPU++
}

// aheadMessage is "N jobs of higher priority are ahead" and then tail, written without
// fmt: at every cycle each job waiting behind others gets one, and with thousands waiting
// formatting them was a third of the time spent on waiting jobs.
func aheadMessage(n int, tail string) string {
	if n == 1 {
		return "1 job of higher priority is ahead" + tail
	}
	return strconv.Itoa(n) + " jobs of higher priority are ahead" + tail
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}
