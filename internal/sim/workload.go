package sim

import (
	"fmt"
	"slices"
	"strings"
)

// Workload is a trace checked against a cluster: every job in it can run somewhere, has a
// queue the cluster knows and a gang shape. All policies of one command replay the same
// Workload.
type Workload struct {
	Trace   *Trace
	Cluster *Cluster
	Jobs    []Job
	// shapes[i] is how Jobs[i] spreads over nodes.
	shapes []shape
	// Skipped is the trace's bad rows plus the jobs no node could ever run, by line.
	Skipped []BadRow
	// fill is set by FillWorkload: the jobs never end.
	fill float64
}

// shape is a job's request per node.
type shape struct {
	nodes       int
	gpusPerNode int
	cpus        int // per node
	memoryMB    int64
}

// nodeKind is a distinct node shape of the cluster with how many nodes have it; jobs are
// checked against kinds, not against every node.
type nodeKind struct {
	gpus     int
	model    string
	cpus     int
	memoryMB int64
	count    int
}

// Prepare checks every job of t against cluster c. A job that no node (or, for a gang, no
// set of nodes) could ever run, or that names a queue c lacks, is skipped with the reason; in
// strict mode it is an error. The trace's own bad rows are carried over.
func Prepare(t *Trace, c *Cluster, strict bool) (*Workload, error) {
	w := &Workload{Trace: t, Cluster: c, Skipped: slices.Clone(t.Skipped)}
	kinds := nodeKinds(c)
	maxPerModel := map[string]int{}
	for _, k := range kinds {
		maxPerModel[k.model] = max(maxPerModel[k.model], k.gpus)
		maxPerModel[""] = max(maxPerModel[""], k.gpus)
	}
	queues := map[string]bool{}
	for _, q := range c.Queues {
		queues[q.Name] = true
	}
	for _, j := range t.Jobs {
		if j.Queue == "" {
			j.Queue = c.DefaultQueue
		}
		if j.Team == "" {
			j.Team = "none"
		}
		reason := ""
		var sh shape
		if !queues[j.Queue] {
			reason = fmt.Sprintf("queue %q is not in the cluster", j.Queue)
		} else {
			sh = gangShape(j, maxPerModel[j.GPUModel])
			reason = checkFits(j, sh, kinds)
		}
		if reason != "" {
			b := BadRow{Line: j.Line, Reason: reason}
			if strict {
				return nil, fmt.Errorf("%w: %s", ErrBadRow, b)
			}
			w.Skipped = append(w.Skipped, b)
			continue
		}
		j.ID = int64(len(w.Jobs) + 1)
		w.Jobs = append(w.Jobs, j)
		w.shapes = append(w.shapes, sh)
	}
	slices.SortStableFunc(w.Skipped, func(a, b BadRow) int { return a.Line - b.Line })
	return w, nil
}

func nodeKinds(c *Cluster) []nodeKind {
	idx := map[nodeKind]int{}
	var kinds []nodeKind
	for _, n := range c.Nodes {
		k := nodeKind{gpus: n.GPUs, model: n.GPUModel, cpus: n.CPUs, memoryMB: n.MemoryMB}
		if i, ok := idx[k]; ok {
			kinds[i].count++
			continue
		}
		idx[k] = len(kinds)
		k.count = 1
		kinds = append(kinds, k)
	}
	return kinds
}

// gangShape spreads a job over nodes. A trace that gives the node count is followed; else a
// job that fits the largest node of its model stays on one node, and a larger one takes the
// fewest nodes that divide its GPUs evenly with no more than maxPerNode on each (16 GPUs on
// 8-GPU nodes: 2×8; 12: 2×6). CPUs and memory are shared out evenly, rounded up.
func gangShape(j Job, maxPerNode int) shape {
	n := max(j.Nodes, 1)
	if j.Nodes == 0 && maxPerNode > 0 && j.GPUs > maxPerNode {
		n = (j.GPUs + maxPerNode - 1) / maxPerNode
		for j.GPUs%n != 0 {
			n++
		}
	}
	return shape{
		nodes:       n,
		gpusPerNode: j.GPUs / n,
		cpus:        (j.CPUs + n - 1) / n,
		memoryMB:    (j.MemoryMB + int64(n) - 1) / int64(n),
	}
}

// checkFits returns why no set of nodes could ever run the job, or "".
func checkFits(j Job, sh shape, kinds []nodeKind) string {
	fit := 0
	for _, k := range kinds {
		if k.gpus >= sh.gpusPerNode && k.cpus >= sh.cpus && k.memoryMB >= sh.memoryMB &&
			(j.GPUModel == "" || sh.gpusPerNode == 0 || k.model == j.GPUModel) {
			fit += k.count
		}
	}
	if fit >= sh.nodes {
		return ""
	}
	var need []string
	if sh.gpusPerNode > 0 {
		g := fmt.Sprintf("%d GPUs", sh.gpusPerNode)
		if j.GPUModel != "" {
			g = fmt.Sprintf("%d %s GPUs", sh.gpusPerNode, j.GPUModel)
		}
		need = append(need, g)
	}
	if sh.cpus > 0 {
		need = append(need, fmt.Sprintf("%d CPUs", sh.cpus))
	}
	if sh.memoryMB > 0 {
		need = append(need, fmt.Sprintf("%d MB memory", sh.memoryMB))
	}
	what := strings.Join(need, ", ")
	if what == "" {
		what = "nothing"
	}
	if sh.nodes == 1 {
		return fmt.Sprintf("no node can ever run it: needs %s on one node", what)
	}
	return fmt.Sprintf("no set of nodes can ever run it: needs %d nodes with %s each, %d have that", sh.nodes, what, fit)
}
