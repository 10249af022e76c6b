package sched

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"testing"
	"weak"
)

// A Planner that keeps its node layout between calls plans exactly as ScheduleWith does,
// call after call, as running and pending jobs change and when the nodes change under a new
// NodesVersion.
func TestPlannerMatchesScheduleWith(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	base := genCluster(r, 60, 200, 0.5, true)
	for _, name := range []string{"default", "fifo", "worstfit"} {
		opts, p := plannerFor(t, name)
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

// A Planner lets go of the snapshot it planned once Schedule returns: a server plans a
// new snapshot each cycle, and a planner holding the last one (every pending job of a
// long queue, copied) until the next made both live at once as the next was built.
func TestPlannerKeepsNoSnapshot(t *testing.T) {
	for _, name := range []string{"default", "fifo", "las"} {
		_, p := plannerFor(t, name)
		// Calls on one node layout, so the planner keeps what it keeps between them.
		base := genCluster(rand.New(rand.NewPCG(5, 5)), 30, 10, 0.6, true)
		for call := range 3 {
			s := genCluster(rand.New(rand.NewPCG(uint64(call), 9)), 30, 300, 0.6, true)
			s.Nodes, s.NodesVersion = base.Nodes, 1
			if len(s.Pending) == 0 || len(s.Running) == 0 {
				t.Fatalf("call %d: want a snapshot with running and pending jobs", call)
			}
			pending, running := weak.Make(&s.Pending[0]), weak.Make(&s.Running[0])
			plan := p.Schedule(s, t0)
			if len(plan.Pending)+len(plan.Placements) == 0 {
				t.Fatalf("%s, call %d: an empty plan", name, call)
			}
			s = nil
			runtime.GC()
			if pending.Value() != nil {
				t.Errorf("%s, call %d: the planner still holds the snapshot's pending jobs", name, call)
			}
			if running.Value() != nil {
				t.Errorf("%s, call %d: the planner still holds the snapshot's running jobs", name, call)
			}
			runtime.KeepAlive(plan) // nor does the plan
		}
		runtime.KeepAlive(p)
	}
}

// plannerFor returns the options of the named policy and a Planner for them.
func plannerFor(t *testing.T, name string) (Options, *Planner) {
	t.Helper()
	opts, err := OptionsFor(name)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlanner(opts)
	if err != nil {
		t.Fatal(err)
	}
	return opts, p
}

// aheadMessage says what the two sentences it replaced said, for one job and for many.
// (The simulator's plans are terse, so its recorded hashes do not hold these words.)
func TestAheadMessage(t *testing.T) {
	for _, n := range []int{1, 2, 99, 100, 12345} {
		for _, c := range []struct{ got, want string }{
			{aheadMessage(n, ", waiting for the same resources"),
				fmt.Sprintf("%s of higher priority %s ahead, waiting for the same resources", plural(n, "job"), isAre(n))},
			{aheadMessage(n, "; starting now on gpu-01 would delay their reserved start"),
				fmt.Sprintf("%s of higher priority %s ahead; starting now on %s would delay their reserved start", plural(n, "job"), isAre(n), "gpu-01")},
		} {
			if c.got != c.want {
				t.Errorf("%d: %q, want %q", n, c.got, c.want)
			}
		}
	}
}
