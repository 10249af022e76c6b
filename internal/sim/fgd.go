package sim

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// This file holds the placements of --fill runs: pure functions from a node's free capacity
// and a task's request to a cost, lower is better. A placement is chosen once per run
// (placementFor); the fill loop (fill.go) asks it about every node that can take the task
// and takes the cheapest, the first node of the list on a tie.

// Placement names how a --fill run places a task.
type Placement string

const (
	// PlacementFGD is fragmentation gradient descent (Weng et al., ATC'23): the node and
	// GPU whose expected fragmentation, given the workload's request mix, grows least.
	PlacementFGD Placement = "fgd"
	// PlacementBestFit is the FGD paper's best-fit: the node with the least CPU and GPU
	// left after the task, each as a share of the largest node's, weighted equally.
	PlacementBestFit Placement = "bestfit"
	// PlacementPacking is the FGD paper's GPU packing: a partly used GPU first, then free
	// GPUs on a partly used node, then the smallest free node.
	PlacementPacking Placement = "packing"
)

// PlacementNames lists the placements --fill accepts.
func PlacementNames() []string {
	return []string{string(PlacementFGD), string(PlacementBestFit), string(PlacementPacking)}
}

// milliGPU is one whole GPU in the unit of fractional requests.
const milliGPU = 1000

// fillNode is what a node has free during a --fill run.
type fillNode struct {
	model   string
	cpuFree int64 // milli-CPU
	memFree int64 // MB
	// gpuFree is each GPU's free share in milli-GPU: 1000 for a GPU nobody uses.
	gpuFree []int
}

// task is a --fill request on one node: gpus GPUs of milli milli-GPU each. A fractional
// request is gpus 1 with milli below 1000; whole GPUs have milli 1000; a CPU-only task has
// gpus 0.
type task struct {
	gpus   int
	milli  int
	cpu    int64 // milli-CPU
	mem    int64 // MB
	models []string
}

// gpuMilli is the task's GPU request in milli-GPU.
func (t task) gpuMilli() int64 { return int64(t.gpus) * int64(t.milli) }

// accepts reports whether the node's GPU model is one the task takes.
func (n *fillNode) accepts(t task) bool {
	return t.gpus == 0 || len(t.models) == 0 || slices.Contains(t.models, n.model)
}

// fits reports whether the node can take the task now.
func (n *fillNode) fits(t task) bool {
	return n.accepts(t) && n.cpuFree >= t.cpu && n.memFree >= t.mem && gpusWith(n.gpuFree, t.milli) >= t.gpus
}

// gpusWith counts the GPUs with at least milli free.
func gpusWith(free []int, milli int) int {
	k := 0
	for _, f := range free {
		if f >= milli {
			k++
		}
	}
	return k
}

func gpuFreeTotal(free []int) int64 {
	var s int64
	for _, f := range free {
		s += int64(f)
	}
	return s
}

// candidates returns the ways the task can take GPUs on a node that fits it, as lists of
// GPU indices. Whole GPUs are interchangeable, so a whole-GPU task has one way: the first
// free GPUs. A fractional task may take any GPU with room; GPUs with the same free share
// are interchangeable too, so each free share is offered once, on its first GPU.
func candidates(free []int, t task) [][]int {
	if t.gpus == 0 {
		return [][]int{nil}
	}
	if t.milli < milliGPU {
		var out [][]int
		seen := map[int]bool{}
		for i, f := range free {
			if f >= t.milli && !seen[f] {
				seen[f] = true
				out = append(out, []int{i})
			}
		}
		return out
	}
	var g []int
	for i, f := range free {
		if f == milliGPU && len(g) < t.gpus {
			g = append(g, i)
		}
	}
	return [][]int{g}
}

// tightest returns the GPUs a task takes under best-fit and packing: for a fractional task
// the GPU with the least room that still fits (the first of equals), for whole GPUs the
// first free ones. The node must fit the task.
func tightest(free []int, t task) []int {
	cs := candidates(free, t)
	best := cs[0]
	if t.gpus == 0 || t.milli == milliGPU {
		return best
	}
	for _, c := range cs[1:] {
		if free[c[0]] < free[best[0]] {
			best = c
		}
	}
	return best
}

// take applies the task to the node on the given GPUs; give undoes it.
func (n *fillNode) take(t task, gpus []int) {
	n.cpuFree -= t.cpu
	n.memFree -= t.mem
	for _, g := range gpus {
		n.gpuFree[g] -= t.milli
	}
}

func (n *fillNode) give(t task, gpus []int) {
	n.cpuFree += t.cpu
	n.memFree += t.mem
	for _, g := range gpus {
		n.gpuFree[g] += t.milli
	}
}

// placer ranks a node that fits a task: the GPUs the task would take there and the cost,
// lower is better.
type placer interface {
	rank(n *fillNode, t task) (cost float64, gpus []int)
}

// placementFor returns the placer of p. mix is the workload's request mix (FGD weighs
// fragmentation by it) and c the cluster (best-fit scales by its largest node).
func placementFor(p Placement, mix *taskMix, c *Cluster) (placer, error) {
	switch p {
	case PlacementFGD:
		fp := fgdPlacer{mix: mix}
		for _, n := range c.Nodes {
			fp.maxGPU = max(fp.maxGPU, int64(n.GPUs)*milliGPU)
		}
		return fp, nil
	case PlacementBestFit:
		bf := bestFitPlacer{}
		for _, n := range c.Nodes {
			bf.maxCPU = max(bf.maxCPU, int64(n.CPUs)*1000)
			bf.maxGPU = max(bf.maxGPU, int64(n.GPUs)*milliGPU)
		}
		bf.maxCPU, bf.maxGPU = max(bf.maxCPU, 1), max(bf.maxGPU, 1)
		return bf, nil
	case PlacementPacking:
		return packingPlacer{}, nil
	}
	return nil, fmt.Errorf("unknown placement %q (known: %s)", p, strings.Join(PlacementNames(), ", "))
}

// bestFitPlacer: the cost is what the node has left after the task, CPU and GPU each as a
// share of the largest node's and weighted equally (the FGD simulator's BestFit). A
// fractional task takes the tightest GPU.
type bestFitPlacer struct{ maxCPU, maxGPU int64 }

func (p bestFitPlacer) rank(n *fillNode, t task) (float64, []int) {
	cpu := float64(n.cpuFree-t.cpu) / float64(p.maxCPU)
	gpu := float64(gpuFreeTotal(n.gpuFree)-t.gpuMilli()) / float64(p.maxGPU)
	return 0.5*cpu + 0.5*gpu, tightest(n.gpuFree, t)
}

// packingPlacer ranks in three bands, best first (the FGD simulator's GpuPacking): the task
// fits on partly used GPUs (the less they keep free, the better); it needs free GPUs of a
// node already in use (the fewer, the better); the node is unused (the fewer GPUs it has,
// the better). A fractional task takes the tightest GPU. CPU-only tasks go to the first node
// that fits.
type packingPlacer struct{}

func (packingPlacer) rank(n *fillNode, t task) (float64, []int) {
	if t.gpus == 0 {
		return 0, nil
	}
	gpus := tightest(n.gpuFree, t)
	if gpusWith(n.gpuFree, milliGPU) == len(n.gpuFree) {
		return 2000 + float64(len(n.gpuFree)), gpus
	}
	fresh, left := 0, 0
	for _, g := range gpus {
		if n.gpuFree[g] == milliGPU {
			fresh++
		}
		left += n.gpuFree[g] - t.milli
	}
	if fresh > 0 {
		return 1000 + float64(fresh), gpus
	}
	return float64(left) / milliGPU, gpus
}

// fgdPlacer: the cost comes from the growth of the node's fragmentation (mix.frag) if the
// task goes there, as the paper's score (fgdScore); a fractional task takes the GPU that
// scores best, the first of equals. Among nodes of equal score the one left with the least
// free GPU capacity wins, then the first in the list. The paper's simulator leaves such
// ties to the scheduler framework; packing them onto the fuller node keeps emptier nodes
// whole for the tasks that need whole GPUs, and allocates 0.1–0.4 points more on every
// workload of the paper's protocol (TestFGDProtocol). maxGPU is the largest node's GPU
// capacity in milli-GPU, so that the tie-break stays below one point of score.
type fgdPlacer struct {
	mix    *taskMix
	maxGPU int64
}

// fgdScore turns a growth of fragmentation (milli-GPU) into the paper's node score: a
// whole number from 0 to 100, sigmoid(-growth/1000 GPU)×100 rounded down. The rounding is
// part of the algorithm, not a detail: growths that differ by little score alike, and the
// tie goes to the fuller node (fgdPlacer), which packs work onto fewer nodes. Ranking by the
// exact growth instead allocates 0.8 points less of the default workload and 4 points less
// of gpushare100 (TestFGDProtocol).
func fgdScore(growth float64) float64 {
	return math.Floor(100 / (1 + math.Exp(growth/milliGPU)))
}

func (p fgdPlacer) rank(n *fillNode, t task) (float64, []int) {
	before := p.mix.frag(n)
	best, bestGPUs := 0.0, []int(nil)
	for i, c := range candidates(n.gpuFree, t) {
		n.take(t, c)
		// The score first; among equal scores the node left with the least free GPU
		// capacity, a fraction below 1 so it never outweighs a point of score.
		d := -fgdScore(p.mix.frag(n)-before) + float64(gpuFreeTotal(n.gpuFree))/float64(p.maxGPU+1)
		n.give(t, c)
		if i == 0 || d < best {
			best, bestGPUs = d, c
		}
	}
	return best, bestGPUs
}

// taskMix is a workload's request mix as FGD weighs it: the share of the tasks of each kind
// (GPUs, milli-GPU per GPU, CPU, models). Kinds that differ only in CPU are kept in one
// group, sorted by CPU, so that frag needs one search per group instead of a pass over the
// kinds.
type taskMix struct {
	groups []mixGroup
}

type mixGroup struct {
	gpus, milli int
	models      []string
	// cpu is the CPU requests of the group's kinds, ascending; upTo[i] the share of the
	// tasks of kinds 0..i.
	cpu   []int64
	upTo  []float64
	share float64
}

// typicalShare is the share of the tasks FGD's mix describes: the most frequent kinds of
// task, most frequent first, until they make up this share of the tasks; the rarer kinds
// are left out and the shares of those kept renormalised to sum to 1. This is the "typical
// pods" of the paper's simulator (popularity threshold 95%, one kind at a time, CPU-only
// tasks included). Rare kinds, each a few tasks, otherwise spread the expected
// fragmentation thinly over shapes that hardly ever arrive: a GPU share that only they
// could use counts as usable, and FGD leaves it fragmented for the kinds that do arrive.
const typicalShare = 0.95

// newTaskMix counts the kinds of tasks and keeps the typical ones (typicalShare).
func newTaskMix(tasks []task) *taskMix {
	type groupKey struct {
		gpus, milli int
		models      string
	}
	type kindKey struct {
		g   groupKey
		cpu int64
	}
	count := map[kindKey]int{}
	models := map[groupKey][]string{}
	for _, t := range tasks {
		g := groupKey{t.gpus, t.milli, strings.Join(t.models, "|")}
		count[kindKey{g, t.cpu}]++
		models[g] = t.models
	}
	// Most frequent first; equals in a fixed order, since map order is random.
	kinds := make([]kindKey, 0, len(count))
	for k := range count {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b kindKey) int {
		return cmp.Or(cmp.Compare(count[b], count[a]), cmp.Compare(a.g.gpus, b.g.gpus),
			cmp.Compare(a.g.milli, b.g.milli), cmp.Compare(a.cpu, b.cpu), strings.Compare(a.g.models, b.g.models))
	})
	kept := 0
	for i, k := range kinds {
		if float64(kept) >= typicalShare*float64(len(tasks)) {
			kinds = kinds[:i]
			break
		}
		kept += count[k]
	}
	byGroup := map[groupKey][]kindKey{}
	for _, k := range kinds {
		byGroup[k.g] = append(byGroup[k.g], k)
	}
	m := &taskMix{}
	for g, kinds := range byGroup {
		slices.SortFunc(kinds, func(a, b kindKey) int { return cmp.Compare(a.cpu, b.cpu) })
		mg := mixGroup{gpus: g.gpus, milli: g.milli, models: models[g]}
		for _, k := range kinds {
			mg.share += float64(count[k]) / float64(kept)
			mg.cpu = append(mg.cpu, k.cpu)
			mg.upTo = append(mg.upTo, mg.share)
		}
		m.groups = append(m.groups, mg)
	}
	// Map order is random; sums of floats depend on order.
	slices.SortFunc(m.groups, func(a, b mixGroup) int {
		if a.gpus != b.gpus {
			return a.gpus - b.gpus
		}
		if a.milli != b.milli {
			return a.milli - b.milli
		}
		return strings.Compare(strings.Join(a.models, "|"), strings.Join(b.models, "|"))
	})
	return m
}

// frag is the node's expected fragmentation in milli-GPU (FGD's F_n(M)): for each kind of
// task, the free GPU capacity of the node that a task of that kind could not use, weighted
// by the kind's share of the mix. For a task the node cannot take at all (too little CPU,
// too few GPUs with room, a model it does not accept, or no GPU wanted) all of the node's
// free GPU capacity counts; otherwise the free capacity of each GPU with less room than the
// task needs on one GPU.
func (m *taskMix) frag(n *fillNode) float64 {
	free := gpuFreeTotal(n.gpuFree)
	if free == 0 {
		return 0
	}
	var f float64
	for i := range m.groups {
		g := &m.groups[i]
		if g.gpus == 0 || (len(g.models) > 0 && !slices.Contains(g.models, n.model)) {
			f += g.share * float64(free)
			continue
		}
		// Share of the group whose CPU the node has.
		k, _ := slices.BinarySearch(g.cpu, n.cpuFree+1)
		cpuOK := 0.0
		if k > 0 {
			cpuOK = g.upTo[k-1]
		}
		unusable := free
		if gpusWith(n.gpuFree, g.milli) >= g.gpus {
			unusable = 0
			for _, fg := range n.gpuFree {
				if fg < g.milli {
					unusable += int64(fg)
				}
			}
		}
		f += cpuOK*float64(unusable) + (g.share-cpuOK)*float64(free)
	}
	return f
}
