package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
)

// families is a parsed scrape, by metric name.
type families map[string]*dto.MetricFamily

// scrapeMetrics reads /metrics over TCP with token ("" for none) and parses it with Prometheus'
// own text parser.
func (h *harness) scrapeMetrics(token string) (int, families) {
	h.t.Helper()
	req, _ := http.NewRequest("GET", h.http.URL+"/metrics", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return h.parseScrape(http.DefaultClient, req)
}

func (h *harness) parseScrape(client *http.Client, req *http.Request) (int, families) {
	h.t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		h.t.Fatalf("parse /metrics: %v", err)
	}
	return resp.StatusCode, fams
}

// value returns the value of the one series of name whose labels include want: a gauge's
// or counter's value, a histogram's sample count.
func (f families) value(name string, want map[string]string) (float64, bool) {
	mf, ok := f[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// check compares series with their expected values; a missing series fails.
func (f families) check(t *testing.T, want []series) {
	t.Helper()
	for _, w := range want {
		got, ok := f.value(w.name, w.labels)
		if !ok {
			t.Errorf("%s%v: no such series", w.name, w.labels)
			continue
		}
		if got != w.value {
			t.Errorf("%s%v = %v; want %v", w.name, w.labels, got, w.value)
		}
	}
}

type series struct {
	name   string
	labels map[string]string
	value  float64
}

type labels = map[string]string

// metricsNode reports node n1 of pool "big": four H100s, GPU 3 unhealthy (XID 79), with
// the given tasks and reading.
func (h *harness) metricsNode(tel *api.Telemetry, tasks ...api.TaskStatus) {
	h.t.Helper()
	h.beatFull("n1", 4, func(hb *api.Heartbeat) {
		hb.Inventory.Labels = map[string]string{"pool": "big"}
		hb.Inventory.DriverVersion, hb.Inventory.CUDAVersion = "550.54.15", "12.4"
		hb.Inventory.GPUs[3].Healthy, hb.Inventory.GPUs[3].Health = false, "XID 79"
		hb.Telemetry = tel
	}, tasks...)
}

// gpuOf returns the GPU index the job's first attempt was given.
func (h *harness) gpuOf(id int64) int {
	h.t.Helper()
	return h.job(id).AttemptList[0].Placements[0].GPUIndices[0]
}

// metricsScenario builds a cluster with something in every state and returns it, with a
// scrape taken at the end:
//
//   - team ml (admin is a member) with 1 guaranteed and 3 at most of H100;
//   - node n1, pool big: 4 H100s, GPU 3 unhealthy;
//   - job A (queue train) running at 80% after waiting 90 s; job B (queue dev, idle
//     policy) running at 1%, so idle; job D failed with exit code 1; job C (4 GPUs)
//     pending.
func metricsScenario(t *testing.T) (*harness, map[string]int64, families) {
	h := newHarness(t)
	if code := h.do("PUT", "/api/v1/teams/ml", api.Team{Quotas: map[string]api.Quota{"H100": {Guaranteed: 1, Limit: 3}}, Members: []string{"admin"}}, nil); code != http.StatusOK {
		t.Fatalf("put team: %d", code)
	}
	h.idleQueue(600, api.IdleWarn)
	h.setPools(api.Pool{Name: "big", Driver: ">=550"}, api.Pool{Name: "inference", Exclusive: true})
	h.metricsNode(nil)

	jobs := map[string]int64{}
	jobs["A"] = h.submit(api.JobSpec{GPUs: 1, Command: []string{"train"}}).ID
	h.clock.Add(90 * time.Second)
	h.cycle()
	jobs["B"] = h.submit(api.JobSpec{GPUs: 1, Queue: "dev", Command: []string{"notebook"}}).ID
	h.cycle()
	jobs["D"] = h.submit(api.JobSpec{GPUs: 1, Command: []string{"false"}, RestartPolicy: api.RestartNever}).ID
	h.cycle()
	jobs["C"] = h.submit(api.JobSpec{GPUs: 4, Command: []string{"big"}}).ID
	h.cycle()

	// The first report starts A and B and ends D; the reading comes with the next, as a
	// job that started in a heartbeat is judged idle from the one after.
	now := h.clock.Now()
	running := []api.TaskStatus{
		{JobID: jobs["A"], Attempt: 1, State: api.StateRunning, PID: 100, StartTime: &now},
		{JobID: jobs["B"], Attempt: 1, State: api.StateRunning, PID: 101, StartTime: &now},
	}
	h.metricsNode(nil, append(running, api.TaskStatus{JobID: jobs["D"], Attempt: 1, State: api.StateFailed,
		StartTime: &now, EndTime: &now, ExitCode: intp(1), Reason: api.ReasonExitCode})...)
	h.clock.Add(5 * time.Second)
	h.metricsNode(&api.Telemetry{Time: h.clock.Now(), GPUs: []api.GPUSample{
		{Index: h.gpuOf(jobs["A"]), UtilizationPct: 80, MemoryUsedMB: 500, PowerW: 300, TemperatureC: 60},
		{Index: h.gpuOf(jobs["B"]), UtilizationPct: 1, MemoryUsedMB: 10, PowerW: 70, TemperatureC: 35},
	}, Tasks: []api.TaskUsage{
		{JobID: jobs["A"], Attempt: 1, GPUUtilPct: 80, GPUMemoryMB: 500},
		{JobID: jobs["B"], Attempt: 1, GPUUtilPct: 1, GPUMemoryMB: 10},
	}}, running...)
	for name, want := range map[string]api.JobState{"A": api.StateRunning, "B": api.StateRunning, "C": api.StatePending, "D": api.StateFailed} {
		if got := h.job(jobs[name]); got.State != want {
			t.Fatalf("job %s: %s (%s); want %s", name, got.State, got.Message, want)
		}
	}
	if h.job(jobs["B"]).IdleSince == nil {
		t.Fatal("job B reads 1% in an idle-policy queue but is not idle")
	}
	code, fams := h.scrapeMetrics(h.token)
	if code != http.StatusOK {
		t.Fatalf("scrape: status %d", code)
	}
	return h, jobs, fams
}

// A scrape after the scenario shows each GPU in its one state, the jobs by queue and
// state, the readings, the team against its quota, and the event metrics.
func TestMetricsScrape(t *testing.T) {
	h, jobs, fams := metricsScenario(t)
	gpuA, gpuB := fmt.Sprint(h.gpuOf(jobs["A"])), fmt.Sprint(h.gpuOf(jobs["B"]))
	big := func(state string) labels { return labels{"pool": "big", "model": "H100", "state": state} }
	fams.check(t, []series{
		{"rota_gpus", big("allocated"), 1},
		{"rota_gpus", big("idle_holding"), 1},
		{"rota_gpus", big("unhealthy"), 1},
		{"rota_gpus", big("free"), 1},
		{"rota_gpus", big("held"), 0},
		{"rota_gpus", big("unavailable"), 0},
		{"rota_nodes", labels{"pool": "big", "state": "READY"}, 1},
		{"rota_nodes", labels{"pool": "big", "state": "LOST"}, 0},
		{"rota_node_version_drift", labels{"pool": "big", "node": "n1", "component": "driver"}, 0},
		{"rota_jobs", labels{"queue": "train", "state": "PENDING"}, 1},
		{"rota_jobs", labels{"queue": "train", "state": "RUNNING"}, 1},
		{"rota_jobs", labels{"queue": "dev", "state": "RUNNING"}, 1},
		{"rota_jobs", labels{"queue": "dev", "state": "PENDING"}, 0},
		{"rota_pending_jobs", nil, 1},
		{"rota_gpu_utilization_ratio", labels{"pool": "big", "node": "n1", "gpu": gpuA, "uuid": "GPU-n1-" + gpuA, "model": "H100"}, 0.8},
		{"rota_gpu_memory_used_bytes", labels{"node": "n1", "gpu": gpuA}, 500 << 20},
		{"rota_gpu_power_watts", labels{"node": "n1", "gpu": gpuA}, 300},
		{"rota_gpu_temperature_celsius", labels{"node": "n1", "gpu": gpuA}, 60},
		{"rota_gpu_utilization_ratio", labels{"node": "n1", "gpu": gpuB}, 0.01},
		{"rota_team_gpus_in_use", labels{"team": "ml", "model": "H100"}, 2},
		{"rota_team_gpu_quota_guaranteed", labels{"team": "ml", "model": "H100"}, 1},
		{"rota_team_gpu_quota_limit", labels{"team": "ml", "model": "H100"}, 3},
		// Counts of histograms: A, D and C's cycle placed A and D in train, B in dev.
		{"rota_job_wait_seconds", labels{"queue": "train"}, 2},
		{"rota_job_wait_seconds", labels{"queue": "dev"}, 1},
		{"rota_attempts_ended_total", labels{"state": "FAILED", "reason": "exit_code"}, 1},
		{"rota_api_request_duration_seconds", labels{"route": "/api/v1/jobs", "method": "post", "code": "201"}, 4},
		{"rota_webhook_drops_total", nil, 0},
		// Cycles here are short: no arrival is left to the recompute (stall.go).
		{"rota_scheduler_arrivals_deferred_total", nil, 0},
	})
	// Only GPUs with a reading have readings.
	if n := len(fams["rota_gpu_utilization_ratio"].GetMetric()); n != 2 {
		t.Errorf("%d utilisation series; want 2, one per GPU read", n)
	}
	// A waited the 90 s the clock moved; D and B not at all.
	for _, m := range fams["rota_job_wait_seconds"].GetMetric() {
		want := map[string]float64{"train": 90, "dev": 0}[m.GetLabel()[0].GetValue()]
		if got := m.GetHistogram().GetSampleSum(); got != want {
			t.Errorf("wait sum %v = %v; want %v", m.GetLabel(), got, want)
		}
	}
	for _, name := range []string{"rota_scheduler_cycle_duration_seconds", "rota_store_commit_duration_seconds"} {
		if n, _ := fams.value(name, nil); n == 0 {
			t.Errorf("%s counted nothing", name)
		}
	}
}

// A lost node shows as lost, its GPUs as unavailable rather than free, and its last
// reading is no longer reported; its jobs' attempts count as ended, and their next wait
// runs from there.
func TestMetricsNodeLost(t *testing.T) {
	h, jobs, _ := metricsScenario(t)
	h.clock.Add(2 * time.Minute) // past the harness's LostAfter
	h.srv.checkNodes(context.Background())
	_, fams := h.scrapeMetrics(h.token)
	big := func(state string) labels { return labels{"pool": "big", "model": "H100", "state": state} }
	fams.check(t, []series{
		{"rota_nodes", labels{"pool": "big", "state": "LOST"}, 1},
		{"rota_nodes", labels{"pool": "big", "state": "READY"}, 0},
		{"rota_gpus", big("unavailable"), 3},
		{"rota_gpus", big("unhealthy"), 1},
		{"rota_gpus", big("allocated"), 0},
		{"rota_team_gpus_in_use", labels{"team": "ml", "model": "H100"}, 0},
	})
	if _, ok := fams["rota_gpu_utilization_ratio"]; ok {
		t.Error("a lost node's last reading is still reported")
	}
	var lost float64
	for _, m := range fams["rota_attempts_ended_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "reason" && l.GetValue() == api.ReasonNodeLost {
				lost += m.GetCounter().GetValue()
			}
		}
	}
	if lost != 2 {
		t.Errorf("%v attempts ended for node_lost; want 2 (A and B)", lost)
	}

	// The node comes back and A and B start again (C, which can never fit, is cancelled
	// so as not to hold their GPUs): their second wait counts from the end of their first
	// attempt, not from their submission.
	if code := h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", jobs["C"]), nil, nil); code != http.StatusOK {
		t.Fatalf("cancel C: %d", code)
	}
	h.metricsNode(nil)
	h.metricsNode(nil) // a node back from LOST takes work from its second report
	h.clock.Add(30 * time.Second)
	h.cycle()
	if got := h.job(jobs["A"]); got.State != api.StateAssigned || got.Attempts != 2 {
		t.Fatalf("job A: %s, attempt %d (%s); want its second attempt assigned", got.State, got.Attempts, got.Message)
	}
	_, fams = h.scrapeMetrics(h.token)
	for _, m := range fams["rota_job_wait_seconds"].GetMetric() {
		want := map[string]float64{"train": 90 + 30, "dev": 30}[m.GetLabel()[0].GetValue()]
		if got := m.GetHistogram().GetSampleSum(); got != want {
			t.Errorf("wait sum %v = %v; want %v", m.GetLabel(), got, want)
		}
	}
}

// /metrics is for authenticated callers, and for anyone on the server's own connections.
func TestMetricsNeedCredentials(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"no credentials", "", http.StatusUnauthorized},
		{"unknown token", "rota_0123456789abcdef_notatoken", http.StatusUnauthorized},
		{"admin token", h.token, http.StatusOK},
	} {
		if code, _ := h.scrapeMetrics(tc.token); code != tc.want {
			t.Errorf("%s: status %d; want %d", tc.name, code, tc.want)
		}
	}
	req, _ := http.NewRequest("GET", "http://rota-up/metrics", nil)
	if code, fams := h.parseScrape(h.agent, req); code != http.StatusOK || fams["rota_pending_jobs"] == nil {
		t.Errorf("in-process connection: status %d; want 200 with the metrics", code)
	}
}

// Scrapes while jobs are submitted, placed and reported: the race detector checks that
// the collector copies the state under the lock and nothing after.
func TestMetricsScrapeRace(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rec := httptest.NewRecorder()
		for {
			select {
			case <-stop:
				return
			default:
			}
			req := httptest.NewRequest("GET", "/metrics", nil)
			req = req.WithContext(context.WithValue(req.Context(), connKey{}, connInfo{local: true}))
			h.srv.handleMetrics(rec, req)
		}
	}()
	for i := range 20 {
		j := h.submit(api.JobSpec{GPUs: 1, Command: []string{"sleep"}})
		h.cycle()
		now := h.clock.Now()
		tel := &api.Telemetry{Time: now, GPUs: []api.GPUSample{{Index: i % 8, UtilizationPct: float64(i)}}}
		h.beatFull("n1", 8, func(hb *api.Heartbeat) { hb.Telemetry = tel },
			api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateSucceeded, StartTime: &now, EndTime: &now, ExitCode: intp(0)})
	}
	close(stop)
	wg.Wait()
	_, fams := h.scrapeMetrics(h.token)
	fams.check(t, []series{{"rota_attempts_ended_total", labels{"state": "SUCCEEDED", "reason": ""}, 20}})
}

// Reasons an agent makes up count as "other", so a bad agent cannot add series at will.
func TestMetricsReasonLabel(t *testing.T) {
	for in, want := range map[string]string{"": "", "oom": "oom", "node_lost": "node_lost", "rank_failed": "rank_failed", "made_up_by_an_agent": "other"} {
		if got := reasonLabel(in); got != want {
			t.Errorf("reasonLabel(%q) = %q; want %q", in, got, want)
		}
	}
}

// exported lists every series name the scenario's scrape holds, a histogram's _bucket,
// _sum and _count included.
func exported(fams families) map[string]bool {
	out := map[string]bool{}
	for name, mf := range fams {
		out[name] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out[name+s] = true
			}
		}
	}
	return out
}

var metricName = regexp.MustCompile(`\brota_[a-zA-Z0-9_]+`)

// checkNames fails for each rota_ name in expr that rota does not export, and for an
// expression that names none.
func checkNames(t *testing.T, where, expr string, have map[string]bool) {
	t.Helper()
	names := metricName.FindAllString(expr, -1)
	if len(names) == 0 {
		t.Errorf("%s: %q names no rota series", where, expr)
	}
	for _, n := range names {
		if !have[n] {
			t.Errorf("%s: %q names %s, which rota does not export", where, expr, n)
		}
	}
}

// The shipped Grafana dashboard is valid JSON of the shape Grafana imports, and every
// panel's query names series rota exports.
func TestMetricsGrafanaDashboard(t *testing.T) {
	_, _, fams := metricsScenario(t)
	have := exported(fams)
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "rota.json"))
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title      string               `json:"title"`
		Type       string               `json:"type"`
		GridPos    *struct{ H, W int }  `json:"gridPos"`
		Datasource struct{ UID string } `json:"datasource"`
		Targets    []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var dash struct {
		Title         string  `json:"title"`
		UID           string  `json:"uid"`
		SchemaVersion int     `json:"schemaVersion"`
		Panels        []panel `json:"panels"`
		Templating    struct {
			List []struct{ Name, Type, Definition string } `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("rota.json: %v", err)
	}
	if dash.Title == "" || dash.UID == "" || dash.SchemaVersion < 30 {
		t.Errorf("dashboard title %q uid %q schemaVersion %d; want all set, schema 30 or later", dash.Title, dash.UID, dash.SchemaVersion)
	}
	hasDS := false
	for _, v := range dash.Templating.List {
		hasDS = hasDS || v.Name == "DS_PROMETHEUS" && v.Type == "datasource"
		if v.Type == "query" {
			checkNames(t, "variable "+v.Name, v.Definition, have)
		}
	}
	if !hasDS {
		t.Error("no datasource variable DS_PROMETHEUS")
	}
	queries := 0
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if p.GridPos == nil || p.GridPos.H == 0 || p.GridPos.W == 0 {
			t.Errorf("panel %q has no gridPos", p.Title)
		}
		if p.Datasource.UID != "${DS_PROMETHEUS}" {
			t.Errorf("panel %q: datasource %q; want ${DS_PROMETHEUS}", p.Title, p.Datasource.UID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			checkNames(t, "panel "+p.Title, tg.Expr, have)
			queries++
		}
	}
	if queries < 9 {
		t.Errorf("%d queries in the dashboard; want at least one per view the issue lists", queries)
	}
}

// The shipped alert rules parse, name the alerts the docs promise, and query only series
// rota exports.
func TestMetricsAlertRules(t *testing.T) {
	_, _, fams := metricsScenario(t)
	have := exported(fams)
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "prometheus", "rota-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &rules); err != nil {
		t.Fatalf("rota-rules.yaml: %v", err)
	}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			checkNames(t, "alert "+r.Alert, r.Expr, have)
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("alert %s: want a severity label and a summary", r.Alert)
			}
			if r.For != "" {
				if _, err := model.ParseDuration(r.For); err != nil {
					t.Errorf("alert %s: for %q: %v", r.Alert, r.For, err)
				}
			}
		}
	}
	sort.Strings(alerts)
	want := []string{"RotaGPUUnhealthy", "RotaIdleHolding", "RotaNodeLost", "RotaNodeVersionDrift", "RotaQueueWaitHigh", "RotaWebhookDrops"}
	if strings.Join(alerts, ",") != strings.Join(want, ",") {
		t.Errorf("alerts %v; want %v", alerts, want)
	}
}

// BenchmarkMetricsScrape scrapes a cluster of 1,000 8-GPU nodes with readings and 10,000
// jobs (4,000 running, 6,000 pending). "scrape" is the whole answer; "locked" is the part
// that holds the server's lock.
func BenchmarkMetricsScrape(b *testing.B) {
	dir := b.TempDir()
	st, err := store.Open(context.Background(), "sqlite://"+filepath.Join(dir, "rota.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	srv, err := New(context.Background(), Config{DataDir: dir}, st, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	// The state is built in memory only: the collector reads nothing else.
	now := time.Now()
	batch := &store.Batch{}
	for i := range 1000 {
		n := api.Node{Name: fmt.Sprintf("node%04d", i), State: api.NodeReady, LastHeartbeat: now}
		n.Labels = map[string]string{"pool": fmt.Sprintf("pool%d", i%4)}
		for g := range 8 {
			n.GPUs = append(n.GPUs, api.GPU{Index: g, UUID: fmt.Sprintf("GPU-%d-%d", i, g), Model: "H100", MemoryMB: 81559, Healthy: true})
		}
		batch.Nodes = append(batch.Nodes, n)
	}
	for id := int64(1); id <= 10000; id++ {
		j := api.Job{ID: id, State: api.StatePending, SubmitTime: now, Spec: api.JobSpec{Queue: "train", Team: "default", GPUs: 1}}
		if id <= 4000 {
			node, gpu := int(id-1)/8, int(id-1)%8
			j.State, j.Attempts = api.StateRunning, 1
			batch.Attempts = append(batch.Attempts, api.Attempt{JobID: id, N: 1, State: api.StateRunning, AssignTime: now,
				Placements: []api.Placement{{Node: batch.Nodes[node].Name, GPUIndices: []int{gpu}}}})
		}
		batch.Jobs = append(batch.Jobs, j)
	}
	srv.mu.Lock()
	srv.state.Apply(batch)
	for _, n := range batch.Nodes {
		tel := &api.Telemetry{Time: now}
		for g := range 8 {
			tel.GPUs = append(tel.GPUs, api.GPUSample{Index: g, UtilizationPct: 50, MemoryUsedMB: 1000, PowerW: 300, TemperatureC: 60})
		}
		srv.state.SetNodeLive(n.Name, tel, nil, nil)
	}
	srv.mu.Unlock()

	b.Run("scrape", func(b *testing.B) {
		b.ReportAllocs()
		var size int
		for b.Loop() {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest("GET", "/metrics", nil)
			req = req.WithContext(context.WithValue(req.Context(), connKey{}, connInfo{local: true}))
			srv.handleMetrics(rec, req)
			size = rec.Body.Len()
		}
		b.ReportMetric(float64(size), "bytes/scrape")
	})
	b.Run("locked", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			srv.mu.Lock()
			srv.stateMetrics()
			srv.mu.Unlock()
		}
	})
}
