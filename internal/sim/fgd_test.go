package sim

import (
	"math"
	"reflect"
	"testing"
)

// The mix of these tests: half the tasks want half a GPU, half a whole GPU; neither needs
// CPU. By hand, for a node with GPUs free [1000, 300]: a half-GPU task can use GPU 0 and
// not GPU 1 (300 unusable), a whole-GPU task likewise, so F = 0.5×300 + 0.5×300 = 300.
var (
	halfGPU  = task{gpus: 1, milli: 500}
	wholeGPU = task{gpus: 1, milli: 1000}
)

func handMix() *taskMix { return newTaskMix([]task{halfGPU, wholeGPU}) }

func node(cpu int64, free ...int) *fillNode {
	return &fillNode{model: "T4", cpuFree: cpu, memFree: 1 << 20, gpuFree: free}
}

func TestFrag(t *testing.T) {
	mix := handMix()
	for _, tc := range []struct {
		name string
		n    *fillNode
		want float64
	}{
		{"one free GPU and 300 milli", node(8000, 1000, 300), 300},
		// Both GPUs take a half; the whole GPU can go on GPU 1, GPU 0's 600 are lost to it.
		{"600 and a free GPU", node(8000, 600, 1000), 300},
		{"nothing free", node(8000, 0, 0), 0},
		// No GPU has a whole one: all 1100 free are lost to whole-GPU tasks.
		{"600 and 500", node(8000, 600, 500), 550},
	} {
		if got := mix.frag(tc.n); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: frag %v, want %v", tc.name, got, tc.want)
		}
	}

	// A task the node lacks CPU for cannot use any of its GPUs: here half the mix needs 2
	// CPUs, and a node with 1 CPU free loses all 2000 milli to it.
	cpuMix := newTaskMix([]task{{gpus: 1, milli: 1000, cpu: 2000}, wholeGPU})
	if got := cpuMix.frag(node(1000, 1000, 1000)); got != 1000 {
		t.Errorf("CPU-short node: frag %v, want 1000", got)
	}
	// CPU-only tasks use no GPU: all free GPU capacity counts for them.
	cpuOnly := newTaskMix([]task{{cpu: 1000}, wholeGPU})
	if got := cpuOnly.frag(node(8000, 1000, 1000)); got != 1000 {
		t.Errorf("with CPU-only tasks: frag %v, want 1000", got)
	}
	// A task whose models exclude the node's cannot use it.
	other := newTaskMix([]task{{gpus: 1, milli: 1000, models: []string{"A100"}}})
	if got := other.frag(node(8000, 1000)); got != 1000 {
		t.Errorf("other model: frag %v, want 1000", got)
	}
}

// TestPlacements: a half-GPU task and two nodes, n = [1000, 300] and m = [600, 1000].
// FGD: on n it takes GPU 0 → [500, 300], F 300 → 550 (+250, score ⌊100·σ(−0.25)⌋ = 43); on
// m GPU 0 → [100, 1000], F 300 → 100 (−200, score ⌊100·σ(0.2)⌋ = 54), GPU 1 → [600, 500],
// F → 550 (+250, 43): m, GPU 0; the cost is the score negated plus the GPU capacity the
// node keeps free over the largest node's plus one (2001 milli), the tie-break. Best-fit: n keeps 800
// milli, m 1100: n. Packing: m's GPU 0 is partly used, n would need its free GPU 0: m.
func TestPlacements(t *testing.T) {
	for growth, want := range map[float64]float64{0: 50, 250: 43, -200: 54, 1e6: 0, -1e6: 100} {
		if got := fgdScore(growth); got != want {
			t.Errorf("fgdScore(%v) = %v, want %v", growth, got, want)
		}
	}
	mix := handMix()
	c := &Cluster{Nodes: []NodeSpec{{GPUs: 2, CPUs: 8}, {GPUs: 2, CPUs: 8}}}
	fgd, _ := placementFor(PlacementFGD, mix, c)
	if cost, gpus := fgd.rank(node(8000, 1000, 300), halfGPU); cost != -43+800.0/2001 || !reflect.DeepEqual(gpus, []int{0}) {
		t.Errorf("fgd on n: %v %v, want -43+800/2001 [0]", cost, gpus)
	}
	if cost, gpus := fgd.rank(node(8000, 600, 1000), halfGPU); cost != -54+1100.0/2001 || !reflect.DeepEqual(gpus, []int{0}) {
		t.Errorf("fgd on m: %v %v, want -54+1100/2001 [0]", cost, gpus)
	}
	for _, tc := range []struct {
		p    Placement
		node int
		n, m []int
	}{
		{PlacementFGD, 1, []int{1000, 300}, []int{100, 1000}},
		{PlacementBestFit, 0, []int{500, 300}, []int{600, 1000}},
		{PlacementPacking, 1, []int{1000, 300}, []int{100, 1000}},
	} {
		pl, err := placementFor(tc.p, mix, c)
		if err != nil {
			t.Fatal(err)
		}
		nodes := []fillNode{*node(8000, 1000, 300), *node(8000, 600, 1000)}
		if !placeGang(nodes, halfGPU, 1, pl) {
			t.Fatalf("%s: not placed", tc.p)
		}
		if !reflect.DeepEqual(nodes[0].gpuFree, tc.n) || !reflect.DeepEqual(nodes[1].gpuFree, tc.m) {
			t.Errorf("%s: n %v, m %v; want n %v, m %v", tc.p, nodes[0].gpuFree, nodes[1].gpuFree, tc.n, tc.m)
		}
	}
	if _, err := placementFor("worstfit", mix, c); err == nil {
		t.Error("an unknown placement was accepted")
	}
}

// TestPlaceGang: whole GPUs go on free GPUs only; a gang takes distinct nodes or nothing.
func TestPlaceGang(t *testing.T) {
	pl, _ := placementFor(PlacementBestFit, handMix(), &Cluster{Nodes: []NodeSpec{{GPUs: 2, CPUs: 8}}})
	nodes := []fillNode{*node(8000, 500, 1000), *node(8000, 1000, 1000)}
	two := task{gpus: 2, milli: 1000}
	if !placeGang(nodes, two, 1, pl) || !reflect.DeepEqual(nodes[1].gpuFree, []int{0, 0}) {
		t.Errorf("2 whole GPUs: %v %v", nodes[0].gpuFree, nodes[1].gpuFree)
	}
	nodes = []fillNode{*node(8000, 1000, 1000), *node(8000, 500, 1000)}
	if placeGang(nodes, two, 2, pl) || !reflect.DeepEqual(nodes[0].gpuFree, []int{1000, 1000}) {
		t.Errorf("a gang of 2 nodes × 2 GPUs with one node able: placed, or left %v", nodes[0].gpuFree)
	}
}

// TestFGDTieBreak: a whole GPU on a 4-GPU node or a 2-GPU node, both free, leaves nothing
// fragmented either way (score 50 both): the 2-GPU node, left with less free, takes it
// though it comes second. Between two like nodes the first takes it.
func TestFGDTieBreak(t *testing.T) {
	c := &Cluster{Nodes: []NodeSpec{{GPUs: 4, CPUs: 8}, {GPUs: 2, CPUs: 8}}}
	fgd, _ := placementFor(PlacementFGD, handMix(), c)
	nodes := []fillNode{*node(8000, 1000, 1000, 1000, 1000), *node(8000, 1000, 1000)}
	if !placeGang(nodes, wholeGPU, 1, fgd) || !reflect.DeepEqual(nodes[1].gpuFree, []int{0, 1000}) {
		t.Errorf("equal scores: left %v and %v, want the 2-GPU node used", nodes[0].gpuFree, nodes[1].gpuFree)
	}
	nodes = []fillNode{*node(8000, 1000, 1000), *node(8000, 1000, 1000)}
	if !placeGang(nodes, wholeGPU, 1, fgd) || !reflect.DeepEqual(nodes[0].gpuFree, []int{0, 1000}) {
		t.Errorf("like nodes: left %v and %v, want the first used", nodes[0].gpuFree, nodes[1].gpuFree)
	}
}

// TestTypicalKinds: the mix keeps the most frequent kinds until they make up 95% of the
// tasks and renormalises them. Of 18 half-GPU tasks, one CPU-only and one whole-GPU task,
// the half-GPU kind (90%) and then the CPU-only one (fewer GPUs first among equals, 95%)
// are kept, with shares 18/19 and 1/19; the whole-GPU kind is left out. On a node with
// [600, 500] free a half-GPU task fits either GPU, so only the CPU-only share counts:
// 1100/19. Counting the whole-GPU kind too would give 1100×(1+1)/20 = 110.
func TestTypicalKinds(t *testing.T) {
	var tasks []task
	for range 18 {
		tasks = append(tasks, halfGPU)
	}
	tasks = append(tasks, wholeGPU, task{cpu: 1000})
	if got, want := newTaskMix(tasks).frag(node(8000, 600, 500)), 1100.0/19; math.Abs(got-want) > 1e-9 {
		t.Errorf("frag %v, want %v", got, want)
	}
	// At 95% exactly, the rest is left out: 19 half-GPU tasks and one whole-GPU task.
	tasks = append(tasks[:18], halfGPU, wholeGPU)
	if got := newTaskMix(tasks).frag(node(8000, 600, 500)); got != 0 {
		t.Errorf("frag %v with the whole-GPU kind left out, want 0", got)
	}
}
