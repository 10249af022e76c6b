package sim

import (
	"cmp"
	"context"
	"encoding/csv"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/sched"
)

// The simulator's snapshots carry the fair-share usage that cluster.FairShare defines, the
// server's own: one GPU for one half-life is h/(2 ln 2) GPU-seconds at its end, half that a
// half-life later.
func TestSnapshotFairShareByHand(t *testing.T) {
	c, err := ParseCluster([]byte(`
nodes:
  - {name: n, gpus: 1, gpu_model: H100, cpus: 8, memory_mb: 65536}
teams:
  - {name: a}
  - {name: b}
`))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	tr := &Trace{Format: "synthetic"}
	for i, team := range []string{"a", "b", "a"} {
		tr.Jobs = append(tr.Jobs, Job{Line: i + 2, Submit: t0.Add(time.Duration(i) * time.Hour), Duration: time.Hour,
			GPUs: 1, CPUs: 1, MemoryMB: 1024, Team: team})
	}
	w, err := Prepare(tr, c, true)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := plannerFor("default")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[time.Duration]map[string]float64{}
	record := func(s *sched.Snapshot, now time.Time) sched.Plan {
		seen[now.Sub(t0)] = map[string]float64{"a": s.Teams["a"].Usage, "b": s.Teams["b"].Usage}
		return plan(s, now)
	}
	cfg := DefaultConfig()
	cfg.HalfLife = time.Hour
	if _, err := runWith(context.Background(), w, cfg, []string{"default"}, []planFunc{record}); err != nil {
		t.Fatal(err)
	}
	tau := 3600 / math.Ln2
	want := map[time.Duration]map[string]float64{
		0:             {"a": 0, "b": 0},
		time.Hour:     {"a": tau / 2, "b": 0},
		2 * time.Hour: {"a": tau / 4, "b": tau / 2},
	}
	for at, teams := range want {
		for team, u := range teams {
			if got := seen[at][team]; math.Abs(got-u) > 1e-6 {
				t.Errorf("at %v team %s: usage %v; want %v", at, team, got, u)
			}
		}
	}
}

// TestReplayServerHistory replays a history the server recorded (testdata/replay, written by
// internal/server's TestRecordServerHistory as `rota history export` writes it) under the
// server's policy and half-life, and checks that the simulator starts the jobs in the
// server's order. Every job takes the whole node and all wait from the start, so the order
// is fair share's choice each time the node frees. Start times differ by the heartbeats the
// server waits for (seconds an attempt), which shifts usage by far less than separates the
// teams, so the order, not the times, is what must agree.
func TestReplayServerHistory(t *testing.T) {
	data, err := os.ReadFile("testdata/replay/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseCluster(data)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := LoadTrace("testdata/replay/history.csv", "rota", true)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Prepare(tr, c, true)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := plannerFor("default")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.HalfLife = time.Hour // the recording server's
	e, err := newEngine(w, cfg, "default", plan)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The server's order: job IDs by the start of their (only) attempt, from the trace.
	f, err := os.Open("testdata/replay/history.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	var server []string
	starts := map[string]string{}
	for _, row := range rows[1:] {
		server = append(server, row[col["id"]])
		starts[row[col["id"]]] = row[col["start"]] // RFC 3339 in UTC: sorts as text
	}
	slices.SortStableFunc(server, func(a, b string) int { return strings.Compare(starts[a], starts[b]) })
	simulated := make([]string, 0, len(w.Jobs))
	for i := range w.Jobs {
		simulated = append(simulated, w.Jobs[i].Name)
	}
	slices.SortStableFunc(simulated, func(a, b string) int {
		return cmp.Compare(e.jobs[jobIndex(w, a)].firstStart, e.jobs[jobIndex(w, b)].firstStart)
	})
	if !slices.Equal(server, simulated) {
		t.Errorf("start order: server %v, simulator %v", server, simulated)
	}
}

func jobIndex(w *Workload, name string) int {
	return slices.IndexFunc(w.Jobs, func(j Job) bool { return j.Name == name })
}
