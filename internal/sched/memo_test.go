package sched

import (
	"reflect"
	"testing"
	"time"
)

// A Planner keeps each job's demand between cycles (memos); every change to what the demand
// is derived from must reach the next plan. Each step changes one input of one job, under
// the same ID, and the Planner's plan must be ScheduleWith's.
func TestPlannerMemosFollowTheJob(t *testing.T) {
	nodes := []Node{gpuNode("a1", "A100", 8), gpuNode("a2", "A100", 8), gpuNode("h1", "H100", 8)}
	nodes[2].Labels = map[string]string{"pool": "fast"}
	busyAll := []Running{busy(100, "a1", 2*time.Hour, 0, 1, 2, 3, 4, 5, 6, 7), busy(101, "a2", 3*time.Hour, 0, 1, 2, 3, 4, 5)}
	pending := func() []Job {
		js := []Job{job(1, 4, ""), job(2, 2, "A100"), job(3, 8, "H100"), job(4, 1, ""), job(5, 2, "")}
		js[4].Team = "nlp"
		return js
	}
	teams := map[string]Team{"vision": {Name: "vision", Weight: 1}, "nlp": {Name: "nlp", Weight: 1, Usage: 5}}
	steps := []struct {
		name   string
		change func(s *Snapshot)
	}{
		{"as first seen", func(*Snapshot) {}},
		{"unchanged", func(*Snapshot) {}},
		{"more GPUs", func(s *Snapshot) { s.Pending[0].Request.GPUs = 8 }},
		{"another model", func(s *Snapshot) { s.Pending[1].Request.GPUModel = "H100" }},
		{"a model list", func(s *Snapshot) { s.Pending[3].Request.GPUModels = []string{"H100", "A100"} }},
		{"another list", func(s *Snapshot) { s.Pending[3].Request.GPUModels = []string{"A100", "H100"} }},
		{"another team", func(s *Snapshot) { s.Pending[4].Team = "vision" }},
		{"a project", func(s *Snapshot) { s.Pending[4].Project = "asr" }},
		{"a longer limit", func(s *Snapshot) { s.Pending[0].TimeLimit = 5 * time.Hour }},
		{"no limit", func(s *Snapshot) { s.Pending[0].TimeLimit = 0 }},
		{"an image", func(s *Snapshot) { s.Pending[2].Image = "pytorch:2" }},
		{"a driver range", func(s *Snapshot) { s.Pending[2].Request.Driver = ">=600" }},
		{"a pooled queue", func(s *Snapshot) {
			s.Queues["fast"] = Queue{Name: "fast", Tier: 1, Pools: []string{"fast"}}
			s.Pending[2].Queue = "fast"
		}},
		{"the queue's pools change", func(s *Snapshot) {
			s.Queues["fast"] = Queue{Name: "fast", Tier: 1, Pools: []string{"other"}}
			s.Pending[2].Queue = "fast"
		}},
		{"the queue goes", func(s *Snapshot) { s.Pending[2].Queue = "gone" }},
		{"a quota denies a model", func(s *Snapshot) {
			s.Teams["vision"] = Team{Name: "vision", Weight: 1, Quota: map[string]Quota{"A100": {Guaranteed: 0, Limit: 0}, "H100": {Guaranteed: 8, Limit: 8}}}
		}},
		// The quota's denial was for that cycle alone: without it the job may take the
		// A100s again.
		{"the quota goes", func(*Snapshot) {}},
		{"one ID twice", func(s *Snapshot) {
			dup := job(1, 1, "H100")
			s.Pending = append(s.Pending, dup)
		}},
		{"the first job leaves", func(s *Snapshot) { s.Pending = s.Pending[1:] }},
		{"reversed", func(s *Snapshot) {
			for i, j := 0, len(s.Pending)-1; i < j; i, j = i+1, j-1 {
				s.Pending[i], s.Pending[j] = s.Pending[j], s.Pending[i]
			}
		}},
	}
	for _, policy := range []string{"default", "fifo", "sjf", "las"} {
		opts, p := plannerFor(t, policy)
		for _, step := range steps {
			tm := map[string]Team{}
			for k, v := range teams {
				tm[k] = v
			}
			s := &Snapshot{Nodes: nodes, NodesVersion: 1, Queues: queues(), Teams: tm, Running: busyAll, Pending: pending()}
			step.change(s)
			want, err := ScheduleWith(s, t0, opts)
			if err != nil {
				t.Fatal(err)
			}
			got := p.Schedule(s, t0)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s, %s: the planner's plan differs from ScheduleWith's:\n got %+v\nwant %+v", policy, step.name, got, want)
			}
		}
	}
}

// Memos of jobs that left are dropped once they outnumber the jobs still pending, so a
// long-lived Planner holds memos for about the jobs of its last cycles, not for every job
// it ever saw; the jobs that stay keep theirs, with their shapes numbered anew.
func TestPlannerDropsMemosOfJobsGone(t *testing.T) {
	p, err := NewPlanner(Options{})
	if err != nil {
		t.Fatal(err)
	}
	nodes := []Node{gpuNode("a1", "A100", 8)}
	running := []Running{busy(9999, "a1", time.Hour, 0, 1, 2, 3, 4, 5)}
	for round := range 50 {
		// Two jobs that stay and wait, ahead of jobs of another shape that start: a stale
		// shape number would pass a waiting job's failure on to them.
		pending := []Job{job(1, 8, "A100"), job(2, 4, "A100")}
		for k := range 20 {
			// Each with a time limit of its own, so that each has a derived memo of its own.
			j := job(int64(1000+round*20+k), 1, "A100")
			j.TimeLimit = time.Duration(round*20+k+1) * time.Second
			pending = append(pending, j)
		}
		s := &Snapshot{Nodes: nodes, NodesVersion: 1, Queues: queues(), Running: running, Pending: pending}
		if got := planAsScheduleWith(t, p, s, round); len(got.Placements) != 2 {
			t.Fatalf("round %d: %d placements, want the two 1-GPU jobs that fit", round, len(got.Placements))
		}
	}
	if n := len(p.buf.memos.list); n > 2*22+64 {
		t.Fatalf("the planner keeps %d memos for 22 pending jobs", n)
	}
	if n := len(p.buf.memos.derived); n > 2*22+64 {
		t.Fatalf("the planner keeps %d derived memos for 22 pending jobs", n)
	}
}

// Jobs whose requests are alike share one derived memo, which follows a change that
// reaches all of them (their queue's pools); a job that lists models has one of its own.
func TestPlannerSharesDerivedMemos(t *testing.T) {
	p, err := NewPlanner(Options{})
	if err != nil {
		t.Fatal(err)
	}
	nodes := []Node{gpuNode("a1", "A100", 8), gpuNode("h1", "H100", 8)}
	nodes[0].Labels = map[string]string{"pool": "a"}
	nodes[1].Labels = map[string]string{"pool": "h"}
	running := []Running{busy(9999, "a1", time.Hour, 0, 1, 2, 3, 4, 5)}
	for step, pools := range [][]string{{"a"}, {"a"}, {"h"}, {"a", "h"}} {
		qs := queues()
		qs["pooled"] = Queue{Name: "pooled", Tier: 1, Pools: pools}
		var pending []Job
		for id := range int64(400) {
			j := job(id+1, []int{1, 2, 4, 8}[id%4], "")
			if id%2 == 1 {
				j.Queue = "pooled"
			}
			pending = append(pending, j)
		}
		// Two jobs alike but for their lists of models, which only H100s and only A100s
		// meet: sharing a memo, one would be placed on the other's model.
		h, a := job(1000, 1, ""), job(1001, 1, "")
		h.Request.GPUModels = []string{"H100", "B200"}
		a.Request.GPUModels = []string{"A100", "B200"}
		pending = append([]Job{h, a}, pending...)
		s := &Snapshot{Nodes: nodes, NodesVersion: 1, Queues: qs, Running: running, Pending: pending}
		want, err := ScheduleWith(s, t0, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Schedule(s, t0); !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d, pools %v: the planner's plan differs from ScheduleWith's:\n got %+v\nwant %+v", step, pools, got, want)
		}
		// Four sizes in two queues, each size in one queue only, and the listed jobs' own.
		if n := len(p.buf.memos.derived); n != 6 {
			t.Fatalf("step %d: %d derived memos for 402 jobs of 6 kinds, want 6", step, n)
		}
	}
}

// Derived memos no job uses any more are dropped too, when the jobs stay and their
// requests change.
func TestPlannerDropsDerivedMemosUnused(t *testing.T) {
	p, err := NewPlanner(Options{})
	if err != nil {
		t.Fatal(err)
	}
	nodes := []Node{gpuNode("a1", "A100", 8)}
	running := []Running{busy(9999, "a1", time.Hour, 0, 1, 2, 3, 4, 5, 6, 7)}
	for round := range 50 {
		var pending []Job
		for k := range 20 {
			j := job(int64(k+1), 1, "A100")
			j.TimeLimit = time.Duration(round*20+k+1) * time.Second
			pending = append(pending, j)
		}
		planAsScheduleWith(t, p, &Snapshot{Nodes: nodes, NodesVersion: 1, Queues: queues(), Running: running, Pending: pending}, round)
	}
	if n := len(p.buf.memos.derived); n > 2*20+64 {
		t.Fatalf("the planner keeps %d derived memos for 20 pending jobs", n)
	}
}

// planAsScheduleWith plans s with p, under the default policy, and fails unless the plan
// is ScheduleWith's; the plan is valid until p's next call.
func planAsScheduleWith(t *testing.T, p *Planner, s *Snapshot, round int) Plan {
	t.Helper()
	want, err := ScheduleWith(s, t0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got := p.Schedule(s, t0)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round %d: the planner's plan differs from ScheduleWith's", round)
	}
	return got
}
