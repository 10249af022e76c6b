package sim

import (
	"context"
	"testing"
	"time"
)

// On one node of 8 GPUs, two long trainings take the node and twenty short experiments
// arrive behind them. FIFO (even with backfill: the node is full) makes every experiment
// wait for the trainings; LAS, knowing no duration, lets the experiments preempt the
// trainings once those have sunk to a lower LAS queue, and the trainings still finish.
func TestLASBeatsFIFOWithoutDurations(t *testing.T) {
	c, err := ParseCluster([]byte(`
nodes:
  - {name: n, gpus: 8, gpu_model: V100, cpus: 64, memory_mb: 524288}
queues:
  - {name: batch, tier: 0, preemptible: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2025, 1, 6, 9, 0, 0, 0, time.UTC)
	tr := &Trace{Format: "synthetic"}
	add := func(at time.Duration, gpus int, d time.Duration) {
		tr.Jobs = append(tr.Jobs, Job{Line: len(tr.Jobs) + 2, Submit: t0.Add(at), Duration: d, GPUs: gpus, CPUs: 1, MemoryMB: 1024})
	}
	add(0, 8, 10*time.Hour)
	add(time.Minute, 8, 6*time.Hour)
	for i := range 20 {
		add(20*time.Minute+time.Duration(i)*3*time.Minute, 1+i%2, 10*time.Minute)
	}
	w, err := Prepare(tr, c, true)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), w, DefaultConfig(), []string{"fifo", "las"})
	if err != nil {
		t.Fatal(err)
	}
	fifo, las := res[0], res[1]
	t.Logf("mean JCT: fifo %v, las %v; las preemptions %d (%.1f GPU-hours lost)",
		fifo.JCT.Mean, las.JCT.Mean, las.Preemptions, las.PreemptionGPUHours)
	if las.Succeeded != las.Jobs || fifo.Succeeded != fifo.Jobs {
		t.Fatalf("succeeded: fifo %d, las %d of %d", fifo.Succeeded, las.Succeeded, las.Jobs)
	}
	if las.Preemptions == 0 {
		t.Error("LAS never preempted")
	}
	if las.JCT.Mean*3 > fifo.JCT.Mean {
		t.Errorf("LAS mean JCT %v is not a third of FIFO's %v", las.JCT.Mean, fifo.JCT.Mean)
	}
}
