package sched

import (
	"math/rand/v2"
	"testing"
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

func BenchmarkPlan_10000Nodes_10000Pending(b *testing.B) {
	benchPlan(b, 10000, 10000, true, Options{})
}

func BenchmarkPlan_10000Nodes_100000Pending(b *testing.B) {
	benchPlan(b, 10000, 100000, true, Options{})
}

func BenchmarkPlan_SingleJobIdleCluster(b *testing.B) {
	s := genCluster(rand.New(rand.NewPCG(1, 2)), 1000, 0, 0, false)
	s.Pending = []Job{job(1, 4, "H100")}
	b.ReportAllocs()
	for b.Loop() {
		mustSchedule(s, Options{})
	}
}
