package server

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/sim"
)

var update = flag.Bool("update", false, "rewrite the recorded history in ../sim/testdata/replay")

// replayDir holds a server history as `rota history export` writes it, which the
// simulator's TestReplayServerHistory replays to check that it starts the jobs in the
// server's order.
const replayDir = "../sim/testdata/replay"

// Two teams of equal weight queue whole-node jobs on one 4-GPU node, with a one-hour
// fair-share half-life: each time the node frees, fair share alone picks the team. The
// story tells the two definitions of decayed usage apart: at 10:35, when speech's job 2 ends,
// speech (jobs 1 and 2, 09:00–09:30 and 10:15–10:35) has used 7,157 decayed GPU-seconds and
// vision (job 3, 09:30–10:15) 6,685 when each GPU-second decays from when it was used
// (cluster.FairShare), so vision's job 5 goes before speech's job 4; charged whole at each
// job's end, as the server counted before, speech would have 8,198 and vision 8,572, and
// job 4 would go first. The server runs the story in virtual time with fake agents; its history, exported as
// `rota history export` exports it (a rota trace and a cluster file), must be the recorded
// one. Run with -update to record it anew.
func TestRecordServerHistory(t *testing.T) {
	h := &harness{t: t, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir(),
		cfg: func(c *Config) { c.HalfLife = time.Hour }}
	h.open()
	h.srv.mu.Lock()
	_, e := h.srv.applyConfig(t.Context(), []byte("teams:\n  - {name: vision, weight: 1}\n  - {name: speech, weight: 1}\n"), api.Event{Actor: "test"})
	h.srv.mu.Unlock()
	if e != nil {
		t.Fatalf("config: %s", e.Message)
	}
	node := &fakeNode{name: "n1", tasks: map[api.TaskRef]*fakeTask{}, inv: api.Inventory{CPUs: 128, MemoryMB: 1 << 20, DeviceSource: "fake"}}
	for g := range 4 {
		node.inv.GPUs = append(node.inv.GPUs, api.GPU{Index: g, UUID: fmt.Sprintf("GPU-n1-%d", g), Model: "H100", MemoryMB: 81559, Healthy: true})
	}
	story := []struct {
		at   time.Duration
		team string
		runs time.Duration
	}{
		{0, "speech", 30 * time.Minute},
		{1 * time.Minute, "speech", 20 * time.Minute},
		{2 * time.Minute, "vision", 45 * time.Minute},
		{3 * time.Minute, "speech", 60 * time.Minute},
		{4 * time.Minute, "vision", 3 * time.Hour},
		{5 * time.Minute, "vision", 10 * time.Minute},
	}
	jobs := map[int64]*scenarioJob{}
	tick := func() {
		h.fakeBeat(node, jobs)
		h.cycle()
		h.fakeBeat(node, jobs)
	}
	start := h.clock.Now()
	for _, s := range story {
		for h.clock.Now().Before(start.Add(s.at)) {
			h.clock.Add(5 * time.Second)
			tick()
		}
		var j api.Job
		if code := h.do("POST", "/api/v1/jobs", api.JobSpec{Team: s.team, GPUs: 4, Command: []string{"train.py"}}, &j); code != 201 {
			t.Fatalf("submit at %v: %d", s.at, code)
		}
		jobs[j.ID] = &scenarioJob{Runs: s.runs}
		tick()
	}
	var list api.HistoryList
	for range 12 * 720 {
		if h.do("GET", "/api/v1/history", nil, &list); len(list.Records) == len(story) {
			break
		}
		h.clock.Add(5 * time.Second)
		tick()
	}
	if len(list.Records) != len(story) {
		t.Fatalf("%d of %d jobs ended", len(list.Records), len(story))
	}
	trace, clusterFile := exportHistory(t, h, list)
	for name, got := range map[string][]byte{"history.csv": trace, "cluster.yaml": clusterFile} {
		path := filepath.Join(replayDir, name)
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update to record)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the recorded history (run with -update if the change is meant):\n%s", name, got)
		}
	}
}

// exportHistory turns the server's answers into a rota trace and a cluster file with the
// code `rota history export` runs.
func exportHistory(t *testing.T, h *harness, list api.HistoryList) (trace, clusterFile []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := sim.WriteRotaTrace(&buf, sim.RecordsFromHistory(list.Records)); err != nil {
		t.Fatal(err)
	}
	var nodes api.NodeList
	var queues api.QueueList
	var teams api.TeamList
	h.do("GET", "/api/v1/nodes", nil, &nodes)
	h.do("GET", "/api/v1/queues", nil, &queues)
	h.do("GET", "/api/v1/teams", nil, &teams)
	data, err := sim.ClusterFile(nodes.Nodes, queues.Queues, teams.Teams)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), data
}
