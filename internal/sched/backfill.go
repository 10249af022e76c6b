package sched

import "slices"

// This file holds EASY backfill: each of the highest blocked jobs (up to
// Options.ReservationDepth) gets a reservation at the earliest time its resources will be
// free, assuming running jobs end at their time limits and the reservations made before
// it are honoured. Lower jobs may then start now only where they do not delay any
// reservation (the "backfill" check of the feasibility chain). The reservation time is
// also the job's estimated start.

// earliestOn returns the earliest time, not before from, at which candidate c has the
// demand's resources free for its whole duration, given the node's future events, or
// forever when that never happens (jobs without a time limit hold what is missing).
// Callers that only need to know whether the answer is at most limit (the best start
// found so far) pass it: once the answer must lie beyond limit, earliestOn stops walking
// and returns a time after limit, not necessarily the answer.
func (st *state) earliestOn(c cand, d *demand, from, limit int64) int64 {
	ns := &st.nodes[c.node]
	g := 0
	if c.group >= 0 {
		g = st.groups[c.group].nfree
	}
	cpus, mem := ns.freeCPU, ns.freeMem
	start := int64(-1) // start of the current stretch in which the job fits; -1: none
	if g >= d.gpus && cpus >= d.cpus && mem >= d.mem {
		start = max(st.now, from)
	}
	for i := 0; i < len(ns.events); {
		at := ns.events[i].at
		if start >= 0 && at >= start && at-start >= d.dur {
			break // the stretch already covers the whole run
		}
		// The answer is at least the start of the current stretch, or without one this
		// event's time: once that is past limit, the rest of the walk does not matter.
		if start > limit || (start < 0 && at > limit) {
			return max(start, at)
		}
		for ; i < len(ns.events) && ns.events[i].at == at; i++ {
			e := &ns.events[i]
			if e.group == c.group && e.group >= 0 {
				g += e.gpus
			}
			cpus += e.cpus
			mem += e.mem
		}
		switch {
		case g < d.gpus || cpus < d.cpus || mem < d.mem:
			start = -1
		case start < 0:
			start = max(at, from)
		}
	}
	if start < 0 {
		return forever
	}
	return start
}

// earliestWithWindows is earliestOn that also steps past administrative windows held
// for other teams, and past the end of holds by GPU count that keep the job off the
// group. Like earliestOn, it may stop early with a time after limit.
func (st *state) earliestWithWindows(c cand, d *demand, limit int64) int64 {
	held := len(st.holds) > 0 && st.holdsGroup(c.group)
	if len(st.nodes[c.node].windows) == 0 && !held {
		return st.earliestMemo(c, d, limit) // the common case
	}
	from := st.now
	for range len(st.nodes[c.node].windows) + len(st.holds) + 1 {
		var t int64
		if from == st.now {
			t = st.earliestMemo(c, d, limit) // the same walk, kept between calls
		} else {
			t = st.earliestOn(c, d, from, limit)
		}
		if t == forever || t > limit {
			return t
		}
		next := t
		end := addSat(t, d.dur)
		for _, w := range st.nodes[c.node].windows {
			if w.blocks(d.team) && w.start < end && t < w.end {
				next = max(next, w.end)
			}
		}
		// A hold's spare capacity is known only now; once it ends, it no longer counts.
		if held {
			if i, _ := st.heldFor(c, d, t); i >= 0 {
				next = max(next, st.holds[i].end)
			}
		}
		if next == t {
			return t
		}
		from = next
	}
	return forever
}

// earlyMemo is a group's last earliest start from now: for which request, on which
// version of its node, and whether it is the answer or only a bound (a time past the
// limit it was asked under, below the answer).
type earlyMemo struct {
	key     earlyKey
	version uint32
	t       int64
	exact   bool
	valid   bool
}

// earlyKey is what earliestOn reads of a demand.
type earlyKey struct {
	gpus, cpus int
	mem, dur   int64
}

// earliestMemo is earliestOn from now, kept per group between the calls of a cycle. The
// blocked jobs that reserve one after another mostly ask the same of every group, and
// each reservation (or placement) changes one node: only that node's answer is worked
// out again, the others are read back. A node's version counts its changes (take,
// addEvent); the memo starts empty each cycle.
func (st *state) earliestMemo(c cand, d *demand, limit int64) int64 {
	if c.group < 0 {
		return st.earliestOn(c, d, st.now, limit)
	}
	if st.early == nil {
		st.early = make([]earlyMemo, len(st.groups))
	}
	m := &st.early[c.group]
	key := earlyKey{gpus: d.gpus, cpus: d.cpus, mem: d.mem, dur: d.dur}
	version := st.nodes[c.node].version
	// A bound past this limit answers too: the caller wants only to know that the start
	// lies beyond it.
	if m.valid && m.key == key && m.version == version && (m.exact || m.t > limit) {
		return m.t
	}
	t := st.earliestOn(c, d, st.now, limit)
	*m = earlyMemo{key: key, version: version, t: t, exact: t <= limit || t == forever, valid: true}
	return t
}

// reserve adds a reservation of the demand on candidate c from start for its duration.
func (st *state) reserve(c cand, d *demand, start int64) {
	ns := &st.nodes[c.node]
	gpus := d.gpus
	if c.group < 0 {
		gpus = 0
	}
	ns.addEvent(event{at: start, group: c.group, gpus: -gpus, cpus: -d.cpus, mem: -d.mem})
	if end := addSat(start, d.dur); end != forever {
		ns.addEvent(event{at: end, group: c.group, gpus: gpus, cpus: d.cpus, mem: d.mem})
	}
	ns.reserved++
	st.changes++
}

// release schedules the return of what a job placed now holds, at its time limit.
func (st *state) release(c cand, gpus int, d *demand) {
	end := addSat(st.now, d.dur)
	if end == forever {
		return
	}
	st.nodes[c.node].addEvent(event{at: end, group: c.group, gpus: gpus, cpus: d.cpus, mem: d.mem})
	st.changes++
}

// earliestSingle finds the candidate where a single-node job can start soonest, ties to
// the job's preferred model (of a list), then name order; forever when none.
func (st *state) earliestSingle(d *demand) (cand, int64) {
	best, bestT := cand{}, int64(forever)
	try := func(c cand) {
		// Only a start no later than the best so far can win.
		if t := st.earliestWithWindows(c, d, bestT); t < bestT || (t == bestT && t != forever && st.before(d, c, best)) {
			best, bestT = c, t
		}
	}
	if d.gpus == 0 {
		for ni := range st.nodes {
			if st.nodes[ni].n.CPUs >= d.cpus && st.nodes[ni].n.MemoryMB >= d.mem && st.eligible(ni, d) {
				try(cand{ni, -1})
			}
		}
		return best, bestT
	}
	for m := range st.models {
		if !d.takes(m) {
			continue
		}
		for _, gi := range st.models[m].groups {
			ni := st.groups[gi].node
			if len(st.groups[gi].index) >= d.gpus && st.nodes[ni].n.CPUs >= d.cpus && st.nodes[ni].n.MemoryMB >= d.mem && st.eligible(ni, d) {
				try(cand{ni, gi})
			}
		}
	}
	return best, bestT
}

// before orders candidates of equal start: the job's preferred model first (for a list),
// then name order.
func (st *state) before(d *demand, a, b cand) bool {
	if d.prefer != nil && a.group >= 0 && b.group >= 0 {
		if ra, rb := d.rank(st.groups[a.group].model), d.rank(st.groups[b.group].model); ra != rb {
			return ra < rb
		}
	}
	return a.node < b.node
}

// noStartKey is a request as far as its earliest start goes: its shape (which names its
// team, pools, model and sizes) and its duration. A list or quota may further deny
// models, which noStartEntry holds.
type noStartKey struct {
	shape shape
	dur   int64
}

// noStartEntry records that a request found no start at all, at the state's change count.
type noStartEntry struct {
	changes uint64
	deny    []bool
}

// neverStarts reports whether a request identical to d was found, since the state last
// changed, never to start: with the cluster full of jobs without time limits, every
// blocked job of a shape would otherwise walk every GPU group of the cluster for the
// same answer. Nothing a start depends on changes without a take, a reservation or a
// release, each of which counts a change.
func (st *state) neverStarts(d *demand) bool {
	e, ok := st.noStart[noStartKey{d.shape(), d.dur}]
	return ok && e.changes == st.changes && slices.Equal(e.deny, d.deny)
}

// noteNeverStarts records that d found no start, for neverStarts.
func (st *state) noteNeverStarts(d *demand) {
	if st.noStart == nil {
		st.noStart = map[noStartKey]noStartEntry{}
	}
	st.noStart[noStartKey{d.shape(), d.dur}] = noStartEntry{changes: st.changes, deny: slices.Clone(d.deny)}
}
