package sched

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

// A Planner that keeps its node layout between calls plans exactly as ScheduleWith does,
// call after call, as running and pending jobs change and when the nodes change under a new
// NodesVersion.
func TestPlannerMatchesScheduleWith(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	base := genCluster(r, 60, 200, 0.5, true)
	for _, name := range []string{"default", "fifo", "worstfit"} {
		opts, err := OptionsFor(name)
		if err != nil {
			t.Fatal(err)
		}
		p, err := NewPlanner(opts)
		if err != nil {
			t.Fatal(err)
		}
		nodes := base.Nodes
		version := uint64(1)
		for call := range 12 {
			s := genCluster(rand.New(rand.NewPCG(uint64(call), 3)), 60, 40+call*10, 0.2+0.05*float64(call), true)
			s.Nodes, s.NodesVersion = nodes, version
			now := t0
			want, _ := ScheduleWith(s, now, opts)
			got := p.Schedule(s, now)
			if !reflect.DeepEqual(decisions(got), decisions(want)) || !reflect.DeepEqual(got.Pending, want.Pending) {
				t.Fatalf("%s, call %d: the planner's plan differs from ScheduleWith's", name, call)
			}
			checkPlan(t, s, got)
			if call == 5 {
				// A node goes away and another drains: a new version rebuilds the layout.
				nodes = append([]Node(nil), nodes[1:]...)
				nodes[3].Schedulable = false
				version++
			}
		}
	}
}
