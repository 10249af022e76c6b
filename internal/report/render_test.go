package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from what was written (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// The scenario's reports as people and spreadsheets see them; the figures are those the
// compute tests check by hand.
func TestGoldenReports(t *testing.T) {
	for _, c := range []struct {
		by, format string
	}{
		{api.ByTeam, "table"}, {api.ByTeam, "csv"},
		{api.ByDay, "table"}, {api.ByDay, "csv"},
		{api.ByNode, "table"}, {api.ByHourOfWeek, "table"},
		{api.ByQueue, "json"},
	} {
		t.Run(c.by+"."+c.format, func(t *testing.T) {
			rep := compute(t, scenario(), c.by, scenarioWindow)
			var buf bytes.Buffer
			var err error
			switch c.format {
			case "table":
				err = WriteTable(&buf, rep)
			case "csv":
				err = WriteCSV(&buf, rep)
			case "json":
				err = WriteJSON(&buf, rep)
			}
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "usage_"+c.by+"."+c.format+".golden", buf.Bytes())
		})
	}
}

// The CSV parses back, one line per row and the total, with the head's columns.
func TestCSVParses(t *testing.T) {
	rep := compute(t, scenario(), api.ByHourOfWeek, scenarioWindow)
	var buf bytes.Buffer
	if err := WriteCSV(&buf, rep); err != nil {
		t.Fatal(err)
	}
	lines, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 1+168+1 || lines[169][0] != "total" || len(lines[1]) != len(csvHead) {
		t.Errorf("%d lines, last %q; want a head, 168 hours and the total", len(lines), lines[len(lines)-1][0])
	}
}

// Names come from users and agents: the table shows no control characters and the CSV
// lets no cell be run as a formula.
func TestHostileNames(t *testing.T) {
	in := scenario()
	in.Nodes[0].GPUs[0].Model = "=HYPERLINK(\"http://x\")\t\x1b[31m"
	in.Nodes[0].GPUs[1].Model = in.Nodes[0].GPUs[0].Model
	rep := compute(t, in, api.ByGPUModel, scenarioWindow)
	var table, sheet bytes.Buffer
	WriteTable(&table, rep)
	WriteCSV(&sheet, rep)
	if strings.ContainsAny(table.String(), "\x1b") {
		t.Errorf("the table passes an escape sequence through:\n%q", table.String())
	}
	if !strings.Contains(sheet.String(), `"'=HYPERLINK(""http://x"")??[31m"`) {
		t.Errorf("the CSV does not defuse a formula:\n%s", sheet.String())
	}
}

func testPack(t *testing.T, audit bool) Pack {
	t.Helper()
	in := scenario()
	// A GPU model that tries to inject markup into the page.
	in.Nodes[0].GPUs[0].Model = `<script>alert("x")</script>`
	in.Nodes[0].GPUs[1].Model = in.Nodes[0].GPUs[0].Model
	p := Pack{Month: "2026-10", Since: time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), Until: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
		Generated: scenarioNow, Reports: map[string]api.UsageReport{}, Notes: []string{"made by a test"}}
	for _, by := range api.UsageGroupings() {
		p.Reports[by] = compute(t, in, by, Query{Since: p.Since, Until: p.Until})
	}
	if audit {
		p.AuditKnown = true
		p.Audit = []api.Event{
			{Time: oct31(9, 0), Actor: "root", Role: "admin", Kind: api.EventQuota, Message: "set team nlp",
				Before: json.RawMessage(`{"quotas": {"H100": {"guaranteed": 4}}}`), After: json.RawMessage(`{"quotas":{"H100":{"guaranteed":8}}}`)},
			{Time: oct31(10, 0), Actor: "alice", Kind: api.EventSubmit},
			{Time: oct31(11, 0), Actor: "bob", Kind: api.EventSubmit},
		}
		p.Preemptions = []api.Event{{Time: oct31(15, 30), Kind: api.EventPreempt, JobID: 4, Attempt: 1, Message: "preempted for job 9: <urgent>"}}
	}
	return p
}

func TestWritePack(t *testing.T) {
	dir := t.TempDir()
	p := testPack(t, true)
	if err := WritePack(dir, p); err != nil {
		t.Fatal(err)
	}
	for _, f := range p.Files() {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("pack lacks %s: %v", f, err)
		}
	}
	quota, _ := os.ReadFile(filepath.Join(dir, "governance-quota-changes.csv"))
	if !strings.Contains(string(quota), `"{""quotas"":{""H100"":{""guaranteed"":4}}}"`) {
		t.Errorf("quota changes:\n%s", quota)
	}
	counts, _ := os.ReadFile(filepath.Join(dir, "governance-audit-counts.csv"))
	if string(counts) != "kind,count\nquota,1\nsubmit,2\n" {
		t.Errorf("audit counts:\n%s", counts)
	}
	page, _ := os.ReadFile(filepath.Join(dir, "report.html"))
	html := string(page)
	for _, bad := range []string{"<script", "http://", "https://", "src=", "href="} {
		if strings.Contains(strings.ToLower(html), bad) {
			t.Errorf("the page contains %q: it must stand alone, without scripts or links", bad)
		}
	}
	for _, want := range []string{"&lt;script&gt;", "<svg", "<polyline", "GPU-hours by team", "Quota changes",
		"preempted for job 9: &lt;urgent&gt;", "Mon 00", "2026-10-31", "made by a test"} {
		if !strings.Contains(html, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

// Without the audit trail the pack says so and writes only what the reports know.
func TestWritePackWithoutAudit(t *testing.T) {
	dir := t.TempDir()
	p := testPack(t, false)
	if err := WritePack(dir, p); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "governance-audit-counts.csv")); err == nil {
		t.Error("a pack without the audit trail has audit counts")
	}
	pre, _ := os.ReadFile(filepath.Join(dir, "governance-preemptions.csv"))
	if string(pre) != "team,preemptions,waste_gpu_hours\nvision,1,1.5\n" {
		t.Errorf("preemptions:\n%s", pre)
	}
	page, _ := os.ReadFile(filepath.Join(dir, "report.html"))
	if !strings.Contains(string(page), "readable by admins only") {
		t.Error("the page does not say the audit trail was left out")
	}
	delete(p.Reports, api.ByDay)
	if err := WritePack(t.TempDir(), p); err == nil || !strings.Contains(err.Error(), "day") {
		t.Errorf("a pack without its day report: %v", err)
	}
}
