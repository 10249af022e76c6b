package cluster

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/batch"
	"github.com/rotahq/rota/internal/sched"
)

var snapT0 = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// eightGPUs is a ready node with 8 H100s in two NVLink islands, {0-3} and {4-7}, as an
// agent reports them.
func eightGPUs(name string) api.Node {
	n := api.Node{Name: name, State: api.NodeReady, Inventory: api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DriverVersion: "550"}}
	for i := range 8 {
		g := api.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", name, i), Model: "H100", MemoryMB: 80 << 10, Healthy: true}
		for j := range 8 {
			if j != i && j/4 == i/4 {
				g.NVLinkPeers = append(g.NVLinkPeers, j)
			}
		}
		n.GPUs = append(n.GPUs, g)
	}
	return n
}

func pendingJob(id int64, gpus int, image string) api.Job {
	return api.Job{ID: id, State: api.StatePending, SubmitTime: snapT0,
		Spec: api.JobSpec{Queue: "train", Team: "default", User: "ada", GPUs: gpus, CPUs: 1, MemoryMB: 1024, TimeLimit: 3600, Image: image}}
}

// newSnapState is a state with the queue "train", the nodes, and job 1 running on GPU 0
// of the first node.
func newSnapState(nodes ...api.Node) *State {
	s := New()
	run := api.Job{ID: 1, State: api.StateRunning, Attempts: 1, Spec: api.JobSpec{Queue: "train", Team: "default", User: "bo", GPUs: 1}}
	a := api.Attempt{JobID: 1, N: 1, AssignTime: snapT0.Add(-time.Hour),
		Placements: []api.Placement{{Node: nodes[0].Name, GPUIndices: []int{0}, CPUs: 1, MemoryMB: 1024}}}
	s.Apply(&batch.Batch{Nodes: nodes, Queues: []api.Queue{{Name: "train", Tier: 1}}, Jobs: []api.Job{run}, Attempts: []api.Attempt{a}})
	return s
}

func plan(s *State) sched.Plan { return sched.Schedule(s.Snapshot(snapT0, nil), snapT0) }

func placed(t *testing.T, p sched.Plan, id int64) sched.Alloc {
	t.Helper()
	for _, pl := range p.Placements {
		if pl.JobID == id {
			return pl.Allocs[0]
		}
	}
	t.Fatalf("job %d not placed; pending: %+v", id, p.Pending)
	return sched.Alloc{}
}

func reasonOf(p sched.Plan, id int64) sched.Reason {
	for _, pj := range p.Pending {
		if pj.JobID == id {
			return pj.Reason
		}
	}
	return sched.Reason{}
}

// The NVLink peers an agent reports reach the scheduler: with GPU 0 busy a 4-GPU job
// gets the whole other island, not the lowest free indices {1,2,3,4}.
func TestSnapshotCarriesNVLinkTopology(t *testing.T) {
	s := newSnapState(eightGPUs("a"))
	s.Apply(&batch.Batch{Jobs: []api.Job{pendingJob(2, 4, "")}})
	if got := placed(t, plan(s), 2).GPUIndices; !slices.Equal(got, []int{4, 5, 6, 7}) {
		t.Errorf("GPUs %v; want the NVLink island {4,5,6,7}", got)
	}
}

func TestSnapshotKeepsUnusableGPUsFromNewWork(t *testing.T) {
	for _, tt := range []struct {
		name  string
		spoil func(n *api.Node)
		want  string // in the reason of a 7-GPU job
	}{
		{"held by leftovers", func(n *api.Node) { n.HeldGPUs = []int{5} }, "1 GPU of node a is held by leftover processes"},
		{"unhealthy", func(n *api.Node) { n.GPUs[5].Healthy, n.GPUs[5].Health = false, "XID 79" }, "1 GPU of node a is unhealthy"},
		{"missing", func(n *api.Node) { n.GPUs[5].Missing = true }, "1 GPU of node a is unhealthy"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := eightGPUs("a")
			tt.spoil(&n)
			s := newSnapState(n)
			// Seven 1-GPU jobs find six GPUs: GPU 0 runs job 1, GPU 5 takes no new work.
			var jobs []api.Job
			for id := int64(2); id <= 8; id++ {
				jobs = append(jobs, pendingJob(id, 1, ""))
			}
			s.Apply(&batch.Batch{Jobs: jobs})
			p := plan(s)
			for _, pl := range p.Placements {
				if slices.Contains(pl.Allocs[0].GPUIndices, 5) {
					t.Fatalf("job %d placed on GPU 5", pl.JobID)
				}
			}
			if len(p.Placements) != 6 {
				t.Errorf("%d jobs placed; want 6", len(p.Placements))
			}

			s = newSnapState(n)
			s.Apply(&batch.Batch{Jobs: []api.Job{pendingJob(2, 7, "")}})
			if r := reasonOf(plan(s), 2); !strings.Contains(r.Message, tt.want) {
				t.Errorf("reason %+v; want it to say %q", r, tt.want)
			}
		})
	}
}

func TestSnapshotLeavesOutNodesThatFailedTheirHealthCheck(t *testing.T) {
	sick := eightGPUs("a")
	sick.HealthCheck = &api.HealthCheck{Time: snapT0, OK: false, ExitCode: 1, Output: "ib0 down"}
	well := eightGPUs("b")
	well.HealthCheck = &api.HealthCheck{Time: snapT0, OK: true}
	s := newSnapState(sick, well)
	s.Apply(&batch.Batch{Jobs: []api.Job{pendingJob(2, 2, ""), pendingJob(3, 8, "")}})
	p := plan(s)
	if a := placed(t, p, 2); a.Node != "b" {
		t.Errorf("job 2 on %s; want b, a failed its health check", a.Node)
	}
	if r := reasonOf(p, 3); !strings.Contains(r.Message, "node a failed its health check") {
		t.Errorf("job 3 reason %+v; want it to name a's failed health check", r)
	}
}

func TestSnapshotPassesImagesAndRuntimes(t *testing.T) {
	plain, podman := eightGPUs("a"), eightGPUs("b")
	podman.ContainerRuntime = "podman"
	s := newSnapState(plain, podman)
	// Best fit would put the image job on a, where one GPU is busy already and the job's
	// seven fit exactly.
	s.Apply(&batch.Batch{Jobs: []api.Job{pendingJob(2, 7, "registry.example.com/ml/train:1"), pendingJob(3, 7, "")}})
	p := plan(s)
	if a := placed(t, p, 2); a.Node != "b" {
		t.Errorf("image job on %s; want b, the node with a container runtime", a.Node)
	}
	if a := placed(t, p, 3); a.Node != "a" {
		t.Errorf("plain job on %s; want a", a.Node)
	}

	s = newSnapState(plain)
	s.Apply(&batch.Batch{Jobs: []api.Job{pendingJob(2, 1, "docker.io/library/alpine")}})
	r := reasonOf(plan(s), 2)
	if r.Code != sched.ReasonNoNodeMatches || !strings.Contains(r.Message, "no node has a container runtime for image jobs") {
		t.Errorf("reason %+v; want NoNodeMatches: no node has a container runtime", r)
	}
}

// A server that reads the store afresh gets a new State but keeps its planner, which
// reuses its node layout while NodesVersion stays the same: two States' node lists never
// share a version, even when each has had the same number of changes.
func TestNodesVersionIsUniqueAcrossStates(t *testing.T) {
	now := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	a, b := New(), New()
	a.Apply(&batch.Batch{Nodes: []api.Node{{Name: "n1", State: api.NodeReady}}})
	b.Apply(&batch.Batch{Nodes: []api.Node{{Name: "n2", State: api.NodeReady}}})
	va, vb := a.Snapshot(now, nil).NodesVersion, b.Snapshot(now, nil).NodesVersion
	if va == 0 || vb == 0 || va == vb {
		t.Fatalf("node lists of two states have versions %d and %d", va, vb)
	}
	if again := a.Snapshot(now, nil).NodesVersion; again != va {
		t.Fatalf("unchanged nodes moved NodesVersion from %d to %d", va, again)
	}
}
