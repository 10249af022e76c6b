package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v3"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cluster"
)

// rawCall sends body as it is, with the admin's token, and returns the status, the
// decoded error (if any) and the response headers.
func (h *harness) rawCall(method, path, contentType, body string) (int, api.Error, http.Header) {
	h.t.Helper()
	req, _ := http.NewRequest(method, h.http.URL+path, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Authorization", "Bearer "+h.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var e api.Error
	json.Unmarshal(data, &e)
	return resp.StatusCode, e, resp.Header
}

// Every refusal of a JSON body answers 400 naming the field, and stores nothing.
func TestStrictJSONDecoding(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 2)
	for _, tc := range []struct {
		name, path, body, field string
	}{
		{"trailing bracket", "/api/v1/jobs", `{"command":["true"]}}`, ""},
		{"trailing value", "/api/v1/jobs", `{"command":["true"]} {}`, ""},
		{"unknown field", "/api/v1/jobs", `{"command":["true"],"gpu":1}`, "gpu"},
		{"command missing", "/api/v1/jobs", `{"gpus":1}`, "command"},
		{"command null", "/api/v1/jobs", `{"command":null}`, "command"},
		{"null number", "/api/v1/jobs", `{"command":["true"],"gpus":null}`, "gpus"},
		{"null string", "/api/v1/jobs", `{"command":["true"],"queue":null}`, "queue"},
		{"null bool", "/api/v1/jobs", `{"command":["true"],"preemptible":null}`, "preemptible"},
		{"null in a list", "/api/v1/jobs", `{"command":["true",null]}`, "command[1]"},
		{"null in a map", "/api/v1/jobs", `{"command":["true"],"env":{"A":null}}`, "env.A"},
		{"wrong type", "/api/v1/jobs", `{"command":"true"}`, "command"},
		{"nested null", "/api/v1/queues/q1", `{"name":"q1","tier":null}`, "tier"},
		{"webhook without url", "/api/v1/users/admin/notify", `[{"events":["end"]}]`, "[0].url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := "POST"
			if !strings.HasSuffix(tc.path, "/jobs") {
				method = "PUT"
			}
			code, e, _ := h.rawCall(method, tc.path, "application/json", tc.body)
			if code != http.StatusBadRequest || e.Code != api.CodeInvalid || e.Field != tc.field {
				t.Errorf("%s: %d %+v, want 400 naming field %q", tc.body, code, e, tc.field)
			}
		})
	}
	var list api.JobList
	if h.do("GET", "/api/v1/jobs?state=all", nil, &list); len(list.Jobs) != 0 {
		t.Errorf("%d jobs stored by refused requests", len(list.Jobs))
	}
	var queues api.QueueList
	h.do("GET", "/api/v1/queues", nil, &queues)
	if slices.ContainsFunc(queues.Queues, func(q api.Queue) bool { return q.Name == "q1" }) {
		t.Error("a refused queue was stored")
	}
	// A field a Go client leaves out when it has no value (omitempty) is never null from
	// one: null there is refused like anywhere the spec does not allow it.
	for _, field := range []string{"env", "after", "retries"} {
		body := fmt.Sprintf(`{"command":["true"],%q:null}`, field)
		if code, e, _ := h.rawCall("POST", "/api/v1/jobs", "application/json", body); code != http.StatusBadRequest || e.Field != field {
			t.Errorf("%s: %d %+v; want 400 naming %s", body, code, e, field)
		}
	}
	// What a Go client sends for a nil list it always sends (no omitempty) still passes.
	hb := fmt.Sprintf(`{"node":"n9","inventory":{"cpus":1,"memory_mb":1,"gpus":null,"device_source":"fake"},"tasks":null,"agent_time":"2026-11-01T09:00:00Z","instance":"agent-n9","synced":true,"cluster_id":%q}`, h.srv.ClusterID())
	if code, e := h.call("local", "POST", "/api/v1/agents/n9/heartbeat", "application/json", []byte(hb)); code != http.StatusOK {
		t.Errorf("null for lists a Go client always sends: %d %+v", code, e)
	}
}

// The agent's heartbeat carries every field the spec marks required, at every level, and
// holds no null in them.
func TestStrictHeartbeatDecoding(t *testing.T) {
	h := newHarness(t)
	const rest = `"tasks":[],"agent_time":"2026-11-01T09:00:00Z","instance":"agent-n1","synced":true`
	const inv = `{"cpus":4,"memory_mb":1,"gpus":[],"device_source":"fake"}`
	for _, tc := range []struct{ body, field string }{
		{`{}`, "node"},
		{`{"node":"n1",` + rest + `}`, "inventory"},                                                    // left out with no inventory_hash
		{`{"node":"n1","inventory_hash":"` + strings.Repeat("a", 64) + `",` + rest + `}`, "inventory"}, // a node the server does not hold
		{`{"node":"n1","inventory":null,` + rest + `}`, "inventory"},
		{`{"node":"n1","inventory":` + inv + `}`, "tasks"},
		{`{"node":"n1","inventory":{"cpus":null,"memory_mb":1,"gpus":[],"device_source":"fake"},` + rest + `}`, "inventory.cpus"},
		{`{"node":"n1","inventory":{"cpus":4,"memory_mb":1,"gpus":[]},` + rest + `}`, "inventory.device_source"},
		{`{"node":"n1","inventory":{"cpus":4,"memory_mb":1,"device_source":"fake","gpus":[{"index":0,"uuid":"u","model":null,"memory_mb":1,"healthy":true}]},` + rest + `}`, "inventory.gpus[0].model"},
		{`{"node":"n1","inventory":` + inv + `,"tasks":[{"job_id":1,"attempt":1}],"agent_time":"2026-11-01T09:00:00Z","instance":"agent-n1","synced":true}`, "tasks[0].state"},
		{`{"node":"n1","inventory":` + inv + `,"tasks":[],"agent_time":null,"instance":"agent-n1","synced":true}`, "agent_time"},
		{`{"node":"n1","inventory":` + inv + `,"tasks":[],"agent_time":"2026-11-01T09:00:00Z","instance":"agent-n1"}`, "synced"},
	} {
		req, _ := http.NewRequest("POST", "http://rota-up/api/v1/agents/n1/heartbeat", strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := h.agent.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e api.Error
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || e.Field != tc.field {
			t.Errorf("%s: %d %+v, want 400 naming %q", tc.body, resp.StatusCode, e, tc.field)
		}
	}
	var nodes api.NodeList
	if h.do("GET", "/api/v1/nodes", nil, &nodes); len(nodes.Nodes) != 0 {
		t.Errorf("refused heartbeats registered %d nodes", len(nodes.Nodes))
	}
}

// requiredFields is exactly what the spec marks required and not readOnly, for every
// schema a JSON request body holds, and Go clients can meet it: no required field is
// left out by omitempty.
func TestRequiredFieldsAreTheSpecs(t *testing.T) {
	doc := kinSpec(t)
	for typ, fields := range requiredFields {
		ref, ok := doc.Components.Schemas[typ.Name()]
		if !ok {
			t.Errorf("api/openapi.yaml has no schema %s", typ.Name())
			continue
		}
		var want []string
		for _, f := range ref.Value.Required {
			if p := ref.Value.Properties[f]; p == nil || !p.Value.ReadOnly {
				want = append(want, f)
			}
		}
		if !slices.Equal(slices.Sorted(slices.Values(fields)), slices.Sorted(slices.Values(want))) {
			t.Errorf("the server requires %s %v; api/openapi.yaml requires %v (readOnly left out)", typ.Name(), fields, want)
		}
		for f := range typ.Fields() {
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if slices.Contains(fields, name) && strings.Contains(opts, "omitempty") {
				t.Errorf("%s.%s is required, but Go clients leave it out when empty (omitempty)", typ.Name(), name)
			}
		}
	}
	// Every schema of a JSON request body, at any depth, is in the table.
	inTable := map[string]bool{}
	for typ := range requiredFields {
		inTable[typ.Name()] = true
	}
	seen := map[*openapi3.Schema]bool{}
	var walk func(name string, s *openapi3.SchemaRef)
	walk = func(name string, s *openapi3.SchemaRef) {
		if s == nil || s.Value == nil || seen[s.Value] {
			return
		}
		seen[s.Value] = true
		if n, ok := strings.CutPrefix(s.Ref, "#/components/schemas/"); ok {
			name = n
		}
		if len(s.Value.Required) > 0 && name != "" && !inTable[name] {
			t.Errorf("request schema %s requires %v, but requiredFields has no entry for it", name, s.Value.Required)
		}
		for _, p := range s.Value.Properties {
			walk("", p)
		}
		walk("", s.Value.Items)
		if s.Value.AdditionalProperties.Schema != nil {
			walk("", s.Value.AdditionalProperties.Schema)
		}
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.RequestBody == nil || path == "/api/v1/config" {
				continue // PUT /config is YAML, read by its own decoder (config.go)
			}
			if m := op.RequestBody.Value.Content.Get("application/json"); m != nil {
				walk(method+" "+path, m.Schema)
			}
		}
	}
}

func TestPutConfigDecoding(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"empty", "", http.StatusBadRequest},
		{"blank", "\n  \n", http.StatusBadRequest},
		{"comment only", "# nothing\n", http.StatusBadRequest},
		{"two documents", "queues:\n- name: a\n---\nqueues:\n- name: b\n", http.StatusBadRequest},
		{"an empty second document", "queues:\n- name: a\n---\n", http.StatusBadRequest},
		{"unknown field", "queues:\n- name: a\n  priority: 3\n", http.StatusBadRequest},
		{"null document", "null\n", http.StatusBadRequest},
		{"a list, not a mapping", "- queues\n", http.StatusBadRequest},
		{"null limit", "limits:\n  max_env_bytes: null\n", http.StatusBadRequest},
		{"empty teams", "teams:\nqueues:\n- name: a\n", http.StatusBadRequest},
		{"null queue", "queues:\n- null\n", http.StatusBadRequest},
		{"teams as GET /teams answers", "teams:\n- name: t1\n  weight: 2\n  usage_gpu_hours: 3.5\n  gpus_in_use: {H100: 2}\n", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, e, _ := h.rawCall("PUT", "/api/v1/config", "application/yaml", tc.body)
			if code != tc.want {
				t.Errorf("%q: %d %+v, want %d", tc.body, code, e, tc.want)
			}
			if code == http.StatusBadRequest && e.Field != "config" {
				t.Errorf("%q: field %q, want config", tc.body, e.Field)
			}
		})
	}
	var queues api.QueueList
	h.do("GET", "/api/v1/queues", nil, &queues)
	for _, q := range queues.Queues {
		if q.Name == "a" || q.Name == "b" {
			t.Errorf("a refused configuration stored queue %s", q.Name)
		}
	}
	var teams api.TeamList
	h.do("GET", "/api/v1/teams", nil, &teams)
	if i := slices.IndexFunc(teams.Teams, func(t api.Team) bool { return t.Name == "t1" }); i < 0 || teams.Teams[i].Weight != 2 || teams.Teams[i].UsageGPUHours != 0 {
		t.Errorf("teams after the config: %+v", teams.Teams)
	}
}

// A known path called with a method it lacks answers 405 with Allow; an unknown path 404.
func TestMethodNotAllowed(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct{ method, path, allow string }{
		{"DELETE", "/api/v1/jobs", "POST, GET, HEAD"},
		{"PUT", "/api/v1/jobs/1", "GET, HEAD"},
		{"GET", "/api/v1/jobs/1/cancel", "POST"},
		{"POST", "/api/v1/nodes/n1", "DELETE"},
		{"PATCH", "/api/v1/config", "PUT"},
	} {
		code, e, hdr := h.rawCall(tc.method, tc.path, "", "")
		if code != http.StatusMethodNotAllowed || hdr.Get("Allow") != tc.allow || e.Code != api.CodeMethodNotAllowed || e.Message == "" {
			t.Errorf("%s %s: %d Allow %q %+v, want 405 Allow %q", tc.method, tc.path, code, hdr.Get("Allow"), e, tc.allow)
		}
	}
	for _, path := range []string{"/api/v1/nope", "/api/v1/jobs/1/nope", "/api/v2/jobs"} {
		if code, e, _ := h.rawCall("GET", path, "", ""); code != http.StatusNotFound || e.Code != api.CodeNotFound {
			t.Errorf("GET %s: %d %+v, want 404", path, code, e)
		}
	}
	// Every method of every route is still served, not answered 405.
	for _, rt := range routes {
		path := strings.NewReplacer("{id}", "1", "{name}", "x", "{node}", "n1", "{job}", "1", "{attempt}", "1", "{model}", "H100").Replace(rt.path)
		if code, _, _ := h.rawCall(rt.method, path, "", ""); code == http.StatusMethodNotAllowed {
			t.Errorf("%s %s answered 405", rt.method, rt.path)
		}
	}
}

// The query limits api/openapi.yaml states are enforced, naming the parameter.
func TestQueryLimits(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 1)
	j := h.submit(api.JobSpec{Command: []string{"true"}})
	h.cycle()
	logs := "/api/v1/jobs/" + strconv.FormatInt(j.ID, 10) + "/logs?"
	for _, tc := range []struct{ path, field string }{
		{logs + "attempt=0", "attempt"},
		{logs + "attempt=-1", "attempt"},
		{logs + "rank=-1", "rank"},
		{logs + "offset=-1", "offset"},
		{logs + "wait=61", "wait"},
		{logs + "wait=NaN", "wait"},
		{logs + "wait=-0.5", "wait"},
		{"/api/v1/jobs?limit=0", "limit"},
		{"/api/v1/jobs?limit=5001", "limit"},
		{"/api/v1/jobs?limit=x", "limit"},
		{"/api/v1/jobs?limit=", "limit"},
		{"/api/v1/jobs?limit=1&limit=2", "limit"},
		{logs + "wait=", "wait"},
		{logs + "wait=0x1p-3", "wait"},
		{logs + "wait=1_0", "wait"},
		{logs + "wait=1&wait=2", "wait"},
		{logs + "rank=", "rank"},
		// The audit trail, telemetry, usage and history read their parameters the same way.
		{"/api/v1/audit?limit=0", "limit"},
		{"/api/v1/audit?limit=10001", "limit"},
		{"/api/v1/audit?limit=", "limit"},
		{"/api/v1/audit?after=-1", "after"},
		{"/api/v1/audit?after=x", "after"},
		{"/api/v1/audit?after=1&after=2", "after"},
		{"/api/v1/audit?actor=", "actor"},
		{"/api/v1/audit?actor=" + strings.Repeat("a", 257), "actor"},
		{"/api/v1/audit?actor=a%1b%5b31m", "actor"},
		{"/api/v1/audit?kind=bogus", "kind"},
		{"/api/v1/audit?since=yesterday", "since"},
		{"/api/v1/audit?since=2026-11-02T00:00:00Z&until=2026-11-01T00:00:00Z", "until"},
		{"/api/v1/jobs/" + strconv.FormatInt(j.ID, 10) + "/telemetry?attempt=0", "attempt"},
		{"/api/v1/jobs/" + strconv.FormatInt(j.ID, 10) + "/telemetry?attempt=", "attempt"},
		{"/api/v1/jobs/" + strconv.FormatInt(j.ID, 10) + "/telemetry?attempt=2147483648", "attempt"},
		{"/api/v1/jobs/" + strconv.FormatInt(j.ID, 10) + "/telemetry?attempt=1&attempt=1", "attempt"},
		{"/api/v1/usage?by=", "by"},
		{"/api/v1/usage?by=bogus", "by"},
		{"/api/v1/usage?since=", "since"},
		{"/api/v1/usage?until=x&until=y", "until"},
		{"/api/v1/usage?since=" + strings.Repeat("2", 65), "since"},
		{"/api/v1/history?since=", "since"},
		{"/api/v1/history?until=soon", "until"},
		{"/api/v1/requests?state=", "state"},
		{"/api/v1/requests?state=pending&state=denied", "state"},
	} {
		if code, e, _ := h.rawCall("GET", tc.path, "", ""); code != http.StatusBadRequest || e.Field != tc.field || strings.Contains(e.Message, "%!") {
			t.Errorf("GET %s: %d %+v, want 400 naming %s", tc.path, code, e, tc.field)
		}
	}
	for _, q := range []string{"wait=61", "wait=NaN", "wait=Inf", "version=-1", "version=&wait=0", "version=x&wait=0", "version=1&version=2&wait=0"} {
		req, _ := http.NewRequest("GET", "http://rota-up/api/v1/agents/n1/watch?"+q, nil)
		resp, err := h.agent.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("watch?%s: %d, want 400", q, resp.StatusCode)
		}
	}
	for _, path := range []string{"/api/v1/jobs?limit=5000", "/api/v1/audit?limit=10000&after=0&actor=admin&kind=submit&since=2026-11-01T00:00:00Z",
		"/api/v1/jobs/" + strconv.FormatInt(j.ID, 10) + "/telemetry?attempt=1", "/api/v1/usage?by=node&since=2026-10-01&until=2026-11-01",
		"/api/v1/history?since=2026-10-01T00:00:00Z&until=2026-11-02T00:00:00Z"} {
		if code, e, _ := h.rawCall("GET", path, "", ""); code != http.StatusOK {
			t.Errorf("GET %s: %d %+v", path, code, e)
		}
	}
}

// No error message carries a format-string accident (%!d, %!(MISSING), %!(EXTRA ...)).
func TestErrorTextsAreClean(t *testing.T) {
	var msgs []string
	for _, a := range []string{"", "%", "0-9%", "0-9%0", "0-9%x", "x", "-1", "5-2", "0-10:0", "1:2", "1,1", "0-999999999", "0-20000", "1,,2", "%%%", "%d"} {
		if _, _, e := parseArray(a); e != nil {
			msgs = append(msgs, e.Message)
		} else if a != "" {
			t.Errorf("array %q was accepted", a)
		}
	}
	for _, img := range []string{"UPPER/x", "a b", "/x/../y.sif", "x@sha256:00", "x:-bad", "%d/x", "reg:99999/x", strings.Repeat("a", 600)} {
		if e := validateImage(img); e != nil {
			msgs = append(msgs, e.Message)
		} else {
			t.Errorf("image %q was accepted", img)
		}
	}
	st := cluster.New()
	for _, spec := range []api.JobSpec{
		{}, {Command: []string{"true"}, Name: "%s"}, {Command: []string{"true"}, Queue: "%d"},
		{Command: []string{"true"}, Nice: 20000}, {Command: []string{"true"}, GPUs: -1},
		{Command: []string{"true"}, Env: map[string]string{"%x": "1"}}, {Command: []string{"true"}, RestartPolicy: "%v"},
	} {
		if e := validateSpec(&spec, st); e != nil {
			msgs = append(msgs, e.Message)
		}
	}
	for _, q := range []api.Queue{{Name: "%"}, {Name: "q", Tier: -1}, {Name: "q", Grace: -1}, {Name: "q", IdleAction: "%d"}} {
		if e := validateQueue(&q); e != nil {
			msgs = append(msgs, e.Message)
		}
	}
	if len(msgs) < 20 {
		t.Fatalf("only %d error messages were produced; the table no longer reaches the error paths", len(msgs))
	}
	for _, m := range msgs {
		if strings.Contains(m, "%!") {
			t.Errorf("garbled message: %s", m)
		}
	}
}

// Every event kind the server records is one api/openapi.yaml lists: the kinds of
// api.EventKinds, and every constant or literal given as a Kind in the server's code.
func TestEventKindsAreInTheSpec(t *testing.T) {
	enum := readSpec(t).Components.Schemas["EventKind"].Enum
	for _, k := range api.EventKinds() {
		if !slices.Contains(enum, k) {
			t.Errorf("event kind %q is not in api/openapi.yaml's EventKind enum", k)
		}
	}
	consts := apiStringConsts(t)
	files, _ := filepath.Glob("*.go")
	fset := token.NewFileSet()
	used := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			kv, ok := n.(*ast.KeyValueExpr)
			if !ok {
				return true
			}
			if key, ok := kv.Key.(*ast.Ident); !ok || key.Name != "Kind" {
				return true
			}
			var kind string
			switch v := kv.Value.(type) {
			case *ast.BasicLit:
				kind, _ = strconv.Unquote(v.Value)
			case *ast.SelectorExpr:
				if x, ok := v.X.(*ast.Ident); !ok || x.Name != "api" {
					return true
				}
				kind = consts[v.Sel.Name]
			default:
				return true
			}
			used++
			if !slices.Contains(enum, kind) {
				t.Errorf("%s: event kind %q is not in api/openapi.yaml's EventKind enum", fset.Position(kv.Pos()), kind)
			}
			return true
		})
	}
	if used < 10 {
		t.Errorf("found only %d event kinds in the server's code; the scan misses them", used)
	}
}

// apiStringConsts maps the names of internal/api's string constants to their values.
func apiStringConsts(t *testing.T) map[string]string {
	out := map[string]string{}
	files, _ := filepath.Glob("../api/*.go")
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							out[id.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
		}
	}
	return out
}

// specDoc is the part of api/openapi.yaml these tests read.
type specDoc struct {
	Paths      map[string]specPath `yaml:"paths"`
	Components struct {
		Schemas   map[string]*specSchema `yaml:"schemas"`
		Responses map[string]specResp    `yaml:"responses"`
	} `yaml:"components"`
}

type specPath struct {
	Get    *specOp `yaml:"get"`
	Post   *specOp `yaml:"post"`
	Put    *specOp `yaml:"put"`
	Delete *specOp `yaml:"delete"`
}

type specOp struct {
	Responses map[string]specResp `yaml:"responses"`
}

type specResp struct {
	Ref     string `yaml:"$ref"`
	Content map[string]struct {
		Schema *specSchema `yaml:"schema"`
	} `yaml:"content"`
}

type specSchema struct {
	Ref                  string                 `yaml:"$ref"`
	Type                 string                 `yaml:"type"`
	Nullable             bool                   `yaml:"nullable"`
	Required             []string               `yaml:"required"`
	Properties           map[string]*specSchema `yaml:"properties"`
	AdditionalProperties any                    `yaml:"additionalProperties"`
	Items                *specSchema            `yaml:"items"`
	Enum                 []string               `yaml:"enum"`
	AllOf                []*specSchema          `yaml:"allOf"`
	OneOf                []*specSchema          `yaml:"oneOf"`
	AnyOf                []*specSchema          `yaml:"anyOf"`
}

func readSpec(t *testing.T) specDoc {
	t.Helper()
	data, err := os.ReadFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc specDoc
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("api/openapi.yaml: %v", err)
	}
	return doc
}

// BenchmarkDecodeHeartbeat measures what the strict decoder costs on the bodies the
// server reads most often, next to a plain decode of the same bytes: a heartbeat with
// telemetry, the largest, and one as most are at scale (the inventory left out, four tasks
// running, no telemetry): go test -run XXX -bench DecodeHeartbeat -benchmem ./internal/server/
func BenchmarkDecodeHeartbeat(b *testing.B) {
	hb := api.Heartbeat{Node: "n1", Instance: "agent-n1", ClusterID: "0123456789abcdef", Synced: true,
		Inventory: api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake"}, Telemetry: &api.Telemetry{}}
	for i := range 8 {
		hb.Inventory.GPUs = append(hb.Inventory.GPUs, api.GPU{Index: i, UUID: fmt.Sprintf("GPU-%d", i), Model: "H100", MemoryMB: 81559, Healthy: true})
		hb.Telemetry.GPUs = append(hb.Telemetry.GPUs, api.GPUSample{Index: i, UtilizationPct: 80, MemoryUsedMB: 40000, PowerW: 500, TemperatureC: 60})
		hb.Tasks = append(hb.Tasks, api.TaskStatus{JobID: int64(i + 1), Attempt: 1, State: api.StateRunning, PID: 1000 + i})
		hb.Telemetry.Processes = append(hb.Telemetry.Processes, api.GPUProcess{GPU: i, PID: 1000 + i, MemoryMB: 40000, JobID: int64(i + 1), Attempt: 1})
		hb.Telemetry.Tasks = append(hb.Telemetry.Tasks, api.TaskUsage{JobID: int64(i + 1), Attempt: 1, GPUUtilPct: 80, GPUMemoryMB: 40000})
	}
	steady := api.Heartbeat{Node: "node-00042", InventoryHash: "sha256:0123456789abcdef", AgentTime: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC),
		ClusterID: "0123456789abcdef", Instance: "agent-node-00042", PID: 4242, Version: "1.0.0", Synced: true, SyncEpoch: 1}
	for i := range 4 {
		steady.Tasks = append(steady.Tasks, api.TaskStatus{JobID: int64(1000 + i), Attempt: 1, State: api.StateRunning})
	}
	for _, bc := range []struct {
		name string
		hb   api.Heartbeat
	}{{"telemetry", hb}, {"steady", steady}} {
		body, err := json.Marshal(bc.hb)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(bc.name+"/strict", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest("POST", "/api/v1/agents/n1/heartbeat", bytes.NewReader(body))
				var got api.Heartbeat
				if _, e := decodeJSON(httptest.NewRecorder(), r, &got, 1<<20); e != nil {
					b.Fatal(e)
				}
			}
		})
		b.Run(bc.name+"/plain", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var got api.Heartbeat
				if err := json.Unmarshal(body, &got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// goLeak matches what a 400 must never show a client: encoding/json's own wording, Go type
// names and format-string accidents.
var goLeak = regexp.MustCompile(`Go struct|Go value|json: |%!|\bu?int(8|16|32|64)?\b|float(32|64)|\[\]|map\[|\bapi\.|\bstruct\b|time\.Time|reflect|unmarshal`)

// Every way the decoder refuses a body is worded in the API's terms: each field of each
// request type given each wrong kind of JSON value, bodies that are not objects, broken
// JSON and bad times. The message names the field where there is one.
func TestDecodeErrorsSpeakJSON(t *testing.T) {
	types := []any{&api.JobSpec{}, &api.Heartbeat{}, &api.Queue{}, &api.Team{}, &api.User{}, &api.Price{}, &api.Reservation{},
		&api.TokenRequest{}, &api.JoinTokenRequest{}, &api.JoinRequest{}, &api.RenewRequest{}, &api.UISessionRequest{}, &[]api.Notify{},
		&api.Request{}, &api.Decision{}}
	wrong := []string{`"x"`, `1.5`, `-1e400`, `99999999999999999999`, `true`, `[]`, `{}`, `[1]`, `{"a":1}`, `null`}
	decode := func(v any, body string) *api.Error {
		r := httptest.NewRequest("POST", "/", strings.NewReader(body))
		_, e := decodeJSON(httptest.NewRecorder(), r, v, 1<<20)
		return e
	}
	check := func(body string, e *api.Error, wantField string) {
		t.Helper()
		if e == nil {
			return
		}
		if goLeak.MatchString(e.Message) || goLeak.MatchString(e.Field) {
			t.Errorf("%s: the error leaks Go: field %q, %q", body, e.Field, e.Message)
		}
		if wantField != "" && e.Field == "" {
			t.Errorf("%s: %q names no field", body, e.Message)
		}
	}
	n := 0
	for _, v := range types {
		typ := reflect.TypeOf(v).Elem()
		for _, body := range []string{`[1]`, `"x"`, `7`, `true`, `{`, `{"a":`, `{}x`, `{"a" 1}`, "\xff"} {
			check(body, decode(reflect.New(typ).Interface(), body), "")
			n++
		}
		st := typ
		if st.Kind() == reflect.Slice {
			st = st.Elem()
		}
		for name, ft := range cachedJSONFields(st) {
			for _, w := range wrong {
				body := fmt.Sprintf(`{%q:%s}`, name, w)
				if typ.Kind() == reflect.Slice {
					body = "[" + body + "]"
				}
				e := decode(reflect.New(typ).Interface(), body)
				check(body, e, name)
				n++
			}
			if ft == reflect.TypeFor[time.Time]() {
				body := fmt.Sprintf(`{%q:"yesterday"}`, name)
				e := decode(reflect.New(typ).Interface(), body)
				if e == nil || e.Field != name || !strings.Contains(e.Message, "RFC 3339") {
					t.Errorf("%s: %+v; want 400 naming %s as not an RFC 3339 time", body, e, name)
				}
				check(body, e, name)
			}
		}
	}
	// The words a client reads, for one of each kind.
	for body, want := range map[string]string{
		`{"command":["x"],"gpus":"2"}`:                    "gpus: must be an integer, not a string",
		`{"command":["x"],"gpus":1.5}`:                    "gpus: must be a whole number from",
		`{"command":"x"}`:                                 "command: must be an array, not a string",
		`{"command":["x"],"env":[]}`:                      "env: must be an object, not an array",
		`{"command":["x"],"hold":1}`:                      "hold: must be true or false, not a number",
		`[1]`:                                             ": the body must be an object, not an array",
		`{"command":["x"],"time_limit_s":"1h"}`:           "time_limit_s: must be an integer, not a string",
		`{"command":["x"],"hold":true,"retries":"three"}`: "retries: must be an integer, not a string",
	} {
		e := decode(&api.JobSpec{}, body)
		if e == nil || !strings.Contains(e.Field+": "+e.Message, want) {
			t.Errorf("%s: %+v; want %q", body, e, want)
		}
	}
	if n < 500 {
		t.Fatalf("only %d bodies tried", n)
	}
}
