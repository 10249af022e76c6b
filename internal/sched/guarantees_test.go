package sched

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// Which teams and projects may run a job within a guarantee, read from what runs.
func TestGuaranteesUnused(t *testing.T) {
	// vision: 8 A100 guaranteed, det 4 and seg 4 of them; nlp 8 A100 guaranteed.
	run := func(id int64, team, project string, idx ...int) Running {
		return runningIn(busy(id, "n1", 0, idx...), team, project)
	}
	s := snapshot([]Node{gpuNode("n1", "A100", 16), gpuNode("n2", "H100", 8)}, []Running{
		run(1, "vision", "det", 0, 1, 2, 3), // det's whole guarantee
		run(2, "vision", "det", 4, 5),       // inside the team: seg's idle share
		run(3, "nlp", "", 8, 9, 10, 11, 12, 13, 14, 15),
	})
	s.Teams = visionProjects()
	s.Teams["free"] = Team{Name: "free", Weight: 1, Quota: map[string]Quota{"": {Limit: 8}}}
	g := NewGuarantees(s)
	for _, c := range []struct {
		team, project string
		want          bool
	}{
		{"vision", "seg", true},    // seg's 4 unused
		{"vision", "det", true},    // det's are used, the team's 8 not all (6 of 8)
		{"vision", "", true},       // likewise
		{"vision", "nope", true},   // counts as the team's
		{"nlp", "", false},         // its 8 in use
		{"free", "", false},        // a limit and no guarantee
		{"nobody", "", false},      // no such team
		{"nlp", "anything", false}, // a project nlp does not have counts as nlp's
	} {
		if got := g.MayRunInQuota(c.team, c.project, 1); got != c.want {
			t.Errorf("%s/%s: may run in quota %v; want %v", c.team, c.project, got, c.want)
		}
	}
	// The size counts: vision has 2 of its 8 unused, seg 4 of its 4.
	for _, c := range []struct {
		project string
		gpus    int
		want    bool
	}{{"", 2, true}, {"", 3, false}, {"seg", 4, true}, {"seg", 5, false}, {"", 0, true}} {
		if got := g.MayRunInQuota("vision", c.project, c.gpus); got != c.want {
			t.Errorf("vision/%s, %d GPUs: may run in quota %v; want %v", c.project, c.gpus, got, c.want)
		}
	}
	if (Guarantees{}).MayRunInQuota("vision", "", 1) {
		t.Error("the zero Guarantees says a job may run in quota")
	}

	// With det's and the team's guarantees both used up, det's jobs cannot, seg's still can.
	s.Running = append(s.Running, run(4, "vision", "seg", 6, 7))
	g = NewGuarantees(s)
	if g.MayRunInQuota("vision", "det", 1) || g.MayRunInQuota("vision", "", 1) {
		t.Error("a job of det, or of the team alone, may run in quota with the team's 8 in use")
	}
	if !g.MayRunInQuota("vision", "seg", 1) {
		t.Error("seg uses 2 of its 4; its job may not run in quota")
	}
}

// Whatever admission would let run within a guarantee, MayRunInQuota says may: it errs
// only towards yes. Random teams, projects, quotas by model and running jobs.
func TestGuaranteesCoverAdmission(t *testing.T) {
	models := []string{"A100", "H100", "L4"}
	keys := []string{"A100", "H100", ""}
	sizes := []int{1, 250, MilliGPU, 2 * MilliGPU, 4 * MilliGPU, 8 * MilliGPU}
	randomQuota := func(r *rand.Rand, most int) map[string]Quota {
		q := map[string]Quota{}
		for _, k := range keys {
			if r.IntN(2) == 0 {
				g := r.IntN(most + 1)
				q[k] = Quota{Guaranteed: g, Limit: g + r.IntN(8)}
			}
		}
		return q
	}
	var yes, no, inQuota int
	for seed := range uint64(400) {
		r := rand.New(rand.NewPCG(seed, 7))
		var nodes []Node
		for i, m := range models {
			nodes = append(nodes, gpuNode(fmt.Sprintf("n%d", i), m, 16))
		}
		teams := map[string]Team{}
		for _, name := range []string{"vision", "nlp"} {
			tm := Team{Name: name, Weight: 1, Quota: randomQuota(r, 8)}
			if r.IntN(2) == 0 {
				tm.Projects = map[string]Project{"det": {Name: "det", Quota: randomQuota(r, 4)}, "seg": {Name: "seg", Quota: randomQuota(r, 4)}}
			}
			teams[name] = tm
		}
		var running []Running
		for i := range 12 {
			n := r.IntN(len(nodes))
			var idx []int
			for g := range 16 {
				if r.IntN(4) == 0 {
					idx = append(idx, g)
				}
			}
			if len(idx) == 0 {
				continue
			}
			team := []string{"vision", "nlp", "other"}[r.IntN(3)]
			run := runningIn(busy(int64(i+1), nodes[n].Name, 0, idx...), team, []string{"", "det", "seg"}[r.IntN(3)])
			if r.IntN(4) == 0 {
				// A share of one GPU: guarantees then end part-way through a GPU.
				run.Allocs[0].GPUIndices, run.Allocs[0].GPUShare = idx[:1], 250*(1+r.IntN(3))
			}
			running = append(running, run)
		}
		s := snapshot(nodes, running)
		s.Teams = teams
		g := NewGuarantees(s)
		for _, team := range []string{"vision", "nlp", "other"} {
			for _, project := range []string{"", "det", "seg", "nope"} {
				for _, milli := range sizes {
					// The stall asks with the whole GPUs a job needs on one node, never more
					// than admission counts.
					gpus := milli / MilliGPU
					may := g.MayRunInQuota(team, project, gpus)
					if may {
						yes++
					} else {
						no++
					}
					for _, m := range models {
						v := g.q.admit(team, project, m, milli)
						if !v.inQuota() {
							continue
						}
						inQuota++
						if !may {
							t.Fatalf("seed %d: admission runs %d milli-GPU of %s for %s/%s in quota (%+v), but MayRunInQuota says no for %d GPUs\nteams %+v\nused %v",
								seed, milli, m, team, project, v, gpus, teams, g.q.used)
						}
					}
				}
			}
		}
	}
	// Neither answer may be the only one, nor admission never in quota: the check above
	// would then prove nothing.
	if yes == 0 || no == 0 || inQuota == 0 {
		t.Fatalf("may %d times, may not %d times, admitted in quota %d times", yes, no, inQuota)
	}
	t.Logf("may %d times, may not %d times, admitted in quota %d times", yes, no, inQuota)
}
