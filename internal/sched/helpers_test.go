package sched

import (
	"fmt"
	"time"
)

var t0 = time.Date(2025, 1, 6, 9, 0, 0, 0, time.UTC)

// gpuNode is a schedulable node with n healthy GPUs of one model, 64 CPUs and 512 GB.
func gpuNode(name, model string, n int) Node {
	nd := Node{Name: name, Schedulable: true, CPUs: 64, MemoryMB: 512 << 10, DriverVersion: "550"}
	for i := range n {
		nd.GPUs = append(nd.GPUs, GPU{Index: i, ID: fmt.Sprintf("%s-%d", name, i), Model: model, MemoryMB: 80 << 10, Healthy: true})
	}
	return nd
}

// job is a pending job in queue "train", submitted id seconds after t0, with a one-hour
// limit, one CPU and 1 GB.
func job(id int64, gpus int, model string) Job {
	return Job{
		ID: id, Queue: "train", Team: "vision", User: "ada",
		SubmitTime: t0.Add(time.Duration(id) * time.Second), TimeLimit: time.Hour,
		Request: Request{GPUs: gpus, GPUModel: model, CPUs: 1, MemoryMB: 1024},
	}
}

// busy is a running job holding GPU indices of a node until end after t0 (0: unlimited).
func busy(id int64, node string, end time.Duration, idx ...int) Running {
	r := Running{ID: id, Queue: "train", Team: "vision", Start: t0.Add(-time.Hour),
		Allocs: []Alloc{{Node: node, GPUIndices: idx, CPUs: 1, MemoryMB: 1024}}}
	if end != 0 {
		r.End = t0.Add(end)
	}
	return r
}

func queues() map[string]Queue {
	return map[string]Queue{
		"interactive": {Name: "interactive", Tier: 2},
		"train":       {Name: "train", Tier: 1},
		"batch":       {Name: "batch", Tier: 0, Preemptible: true},
		"urgent":      {Name: "urgent", Tier: 3},
		"inference":   {Name: "inference", Tier: 1, NeverPreempt: true},
	}
}

func snapshot(nodes []Node, running []Running, pending ...Job) *Snapshot {
	return &Snapshot{Nodes: nodes, Queues: queues(), Running: running, Pending: pending}
}

func mustSchedule(s *Snapshot, opts Options) Plan {
	p, err := ScheduleWith(s, t0, opts)
	if err != nil {
		panic(err)
	}
	return p
}

func placementOf(p Plan, id int64) (Placement, bool) {
	for _, pl := range p.Placements {
		if pl.JobID == id {
			return pl, true
		}
	}
	return Placement{}, false
}

func pendingOf(p Plan, id int64) (PendingJob, bool) {
	for _, pj := range p.Pending {
		if pj.JobID == id {
			return pj, true
		}
	}
	return PendingJob{}, false
}
