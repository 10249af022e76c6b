package sched

import (
	"fmt"
	"strings"
)

// reason turns the chain's record into a Reason for a job that could not start now. The
// codes, in the order they are decided:
//   - Priority: some node has the resources free now, but the job would delay a
//     reservation of a higher job (EASY backfill refused it). wait also turns Resources
//     and Fragmented into Priority when higher jobs already wait for the same resources:
//     then the job is not the one the next free GPUs go to.
//   - Reserved: the only nodes with room are held for another team.
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
	case dg.rejected[checkWindow] > 0 && dg.rejected[checkCPUs]+dg.rejected[checkMemory] == 0:
		ni := dg.first[checkWindow].node
		var w window
		for _, w = range st.nodes[ni].windows {
			if w.team != d.team {
				break
			}
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
		if d.pools != nil {
			// The buckets span all pools: count this pool's groups one by one.
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
	if d.model == noModel || largest < d.gpus {
		r := Reason{Code: ReasonResources}
		if !c.opts.Terse {
			where := "schedulable node"
			if d.pools != nil {
				where = "schedulable node in pools " + strings.Join(d.pools, ", ")
			}
			r.Message = fmt.Sprintf("no %s has %s; %s not schedulable",
				where, gpusOf(d.gpus, "", d.modelName), plural(st.unschedulable, "node")+" "+isAre(st.unschedulable))
		}
		return r
	}
	node := st.nodes[st.groups[bestGroup].node].n.Name
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
	}
	return r
}
