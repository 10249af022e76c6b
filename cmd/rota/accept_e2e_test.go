package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rotahq/rota/internal/cli"
)

// `rota accept` on two nodes of fake GPUs runs its three stages as real jobs on the CPU
// fallback, reports every node with positive timings, saves the report, and compares a
// second run with the first.
func TestAcceptRunsStagesAndCompares(t *testing.T) {
	skipShort(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("rota accept's built-in job needs python3 (.ci/run installs it)")
	}
	c := newCluster(t, map[string]string{"node-a": "4", "node-b": "4"})
	results := filepath.Join(c.root, "accept-results")
	accept := func() (cli.AcceptReport, cliResult) {
		t.Helper()
		r := c.rota("accept", "--results", results, "--steps", "3", "--size-mb", "1", "--timeout", "45s", "-o", "json")
		// Exit 4 flags a slow node: on a loaded test machine one may well be, and the
		// report says so; any other failure is the test's.
		if r.code != 0 && r.code != cli.ExitAcceptOutlier {
			t.Fatalf("rota accept: %s", r)
		}
		var rep cli.AcceptReport
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("rota accept -o json: %v\n%s", err, r)
		}
		return rep, r
	}

	rep, r := accept()
	if rep.Tested != 2 || len(rep.Nodes) != 2 {
		t.Errorf("tested %d of nodes %v, want both", rep.Tested, rep.Nodes)
	}
	if len(rep.Stages) != 3 {
		t.Fatalf("%d stages, want 3:\n%s", len(rep.Stages), r.stdout)
	}
	wantWorkers := map[int]int{1: 2, 2: 8, 3: 8} // one GPU per node; 4 per node on two nodes; 4 on each of two
	for _, s := range rep.Stages {
		if s.Status == "failed" || s.Status == "skipped" {
			t.Errorf("stage %d %s: %v", s.Stage, s.Status, s.Problems)
		}
		if len(s.Results) != wantWorkers[s.Stage] {
			t.Errorf("stage %d: %d results, want %d", s.Stage, len(s.Results), wantWorkers[s.Stage])
		}
		var nodes []string
		for _, n := range s.Nodes {
			nodes = append(nodes, n.Node)
		}
		if strings.Join(nodes, ",") != "node-a,node-b" {
			t.Errorf("stage %d ran on %v, want node-a and node-b", s.Stage, nodes)
		}
		for _, res := range s.Results {
			if res.StepMS <= 0 || res.ReadMBs <= 0 || res.CkptMS <= 0 || res.Backend == "" {
				t.Errorf("stage %d: result %+v lacks a timing", s.Stage, res)
			}
			// Stage 1 has no peers; stages 2 and 3 all-reduce among every GPU's worker.
			if (s.Stage > 1) != (res.CommMS > 0) {
				t.Errorf("stage %d: comm_ms %v", s.Stage, res.CommMS)
			}
		}
	}
	if rep.File == "" || rep.Previous != "" {
		t.Errorf("first run: saved %q, compared with %q; want saved, no comparison", rep.File, rep.Previous)
	}
	if _, err := os.Stat(rep.File); err != nil {
		t.Errorf("the report was not saved: %v", err)
	}

	second, _ := accept()
	if second.Previous != rep.File || len(second.Comparison) == 0 {
		t.Errorf("second run compared with %q (%d metrics), want %q", second.Previous, len(second.Comparison), rep.File)
	}
	stages := map[int]bool{}
	for _, cmp := range second.Comparison {
		stages[cmp.Stage] = true
	}
	if len(stages) != 3 {
		t.Errorf("the comparison covers stages %v, want 1, 2 and 3", stages)
	}
	// The table says the same for a person.
	table := c.rota("accept", "--results", results, "--steps", "2", "--size-mb", "1", "--timeout", "45s")
	for _, want := range []string{"stage 1: one GPU on each node", "stage 2: each node on 4 GPUs", "stage 3: two nodes on 4 GPUs each", "compared with " + second.File, "node-a", "node-b"} {
		if !strings.Contains(table.stdout, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
}
