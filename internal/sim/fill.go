package sim

import (
	"errors"
	"math/rand/v2"
	"time"
)

// fillSeedStream separates the fill sampler's random stream from the node-failure streams,
// which use the node index.
const fillSeedStream = 1 << 62

// FillWorkload builds the workload of the FGD paper's experiment (Weng et al., ATC'23): jobs
// drawn at random, with replacement, from w until their GPU requests add up to fill times
// the cluster's GPUs (1.3 in the paper), submitted one per second in the order drawn, and
// never ending. Replayed, it measures how much of the cluster a policy can allocate as
// demand passes capacity (Result.FillAlloc100, FillAllocEnd); the time columns of the trace
// play no part. The draw depends only on w and seed, so every policy sees the same jobs.
func FillWorkload(w *Workload, fill float64, seed uint64) (*Workload, error) {
	if !(fill > 0) || fill > 100 {
		return nil, errors.New("fill must be above 0 and at most 100")
	}
	gpuJobs := 0
	for _, j := range w.Jobs {
		if j.GPUs > 0 {
			gpuJobs++
		}
	}
	if gpuJobs == 0 {
		return nil, errors.New("fill needs jobs that request GPUs")
	}
	target := int(fill * float64(w.Cluster.GPUs()))
	r := rand.New(rand.NewPCG(seed, fillSeedStream))
	out := &Workload{Trace: w.Trace, Cluster: w.Cluster, Skipped: w.Skipped, fill: fill}
	base := time.Unix(0, 0).UTC()
	if len(w.Jobs) > 0 {
		base = w.Jobs[0].Submit
	}
	for requested := 0; requested < target; {
		k := r.IntN(len(w.Jobs))
		j := w.Jobs[k]
		j.ID = int64(len(out.Jobs) + 1)
		j.Submit = base.Add(time.Duration(len(out.Jobs)) * time.Second)
		j.Duration, j.TimeLimit = 0, 0
		out.Jobs = append(out.Jobs, j)
		out.shapes = append(out.shapes, w.shapes[k])
		requested += j.GPUs
	}
	return out, nil
}
