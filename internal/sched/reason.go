package sched

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// reason turns the chain's record into a Reason for a job that could not start now. The
// codes, in the order they are decided:
//   - Priority: some node has the resources free now, but the job would delay a
//     reservation of a higher job (EASY backfill refused it). wait also turns Resources
//     and Fragmented into Priority when higher jobs already wait for the same resources:
//     then the job is not the one the next free GPUs go to.
//   - Reserved: the only nodes with room are held for another team, or the free GPUs
//     of the model are held by count for one (hold.go).
//   - Resources: nodes had the GPUs free but lacked CPUs or memory, or no node has
//     enough free GPUs. BestNode is the closest node and Missing what it lacks.
//   - Fragmented: enough GPUs of the model are free in all, but spread over nodes.
func (c *cycle) reason(d *demand, dg *diag) Reason {
	st := c.st
	switch {
	case d.nodes > 1 && dg.gangFound+dg.rejected[checkBackfill] >= d.nodes && dg.rejected[checkBackfill] > 0:
		return Reason{Code: ReasonPriority, BestNode: st.nodes[dg.first[checkBackfill].node].n.Name}
	case d.nodes > 1:
		return c.gangShortage(d, dg)
	case dg.rejected[checkBackfill] > 0:
		return Reason{Code: ReasonPriority, BestNode: st.nodes[dg.first[checkBackfill].node].n.Name}
	case dg.rejected[checkHold] > 0 && dg.rejected[checkWindow]+dg.rejected[checkCPUs]+dg.rejected[checkMemory] == 0:
		return c.holdReason(d, dg)
	case dg.rejected[checkWindow] > 0 && dg.rejected[checkCPUs]+dg.rejected[checkMemory] == 0:
		ni := dg.first[checkWindow].node
		var w window
		for _, w = range st.nodes[ni].windows {
			if w.blocks(d.team) && w.start < addSat(st.now, d.dur) && st.now < w.end {
				break
			}
		}
		if w.maint {
			r := Reason{Code: ReasonMaintenance, BestNode: st.nodes[ni].n.Name}
			if !c.opts.Terse {
				r.Message = maintenanceMessage(st.nodes[ni].n.Name, w, d.dur, st.now, c.loc)
			}
			return r
		}
		r := Reason{Code: ReasonReserved, BestNode: st.nodes[ni].n.Name}
		if !c.opts.Terse {
			r.Message = fmt.Sprintf("the nodes with room, first %s, are reserved for team %s (%s)", st.nodes[ni].n.Name, w.team, w.name)
		}
		return r
	case dg.rejected[checkCPUs]+dg.rejected[checkMemory] > 0:
		cd := dg.first[checkCPUs]
		if dg.rejected[checkCPUs] == 0 {
			cd = dg.first[checkMemory]
		}
		ns := &st.nodes[cd.node]
		r := Reason{Code: ReasonResources, BestNode: ns.n.Name, Missing: map[string]int64{}}
		cpus, mem := int64(d.cpus-ns.freeCPU), d.mem-ns.freeMem
		if cpus > 0 {
			r.Missing["cpus"] = cpus
		}
		if mem > 0 {
			r.Missing["memory_mb"] = mem
		}
		if !c.opts.Terse {
			r.Message = resourcesMessage(d, ns.n.Name, cpus, mem)
		}
		return r
	}
	if d.deny != nil || d.model == noModel {
		return c.shortage(d) // answers that depend on more than the key below
	}
	// The answer depends only on the free GPU counts (and the claims, which change them),
	// so it is kept until a placement changes them: once the cluster is full, thousands of
	// jobs share a few answers.
	key := shortageKey{d.model, d.gpus, d.poolKey}
	if e, ok := c.shortages[key]; ok && e.version == c.st.gpuVersion {
		return e.reason
	}
	r := c.shortage(d)
	c.shortages[key] = shortageEntry{c.st.gpuVersion, r}
	return r
}

// shortage explains a job short of free GPUs: by the claim that holds them, when one
// does, else by what is free.
func (c *cycle) shortage(d *demand) Reason {
	if r, ok := c.heldReason(d); ok {
		return r
	}
	return c.gpuShortage(d)
}

// resourcesMessage says what the best node lacks in CPUs and memory.
func resourcesMessage(d *demand, node string, cpus, mem int64) string {
	short := ""
	if cpus > 0 {
		short = fmt.Sprintf("%d CPUs", cpus)
	}
	if mem > 0 {
		if short != "" {
			short += " and "
		}
		short += fmt.Sprintf("%d MB of memory", mem)
	}
	what := fmt.Sprintf("%s with %d CPUs and %d MB of memory", gpusOf(d.gpus, "free ", d.modelName), d.cpus, d.mem)
	if d.gpus == 0 {
		what = fmt.Sprintf("%d free CPUs and %d MB of free memory", d.cpus, d.mem)
	}
	return fmt.Sprintf("no node has %s: best is %s, short of %s", what, node, short)
}

type shortageKey struct {
	model, gpus int
	pools       string
}

type shortageEntry struct {
	version int
	reason  Reason
}

// gpuShortage explains a job for which no node has enough free GPUs of its model.
func (c *cycle) gpuShortage(d *demand) Reason {
	st := c.st
	if len(st.nodes) == 0 {
		r := Reason{Code: ReasonResources}
		if !c.opts.Terse {
			r.Message = "no node is schedulable"
			if note := c.failedHealth(d); note != "" {
				r.Message += "; " + note
			}
		}
		return r
	}
	// The group with the most free GPUs (first in name order), the free GPUs in all, and
	// the number of groups that have any.
	bestGroup, bestFree, total, spread, largest := -1, -1, 0, 0, 0
	for m := range st.models {
		if !d.takes(m) {
			continue
		}
		mi := &st.models[m]
		if d.restricted() {
			// The buckets span all nodes: count the eligible nodes' groups one by one.
			for _, ni := range st.poolNodes(d) {
				for _, gi := range st.nodes[ni].groups {
					g := &st.groups[gi]
					if g.model != m {
						continue
					}
					largest = max(largest, len(g.index))
					total += g.nfree
					if g.nfree > 0 {
						spread++
					}
					if g.nfree > bestFree || (g.nfree == bestFree && gi < bestGroup) {
						bestGroup, bestFree = gi, g.nfree
					}
				}
			}
			continue
		}
		largest = max(largest, mi.maxCap)
		total += mi.free
		for k := len(mi.buckets) - 1; k >= 1; k-- {
			spread += mi.counts[k]
		}
		for k := len(mi.buckets) - 1; k >= 0; k-- {
			if mi.counts[k] == 0 {
				continue
			}
			if gi := mi.buckets[k].next(0); k > bestFree || (k == bestFree && gi < bestGroup) {
				bestGroup, bestFree = gi, k
			}
			break
		}
	}
	if d.model == noModel || largest < d.gpus || bestGroup < 0 {
		// No eligible node has the GPUs however many are free (or, for a CPU-only
		// job, no eligible node is schedulable at all).
		r := Reason{Code: ReasonResources}
		if !c.opts.Terse {
			where := "schedulable node" + d.whereNote()
			if d.pools != nil {
				where += " in pools " + strings.Join(d.pools, ", ")
			}
			r.Message = fmt.Sprintf("no %s has %s", where, gpusOf(d.gpus, "", d.modelName))
			if d.gpus == 0 {
				r.Message = "there is no " + where
			}
			if note := c.unschedulableNote(d); note != "" {
				r.Message += "; " + note
			}
			if note := st.heldBackAnywhere(d); note != "" {
				r.Message += "; " + note
			}
		}
		return r
	}
	bestNode := st.nodes[st.groups[bestGroup].node].n
	node := bestNode.Name
	r := Reason{Code: ReasonResources, BestNode: node, Missing: map[string]int64{"gpus": int64(d.gpus - bestFree)}}
	if total >= d.gpus {
		r.Code = ReasonFragmented
	}
	switch {
	case c.opts.Terse:
	case r.Code == ReasonFragmented:
		r.Message = fmt.Sprintf("%s are free, but spread over %s; the most on one node is %d on %s",
			gpusOf(total, "", d.modelName), plural(spread, "node"), bestFree, node)
	default:
		r.Message = fmt.Sprintf("no node has %s: best is %s with %d free", gpusOf(d.gpus, "free ", d.modelName), node, bestFree)
		if note := heldBack(bestNode, st.models[st.groups[bestGroup].model].name).note(node); note != "" {
			r.Message += "; " + note
		}
		if note := c.failedHealth(d); note != "" {
			r.Message += "; " + note
		}
	}
	return r
}

// unschedulableNote counts the nodes left out of the cycle, naming those whose health
// check failed that could run the job otherwise: "3 nodes are not schedulable (node a
// failed its health check)".
// It is empty when every node is schedulable.
func (c *cycle) unschedulableNote(d *demand) string {
	n := c.st.unschedulable
	if n == 0 {
		return ""
	}
	s := plural(n, "node") + " " + isAre(n) + " not schedulable"
	if note := c.failedHealth(d); note != "" {
		s += " (" + note + ")"
	}
	return s
}

// failedHealth says which nodes the job could use otherwise (its pools, a container
// runtime for an image, versions) are left out because their health check failed or their
// agent cannot run attempts, naming the first three, which is all a note names; "" when
// there are none.
func (c *cycle) failedHealth(d *demand) string {
	var names []string
	count, dataDir := 0, 0
	for _, i := range c.st.healthFailed {
		n := &c.s.Nodes[i]
		if d.fitsNode(n) {
			if count++; len(names) < 3 {
				names = append(names, n.Name)
			}
			if n.CannotRun {
				dataDir++
			}
		}
	}
	if count == 0 {
		return ""
	}
	return healthNote(names, count, dataDir)
}

// healthNote says that count nodes, dataDir of them because their agent cannot run attempts, failed their
// health check, naming the first few.
func healthNote(names []string, count, dataDir int) string {
	what := map[bool]string{true: "failed its health check", false: "failed their health checks"}
	switch {
	case dataDir == count:
		what = map[bool]string{true: "cannot run attempts (its agent says why in rota nodes)", false: "cannot run attempts (their agents say why in rota nodes)"}
	case dataDir > 0:
		what = map[bool]string{false: "failed their health checks or cannot run attempts"}
	}
	if count == 1 {
		return "node " + names[0] + " " + what[true]
	}
	list := strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
	if count > len(names) {
		list = fmt.Sprintf("%s and %d more", strings.Join(names, ", "), count-len(names))
	}
	return "nodes " + list + " " + what[false]
}

// unusable counts the GPUs of one model on a node that take no new work.
type unusable struct {
	total, held, sick int // all of the model's GPUs; held by leftovers; unhealthy
}

// heldBack counts node n's GPUs of the model that take no new work. A GPU both held and
// unhealthy counts as unhealthy, the lasting of the two.
func heldBack(n *Node, model string) unusable {
	var u unusable
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if g.Model != model {
			continue
		}
		u.total++
		switch {
		case !g.Healthy:
			u.sick++
		case g.Held:
			u.held++
		}
	}
	return u
}

// note says what of node's GPUs take no new work, e.g. "2 GPUs of node a are held by
// leftover processes and 1 is unhealthy"; "" when all are usable.
func (u unusable) note(node string) string {
	var parts []string
	if u.held > 0 {
		parts = append(parts, fmt.Sprintf("%s of node %s %s held by leftover processes", gpusOf(u.held, "", ""), node, isAre(u.held)))
	}
	if u.sick > 0 {
		what := fmt.Sprintf("%d %s unhealthy", u.sick, isAre(u.sick))
		if len(parts) == 0 {
			what = fmt.Sprintf("%s of node %s %s unhealthy", gpusOf(u.sick, "", ""), node, isAre(u.sick))
		}
		parts = append(parts, what)
	}
	return strings.Join(parts, " and ")
}

// heldBackAnywhere explains a job no eligible node has enough usable GPUs for, when it is
// the held or unhealthy GPUs that make the difference: it names the first node, in name
// order, that would have enough were they usable. It walks every GPU of the eligible
// nodes, but only for jobs that fit nowhere, once per cycle and request (the caller's
// answer is cached).
func (st *state) heldBackAnywhere(d *demand) string {
	if d.gpus == 0 {
		return ""
	}
	var models []string // of one node, reused
	check := func(ni int) string {
		n := st.nodes[ni].n
		models = models[:0]
		for _, g := range n.GPUs {
			if !slices.Contains(models, g.Model) && st.mayTake(d, g.Model) {
				models = append(models, g.Model)
			}
		}
		for _, m := range models {
			if u := heldBack(n, m); u.total >= d.gpus && u.held+u.sick > 0 {
				return u.note(n.Name)
			}
		}
		return ""
	}
	if d.restricted() {
		for _, ni := range st.poolNodes(d) {
			if note := check(ni); note != "" {
				return note
			}
		}
		return ""
	}
	for ni := range st.nodes {
		if note := check(ni); note != "" {
			return note
		}
	}
	return ""
}

// mayTake is demand.takes for a model named, which may be one no usable GPU has.
func (st *state) mayTake(d *demand, model string) bool {
	switch {
	case d.models != nil && !slices.Contains(d.models, model):
		return false
	case d.models == nil && d.modelName != "":
		return model == d.modelName
	}
	m, ok := st.modelByName[model]
	return !ok || d.takes(m)
}

// maintenanceMessage says why a node with room is refused for maintenance: its window is
// open, or the job's time limit (or the lack of one) would run into it.
func maintenanceMessage(node string, w window, dur, now int64, loc *time.Location) string {
	why := "is in maintenance"
	switch {
	case w.start > now && dur == forever:
		why = fmt.Sprintf("goes into maintenance at %s and the job has no time limit", time.Unix(0, w.start).In(loc).Format(time.DateTime))
	case w.start > now:
		why = fmt.Sprintf("goes into maintenance at %s, before the job's time limit would end it", time.Unix(0, w.start).In(loc).Format(time.DateTime))
	}
	if w.name != "" {
		why += " (" + w.name + ")"
	}
	return "node " + node + ", the first with room, " + why
}
