package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rotahq/rota/internal/api"
)

// TestSpecFuzz is the spec-driven fuzz of the API: it reads every operation of
// api/openapi.yaml and sends requests generated from it, with a fixed-seed PCG, through the
// real handler after a small scenario (nodes with GPUs, jobs, an array, a queue, a team,
// users of each role, a reservation, a price, tokens and a join token). Path parameters
// are existing IDs and names, unknown ones and hostile strings; query parameters valid,
// on and past their bounds and of the wrong type; bodies are built valid from the request
// schema and then mutated (wrong types, null, a required field left out, unknown fields,
// huge strings, deep nesting, trailing data, the wrong Content-Type). Most go as the
// admin; a share as a member, a viewer, a bad token and nobody; agent routes go through
// the in-process agent, and a share over HTTP with a person's token or none.
//
// Every answer must: not be 5xx; have a status the operation documents (405 is documented
// once for every path, components/responses/MethodNotAllowed); carry a body that matches
// the schema documented for that status (conforms, from contract_test.go), or none where
// the spec documents none; and hold no format-string accident ("%!"). kin-openapi checks
// every exchange as well (sfKin, kin_test.go): the response in full, and that no request the
// spec refuses is accepted. Afterwards the lists every client reads must still match the
// spec.
//
// ROTA_SPECFUZZ_N sets the number of requests (1500 by default), ROTA_SPECFUZZ_SEED the
// seed. Failures are grouped by operation, status and kind, and listed once each with an
// example; a known mismatch the test cannot fix is listed in specFuzzKnown with its
// reason. A longer run:
//
//	ROTA_SPECFUZZ_N=20000 go test -run TestSpecFuzz -v ./internal/server/
func TestSpecFuzz(t *testing.T) {
	n := sfEnvInt(t, "ROTA_SPECFUZZ_N", 1500)
	seed := uint64(sfEnvInt(t, "ROTA_SPECFUZZ_SEED", 15))
	var trace *regexp.Regexp // ROTA_SPECFUZZ_TRACE: log the requests of the operations it matches
	if v := os.Getenv("ROTA_SPECFUZZ_TRACE"); v != "" {
		trace = regexp.MustCompile(v)
	}
	doc := readSpec(t)
	kdoc := kinSpec(t)
	spec := sfReadSpec(t)
	ops := spec.operations()
	if len(ops) < 50 {
		t.Fatalf("api/openapi.yaml lists %d operations; the reader lost some", len(ops))
	}

	h := newHarness(t)
	sc := sfSetup(t, h)
	g := &sfGen{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), spec: spec, sc: sc, now: h.clock.Now()}
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	web := &http.Client{CheckRedirect: noRedirect}
	agent := *h.agent
	agent.CheckRedirect = noRedirect

	res := &sfResults{known: map[string]int{}, statuses: map[int]int{}, perOp: map[string]string{}}
	start := time.Now()
	for i := range n {
		if i > 0 && i%100 == 0 {
			// The scheduling loop runs on what the fuzz left: a panic there would take
			// the server down.
			if f, ok := sc.repair(); !ok {
				res.add(f, &sfRequest{method: "Cycle", route: "(the scheduling loop, after the requests before it)"}, 0, nil)
			}
		}
		req := g.request(ops[g.rng.IntN(len(ops))])
		code, hdr, body, err := req.send(h, web, &agent, sc.tokens)
		if err != nil {
			res.unsendable++
			continue
		}
		res.sent++
		res.statuses[code]++
		if trace != nil && trace.MatchString(req.method+" "+req.route) {
			t.Logf("trace: %s\n    → %d %s", req, code, sfClip(body, 300))
		}
		if req.method == req.op.method {
			res.perOp[req.op.method+" "+req.op.route] += " " + strconv.Itoa(code)
		}
		for _, f := range sfCheck(doc, req, code, hdr, body) {
			res.add(f, req, code, body)
		}
		for _, f := range sfKin(kdoc, req, code, hdr, body) {
			res.add(f, req, code, body)
		}
	}
	elapsed := time.Since(start)

	// The state every client reads still matches the spec.
	for _, path := range []string{"/api/v1/nodes", "/api/v1/jobs?state=all&limit=5000", "/api/v1/queues", "/api/v1/teams",
		"/api/v1/reservations", "/api/v1/users", "/api/v1/tokens", "/api/v1/prices", "/api/v1/history",
		"/api/v1/usage", "/api/v1/audit?limit=10000", "/api/v1/whoami"} {
		route, _, _ := strings.Cut(path, "?")
		req := &sfRequest{method: "GET", route: route, path: route, rawQuery: strings.TrimPrefix(path, route+"?"), actor: "admin", op: spec.op("GET", route)}
		if !strings.Contains(path, "?") {
			req.rawQuery = ""
		}
		code, hdr, body, err := req.send(h, web, &agent, sc.tokens)
		if err != nil {
			t.Fatalf("GET %s after the fuzz: %v", path, err)
		}
		if code != http.StatusOK {
			t.Errorf("GET %s after the fuzz: %d %s", path, code, sfClip(body, 300))
		}
		for _, f := range append(sfCheck(doc, req, code, hdr, body), sfKin(kdoc, req, code, hdr, body)...) {
			t.Errorf("GET %s after the fuzz: %s", path, f.detail)
		}
	}

	codes := slices.Sorted(maps.Keys(res.statuses))
	var dist []string
	for _, c := range codes {
		dist = append(dist, fmt.Sprintf("%d×%d", c, res.statuses[c]))
	}
	t.Logf("specfuzz: seed %d, %d requests sent over %d operations in %v (%d not sendable by the client); statuses %s",
		seed, res.sent, len(ops), elapsed.Round(time.Millisecond), res.unsendable, strings.Join(dist, " "))
	t.Logf("specfuzz: %d distinct failures, %d known findings hit", len(res.failures), len(res.known))
	for _, k := range specFuzzKnown {
		if n := res.known[k.finding]; n > 0 {
			t.Logf("known finding, %d answers: %s", n, k.finding)
		}
	}
	if testing.Verbose() {
		for _, op := range ops {
			key := op.method + " " + op.route
			t.Logf("  %-46s %s", key, res.perOp[key])
		}
	}
	for _, k := range res.order {
		f := res.failures[k]
		t.Errorf("%s (%d×)\n    example: %s\n    answer: %d %s", k, f.count, f.example, f.code, f.body)
	}
}

// sfKnown is a mismatch between the server and api/openapi.yaml that the fuzz finds and
// this file cannot fix: a person fixes the spec or the server, then removes the entry.
// match is kept as narrow as the finding: the operations, the status and the kind.
type sfKnown struct {
	finding string // one line: what the mismatch is and who should change
	match   func(r *sfRequest, f sfFailure) bool
}

var specFuzzKnown = []sfKnown{}

func sfEnvInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a whole number", name, v)
	}
	return n
}

// ---- the spec, as the generator reads it ----

type sfSpec struct {
	Paths      map[string]sfPathItem `yaml:"paths"`
	Components struct {
		Schemas    map[string]*sfSchema `yaml:"schemas"`
		Parameters map[string]*sfParam  `yaml:"parameters"`
	} `yaml:"components"`
}

type sfPathItem struct {
	Parameters []*sfParam `yaml:"parameters"`
	Get        *sfOp      `yaml:"get"`
	Post       *sfOp      `yaml:"post"`
	Put        *sfOp      `yaml:"put"`
	Delete     *sfOp      `yaml:"delete"`
}

type sfOp struct {
	method, route string
	params        []*sfParam // the path's and the operation's, resolved
	methods       []string   // every method of the path

	Rule        string     `yaml:"x-rota-rule"`
	Parameters  []*sfParam `yaml:"parameters"`
	RequestBody *struct {
		Required bool `yaml:"required"`
		Content  map[string]struct {
			Schema *sfSchema `yaml:"schema"`
		} `yaml:"content"`
	} `yaml:"requestBody"`
	Responses map[string]yaml.Node `yaml:"responses"`
}

type sfParam struct {
	Ref      string    `yaml:"$ref"`
	Name     string    `yaml:"name"`
	In       string    `yaml:"in"`
	Required bool      `yaml:"required"`
	Schema   *sfSchema `yaml:"schema"`
}

type sfSchema struct {
	Ref                  string               `yaml:"$ref"`
	Type                 string               `yaml:"type"`
	Format               string               `yaml:"format"`
	Pattern              string               `yaml:"pattern"`
	Nullable             bool                 `yaml:"nullable"`
	Required             []string             `yaml:"required"`
	Properties           map[string]*sfSchema `yaml:"properties"`
	AdditionalProperties yaml.Node            `yaml:"additionalProperties"`
	Items                *sfSchema            `yaml:"items"`
	Enum                 []any                `yaml:"enum"`
	AllOf                []*sfSchema          `yaml:"allOf"`
	OneOf                []*sfSchema          `yaml:"oneOf"`
	AnyOf                []*sfSchema          `yaml:"anyOf"`
	Minimum              *float64             `yaml:"minimum"`
	Maximum              *float64             `yaml:"maximum"`
	MinLength            *int                 `yaml:"minLength"`
	MaxLength            *int                 `yaml:"maxLength"`
	MinItems             *int                 `yaml:"minItems"`
	MaxItems             *int                 `yaml:"maxItems"`
}

func sfReadSpec(t *testing.T) *sfSpec {
	t.Helper()
	data, err := os.ReadFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var s sfSpec
	if err := yaml.Unmarshal(data, &s); err != nil {
		t.Fatalf("api/openapi.yaml: %v", err)
	}
	return &s
}

// operations lists every operation, sorted, with its parameters resolved.
func (s *sfSpec) operations() []*sfOp {
	var out []*sfOp
	for _, route := range slices.Sorted(maps.Keys(s.Paths)) {
		item := s.Paths[route]
		byMethod := map[string]*sfOp{"GET": item.Get, "POST": item.Post, "PUT": item.Put, "DELETE": item.Delete}
		var methods []string
		for _, m := range []string{"GET", "POST", "PUT", "DELETE"} {
			if byMethod[m] != nil {
				methods = append(methods, m)
			}
		}
		for _, m := range methods {
			op := byMethod[m]
			op.method, op.route, op.methods = m, route, methods
			for _, p := range append(slices.Clone(item.Parameters), op.Parameters...) {
				if p.Ref != "" {
					p = s.Components.Parameters[strings.TrimPrefix(p.Ref, "#/components/parameters/")]
				}
				if p != nil {
					op.params = append(op.params, p)
				}
			}
			out = append(out, op)
		}
	}
	return out
}

func (s *sfSpec) op(method, route string) *sfOp {
	for _, op := range s.operations() {
		if op.method == method && op.route == route {
			return op
		}
	}
	return nil
}

// flat follows $ref and merges allOf into one schema, for generation.
func (s *sfSpec) flat(sc *sfSchema) *sfSchema {
	for sc != nil && sc.Ref != "" {
		sc = s.Components.Schemas[strings.TrimPrefix(sc.Ref, "#/components/schemas/")]
	}
	if sc == nil || len(sc.AllOf) == 0 {
		return sc
	}
	out := *sc
	out.AllOf = nil
	out.Properties = map[string]*sfSchema{}
	for k, v := range sc.Properties {
		out.Properties[k] = v
	}
	for _, part := range sc.AllOf {
		p := s.flat(part)
		if p == nil {
			continue
		}
		if out.Type == "" {
			out.Type = p.Type
		}
		if len(out.Enum) == 0 {
			out.Enum = p.Enum
		}
		if out.Format == "" {
			out.Format = p.Format
		}
		for k, v := range p.Properties {
			out.Properties[k] = v
		}
		out.Required = append(out.Required, p.Required...)
	}
	if len(out.Properties) == 0 {
		out.Properties = nil
	}
	return &out
}

// ---- the scenario ----

type sfScenario struct {
	t                     *testing.T
	h                     *harness
	tokens                map[string]string // actor → token
	jobs                  []int64
	arrays                []int64
	nodes, queues, teams  []string
	users                 []string // users the fuzz may change: never the admin
	reservations          []int64
	tokenIDs, joinTokenID []string
	models                []string
}

func sfSetup(t *testing.T, h *harness) *sfScenario {
	t.Helper()
	sc := &sfScenario{t: t, h: h, tokens: map[string]string{"admin": h.token}}
	h.beat("n1", 4)
	h.beat("n2", 2)
	h.beat("c1", 0)
	sc.nodes = []string{"n1", "n2", "c1"}
	if code, e := h.putConfig("queues:\n- name: fzq\n  tier: 10\n  default_time_limit_s: 3600\n  max_time_limit_s: 7200\n  grace_s: 30\n" +
		"teams:\n- name: fzteam\n  weight: 1\n" + sfBaseLimits); code != http.StatusOK {
		t.Fatalf("config: %d %s", code, e.Message)
	}
	sc.queues = []string{"fzq", "train", "batch"}
	sc.teams = []string{"fzteam", "default"}
	sc.tokens["member"] = h.addUser("fzmember", "member", "fzteam")
	sc.tokens["viewer"] = h.addUser("fzviewer", "viewer")
	sc.tokens["operator"] = h.addUser("fzoperator", "operator")
	sc.users = []string{"fzmember", "fzviewer", "fzoperator"}

	for _, spec := range []api.JobSpec{
		{Command: []string{"train"}, GPUs: 1},
		{Command: []string{"prep"}, CPUs: 2},
		{Command: []string{"big"}, GPUs: 4, Queue: "fzq"},
		{Command: []string{"held"}, Hold: true},
		{Command: []string{"el"}, Array: "0-2"},
	} {
		j := sc.h.submit(spec)
		sc.jobs = append(sc.jobs, j.ID)
		if spec.Array != "" {
			sc.arrays = append(sc.arrays, j.ID)
			sc.jobs = append(sc.jobs, j.ID+1, j.ID+2)
		}
	}
	var mine api.Job
	if code := h.doAs(sc.tokens["member"], "POST", "/api/v1/jobs", api.JobSpec{Command: []string{"mine"}, Team: "fzteam"}, &mine); code != http.StatusCreated {
		t.Fatalf("member submit: %d", code)
	}
	sc.jobs = append(sc.jobs, mine.ID)
	h.cycle()
	// The first job runs, the second ends, so that logs, telemetry and history have data.
	for _, id := range sc.jobs[:2] {
		d := h.job(id)
		if len(d.AttemptList) == 0 {
			continue
		}
		node := d.AttemptList[0].Placements[0].Node
		gpus := map[string]int{"n1": 4, "n2": 2, "c1": 0}[node]
		h.beat(node, gpus, api.TaskStatus{JobID: id, Attempt: 1, State: api.StateRunning})
		if id == sc.jobs[1] {
			exit := 0
			h.beat(node, gpus, api.TaskStatus{JobID: id, Attempt: 1, State: api.StateSucceeded, ExitCode: &exit})
		}
	}
	h.cycle()

	var r api.Reservation
	now := h.clock.Now()
	if code := h.do("POST", "/api/v1/reservations", map[string]any{"team": "fzteam", "gpus": 2,
		"start": now.Add(24 * time.Hour), "end": now.Add(48 * time.Hour)}, &r); code == http.StatusCreated {
		sc.reservations = append(sc.reservations, r.ID)
	}
	if code := h.do("PUT", "/api/v1/prices/H100", map[string]any{"model": "H100", "per_gpu_hour": 2.5, "currency": "USD"}, nil); code != http.StatusOK {
		t.Fatalf("price: %d", code)
	}
	sc.models = []string{"H100", "*"}
	var jt api.NewJoinToken
	if code := h.do("POST", "/api/v1/join-tokens", map[string]any{"uses": 2}, &jt); code == http.StatusCreated {
		sc.joinTokenID = append(sc.joinTokenID, jt.ID)
	}
	var extra api.NewToken
	if code := h.do("POST", "/api/v1/tokens", map[string]any{"user": "fzmember", "description": "spare"}, &extra); code == http.StatusCreated {
		sc.tokenIDs = append(sc.tokenIDs, extra.ID)
	}
	var list api.TokenList
	h.do("GET", "/api/v1/tokens", nil, &list)
	for _, tok := range list.Tokens {
		if tok.User != "admin" && !slices.Contains(sc.tokenIDs, tok.ID) {
			sc.tokenIDs = append(sc.tokenIDs, tok.ID)
		}
	}
	return sc
}

// sfBaseLimits are generous limits, so that the rate limit does not answer most submits.
const sfBaseLimits = "limits:\n  submits_per_second: 100000\n  submit_burst: 1000000\n"

// repair puts back what the fuzz may have taken away, so later requests still reach the
// handlers' depths: the users' roles and tokens, the team, the limits and the nodes.
func (sc *sfScenario) repair() (sfFailure, bool) {
	h := sc.h
	h.t.Helper()
	if code := h.do("GET", "/api/v1/whoami", nil, nil); code != http.StatusOK {
		h.t.Fatalf("the admin's token stopped working (%d): the fuzz must leave it alone", code)
	}
	// The limits first: the fuzz may have set max_name_length or max_body_bytes low.
	if code, e := h.putConfig(sfBaseLimits); code != http.StatusOK {
		h.t.Fatalf("repair limits: %d %s", code, e.Message)
	}
	for actor, role := range map[string]string{"member": "member", "viewer": "viewer", "operator": "operator"} {
		name := "fz" + actor
		if code := h.do("PUT", "/api/v1/users/"+name, api.User{Role: role}, nil); code != http.StatusOK {
			h.t.Fatalf("repair user %s: %d", name, code)
		}
		if code := h.doAs(sc.tokens[actor], "GET", "/api/v1/whoami", nil, nil); code != http.StatusOK {
			var tok api.NewToken
			if code := h.do("POST", "/api/v1/tokens", api.TokenRequest{User: name}, &tok); code != http.StatusCreated {
				h.t.Fatalf("repair token of %s: %d", name, code)
			}
			sc.tokens[actor] = tok.Token
			sc.tokenIDs = append(sc.tokenIDs, tok.ID)
		}
	}
	if code, e := h.putConfig("teams:\n- name: fzteam\n  weight: 1\n  members: [fzmember]\n"); code != http.StatusOK {
		h.t.Fatalf("repair team: %d %s", code, e.Message)
	}
	for node, gpus := range map[string]int{"n1": 4, "n2": 2} {
		inv := api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake"}
		for i := range gpus {
			inv.GPUs = append(inv.GPUs, api.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", node, i), Model: "H100", MemoryMB: 81559, Healthy: true})
		}
		h.beatAs(node, api.Heartbeat{Inventory: inv, Instance: "agent-" + node, Synced: true}) // best effort: a fuzzed agent may hold the node
	}
	return sc.cycle()
}

// cycle runs one scheduling cycle and reports a panic or an error as a failure.
func (sc *sfScenario) cycle() (f sfFailure, ok bool) {
	defer func() {
		if p := recover(); p != nil {
			stack := string(debug.Stack())
			where := "?"
			for _, m := range sfPanicAt.FindAllStringSubmatch(stack, -1) {
				if !strings.Contains(m[1], "_test.go") {
					where = m[1]
					break
				}
			}
			kind := fmt.Sprintf("panic: %v at %s", p, where)
			f, ok = sfFailure{key: "Cycle → " + kind, kind: kind, detail: stack}, false
		}
	}()
	if err := sc.h.srv.Cycle(context.Background()); err != nil {
		return sfFailure{key: "Cycle → error", kind: "error", detail: err.Error()}, false
	}
	return sfFailure{}, true
}

// sfPanicAt finds the first frame of rota's own code below the runtime's in a panic's stack.
var sfPanicAt = regexp.MustCompile(`/internal/((?:sched|server|store|api)/[a-z_]+\.go:\d+)`)

// ---- requests ----

type sfRequest struct {
	op            *sfOp
	method, route string
	path          string // escaped
	rawQuery      string
	header        map[string]string
	contentType   string
	body          []byte
	actor         string // admin, member, viewer, operator, bad, none, agent
	note          string // what the generator did, for the failure's example
}

func (r *sfRequest) send(h *harness, web, agent *http.Client, tokens map[string]string) (int, http.Header, []byte, error) {
	client, base := web, h.http.URL
	token := ""
	switch r.actor {
	case "agent":
		client, base = agent, "http://rota-up"
	case "none":
	case "bad":
		token = "rota_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	default:
		token = h.token
		if r.actor != "admin" {
			token = tokens[r.actor]
		}
	}
	u := base + r.path
	if r.rawQuery != "" {
		u += "?" + r.rawQuery
	}
	req, err := http.NewRequest(r.method, u, bytes.NewReader(r.body))
	if err != nil {
		return 0, nil, nil, err
	}
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data, nil
}

func (r *sfRequest) String() string {
	u := r.path
	if r.rawQuery != "" {
		u += "?" + r.rawQuery
	}
	s := fmt.Sprintf("%s %s as %s", r.method, sfClip([]byte(u), 200), r.actor)
	if r.contentType != "" {
		s += " [" + r.contentType + "]"
	}
	if len(r.body) > 0 {
		s += " body " + sfClip(r.body, 300)
	}
	if r.note != "" {
		s += " (" + r.note + ")"
	}
	return s
}

func sfClip(b []byte, n int) string {
	if len(b) > n {
		return fmt.Sprintf("%q… (%d bytes)", b[:n], len(b))
	}
	return fmt.Sprintf("%q", b)
}

// ---- the generator ----

type sfGen struct {
	rng  *rand.Rand
	spec *sfSpec
	sc   *sfScenario
	now  time.Time
	node string // the {node} of the request being built
	name string // its {name} or {model}, which a body's name or model must repeat
}

func (g *sfGen) chance(p float64) bool { return g.rng.Float64() < p }

func sfPick[T any](g *sfGen, list []T) T { return list[g.rng.IntN(len(list))] }

// sfHostile are path and query values meant to break parsers, paths and messages.
var sfHostile = []string{
	"", " ", "..", ".", "../", "../../etc/passwd", "%2e%2e%2f", "%00", "a%2Fb", "a/b", "\x00", "a\nb", "\r\n",
	"\x1b[31mred", "ノード", "😀", "\u202egnp.exe", "\ufeff", "'; DROP TABLE jobs; --", "${HOME}", "$(id)",
	"%s%d%v", "{}", "[]", "null", "true", "-1", "0", "1e999", "NaN", "*", "?", "#", "&x=1", "a b", "\\", "\xff\xfe",
}

func (g *sfGen) hostile() string {
	switch g.rng.IntN(8) {
	case 0:
		return strings.Repeat("a", 300+g.rng.IntN(5000))
	case 1:
		return strings.Repeat("é", 200)
	case 2:
		return "fz-" + strconv.Itoa(g.rng.IntN(1000000))
	}
	return sfPick(g, sfHostile)
}

func (g *sfGen) request(op *sfOp) *sfRequest {
	r := &sfRequest{op: op, method: op.method, route: op.route, header: map[string]string{}}
	g.node, g.name = sfPick(g, g.sc.nodes), ""

	// Who calls.
	agentRoute := strings.HasPrefix(op.route, "/api/v1/agents/")
	switch x := g.rng.Float64(); {
	case agentRoute && x < 0.8:
		r.actor = "agent"
	case agentRoute && x < 0.9:
		r.actor = "admin"
	case agentRoute:
		r.actor = "none"
	case x < 0.66:
		r.actor = "admin"
	case x < 0.76:
		r.actor = "member"
	case x < 0.84:
		r.actor = "viewer"
	case x < 0.88:
		r.actor = "operator"
	case x < 0.94:
		r.actor = "none"
	default:
		r.actor = "bad"
	}

	// The path.
	path := op.route
	for _, p := range op.params {
		if p.In != "path" {
			continue
		}
		v := g.pathValue(op.route, p)
		if p.Name == "node" {
			g.node = v
		}
		if p.Name == "name" || p.Name == "model" {
			g.name = v
		}
		path = strings.Replace(path, "{"+p.Name+"}", url.PathEscape(v), 1)
	}
	r.path = path

	// A method the path does not take, now and then: 405.
	if g.chance(0.03) {
		others := slices.DeleteFunc([]string{"GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"}, func(m string) bool { return slices.Contains(op.methods, m) })
		if len(others) > 0 {
			r.method = sfPick(g, others)
			r.note = "method not taken"
		}
	}

	// The query and headers.
	var q []string
	for _, p := range op.params {
		switch p.In {
		case "query":
			if !p.Required && g.chance(0.5) || p.Required && g.chance(0.05) {
				continue
			}
			v := g.paramValue(p)
			q = append(q, url.QueryEscape(p.Name)+"="+url.QueryEscape(v))
			if g.chance(0.05) {
				q = append(q, url.QueryEscape(p.Name)+"="+url.QueryEscape(g.paramValue(p))) // repeated
			}
		case "header":
			if g.chance(0.5) {
				continue
			}
			v := g.paramValue(p)
			if p.Name == "Idempotency-Key" && g.chance(0.7) {
				v = "fz-key-" + strconv.Itoa(g.rng.IntN(20))
			}
			if sfHeaderSafe(v) {
				r.header[p.Name] = v
			}
		}
	}
	if g.chance(0.05) {
		q = append(q, "fz_unknown="+url.QueryEscape(g.hostile()))
	}
	if g.chance(0.02) {
		q = append(q, sfPick(g, []string{"%zz", "limit=%", "a;b=c", "=", "&&", "limit=1&limit=2"}))
	}
	r.rawQuery = strings.Join(q, "&")

	// The body.
	if op.RequestBody != nil {
		g.body(op, r)
	} else if g.chance(0.05) {
		r.body, r.contentType = []byte(`{"unexpected":true}`), "application/json"
		r.note = "a body where none is taken"
	}
	if g.chance(0.04) && len(r.body) > 0 {
		r.contentType = sfPick(g, []string{"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/json; charset=utf-8", "APPLICATION/JSON", "application/json, text/plain", "application/octet-stream", "text/yaml", "\x7f"})
		if !sfHeaderSafe(r.contentType) {
			r.contentType = "bogus"
		}
		r.note = strings.TrimPrefix(r.note+"; content type "+r.contentType, "; ")
	}
	return r
}

func sfHeaderSafe(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// pathValue picks a path parameter: an existing ID or name mostly, else an unknown or a
// hostile one.
func (g *sfGen) pathValue(route string, p *sfParam) string {
	var pool []string
	ids := func(list []int64) []string {
		var out []string
		for _, id := range list {
			out = append(out, strconv.FormatInt(id, 10))
		}
		return out
	}
	switch {
	case p.Name == "job":
		pool = ids(g.sc.jobs[:2])
	case p.Name == "attempt":
		pool = []string{"1", "1", "2"}
	case strings.HasPrefix(route, "/api/v1/arrays/"):
		pool = ids(g.sc.arrays)
	case strings.HasPrefix(route, "/api/v1/jobs/"):
		pool = ids(g.sc.jobs)
	case strings.HasPrefix(route, "/api/v1/reservations/"):
		pool = ids(g.sc.reservations)
	case strings.HasPrefix(route, "/api/v1/tokens/"):
		pool = g.sc.tokenIDs
	case strings.HasPrefix(route, "/api/v1/join-tokens/"):
		pool = g.sc.joinTokenID
	case strings.HasPrefix(route, "/api/v1/nodes/"), strings.HasPrefix(route, "/api/v1/agents/"):
		pool = g.sc.nodes
	case strings.HasPrefix(route, "/api/v1/queues/"):
		pool = g.sc.queues
	case strings.HasPrefix(route, "/api/v1/teams/"):
		pool = g.sc.teams
	case strings.HasPrefix(route, "/api/v1/users/"):
		pool = g.sc.users
	case strings.HasPrefix(route, "/api/v1/prices/"):
		pool = g.sc.models
	}
	switch x := g.rng.Float64(); {
	case x < 0.65 && len(pool) > 0:
		return sfPick(g, pool)
	case x < 0.8:
		s := g.spec.flat(p.Schema)
		if s != nil && s.Type == "integer" {
			return sfPick(g, []string{"0", "-1", "999999", "9223372036854775807", "9223372036854775808", "1.5", "abc", "1e3", "+1", "0x10", "01"})
		}
		return "fz-" + strconv.Itoa(g.rng.IntN(1000))
	}
	v := g.hostile()
	if v == "" || v == "." || v == ".." {
		// An empty or dot segment changes the path itself (ServeMux cleans it and
		// redirects); clients escape what they send, so send it as one segment.
		v += "x"
	}
	return v
}

// paramValue makes a query or header value from the parameter's schema: valid, on a
// bound, past it, of the wrong type, or hostile.
func (g *sfGen) paramValue(p *sfParam) string {
	s := g.spec.flat(p.Schema)
	if s == nil {
		s = &sfSchema{Type: "string"}
	}
	if p.Name == "wait" {
		// Valid waits stay short: a long poll would stall the run.
		return sfPick(g, []string{"0", "0.01", "0.001", "-1", "61", "60.0001", "121", "NaN", "Inf", "-Inf", "1e309", "x", "", "0x1p-3"})
	}
	if g.chance(0.1) {
		return g.hostile()
	}
	if len(s.Enum) > 0 {
		switch g.rng.IntN(5) {
		case 0:
			return "nope"
		case 1:
			return strings.ToUpper(fmt.Sprint(sfPick(g, s.Enum)))
		}
		return fmt.Sprint(sfPick(g, s.Enum))
	}
	switch s.Type {
	case "integer", "number":
		lo, hi := -1e6, 1e6
		if s.Minimum != nil {
			lo = *s.Minimum
		}
		if s.Maximum != nil {
			hi = *s.Maximum
		}
		switch g.rng.IntN(10) {
		case 0:
			return sfNum(lo)
		case 1:
			return sfNum(hi)
		case 2:
			return sfNum(lo - 1)
		case 3:
			return sfNum(hi + 1)
		case 4:
			return sfPick(g, []string{"abc", "1.5", "", "99999999999999999999", "-0", "0x10", "1e3", " 1", "true", "null"})
		}
		if p.Name == "attempt" || p.Name == "rank" {
			return strconv.Itoa(g.rng.IntN(3))
		}
		return sfNum(lo + math.Floor(g.rng.Float64()*math.Min(hi-lo, 100)))
	case "boolean":
		return sfPick(g, []string{"true", "false", "1", "yes"})
	}
	if s.Format == "date-time" {
		return g.dateTime()
	}
	switch p.Name {
	case "state":
		return sfPick(g, []string{"all", "PENDING", "running", "PENDING,RUNNING", "SUCCEEDED,failed", "BOGUS", "PENDING,,RUNNING", ","})
	case "queue":
		return sfPick(g, g.sc.queues)
	case "user", "actor":
		return sfPick(g, append(slices.Clone(g.sc.users), "admin", "node:n1"))
	case "node":
		return sfPick(g, g.sc.nodes)
	case "after":
		return sfPick(g, []string{"1", "3", "0", "-5", "abc", "99999999999999999999"})
	case "since", "until":
		return sfPick(g, []string{g.dateTime(), "2026-10-01", "2026-11-02", "2020-01-01", "2026-13-01", "tomorrow"})
	case "Idempotency-Key":
		return sfPick(g, []string{"k1", strings.Repeat("k", 128), strings.Repeat("k", 129), "bad key", "a/b"})
	}
	return "fz-" + strconv.Itoa(g.rng.IntN(100))
}

func sfNum(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

func (g *sfGen) dateTime() string {
	switch g.rng.IntN(6) {
	case 0:
		return sfPick(g, []string{"2026-13-45T00:00:00Z", "yesterday", "2026-11-01", "0000-00-00T00:00:00Z", "9999-12-31T23:59:59Z", "2026-11-01T09:00:00+25:00"})
	}
	return g.now.Add(time.Duration(g.rng.IntN(96)-48) * time.Hour).Format(time.RFC3339)
}

// body builds the request body: a valid value from the schema, mostly mutated.
func (g *sfGen) body(op *sfOp, r *sfRequest) {
	types := slices.Sorted(maps.Keys(op.RequestBody.Content))
	ct := sfPick(g, types)
	schema := op.RequestBody.Content[ct].Schema
	r.contentType = ct
	if ct == "application/octet-stream" {
		switch x := g.rng.Float64(); {
		case x < 0.02:
			r.body = bytes.Repeat([]byte("x"), 2<<20+1)
			r.note = "a log chunk over 2 MiB"
		case x < 0.2:
			r.body = nil
		default:
			r.body = make([]byte, g.rng.IntN(4096))
			for i := range r.body {
				r.body[i] = byte(g.rng.IntN(256))
			}
		}
		return
	}
	v := g.valid(schema, "", 0)
	var notes []string
	if g.chance(0.6) {
		for range 1 + g.rng.IntN(2) {
			var note string
			v, note = g.mutate(schema, v, 0)
			notes = append(notes, note)
		}
	}
	var data []byte
	if strings.Contains(ct, "yaml") && g.chance(0.7) {
		data, _ = yaml.Marshal(v)
	} else {
		data, _ = json.Marshal(v)
	}
	switch x := g.rng.Float64(); {
	case x < 0.03:
		data = append(data, sfPick(g, []string{"}", " {}", "x", "\n---\nqueues: []\n", "\x00", ",", " null"})...)
		notes = append(notes, "trailing data")
	case x < 0.05:
		data = data[:g.rng.IntN(len(data)+1)]
		notes = append(notes, "truncated")
	case x < 0.06:
		depth := 100 + g.rng.IntN(20000)
		data = []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
		notes = append(notes, "deep nesting")
	case x < 0.07:
		depth := 100 + g.rng.IntN(5000)
		data = []byte(`{"a":` + strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth+1))
		notes = append(notes, "deep objects")
	case x < 0.08:
		data = nil
		notes = append(notes, "empty body")
	case x < 0.09:
		data = []byte(sfPick(g, []string{"not json", "\ufeff{}", "'a'", "[1,2", "{\"a\":1,\"a\":2}", "\"\\ud800\"", "1e999999",
			"a: &a [x, x]\nb: &b [*a, *a, *a, *a]\nc: &c [*b, *b, *b, *b]\nd: [*c, *c, *c, *c]\n"}))
		notes = append(notes, "garbage")
	case x < 0.095:
		data = append([]byte(`{"fz":"`), append(bytes.Repeat([]byte("z"), 1<<20+10), '"', '}')...)
		notes = append(notes, "body over 1 MiB")
	}
	r.body = data
	r.note = strings.Join(notes, "; ")
}

// valid makes a value the schema accepts, with the scenario's names where a property's
// name says what it holds.
func (g *sfGen) valid(s *sfSchema, name string, depth int) any {
	s = g.spec.flat(s)
	if s == nil {
		return "x"
	}
	if len(s.Enum) > 0 {
		return sfPick(g, s.Enum)
	}
	if v, ok := g.named(name, s); ok {
		return v
	}
	switch s.Type {
	case "object", "":
		if s.Type == "" && len(s.Properties) == 0 {
			return "x"
		}
		obj := map[string]any{}
		for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
			if slices.Contains(s.Required, k) || depth < 3 && g.chance(0.35) {
				obj[k] = g.valid(s.Properties[k], k, depth+1)
			}
		}
		if s.AdditionalProperties.Kind == yaml.MappingNode && depth < 3 {
			var ap sfSchema
			if s.AdditionalProperties.Decode(&ap) == nil {
				for i := range g.rng.IntN(3) {
					key := fmt.Sprintf("FZ_%d", i)
					if name == "quotas" {
						key = sfPick(g, []string{"*", "H100"})
					}
					obj[key] = g.valid(&ap, key, depth+1)
				}
			}
		}
		return obj
	case "array":
		lo, hi := 0, 3
		if s.MinItems != nil {
			lo = *s.MinItems
		}
		if s.MaxItems != nil && *s.MaxItems < hi {
			hi = *s.MaxItems
		}
		if lo > hi {
			hi = lo
		}
		if depth >= 3 {
			hi = lo
		}
		list := []any{}
		for range lo + g.rng.IntN(hi-lo+1) {
			list = append(list, g.valid(s.Items, strings.TrimSuffix(name, "s"), depth+1))
		}
		return list
	case "integer", "number":
		lo, hi := 0.0, 100.0
		if s.Minimum != nil {
			lo = *s.Minimum
		}
		if s.Maximum != nil {
			hi = math.Min(*s.Maximum, lo+100)
		} else {
			hi = lo + 100
		}
		f := lo + math.Floor(g.rng.Float64()*(hi-lo+1))
		if s.Type == "number" && g.chance(0.3) {
			f = math.Min(hi, f+0.5)
		}
		return f
	case "boolean":
		return g.chance(0.5)
	}
	if s.Format == "date-time" {
		return g.now.Add(time.Duration(g.rng.IntN(72)) * time.Hour).Format(time.RFC3339)
	}
	n := 1 + g.rng.IntN(8)
	if s.MaxLength != nil && *s.MaxLength < n {
		n = *s.MaxLength
	}
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := []byte{'f'}
	for len(b) < n {
		b = append(b, letters[g.rng.IntN(len(letters))])
	}
	return string(b[:n])
}

// named gives a value for a property whose name says what it holds.
func (g *sfGen) named(name string, s *sfSchema) (any, bool) {
	str := s.Type == "string" || s.Type == ""
	switch {
	case name == "queue" && str:
		return sfPick(g, g.sc.queues), true
	case name == "team" && str:
		return sfPick(g, g.sc.teams), true
	case (name == "user" || name == "member") && str:
		return sfPick(g, append(slices.Clone(g.sc.users), "admin")), true
	case (name == "name" || name == "model") && str && g.name != "" && g.chance(0.8):
		return g.name, true
	case name == "image_digest" && str:
		return sfPick(g, []string{"", "sha256:" + strings.Repeat("ab", 32)}), true
	case (name == "gpu_model" || name == "model") && str:
		return sfPick(g, []string{"H100", "h100", "A100", "H100,A100"}), true
	case name == "node" && str:
		return sfPick(g, []string{g.node, g.node, ""}), true
	case name == "instance" && str:
		return sfPick(g, []string{"agent-" + g.node, "agent-" + g.node, "fzagent"}), true
	case name == "cluster_id" && str:
		return sfPick(g, []string{g.sc.h.srv.ClusterID(), g.sc.h.srv.ClusterID(), "0123456789abcdef"}), true
	case name == "signal" && str:
		return sfPick(g, []string{"SIGTERM", "int", "USR1"}), true
	case name == "array" && str:
		return sfPick(g, []string{"0-2", "1,3", "0-4:2%1", ""}), true
	case (name == "workdir" || name == "checkpoint_root") && str:
		return sfPick(g, []string{"/tmp", "/ckpt/fz", ""}), true
	case name == "url" && str:
		return "http://127.0.0.1:9/hook", true
	case name == "command" && s.Type == "array":
		return sfPick(g, [][]any{{"true"}, {"python", "t.py"}, {"sleep", "1"}}), true
	case (name == "job_id" || name == "after" || name == "after_ok") && s.Type == "integer":
		return float64(sfPick(g, g.sc.jobs)), true
	case name == "attempt" && s.Type == "integer":
		return float64(1 + g.rng.IntN(2)), true
	case (name == "gpus" || name == "gpus_per_node") && s.Type == "integer":
		return float64(g.rng.IntN(3)), true
	case name == "nodes" && s.Type == "integer":
		return float64(g.rng.IntN(2)), true
	case name == "max_body_bytes" && s.Type == "integer":
		// Never below what the repair's own config takes, or nothing could restore it.
		return sfPick(g, []float64{0, 1 << 20, 4 << 20}), true
	case name == "synced" && s.Type == "boolean":
		return g.chance(0.9), true
	}
	return nil, false
}

// mutate changes one place of v so that the schema no longer holds, or holds at an edge.
func (g *sfGen) mutate(s *sfSchema, v any, depth int) (any, string) {
	s = g.spec.flat(s)
	// Descend into a child now and then.
	if obj, ok := v.(map[string]any); ok && len(obj) > 0 && depth < 4 && g.chance(0.5) {
		keys := slices.Sorted(maps.Keys(obj))
		k := sfPick(g, keys)
		var child *sfSchema
		if s != nil {
			child = s.Properties[k]
		}
		nv, note := g.mutate(child, obj[k], depth+1)
		obj[k] = nv
		return obj, k + ": " + note
	}
	if list, ok := v.([]any); ok && len(list) > 0 && depth < 4 && g.chance(0.5) {
		i := g.rng.IntN(len(list))
		var child *sfSchema
		if s != nil {
			child = s.Items
		}
		nv, note := g.mutate(child, list[i], depth+1)
		list[i] = nv
		return list, fmt.Sprintf("[%d]: %s", i, note)
	}
	switch g.rng.IntN(9) {
	case 0:
		return nil, "null"
	case 1:
		switch v.(type) {
		case string:
			return 12, "a number for a string"
		case float64:
			return "12", "a string for a number"
		case bool:
			return "yes", "a string for a boolean"
		case []any:
			return map[string]any{}, "an object for an array"
		case map[string]any:
			return []any{}, "an array for an object"
		}
		return true, "a boolean"
	case 2:
		if obj, ok := v.(map[string]any); ok && len(obj) > 0 {
			k := sfPick(g, slices.Sorted(maps.Keys(obj)))
			delete(obj, k)
			return obj, "without " + k
		}
		return v, "unchanged"
	case 3:
		if obj, ok := v.(map[string]any); ok {
			obj["fz_extra"] = 1
			return obj, "an unknown field"
		}
		return []any{v}, "wrapped in an array"
	case 4:
		return strings.Repeat("x", sfPick(g, []int{257, 4097, 70000, 300000})), "a long string"
	case 5:
		return sfPick(g, []any{-1.0, 1.5, 1e300, -1e300, 9223372036854775808.0, 4097.0, 1e6 + 1, -10001.0, 0.0}), "an edge number"
	case 6:
		return g.hostile(), "a hostile string"
	case 7:
		deep := any(1)
		for range 50 + g.rng.IntN(500) {
			deep = []any{deep}
		}
		return deep, "nested arrays"
	}
	return sfPick(g, []any{"", "nope", "PENDING", "SIGFOO", "-", "0-99%", "0-9%,1", "a\x00b", "rota_" + strings.Repeat("a", 32)}), "an odd string"
}

// ---- checking answers ----

type sfFailure struct {
	key    string // groups alike failures: operation, status and kind
	code   int
	kind   string
	detail string
}

// sfCheck lists what is wrong with an answer.
func sfCheck(doc specDoc, r *sfRequest, code int, hdr http.Header, body []byte) []sfFailure {
	opKey := r.method + " " + r.route
	var out []sfFailure
	fail := func(kind, detail string) {
		out = append(out, sfFailure{key: fmt.Sprintf("%s → %d: %s", opKey, code, kind), code: code, kind: kind, detail: detail})
	}
	if code >= 500 {
		fail("5xx", "the server failed")
	}
	if bytes.Contains(body, []byte("%!")) {
		fail("garbled message (%!)", string(body))
	}
	var resp specResp
	if code == http.StatusMethodNotAllowed {
		resp = specResp{Ref: "#/components/responses/MethodNotAllowed"}
	} else {
		item, ok := doc.Paths[r.route]
		var op *specOp
		if ok {
			op = map[string]*specOp{"GET": item.Get, "POST": item.Post, "PUT": item.Put, "DELETE": item.Delete}[r.method]
		}
		if op == nil {
			fail("the spec has no such operation", "")
			return out
		}
		if resp, ok = op.Responses[strconv.Itoa(code)]; !ok {
			if resp, ok = op.Responses["default"]; !ok {
				fail("undocumented status", fmt.Sprintf("documented: %v", slices.Sorted(maps.Keys(op.Responses))))
				return out
			}
		}
	}
	if resp.Ref != "" {
		r, ok := doc.Components.Responses[strings.TrimPrefix(resp.Ref, "#/components/responses/")]
		if !ok {
			fail("dangling response $ref "+resp.Ref, "")
			return out
		}
		resp = r
	}
	if len(resp.Content) == 0 {
		if len(body) > 0 {
			fail("a body where the spec documents none", "")
		}
		return out
	}
	media, ok := resp.Content["application/json"]
	if !ok {
		return out // text/plain and the like: any bytes
	}
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		fail("Content-Type "+ct+" where the spec documents application/json", "")
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		fail("a body that is not JSON", err.Error())
		return out
	}
	if media.Schema != nil {
		for _, p := range conforms(doc, media.Schema, v, "$", false) {
			fail("schema: "+sfIndexRE.ReplaceAllString(p, "[]"), p)
		}
	}
	return out
}

// sfIndexRE takes the indices out of a schema complaint, so that alike ones group.
var sfIndexRE = regexp.MustCompile(`\[\d+\]`)

type sfResults struct {
	sent, unsendable int
	statuses         map[int]int
	known            map[string]int    // by sfKnown.finding
	perOp            map[string]string // the statuses each operation answered
	failures         map[string]*sfSeen
	order            []string
}

type sfSeen struct {
	count   int
	example string
	code    int
	body    string
}

func (res *sfResults) add(f sfFailure, r *sfRequest, code int, body []byte) {
	for _, k := range specFuzzKnown {
		if k.match(r, f) {
			res.known[k.finding]++
			return
		}
	}
	if res.failures == nil {
		res.failures = map[string]*sfSeen{}
	}
	s, ok := res.failures[f.key]
	if !ok {
		s = &sfSeen{example: r.String(), code: code, body: sfClip(body, 400)}
		if f.detail != "" {
			s.example += "; " + f.detail
		}
		res.failures[f.key] = s
		res.order = append(res.order, f.key)
		sort.Strings(res.order)
	}
	s.count++
}
