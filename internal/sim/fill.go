package sim

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"
)

// fillSeedStream separates the fill sampler's random stream from the node-failure streams,
// which use the node index.
const fillSeedStream = 1 << 62

// gpuRequest is a job's GPU request in milli-GPU, fractions kept.
func gpuRequest(j Job) int64 {
	if j.GPUMilli > 0 {
		return int64(j.GPUMilli)
	}
	return int64(j.GPUs) * milliGPU
}

// FillWorkload builds the workload of the FGD paper's experiment (Weng et al., ATC'23): the
// jobs of w, each once, topped up with jobs drawn at random with replacement when they
// request less than fill times the cluster's GPU capacity (1.3 in the paper), in a random
// order, cut at the job whose GPU request reaches that target. Requests are counted in
// milli-GPU, fractions kept. The jobs arrive one per second and never end; RunFill places
// them. The time columns of the trace play no part, and the jobs depend only on w and seed,
// so every placement sees the same ones.
func FillWorkload(w *Workload, fill float64, seed uint64) (*Workload, error) {
	if !(fill > 0) || fill > 100 {
		return nil, errors.New("fill must be above 0 and at most 100")
	}
	var total int64
	for _, j := range w.Jobs {
		total += gpuRequest(j)
	}
	if total == 0 {
		return nil, errors.New("fill needs jobs that request GPUs")
	}
	target := int64(math.Ceil(fill * float64(w.Cluster.GPUs()) * milliGPU))
	r := rand.New(rand.NewPCG(seed, fillSeedStream))
	order := make([]int, len(w.Jobs))
	for i := range order {
		order[i] = i
	}
	for sum := total; sum < target; {
		k := r.IntN(len(w.Jobs))
		order = append(order, k)
		sum += gpuRequest(w.Jobs[k])
	}
	r.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })

	out := &Workload{Trace: w.Trace, Cluster: w.Cluster, Skipped: w.Skipped, fill: fill}
	base := time.Unix(0, 0).UTC()
	if len(w.Jobs) > 0 {
		base = w.Jobs[0].Submit
	}
	var requested int64
	for _, k := range order {
		if requested >= target {
			break
		}
		j := w.Jobs[k]
		j.ID = int64(len(out.Jobs) + 1)
		j.Submit = base.Add(time.Duration(len(out.Jobs)) * time.Second)
		j.Duration, j.TimeLimit = 0, 0
		out.Jobs = append(out.Jobs, j)
		out.shapes = append(out.shapes, w.shapes[k])
		requested += gpuRequest(j)
	}
	return out, nil
}

// fillTask is the request of one job of a fill workload on each of its nodes.
func fillTask(j Job, sh shape) task {
	t := task{gpus: sh.gpusPerNode, milli: milliGPU, cpu: int64(sh.cpus) * 1000, mem: sh.memoryMB, models: j.GPUModels}
	if j.GPUMilli > 0 {
		t.milli = j.GPUMilli
	}
	if j.CPUMilli > 0 && sh.nodes == 1 {
		t.cpu = j.CPUMilli
	}
	if j.GPUModel != "" {
		t.models = []string{j.GPUModel}
	}
	if t.gpus == 0 {
		t.milli = 0
	}
	return t
}

// RunFill places the jobs of a fill workload (FillWorkload) one by one, in arrival order,
// once per placement, the placements side by side. A job is placed at once or never: jobs
// never end, so nothing would make room. progress, if set, is called with the milli-GPU
// each arriving job requests.
func RunFill(ctx context.Context, w *Workload, placements []Placement, progress func(milli int64)) ([]*Result, error) {
	tasks := make([]task, len(w.Jobs))
	for i, j := range w.Jobs {
		tasks[i] = fillTask(j, w.shapes[i])
	}
	mix := newTaskMix(tasks)
	placers := make([]placer, len(placements))
	for i, p := range placements {
		pl, err := placementFor(p, mix, w.Cluster)
		if err != nil {
			return nil, err
		}
		placers[i] = pl
	}
	results := make([]*Result, len(placements))
	errs := make([]error, len(placements))
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for i := range placements {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i], errs[i] = fillOnce(ctx, w, tasks, placers[i], progress)
			if results[i] != nil {
				results[i].Policy = string(placements[i])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return results, nil
}

// fillOnce is one placement's run. Result fields: Jobs arrived, Unfinished placed (they
// never end), NeverStarted found no room, FillAlloc100 and FillAllocEnd the allocation.
func fillOnce(ctx context.Context, w *Workload, tasks []task, p placer, progress func(int64)) (*Result, error) {
	nodes := make([]fillNode, len(w.Cluster.Nodes))
	for i, n := range w.Cluster.Nodes {
		nodes[i] = fillNode{model: n.GPUModel, cpuFree: int64(n.CPUs) * 1000, memFree: n.MemoryMB, gpuFree: make([]int, n.GPUs)}
		for g := range nodes[i].gpuFree {
			nodes[i].gpuFree[g] = milliGPU
		}
	}
	capacity := int64(w.Cluster.GPUs()) * milliGPU
	r := &Result{Jobs: len(tasks), FillAlloc100: math.NaN(), FillAllocEnd: math.NaN(), AllocRatio: math.NaN(), Slowdown: math.NaN()}
	var arrived, allocated int64
	for i, t := range tasks {
		if i%256 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if placeGang(nodes, t, w.shapes[i].nodes, p) {
			r.Unfinished++
			allocated += t.gpuMilli() * int64(w.shapes[i].nodes)
		} else {
			r.NeverStarted++
		}
		req := gpuRequest(w.Jobs[i])
		arrived += req
		if progress != nil {
			progress(req)
		}
		if math.IsNaN(r.FillAlloc100) && arrived >= capacity && capacity > 0 {
			r.FillAlloc100 = float64(allocated) / float64(capacity)
		}
	}
	if capacity > 0 {
		r.FillAllocEnd = float64(allocated) / float64(capacity)
	}
	return r, nil
}

// placeGang places a task on parts distinct nodes, each taking t, the cheapest node first,
// all or nothing.
func placeGang(nodes []fillNode, t task, parts int, p placer) bool {
	type taken struct {
		node int
		gpus []int
	}
	var done []taken
	used := map[int]bool{}
	for range parts {
		best, bestGPUs, bestCost := -1, []int(nil), 0.0
		for k := range nodes {
			n := &nodes[k]
			if used[k] || !n.fits(t) {
				continue
			}
			cost, gpus := p.rank(n, t)
			if best < 0 || cost < bestCost {
				best, bestGPUs, bestCost = k, gpus, cost
			}
		}
		if best < 0 {
			for _, d := range done {
				nodes[d.node].give(t, d.gpus)
			}
			return false
		}
		nodes[best].take(t, bestGPUs)
		used[best] = true
		done = append(done, taken{best, bestGPUs})
	}
	return true
}
