package sched

import (
	"maps"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// visionProjects is team vision with 8 guaranteed and 16 at most of A100s, split into
// projects det and seg of 4 guaranteed each; det may take 6, seg 12.
func visionProjects() map[string]Team {
	return map[string]Team{
		"vision": {Name: "vision", Weight: 1, Quota: map[string]Quota{"A100": {Guaranteed: 8, Limit: 16}},
			Projects: map[string]Project{
				"det": {Name: "det", Quota: map[string]Quota{"A100": {Guaranteed: 4, Limit: 6}}},
				"seg": {Name: "seg", Quota: map[string]Quota{"A100": {Guaranteed: 4, Limit: 12}}},
			}},
		"nlp": {Name: "nlp", Weight: 1, Quota: map[string]Quota{"A100": {Guaranteed: 8, Limit: 16}}},
	}
}

func inProject(j Job, team, project string) Job {
	j.Team, j.Project = team, project
	return j
}

func runningIn(r Running, team, project string) Running {
	r.Team, r.Project = team, project
	return r
}

// A project's limit caps its jobs even where its team has room, and the refusal names the
// project with its numbers; the team's other work is not held back.
func TestProjectLimitCapsItsJobs(t *testing.T) {
	s := snapshot([]Node{gpuNode("n1", "A100", 16)},
		[]Running{runningIn(busy(1, "n1", 0, 0, 1, 2, 3, 4, 5), "vision", "det")},
		inProject(job(2, 1, "A100"), "vision", "det"),
		inProject(job(3, 2, "A100"), "vision", "seg"),
		inProject(job(4, 2, "A100"), "vision", ""))
	s.Teams = visionProjects()
	p := mustSchedule(s, Options{})
	pj, ok := pendingOf(p, 2)
	if !ok || pj.Reason.Code != ReasonQuotaExceeded || pj.Reason.Project != "det" || pj.Reason.Used != 6 || pj.Reason.Limit != 6 {
		t.Fatalf("job 2: %+v; want QuotaExceeded by project det, 6 of 6", pj.Reason)
	}
	if want := "project det of team vision uses 6 of its 6-GPU A100 limit; this job needs 1"; pj.Reason.Message != want {
		t.Errorf("message %q; want %q", pj.Reason.Message, want)
	}
	for _, id := range []int64{3, 4} {
		if _, ok := placementOf(p, id); !ok {
			t.Errorf("job %d not placed; the team and project seg have room", id)
		}
	}
}

// A project's jobs run in quota up to its guarantee; beyond it they borrow the team's
// unused guarantee (inside the team) first, and capacity across teams only beyond the
// team's guarantee. A job that names a project its team lacks counts as the team's.
func TestProjectBorrowsInsideTeamBeforeAcrossTeams(t *testing.T) {
	s := snapshot([]Node{gpuNode("n1", "A100", 16)}, nil,
		inProject(job(1, 4, "A100"), "vision", "seg"),  // seg's guarantee
		inProject(job(2, 4, "A100"), "vision", "seg"),  // det's idle share: inside the team
		inProject(job(3, 2, "A100"), "vision", "seg"),  // beyond the team's 8: across teams
		inProject(job(4, 2, "A100"), "vision", "nope")) // no such project: the team's, borrowing
	s.Teams = visionProjects()
	p := mustSchedule(s, Options{})
	want := map[int64][2]bool{1: {false, false}, 2: {false, true}, 3: {true, false}, 4: {true, false}}
	for id, w := range want {
		pl, ok := placementOf(p, id)
		if !ok {
			t.Fatalf("job %d not placed: %+v", id, p.Pending)
		}
		if pl.Borrowing != w[0] || pl.BorrowingInTeam != w[1] {
			t.Errorf("job %d: borrowing %v, inside the team %v; want %v, %v", id, pl.Borrowing, pl.BorrowingInTeam, w[0], w[1])
		}
	}
}

// A project's guarantee is honoured like a team's: its in-quota job reclaims, and takes
// the GPUs another team borrows before those its own team's other project borrows inside
// the team, even where those would lose less work.
func TestProjectReclaimsAcrossTeamsBeforeInsideTeam(t *testing.T) {
	now := t0
	teams := map[string]Team{
		"vision": {Name: "vision", Weight: 1, Quota: map[string]Quota{"A100": {Guaranteed: 4, Limit: 8}},
			Projects: map[string]Project{
				"det": {Name: "det", Quota: map[string]Quota{"A100": {Guaranteed: 2, Limit: 4}}},
				"seg": {Name: "seg", Quota: map[string]Quota{"A100": {Guaranteed: 2, Limit: 4}}},
			}},
		"nlp": {Name: "nlp", Weight: 1, Quota: map[string]Quota{"A100": {Guaranteed: 2, Limit: 8}}},
	}
	run := func(id int64, team, project string, started time.Duration, idx ...int) Running {
		r := runningIn(busy(id, "n1", 0, idx...), team, project)
		r.Start = now.Add(-started)
		return r
	}
	inTeam := run(11, "vision", "det", 20*time.Minute, 2, 3) // loses little
	inTeam.BorrowingInTeam = true
	across := run(21, "nlp", "", 5*time.Hour, 6, 7) // loses much more
	across.Borrowing = true
	running := []Running{run(10, "vision", "det", time.Hour, 0, 1), inTeam, run(20, "nlp", "", time.Hour, 4, 5), across}

	t.Run("across teams first", func(t *testing.T) {
		s := snapshot([]Node{gpuNode("n1", "A100", 8)}, running, inProject(job(30, 2, "A100"), "vision", "seg"))
		s.Teams = teams
		p := mustSchedule(s, Options{})
		if len(p.Preemptions) != 1 || p.Preemptions[0].JobID != 21 {
			t.Fatalf("preemptions %+v; want job 21 (borrowing across teams) reclaimed", p.Preemptions)
		}
	})
	t.Run("then inside the team", func(t *testing.T) {
		rs := []Running{running[0], running[1], running[2], run(22, "nlp", "", time.Hour, 6, 7)}
		s := snapshot([]Node{gpuNode("n1", "A100", 8)}, rs, inProject(job(30, 2, "A100"), "vision", "seg"))
		s.Teams = teams
		s.Teams["nlp"] = Team{Name: "nlp", Weight: 1, Quota: map[string]Quota{"A100": {Guaranteed: 4, Limit: 8}}}
		p := mustSchedule(s, Options{})
		if len(p.Preemptions) != 1 || p.Preemptions[0].JobID != 11 {
			t.Fatalf("preemptions %+v; want job 11 (borrowing inside team vision) reclaimed", p.Preemptions)
		}
		if !strings.Contains(p.Preemptions[0].Reason, "inside team vision") || !strings.Contains(p.Preemptions[0].Reason, "project seg") {
			t.Errorf("reason %q; want it to name the team and the project", p.Preemptions[0].Reason)
		}
	})
	t.Run("another team may not take what a team borrows inside itself", func(t *testing.T) {
		rs := []Running{running[0], running[1], run(20, "nlp", "", time.Hour, 4, 5), run(22, "nlp", "", time.Hour, 6, 7)}
		s := snapshot([]Node{gpuNode("n1", "A100", 8)}, rs, inProject(job(30, 2, "A100"), "nlp", ""))
		s.Teams = map[string]Team{"vision": teams["vision"],
			"nlp": {Name: "nlp", Weight: 1, Quota: map[string]Quota{"A100": {Guaranteed: 6, Limit: 8}}}}
		p := mustSchedule(s, Options{})
		if len(p.Preemptions) != 0 {
			t.Fatalf("preemptions %+v; want none: job 11 borrows only inside its own team", p.Preemptions)
		}
	})
}

// CPU and memory quotas count the jobs' requests over all their nodes and cap like GPU
// limits, at team and project level; a CPU-only job is held to them too.
func TestCPUAndMemoryCaps(t *testing.T) {
	teams := func() map[string]Team {
		return map[string]Team{"vision": {Name: "vision", Weight: 1, CPU: &Quota{Guaranteed: 4, Limit: 8},
			Projects: map[string]Project{"det": {Name: "det", Memory: &Quota{Limit: 4096}}}}}
	}
	withCompute := func(j Job, cpus int, mem int64) Job {
		j.Request.CPUs, j.Request.MemoryMB = cpus, mem
		return j
	}
	running := busy(1, "n1", 0, 0)
	running.Allocs[0].CPUs, running.Allocs[0].MemoryMB = 6, 3072
	running.Project = "det"

	s := snapshot([]Node{gpuNode("n1", "A100", 8)}, []Running{running},
		withCompute(inProject(job(2, 0, ""), "vision", ""), 4, 512),         // 6+4 > 8 CPUs
		withCompute(inProject(job(3, 1, "A100"), "vision", "det"), 1, 2048), // 3072+2048 > 4096 MB
		withCompute(inProject(job(4, 1, "A100"), "vision", "det"), 2, 1024)) // fits both
	s.Teams = teams()
	p := mustSchedule(s, Options{})
	pj, ok := pendingOf(p, 2)
	if !ok || pj.Reason.Code != ReasonQuotaExceeded || pj.Reason.Resource != "cpus" || pj.Reason.Used != 6 || pj.Reason.Limit != 8 {
		t.Fatalf("job 2: %+v; want the team's CPU limit, 6 of 8", pj.Reason)
	}
	if want := "team vision requests 6 of its 8-CPU limit; this job needs 4"; pj.Reason.Message != want {
		t.Errorf("message %q; want %q", pj.Reason.Message, want)
	}
	pj, ok = pendingOf(p, 3)
	if !ok || pj.Reason.Resource != "memory_mb" || pj.Reason.Project != "det" || pj.Reason.Limit != 4096 {
		t.Fatalf("job 3: %+v; want project det's memory limit", pj.Reason)
	}
	if _, ok := placementOf(p, 4); !ok {
		t.Fatalf("job 4 not placed: %+v", p.Pending)
	}

	// What a placement takes counts for the jobs after it in the same cycle.
	s = snapshot([]Node{gpuNode("n1", "A100", 8)}, nil,
		withCompute(inProject(job(5, 1, "A100"), "vision", ""), 6, 512),
		withCompute(inProject(job(6, 1, "A100"), "vision", ""), 3, 512))
	s.Teams = teams()
	p = mustSchedule(s, Options{})
	if _, ok := placementOf(p, 5); !ok {
		t.Fatal("job 5 not placed")
	}
	if pj, ok := pendingOf(p, 6); !ok || pj.Reason.Code != ReasonQuotaExceeded {
		t.Fatalf("job 6: %+v; want QuotaExceeded after job 5 took 6 of 8 CPUs", pj)
	}
}

// On random clusters with projects, no placement takes a project past its GPU limit or a
// team past its CPU cap, and the failure cache (which now keys on the project) changes no
// decision.
func TestRandomSnapshotsWithProjects(t *testing.T) {
	placedInProject := 0
	for seed := range uint64(30) {
		r := rand.New(rand.NewPCG(seed, 0x9a0))
		s := genCluster(r, 5+r.IntN(60), r.IntN(300), r.Float64(), true)
		withProjects(s)
		p := mustSchedule(s, Options{})
		checkPlan(t, s, p)
		type key struct{ team, project string }
		gpus, cpus := map[key]int{}, map[string]int{}
		count := func(team, project string, allocs []Alloc) {
			for _, a := range allocs {
				k := key{team, project}
				for i := range s.Nodes {
					if s.Nodes[i].Name != a.Node || len(a.GPUIndices) == 0 {
						continue
					}
					model := s.Nodes[i].GPUs[a.GPUIndices[0]].Model
					if team == "vision" && model != "H100" {
						continue // vision's projects have quotas of H100s only
					}
					gpus[k] += a.milli()
				}
				cpus[team] += a.CPUs
			}
		}
		for _, run := range s.Running {
			count(run.Team, run.Project, run.Allocs)
		}
		before := maps.Clone(gpus)
		cpusBefore := maps.Clone(cpus)
		byID := map[int64]*Job{}
		for i := range s.Pending {
			byID[s.Pending[i].ID] = &s.Pending[i]
		}
		for _, pl := range p.Placements {
			j := byID[pl.JobID]
			count(j.Team, j.Project, pl.Allocs)
			if j.Project != "" {
				placedInProject++
			}
		}
		for k, used := range gpus {
			pr, ok := s.Teams[k.team].Projects[k.project]
			if !ok {
				continue
			}
			for _, q := range pr.Quota {
				if limit := q.Limit * MilliGPU; used > limit && used > before[k] {
					t.Errorf("seed %d: project %s/%s holds %d milli-GPU after the plan, above its limit %d", seed, k.team, k.project, used, limit)
				}
			}
		}
		if c := s.Teams["nlp"].CPU; c != nil && cpus["nlp"] > c.Limit && cpus["nlp"] > cpusBefore["nlp"] {
			t.Errorf("seed %d: team nlp requests %d CPUs after the plan, above its cap %d", seed, cpus["nlp"], c.Limit)
		}
		o, _ := Options{}.withDefaults()
		c := newCycle(s, t0, o, newState(s, t0.UnixNano()), nil)
		c.noCache = true
		if q := c.run(); !reflect.DeepEqual(decisions(p), decisions(q)) {
			t.Fatalf("seed %d: the failure cache changed the plan", seed)
		}
	}
	if placedInProject == 0 {
		t.Error("no random snapshot placed a job of a project")
	}
}
