package report

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// randomInput makes jobs with random attempts on random nodes over about two weeks,
// with random telemetry, idle flags, checkpoints and preemptions. Attempts may overlap
// on a GPU: the report must add up whatever it is given.
func randomInput(r *rand.Rand) Input {
	base := time.Date(2026, 10, 25, 0, 0, 0, 0, time.UTC)
	at := func(maxH int) time.Time { return base.Add(time.Duration(r.IntN(maxH*3600)) * time.Second) }
	models := []string{"A100", "H100", "L4"}
	in := Input{Now: base.Add(time.Duration(200+r.IntN(200)) * time.Hour),
		Prices: []api.Price{{Model: "H100", PerGPUHour: 3.5}, {Model: "*", PerGPUHour: 1}}}
	for n := range 1 + r.IntN(4) {
		node := api.Node{Name: fmt.Sprintf("n%d", n), State: api.NodeReady}
		if r.IntN(5) == 0 {
			node.State = api.NodeLost
		}
		for i := range 1 + r.IntN(8) {
			node.GPUs = append(node.GPUs, api.GPU{Index: i, Model: models[n%len(models)]})
		}
		in.Nodes = append(in.Nodes, node)
	}
	teams, users, queues := []string{"nlp", "vision", ""}, []string{"alice", "bob", "carol", "dave"}, []string{"train", "batch"}
	reasons := []string{"", api.ReasonExitCode, api.ReasonOOM, api.ReasonPreempted, api.ReasonNodeLost, api.ReasonTimeout}
	for id := int64(1); id <= int64(5+r.IntN(40)); id++ {
		j := api.Job{ID: id, Spec: api.JobSpec{Team: teams[r.IntN(3)], User: users[r.IntN(4)], Queue: queues[r.IntN(2)]}, SubmitTime: at(300)}
		t := j.SubmitTime
		for n := 1; n <= 1+r.IntN(3); n++ {
			t = t.Add(time.Duration(r.IntN(5*3600)) * time.Second)
			a := api.Attempt{JobID: id, N: n, AssignTime: t}
			start := t.Add(time.Duration(r.IntN(60)) * time.Second)
			a.StartTime = &start
			for rank := range 1 + r.IntN(2) {
				p := api.Placement{Node: fmt.Sprintf("n%d", r.IntN(5)), GPUIndices: []int{rank, rank + 1}[:1+r.IntN(2)]}
				if r.IntN(2) == 0 {
					p.Usage = &api.Usage{Samples: 1, GPUUtilPct: api.Stat{Mean: r.Float64() * 100}}
				}
				a.Placements = append(a.Placements, p)
			}
			end := t.Add(time.Duration(r.IntN(30*3600)) * time.Second)
			if r.IntN(6) == 0 {
				a.State = api.StateRunning // still running: counts up to now
			} else {
				a.EndTime, a.Reason, a.State = &end, reasons[r.IntN(len(reasons))], api.StateFailed
				if a.Reason == "" {
					a.State = api.StateSucceeded
				}
				if r.IntN(4) == 0 {
					in.Events = append(in.Events, api.Event{Kind: api.EventCheckpoint, JobID: id, Attempt: n, Time: at(400)})
				}
				if r.IntN(5) == 0 {
					in.Events = append(in.Events, api.Event{Kind: api.EventPreempt, JobID: id, Attempt: n, Time: end})
				}
				t = end
			}
			in.Attempts = append(in.Attempts, a)
			j.Attempts = n
			if a.State == api.StateRunning {
				break
			}
		}
		if r.IntN(3) == 0 {
			idle := at(400)
			j.IdleSince = &idle
		}
		in.Jobs = append(in.Jobs, j)
	}
	return in
}

// The additive figures of the rows add up to the total's, for every grouping and any
// input; jobs and attempts do for the groupings where each attempt has one group; the
// allocated GPU-hours of a window that holds everything are the attempts' own.
func TestTotalsAddUp(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 7))
	for iter := range 60 {
		in := randomInput(r)
		since := time.Date(2026, 10, 20+r.IntN(10), r.IntN(24), 0, 0, 0, time.UTC)
		q := Query{Since: since, Until: since.Add(time.Duration(1+r.IntN(30*24)) * time.Hour)}
		for _, by := range api.UsageGroupings() {
			q.By = by
			rep, err := Compute(in, q)
			if err != nil {
				t.Fatal(err)
			}
			checkAdditive(t, fmt.Sprintf("seed %d iteration %d by %s", seed, iter, by), rep)
		}
		// A window around everything: the total is the attempts' allocated GPU time.
		all, _ := Compute(in, Query{By: api.ByTeam, Since: time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), Until: time.Date(2026, 12, 31, 0, 0, 0, 0, time.UTC)})
		sum := 0.0
		for _, a := range Account(in) {
			sum += a.AllocatedGPUSeconds / 3600
		}
		if math.Abs(all.Total.GPUHours-sum) > 1e-4 {
			t.Fatalf("seed %d iteration %d: total %v GPU-hours; the attempts hold %v", seed, iter, all.Total.GPUHours, sum)
		}
	}
}

func checkAdditive(t *testing.T, what string, rep api.UsageReport) {
	t.Helper()
	var sum api.UsageRow
	var cost float64
	for _, r := range rep.Rows {
		sum.GPUHours += r.GPUHours
		sum.EffectiveGPUHours += r.EffectiveGPUHours
		sum.MeasuredGPUHours += r.MeasuredGPUHours
		sum.IdleGPUHours += r.IdleGPUHours
		sum.PreemptionWasteGPUHours += r.PreemptionWasteGPUHours
		sum.CapacityGPUHours += r.CapacityGPUHours
		sum.IdleCapacityGPUHours += r.IdleCapacityGPUHours
		sum.Succeeded += r.Succeeded
		sum.Failed += r.Failed
		sum.Preemptions += r.Preemptions
		sum.Assigned += r.Assigned
		sum.Jobs += r.Jobs
		sum.Attempts += r.Attempts
		if r.Cost != nil {
			cost += *r.Cost
		}
	}
	tot := rep.Total
	tol := 1e-5 * float64(len(rep.Rows)+1)
	floats := []struct {
		name     string
		sum, tot float64
	}{
		{"gpu_hours", sum.GPUHours, tot.GPUHours},
		{"effective_gpu_hours", sum.EffectiveGPUHours, tot.EffectiveGPUHours},
		{"measured_gpu_hours", sum.MeasuredGPUHours, tot.MeasuredGPUHours},
		{"idle_gpu_hours", sum.IdleGPUHours, tot.IdleGPUHours},
		{"preemption_waste_gpu_hours", sum.PreemptionWasteGPUHours, tot.PreemptionWasteGPUHours},
	}
	if tot.Cost != nil {
		floats = append(floats, struct {
			name     string
			sum, tot float64
		}{"cost", cost, *tot.Cost})
	}
	if hasCapacity(rep.By) {
		floats = append(floats, struct {
			name     string
			sum, tot float64
		}{"capacity_gpu_hours", sum.CapacityGPUHours, tot.CapacityGPUHours}, struct {
			name     string
			sum, tot float64
		}{"idle_capacity_gpu_hours", sum.IdleCapacityGPUHours, tot.IdleCapacityGPUHours})
	}
	for _, f := range floats {
		if math.Abs(f.sum-f.tot) > tol {
			t.Fatalf("%s: rows add up to %v %s; the total says %v", what, f.sum, f.name, f.tot)
		}
	}
	if sum.Succeeded != tot.Succeeded || sum.Failed != tot.Failed || sum.Preemptions != tot.Preemptions || sum.Assigned != tot.Assigned {
		t.Fatalf("%s: rows count %d/%d/%d/%d succeeded/failed/preempted/assigned; the total %d/%d/%d/%d", what,
			sum.Succeeded, sum.Failed, sum.Preemptions, sum.Assigned, tot.Succeeded, tot.Failed, tot.Preemptions, tot.Assigned)
	}
	switch rep.By {
	case api.ByTeam, api.ByUser, api.ByQueue:
		if sum.Jobs != tot.Jobs || sum.Attempts != tot.Attempts {
			t.Fatalf("%s: rows count %d jobs, %d attempts; the total %d, %d", what, sum.Jobs, sum.Attempts, tot.Jobs, tot.Attempts)
		}
	default:
		if sum.Jobs < tot.Jobs || sum.Attempts < tot.Attempts {
			t.Fatalf("%s: rows count %d jobs, %d attempts; fewer than the total's %d, %d", what, sum.Jobs, sum.Attempts, tot.Jobs, tot.Attempts)
		}
	}
	if tot.GPUHours < 0 || tot.IdleCapacityGPUHours < 0 || tot.MeasuredGPUHours > tot.GPUHours+tol {
		t.Fatalf("%s: impossible total %+v", what, tot)
	}
}
