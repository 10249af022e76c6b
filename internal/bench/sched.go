package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/rotahq/rota/internal/sched"
)

// t0 is the snapshot's "now"; any fixed instant does, the core reads no clock.
var t0 = time.Date(2025, 1, 6, 9, 0, 0, 0, time.UTC)

func schedBenchmarks(quick bool) []benchmark {
	type size struct {
		nodes, pending int
		policy         bool
	}
	sizes := []size{{1000, 10000, false}, {1000, 10000, true}, {10000, 10000, true}, {10000, 100000, true}}
	idle, benchtime := 1000, "1s"
	if quick {
		sizes = []size{{100, 1000, false}, {100, 1000, true}, {1000, 1000, true}, {1000, 10000, true}}
		idle, benchtime = 100, "100ms"
	}
	var list []benchmark
	for _, sz := range sizes {
		name := fmt.Sprintf("plan/%dnodes/%dpending", sz.nodes, sz.pending)
		if sz.policy {
			name += "/policy"
		}
		list = append(list, benchmark{suite: "sched", name: name, benchtime: benchtime,
			run: func(_ context.Context, bt string) (runResult, error) {
				return benchPlan(bt, genSnapshot(rand.New(rand.NewPCG(1, 2)), sz.nodes, sz.pending, 0.5, sz.policy))
			}})
	}
	list = append(list, benchmark{suite: "sched", name: fmt.Sprintf("plan/%dnodes/1job-idle", idle), benchtime: benchtime,
		run: func(_ context.Context, bt string) (runResult, error) {
			s := genSnapshot(rand.New(rand.NewPCG(1, 2)), idle, 0, 0, false)
			s.Pending = []sched.Job{{ID: 1, Queue: "train", Team: "vision", User: "ada", SubmitTime: t0, TimeLimit: time.Hour,
				Request: sched.Request{GPUs: 4, GPUModel: "H100", CPUs: 1, MemoryMB: 1024}}}
			return benchPlan(bt, s)
		}})
	return list
}

// benchPlan plans s once per operation under the default policy. The snapshot is not
// changed by planning, so every cycle does the same work.
func benchPlan(benchtime string, s *sched.Snapshot) (runResult, error) {
	return measure(benchtime, func(b *B) error {
		placed := 0
		for b.Loop() {
			p, err := sched.ScheduleWith(s, t0, sched.Options{})
			if err != nil {
				return err
			}
			placed += len(p.Placements)
		}
		b.ReportMetric(b.Elapsed().Seconds()*1000/float64(b.N), "cycle-ms")
		b.ReportMetric(float64(placed)/b.Elapsed().Seconds(), "placements/s")
		b.ReportMetric(float64(placed)/float64(b.N), "placed/op")
		return nil
	})
}

// genSnapshot builds a random but realistic snapshot: nodes of two models with 8 GPUs (some
// with 4, a few CPU-only, some unhealthy GPUs and unschedulable nodes), labelled by rack,
// switch and pool; about busyFrac of the GPUs held by running jobs with limits up to a day;
// and pending jobs of 1, 2, 4 or 8 GPUs (a few CPU-only or of any model) in four queues.
// policy adds what makes the policy work: gangs, team quotas, urgent and inference jobs,
// and running work that is preemptible, borrowing or already stopping.
func genSnapshot(r *rand.Rand, nodes, pending int, busyFrac float64, policy bool) *sched.Snapshot {
	s := &sched.Snapshot{Queues: map[string]sched.Queue{
		"interactive": {Name: "interactive", Tier: 2},
		"train":       {Name: "train", Tier: 1},
		"batch":       {Name: "batch", Tier: 0, Preemptible: true},
		"urgent":      {Name: "urgent", Tier: 3},
		"inference":   {Name: "inference", Tier: 1, NeverPreempt: true},
	}}
	models := []string{"H100", "A100"}
	teams := []string{"vision", "nlp", "speech", "robotics"}
	for i := range nodes {
		name := fmt.Sprintf("node-%05d", i)
		n := sched.Node{Name: name, Schedulable: true, CPUs: 64, MemoryMB: 512 << 10, DriverVersion: "550",
			Labels: map[string]string{"rack": fmt.Sprintf("r%d", i/16), "switch": fmt.Sprintf("s%d", i/64), "pool": "train"}}
		for g := range 8 {
			n.GPUs = append(n.GPUs, sched.GPU{Index: g, ID: fmt.Sprintf("%s-%d", name, g), Model: models[i%2], MemoryMB: 80 << 10, Healthy: true})
		}
		if i%20 == 5 {
			n.Labels["pool"] = "inference"
		}
		switch {
		case i%50 == 7:
			n.GPUs = nil
		case i%25 == 3:
			n.GPUs = n.GPUs[:4]
		case i%40 == 11:
			n.GPUs[r.IntN(8)].Healthy = false
		case i%100 == 42:
			n.Schedulable = false
		}
		s.Nodes = append(s.Nodes, n)
	}

	id := int64(1)
	for _, n := range s.Nodes {
		var free []int
		for _, g := range n.GPUs {
			if g.Healthy {
				free = append(free, g.Index)
			}
		}
		for len(free) > 0 && r.Float64() < busyFrac {
			k := min(len(free), []int{1, 2, 4, 8}[r.IntN(4)])
			run := sched.Running{ID: id, Queue: "train", Team: teams[id%4], Start: t0.Add(-time.Duration(r.IntN(3600)) * time.Second),
				Allocs: []sched.Alloc{{Node: n.Name, GPUIndices: slices.Clone(free[:k]), CPUs: 4, MemoryMB: 16 << 10}}}
			if r.IntN(10) > 0 {
				run.End = t0.Add(time.Duration(1+r.IntN(24*60)) * time.Minute)
			}
			if policy {
				run.Queue = []string{"train", "batch", "inference", "batch"}[r.IntN(4)]
				run.Borrowing = r.IntN(4) == 0
				run.Preempting = r.IntN(30) == 0
				if r.IntN(2) == 0 {
					run.LastCheckpoint = t0.Add(-time.Duration(r.IntN(3600)) * time.Second)
				}
			}
			free = free[k:]
			s.Running = append(s.Running, run)
			id++
		}
	}

	qs := []string{"interactive", "train", "train", "batch"}
	for range pending {
		j := sched.Job{ID: id, Queue: qs[r.IntN(len(qs))], Team: teams[id%4], User: "u",
			SubmitTime: t0.Add(-time.Duration(r.IntN(86400)) * time.Second),
			TimeLimit:  time.Duration(10+r.IntN(24*60)) * time.Minute,
			Request: sched.Request{GPUs: []int{1, 2, 4, 8}[r.IntN(4)], GPUModel: models[r.IntN(2)],
				CPUs: 1 + r.IntN(8), MemoryMB: int64(1+r.IntN(64)) << 10}}
		switch x := r.IntN(20); {
		case x == 0:
			j.Request.GPUs, j.Request.GPUModel = 0, ""
		case x == 1:
			j.Request.GPUModel = ""
		case x == 2 && policy:
			j.Request.Nodes, j.Request.GPUsPerNode = 2+r.IntN(3), 8
			j.Request.GPUs = j.Request.Nodes * 8
		}
		if policy && r.IntN(10) == 0 {
			j.Queue = []string{"urgent", "inference"}[r.IntN(2)]
		}
		s.Pending = append(s.Pending, j)
		id++
	}

	if policy {
		inf := s.Queues["inference"]
		inf.Pools = []string{"inference"}
		s.Queues["inference"] = inf
		gpus := nodes * 8
		s.Teams = map[string]sched.Team{
			"vision":   {Name: "vision", Weight: 2, Usage: 5e6, Quota: map[string]sched.Quota{"H100": {Guaranteed: gpus / 8, Limit: gpus / 3}}},
			"nlp":      {Name: "nlp", Weight: 1, Usage: 1e6, Quota: map[string]sched.Quota{"": {Guaranteed: gpus / 8, Limit: gpus / 2}}},
			"speech":   {Name: "speech", Weight: 1, Usage: 2e6, Quota: map[string]sched.Quota{"A100": {Guaranteed: gpus / 16, Limit: gpus / 16}}},
			"robotics": {Name: "robotics", Weight: 1},
		}
	}
	return s
}
