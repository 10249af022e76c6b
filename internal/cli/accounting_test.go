package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/report"
)

// accountingFake serves the accounting routes the way the server does: usage computed by
// internal/report from a small fixture, prices kept in memory, and the audit trail in two
// pages. It stands behind the shared fake's authentication, so tokens and roles work as
// in every other CLI test.
type accountingFake struct {
	*httptest.Server
	mu      sync.Mutex // guards the fields below
	usageQ  []string   // raw query of every GET /api/v1/usage
	auditQ  []string   // raw query of every GET /api/v1/audit
	prices  map[string]api.Price
	deleted []string
}

// fixtureAccounting is two jobs on node-a's A100s: 42 ran 2 GPUs for 2 hours up to
// testNow at 60%, 45 ran 1 GPU for an hour and went out of memory, a day earlier.
func fixtureAccounting() report.Input {
	gpus := []api.GPU{{Index: 0, Model: "A100"}, {Index: 1, Model: "A100"}}
	end := testNow.Add(-24 * time.Hour)
	return report.Input{
		Now:    testNow,
		Nodes:  []api.Node{{Name: "node-a", Inventory: api.Inventory{GPUs: gpus}, State: api.NodeReady}},
		Prices: []api.Price{{Model: "A100", PerGPUHour: 2, Currency: "USD"}},
		Jobs: []api.Job{
			{ID: 42, Spec: api.JobSpec{User: "alice", Team: "nlp", Queue: "train"}, State: api.StateRunning, SubmitTime: testNow.Add(-150 * time.Minute), Attempts: 1},
			{ID: 45, Spec: api.JobSpec{User: "dave", Team: "vision", Queue: "interactive"}, State: api.StateFailed, SubmitTime: end.Add(-time.Hour), Attempts: 1},
		},
		Attempts: []api.Attempt{
			{JobID: 42, N: 1, State: api.StateRunning, AssignTime: testNow.Add(-2 * time.Hour),
				Placements: []api.Placement{{Node: "node-a", GPUIndices: []int{0, 1}, Usage: &api.Usage{Samples: 5, GPUUtilPct: api.Stat{Mean: 60}}}}},
			{JobID: 45, N: 1, State: api.StateFailed, AssignTime: end.Add(-time.Hour), EndTime: &end, Reason: api.ReasonOOM, ExitCode: intp(137),
				Placements: []api.Placement{{Node: "node-a", GPUIndices: []int{1}}}},
		},
	}
}

func newAccountingFake(t *testing.T) *accountingFake {
	f := &accountingFake{prices: map[string]api.Price{"A100": {Model: "A100", PerGPUHour: 2, Currency: "USD"}}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/usage", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.usageQ = append(f.usageQ, r.URL.RawQuery)
		f.mu.Unlock()
		v := r.URL.Query()
		q := report.Query{By: v.Get("by"), Until: testNow, Since: testNow.Add(-30 * 24 * time.Hour)}
		for k, dst := range map[string]*time.Time{"since": &q.Since, "until": &q.Until} {
			if s := v.Get(k); s != "" {
				*dst, _ = report.ParseTime(s)
			}
		}
		rep, err := report.Compute(fixtureAccounting(), q)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, api.Error{Code: api.CodeInvalid, Field: err.(*report.QueryError).Param, Message: err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, rep)
	})
	mux.HandleFunc("GET /api/v1/prices", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		list := api.PriceList{Prices: []api.Price{}}
		for _, p := range f.prices {
			list.Prices = append(list.Prices, p)
		}
		slices.SortFunc(list.Prices, func(a, b api.Price) int { return strings.Compare(a.Model, b.Model) })
		writeJSON(w, http.StatusOK, list)
	})
	mux.HandleFunc("PUT /api/v1/prices/{model}", func(w http.ResponseWriter, r *http.Request) {
		if who := r.Context().Value(callerKey{}).(api.Whoami); who.Role != "admin" {
			writeJSON(w, http.StatusForbidden, api.Error{Code: api.CodeForbidden, Role: who.Role, Rule: "admin", Message: "only admins may set prices"})
			return
		}
		var p api.Price
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			writeJSON(w, http.StatusBadRequest, api.Error{Code: api.CodeInvalid, Message: err.Error()})
			return
		}
		if p.Model != r.PathValue("model") {
			writeJSON(w, http.StatusBadRequest, api.Error{Code: api.CodeInvalid, Field: "model", Message: "path and body differ"})
			return
		}
		f.mu.Lock()
		f.prices[p.Model] = p
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, p)
	})
	mux.HandleFunc("DELETE /api/v1/prices/{model}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.prices[r.PathValue("model")]; !ok {
			writeJSON(w, http.StatusNotFound, api.Error{Code: api.CodeNotFound, Field: "model", Message: `no price is set for model "` + r.PathValue("model") + `"`})
			return
		}
		delete(f.prices, r.PathValue("model"))
		f.deleted = append(f.deleted, r.URL.Path)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /api/v1/audit", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.auditQ = append(f.auditQ, r.URL.RawQuery)
		f.mu.Unlock()
		if r.URL.Query().Get("kind") == api.EventPreempt {
			writeJSON(w, http.StatusOK, api.EventList{Events: []api.Event{{ID: 300, Time: testNow.Add(-26 * time.Hour), Kind: api.EventPreempt,
				JobID: 42, Attempt: 1, Message: "preempted for job 50"}}})
			return
		}
		pages := fixtureAudit()
		if r.URL.Query().Get("after") == pages[0].Next {
			writeJSON(w, http.StatusOK, pages[1])
			return
		}
		writeJSON(w, http.StatusOK, pages[0])
	})
	f.Server = httptest.NewServer((&fakeServer{}).authenticate(mux))
	t.Cleanup(f.Close)
	return f
}

func (f *accountingFake) run(t *testing.T, token, verb string, args ...string) (int, string, string) {
	t.Helper()
	return testRun{env: map[string]string{"ROTA_SERVER": f.URL, "ROTA_TOKEN": token}}.run(t, verb, args...)
}

// The fixture by team: nlp holds 2 GPUs for the 2 hours to now at 60% (4 GPU-hours, 2.4
// effective, 8 USD, still running); vision held 1 GPU an hour and ran out of memory
// (1 GPU-hour, unmeasured, 2 USD). Capacity: 2 GPUs × 30 days.
func TestUsageTable(t *testing.T) {
	f := newAccountingFake(t)
	code, out, errOut := f.run(t, adminToken, "usage")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	checkGolden(t, "accounting_usage_team.golden", out)
	if f.usageQ[0] != "by=team" {
		t.Errorf("query %q; want by=team and the server's default window", f.usageQ[0])
	}
}

func TestUsageCSVAndJSON(t *testing.T) {
	f := newAccountingFake(t)
	code, out, errOut := f.run(t, adminToken, "usage", "--by", "day", "--since", "2026-02-27", "--until", "2026-03-02", "-o", "csv")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	checkGolden(t, "accounting_usage_day.golden", out)
	if want := "by=day&since=2026-02-27T00%3A00%3A00Z&until=2026-03-02T00%3A00%3A00Z"; f.usageQ[0] != want {
		t.Errorf("query %q; want %q", f.usageQ[0], want)
	}
	code, out, _ = f.run(t, adminToken, "usage", "--by", "gpu-model", "--since", "2d", "--output", "json")
	var rep api.UsageReport
	if err := json.Unmarshal([]byte(out), &rep); code != ExitOK || err != nil || rep.By != "gpu-model" || rep.Total.Cost == nil || *rep.Total.Cost != 10 {
		t.Fatalf("-o json: exit %d, %v: %s", code, err, out)
	}
	if !rep.Since.Equal(testNow.Add(-48 * time.Hour)) {
		t.Errorf("--since 2d sent %s; want two days before now", rep.Since)
	}
}

func TestUsageFlagErrors(t *testing.T) {
	f := newAccountingFake(t)
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--by", "cluster"}, "--by: unknown grouping \"cluster\""},
		{[]string{"--since", "last tuesday"}, "--since: \"last tuesday\" is not a time"},
		{[]string{"--until", "2026-02-30"}, "--until: \"2026-02-30\" is not a time"},
		{[]string{"--since", "2026-03-01", "--until", "2026-02-01"}, "--until (2026-02-01T00:00:00Z) is not after --since"},
		{[]string{"--since", "500d"}, "--since: the window is 500 days; at most 400"},
		{[]string{"-o", "xml"}, `invalid value "xml" for flag -o: unknown format "xml": want table, json or csv`},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		code, _, errOut := f.run(t, adminToken, "usage", c.args...)
		if code != ExitUsage || !strings.Contains(errOut, c.says) {
			t.Errorf("usage %v: exit %d, %q; want %d saying %q", c.args, code, errOut, ExitUsage, c.says)
		}
	}
	if len(f.usageQ) != 0 {
		t.Errorf("bad flags reached the server: %v", f.usageQ)
	}
}

func TestUsageReportPack(t *testing.T) {
	f := newAccountingFake(t)
	dir := filepath.Join(t.TempDir(), "pack")
	code, out, errOut := f.run(t, adminToken, "usage", "report", "--month", "2026-02", "--out", dir)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	files := strings.Fields(out)
	if len(files) != 12 || files[len(files)-1] != filepath.Join(dir, "report.html") {
		t.Fatalf("files written:\n%s", out)
	}
	for _, file := range files {
		if _, err := os.Stat(file); err != nil {
			t.Errorf("listed but not written: %v", err)
		}
	}
	// Every grouping over February, then the audit trail in pages and the preempt events.
	if len(f.usageQ) != 7 || !strings.Contains(f.usageQ[0], "since=2026-02-01T00%3A00%3A00Z&until=2026-03-01T00%3A00%3A00Z") {
		t.Errorf("usage queries %v", f.usageQ)
	}
	if len(f.auditQ) != 3 || !strings.Contains(f.auditQ[1], "after=102") || !strings.Contains(f.auditQ[2], "kind=preempt") {
		t.Errorf("audit queries %v; want two pages and the preempt events", f.auditQ)
	}
	counts, _ := os.ReadFile(filepath.Join(dir, "governance-audit-counts.csv"))
	if string(counts) != "kind,count\ncancel,1\nqueue,1\ntransition,1\nuser,1\n" {
		t.Errorf("audit counts:\n%s", counts)
	}
	page, _ := os.ReadFile(filepath.Join(dir, "report.html"))
	if !strings.Contains(string(page), "rota review pack, 2026-02") || !strings.Contains(string(page), "preempted for job 50") {
		t.Error("the page lacks its title or the preempt events")
	}
}

// A member gets the pack without the audit trail, and is told so.
func TestUsageReportAsMember(t *testing.T) {
	f := newAccountingFake(t)
	dir := t.TempDir()
	code, out, errOut := f.run(t, memberToken, "usage", "report", "--month", "2026-02", "--out", dir)
	if code != ExitOK || !strings.Contains(errOut, "only admins may read it") {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if strings.Contains(out, "governance-audit-counts.csv") || !strings.Contains(out, "governance-preemptions.csv") {
		t.Errorf("files:\n%s", out)
	}
}

func TestUsageReportFlagErrors(t *testing.T) {
	f := newAccountingFake(t)
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--out", "x"}, "--month is required"},
		{[]string{"--month", "2026-13", "--out", "x"}, `--month: "2026-13" is not a month`},
		{[]string{"--month", "March", "--out", "x"}, `--month: "March" is not a month`},
		{[]string{"--month", "2026-02"}, "--out is required"},
		{[]string{"--month", "2027-01", "--out", "x"}, "--month: 2027-01 has not begun"},
	} {
		code, _, errOut := f.run(t, adminToken, "usage", append([]string{"report"}, c.args...)...)
		if code != ExitUsage || !strings.Contains(errOut, c.says) {
			t.Errorf("usage report %v: exit %d, %q; want %d saying %q", c.args, code, errOut, ExitUsage, c.says)
		}
	}
}

func TestPriceCommands(t *testing.T) {
	f := newAccountingFake(t)
	code, out, errOut := f.run(t, adminToken, "admin", "price", "set", "H100", "3.75", "--currency", "USD")
	if code != ExitOK || out != "A H100 GPU-hour costs 3.75 USD\n" {
		t.Fatalf("set: exit %d, %q %q", code, out, errOut)
	}
	code, out, _ = f.run(t, adminToken, "admin", "price", "set", "*", "1")
	if code != ExitOK || f.prices["*"].Currency != "USD" {
		t.Fatalf("set *: exit %d, %q, stored %+v", code, out, f.prices["*"])
	}
	_, out, _ = f.run(t, viewerToken, "admin", "price", "list")
	if want := "MODEL  PER GPU-HOUR  CURRENCY\n*      1.00          USD\nA100   2.00          USD\nH100   3.75          USD\n"; out != want {
		t.Errorf("list:\n%s\nwant:\n%s", out, want)
	}
	if code, out, _ := f.run(t, adminToken, "admin", "price", "delete", "H100"); code != ExitOK || out != "Removed the price of H100\n" {
		t.Errorf("delete: exit %d, %q", code, out)
	}
	if code, _, errOut := f.run(t, adminToken, "admin", "price", "delete", "H100"); code != ExitError || !strings.Contains(errOut, `no price is set for model "H100" (field model)`) {
		t.Errorf("delete again: exit %d, %q", code, errOut)
	}
	if code, _, errOut := f.run(t, memberToken, "admin", "price", "set", "H100", "1"); code != ExitError || !strings.Contains(errOut, "permission denied") {
		t.Errorf("set as member: exit %d, %q", code, errOut)
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"H100"}, "want MODEL and RATE, got 1 arguments"},
		{[]string{"H100", "cheap"}, `RATE: "cheap" is not a price`},
		{[]string{"--", "H100", "-1"}, `RATE: "-1" is not a price`},
		{[]string{"H100", "NaN"}, `RATE: "NaN" is not a price`},
		{[]string{" ", "1"}, "the MODEL is empty"},
	} {
		code, _, errOut := f.run(t, adminToken, "admin", append([]string{"price", "set"}, c.args...)...)
		if code != ExitUsage || !strings.Contains(errOut, c.says) {
			t.Errorf("price set %v: exit %d, %q; want %d saying %q", c.args, code, errOut, ExitUsage, c.says)
		}
	}
	_, out, _ = f.run(t, adminToken, "admin", "price", "list", "-o", "json")
	var list api.PriceList
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Prices) != 2 {
		t.Errorf("list -o json: %v: %s", err, out)
	}
}

// The accounting schemas of api/openapi.yaml name the wire types' JSON fields.
func TestOpenAPIAccountingSchemas(t *testing.T) {
	doc := readOpenAPI(t)
	for name, v := range map[string]any{"UsageRow": api.UsageRow{}, "UsageReport": api.UsageReport{}, "Price": api.Price{}, "PriceList": api.PriceList{}} {
		got := schemaProperties(t, doc, doc.Components.Schemas[name])
		want := jsonNames(reflect.TypeOf(v))
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("schema %s has properties %v; api.%s has JSON fields %v", name, got, name, want)
		}
	}
}
