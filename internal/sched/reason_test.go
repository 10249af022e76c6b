package sched

import (
	"reflect"
	"testing"
	"time"
)

func TestReasons(t *testing.T) {
	drained := gpuNode("gpu-00", "A100", 8)
	drained.Schedulable = false
	tests := []struct {
		name string
		snap *Snapshot
		job  int64
		want Reason
	}{
		{
			name: "unknown queue",
			snap: snapshot([]Node{gpuNode("gpu-01", "H100", 8)}, nil, func() Job { j := job(1, 1, "H100"); j.Queue = "nope"; return j }()),
			job:  1,
			want: Reason{Code: ReasonNoQueue, Message: `queue "nope" does not exist`},
		},
		{
			name: "no node has the model",
			snap: snapshot([]Node{gpuNode("gpu-01", "H100", 8)}, nil, job(1, 1, "B200")),
			job:  1,
			want: Reason{Code: ReasonNoNodeMatches, Message: "no node has GPUs of model B200"},
		},
		{
			name: "no node has that many GPUs",
			snap: snapshot([]Node{gpuNode("gpu-01", "H100", 8)}, nil, job(1, 16, "H100")),
			job:  1,
			want: Reason{Code: ReasonNoNodeMatches, Message: "no node has 16 GPUs of model H100; the largest has 8"},
		},
		{
			name: "no node has that many CPUs",
			snap: snapshot([]Node{gpuNode("gpu-01", "H100", 8)}, nil, func() Job { j := job(1, 1, "H100"); j.Request.CPUs = 200; return j }()),
			job:  1,
			want: Reason{Code: ReasonNoNodeMatches, Message: "no node has 200 CPUs; the largest has 64"},
		},
		{
			name: "the only node with the model is drained",
			snap: snapshot([]Node{drained, gpuNode("gpu-01", "H100", 8)}, nil, job(1, 1, "A100")),
			job:  1,
			want: Reason{Code: ReasonResources, Message: "no schedulable node has 1 GPU of model A100; 1 node is not schedulable"},
		},
		{
			name: "not enough free GPUs",
			snap: snapshot([]Node{gpuNode("gpu-01", "H100", 8), gpuNode("gpu-07", "H100", 8)},
				[]Running{busy(90, "gpu-01", time.Hour, 0, 1, 2, 3, 4, 5, 6), busy(91, "gpu-07", time.Hour, 0, 1, 2, 3, 4)},
				job(1, 4, "H100")),
			job: 1,
			want: Reason{Code: ReasonFragmented, BestNode: "gpu-07", Missing: map[string]int64{"gpus": 1},
				Message: "4 GPUs of model H100 are free, but spread over 2 nodes; the most on one node is 3 on gpu-07"},
		},
		{
			name: "resources",
			snap: snapshot([]Node{gpuNode("gpu-01", "H100", 8), gpuNode("gpu-07", "H100", 8)},
				[]Running{busy(90, "gpu-01", time.Hour, 0, 1, 2, 3, 4, 5, 6, 7), busy(91, "gpu-07", time.Hour, 0, 1, 2, 3, 4)},
				job(1, 4, "H100")),
			job: 1,
			want: Reason{Code: ReasonResources, BestNode: "gpu-07", Missing: map[string]int64{"gpus": 1},
				Message: "no node has 4 free GPUs of model H100: best is gpu-07 with 3 free"},
		},
		{
			name: "CPUs short",
			snap: snapshot([]Node{gpuNode("gpu-01", "H100", 8)},
				[]Running{{ID: 90, Queue: "train", End: t0.Add(time.Hour), Allocs: []Alloc{{Node: "gpu-01", CPUs: 60}}}},
				func() Job { j := job(1, 1, "H100"); j.Request.CPUs = 8; return j }()),
			job: 1,
			want: Reason{Code: ReasonResources, BestNode: "gpu-01", Missing: map[string]int64{"cpus": 4},
				Message: "no node has 1 free GPU of model H100 with 8 CPUs and 1024 MB of memory: best is gpu-01, short of 4 CPUs"},
		},
		{
			name: "priority: higher jobs wait for the same GPUs",
			snap: snapshot([]Node{gpuNode("gpu-01", "H100", 8)}, []Running{busy(90, "gpu-01", 0, 0, 1, 2, 3, 4, 5, 6, 7)},
				job(1, 8, "H100"), job(2, 2, "H100"), job(3, 1, "H100")),
			job: 3,
			want: Reason{Code: ReasonPriority, Ahead: 2, BestNode: "gpu-01", Missing: map[string]int64{"gpus": 1},
				Message: "2 jobs of higher priority are ahead, waiting for the same resources"},
		},
		{
			name: "other models do not count as ahead",
			snap: snapshot([]Node{gpuNode("gpu-01", "H100", 8), gpuNode("gpu-02", "A100", 8)},
				[]Running{busy(90, "gpu-01", 0, 0, 1, 2, 3, 4, 5, 6, 7)},
				job(1, 16, "A100"), job(2, 1, "H100")),
			job: 2,
			want: Reason{Code: ReasonResources, BestNode: "gpu-01", Missing: map[string]int64{"gpus": 1},
				Message: "no node has 1 free GPU of model H100: best is gpu-01 with 0 free"},
		},
		{
			name: "reserved for another team",
			snap: func() *Snapshot {
				s := snapshot([]Node{gpuNode("gpu-01", "H100", 8)}, nil, job(1, 1, "H100"))
				s.Reservations = []Reservation{{Name: "demo", Team: "nlp", Nodes: []string{"gpu-01"}, Start: t0.Add(-time.Hour), End: t0.Add(time.Hour)}}
				return s
			}(),
			job:  1,
			want: Reason{Code: ReasonReserved, BestNode: "gpu-01", Message: "the nodes with room, first gpu-01, are reserved for team nlp (demo)"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustSchedule(tt.snap, Options{})
			pj, ok := pendingOf(p, tt.job)
			if !ok {
				t.Fatalf("job %d is not pending; plan %+v", tt.job, p)
			}
			if !reflect.DeepEqual(pj.Reason, tt.want) {
				t.Errorf("reason:\n got %+v\nwant %+v", pj.Reason, tt.want)
			}
		})
	}
}

// TestEveryJobAccounted checks that each pending job of the snapshot is either placed or
// explained, exactly once.
func TestEveryJobAccounted(t *testing.T) {
	s := snapshot([]Node{gpuNode("gpu-01", "H100", 8)}, nil, job(1, 4, "H100"), job(2, 8, "H100"), job(3, 4, "H100"), job(4, 1, "B200"))
	p := mustSchedule(s, Options{})
	seen := map[int64]int{}
	for _, pl := range p.Placements {
		seen[pl.JobID]++
	}
	for _, pj := range p.Pending {
		seen[pj.JobID]++
		if pj.Reason.Code == "" || pj.Reason.Message == "" {
			t.Errorf("job %d pending without a reason: %+v", pj.JobID, pj.Reason)
		}
	}
	for _, j := range s.Pending {
		if seen[j.ID] != 1 {
			t.Errorf("job %d appears %d times in the plan", j.ID, seen[j.ID])
		}
	}
}

func TestHealthNote(t *testing.T) {
	for _, tc := range []struct {
		names          []string
		count, dataDir int
		want           string
	}{
		{[]string{"a"}, 1, 0, "node a failed its health check"},
		{[]string{"a"}, 1, 1, "node a cannot run attempts (its agent says why in rota nodes)"},
		{[]string{"a", "b"}, 2, 2, "nodes a and b cannot run attempts (their agents say why in rota nodes)"},
		{[]string{"a", "b", "c"}, 5, 1, "nodes a, b, c and 2 more failed their health checks or cannot run attempts"},
		{[]string{"a", "b"}, 2, 0, "nodes a and b failed their health checks"},
	} {
		if got := healthNote(tc.names, tc.count, tc.dataDir); got != tc.want {
			t.Errorf("healthNote(%v, %d, %d) = %q, want %q", tc.names, tc.count, tc.dataDir, got, tc.want)
		}
	}
}
