package cli

import (
	"slices"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// An array the server summed up (arrays=collapse) is drawn as the same line as its jobs
// listed one by one, and never held back for a next page.
func TestQueueDrawsSummedUpArrays(t *testing.T) {
	now := testNow
	start, est := now.Add(-90*time.Minute), now.Add(2*time.Hour)
	idx := func(i int) *int { return &i }
	elems := []api.Job{
		{ID: 7, ArrayID: 7, ArrayIndex: idx(0), Spec: api.JobSpec{Name: "sweep", User: "ana", Queue: "train", GPUs: 2}, State: api.StateRunning, StartTime: &start, Nodes: []string{"n2"}},
		{ID: 8, ArrayID: 7, ArrayIndex: idx(1), Spec: api.JobSpec{Name: "sweep", User: "ana", Queue: "train", GPUs: 2}, State: api.StateRunning, StartTime: &start, IdleSince: &start, Nodes: []string{"n1"}},
		{ID: 9, ArrayID: 7, ArrayIndex: idx(5), Spec: api.JobSpec{Name: "sweep", User: "ana", Queue: "train", GPUs: 2}, State: api.StatePending, SubmitTime: now.Add(-3 * time.Hour), EstimatedStart: &est, Message: "waits for 2 GPUs"},
	}
	entry := elems[0]
	entry.Array = &api.ArraySummary{}
	for i := range elems {
		entry.Array.Add(&elems[i], now)
	}
	one, summed := queueRows(elems, false), queueRows([]api.Job{entry, {ID: 10, Spec: api.JobSpec{Name: "solo"}, State: api.StatePending}}, false)
	if len(one) != 1 || len(summed) != 2 || len(summed[0]) != 1 {
		t.Fatalf("rows: %d from the jobs, %d from the summed-up entry and a job; want 1 and 2", len(one), len(summed))
	}
	want, got := queueCells(one[0], now), queueCells(summed[0], now)
	if !slices.Equal(got, want) {
		t.Errorf("the summed-up array's line: %q; the jobs' line: %q", got, want)
	}
	if want[0] != "7_[0-5]" || want[4] != "2 running (1 idle), 1 pending" || want[6] != "n1,n2" || want[7] != "3h00m" || want[8] != "in 2h00m" || want[9] != "waits for 2 GPUs" {
		t.Errorf("the array's line: %q", want)
	}
}
