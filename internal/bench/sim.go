package bench

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/rotahq/rota/internal/sim"
)

// simPolicy is the policy replayed: rota's default, the one a cluster runs.
const simPolicy = "default"

func simBenchmarks(quick bool) []benchmark {
	jobs, benchtime := 100000, "1s"
	if quick {
		jobs, benchtime = 3000, "1x"
	}
	return []benchmark{{suite: "sim", name: fmt.Sprintf("replay/%djobs/%s", jobs, simPolicy), benchtime: benchtime,
		run: func(ctx context.Context, bt string) (runResult, error) {
			return benchReplay(ctx, bt, jobs)
		}}}
}

// benchReplay replays a generated trace of n jobs once per operation. Loading and checking
// the trace is not timed.
func benchReplay(ctx context.Context, benchtime string, n int) (runResult, error) {
	tr, err := sim.ReadTrace(bytes.NewReader(phillyLikeTrace(rand.New(rand.NewPCG(3, 4)), n)), "philly", true)
	if err != nil {
		return runResult{}, fmt.Errorf("generated trace: %w", err)
	}
	w, err := sim.Prepare(tr, sim.PhillyCluster(), true)
	if err != nil {
		return runResult{}, fmt.Errorf("generated trace: %w", err)
	}
	return measure(benchtime, func(b *B) error {
		events, jobs, plans := 0, 0, 0
		for b.Loop() {
			res, err := sim.Run(ctx, w, sim.DefaultConfig(), []string{simPolicy})
			if err != nil {
				return err
			}
			events += res[0].Events
			jobs += res[0].Jobs
			plans += res[0].Plans
		}
		b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
		b.ReportMetric(float64(jobs)/b.Elapsed().Seconds(), "jobs/s")
		b.ReportMetric(float64(plans)/float64(b.N), "plans/op")
		return nil
	})
}

// phillyLikeTrace writes n jobs in the Philly trace format for the default Philly cluster
// (300 nodes of 8 GPUs): 1 GPU for most jobs, up to 16 (a gang of two nodes) for a few;
// durations log-uniform from a minute to two days; Poisson arrivals at the rate that keeps
// about 80% of the GPUs busy on average; eight virtual clusters (teams) of unequal size.
func phillyLikeTrace(r *rand.Rand, n int) []byte {
	const (
		minDur, maxDur = 60.0, 2 * 86400.0
		load           = 0.8
		clusterGPUs    = 300 * 8
	)
	gpuChoices := []struct {
		gpus int
		p    float64
	}{{1, 0.70}, {2, 0.10}, {4, 0.10}, {8, 0.08}, {16, 0.02}}
	meanGPUs := 0.0
	for _, c := range gpuChoices {
		meanGPUs += float64(c.gpus) * c.p
	}
	meanDur := (maxDur - minDur) / math.Log(maxDur/minDur)
	meanGap := meanGPUs * meanDur / (load * clusterGPUs)

	var buf bytes.Buffer
	buf.WriteString("timestamp,duration,num_gpus,gpu_time,cluster\n")
	at := time.Date(2017, 10, 1, 0, 0, 0, 0, time.UTC)
	for range n {
		at = at.Add(time.Duration(r.ExpFloat64() * meanGap * float64(time.Second)))
		dur := math.Round(minDur * math.Exp(r.Float64()*math.Log(maxDur/minDur)))
		gpus, x := 1, r.Float64()
		for _, c := range gpuChoices {
			if x < c.p {
				gpus = c.gpus
				break
			}
			x -= c.p
		}
		vc := min(r.IntN(8), r.IntN(8)) // vc0 largest, vc7 smallest
		fmt.Fprintf(&buf, "%s,%.0f,%d,%.0f,vc%d\n", at.Format(time.DateTime), dur, gpus, dur*float64(gpus), vc)
	}
	return buf.Bytes()
}
