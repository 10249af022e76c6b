package cluster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/batch"
	"github.com/rotahq/rota/internal/sched"
)

var allStates = []api.JobState{api.StatePending, api.StateHeld, api.StateAssigned, api.StateRunning,
	api.StateSucceeded, api.StateFailed, api.StateCancelled, api.StateTimeout}

var indexNodes = []string{"n0", "n1", "n2", "n3", "n4", "n5"}

// scanOnNode is what ActiveOnNode must return, from a walk of every job.
func scanOnNode(s *State, node string) []int64 {
	out := []int64{}
	for _, id := range s.ActiveIDs() {
		if a, ok := s.CurrentAttempt(id); ok && slices.ContainsFunc(a.Placements, func(p api.Placement) bool { return p.Node == node }) {
			out = append(out, id)
		}
	}
	return out
}

// scanUnstarted is what UnstartedIDs must return, from a walk of every job.
func scanUnstarted(s *State) []int64 {
	out := []int64{}
	for _, id := range s.ActiveIDs() {
		if a, ok := s.CurrentAttempt(id); ok && slices.ContainsFunc(a.Placements, func(p api.Placement) bool { return p.State == "" }) {
			out = append(out, id)
		}
	}
	return out
}

// scanPage is what JobsPage must return, from a copy and sort of every job.
func scanPage(s *State, after int64, states []api.JobState, limit int, keep func(*api.Job) bool) ([]api.Job, bool) {
	all := s.Jobs(func(j *api.Job) bool {
		return j.ID > after && (states == nil || slices.Contains(states, j.State)) && (keep == nil || keep(j))
	})
	if len(all) > limit {
		return all[:limit], true
	}
	if all == nil {
		all = []api.Job{}
	}
	return all, false
}

// scanPageBefore is what JobsPageBefore must return, from a scan of every job.
func scanPageBefore(s *State, before int64, states []api.JobState, limit int, keep func(*api.Job) bool) ([]api.Job, bool) {
	all := s.Jobs(func(j *api.Job) bool {
		return j.ID < before && (states == nil || slices.Contains(states, j.State)) && (keep == nil || keep(j))
	})
	if len(all) > limit {
		return all[len(all)-limit:], true
	}
	if all == nil {
		all = []api.Job{}
	}
	return all, false
}

// scanFit is what FittingNodes must return, from a walk of every node, before it stops at want.
func scanFit(s *State, model string, gpus, cpus int, mem int64) (fitting, best int) {
	for _, n := range s.Nodes() {
		if n.State == api.NodeLost {
			continue
		}
		c := 0
		for _, g := range n.GPUs {
			if model == "" || g.Model == model {
				c++
			}
		}
		best = max(best, c)
		if c >= gpus && n.CPUs >= cpus && n.MemoryMB >= mem {
			fitting++
		}
	}
	return fitting, best
}

func scanModels(s *State) []string {
	out := []string{}
	for _, n := range s.Nodes() {
		for _, g := range n.GPUs {
			if !slices.Contains(out, g.Model) {
				out = append(out, g.Model)
			}
		}
	}
	slices.Sort(out)
	return out
}

// checkIndexes compares every index with a full scan, for every node, several cursors,
// state sets and filters, and every node shape asked for.
func checkIndexes(t *testing.T, s *State, rng *rand.Rand, step string) {
	t.Helper()
	// Each snapshot entry sits at its own job's position.
	x := &s.jobIdx
	if len(x.entries) > len(x.order) {
		t.Fatalf("%s: %d snapshot entries for %d jobs", step, len(x.entries), len(x.order))
	}
	if len(x.recs) != len(x.order) {
		t.Fatalf("%s: %d records for %d jobs", step, len(x.recs), len(x.order))
	}
	for pos, id := range x.order {
		if x.recs[pos] != s.jobs[id] {
			t.Fatalf("%s: the record at job %d's position is not the state's", step, id)
		}
	}
	for pos, e := range x.entries {
		switch {
		case e == nil:
		case e.running != nil && e.running.ID != x.order[pos], e.pending != nil && e.pending.ID != x.order[pos]:
			t.Fatalf("%s: the snapshot entry at job %d's position is another job's", step, x.order[pos])
		}
	}
	for _, n := range append(indexNodes, "nowhere") {
		if got, want := s.ActiveOnNode(n), scanOnNode(s, n); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("%s: jobs on %s from the index %v, from a scan %v", step, n, got, want)
		}
	}
	if got, want := s.UnstartedIDs(), scanUnstarted(s); !slices.Equal(got, want) {
		t.Fatalf("%s: unstarted jobs from the index %v, from a scan %v", step, got, want)
	}
	usage := s.Usage()
	for _, n := range append(indexNodes, "nowhere") {
		if got := s.NodeUsage(n); !reflect.DeepEqual(got, usage[n]) {
			t.Fatalf("%s: usage of %s from the index %+v, from a scan %+v", step, n, got, usage[n])
		}
		var want []int
		if u := usage[n]; u != nil {
			want = slices.Sorted(maps.Keys(u.GPUs))
		}
		if got := s.UsedGPUs(n, []int{-1}); !slices.Equal(got[1:], want) || got[0] != -1 || len(s.GPUHolds(n)) != len(want) {
			t.Fatalf("%s: GPUs used on %s after -1: %v, %d of them; a scan says %v", step, n, got, len(s.GPUHolds(n)), want)
		}
	}
	var names []string
	for _, n := range s.Nodes() {
		names = append(names, n.Name)
	}
	if got := s.NodeNames(); !slices.Equal(got, names) {
		t.Fatalf("%s: node names %v; a scan says %v", step, got, names)
	}
	for _, c := range []struct {
		name string
		got  []int64
		want func(*api.Job) bool
	}{
		{"pending", s.PendingIDs(), func(j *api.Job) bool { return j.State == api.StatePending }},
		{"held", s.HeldIDs(), func(j *api.Job) bool { return j.State == api.StateHeld }},
		{"active", s.ActiveIDs(), func(j *api.Job) bool { return j.State.Active() }},
		{"unfinished", s.UnfinishedIDs(), func(j *api.Job) bool { return !j.State.Terminal() }},
		{"idle", s.IdleIDs(), func(j *api.Job) bool { return j.State.Active() && j.IdleSince != nil }},
	} {
		var want []int64
		for _, j := range s.Jobs(c.want) {
			want = append(want, j.ID)
		}
		if !slices.Equal(c.got, want) && !(len(c.got) == 0 && len(want) == 0) {
			t.Fatalf("%s: %s jobs from the index %v, from a scan %v", step, c.name, c.got, want)
		}
	}
	depth := map[string]*api.QueueDepth{}
	for _, j := range s.Jobs(func(j *api.Job) bool { return !j.State.Terminal() }) {
		if depth[j.Spec.Queue] == nil {
			depth[j.Spec.Queue] = &api.QueueDepth{Queue: j.Spec.Queue}
		}
		depth[j.Spec.Queue].Add(&j, 1)
	}
	var wantDepth []api.QueueDepth
	for _, q := range slices.Sorted(maps.Keys(depth)) {
		wantDepth = append(wantDepth, *depth[q])
	}
	if got := s.QueueDepths(); !slices.Equal(got, wantDepth) && !(len(got) == 0 && len(wantDepth) == 0) {
		t.Fatalf("%s: queue depths %+v; a scan says %+v", step, got, wantDepth)
	}
	for _, states := range [][]api.JobState{{api.StatePending}, {api.StateAssigned, api.StateRunning}, {api.StateHeld, api.StateHeld}, {api.StateCancelled}} {
		var want, walked []int64
		for _, j := range s.Jobs(func(j *api.Job) bool { return slices.Contains(states, j.State) }) {
			want = append(want, j.ID)
		}
		for j := range s.EachJob(states...) {
			walked = append(walked, j.ID)
		}
		if n := s.CountJobs(states...); n != len(want) || !slices.Equal(walked, want) {
			t.Fatalf("%s: %v jobs: counted %d, walked %v; a scan says %v", step, states, n, walked, want)
		}
	}
	stateSets := [][]api.JobState{nil, {api.StatePending}, {api.StateRunning, api.StateAssigned},
		{api.StatePending, api.StateHeld, api.StateAssigned, api.StateRunning}, {api.StateTimeout}}
	for range 8 {
		after := rng.Int64N(s.maxID + 2)
		if rng.IntN(3) == 0 {
			after = 0
		}
		states := stateSets[rng.IntN(len(stateSets))]
		limit := 1 + rng.IntN(8)
		var keep func(*api.Job) bool
		if rng.IntN(2) == 0 {
			keep = func(j *api.Job) bool { return j.Spec.User == "alice" }
		}
		got, more := s.JobsPage(after, states, limit, keep)
		want, wantMore := scanPage(s, after, states, limit, keep)
		// Backwards from the same cursor (a cursor past every job reads the last page).
		before := after + int64(rng.IntN(3))
		if rng.IntN(4) == 0 {
			before = s.maxID + 1 + int64(rng.IntN(70))
		}
		gotB, moreB := s.JobsPageBefore(before, states, limit, keep)
		wantB, wantMoreB := scanPageBefore(s, before, states, limit, keep)
		for _, c := range []struct {
			dir            string
			cursor         int64
			got, want      []api.Job
			more, wantMore bool
		}{{"after", after, got, want, more, wantMore}, {"before", before, gotB, wantB, moreB, wantMoreB}} {
			if c.more != c.wantMore || len(c.got) != len(c.want) || c.got == nil {
				t.Fatalf("%s: page %s %d of %v (limit %d): %d jobs more=%v, scan %d more=%v", step, c.dir, c.cursor, states, limit, len(c.got), c.more, len(c.want), c.wantMore)
			}
			for i := range c.got {
				if c.got[i].ID != c.want[i].ID || c.got[i].State != c.want[i].State {
					t.Fatalf("%s: page %s %d of %v: job %d is %d %s, scan %d %s", step, c.dir, c.cursor, states, i, c.got[i].ID, c.got[i].State, c.want[i].ID, c.want[i].State)
				}
			}
		}
	}
	if got, want := s.GPUModelNames(), scanModels(s); !slices.Equal(got, want) {
		t.Fatalf("%s: models %v, scan %v", step, got, want)
	}
	for _, model := range []string{"", "A100", "H100", "T4"} {
		for gpus := range 5 {
			cpus, mem, want := rng.IntN(40), rng.Int64N(300), 1+rng.IntN(4)
			fit, best := s.FittingNodes(model, gpus, cpus, mem, want)
			sFit, sBest := scanFit(s, model, gpus, cpus, mem)
			if fit != min(sFit, want) || best != sBest {
				t.Fatalf("%s: %d %q GPUs, %d CPUs, %d MB, want %d: fitting %d best %d; scan %d, %d", step, gpus, model, cpus, mem, want, fit, best, sFit, sBest)
			}
		}
	}
}

// TestIndexesMatchAFullScan applies random batches (new jobs, in and out of ID order,
// state changes, new attempts and rank reports, nodes added, changed, lost and deleted)
// and, after each, compares every index with a scan of everything; then a fresh state
// loaded from everything in random order, as a restart does, must agree too.
func TestIndexesMatchAFullScan(t *testing.T) {
	for seed := range uint64(12) {
		var snaps snapshotCheck
		rng := rand.New(rand.NewPCG(seed, 12))
		s := New()
		var jobs []api.Job
		attempts := map[int64][]api.Attempt{}
		nodes := map[string]api.Node{}
		now := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
		randomNode := func(name string) api.Node {
			n := api.Node{Name: name, State: api.NodeReady, Inventory: api.Inventory{CPUs: rng.IntN(40), MemoryMB: rng.Int64N(300)}}
			if rng.IntN(4) == 0 {
				n.State = api.NodeLost
			}
			models := []string{"A100", "H100", "T4"}
			for g := range rng.IntN(5) {
				n.GPUs = append(n.GPUs, api.GPU{Index: g, Model: models[rng.IntN(len(models))]})
			}
			return n
		}
		for step := range 100 {
			b := &batch.Batch{}
			for range 1 + rng.IntN(4) {
				switch op := rng.IntN(10); {
				case op < 3 || len(jobs) == 0: // a new job, usually next in order
					id := s.maxID + 1 + rng.Int64N(3)
					if rng.IntN(5) == 0 && s.maxID > 3 {
						id = 1 + rng.Int64N(s.maxID) // fills a gap, or changes a job in place
					}
					if slices.ContainsFunc(b.Jobs, func(j api.Job) bool { return j.ID == id }) {
						continue
					}
					user := []string{"alice", "bob"}[rng.IntN(2)]
					j := api.Job{ID: id, Spec: api.JobSpec{User: user, Queue: []string{"train", "batch"}[rng.IntN(2)], GPUs: rng.IntN(5)}, State: allStates[rng.IntN(2)]}
					b.Jobs = append(b.Jobs, j)
				case op < 6: // a job changes state, maybe queue, maybe with a new attempt
					j := jobs[rng.IntN(len(jobs))]
					j.State = allStates[rng.IntN(len(allStates))]
					if rng.IntN(8) == 0 {
						j.Spec.Queue = "dev"
					}
					switch rng.IntN(4) { // flagged idle, or not
					case 0:
						j.IdleSince = &now
					case 1:
						j.IdleSince = nil
					}
					b.Jobs = append(b.Jobs, j)
					if rng.IntN(2) == 0 {
						a := api.Attempt{JobID: j.ID, N: len(attempts[j.ID]) + 1, AssignTime: now}
						for range 1 + rng.IntN(3) {
							a.Placements = append(a.Placements, api.Placement{Node: indexNodes[rng.IntN(len(indexNodes))], CPUs: rng.IntN(4), MemoryMB: rng.Int64N(100), GPUIndices: []int{rng.IntN(4)}})
						}
						b.Attempts = append(b.Attempts, a)
					}
				case op < 7: // a rank of the current attempt reports, or the attempt moves
					j := jobs[rng.IntN(len(jobs))]
					list := attempts[j.ID]
					if len(list) == 0 {
						continue
					}
					a := list[len(list)-1]
					a.Placements = slices.Clone(a.Placements)
					i := rng.IntN(len(a.Placements))
					a.Placements[i].State = []api.JobState{api.StateSucceeded, api.StateRunning}[rng.IntN(2)]
					if rng.IntN(2) == 0 {
						a.Placements[i].Node = indexNodes[rng.IntN(len(indexNodes))]
					}
					b.Attempts = append(b.Attempts, a)
				case op < 9: // a node registers, changes or is lost
					b.Nodes = append(b.Nodes, randomNode(indexNodes[rng.IntN(len(indexNodes))]))
				default:
					if len(nodes) > 0 {
						name := indexNodes[rng.IntN(len(indexNodes))]
						b.DeleteNodes = append(b.DeleteNodes, name)
					}
				}
			}
			// Parts read before the batch build, after it, the snapshot of before.
			at := now.Add(time.Duration(step) * time.Minute)
			before := s.Snapshot(at, nil)
			parts := s.SnapshotParts(at, nil)
			s.Apply(b)
			for _, j := range b.Jobs {
				if i := slices.IndexFunc(jobs, func(o api.Job) bool { return o.ID == j.ID }); i >= 0 {
					jobs[i] = j
				} else {
					jobs = append(jobs, j)
				}
			}
			for _, a := range b.Attempts {
				list := attempts[a.JobID]
				if a.N > len(list) {
					list = append(list, a)
				} else {
					list[a.N-1] = a
				}
				attempts[a.JobID] = list
			}
			for _, n := range b.Nodes {
				nodes[n.Name] = n
			}
			for _, name := range b.DeleteNodes {
				delete(nodes, name)
			}
			if rng.IntN(5) == 0 {
				// Leftover processes take a GPU, or give it back, outside any batch.
				s.SetNodeLive(indexNodes[rng.IntN(len(indexNodes))], nil, nil, []int{rng.IntN(4)}[:rng.IntN(2)])
			}
			if got := parts.Build(); !reflect.DeepEqual(got, before) {
				t.Fatalf("seed %d step %d: parts read before a change build another snapshot than was taken then:\n%+v\nwant\n%+v", seed, step, got, before)
			}
			checkIndexes(t, s, rng, fmt.Sprintf("seed %d step %d", seed, step))
			snaps.check(t, s, now.Add(time.Duration(step)*time.Minute), fmt.Sprintf("seed %d step %d", seed, step))
		}
		// A restart: everything at once, in no particular order.
		all := &batch.Batch{Jobs: slices.Clone(jobs)}
		rng.Shuffle(len(all.Jobs), func(i, j int) { all.Jobs[i], all.Jobs[j] = all.Jobs[j], all.Jobs[i] })
		for _, list := range attempts {
			all.Attempts = append(all.Attempts, list...)
		}
		for _, n := range nodes {
			all.Nodes = append(all.Nodes, n)
		}
		again := New()
		again.Apply(all)
		checkIndexes(t, again, rng, fmt.Sprintf("seed %d reloaded", seed))
		for _, n := range indexNodes {
			if a, b := again.ActiveOnNode(n), s.ActiveOnNode(n); !slices.Equal(a, b) {
				t.Fatalf("seed %d: after a reload %s runs %v, before %v", seed, n, a, b)
			}
		}
		p1, _ := again.JobsPage(0, nil, 1<<30, nil)
		p2, _ := s.JobsPage(0, nil, 1<<30, nil)
		if len(p1) != len(p2) {
			t.Fatalf("seed %d: %d jobs after a reload, %d before", seed, len(p1), len(p2))
		}
	}
}

// TestJobsPageWalksTheCursor pages through 300 jobs of mixed states, 7 at a time, and
// gets each job of the states asked for exactly once, in order.
func TestJobsPageWalksTheCursor(t *testing.T) {
	s := New()
	b := &batch.Batch{}
	var want []int64
	for id := int64(1); id <= 300; id++ {
		st := allStates[id%int64(len(allStates))]
		b.Jobs = append(b.Jobs, api.Job{ID: id, State: st})
		if !st.Terminal() {
			want = append(want, id)
		}
	}
	s.Apply(b)
	live := []api.JobState{api.StatePending, api.StateHeld, api.StateAssigned, api.StateRunning}
	var got []int64
	after, pages := int64(0), 0
	for {
		page, more := s.JobsPage(after, live, 7, nil)
		for _, j := range page {
			got = append(got, j.ID)
		}
		pages++
		if !more {
			break
		}
		after = page[len(page)-1].ID
	}
	if !slices.Equal(got, want) {
		t.Fatalf("paging gave %v; want %v", got, want)
	}
	if wantPages := (len(want) + 6) / 7; pages != wantPages {
		t.Errorf("%d pages; want %d", pages, wantPages)
	}
	for _, after := range []int64{1 << 40, math.MaxInt64} {
		if page, more := s.JobsPage(after, nil, 5, nil); len(page) != 0 || more {
			t.Errorf("cursor %d, past the last job, gives %d jobs, more=%v", after, len(page), more)
		}
	}
	if page, _ := s.JobsPage(-5, nil, 2, nil); len(page) != 2 || page[0].ID != 1 {
		t.Errorf("a cursor before the first job gives %v", page)
	}
	if page, more := s.JobsPage(0, []api.JobState{"NOSUCH"}, 5, nil); len(page) != 0 || more {
		t.Errorf("a state no job is in gives %d jobs, more=%v", len(page), more)
	}
}

// snapshotCheck holds a state's snapshots, made from what the last one was made of, to a
// snapshot made from nothing, and holds every snapshot it saw to what it was when made:
// a plan made from one while the state moves on must not see it move.
type snapshotCheck struct {
	last     *sched.Snapshot
	lastJSON []byte
}

func (c *snapshotCheck) check(t *testing.T, s *State, now time.Time, step string) {
	t.Helper()
	if c.last != nil {
		if got, _ := json.Marshal(c.last); !bytes.Equal(got, c.lastJSON) {
			t.Fatalf("%s: the previous snapshot changed after it was made:\n%s\nwas\n%s", step, got, c.lastJSON)
		}
	}
	got := s.Snapshot(now, nil)
	fresh := *s
	fresh.snap = snapCache{}
	fresh.jobIdx.entries = nil // a copy would share the entries' array
	want := fresh.Snapshot(now, nil)
	if c.last != nil && got.NodesVersion == c.last.NodesVersion && !reflect.DeepEqual(got.Nodes, c.last.Nodes) {
		t.Fatalf("%s: the nodes changed but NodesVersion stayed %d", step, got.NodesVersion)
	}
	got.NodesVersion, want.NodesVersion = 0, 0
	if !reflect.DeepEqual(got, want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		t.Fatalf("%s: snapshot from the cache\n%s\nfrom nothing\n%s", step, g, w)
	}
	got.NodesVersion = s.snap.version
	c.last = got
	c.lastJSON, _ = json.Marshal(got)
}
