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
		return gangShortage(d, dg)
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
		return Reason{Code: ReasonReserved, BestNode: st.nodes[ni].n.Name,
			Message: fmt.Sprintf("the nodes with room, first %s, are reserved for team %s (%s)", st.nodes[ni].n.Name, w.team, w.name)}
	case dg.rejected[checkCPUs]+dg.rejected[checkMemory] > 0:
		cd := dg.first[checkCPUs]
		if dg.rejected[checkCPUs] == 0 {
			cd = dg.first[checkMemory]
		}
		ns := &st.nodes[cd.node]
		missing := map[string]int64{}
		short := ""
		if lack := int64(d.cpus - ns.freeCPU); lack > 0 {
			missing["cpus"] = lack
			short = fmt.Sprintf("%d CPUs", lack)
		}
		if lack := d.mem - ns.freeMem; lack > 0 {
			missing["memory_mb"] = lack
			if short != "" {
				short += " and "
			}
			short += fmt.Sprintf("%d MB of memory", lack)
		}
		what := fmt.Sprintf("%s with %d CPUs and %d MB of memory", gpusOf(d.gpus, "free ", d.modelName), d.cpus, d.mem)
		if d.gpus == 0 {
			what = fmt.Sprintf("%d free CPUs and %d MB of free memory", d.cpus, d.mem)
		}
		return Reason{Code: ReasonResources, BestNode: ns.n.Name, Missing: missing,
			Message: fmt.Sprintf("no node has %s: best is %s, short of %s", what, ns.n.Name, short)}
	}
	if d.deny != nil || d.model == noModel {
		return c.gpuShortage(d) // answers that depend on more than the key below
	}
	// The answer depends only on the free GPU counts, so it is kept until a placement
	// changes them: once the cluster is full, thousands of jobs share a few answers.
	key := shortageKey{d.model, d.gpus, d.poolKey}
	if e, ok := c.shortages[key]; ok && e.version == c.st.gpuVersion {
		return e.reason
	}
	r := c.gpuShortage(d)
	c.shortages[key] = shortageEntry{c.st.gpuVersion, r}
	return r
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
		return Reason{Code: ReasonResources, Message: "no node is schedulable"}
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
		where := "schedulable node"
		if d.pools != nil {
			where = "schedulable node in pools " + strings.Join(d.pools, ", ")
		}
		return Reason{Code: ReasonResources, Message: fmt.Sprintf("no %s has %s; %s not schedulable",
			where, gpusOf(d.gpus, "", d.modelName), plural(st.unschedulable, "node")+" "+isAre(st.unschedulable))}
	}
	node := st.nodes[st.groups[bestGroup].node].n.Name
	missing := map[string]int64{"gpus": int64(d.gpus - bestFree)}
	if total >= d.gpus {
		return Reason{Code: ReasonFragmented, BestNode: node, Missing: missing,
			Message: fmt.Sprintf("%s are free, but spread over %s; the most on one node is %d on %s",
				gpusOf(total, "", d.modelName), plural(spread, "node"), bestFree, node)}
	}
	return Reason{Code: ReasonResources, BestNode: node, Missing: missing,
		Message: fmt.Sprintf("no node has %s: best is %s with %d free", gpusOf(d.gpus, "free ", d.modelName), node, bestFree)}
}
