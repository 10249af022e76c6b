package cluster

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/batch"
)

// TestEvictKeepsTheIndexes drops ended jobs and checks what stays: the change sequence,
// the waiting counts, the node and job indexes (against a full scan), fair share, and the
// final states of the jobs that went.
func TestEvictKeepsTheIndexes(t *testing.T) {
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	node := indexNodes[0]
	job := func(id int64, user string, st api.JobState, end *time.Time) api.Job {
		return api.Job{ID: id, Spec: api.JobSpec{User: user, Team: "t-" + user}, State: st, EndTime: end}
	}
	s := New()
	s.Apply(&batch.Batch{
		Nodes: []api.Node{{Name: node, State: api.NodeReady, Inventory: api.Inventory{CPUs: 8, GPUs: []api.GPU{{Index: 0, Model: "H100"}, {Index: 1, Model: "H100"}}}}},
		Jobs: []api.Job{
			job(1, "alice", api.StateSucceeded, at(-2*time.Hour)), job(2, "bob", api.StateFailed, at(-10*time.Minute)),
			job(3, "bob", api.StateRunning, nil), job(4, "alice", api.StatePending, nil), job(5, "alice", api.StateHeld, nil),
			job(6, "bob", api.StateCancelled, at(-3*time.Hour)),
		},
		Attempts: []api.Attempt{
			{JobID: 1, N: 1, AssignTime: now.Add(-5 * time.Hour), EndTime: at(-2 * time.Hour), Placements: []api.Placement{{Node: node, GPUIndices: []int{0}}}},
			{JobID: 3, N: 1, AssignTime: now.Add(-time.Hour), Placements: []api.Placement{{Node: node, GPUIndices: []int{1}}}},
			{JobID: 6, N: 1, AssignTime: now.Add(-4 * time.Hour), EndTime: at(-3 * time.Hour), Placements: []api.Placement{{Node: node, GPUIndices: []int{0, 1}}}},
		},
	})
	usage, seq := s.TeamUsage(now), s.Seq()
	snap := s.Snapshot(now, nil)
	entry := func(id int64) *snapJob {
		pos, ok := slices.BinarySearch(s.jobIdx.order, id)
		if !ok {
			t.Fatalf("job %d is not in the index", id)
		}
		return s.jobIdx.entry(pos)
	}
	running, pending := entry(3), entry(4)

	if n := s.Evict(now.Add(-time.Hour)); n != 2 {
		t.Fatalf("Evict dropped %d jobs; want 2 (jobs 1 and 6)", n)
	}
	if s.Seq() != seq || s.JobChangedSince(3, seq) {
		t.Errorf("eviction moved the change sequence: %d -> %d", seq, s.Seq())
	}
	for id, want := range map[int64]api.JobState{1: api.StateSucceeded, 6: api.StateCancelled} {
		if _, ok := s.Job(id); ok || len(s.Attempts(id)) != 0 {
			t.Errorf("job %d is still in memory", id)
		}
		if st, ok := s.StateOf(id); !ok || st != want {
			t.Errorf("StateOf(%d) = %s, %v; want %s", id, st, ok, want)
		}
	}
	if st, ok := s.StateOf(2); !ok || st != api.StateFailed {
		t.Errorf("the job ended within the window: %s, %v", st, ok)
	}
	if _, ok := s.StateOf(99); ok {
		t.Error("an unknown job has a state")
	}
	if s.JobCount() != 4 || s.EvictedCount() != 2 || !s.EvictedBefore().Equal(now.Add(-time.Hour)) {
		t.Errorf("counts %d in memory, %d evicted, cutoff %v", s.JobCount(), s.EvictedCount(), s.EvictedBefore())
	}
	if s.Waiting("alice") != 2 || s.Waiting("bob") != 0 {
		t.Errorf("waiting alice %d bob %d; want 2 and 0", s.Waiting("alice"), s.Waiting("bob"))
	}
	if got := s.ActiveOnNode(node); !slices.Equal(got, []int64{3}) {
		t.Errorf("active on %s: %v", node, got)
	}
	if got := s.TeamUsage(now); !reflect.DeepEqual(got, usage) {
		t.Errorf("usage after eviction %v; was %v", got, usage)
	}
	// The jobs that stay keep their snapshot entries, and the snapshot is the same: the
	// evicted jobs had ended.
	if entry(3) != running || entry(4) != pending || running == nil || pending == nil {
		t.Errorf("the snapshot entries of the jobs that stay were dropped by the eviction")
	}
	if got := s.Snapshot(now, nil); !reflect.DeepEqual(got, snap) {
		t.Errorf("snapshot after eviction:\n%+v\nbefore:\n%+v", got, snap)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	checkIndexes(t, s, rng, "after eviction")
	// A new job after a rebuilt index goes on in order.
	s.Apply(&batch.Batch{Jobs: []api.Job{job(7, "alice", api.StatePending, nil)}})
	checkIndexes(t, s, rng, "a job after eviction")
	if page, _ := s.JobsPage(0, nil, 10, nil); len(page) != 5 || page[0].ID != 2 || page[4].ID != 7 {
		t.Errorf("the jobs after eviction: %+v", page)
	}

	// A state loaded without the evicted jobs charges their attempts alone: same usage.
	fresh := New()
	fresh.Forget(1, api.StateSucceeded, now.Add(-time.Hour))
	fresh.Forget(6, api.StateCancelled, now.Add(-time.Hour))
	fresh.ChargeEnded("t-alice", api.Attempt{JobID: 1, N: 1, AssignTime: now.Add(-5 * time.Hour), EndTime: at(-2 * time.Hour), Placements: []api.Placement{{Node: node, GPUIndices: []int{0}}}})
	fresh.ChargeEnded("t-bob", api.Attempt{JobID: 6, N: 1, AssignTime: now.Add(-4 * time.Hour), EndTime: at(-3 * time.Hour), Placements: []api.Placement{{Node: node, GPUIndices: []int{0, 1}}}})
	fresh.Apply(&batch.Batch{
		Jobs:     []api.Job{job(2, "bob", api.StateFailed, at(-10*time.Minute)), job(3, "bob", api.StateRunning, nil)},
		Attempts: []api.Attempt{{JobID: 3, N: 1, AssignTime: now.Add(-time.Hour), Placements: []api.Placement{{Node: node, GPUIndices: []int{1}}}}},
	})
	got := fresh.TeamUsage(now)
	for team, want := range usage {
		if d := got[team] - want; d > 1e-6 || d < -1e-6 {
			t.Errorf("team %s usage loaded without evicted jobs %v; want %v", team, got[team], want)
		}
	}
	if fresh.NextJobID() != 7 {
		t.Errorf("next job ID %d after a load that forgot job 6; want 7", fresh.NextJobID())
	}
}
