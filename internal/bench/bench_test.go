package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// metricsFor lists the metrics a result must report.
func metricsFor(r Result) []string {
	switch {
	case r.Suite == "sched":
		return []string{"cycle-ms", "placements/s", "placed/op"}
	case r.Suite == "sim":
		return []string{"events/s", "jobs/s", "plans/op"}
	case strings.HasPrefix(r.Name, "submit-to-running/"):
		return []string{"p50-ms", "p99-ms"}
	}
	return []string{"submits/s"}
}

// TestQuickSuites runs every suite at its quick sizes and checks that each result is sane;
// it asserts nothing about speed.
func TestQuickSuites(t *testing.T) {
	for _, suite := range Suites() {
		t.Run(suite, func(t *testing.T) {
			var progress bytes.Buffer
			results, err := Run(context.Background(), Options{Suites: []string{suite}, Quick: true, Progress: &progress})
			if err != nil {
				t.Fatal(err)
			}
			if want := map[string]int{"sched": 5, "e2e": 2, "sim": 1}[suite]; len(results) != want {
				t.Fatalf("%d results, want %d", len(results), want)
			}
			for _, r := range results {
				if r.Suite != suite || r.Name == "" {
					t.Errorf("result %q of suite %q, want suite %q", r.Name, r.Suite, suite)
				}
				if r.N <= 0 || !(r.NsPerOp > 0) || r.AllocsPerOp <= 0 || r.BytesPerOp <= 0 {
					t.Errorf("%s: N %d, %g ns/op, %d allocs/op, %d B/op: want all positive", r.Name, r.N, r.NsPerOp, r.AllocsPerOp, r.BytesPerOp)
				}
				for _, m := range metricsFor(r) {
					if v, ok := r.Metrics[m]; !ok || !(v > 0) {
						t.Errorf("%s: metric %s = %v (present %v), want a positive value", r.Name, m, v, ok)
					}
				}
				if !strings.Contains(progress.String(), r.Name+": ") {
					t.Errorf("no progress line for %s in:\n%s", r.Name, progress.String())
				}
			}
			if suite == "e2e" {
				lat := results[1].Metrics
				if lat["p99-ms"] < lat["p50-ms"] {
					t.Errorf("p99 %g ms below p50 %g ms", lat["p99-ms"], lat["p50-ms"])
				}
			}
		})
	}
}

// TestFullSuites runs the full sizes, which take minutes; `rota bench` is the usual way.
func TestFullSuites(t *testing.T) {
	if os.Getenv("ROTA_BENCH_FULL") == "" {
		t.Skip("full-size benchmarks take minutes; set ROTA_BENCH_FULL=1 to run them here, or run `rota bench`")
	}
	results, err := Run(context.Background(), Options{Progress: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.N <= 0 || len(r.Metrics) == 0 {
			t.Errorf("%s %s: N %d, metrics %v", r.Suite, r.Name, r.N, r.Metrics)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestUnknownSuite(t *testing.T) {
	_, err := Run(context.Background(), Options{Suites: []string{"sched", "gpu"}})
	if err == nil || !strings.Contains(err.Error(), `unknown suite "gpu"`) {
		t.Fatalf("err = %v, want an unknown suite error", err)
	}
}

func testReport() *Report {
	return &Report{
		Header: Header{GoVersion: "go1.26.0", GOOS: "linux", GOARCH: "amd64", NumCPU: 2, GOMAXPROCS: 2,
			Commit: "0123456789abcdef0123", Modified: true, Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
		Results: []Result{
			{Suite: "sched", Name: "plan/1000nodes/10000pending", N: 28, NsPerOp: 43062084,
				Metrics:     map[string]float64{"placements/s": 42683.2, "cycle-ms": 43.062084, "placed/op": 1838},
				AllocsPerOp: 65060, BytesPerOp: 11797808},
			{Suite: "e2e", Name: "submit-to-running/50agents", N: 300, NsPerOp: 2.5e7,
				Metrics: map[string]float64{"p50-ms": 24.5, "p99-ms": 31.25}, AllocsPerOp: 900, BytesPerOp: 120000},
		},
	}
}

// TestJSONShape pins the JSON field names that runs are compared by across commits.
func TestJSONShape(t *testing.T) {
	var buf bytes.Buffer
	if err := testReport().WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, buf.String())
	}
	keys := func(m map[string]any) []string {
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	if k := keys(got); !slices.Equal(k, []string{"header", "results"}) {
		t.Fatalf("top-level keys %v, want header and results", k)
	}
	header, _ := got["header"].(map[string]any)
	if k, want := keys(header), []string{"commit", "go_version", "goarch", "gomaxprocs", "goos", "modified", "num_cpu", "quick", "time"}; !slices.Equal(k, want) {
		t.Errorf("header keys %v, want %v", k, want)
	}
	results, _ := got["results"].([]any)
	if len(results) != 2 {
		t.Fatalf("results = %v, want an array of 2", got["results"])
	}
	first, _ := results[0].(map[string]any)
	if k, want := keys(first), []string{"allocs_per_op", "bytes_per_op", "metrics", "n", "name", "ns_per_op", "suite"}; !slices.Equal(k, want) {
		t.Errorf("result keys %v, want %v", k, want)
	}
	if m, _ := first["metrics"].(map[string]any); m["placements/s"] != 42683.2 {
		t.Errorf("metrics %v, want placements/s 42683.2", first["metrics"])
	}
	var back Report
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Results[1].Metrics["p99-ms"] != 31.25 || back.Header.Commit != "0123456789abcdef0123" {
		t.Errorf("round trip lost values: %+v", back)
	}
}

func TestTable(t *testing.T) {
	var buf bytes.Buffer
	if err := testReport().WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	want := `go1.26.0 linux/amd64, 2 CPUs (GOMAXPROCS 2), commit 0123456789ab (modified), full sizes

SUITE  NAME                         N    TIME/OP  METRICS
sched  plan/1000nodes/10000pending  28   43.1ms   43.06 cycle-ms  1838 placed/op  42683 placements/s  65060 allocs/op  11797808 B/op
e2e    submit-to-running/50agents   300  25ms     24.5 p50-ms  31.25 p99-ms  900 allocs/op  120000 B/op
`
	if got := buf.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestNewHeader(t *testing.T) {
	h := NewHeader(context.Background(), true, time.Unix(0, 0))
	if h.GoVersion == "" || h.GOOS == "" || h.GOARCH == "" || h.NumCPU < 1 || h.GOMAXPROCS < 1 || !h.Quick {
		t.Errorf("header %+v: want Go version, platform, CPUs and quick", h)
	}
}
