package server

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/api/apitest"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/store"
)

// topFromLists is what GET /api/v1/top must answer, worked out the way rota top did before
// it: from the whole node list and every page of the jobs that token may read.
func (h *harness) topFromLists(token string, nodeRows, jobRows int) api.Top {
	h.t.Helper()
	var nodes api.NodeList
	if code := h.doAs(token, "GET", "/api/v1/nodes", nil, &nodes); code != http.StatusOK {
		h.t.Fatalf("nodes: %d", code)
	}
	var jobs []api.Job
	followCursor(h, token, "/api/v1/jobs", url.Values{}, 7, 100, func(p *api.JobList) ([]int64, string) {
		var ids []int64
		for _, j := range p.Jobs {
			jobs = append(jobs, j)
			ids = append(ids, j.ID)
		}
		return ids, p.Next
	})
	return apitest.Top(h.clock.Now(), nodes.Nodes, jobs, nodeRows, jobRows)
}

// checkTop compares GET /api/v1/top with topFromLists.
func (h *harness) checkTop(when, token string, nodeRows, jobRows int) api.Top {
	h.t.Helper()
	q := fmt.Sprintf("/api/v1/top?nodes=%d&jobs=%d", nodeRows, jobRows)
	if nodeRows < 0 {
		q, nodeRows = fmt.Sprintf("/api/v1/top?nodes=all&jobs=%d", jobRows), 1<<30
	}
	var got api.Top
	if code := h.doAs(token, "GET", q, nil, &got); code != http.StatusOK {
		h.t.Fatalf("%s: %s: %d", when, q, code)
	}
	want := h.topFromLists(token, nodeRows, jobRows)
	ids := func(jobs []api.Job) []int64 {
		out := []int64{}
		for _, j := range jobs {
			out = append(out, j.ID)
		}
		return out
	}
	asJSON := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	for _, c := range []struct{ what, got, want string }{
		{"total", asJSON(got.Total), asJSON(want.Total)},
		{"pools", asJSON(got.Pools), asJSON(want.Pools)},
		{"nodes", asJSON(got.Nodes), asJSON(want.Nodes)},
		{"labels", asJSON(got.JobLabels), asJSON(want.JobLabels)},
		{"counts", fmt.Sprint(got.Running, got.Pending, got.Held), fmt.Sprint(want.Running, want.Pending, want.Held)},
		{"queues", asJSON(got.Queues), asJSON(want.Queues)},
		{"running", fmt.Sprint(ids(got.RunningJobs)), fmt.Sprint(ids(want.RunningJobs))},
		{"waiting", fmt.Sprint(ids(got.WaitingJobs)), fmt.Sprint(ids(want.WaitingJobs))},
		{"running jobs", asJSON(got.RunningJobs), asJSON(want.RunningJobs)},
		{"waiting jobs", asJSON(got.WaitingJobs), asJSON(want.WaitingJobs)},
	} {
		if c.got != c.want {
			h.t.Errorf("%s: %s: %s\n  the lists say %s", when, q, c.what, c.got)
			h.t.Logf("want %s", c.want)
		}
	}
	return got
}

// TestTopIsTheListsAtAGlance: GET /api/v1/top says what the whole node list and every page
// of the job list say, for an admin and for a member who reads only some jobs, with nodes
// in three pools (one lost, whose last reading no longer counts), an array whose jobs run,
// held jobs and jobs that wait with and without an estimate; and again after a restart.
func TestTopIsTheListsAtAGlance(t *testing.T) {
	h := newHarness(t)
	alice := h.addUser("alice", "member", "vision")
	h.addUser("bob", "member")
	reading := func(util ...float64) *api.Telemetry {
		tel := &api.Telemetry{Time: h.clock.Now()}
		for i, u := range util {
			s := api.GPUSample{Index: i, UtilizationPct: u, MemoryUsedMB: int64(1000 * (i + 1)), PowerW: 100}
			if u < 0 {
				s.UtilizationPct, s.UtilizationUnknown = 0, true
			}
			tel.GPUs = append(tel.GPUs, s)
		}
		return tel
	}
	node := func(name string, gpus int, pool string, tel *api.Telemetry) {
		h.beatFull(name, gpus, func(hb *api.Heartbeat) {
			if pool != "" {
				hb.Inventory.Labels = map[string]string{"pool": pool}
			}
			hb.Telemetry = tel
		})
	}
	// c9 is lost first: its reading of 99% must no longer count.
	node("c9", 2, "", reading(99, 99))
	h.clock.Add(2 * time.Minute)
	node("a1", 4, "train", reading(10, 20, 30, -1))
	node("b1", 2, "infer", nil)
	node("a2", 4, "train", reading(50, 50, 50, 50))
	h.srv.checkNodes(context.Background())
	if n := h.node("c9"); n.State != api.NodeLost {
		t.Fatalf("c9 is %s; want lost", n.State)
	}
	var top api.Top
	h.do("GET", "/api/v1/top?nodes=0&jobs=0", nil, &top)
	if u := top.Total.GPUUtilPct; top.Total.GPUs != 12 || top.Total.Nodes != 4 || top.Total.GPUsMeasured != 8 || u == nil || *u != 260.0/7 || top.Total.PowerW != 800 {
		t.Fatalf("total %+v: want 4 nodes, 12 GPUs, 8 measured at a mean of 260/7%%, 800 W", top.Total)
	}
	if len(top.Nodes) != 0 || len(top.RunningJobs) != 0 || len(top.Pools) != 3 || top.Pools[0].Pool != "" || top.Pools[2].Pool != "train" {
		t.Fatalf("nodes=0&jobs=0 lists %d nodes, %d jobs, pools %+v", len(top.Nodes), len(top.RunningJobs), top.Pools)
	}

	// With a2 drained, no two nodes of 4 GPUs take work: the gang of job 6 waits with no
	// estimate.
	if code := h.do("POST", "/api/v1/nodes/a2/drain", nil, nil); code != http.StatusOK {
		t.Fatalf("drain a2: %d", code)
	}
	h.submit(api.JobSpec{Command: []string{"x"}, GPUs: 1, User: "alice", Array: "0-3", TimeLimit: 300})
	users := []string{"alice", "bob", "admin"}
	for i := range 24 {
		spec := api.JobSpec{Command: []string{"x"}, GPUs: 1 + i%3, User: users[i%3], TimeLimit: int64(600 * (1 + i%4)),
			Queue: []string{"train", "batch"}[i%5/3]}
		switch {
		case i%7 == 3:
			spec.Hold = true
		case i == 5:
			spec.GPUs, spec.Nodes, spec.GPUsPerNode = 8, 2, 4
		}
		h.submit(spec)
	}
	h.cycle()
	for _, rows := range []int{0, 1, 3, 100} {
		for _, nodes := range []int{0, 2, -1} {
			h.checkTop(fmt.Sprintf("admin %d/%d", nodes, rows), h.token, nodes, rows)
			h.checkTop(fmt.Sprintf("alice %d/%d", nodes, rows), alice, nodes, rows)
		}
	}
	all := h.checkTop("admin", h.token, -1, 100)
	if all.Running == 0 || all.Pending == 0 || all.Held == 0 || len(all.JobLabels) == 0 || all.Total.GPUsUsed == 0 || len(all.Queues) < 2 {
		t.Fatalf("the scenario lacks a case: %d running, %d pending, %d held, labels %v, %d GPUs used, queues %+v",
			all.Running, all.Pending, all.Held, all.JobLabels, all.Total.GPUsUsed, all.Queues)
	}
	var estimated, unestimated bool
	for _, j := range all.WaitingJobs {
		estimated = estimated || j.EstimatedStart != nil
		unestimated = unestimated || (j.State == api.StatePending && j.EstimatedStart == nil)
	}
	if !estimated || !unestimated {
		t.Fatalf("the waiting jobs lack a case: estimated %v, without an estimate %v", estimated, unestimated)
	}
	if mine := h.checkTop("alice", alice, 0, 100); mine.Running+mine.Pending+mine.Held >= all.Running+all.Pending+all.Held {
		t.Fatalf("alice reads %d jobs of %d", mine.Running+mine.Pending+mine.Held, all.Running+all.Pending+all.Held)
	}
	h.restart()
	h.checkTop("restarted", h.token, -1, 100)
	h.checkTop("restarted", alice, 2, 3)
}

func TestTopRefusesBadQueries(t *testing.T) {
	h := newHarness(t)
	for _, c := range []struct{ query, field string }{
		{"nodes=-1", "nodes"}, {"nodes=x", "nodes"}, {"nodes=", "nodes"}, {"nodes=1&nodes=2", "nodes"}, {"nodes=ALL", "nodes"},
		{"jobs=101", "jobs"}, {"jobs=-1", "jobs"}, {"jobs=all", "jobs"},
	} {
		var e api.Error
		if code := h.do("GET", "/api/v1/top?"+c.query, nil, &e); code != http.StatusBadRequest || e.Field != c.field {
			t.Errorf("%s: %d %q %s; want 400 naming %s", c.query, code, e.Field, e.Message, c.field)
		}
	}
}

// A node's idle GPUs: a whole GPU is idle with its job, a shared one only when every job
// with a share of it is.
func TestIdleGPUsOfSharedGPUs(t *testing.T) {
	h := newHarness(t)
	now := h.clock.Now()
	job := func(id int64, idle bool) api.Job {
		j := api.Job{ID: id, Spec: api.JobSpec{Command: []string{"x"}, User: "admin", Team: "default", Queue: "train", GPUs: 1},
			State: api.StateRunning, SubmitTime: now, Attempts: 1}
		if idle {
			j.IdleSince = &now
		}
		return j
	}
	b := &store.Batch{Jobs: []api.Job{job(1, true), job(2, false), job(3, true)}}
	h.srv.mu.Lock()
	defer h.srv.mu.Unlock()
	if err := h.srv.commit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	u := &cluster.NodeUsage{GPUs: map[int]int64{0: 1, 1: 2, 2: 3, 3: 2},
		Tenants: map[int][]api.Tenant{1: {{JobID: 1, Share: 0.5}, {JobID: 2, Share: 0.5}}, 2: {{JobID: 3, Share: 0.5}}}}
	var n api.Node
	fillUsage(&n, u, h.srv.flaggedIdle)
	if !slices.Equal(n.UsedGPUs, []int{0, 1, 2, 3}) || !slices.Equal(n.IdleGPUs, []int{0, 2}) {
		t.Errorf("used %v, idle %v; want 0-3 used, 0 (its job idle) and 2 (its one tenant idle) idle", n.UsedGPUs, n.IdleGPUs)
	}
}

// The glance counts GPUs by state as the web UI's cells show them, from the state's holds
// rather than the nodes' lists, and the nodes that drift: one GPU of each kind here, and
// the same counts as the node list gives.
func TestTopCountsGPUStates(t *testing.T) {
	h := newHarness(t)
	if code, e := h.putConfig("pools:\n  - name: train\n    driver: \">=550\"\n"); code != 200 {
		t.Fatalf("config: %d %s", code, e.Message)
	}
	// n2: a job on GPU 0, GPU 1 unhealthy.
	sick := func(hb *api.Heartbeat) { hb.Inventory.GPUs[1].Healthy, hb.Inventory.GPUs[1].Health = false, "XID 79" }
	h.beatFull("n2", 2, sick)
	used := h.startJob("n2", 2, api.JobSpec{GPUs: 1, Command: []string{"train"}})
	h.beatFull("n2", 2, sick, api.TaskStatus{JobID: used.ID, Attempt: 1, State: api.StateRunning, PID: 100})
	// n1: a job flagged idle on one GPU, a leftover process on the other.
	h.idleQueue(60, api.IdleWarn)
	h.beat("n1", 2)
	idle := h.startJob("n1", 2, api.JobSpec{GPUs: 1, Queue: "dev", Command: []string{"sleep"}})
	gpu := h.job(idle.ID).AttemptList[0].Placements[0].GPUIndices
	stray := api.GPUProcess{GPU: 1 - gpu[0], PID: 4242, MemoryMB: 300, Command: "python leak.py"}
	for range 3 {
		h.clock.Add(5 * time.Second)
		h.beatFull("n1", 2, func(hb *api.Heartbeat) {
			withReading(h.clock.Now(), 1, 500, gpu, idle.ID, 1)(hb)
			hb.Telemetry.Processes = []api.GPUProcess{stray}
		}, api.TaskStatus{JobID: idle.ID, Attempt: 1, State: api.StateRunning, PID: 100})
	}
	// n3 drained; n4 of pool train, with a driver older than the pool wants.
	h.beat("n3", 2)
	if code := h.do("POST", "/api/v1/nodes/n3/drain", nil, nil); code != http.StatusOK {
		t.Fatalf("drain n3: %d", code)
	}
	h.versionNode("n4", "train", "535.104.05", "12.2")
	// n5 fails its health check: it takes no work.
	h.beatFull("n5", 2, func(hb *api.Heartbeat) {
		hb.HealthCheck = &api.HealthCheck{Time: h.clock.Now(), OK: false, ExitCode: 2, Output: "ib0: link down"}
	})

	// n6 is well: the one node that needs no look.
	h.beat("n6", 2)

	n1 := h.node("n1")
	if h.job(idle.ID).IdleSince == nil || len(n1.HeldGPUs) != 1 || len(h.node("n4").Drift) == 0 {
		t.Fatalf("the scenario lacks a case: idle since %v, n1 holds back %v, n4 drifts %v", h.job(idle.ID).IdleSince, n1.HeldGPUs, h.node("n4").Drift)
	}
	top := h.checkTop("admin", h.token, -1, 10)
	want := api.GPUStates{Free: 4, Used: 1, Idle: 1, Held: 1, Unhealthy: 1, Unavailable: 4}
	if top.Total.States != want || top.Total.NodesDrifting != 1 {
		t.Errorf("GPU states %+v, %d nodes drifting; want %+v and 1", top.Total.States, top.Total.NodesDrifting, want)
	}
	// Every node but n6 needs a look, as the node list's filter says.
	var problems api.NodeList
	if code := h.do("GET", "/api/v1/nodes?problems=true", nil, &problems); code != http.StatusOK || len(problems.Nodes) != 5 {
		t.Fatalf("the nodes with a problem: %d, %d nodes; want 5", code, len(problems.Nodes))
	}
	if top.Total.NodesWithProblems != len(problems.Nodes) {
		t.Errorf("the glance counts %d nodes that need a look; the node list gives %d", top.Total.NodesWithProblems, len(problems.Nodes))
	}
	var train api.Load
	for _, p := range top.Pools {
		if p.Pool == "train" {
			train = p
		}
	}
	if train.States != (api.GPUStates{Free: 2}) || train.NodesDrifting != 1 || train.NodesWithProblems != 1 {
		t.Errorf("pool train: %+v, %d drifting, %d with a problem; want 2 free GPUs, 1 drifting, 1 with a problem", train.States, train.NodesDrifting, train.NodesWithProblems)
	}
	// A member, who may not read the jobs, sees the same GPUs taken.
	mia := h.addUser("mia", "member")
	h.checkTop("mia", mia, -1, 10)
	// The metrics count the GPUs by the same states.
	_, fams := h.scrapeMetrics(h.token)
	got := map[string]float64{}
	for _, m := range fams["rota_gpus"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "state" {
				got[l.GetValue()] += m.GetGauge().GetValue()
			}
		}
	}
	wantMetric := map[string]float64{"free": 4, "allocated": 1, "idle_holding": 1, "held": 1, "unhealthy": 1, "unavailable": 4}
	if !maps.Equal(got, wantMetric) {
		t.Errorf("rota_gpus by state: %v; want %v", got, wantMetric)
	}
}
