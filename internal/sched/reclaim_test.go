package sched

import (
	"testing"
	"time"
)

// A job that names no GPU model is in quota when its team's any-model quota has room, and
// so may reclaim GPUs that another team borrows (the server's usual case: most jobs do not
// name a model).
func TestAnyModelJobReclaimsBorrowedGPUs(t *testing.T) {
	now := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	s := snapshot([]Node{gpuNode("n1", "H100", 8)}, []Running{{
		ID: 1, Queue: "train", Team: "vision", Start: now.Add(-15 * time.Minute), End: now.Add(9 * time.Hour), Borrowing: true,
		Allocs: []Alloc{{Node: "n1", GPUIndices: []int{0, 1, 2, 3, 4, 5, 6, 7}}},
	}}, Job{ID: 2, Queue: "train", Team: "nlp", SubmitTime: now, TimeLimit: time.Hour, Request: Request{GPUs: 4}})
	s.Queues = map[string]Queue{"train": {Name: "train", Tier: 40}}
	s.Teams = map[string]Team{
		"vision": {Name: "vision", Weight: 1, Quota: map[string]Quota{"": {Guaranteed: 4, Limit: 8}}},
		"nlp":    {Name: "nlp", Weight: 1, Quota: map[string]Quota{"": {Guaranteed: 4, Limit: 8}}},
	}
	p := Schedule(s, now)
	if len(p.Preemptions) != 1 || p.Preemptions[0].JobID != 1 || p.Preemptions[0].ForJob != 2 {
		t.Fatalf("preemptions %+v; want job 1 reclaimed for job 2", p.Preemptions)
	}
	if pj, ok := pendingOf(p, 2); !ok || pj.Reason.Code != ReasonWaitingForPreemption {
		t.Errorf("job 2: %+v; want WaitingForPreemption", pj.Reason)
	}
}
