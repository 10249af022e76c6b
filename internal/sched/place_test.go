package sched

import (
	"reflect"
	"testing"
	"time"
)

func TestPlacement(t *testing.T) {
	cpuNode := Node{Name: "cpu-01", Schedulable: true, CPUs: 32, MemoryMB: 64 << 10}
	sick := gpuNode("gpu-01", "H100", 4)
	sick.GPUs[0].Healthy = false
	drained := gpuNode("gpu-00", "H100", 8)
	drained.Schedulable = false
	small := gpuNode("gpu-09", "H100", 8)
	small.CPUs = 4
	tests := []struct {
		name    string
		snap    *Snapshot
		opts    Options
		want    map[int64]Alloc // job -> its single alloc; jobs not named stay pending
		pending []int64
	}{
		{
			name: "best fit takes the node left with fewest free GPUs",
			snap: snapshot([]Node{gpuNode("gpu-01", "H100", 8), gpuNode("gpu-02", "H100", 8)},
				[]Running{busy(90, "gpu-02", time.Hour, 0, 1, 2, 3, 4)}, job(1, 2, "H100")),
			want: map[int64]Alloc{1: {Node: "gpu-02", GPUIndices: []int{5, 6}, CPUs: 1, MemoryMB: 1024}},
		},
		{
			name: "ties go to the first name",
			snap: snapshot([]Node{gpuNode("gpu-02", "H100", 8), gpuNode("gpu-01", "H100", 8)}, nil, job(1, 1, "H100")),
			want: map[int64]Alloc{1: {Node: "gpu-01", GPUIndices: []int{0}, CPUs: 1, MemoryMB: 1024}},
		},
		{
			name: "worst fit spreads",
			snap: snapshot([]Node{gpuNode("gpu-01", "H100", 8), gpuNode("gpu-02", "H100", 8)},
				[]Running{busy(90, "gpu-01", time.Hour, 0)}, job(1, 1, "H100"), job(2, 1, "H100")),
			opts: Options{Placement: PlacementWorstFit},
			want: map[int64]Alloc{
				1: {Node: "gpu-02", GPUIndices: []int{0}, CPUs: 1, MemoryMB: 1024},
				2: {Node: "gpu-01", GPUIndices: []int{1}, CPUs: 1, MemoryMB: 1024},
			},
		},
		{
			name: "the model must match",
			snap: snapshot([]Node{gpuNode("gpu-01", "A100", 8), gpuNode("gpu-02", "H100", 8)}, nil, job(1, 8, "H100")),
			want: map[int64]Alloc{1: {Node: "gpu-02", GPUIndices: []int{0, 1, 2, 3, 4, 5, 6, 7}, CPUs: 1, MemoryMB: 1024}},
		},
		{
			name: "any model takes the best fit over all models",
			snap: snapshot([]Node{gpuNode("gpu-01", "H100", 8), gpuNode("gpu-02", "A100", 4)}, nil, job(1, 4, "")),
			want: map[int64]Alloc{1: {Node: "gpu-02", GPUIndices: []int{0, 1, 2, 3}, CPUs: 1, MemoryMB: 1024}},
		},
		{
			name: "lowest free indices",
			snap: snapshot([]Node{gpuNode("gpu-01", "H100", 8)}, []Running{busy(90, "gpu-01", time.Hour, 0, 2)}, job(1, 2, "H100")),
			want: map[int64]Alloc{1: {Node: "gpu-01", GPUIndices: []int{1, 3}, CPUs: 1, MemoryMB: 1024}},
		},
		{
			name:    "unhealthy GPUs are not given",
			snap:    snapshot([]Node{sick}, nil, job(1, 3, "H100"), job(2, 1, "H100")),
			want:    map[int64]Alloc{1: {Node: "gpu-01", GPUIndices: []int{1, 2, 3}, CPUs: 1, MemoryMB: 1024}},
			pending: []int64{2},
		},
		{
			name:    "unschedulable nodes take nothing",
			snap:    snapshot([]Node{drained}, nil, job(1, 1, "H100")),
			pending: []int64{1},
		},
		{
			name: "CPU-only jobs prefer nodes without free GPUs",
			snap: snapshot([]Node{gpuNode("gpu-01", "H100", 8), cpuNode}, nil, job(1, 0, "")),
			want: map[int64]Alloc{1: {Node: "cpu-01", CPUs: 1, MemoryMB: 1024}},
		},
		{
			name: "CPUs must be free",
			snap: snapshot([]Node{small, gpuNode("gpu-10", "H100", 8)}, nil,
				func() Job { j := job(1, 1, "H100"); j.Request.CPUs = 8; return j }()),
			want: map[int64]Alloc{1: {Node: "gpu-10", GPUIndices: []int{0}, CPUs: 8, MemoryMB: 1024}},
		},
		{
			name: "placements earlier in the plan count",
			snap: snapshot([]Node{gpuNode("gpu-01", "H100", 8)}, nil, job(1, 6, "H100"), job(2, 4, "H100"), job(3, 2, "H100")),
			want: map[int64]Alloc{
				1: {Node: "gpu-01", GPUIndices: []int{0, 1, 2, 3, 4, 5}, CPUs: 1, MemoryMB: 1024},
				3: {Node: "gpu-01", GPUIndices: []int{6, 7}, CPUs: 1, MemoryMB: 1024},
			},
			pending: []int64{2},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustSchedule(tt.snap, tt.opts)
			got := map[int64]Alloc{}
			for _, pl := range p.Placements {
				if len(pl.Allocs) != 1 {
					t.Fatalf("job %d got %d allocs", pl.JobID, len(pl.Allocs))
				}
				got[pl.JobID] = pl.Allocs[0]
			}
			if tt.want == nil {
				tt.want = map[int64]Alloc{}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("placements:\n got %+v\nwant %+v", got, tt.want)
			}
			var pend []int64
			for _, pj := range p.Pending {
				pend = append(pend, pj.JobID)
			}
			if !reflect.DeepEqual(pend, tt.pending) {
				t.Errorf("pending = %v, want %v", pend, tt.pending)
			}
		})
	}
}

func TestOrder(t *testing.T) {
	at := func(id int64, queue string, submit time.Duration) Job {
		j := job(id, 8, "H100")
		j.Queue, j.SubmitTime = queue, t0.Add(-submit)
		return j
	}
	jobs := []Job{
		at(1, "batch", 3*time.Hour),
		at(2, "train", time.Hour),
		at(3, "urgent", 0),
		at(4, "train", 2*time.Hour),
		at(5, "train", 2*time.Hour),
	}
	jobs[0].Duration, jobs[1].Duration, jobs[2].Duration, jobs[3].Duration, jobs[4].Duration =
		5*time.Minute, time.Minute, 3*time.Hour, 0, 2*time.Minute
	jobs[0].AttainedService, jobs[1].AttainedService, jobs[2].AttainedService, jobs[3].AttainedService, jobs[4].AttainedService =
		100, 0, 50, 10, 0
	tests := []struct {
		order string
		want  []int64 // the first is placed, the rest wait in order
	}{
		{OrderPriority, []int64{3, 4, 5, 2, 1}},
		{OrderFIFO, []int64{1, 4, 5, 2, 3}},
		// job 4's duration is unknown, so its one-hour limit stands in.
		{OrderSJF, []int64{2, 5, 1, 4, 3}},
		// LAS keeps the tier order, and train is not preemptible, so its jobs stay in LAS
		// queue 0 in submit order (las_test.go orders by service).
		{OrderLAS, []int64{3, 4, 5, 2, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.order, func(t *testing.T) {
			p := mustSchedule(snapshot([]Node{gpuNode("gpu-01", "H100", 8)}, nil, jobs...), Options{Order: tt.order})
			got := []int64{p.Placements[0].JobID}
			for _, pj := range p.Pending {
				got = append(got, pj.JobID)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("order = %v, want %v", got, tt.want)
			}
		})
	}
}
