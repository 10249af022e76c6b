package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// buildRota builds the rota binary, which the scale suite runs as its server.
func buildRota(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "rota")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/rotahq/rota/cmd/rota").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestScaleQuick runs the scale suite at its quick size (200 nodes, 2,000 jobs) against a
// real server process and checks that the report has every figure, each non-zero where
// the run cannot have measured zero. It asserts nothing about speed.
func TestScaleQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("builds rota and runs a server under 200 simulated agents; skipped in -short mode")
	}
	bin := buildRota(t)
	var progress bytes.Buffer
	results, err := Run(context.Background(), Options{Suites: []string{"scale"}, Quick: true, Progress: &progress, Scale: ScaleOptions{Binary: bin, ServerMemoryLimit: "500M", ServerMaxHeartbeats: "50"}})
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}
	// Figures that must be above zero, and those that may be zero (an idle server's CPU
	// is below the 10 ms a tick of /proc counts; errors should be none; a window in which
	// nothing changed may hold no scheduling cycle, since cycles run only on a change or
	// every 5 s, so the cycle figures of the steady windows may be zero).
	type want struct{ positive, present []string }
	latency := []string{"p50-ms", "p99-ms"}
	wants := map[string]want{
		"idle-empty":       {present: []string{"server-cpu-s/s"}},
		"join":             {positive: append([]string{"joins/s", "join-s", "register-s"}, latency...)},
		"fill":             {positive: []string{"running", "pending", "fill-s"}},
		"heartbeat-steady": {positive: append([]string{"heartbeats/s", "target-heartbeats/s", "interval-s", "server-cpu-s/s", "generator-cpu-s/s"}, latency...), present: []string{"errors", "commits/s", "commit-mean-ms", "cycles/s", "cycle-mean-ms", "cycle-p99-bound-ms"}},
		"heartbeat-logs":   {positive: append([]string{"heartbeats/s", "server-cpu-s/s", "generator-cpu-s/s", "log-batches/s", "log-chunks/s", "log-p50-ms", "log-p99-ms"}, latency...), present: []string{"errors", "log-errors", "log-refused", "log-put-off", "commits/s", "commit-mean-ms", "cycles/s", "cycle-mean-ms", "cycle-p99-bound-ms"}},
		"heartbeat-round":  {positive: append([]string{"round-s", "heartbeats/s"}, latency...), present: []string{"errors"}},
		"submit-64clients": {positive: append([]string{"submits/s", "median-third/s", "slowest-third/s", "fastest-third/s", "server-cpu-s/s", "generator-cpu-s/s", "server-cpu-us/submit", "generator-cpu-us/submit", "group-commits", "submits/group", "commit-mean-ms", "commit-busy-s/s"}, latency...), present: []string{"cycles", "deferred", "machine-idle-s/s", "server-gcs", "generator-gcs"}},
		"submit-8clients":  {positive: append([]string{"submits/s", "median-third/s", "slowest-third/s", "fastest-third/s", "server-cpu-s/s", "generator-cpu-s/s", "server-cpu-us/submit", "generator-cpu-us/submit", "group-commits", "submits/group", "commit-mean-ms", "commit-busy-s/s"}, latency...), present: []string{"cycles", "deferred", "machine-idle-s/s", "server-gcs", "generator-gcs"}},
		"queue":            {positive: []string{"first-page-p50-ms", "first-page-p99-ms", "jobs/page", "all-pages-s", "pages", "cli-first-jobs-p50-ms", "cli-first-jobs-p99-ms", "cli-all-s", "cli-jobs"}},
		"top":              {positive: append([]string{"nodes", "running", "pending"}, latency...)},
		"server":           {positive: []string{"rss-mb", "hwm-mb", "nodes", "running", "pending", "cycles", "cycle-mean-ms", "cycle-p99-bound-ms", "heap-inuse-mb", "heap-goal-mb", "stacks-mb", "goroutines", "memory-limit-mb", "gc-cycles", "gc-cpu-share"}, present: []string{"gc-idle-mark-share"}},
		"idle-loaded":      {present: []string{"cycles/s", "cycle-mean-ms", "server-cpu-s/s", "commits/s", "commit-mean-ms"}},
	}
	got := map[string]Result{}
	for _, r := range results {
		name, size, _ := strings.Cut(r.Name, "/")
		if r.Suite != "scale" || size != "200nodes/2000jobs" {
			t.Errorf("result %s %s: want suite scale and size 200nodes/2000jobs", r.Suite, r.Name)
		}
		got[name] = r
	}
	for name, w := range wants {
		r, ok := got[name]
		if !ok {
			t.Errorf("no result %s among %d", name, len(results))
			continue
		}
		for _, m := range w.positive {
			if v, ok := r.Metrics[m]; !ok || !(v > 0) || math.IsInf(v, 0) {
				t.Errorf("%s: %s = %v (present %v), want a positive finite value", r.Name, m, v, ok)
			}
		}
		for _, m := range w.present {
			if v, ok := r.Metrics[m]; !ok || v < 0 {
				t.Errorf("%s: %s = %v (present %v), want a value of 0 or more", r.Name, m, v, ok)
			}
		}
		if r.Metrics["p99-ms"] < r.Metrics["p50-ms"] || r.Metrics["first-page-p99-ms"] < r.Metrics["first-page-p50-ms"] ||
			r.Metrics["cli-first-jobs-p99-ms"] < r.Metrics["cli-first-jobs-p50-ms"] {
			t.Errorf("%s: a p99 below its p50: %v", r.Name, r.Metrics)
		}
		if r.Metrics["errors"] != 0 {
			t.Errorf("%s: %v requests failed", r.Name, r.Metrics["errors"])
		}
	}
	// Each submit measurement sent all its submits; the median third's rate lies between
	// the slowest's and the fastest's.
	for name, n := range map[string]int{"submit-64clients": 320, "submit-8clients": 80} {
		m := got[name].Metrics
		if got[name].N != n || !(m["slowest-third/s"] <= m["median-third/s"] && m["median-third/s"] <= m["fastest-third/s"]) {
			t.Errorf("%s: %d submits, rates %v; want %d submits and slowest <= median <= fastest third", name, got[name].N, m, n)
		}
	}
	if len(got) != len(wants) {
		t.Errorf("%d results, want %d: %v", len(got), len(wants), results)
	}
	// Every GPU of the 200 nodes runs a job: the fleet acknowledged what it was given.
	if r := got["fill"].Metrics["running"]; r != 700 {
		t.Errorf("%v jobs running after the fill, want 700", r)
	}
	if n := got["server"].Metrics["nodes"]; n != 200 {
		t.Errorf("the server knows %v nodes, want 200", n)
	}
	// 200 nodes at 2 s would send 100 heartbeats a second: the server, bounded to 50,
	// asked for one every 4 s, and the agents kept to it.
	if m := got["heartbeat-steady"].Metrics; m["interval-s"] != 4 || m["target-heartbeats/s"] != 50 {
		t.Errorf("heartbeat-steady at --max-heartbeats-per-second 50: interval %vs for a target of %v/s, want 4s and 50/s", m["interval-s"], m["target-heartbeats/s"])
	}
	// Every agent shipped its tasks' logs in one batch after its heartbeats, one chunk per
	// task (a node runs 1 to 8), and the server took every chunk.
	if m := got["heartbeat-logs"].Metrics; m["log-errors"] != 0 || m["log-refused"] != 0 || m["log-chunks/s"] < m["log-batches/s"] || m["log-chunks/s"] > 8*m["log-batches/s"] {
		t.Errorf("heartbeat-logs: %v; want no errors or refusals and 1 to 8 chunks a batch", m)
	}
	// The server ran under the limit the suite passed on.
	if l := got["server"].Metrics["memory-limit-mb"]; l != 500 {
		t.Errorf("the server's memory limit was %v MB, want 500 MiB", l)
	}
	// 2,000 jobs in all: 700 running, the rest pending.
	if p := got["server"].Metrics["pending"]; p != 1300 {
		t.Errorf("%v jobs pending at the end, want 1300", p)
	}
	// rota queue, run as a user runs it, showed every job that has not ended.
	if n := got["queue"].Metrics["cli-jobs"]; n != 2000 {
		t.Errorf("rota queue showed %v jobs, want 2000", n)
	}
	var table bytes.Buffer
	if err := (&Report{Header: NewHeader(context.Background(), true, time.Now()), Results: results}).WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())
}

func TestScaleSizes(t *testing.T) {
	bin := "/bin/rota"
	for _, tc := range []struct {
		o    ScaleOptions
		want string
	}{
		{ScaleOptions{}, "no rota binary"},
		{ScaleOptions{Binary: bin, Nodes: -1}, "--nodes: must be between 1 and 100000, got -1"},
		{ScaleOptions{Binary: bin, Nodes: 10, Running: 5}, "--running: the running jobs fill the 80 GPUs of 10 nodes"},
		{ScaleOptions{Binary: bin, Nodes: 10, Running: 81}, "--running"},
		{ScaleOptions{Binary: bin, Nodes: 10, Running: 40, Jobs: 100}, "--jobs: must be at least --running (40) plus the 12000 jobs"},
		{ScaleOptions{Binary: bin, Heartbeat: time.Millisecond}, "--heartbeat: must be between 100ms and 1m"},
		{ScaleOptions{Binary: bin, Window: time.Hour}, "--window: must be between 1s and 10m"},
	} {
		_, err := tc.o.Sized(false)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want one saying %q", tc.o, err, tc.want)
		}
	}
	o, err := ScaleOptions{Binary: bin}.Sized(false)
	if err != nil || o.Nodes != 10_000 || o.Jobs != 104_000 || o.Running != 35_000 || o.Heartbeat != 2*time.Second {
		t.Errorf("defaults: %+v, %v", o, err)
	}
	// A bad size fails before any suite runs.
	if _, err := Run(context.Background(), Options{Suites: []string{"sched", "scale"}, Scale: ScaleOptions{Binary: bin, Nodes: -1}}); err == nil || !strings.Contains(err.Error(), "--nodes") {
		t.Errorf("Run with --nodes -1: %v", err)
	}
}

// TestRunningMix checks that the running jobs fill every GPU exactly, whatever the sizes.
func TestRunningMix(t *testing.T) {
	for _, nodes := range []int{1, 3, 200, 10_000} {
		gpus := 8 * nodes
		for running := nodes; running <= gpus; running += max(1, gpus/97) {
			mix := runningMix(gpus, running)
			n, g := 0, 0
			for size, k := range mix {
				if k < 0 || 8%size != 0 {
					t.Fatalf("%d nodes, %d running: mix %v", nodes, running, mix)
				}
				n, g = n+k, g+k*size
			}
			if n != running || g != gpus {
				t.Fatalf("%d nodes, %d running: mix %v makes %d jobs of %d GPUs", nodes, running, mix, n, g)
			}
		}
	}
}

func TestParseProm(t *testing.T) {
	text := `# HELP rota_jobs Jobs.
# TYPE rota_jobs gauge
rota_jobs{queue="train",state="RUNNING"} 35
rota_jobs{queue="batch",state="RUNNING"} 5
rota_jobs{queue="train",state="PENDING"} 7
rota_pending_jobs 7
rota_scheduler_cycle_duration_seconds_bucket{le="0.001"} 1
rota_scheduler_cycle_duration_seconds_bucket{le="0.01"} 90
rota_scheduler_cycle_duration_seconds_bucket{le="0.1"} 99
rota_scheduler_cycle_duration_seconds_bucket{le="+Inf"} 100
rota_scheduler_cycle_duration_seconds_sum 2.5
rota_scheduler_cycle_duration_seconds_count 100
`
	m, err := parseProm(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.sum("rota_jobs", "state", "RUNNING"); got != 40 {
		t.Errorf("running = %v, want 40", got)
	}
	if got := m.sum("rota_pending_jobs"); got != 7 {
		t.Errorf("pending = %v, want 7", got)
	}
	h := m.histogram("rota_scheduler_cycle_duration_seconds")
	if h.mean() != 0.025 || h.quantileBound(.5) != 0.01 || h.quantileBound(.99) != 0.1 {
		t.Errorf("mean %v, p50 bound %v, p99 bound %v", h.mean(), h.quantileBound(.5), h.quantileBound(.99))
	}
	earlier := histogram{le: h.le, count: []float64{1, 80, 80, 80}, sum: 1, n: 80}
	d := h.since(earlier)
	if d.reportBound(.99) != 0.1 {
		t.Errorf("reportBound(.99) = %v, want the last finite bound", d.reportBound(.99))
	}
	if d.n != 20 || d.sum != 1.5 || d.quantileBound(.5) != 0.01 || d.quantileBound(.9) != 0.1 || !math.IsInf(d.quantileBound(.99), 1) {
		t.Errorf("since: %+v", d)
	}
	if _, err := parseProm(strings.NewReader("rota_jobs{queue=\"x\" 3\n")); err == nil {
		t.Error("unterminated labels: no error")
	}
	if _, err := parseProm(strings.NewReader("rota_jobs many\n")); err == nil {
		t.Error("a value that is no number: no error")
	}
}

// TestProcFigures reads this process's CPU time and memory as the suite reads the server's.
func TestProcFigures(t *testing.T) {
	// Spend some CPU, so there is some to count.
	x := 0
	for start := time.Now(); time.Since(start) < 50*time.Millisecond; x++ {
	}
	cpu, err := cpuSeconds(os.Getpid())
	if err != nil || !(cpu > 0) {
		t.Errorf("cpuSeconds = %v, %v; want a positive value", cpu, err)
	}
	rss, hwm, err := memoryMB(os.Getpid())
	if err != nil || !(rss > 0) || hwm < rss {
		t.Errorf("memoryMB = %v, %v, %v: want RSS above 0 and HWM at least RSS", rss, hwm, err)
	}
	if _, err := cpuSeconds(-1); err == nil {
		t.Error("cpuSeconds of no process: no error")
	}
}

func TestScaleTableRow(t *testing.T) {
	rep := &Report{Header: Header{GoVersion: "go1.26.0", GOOS: "linux", GOARCH: "amd64", NumCPU: 2, GOMAXPROCS: 2}, Results: []Result{
		{Suite: "scale", Name: "server/200nodes/2000jobs", Metrics: map[string]float64{"rss-mb": 84.5, "nodes": 200}},
		{Suite: "scale", Name: "submit-8clients/200nodes/2000jobs", N: 80, NsPerOp: 3.15e6, Metrics: map[string]float64{"submits/s": 317.8}},
	}}
	var buf bytes.Buffer
	if err := rep.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	want := `go1.26.0 linux/amd64, 2 CPUs (GOMAXPROCS 2), commit unknown, full sizes

SUITE  NAME                               N   TIME/OP  METRICS
scale  server/200nodes/2000jobs           0   -        200 nodes  84.5 rss-mb
scale  submit-8clients/200nodes/2000jobs  80  3.15ms   317.8 submits/s
`
	if got := buf.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

// TestBeatAnswerDecodes holds the generator's slim answer to the protocol: a heartbeat's
// answer as the server encodes it decodes into beatAnswer with every field the simulated
// agents act on, and the rest of each task is skipped.
func TestBeatAnswerDecodes(t *testing.T) {
	full := api.HeartbeatResponse{
		Tasks: []api.Task{
			{JobID: 7, Attempt: 2, Command: []string{"train.py"}, Env: map[string]string{"ROTA_JOB_ID": "7"}, GPUIndices: []int{0, 1}, GPUIDs: []string{"GPU-a", "GPU-b"}, Signal: "SIGTERM", GraceSeconds: 30},
			{JobID: 9, Attempt: 1, Stop: true, StopReason: "preempted"},
		},
		Acked:            []api.TaskRef{{JobID: 3, Attempt: 1}},
		ClusterID:        "c1",
		HeartbeatSeconds: 2.5,
		SyncEpoch:        4,
		InventoryHash:    "abc",
	}
	data, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	var got beatAnswer
	if err := decodeAnswer(data, &got); err != nil {
		t.Fatal(err)
	}
	want := beatAnswer{
		Tasks:            []beatTask{{JobID: 7, Attempt: 2}, {JobID: 9, Attempt: 1, Stop: true, StopReason: "preempted"}},
		Acked:            []api.TaskRef{{JobID: 3, Attempt: 1}},
		HeartbeatSeconds: 2.5, SyncEpoch: 4, InventoryHash: "abc",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded %+v, want %+v", got, want)
	}
	if err := decodeAnswer([]byte(`{"tasks":[{"job_id":"seven"}]}`), &got); err == nil {
		t.Error("an answer that breaks the protocol decoded without error")
	}
}

// The rate of each third of a stream of submits runs from the completion that ends the
// third before it, so a stall in one third shows in that third alone.
func TestPartRates(t *testing.T) {
	sec := func(v ...float64) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x*float64(time.Second)))
		}
		return d
	}
	for _, c := range []struct {
		at   []time.Duration
		n    int
		want []float64
	}{
		// Thirds of 2: 0 to 2 s, 2 to 4 s, 4 to 11 s.
		{sec(1, 2, 3, 4, 10, 11), 6, []float64{2.0 / 7, 1, 1}},
		// 7 submits: thirds of 2, 2 and 3.
		{sec(0.5, 1, 1.5, 2, 2.5, 3, 3.5), 7, []float64{2, 2, 2}},
		// Fewer submits than thirds: the empty ones are left out.
		{sec(1, 3), 2, []float64{0.5, 1}},
	} {
		got := partRates(c.at, c.n)
		if len(got) != len(c.want) {
			t.Fatalf("partRates(%v, %d) = %v; want %v", c.at, c.n, got, c.want)
		}
		for i := range got {
			if math.Abs(got[i]-c.want[i]) > 1e-9 {
				t.Fatalf("partRates(%v, %d) = %v; want %v", c.at, c.n, got, c.want)
			}
		}
	}
}
