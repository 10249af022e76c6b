package sched

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// benchPlan schedules one generated snapshot b.N times and reports placements per second.
func benchPlan(b *testing.B, nodes, pending int, gangs bool, opts Options) {
	s := genCluster(rand.New(rand.NewPCG(1, 2)), nodes, pending, 0.5, gangs)
	b.ReportAllocs()
	b.ResetTimer()
	placed := 0
	for b.Loop() {
		p := mustSchedule(s, opts)
		placed += len(p.Placements)
	}
	b.ReportMetric(float64(placed)/b.Elapsed().Seconds(), "placements/s")
	b.ReportMetric(float64(placed)/float64(b.N), "placed/op")
}

func BenchmarkPlan_1000Nodes_10000Pending(b *testing.B) {
	benchPlan(b, 1000, 10000, false, Options{})
}

// The policy benchmarks add team quotas, preemptible and borrowing running work, urgent
// jobs that preempt, and gangs.
func BenchmarkPlan_1000Nodes_10000Pending_Policy(b *testing.B) {
	benchPlan(b, 1000, 10000, true, Options{})
}

// Half the jobs need CUDA >=12.4, which half the nodes report (the others report 12.2 or
// none): the version check in the chain, and pool-like searches of the nodes that match.
func BenchmarkPlan_1000Nodes_10000Pending_Versions(b *testing.B) {
	s := genCluster(rand.New(rand.NewPCG(1, 2)), 1000, 10000, 0.5, false)
	for i := range s.Pending {
		if i%2 == 0 {
			s.Pending[i].Request.CUDA = ">=12.4"
		}
	}
	benchSnapshot(b, s)
}

func BenchmarkPlan_10000Nodes_10000Pending(b *testing.B) {
	benchPlan(b, 10000, 10000, true, Options{})
}

func BenchmarkPlan_10000Nodes_100000Pending(b *testing.B) {
	benchPlan(b, 10000, 100000, true, Options{})
}

// Every GPU of 10,000 nodes held by a job without a time limit, and 69,000 jobs of four
// sizes waiting, none with a limit: no blocked job has a start to reserve, as in a cluster
// that sets no limits. Each shape works that out once per change, not once per job.
func BenchmarkPlan_10000FullNodes_69000PendingNoLimits(b *testing.B) {
	s := &Snapshot{Queues: queues()}
	for i := range 10000 {
		n := gpuNode(fmt.Sprintf("node-%05d", i), "H100", 8)
		s.Nodes = append(s.Nodes, n)
		r := busy(int64(1_000_000+i), n.Name, 0, 0, 1, 2, 3, 4, 5, 6, 7)
		s.Running = append(s.Running, r)
	}
	for id := range int64(69000) {
		j := job(id+1, []int{1, 2, 4, 8}[id%4], "H100")
		j.TimeLimit = 0
		s.Pending = append(s.Pending, j)
	}
	benchSnapshot(b, s)
}

func BenchmarkPlan_SingleJobIdleCluster(b *testing.B) {
	s := genCluster(rand.New(rand.NewPCG(1, 2)), 1000, 0, 0, false)
	s.Pending = []Job{job(1, 4, "H100")}
	b.ReportAllocs()
	for b.Loop() {
		mustSchedule(s, Options{})
	}
}

// benchShared plans a cluster where every node allows sharing and every pending job asks
// for a share of a GPU: the worst case for the share placements, which look at every GPU
// with room for every job they place.
func benchShared(b *testing.B, nodes, pending int, placement string) {
	var ns []Node
	for i := range nodes {
		n := gpuNode(fmt.Sprintf("node-%05d", i), "H100", 8)
		n.Sharing = true
		ns = append(ns, n)
	}
	var jobs []Job
	for i := range pending {
		j := shareJob(int64(i+1), []int{100, 250, 500, 750}[i%4])
		jobs = append(jobs, j)
	}
	s := snapshot(ns, nil, jobs...)
	b.ReportAllocs()
	placed := 0
	for b.Loop() {
		p := mustSchedule(s, Options{SharePlacement: placement})
		placed += len(p.Placements)
	}
	b.ReportMetric(float64(placed)/b.Elapsed().Seconds(), "placements/s")
	b.ReportMetric(float64(placed)/float64(b.N), "placed/op")
}

func BenchmarkPlanShared_100Nodes_1000Pending_FGD(b *testing.B) {
	benchShared(b, 100, 1000, SharePlacementFGD)
}

func BenchmarkPlanShared_100Nodes_1000Pending_BestFit(b *testing.B) {
	benchShared(b, 100, 1000, SharePlacementBestFit)
}

func BenchmarkPlanShared_100Nodes_1000Pending_Packing(b *testing.B) {
	benchShared(b, 100, 1000, SharePlacementPacking)
}

// Reservations by GPU count, open and ahead, of one model or any, hold GPUs for three
// teams, enough that they bind (the held team places more than without them): every
// candidate of the other teams passes the hold check.
func BenchmarkPlan_1000Nodes_10000Pending_Holds(b *testing.B) {
	s := genCluster(rand.New(rand.NewPCG(1, 2)), 1000, 10000, 0.5, false)
	s.Reservations = []Reservation{
		{ID: 1, Team: teamOf(1), GPUs: 1500, Model: "H100", Start: t0.Add(-time.Hour), End: t0.Add(6 * time.Hour)},
		{ID: 2, Team: teamOf(2), GPUs: 1000, Model: "A100", Start: t0.Add(2 * time.Hour), End: t0.Add(8 * time.Hour)},
		{ID: 3, Team: teamOf(3), GPUs: 200, Pool: "train", Start: t0, End: t0.Add(time.Hour)},
	}
	benchSnapshot(b, s)
}

// The policy benchmark with projects: vision and nlp split into two projects each, with
// GPU quotas inside the team's, a CPU cap on nlp, and every job and running job of those
// teams in one of them; a fifth of the running work borrows inside its team.
func BenchmarkPlan_1000Nodes_10000Pending_Projects(b *testing.B) {
	s := genCluster(rand.New(rand.NewPCG(1, 2)), 1000, 10000, 0.5, true)
	withProjects(s)
	benchSnapshot(b, s)
}

// withProjects gives the rich generated cluster's vision and nlp teams projects a and b.
func withProjects(s *Snapshot) {
	for _, name := range []string{"vision", "nlp"} {
		t := s.Teams[name]
		t.Projects = map[string]Project{}
		for model, q := range t.Quota {
			for _, p := range []string{"a", "b"} {
				pr := t.Projects[p]
				if pr.Quota == nil {
					pr.Quota = map[string]Quota{}
				}
				pr.Quota[model] = Quota{Guaranteed: q.Guaranteed / 2, Limit: q.Limit * 3 / 4}
				t.Projects[p] = pr
			}
		}
		if name == "nlp" {
			t.CPU = &Quota{Limit: 64 * len(s.Nodes) / 3}
		}
		s.Teams[name] = t
	}
	for i := range s.Pending {
		if t := s.Pending[i].Team; t == "vision" || t == "nlp" {
			s.Pending[i].Project = []string{"a", "b"}[s.Pending[i].ID%2]
		}
	}
	for i := range s.Running {
		if t := s.Running[i].Team; t == "vision" || t == "nlp" {
			s.Running[i].Project = []string{"a", "b"}[s.Running[i].ID%2]
			s.Running[i].BorrowingInTeam = !s.Running[i].Borrowing && s.Running[i].ID%5 == 0
		}
	}
}

// benchSnapshot plans s with the default policy for the benchmark, reporting placements.
func benchSnapshot(b *testing.B, s *Snapshot) {
	b.ReportAllocs()
	b.ResetTimer()
	placed := 0
	for b.Loop() {
		p := mustSchedule(s, Options{})
		placed += len(p.Placements)
	}
	b.ReportMetric(float64(placed)/b.Elapsed().Seconds(), "placements/s")
	b.ReportMetric(float64(placed)/float64(b.N), "placed/op")
}
