// Package apitest holds what tests of more than one package work out from the API's
// types: here, what GET /api/v1/top must answer for the lists it sums up.
package apitest

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// Top is what GET /api/v1/top answers at now, worked out from lists rather than from the
// server's state: nodes is every node by name, jobs every job not ended that the caller
// may read, in ID order. It lists the first nodeRows nodes and at most jobRows jobs in
// each list, labels the array jobs on the listed nodes that are among jobs, and orders
// the waiting jobs as the server does: pending before held, each soonest estimated start
// first, those with none last, then in the order given.
func Top(now time.Time, nodes []api.Node, jobs []api.Job, nodeRows, jobRows int) api.Top {
	t := api.Top{Time: now, Pools: []api.Load{}, Nodes: []api.Node{}, Queues: []api.QueueDepth{},
		RunningJobs: []api.Job{}, WaitingJobs: []api.Job{}}
	pools := map[string]*api.Load{}
	for _, n := range nodes {
		l := api.NodeLoad(&n)
		t.Total.Add(l)
		p := n.Labels["pool"]
		if pools[p] == nil {
			pools[p] = &api.Load{Pool: p}
		}
		pools[p].Add(l)
	}
	for _, p := range slices.Sorted(maps.Keys(pools)) {
		t.Pools = append(t.Pools, *pools[p])
	}
	t.Nodes = append(t.Nodes, nodes[:min(nodeRows, len(nodes))]...)

	byID := map[int64]api.Job{}
	depth := map[string]*api.QueueDepth{}
	var waiting []api.Job
	for _, j := range jobs {
		byID[j.ID] = j
		if depth[j.Spec.Queue] == nil {
			depth[j.Spec.Queue] = &api.QueueDepth{Queue: j.Spec.Queue}
		}
		depth[j.Spec.Queue].Add(&j, 1)
		switch {
		case j.State.Active():
			if t.Running++; len(t.RunningJobs) < jobRows {
				t.RunningJobs = append(t.RunningJobs, j)
			}
		case j.State == api.StatePending:
			t.Pending++
			waiting = append(waiting, j)
		case j.State == api.StateHeld:
			t.Held++
			waiting = append(waiting, j)
		}
	}
	for _, q := range slices.Sorted(maps.Keys(depth)) {
		t.Queues = append(t.Queues, *depth[q])
	}
	// A held job ranks after every pending one, a job with no estimate after every one
	// with one.
	rank := func(j api.Job) (held int, noEstimate int, est time.Time) {
		if j.State == api.StateHeld {
			held = 1
		}
		if j.EstimatedStart == nil {
			return held, 1, time.Time{}
		}
		return held, 0, *j.EstimatedStart
	}
	slices.SortStableFunc(waiting, func(a, b api.Job) int {
		ha, na, ea := rank(a)
		hb, nb, eb := rank(b)
		return cmp.Or(cmp.Compare(ha, hb), cmp.Compare(na, nb), ea.Compare(eb))
	})
	t.WaitingJobs = append(t.WaitingJobs, waiting[:min(jobRows, len(waiting))]...)

	for _, n := range t.Nodes {
		for _, id := range n.Jobs {
			if j, ok := byID[id]; ok && j.ArrayIndex != nil {
				if t.JobLabels == nil {
					t.JobLabels = map[int64]string{}
				}
				t.JobLabels[id] = strconv.FormatInt(j.ArrayID, 10) + "_" + strconv.Itoa(*j.ArrayIndex)
			}
		}
	}
	return t
}
