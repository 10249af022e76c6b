package cluster

import (
	"fmt"
	"reflect"
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

// pausingState is ten nodes of eight GPUs and 300 jobs: odd IDs pending, even IDs
// running on one GPU each, so that a walk pauses in both lists.
func pausingState() *State {
	var nodes []api.Node
	for i := range 10 {
		nodes = append(nodes, eightGPUs(fmt.Sprintf("n%d", i)))
	}
	s := newSnapState(nodes...)
	b := &batch.Batch{}
	for id := int64(2); id <= 300; id++ {
		if id%2 == 1 {
			b.Jobs = append(b.Jobs, pendingJob(id, 1+int(id%3), ""))
			continue
		}
		j := pendingJob(id, 1, "")
		j.State, j.Attempts = api.StateRunning, 1
		b.Jobs = append(b.Jobs, j)
		b.Attempts = append(b.Attempts, api.Attempt{JobID: id, N: 1, AssignTime: snapT0.Add(-time.Duration(id) * time.Minute),
			Placements: []api.Placement{{Node: fmt.Sprintf("n%d", id%10), GPUIndices: []int{int(id/10) % 8}, CPUs: 1, MemoryMB: 1024}}})
	}
	s.Apply(b)
	return s
}

// TestSnapshotPausesAndGoesOn walks the jobs in chunks, with pauses in which the state
// changes: a snapshot read so must hold every job that did not change during the walk
// exactly as a snapshot read after it does, each job at most once, and no job that is
// in neither.
func TestSnapshotPausesAndGoesOn(t *testing.T) {
	keep := func(id int64) bool { return id%7 != 0 } // the server's admission leaves some out
	for _, chunk := range []int{1, 3, 64, 1000} {
		s := pausingState()
		pauses := 0
		parts, ok := s.SnapshotPartsPausing(snapT0, keep, chunk, func() bool { pauses++; return true })
		if !ok {
			t.Fatalf("chunk %d: a walk whose pauses all said go on stopped", chunk)
		}
		if got, want := parts.Build(), s.Snapshot(snapT0, keep); !reflect.DeepEqual(got, want) {
			t.Fatalf("chunk %d: pausing with nothing changed read another snapshot than one walk does", chunk)
		}
		// 150 running jobs, then 128 pending ones kept of 150 (keep reads them all).
		if want := 300 / chunk; chunk < 300 && pauses != want && pauses != want-1 {
			t.Errorf("chunk %d: %d pauses over 300 jobs; want about %d", chunk, pauses, want)
		}
	}

	// Each pause changes the state: a job submitted, one cancelled, one ended, one
	// requeued from running to pending, and, every fifth pause, the ended jobs evicted,
	// which moves every job's position in the index.
	s := pausingState()
	seq := s.Seq()
	touched := map[int64]bool{} // the jobs the pauses changed
	next, step := int64(301), 0
	pause := func() bool {
		step++
		at := snapT0.Add(time.Duration(step) * time.Second)
		b := &batch.Batch{}
		b.Jobs = append(b.Jobs, pendingJob(next, 1, ""))
		next++
		if j, ok := s.Job(int64(300 - 2*step + 1)); ok && j.State == api.StatePending {
			j.State, j.EndTime = api.StateCancelled, &at
			b.Jobs = append(b.Jobs, j)
		}
		if j, ok := s.Job(int64(4 * step)); ok && j.State == api.StateRunning {
			j.State, j.EndTime = api.StateSucceeded, &at
			b.Jobs = append(b.Jobs, j)
		}
		if j, ok := s.Job(int64(298 - 4*step)); ok && j.State == api.StateRunning {
			j.State = api.StatePending
			b.Jobs = append(b.Jobs, j)
		}
		s.Apply(b)
		for _, j := range b.Jobs {
			touched[j.ID] = true
		}
		if step%5 == 0 {
			s.Evict(at.Add(time.Second))
		}
		return true
	}
	parts, ok := s.SnapshotPartsPausing(snapT0, keep, 7, pause)
	if !ok || step < 30 {
		t.Fatalf("the walk stopped (%v) or paused only %d times", !ok, step)
	}
	got, want := parts.Build(), s.Snapshot(snapT0, keep)
	// An evicted job's changes are forgotten with it: the jobs each pause touched say
	// what changed. The server's plans ask the state (JobChangedSince), and no job is
	// evicted during a cycle's walk: only the cycle evicts.
	unchanged := func(id int64) bool {
		if _, ok := s.Job(id); ok && s.JobChangedSince(id, seq) != touched[id] {
			t.Fatalf("job %d: changed since the walk began %v, touched by a pause %v", id, s.JobChangedSince(id, seq), touched[id])
		}
		return !touched[id]
	}
	checkPausedList(t, "running", got.Running, want.Running, func(r sched.Running) int64 { return r.ID }, unchanged)
	checkPausedList(t, "pending", got.Pending, want.Pending, func(j sched.Job) int64 { return j.ID }, unchanged)

	// A pause that says stop ends the walk with nothing.
	calls := 0
	if parts, ok := pausingState().SnapshotPartsPausing(snapT0, nil, 10, func() bool { calls++; return calls < 2 }); ok || parts != nil || calls != 2 {
		t.Errorf("a walk told to stop at its second pause: ok %v, parts %v, %d pauses", ok, parts != nil, calls)
	}
}

// checkPausedList holds one list of a snapshot read with pauses to the same list read
// after them: each job once; every job that did not change during the walk in both, the
// same; and none in got that is in neither.
func checkPausedList[T any](t *testing.T, what string, got, want []T, id func(T) int64, unchanged func(int64) bool) {
	t.Helper()
	seen := map[int64]bool{}
	for _, g := range got {
		if seen[id(g)] {
			t.Fatalf("%s: job %d read twice", what, id(g))
		}
		seen[id(g)] = true
	}
	wanted := map[int64]T{}
	for _, w := range want {
		wanted[id(w)] = w
		if !unchanged(id(w)) {
			continue
		}
		if !seen[id(w)] {
			t.Errorf("%s: job %d, unchanged during the walk, was not read", what, id(w))
		}
	}
	for _, g := range got {
		w, ok := wanted[id(g)]
		switch {
		case !unchanged(id(g)):
		case !ok:
			t.Errorf("%s: job %d was read, unchanged, but is not in the list", what, id(g))
		case !reflect.DeepEqual(g, w):
			t.Errorf("%s: job %d, unchanged, was read as %+v; it is %+v", what, id(g), g, w)
		}
	}
}
