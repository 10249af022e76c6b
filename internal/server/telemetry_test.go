package server

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
)

// beatFull sends one heartbeat of a node with gpus healthy GPUs as its one agent; mutate
// adds telemetry, a health check or GPU faults before it goes.
func (h *harness) beatFull(node string, gpus int, mutate func(*api.Heartbeat), tasks ...api.TaskStatus) api.HeartbeatResponse {
	h.t.Helper()
	inv := api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake"}
	for i := range gpus {
		inv.GPUs = append(inv.GPUs, api.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", node, i), Model: "H100", MemoryMB: 81559, Healthy: true})
	}
	hb := api.Heartbeat{Node: node, Inventory: inv, Tasks: tasks, Instance: "agent-" + node, ClusterID: h.srv.ClusterID(), Synced: true}
	if mutate != nil {
		mutate(&hb)
	}
	var resp api.HeartbeatResponse
	var e api.Error
	if code := h.do("POST", "/api/v1/agents/"+node+"/heartbeat", hb, &resp); code != http.StatusOK {
		h.do("POST", "/api/v1/agents/"+node+"/heartbeat", hb, &e)
		h.t.Fatalf("heartbeat %s: status %d: %s", node, code, e.Message)
	}
	return resp
}

// withReading adds a telemetry reading taken now: every listed GPU at util percent with
// memMB used, and the job's attempt using them.
func withReading(now time.Time, util float64, memMB int64, gpus []int, job int64, attempt int) func(*api.Heartbeat) {
	return func(hb *api.Heartbeat) {
		tel := &api.Telemetry{Time: now}
		for _, g := range gpus {
			tel.GPUs = append(tel.GPUs, api.GPUSample{Index: g, UtilizationPct: util, MemoryUsedMB: memMB, PowerW: 300, TemperatureC: 60})
		}
		if job > 0 {
			tel.Tasks = []api.TaskUsage{{JobID: job, Attempt: attempt, GPUUtilPct: util, GPUMemoryMB: memMB * int64(len(gpus)), CPUPct: 150, MemoryMB: 4096}}
		}
		hb.Telemetry = tel
	}
}

// events returns the stored events of one kind.
func (h *harness) events(kind string) []api.Event {
	h.t.Helper()
	evs, err := h.st.Events(context.Background(), store.EventFilter{Kind: kind, Limit: 1000})
	if err != nil {
		h.t.Fatal(err)
	}
	return evs
}

// startJob submits a job, places it and reports it running on node.
func (h *harness) startJob(node string, gpus int, spec api.JobSpec) api.Job {
	h.t.Helper()
	j := h.submit(spec)
	h.cycle()
	now := h.clock.Now()
	h.beat(node, gpus, api.TaskStatus{JobID: j.ID, Attempt: h.job(j.ID).Attempts, State: api.StateRunning, PID: 100, StartTime: &now})
	if got := h.job(j.ID); got.State != api.StateRunning {
		h.t.Fatalf("job %d: %s %s; want RUNNING", j.ID, got.State, got.Message)
	}
	return j
}

func near(got, want, tol float64) bool { return math.Abs(got-want) <= tol }

// A running job's readings show in its usage (live), its telemetry series and its node's
// GPU series; when it ends the summary is stored on the placement and survives a restart.
func TestTelemetryUsageThroughTheAPI(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 2)
	j := h.startJob("n1", 2, api.JobSpec{GPUs: 2, Command: []string{"train"}})
	for i := range 20 {
		h.clock.Add(5 * time.Second)
		h.beatFull("n1", 2, withReading(h.clock.Now(), float64(5*(i+1)), 1000, []int{0, 1}, j.ID, 1))
	}
	got := h.job(j.ID)
	u := got.Usage
	if u == nil || u.Samples != 20 {
		t.Fatalf("usage of a running job after 20 readings: %+v", u)
	}
	// Utilisation went 5, 10, … 100: mean 52.5, last 100, p95 95 (within the histogram's 5%).
	if !near(u.GPUUtilPct.Mean, 52.5, 0.01) || u.GPUUtilPct.Last != 100 || u.GPUUtilPct.Max != 100 || !near(u.GPUUtilPct.P95, 95, 95*0.05) {
		t.Errorf("GPU utilisation %+v; want mean 52.5, p95 ≈95, max and last 100", u.GPUUtilPct)
	}
	if u.GPUMemoryMB.Mean != 2000 || u.CPUPct.Last != 150 || u.MemoryMB.Max != 4096 {
		t.Errorf("memory and CPU %+v %+v %+v; want 2000 MB of GPU memory, 150%% CPU, 4096 MB", u.GPUMemoryMB, u.CPUPct, u.MemoryMB)
	}
	if p := got.AttemptList[0].Placements[0]; p.Usage == nil || p.Usage.Samples != 20 {
		t.Errorf("the running placement's live usage: %+v", p.Usage)
	}
	var list api.JobList
	h.do("GET", "/api/v1/jobs", nil, &list)
	if len(list.Jobs) != 1 || list.Jobs[0].Usage == nil || list.Jobs[0].Usage.Samples != 20 {
		t.Errorf("the listing's usage: %+v", list.Jobs)
	}

	var series api.TelemetryList
	if code := h.do("GET", fmt.Sprintf("/api/v1/jobs/%d/telemetry", j.ID), nil, &series); code != http.StatusOK {
		t.Fatalf("job telemetry: status %d", code)
	}
	if len(series.Series) != 1 || series.Series[0].Node != "n1" || series.Series[0].Attempt != 1 || len(series.Series[0].Points) < 9 {
		t.Fatalf("job telemetry %+v; want one series on n1 with a point per 10 s", series)
	}
	if last := series.Series[0].Points[len(series.Series[0].Points)-1]; last.CPUPct != 150 || last.PowerW != 600 {
		t.Errorf("last point %+v; want 150%% CPU and the power of both GPUs (600 W)", last)
	}
	var gpuSeries api.TelemetryList
	if code := h.do("GET", "/api/v1/nodes/n1/telemetry", nil, &gpuSeries); code != http.StatusOK || len(gpuSeries.Series) != 2 {
		t.Fatalf("node telemetry: status %d, %+v", code, gpuSeries)
	}
	if s := gpuSeries.Series[1]; s.GPU == nil || *s.GPU != 1 || s.StepSeconds != 60 || len(s.Points) < 2 || s.Points[0].TemperatureC != 60 {
		t.Errorf("GPU 1's series %+v; want minute points with the temperature", s)
	}
	if n := h.node("n1"); n.Telemetry == nil || len(n.Telemetry.GPUs) != 2 || n.Telemetry.GPUs[1].UtilizationPct != 100 {
		t.Errorf("node's last reading %+v", n.Telemetry)
	}

	code := 0
	h.beatFull("n1", 2, nil, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateSucceeded, ExitCode: &code, PeakMemoryMB: 5000})
	h.restart()
	got = h.job(j.ID)
	p := got.AttemptList[0].Placements[0]
	if p.Usage == nil || p.Usage.Samples != 20 || p.Usage.PeakMemoryMB != 5000 || !near(p.Usage.GPUUtilPct.Mean, 52.5, 0.01) {
		t.Fatalf("stored usage after a restart: %+v", p.Usage)
	}
	if got.Usage == nil || got.Usage.PeakMemoryMB != 5000 || got.Usage.Samples != 20 {
		t.Errorf("the ended job's usage, from its placement: %+v", got.Usage)
	}
}

// The telemetry routes refuse what they cannot answer, each naming what is wrong.
func TestTelemetryRoutesRefuse(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 1)
	running := h.startJob("n1", 1, api.JobSpec{GPUs: 1, Command: []string{"x"}})
	waiting := h.submit(api.JobSpec{GPUs: 1, Command: []string{"y"}})
	h.addUser("mia", "member")
	for _, c := range []struct {
		path  string
		code  int
		field string
		says  string
	}{
		{fmt.Sprintf("/api/v1/jobs/%d/telemetry?attempt=0", running.ID), 400, "attempt", "from 1 to"},
		{fmt.Sprintf("/api/v1/jobs/%d/telemetry?attempt=x", running.ID), 400, "attempt", `"x" is not a whole number`},
		{fmt.Sprintf("/api/v1/jobs/%d/telemetry?attempt=3", running.ID), 404, "attempt", "there is no attempt 3"},
		{fmt.Sprintf("/api/v1/jobs/%d/telemetry", waiting.ID), 404, "attempt", "has not been placed"},
		{"/api/v1/jobs/999/telemetry", 404, "id", "no job 999"},
		{"/api/v1/nodes/ghost/telemetry", 404, "name", "no node ghost"},
	} {
		var e api.Error
		if code := h.do("GET", c.path, nil, &e); code != c.code || e.Field != c.field || !strings.Contains(e.Message, c.says) {
			t.Errorf("GET %s: %d %+v; want %d naming %s (%q)", c.path, code, e, c.code, c.field, c.says)
		}
	}
	var ok api.TelemetryList
	if code := h.do("GET", fmt.Sprintf("/api/v1/jobs/%d/telemetry?attempt=1", running.ID), nil, &ok); code != 200 || len(ok.Series) != 1 || ok.Series[0].Points == nil {
		t.Errorf("attempt 1 without readings: %d %+v; want one series with no points", code, ok)
	}
}

// A member reads the telemetry of the jobs it may read, and no others.
func TestTelemetryFollowsReadRules(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 1)
	j := h.startJob("n1", 1, api.JobSpec{GPUs: 1, Command: []string{"x"}, User: "ada"})
	mia := h.addUser("mia", "member")
	var e api.Error
	if code := h.doAs(mia, "GET", fmt.Sprintf("/api/v1/jobs/%d/telemetry", j.ID), nil, &e); code != http.StatusForbidden || e.Rule != ruleTeamJobs {
		t.Errorf("another team's member: %d %+v; want 403 by %s", code, e, ruleTeamJobs)
	}
	if code := h.doAs(mia, "GET", "/api/v1/nodes/n1/telemetry", nil, nil); code != http.StatusOK {
		t.Errorf("a member reading a node's telemetry: %d; want 200", code)
	}
}

// A reading naming GPUs the node lacks or tasks that do not run there has those parts
// ignored; figures out of range are clamped; a reading sent twice counts once; process
// lists are kept within their bounds.
func TestTelemetryAbuseIsContained(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 2)
	j := h.startJob("n1", 2, api.JobSpec{GPUs: 1, Command: []string{"x"}})
	now := h.clock.Now()
	bad := func(hb *api.Heartbeat) {
		tel := &api.Telemetry{Time: now,
			GPUs: []api.GPUSample{{Index: 0, UtilizationPct: 250, MemoryUsedMB: -5}, {Index: 7, UtilizationPct: 50}, {Index: 0, UtilizationPct: 1}},
			Tasks: []api.TaskUsage{
				{JobID: j.ID, Attempt: 1, GPUUtilPct: -3, CPUPct: 1e30, MemoryMB: 100},
				{JobID: j.ID, Attempt: 7, GPUUtilPct: 99},
				{JobID: 4242, Attempt: 1, GPUUtilPct: 99},
			}}
		for i := range 2000 {
			tel.Processes = append(tel.Processes, api.GPUProcess{GPU: i % 3, PID: 1000 + i, MemoryMB: 10, Command: "evil\x1b[2J" + strings.Repeat("x", 200)})
		}
		hb.Telemetry = tel
	}
	h.beatFull("n1", 2, bad)
	h.beatFull("n1", 2, bad) // the same reading again
	u := h.job(j.ID).Usage
	if u == nil || u.Samples != 1 || u.GPUUtilPct.Last != 0 || u.CPUPct.Last != 100*maxNodeCPUs || u.MemoryMB.Last != 100 {
		t.Fatalf("usage from a bad reading sent twice: %+v; want one sample, utilisation clamped to 0, CPU to its bound", u)
	}
	n := h.node("n1")
	if n.Telemetry == nil || len(n.Telemetry.GPUs) != 1 || n.Telemetry.GPUs[0].UtilizationPct != 100 || n.Telemetry.GPUs[0].MemoryUsedMB != 0 {
		t.Errorf("node reading %+v; want GPU 0 once, clamped, and no GPU 7", n.Telemetry)
	}
	if len(n.Telemetry.Tasks) != 1 || len(n.Telemetry.Processes) != maxKeptProcesses || len(n.Leftovers) != maxLeftovers {
		t.Errorf("kept %d tasks, %d processes, %d leftovers; want 1, %d, %d", len(n.Telemetry.Tasks), len(n.Telemetry.Processes), len(n.Leftovers), maxKeptProcesses, maxLeftovers)
	}
	if c := n.Leftovers[0].Command; strings.ContainsRune(c, 0x1b) || len(c) > maxCommand+len("…") {
		t.Errorf("leftover command %q; want it printable and at most %d bytes", c, maxCommand)
	}
	if len(n.HeldGPUs) != 2 {
		t.Errorf("held GPUs %v; want 0 and 1 (the processes on GPU 2, which the node lacks, are ignored)", n.HeldGPUs)
	}
}

// A rank's series stays within its bound however long the run, and still covers it all.
func TestRankSeriesStaysBounded(t *testing.T) {
	var r rankSeries
	start := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	now := start
	for i := range 10_000 {
		now = start.Add(time.Duration(i) * 5 * time.Second)
		r.add(now, reading{util: float64(i % 100), mem: 1000})
		if len(r.points) > rankPoints {
			t.Fatalf("after %d readings the series has %d points; the bound is %d", i+1, len(r.points), rankPoints)
		}
	}
	points, step := r.series()
	if len(points) < rankPoints/2 {
		t.Errorf("%d points; a full series compacts to no fewer than %d", len(points), rankPoints/2)
	}
	if !points[0].Time.Equal(start) || now.Sub(points[len(points)-1].Time) >= time.Duration(step*float64(time.Second)) {
		t.Errorf("series covers %s to %s with step %gs; want from %s to the last reading at %s", points[0].Time, points[len(points)-1].Time, step, start, now)
	}
	total := 0.0
	for _, p := range points {
		total += p.MemoryMB
	}
	if u := r.usage(); u.Samples != 10_000 || u.MemoryMB.Mean != 1000 || !near(u.GPUUtilPct.Mean, 49.5, 0.01) || total != 1000*float64(len(points)) {
		t.Errorf("summary %+v; want 10000 samples, mean utilisation 49.5", u)
	}
}

// p95 comes from the histogram within its stated precision, over very different ranges.
func TestStatP95(t *testing.T) {
	for _, c := range []struct {
		name   string
		values func(i int) float64
		n      int
		want   float64
	}{
		{"percent", func(i int) float64 { return float64(i + 1) }, 100, 95},
		{"megabytes", func(i int) float64 { return float64(i+1) * 1000 }, 1000, 950_000},
		{"all zero", func(int) float64 { return 0 }, 50, 0},
		{"a spike", func(i int) float64 { return map[bool]float64{true: 80, false: 1}[i%10 == 0] }, 1000, 80},
	} {
		var s stat
		for i := range c.n {
			s.add(c.values(i))
		}
		if got := s.p95(); !near(got, c.want, c.want*0.05) || got > s.max {
			t.Errorf("%s: p95 %g; want %g within 5%% and at most the max %g", c.name, got, c.want, s.max)
		}
	}
}

// The GPU history holds two hours of minutes, however long the node reports.
func TestGPUHistoryKeepsTwoHours(t *testing.T) {
	var g gpuHistory
	start := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	now := start
	for i := range 6 * 60 * 3 { // three hours of readings every 10 s
		now = start.Add(time.Duration(i) * 10 * time.Second)
		g.add(now, reading{util: 40})
	}
	points := g.points(now)
	if len(points) > gpuPoints+1 || len(points) < gpuPoints {
		t.Fatalf("%d points; want the last two hours of minutes", len(points))
	}
	if oldest := now.Sub(points[0].Time); oldest > 2*time.Hour {
		t.Errorf("the oldest point is %s old; want at most two hours", oldest)
	}
	if points[len(points)-1].GPUUtilPct != 40 {
		t.Errorf("last point %+v", points[len(points)-1])
	}
}

// Ended ranks' series are dropped an hour after they end, and GPUs of nodes that are gone
// with them.
func TestTelemetryPrune(t *testing.T) {
	tel := newTelemetry()
	now := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	ended, running := rankKey{1, 1, 0}, rankKey{2, 1, 0}
	tel.addRank(ended, "n1", now, reading{util: 1}, idleYes)
	tel.addRank(running, "n1", now, reading{util: 1}, idleYes)
	tel.addGPU(gpuKey{"n1", 0}, now, reading{util: 1})
	tel.addGPU(gpuKey{"gone", 0}, now, reading{util: 1})
	tel.finish(ended, now)
	live := func(k rankKey) bool { return k == running }
	gpuKnown := func(k gpuKey) bool { return k.node == "n1" }
	nodeKnown := func(n string) bool { return n == "n1" }
	tel.prune(now.Add(30*time.Minute), live, gpuKnown, nodeKnown)
	if _, ok := tel.usage(ended); !ok || len(tel.gpus) != 1 {
		t.Fatalf("after 30 minutes: ended rank kept %v, %d GPUs; want the rank kept, the gone node's GPU dropped", ok, len(tel.gpus))
	}
	tel.prune(now.Add(61*time.Minute), live, gpuKnown, nodeKnown)
	if _, ok := tel.usage(ended); ok {
		t.Error("an ended rank's series is kept past an hour")
	}
	if _, ok := tel.usage(running); !ok {
		t.Error("a running rank's series was dropped")
	}
}

// Ranks combine into one attempt's usage: utilisation averaged by GPUs, the rest summed.
func TestCombineUsage(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	a := api.Usage{Samples: 10, First: t0, Last: t0.Add(time.Minute), GPUUtilPct: api.Stat{Mean: 90, P95: 99, Max: 100, Last: 80}, MemoryMB: api.Stat{Mean: 100, Last: 100}, PeakMemoryMB: 200}
	b := api.Usage{Samples: 5, First: t0.Add(time.Second), Last: t0.Add(2 * time.Minute), GPUUtilPct: api.Stat{Mean: 30, P95: 40, Max: 50, Last: 20}, MemoryMB: api.Stat{Mean: 50, Last: 70}, PeakMemoryMB: 100}
	got := combineUsage([]rankUsage{{a, 1}, {b, 2}})
	if got.Samples != 15 || !got.First.Equal(t0) || !got.Last.Equal(t0.Add(2*time.Minute)) || got.GPUUtilPct.Mean != 50 || got.GPUUtilPct.P95 != 99 ||
		got.GPUUtilPct.Last != 40 || got.MemoryMB.Mean != 150 || got.MemoryMB.Last != 170 || got.PeakMemoryMB != 300 {
		t.Errorf("combined %+v", got)
	}
	if combineUsage(nil) != nil || combineUsage([]rankUsage{{api.Usage{}, 1}}) != nil {
		t.Error("usage without readings should be nil (unknown), not zero")
	}
}

// BenchmarkTelemetryAdd is the cost of one reading of one rank and its GPU, which every
// heartbeat pays per task.
func BenchmarkTelemetryAdd(b *testing.B) {
	tel := newTelemetry()
	now := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		at := now.Add(time.Duration(i) * 5 * time.Second)
		tel.addGPU(gpuKey{"n1", 0}, at, reading{util: float64(i % 100), gpuMem: 1000})
		tel.addRank(rankKey{1, 1, 0}, "n1", at, reading{util: float64(i % 100), gpuMem: 1000, cpu: 100, mem: 2000}, idleNo)
	}
}
