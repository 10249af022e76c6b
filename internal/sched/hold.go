package sched

import (
	"fmt"
	"slices"
	"time"
)

// This file holds reservations by GPU count (Reservation.GPUs without Nodes): N GPUs of a
// model and pool held for a team from Start to End, on no node in particular. The GPUs
// float: each cycle counts what the team still lacks and keeps that many free GPUs of the
// model and pool out of other teams' reach, whichever they are, so the team's jobs take
// whatever is free when they come. Nothing is preempted for a hold, as nothing is for a
// node reservation: GPUs other teams' running jobs hold come to the team as those jobs end.
//
// The rule for other teams' jobs, on the GPUs a hold matches:
//   - one whose run would overlap the window (it is open, or the job's time limit, or
//     the lack of one, would carry it past Start) may take GPUs only while as many stay
//     free as the team lacks, with what other holds among the same GPUs lack (heldFor);
//   - one whose time limit ends it before Start is not concerned by the hold at all.
//
// This is how maintenance windows and node reservations are respected before they open,
// with capacity counted instead of nodes.

// gpuHold is a reservation by GPU count as one cycle sees it.
type gpuHold struct {
	id         int64
	team, name string
	start, end int64
	gpus       int
	// model numbers the held model in state.models: anyModel for any model, noModel for
	// one no schedulable node has (the hold then matches nothing).
	model     int
	modelName string
	pool      string
	// avail is what the matching GPUs offer at the window's start: the free ones, and for
	// a window not yet open also those running jobs give back before it opens. Jobs this
	// cycle places that run into the window take from it.
	avail int
	// need is what the team still lacks: gpus less the team's GPUs in use on matching
	// GPUs during the window.
	need int
	// in holds the groups whose GPUs the hold covers.
	in bitset
}

func (h *gpuHold) overlaps(start, end int64) bool { return h.start < end && start < h.end }

// matches reports whether group gi holds GPUs the hold covers (gpuHold.in).
func (st *state) matches(h *gpuHold, gi int) bool {
	return h.in[gi>>6]&(1<<(gi&63)) != 0
}

// covered reports whether group gi holds GPUs of the hold's model and pool that the team
// may use: GPUs on a node another team's reservation or a maintenance window takes
// during the window are of no use to it, and so neither held nor counted.
func (st *state) covered(h *gpuHold, gi int) bool {
	g := &st.groups[gi]
	if h.model == noModel || (h.model != anyModel && g.model != h.model) {
		return false
	}
	return (h.pool == "" || st.nodes[g.node].n.Labels["pool"] == h.pool) && !st.nodeClosed(g.node, h.team, h.start, h.end)
}

// addHolds turns the reservations by GPU count into the cycle's holds, after the running
// jobs and claims have taken what they hold. Reservations already over are dropped.
func (st *state) addHolds(rs []Reservation, running []Running) {
	st.holds = st.holds[:0]
	for _, r := range rs {
		if r.GPUs <= 0 || len(r.Nodes) > 0 {
			continue
		}
		h := gpuHold{id: r.ID, team: r.Team, name: r.Name, start: nanos(r.Start), end: nanos(r.End), gpus: r.GPUs,
			model: anyModel, modelName: r.Model, pool: r.Pool}
		if r.Start.IsZero() {
			h.start = 0
		}
		if h.end <= st.now || h.start >= h.end {
			continue
		}
		if r.Model != "" {
			h.model = noModel
			if m, ok := st.modelByName[r.Model]; ok {
				h.model = m
			}
		}
		h.need = h.gpus
		// Which groups it covers is worked out once: the checks ask for every candidate.
		h.in = newBitset(len(st.groups))
		for gi := range st.groups {
			if !st.covered(&h, gi) {
				continue
			}
			h.in.set(gi)
			h.avail += st.groups[gi].nfree
			if h.start <= st.now {
				continue
			}
			// Before the window opens, what running jobs give back by its start counts.
			for _, e := range st.nodes[st.groups[gi].node].events {
				if e.at > h.start {
					break
				}
				if e.group == gi && e.gpus > 0 {
					h.avail += e.gpus
				}
			}
		}
		st.holds = append(st.holds, h)
	}
	if len(st.holds) == 0 {
		return
	}
	// The team's jobs that run into the window use its GPUs: the team needs that many
	// fewer. A job under two holds of its team counts toward the first that needs it.
	for ri := range running {
		r := &running[ri]
		if r.Preempting {
			continue
		}
		end := nanos(r.End)
		for ai := range r.Allocs {
			a := &r.Allocs[ai]
			ni, ok := st.byName[a.Node]
			if !ok || a.GPUShare > 0 {
				continue
			}
			for _, gi := range st.nodes[ni].groups {
				n := 0
				for _, idx := range a.GPUIndices {
					if _, ok := slices.BinarySearch(st.groups[gi].index, idx); ok {
						n++
					}
				}
				if n > 0 {
					st.useHolds(gi, n, r.Team, st.now, end, false)
				}
			}
		}
	}
}

// nodeClosed reports whether a window on node ni keeps team's jobs off it at some time
// between start and end.
func (st *state) nodeClosed(ni int, team string, start, end int64) bool {
	for _, w := range st.nodes[ni].windows {
		if w.blocks(team) && w.start < end && start < w.end {
			return true
		}
	}
	return false
}

// useHolds records that a job of team takes n GPUs of group gi from start until end: a
// hold of its team it runs into needs that many fewer, and every hold it runs into has
// that many fewer to offer. taken is false for running jobs, whose GPUs avail never
// counted.
func (st *state) useHolds(gi, n int, team string, start, end int64, taken bool) {
	st.changes++
	left := n
	for i := range st.holds {
		h := &st.holds[i]
		if !h.overlaps(start, end) || !st.matches(h, gi) {
			continue
		}
		if taken {
			h.avail -= n
		}
		if h.team == team && left > 0 {
			k := min(left, h.need)
			h.need -= k
			left -= k
		}
	}
}

// heldFor returns the first hold for another team that keeps the job off candidate c if
// it starts at start, or -1, and the GPUs it must keep: the job would run into the window and take GPUs the team
// needs. What a hold's GPUs must cover is its own need and that of every other hold the
// job runs into whose GPUs are among its own (the same model and pool, or narrower), so
// that two reservations of H100s, or one of H100s and one of any model, are not both
// met from the same free GPUs. A gang counts all its GPUs against each node's holds; a
// shared job one GPU.
func (st *state) heldFor(c cand, d *demand, start int64) (int, int) {
	if len(st.holds) == 0 || c.group < 0 {
		return -1, 0
	}
	end := addSat(start, d.dur)
	n := max(d.gpus, 1) * max(d.nodes, 1)
	applies := func(h *gpuHold) bool {
		return h.team != d.team && h.overlaps(start, end) && st.matches(h, c.group)
	}
	for i := range st.holds {
		h := &st.holds[i]
		if !applies(h) {
			continue
		}
		need := 0
		for k := range st.holds {
			if o := &st.holds[k]; applies(o) && h.covers(o) {
				need += o.need
			}
		}
		if h.avail-need < n {
			return i, need
		}
	}
	return -1, 0
}

// held reports whether a hold for another team keeps the job off candidate c if it
// starts at start.
func (st *state) held(c cand, d *demand, start int64) bool {
	i, _ := st.heldFor(c, d, start)
	return i >= 0
}

// covers reports whether every GPU o may hold is one h may hold too.
func (h *gpuHold) covers(o *gpuHold) bool {
	return (h.model == anyModel || h.model == o.model) && (h.pool == "" || h.pool == o.pool)
}

// holdsGroup reports whether any hold covers group gi.
func (st *state) holdsGroup(gi int) bool {
	for i := range st.holds {
		if gi >= 0 && st.matches(&st.holds[i], gi) {
			return true
		}
	}
	return false
}

// holdReason explains a job kept off the only GPUs with room by a hold for another team,
// e.g. "2 of the 8 free H100 GPUs are held for team vision by reservation 4 until 15:00".
func (c *cycle) holdReason(d *demand, dg *diag) Reason {
	st := c.st
	cd := dg.first[checkHold]
	i, need := st.heldFor(cd, d, st.now)
	h := &st.holds[max(i, 0)]
	r := Reason{Code: ReasonReserved, BestNode: st.nodes[cd.node].n.Name, Team: h.team}
	if c.opts.Terse {
		return r
	}
	free := 0
	for gi := range st.groups {
		if st.matches(h, gi) {
			free += st.groups[gi].nfree
		}
	}
	what := "GPUs"
	if h.modelName != "" {
		what = h.modelName + " GPUs"
	}
	if h.pool != "" {
		what += " in pool " + h.pool
	}
	who := "reservation " + h.name
	if h.id != 0 {
		who = fmt.Sprintf("reservation %d", h.id)
	}
	until := c.clock(h.end)
	if h.start <= st.now {
		r.Message = fmt.Sprintf("%d of the %d free %s %s held for team %s by %s until %s",
			min(need, free), free, what, isAre(min(need, free)), h.team, who, until)
		return r
	}
	limit := "its time limit would run past the start"
	if d.dur == forever {
		limit = "it has no time limit"
	}
	r.Message = fmt.Sprintf("%d %s %s held for team %s by %s from %s until %s, and %s; a job that ends before %s may use them",
		need, what, isAre(need), h.team, who, c.clock(h.start), until, limit, c.clock(h.start))
	return r
}

// clock says a cycle time briefly: the time of day if it falls today, else date and time.
func (c *cycle) clock(t int64) string {
	at, now := c.at(t), c.at(c.st.now)
	if at.YearDay() == now.YearDay() && at.Year() == now.Year() {
		return at.Format("15:04")
	}
	return at.Format(time.DateOnly + " 15:04")
}
