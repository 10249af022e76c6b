package sched

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

// genCluster builds a random but realistic snapshot: nodes of two models with 8 GPUs
// and a third on every tenth node (some with 4, a few CPU-only, some unhealthy or held GPUs, drained nodes and nodes whose
// health check failed, a third with a container runtime), about busyFrac of
// the GPUs held by running jobs with limits up to a day, and pending jobs asking for
// 1, 2, 4 or 8 GPUs (some CPU-only, some with a container image, some listing two
// models) in four queues. rich adds a few gangs, team quotas,
// and running work that preemption may touch (batch, borrowing, stopping).
func genCluster(r *rand.Rand, nodes, pending int, busyFrac float64, rich bool) *Snapshot {
	s := &Snapshot{Queues: queues()}
	models := []string{"H100", "A100"}
	for i := range nodes {
		model := models[i%2]
		if i%10 == 9 {
			model = "L40S"
		}
		n := gpuNode(fmt.Sprintf("node-%05d", i), model, 8)
		n.Labels = map[string]string{"rack": fmt.Sprintf("r%d", i/16), "switch": fmt.Sprintf("s%d", i/64), "pool": "train"}
		if i%20 == 5 {
			n.Labels["pool"] = "inference"
		}
		switch {
		case i%50 == 7:
			n.GPUs = nil // a CPU-only node
		case i%25 == 3:
			n.GPUs = n.GPUs[:4]
		case i%40 == 11:
			n.GPUs[r.IntN(8)].Healthy = false
		case i%100 == 42:
			n.Schedulable = false
		case i%30 == 13:
			n.HealthFailed = true
		case i%45 == 17:
			n.GPUs[i%8].Held = true
		}
		if i%3 == 0 {
			n.ContainerRuntime = "podman"
		}
		// CUDA versions from i, so the other draws stay as they were: some report none.
		n.CUDAVersion = []string{"12.4", "12.2", "12.8.1", ""}[i%4]
		n.Sharing = rich && i%6 == 1
		s.Nodes = append(s.Nodes, n)
		// Maintenance windows: open now, planned ahead, open-ended or not. From i, not
		// from r, so the other draws stay as they were.
		if rich && i%15 == 4 {
			m := Maintenance{Node: n.Name, Reason: "test", Start: t0.Add(time.Duration((i/15)%4-1) * 30 * time.Minute)}
			if i%2 == 0 {
				m.End = m.Start.Add(3 * time.Hour)
			}
			s.Maintenance = append(s.Maintenance, m)
		}
	}
	id := int64(1)
	for i := range s.Nodes {
		n := &s.Nodes[i]
		free := make([]int, 0, 8)
		for _, g := range n.GPUs {
			if g.Healthy && !g.Held {
				free = append(free, g.Index)
			}
		}
		for len(free) > 0 && r.Float64() < busyFrac {
			k := min(len(free), []int{1, 2, 4, 8}[r.IntN(4)])
			run := Running{ID: id, Queue: "train", Team: teamOf(id), Start: t0.Add(-time.Duration(r.IntN(3600)) * time.Second),
				Allocs: []Alloc{{Node: n.Name, GPUIndices: append([]int(nil), free[:k]...), CPUs: 4, MemoryMB: 16 << 10}}}
			if r.IntN(10) > 0 {
				run.End = t0.Add(time.Duration(1+r.IntN(24*60)) * time.Minute)
			}
			if rich {
				run.Queue = []string{"train", "batch", "inference", "batch"}[r.IntN(4)]
				run.Borrowing = r.IntN(4) == 0
				run.Preempting = r.IntN(30) == 0
				if r.IntN(2) == 0 {
					run.LastCheckpoint = t0.Add(-time.Duration(r.IntN(3600)) * time.Second)
				}
				// Service from earlier attempts, so that LAS has queues to sort.
				run.AttainedService = float64(k) * t0.Sub(run.Start).Seconds()
				if r.IntN(2) == 0 {
					run.LastRun = time.Duration(1+r.IntN(180)) * time.Minute
					run.Requeued = run.Start.Add(-time.Duration(r.IntN(24*60)) * time.Minute)
					run.AttainedService += float64(k) * run.LastRun.Seconds()
				}
			}
			if n.Sharing && k == 1 && id%2 == 0 {
				// Tenants: two or three on the GPU, some room left.
				run.Allocs[0].GPUShare = 300
				for t := range 1 + int(id%2) {
					tn := run
					tn.ID = id + 1_000_000*int64(t+1)
					tn.Allocs = []Alloc{run.Allocs[0]}
					tn.Allocs[0].GPUShare = 250
					s.Running = append(s.Running, tn)
				}
			}
			free = free[k:]
			s.Running = append(s.Running, run)
			id++
		}
	}
	qs := []string{"interactive", "train", "train", "batch"}
	for range pending {
		j := Job{ID: id, Queue: qs[r.IntN(len(qs))], Team: teamOf(id), User: "u",
			SubmitTime: t0.Add(-time.Duration(r.IntN(86400)) * time.Second),
			TimeLimit:  time.Duration(10+r.IntN(24*60)) * time.Minute,
			Request:    Request{GPUs: []int{1, 2, 4, 8}[r.IntN(4)], GPUModel: models[r.IntN(2)], CPUs: 1 + r.IntN(8), MemoryMB: int64(1+r.IntN(64)) << 10}}
		switch x := r.IntN(20); {
		case x == 0:
			j.Request.GPUs, j.Request.GPUModel = 0, ""
		case x == 1:
			j.Request.GPUModel = ""
		case x == 3:
			j.Request.GPUModel = ""
			j.Request.GPUModels = [][]string{{"L40S", "A100"}, {"H100", "L40S"}, {"A100", "H100"}}[id%3]
		case x == 2 && rich:
			j.Request.Nodes, j.Request.GPUsPerNode = 2+r.IntN(3), 8
			j.Request.GPUs = j.Request.Nodes * 8
		}
		if rich && r.IntN(10) == 0 {
			j.Queue = []string{"urgent", "inference"}[r.IntN(2)]
		}
		if rich && id%9 == 0 && j.Request.Nodes <= 1 && j.Request.GPUs > 0 {
			// A share of a GPU: a fraction, or a memory slice.
			j.Request.GPUs = 1
			if id%2 == 0 {
				j.Request.GPUShare = []int{100, 250, 500, 750}[id%4]
			} else {
				j.Request.GPUMemoryMB = int64(10+id%60) << 10
			}
		}
		if id%7 == 0 {
			j.Image = "registry.example.com/ml/train:1"
		}
		if rich && id%5 == 2 {
			j.Request.CUDA = ">=12.4"
		}
		if rich && id%13 == 3 {
			j.Request.Driver = "<550"
		}
		if rich && id%11 == 0 {
			j.StartBy = t0.Add(time.Duration(id%5) * time.Hour)
		}
		if r.IntN(3) == 0 { // requeued after earlier attempts
			j.LastRun = time.Duration(1+r.IntN(600)) * time.Minute
			j.Requeued = t0.Add(-time.Duration(r.IntN(24*60)) * time.Minute)
			j.AttainedService = float64(j.Request.GPUs) * j.LastRun.Seconds() * float64(1+r.IntN(3))
		}
		s.Pending = append(s.Pending, j)
		id++
	}
	if rich {
		// Reservations by GPU count: one open, of H100s, and one ahead, of anything in
		// pool train. From nodes, not from r, so the other draws stay as they were.
		s.Reservations = append(s.Reservations,
			Reservation{ID: 1, Team: "vision", GPUs: nodes, Model: "H100", Start: t0.Add(-time.Hour), End: t0.Add(3 * time.Hour)},
			Reservation{ID: 2, Team: "speech", GPUs: nodes/2 + 1, Pool: "train", Start: t0.Add(2 * time.Hour), End: t0.Add(6 * time.Hour)})
		inf := s.Queues["inference"]
		inf.Pools = []string{"inference"}
		s.Queues["inference"] = inf
		gpus := nodes * 8
		s.Teams = map[string]Team{
			"vision":   {Weight: 2, Usage: 5e6, Quota: map[string]Quota{"H100": {Guaranteed: gpus / 8, Limit: gpus / 3}}},
			"nlp":      {Weight: 1, Usage: 1e6, Quota: map[string]Quota{"": {Guaranteed: gpus / 8, Limit: gpus / 2}}},
			"speech":   {Weight: 1, Usage: 2e6, Quota: map[string]Quota{"A100": {Guaranteed: gpus / 16, Limit: gpus / 16}}},
			"robotics": {Weight: 1},
		}
	}
	return s
}

// decisions strips a plan of its explanations.
func decisions(p Plan) Plan {
	out := Plan{Placements: p.Placements, Preemptions: p.Preemptions, Reservations: p.Reservations, Claims: p.Claims}
	for _, pj := range p.Pending {
		out.Pending = append(out.Pending, PendingJob{JobID: pj.JobID, EstimatedStart: pj.EstimatedStart, Priority: pj.Priority})
	}
	return out
}

func teamOf(id int64) string { return []string{"vision", "nlp", "speech", "robotics"}[id%4] }

type gpuKey struct {
	node string
	idx  int
}

// liveClaims returns the snapshot's claims that can still be met at now, by claimant: the
// job is pending, the nodes are schedulable and no other team's window covers them during
// its run, the GPUs healthy and held by nothing but stopping jobs, no earlier claim (by job
// ID) names them, and the CPUs and memory that jobs not stopping and earlier claims leave
// on each node cover it. claimed maps each of their GPUs to
// its claimant.
func liveClaims(s *Snapshot, now time.Time) (map[int64]*Claim, map[gpuKey]int64) {
	nodes := map[string]*Node{}
	for i := range s.Nodes {
		nodes[s.Nodes[i].Name] = &s.Nodes[i]
	}
	pending := map[int64]*Job{}
	for i := range s.Pending {
		pending[s.Pending[i].ID] = &s.Pending[i]
	}
	working := map[gpuKey]bool{} // held by a job that is not stopping
	cpus, mem := map[string]int{}, map[string]int64{}
	for _, r := range s.Running {
		for _, a := range r.Allocs {
			if !r.Preempting {
				cpus[a.Node] += a.CPUs
				mem[a.Node] += a.MemoryMB
			}
			for _, i := range a.GPUIndices {
				working[gpuKey{a.Node, i}] = working[gpuKey{a.Node, i}] || !r.Preempting
			}
		}
	}
	order := slices.Clone(s.Claims)
	slices.SortStableFunc(order, func(a, b Claim) int { return cmp.Compare(a.JobID, b.JobID) })
	live, claimed := map[int64]*Claim{}, map[gpuKey]int64{}
next:
	for i := range order {
		cl := &order[i]
		j := pending[cl.JobID]
		if j == nil || live[cl.JobID] != nil {
			continue
		}
		end := now.Add(j.TimeLimit)
		for _, a := range cl.Allocs {
			n := nodes[a.Node]
			if n == nil || !n.Schedulable || n.HealthFailed || (j.Image != "" && n.ContainerRuntime == "") || !versionsFit(j, n) ||
				cpus[a.Node]+a.CPUs > n.CPUs || mem[a.Node]+a.MemoryMB > n.MemoryMB {
				continue next
			}
			for _, w := range s.Reservations {
				if w.Team != j.Team && slices.Contains(w.Nodes, a.Node) && w.End.After(now) && (j.TimeLimit == 0 || w.Start.Before(end)) {
					continue next
				}
			}
			if inMaintenance(s, a.Node, now, j.TimeLimit) {
				continue next
			}
			for _, idx := range a.GPUIndices {
				k := gpuKey{a.Node, idx}
				healthy := false
				for _, g := range n.GPUs {
					healthy = healthy || (g.Index == idx && g.Healthy && !g.Held)
				}
				if _, dup := claimed[k]; dup || !healthy || working[k] {
					continue next
				}
			}
		}
		live[cl.JobID] = cl
		for _, a := range cl.Allocs {
			cpus[a.Node] += a.CPUs
			mem[a.Node] += a.MemoryMB
			for _, idx := range a.GPUIndices {
				claimed[gpuKey{a.Node, idx}] = cl.JobID
			}
		}
	}
	return live, claimed
}

// inMaintenance reports whether a run of limit (zero: unlimited) from now on node would
// overlap one of its maintenance windows.
func inMaintenance(s *Snapshot, node string, now time.Time, limit time.Duration) bool {
	for _, m := range s.Maintenance {
		if m.Node != node || (!m.End.IsZero() && !m.End.After(now)) {
			continue
		}
		if limit == 0 || m.Start.Before(now.Add(limit)) {
			return true
		}
	}
	return false
}

// checkPlan verifies what must hold of any plan: each job placed or explained once, no GPU
// given twice or given while held, only healthy GPUs no leftovers hold, of the right model,
// on schedulable nodes whose health check passes (with a container runtime for a job with
// an image), and no node's CPUs or memory overcommitted by the plan. Claims: no job is placed
// on what a live claim of the snapshot holds for another, a claimant starts exactly on its
// claim or waits for its victims without choosing new ones, and the plan's claims are
// those of the jobs waiting for preemption, each on what its victims free or is free.
func checkPlan(t *testing.T, s *Snapshot, p Plan) {
	t.Helper()
	checkPlanAt(t, s, p, t0, DefaultMinRuntime)
}

// checkPlanAt is checkPlan for a plan made at now with the given minimum runtime.
func checkPlanAt(t *testing.T, s *Snapshot, p Plan, now time.Time, minRuntime time.Duration) {
	t.Helper()
	nodes := map[string]*Node{}
	for i := range s.Nodes {
		nodes[s.Nodes[i].Name] = &s.Nodes[i]
	}
	held := map[gpuKey]int64{}
	shares := map[gpuKey]int{} // milli-GPU held by tenants
	cpus, mem := map[string]int{}, map[string]int64{}
	for _, r := range s.Running {
		for _, a := range r.Allocs {
			for _, i := range a.GPUIndices {
				if a.GPUShare > 0 {
					shares[gpuKey{a.Node, i}] += a.GPUShare
					continue
				}
				held[gpuKey{a.Node, i}] = r.ID
			}
			cpus[a.Node] += a.CPUs
			mem[a.Node] += a.MemoryMB
		}
	}
	// A claim's CPUs and memory are not free to others, even while its victims hold theirs.
	live, claimed := liveClaims(s, now)
	for _, cl := range live {
		for _, a := range cl.Allocs {
			cpus[a.Node] += a.CPUs
			mem[a.Node] += a.MemoryMB
		}
	}
	jobs := map[int64]*Job{}
	for i := range s.Pending {
		jobs[s.Pending[i].ID] = &s.Pending[i]
	}
	seen := map[int64]int{}
	for _, pl := range p.Placements {
		seen[pl.JobID]++
		j := jobs[pl.JobID]
		if j == nil {
			t.Fatalf("placement of unknown job %d", pl.JobID)
		}
		if cl := live[j.ID]; cl != nil {
			if !reflect.DeepEqual(pl.Allocs, cl.Allocs) {
				t.Fatalf("job %d placed on %+v, not on its claim %+v", j.ID, pl.Allocs, cl.Allocs)
			}
			for _, a := range cl.Allocs {
				cpus[a.Node] -= a.CPUs // its claim becomes its placement
				mem[a.Node] -= a.MemoryMB
			}
		}
		total, model := 0, ""
		for _, a := range pl.Allocs {
			n := nodes[a.Node]
			if n == nil || !n.Schedulable || n.HealthFailed {
				t.Fatalf("job %d placed on unschedulable or unknown node %q", j.ID, a.Node)
			}
			if !versionsFit(j, n) {
				t.Fatalf("job %d (CUDA %q, driver %q) placed on %s, which reports CUDA %q, driver %q", j.ID, j.Request.CUDA, j.Request.Driver,
					a.Node, n.CUDAVersion, n.DriverVersion)
			}
			if j.Image != "" && n.ContainerRuntime == "" {
				t.Fatalf("job %d with an image placed on %s, which has no container runtime", j.ID, a.Node)
			}
			if inMaintenance(s, a.Node, now, j.TimeLimit) {
				t.Fatalf("job %d (limit %v) placed on %s, whose maintenance window its run would cross", j.ID, j.TimeLimit, a.Node)
			}
			if pools := s.Queues[j.Queue].Pools; pools != nil && !slices.Contains(pools, n.Labels["pool"]) {
				t.Fatalf("job %d of queue %s placed on %s of pool %q", j.ID, j.Queue, a.Node, n.Labels["pool"])
			}
			for _, i := range a.GPUIndices {
				k := gpuKey{a.Node, i}
				if other, ok := held[k]; ok {
					t.Fatalf("GPU %s/%d given to job %d is held by job %d", a.Node, i, j.ID, other)
				}
				if other, ok := claimed[k]; ok && other != j.ID {
					t.Fatalf("GPU %s/%d given to job %d is claimed by job %d", a.Node, i, j.ID, other)
				}
				switch {
				case j.Request.Shared() != (a.GPUShare > 0):
					t.Fatalf("job %d asking %+v got alloc %+v", j.ID, j.Request, a)
				case a.GPUShare > 0 && (!n.Sharing || len(a.GPUIndices) != 1 || len(pl.Allocs) != 1):
					t.Fatalf("shared job %d got %+v on %s (sharing %v)", j.ID, pl.Allocs, a.Node, n.Sharing)
				case a.GPUShare > 0 && shares[k]+a.GPUShare > MilliGPU:
					t.Fatalf("GPU %s/%d overcommitted: %d milli held, job %d adds %d", a.Node, i, shares[k], j.ID, a.GPUShare)
				case a.GPUShare == 0 && shares[k] > 0:
					t.Fatalf("whole GPU %s/%d given to job %d has tenants", a.Node, i, j.ID)
				case j.Request.GPUShare > 0 && a.GPUShare != j.Request.GPUShare:
					t.Fatalf("job %d asked for %d milli, got %d", j.ID, j.Request.GPUShare, a.GPUShare)
				case j.Request.GPUMemoryMB > 0 && a.GPUMemoryMB != j.Request.GPUMemoryMB:
					t.Fatalf("job %d asked for %d MB, got %d", j.ID, j.Request.GPUMemoryMB, a.GPUMemoryMB)
				}
				if a.GPUShare > 0 {
					shares[k] += a.GPUShare
				} else {
					held[k] = j.ID
				}
				var g *GPU
				for gi := range n.GPUs {
					if n.GPUs[gi].Index == i {
						g = &n.GPUs[gi]
					}
				}
				if g == nil || !g.Healthy || g.Held {
					t.Fatalf("job %d given missing, unhealthy or held GPU %s/%d", j.ID, a.Node, i)
				}
				if !takesModel(j, g.Model) {
					t.Fatalf("job %d wants %s%v, got %s on %s", j.ID, j.Request.GPUModel, j.Request.GPUModels, g.Model, a.Node)
				}
				if model == "" {
					model = g.Model
				} else if g.Model != model {
					t.Fatalf("job %d got GPUs of models %s and %s", j.ID, model, g.Model)
				}
			}
			total += len(a.GPUIndices)
			before := cpus[a.Node] <= n.CPUs && mem[a.Node] <= n.MemoryMB
			cpus[a.Node] += a.CPUs
			mem[a.Node] += a.MemoryMB
			if before && (cpus[a.Node] > n.CPUs || mem[a.Node] > n.MemoryMB) {
				t.Fatalf("node %s overcommitted by job %d", a.Node, j.ID)
			}
		}
		want := j.Request.GPUs
		if j.Request.Nodes > 1 {
			want = j.Request.Nodes * j.Request.GPUsPerNode
		}
		if total != want {
			t.Fatalf("job %d got %d GPUs, wants %d", j.ID, total, want)
		}
	}
	checkHolds(t, s, p, now, claimed)
	for _, pj := range p.Pending {
		seen[pj.JobID]++
		if pj.Reason.Code == "" || pj.Reason.Message == "" {
			t.Fatalf("job %d pending without a reason: %+v", pj.JobID, pj.Reason)
		}
	}
	for id := range jobs {
		if seen[id] != 1 {
			t.Fatalf("job %d appears %d times in the plan", id, seen[id])
		}
	}
	running := map[int64]*Running{}
	for i := range s.Running {
		running[s.Running[i].ID] = &s.Running[i]
	}
	waiting := map[int64]bool{}
	for _, pj := range p.Pending {
		if pj.Reason.Code == ReasonWaitingForPreemption {
			waiting[pj.JobID] = true
		}
	}
	victims := map[int64]bool{}
	pendingQueue := map[int64]string{}
	for _, j := range s.Pending {
		pendingQueue[j.ID] = j.Queue
	}
	for _, pr := range p.Preemptions {
		v := running[pr.JobID]
		vq, fq := s.Queues[v.Queue], s.Queues[pendingQueue[pr.ForJob]]
		switch {
		case v == nil:
			t.Fatalf("preemption of job %d, which is not running", pr.JobID)
		case tenant(v):
			t.Fatalf("tenant %d preempted", pr.JobID)
		case victims[pr.JobID]:
			t.Fatalf("job %d preempted twice", pr.JobID)
		case v.Preempting:
			t.Fatalf("job %d is already stopping", pr.JobID)
		case s.Queues[v.Queue].NeverPreempt:
			t.Fatalf("job %d of queue %s must never be preempted", pr.JobID, v.Queue)
		case !s.Queues[v.Queue].Preemptible && !v.Borrowing:
			t.Fatalf("job %d neither preemptible nor borrowing", pr.JobID)
		case !waiting[pr.ForJob]:
			t.Fatalf("job %d preempted for job %d, which does not wait for it", pr.JobID, pr.ForJob)
		case now.Sub(v.Start) < minRuntime:
			t.Fatalf("job %d preempted inside its minimum runtime", pr.JobID)
		// Only reclaiming borrowed GPUs goes against the tier order; within a tier only
		// LAS preempts, and only among preemptible queues.
		case !v.Borrowing && vq.Tier > fq.Tier:
			t.Fatalf("job %d of tier %d preempted for job %d of tier %d", pr.JobID, vq.Tier, pr.ForJob, fq.Tier)
		case !v.Borrowing && vq.Tier == fq.Tier && !(lasQueue(vq) && lasQueue(fq)):
			t.Fatalf("job %d preempted for job %d of its own tier outside preemptible queues", pr.JobID, pr.ForJob)
		}
		victims[pr.JobID] = true
		if live[pr.ForJob] != nil {
			t.Fatalf("job %d preempted for job %d, whose claim its earlier victims will fill", pr.JobID, pr.ForJob)
		}
	}

	// The plan's claims: one per job waiting for preemption, each on GPUs that are free,
	// stopping, or freed by this plan's victims, and not overlapping one another.
	claimsOf := map[int64]bool{}
	taken := map[gpuKey]int64{}
	for _, pl := range p.Placements {
		for _, a := range pl.Allocs {
			for _, i := range a.GPUIndices {
				taken[gpuKey{a.Node, i}] = pl.JobID
			}
		}
	}
	for _, cl := range p.Claims {
		j := jobs[cl.JobID]
		switch {
		case j == nil:
			t.Fatalf("claim for job %d, which is not pending", cl.JobID)
		case claimsOf[cl.JobID]:
			t.Fatalf("two claims for job %d", cl.JobID)
		case !waiting[cl.JobID]:
			t.Fatalf("claim for job %d, which does not wait for preemption", cl.JobID)
		}
		claimsOf[cl.JobID] = true
		if old := live[cl.JobID]; old != nil && !reflect.DeepEqual(old.Allocs, cl.Allocs) {
			t.Fatalf("job %d's claim moved from %+v to %+v", cl.JobID, old.Allocs, cl.Allocs)
		}
		want, perNode := 1, j.Request.GPUs
		if j.Request.Nodes > 1 {
			want, perNode = j.Request.Nodes, j.Request.GPUsPerNode
		}
		if len(cl.Allocs) != want {
			t.Fatalf("job %d's claim has %d nodes, it needs %d", cl.JobID, len(cl.Allocs), want)
		}
		for _, a := range cl.Allocs {
			if len(a.GPUIndices) != perNode || a.CPUs != j.Request.CPUs || a.MemoryMB != j.Request.MemoryMB {
				t.Fatalf("job %d's claim %+v does not match its request %+v", cl.JobID, a, j.Request)
			}
			for _, i := range a.GPUIndices {
				k := gpuKey{a.Node, i}
				if other, ok := taken[k]; ok {
					t.Fatalf("GPU %s/%d of job %d's claim is also given to job %d", a.Node, i, cl.JobID, other)
				}
				taken[k] = cl.JobID
				// What preemption frees for a job is of a model it takes.
				if n := nodes[a.Node]; n != nil {
					for _, g := range n.GPUs {
						if g.Index == i && !takesModel(j, g.Model) {
							t.Fatalf("job %d wants %s%v, its claim holds %s on %s", j.ID, j.Request.GPUModel, j.Request.GPUModels, g.Model, a.Node)
						}
					}
				}
				if other, ok := claimed[k]; ok && other != cl.JobID {
					t.Fatalf("GPU %s/%d of job %d's claim is claimed by job %d", a.Node, i, cl.JobID, other)
				}
				if shares[k] > 0 {
					t.Fatalf("GPU %s/%d of job %d's claim has tenants", a.Node, i, cl.JobID)
				}
				if h, ok := held[k]; ok && running[h] != nil && !running[h].Preempting && !victims[h] {
					t.Fatalf("GPU %s/%d of job %d's claim is held by job %d, which is not stopping", a.Node, i, cl.JobID, h)
				}
			}
		}
	}
	for _, pr := range p.Preemptions {
		if !claimsOf[pr.ForJob] {
			t.Fatalf("job %d preempted for job %d, which has no claim", pr.JobID, pr.ForJob)
		}
	}
	for id := range waiting {
		if !claimsOf[id] {
			t.Fatalf("job %d waits for preemption without a claim", id)
		}
	}
}

func TestRandomSnapshots(t *testing.T) {
	shared := 0 // shared placements seen, so the test is known to cover them
	defer func() {
		if shared == 0 && !t.Failed() {
			t.Error("no random snapshot placed a share of a GPU")
		}
	}()
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 0x5eed))
		s := genCluster(r, 5+r.IntN(60), r.IntN(300), r.Float64(), true)
		for _, opts := range []Options{{}, {Placement: PlacementWorstFit}, {Order: OrderFIFO, ReservationDepth: -1}, {ReservationDepth: 3},
			{Order: OrderLAS}, {Order: OrderFIFO, NoBackfill: true}, {Weights: Weights{FairShare: 1, Service: 1}}} {
			t.Run(fmt.Sprintf("seed%d/%s-%s-%d", seed, opts.Order, opts.Placement, opts.ReservationDepth), func(t *testing.T) {
				p := mustSchedule(s, opts)
				checkPlan(t, s, p)
				for _, pl := range p.Placements {
					if pl.Allocs[0].GPUShare > 0 {
						shared++
					}
				}
				// The failure cache is only a shortcut: searching every job afresh must
				// give the same decisions (reasons may differ in detail, as cached ones
				// describe the state when the request first failed).
				o, _ := opts.withDefaults()
				c := newCycle(s, t0, o, newState(s, t0.UnixNano()), nil)
				c.noCache = true
				if q := c.run(); !reflect.DeepEqual(decisions(p), decisions(q)) {
					t.Fatalf("seed %d: the failure cache changed the plan", seed)
				}
			})
		}
	}
}

// Same input, same plan; the order of nodes, running and pending jobs in the snapshot
// must not matter either.
func TestDeterminism(t *testing.T) {
	for seed := range uint64(10) {
		r := rand.New(rand.NewPCG(seed, 7))
		s := genCluster(r, 40, 200, 0.5, true)
		a := mustSchedule(s, Options{})
		b := mustSchedule(s, Options{})
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: two plans of one snapshot differ", seed)
		}
		sh := *s
		sh.Nodes = append([]Node(nil), s.Nodes...)
		sh.Running = append([]Running(nil), s.Running...)
		sh.Pending = append([]Job(nil), s.Pending...)
		r.Shuffle(len(sh.Nodes), func(i, j int) { sh.Nodes[i], sh.Nodes[j] = sh.Nodes[j], sh.Nodes[i] })
		r.Shuffle(len(sh.Running), func(i, j int) { sh.Running[i], sh.Running[j] = sh.Running[j], sh.Running[i] })
		r.Shuffle(len(sh.Pending), func(i, j int) { sh.Pending[i], sh.Pending[j] = sh.Pending[j], sh.Pending[i] })
		if c := mustSchedule(&sh, Options{}); !reflect.DeepEqual(a, c) {
			t.Fatalf("seed %d: shuffling the snapshot changed the plan", seed)
		}
	}
}

// takesModel reports whether job j may run on GPUs of the model.
func takesModel(j *Job, model string) bool {
	if len(j.Request.GPUModels) > 0 {
		return slices.Contains(j.Request.GPUModels, model)
	}
	return j.Request.GPUModel == "" || j.Request.GPUModel == model
}

// versionsFit is the invariant's own reading of a job's version constraints.
func versionsFit(j *Job, n *Node) bool {
	cuda, err1 := ParseVersionRange(j.Request.CUDA)
	driver, err2 := ParseVersionRange(j.Request.Driver)
	return err1 == nil && err2 == nil && cuda.Match(n.CUDAVersion) && driver.Match(n.DriverVersion)
}
