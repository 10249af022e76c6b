package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// TestResponsesMatchTheSpec drives a small scenario through the real server and checks
// every exchange against api/openapi.yaml twice. kin-openapi (kin_test.go) validates the
// request and the response in full: the status must be documented for the operation
// (405 against components/responses/MethodNotAllowed, which the spec states once for every
// path), the body must match its schema with formats, bounds, patterns and enums, and a
// request the spec refuses must not be accepted. conforms, written for this test, adds
// what kin-openapi allows by default: no property the schema does not list.
func TestResponsesMatchTheSpec(t *testing.T) {
	doc := readSpec(t)
	kdoc := kinSpec(t)
	h := newHarness(t)
	h.beat("n1", 2)
	h.beat("c1", 0)

	type call struct {
		method, route, path string
		body                string
		token               string // "-" for none; "" for the admin's
	}
	statuses := map[string]bool{}
	check := func(c call) []byte {
		t.Helper()
		code, hdr, body := contractCall(t, h, c.method, c.path, c.body, c.token)
		statuses[fmt.Sprintf("%d", code)] = true
		path, rawQuery, _ := strings.Cut(c.path, "?")
		x := kinExchange{method: c.method, route: c.route, path: path, rawQuery: rawQuery, header: http.Header{},
			body: []byte(c.body), status: code, respHeader: hdr, respBody: body}
		if c.body != "" {
			x.header.Set("Content-Type", contentTypeFor(c.path))
		}
		for _, p := range kinVerdict(kdoc, x) {
			t.Errorf("%s %s: %d: kin-openapi: %s", c.method, c.path, code, p)
		}
		schema, err := responseSchema(doc, c.route, c.method, code)
		if err != nil {
			t.Errorf("%s %s: %v; body %s", c.method, c.path, err, body)
			return body
		}
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Errorf("%s %s: %d with a body that is not JSON: %q", c.method, c.path, code, body)
			return body
		}
		for _, p := range conforms(doc, schema, v, "$", false) {
			t.Errorf("%s %s: %d: %s", c.method, c.path, code, p)
		}
		if bytes.Contains(body, []byte("%!")) {
			t.Errorf("%s %s: a garbled message: %s", c.method, c.path, body)
		}
		return body
	}

	var gpuJob, cpuJob api.Job
	json.Unmarshal(check(call{method: "POST", route: "/api/v1/jobs", path: "/api/v1/jobs", body: `{"command":["train"],"gpus":1}`}), &gpuJob)
	json.Unmarshal(check(call{method: "POST", route: "/api/v1/jobs", path: "/api/v1/jobs", body: `{"command":["prep"],"cpus":2}`}), &cpuJob)
	check(call{method: "POST", route: "/api/v1/jobs", path: "/api/v1/jobs", body: `{"command":["x"],"gpus":64}`})
	h.cycle()
	for _, j := range []api.Job{gpuJob, cpuJob} {
		node := "n1"
		if d := h.job(j.ID); len(d.AttemptList) > 0 {
			node = d.AttemptList[0].Placements[0].Node
		}
		h.beat(node, map[string]int{"n1": 2, "c1": 0}[node], api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateRunning})
	}
	exit := 0
	h.beat("c1", 0, api.TaskStatus{JobID: cpuJob.ID, Attempt: 1, State: api.StateSucceeded, ExitCode: &exit})
	h.cycle()

	for _, id := range []int64{gpuJob.ID, cpuJob.ID} {
		p := fmt.Sprintf("/api/v1/jobs/%d", id)
		check(call{method: "GET", route: "/api/v1/jobs/{id}", path: p})
		check(call{method: "GET", route: "/api/v1/jobs/{id}/why", path: p + "/why"})
		check(call{method: "GET", route: "/api/v1/jobs/{id}/telemetry", path: p + "/telemetry"})
	}
	// A window planned on c1, so that the node list shows one.
	at := h.clock.Now().Add(time.Hour).Format(time.RFC3339)
	check(call{method: "POST", route: "/api/v1/nodes/{name}/drain", path: "/api/v1/nodes/c1/drain",
		body: fmt.Sprintf(`{"reason":"BIOS update","at":%q,"until":%q}`, at, h.clock.Now().Add(2*time.Hour).Format(time.RFC3339))})
	check(call{method: "POST", route: "/api/v1/nodes/{name}/drain", path: "/api/v1/nodes/c1/drain", body: `{"until":"2000-01-01T00:00:00Z"}`})
	for _, c := range []call{
		{method: "GET", route: "/api/v1/jobs", path: "/api/v1/jobs"},
		{method: "GET", route: "/api/v1/jobs", path: "/api/v1/jobs?state=all&limit=1"},
		{method: "GET", route: "/api/v1/nodes", path: "/api/v1/nodes"},
		{method: "GET", route: "/api/v1/top", path: "/api/v1/top"},
		{method: "GET", route: "/api/v1/top", path: "/api/v1/top?nodes=all&jobs=1"},
		{method: "GET", route: "/api/v1/nodes/{name}/telemetry", path: "/api/v1/nodes/n1/telemetry"},
		{method: "GET", route: "/api/v1/queues", path: "/api/v1/queues"},
		{method: "GET", route: "/api/v1/teams", path: "/api/v1/teams"},
		{method: "GET", route: "/api/v1/reservations", path: "/api/v1/reservations"},
		{method: "GET", route: "/api/v1/history", path: "/api/v1/history"},
		{method: "GET", route: "/api/v1/usage", path: "/api/v1/usage"},
		{method: "GET", route: "/api/v1/usage", path: "/api/v1/usage?by=node"},
		{method: "GET", route: "/api/v1/audit", path: "/api/v1/audit"},
		{method: "GET", route: "/api/v1/whoami", path: "/api/v1/whoami"},
		{method: "GET", route: "/api/v1/users", path: "/api/v1/users"},
		{method: "GET", route: "/api/v1/tokens", path: "/api/v1/tokens"},
		{method: "GET", route: "/api/v1/prices", path: "/api/v1/prices"},
		{method: "POST", route: "/api/v1/jobs/{id}/cancel", path: fmt.Sprintf("/api/v1/jobs/%d/cancel", gpuJob.ID)},
		{method: "GET", route: "/api/v1/agents/{node}/watch", path: "/api/v1/agents/n1/watch?version=999"},
		{method: "POST", route: "/api/v1/agents/{node}/heartbeat", path: "/api/v1/agents/n1/heartbeat",
			body: fmt.Sprintf(`{"node":"n1","inventory":{"cpus":8,"memory_mb":1024,"gpus":[],"device_source":"fake"},"tasks":[],"agent_time":"2026-11-01T09:00:00Z","instance":"agent-n1","cluster_id":%q,"synced":true}`, h.srv.ClusterID())},
		// Errors.
		{method: "GET", route: "/api/v1/jobs/{id}", path: "/api/v1/jobs/999"},
		{method: "GET", route: "/api/v1/jobs/{id}", path: "/api/v1/jobs/x"},
		{method: "GET", route: "/api/v1/jobs/{id}/logs", path: "/api/v1/jobs/1/logs?attempt=0"},
		{method: "GET", route: "/api/v1/jobs", path: "/api/v1/jobs", token: "-"},
		{method: "GET", route: "/api/v1/jobs", path: "/api/v1/jobs?limit=0"},
		{method: "GET", route: "/api/v1/top", path: "/api/v1/top?nodes=some"},
		{method: "GET", route: "/api/v1/top", path: "/api/v1/top?jobs=101"},
		{method: "POST", route: "/api/v1/jobs", path: "/api/v1/jobs", body: `{"command":["true"]}}`},
		{method: "POST", route: "/api/v1/jobs", path: "/api/v1/jobs", body: `{"command":["true"],"array":"0-9%"}`},
		{method: "POST", route: "/api/v1/jobs/{id}/cancel", path: fmt.Sprintf("/api/v1/jobs/%d/cancel", cpuJob.ID)},
		{method: "PUT", route: "/api/v1/config", path: "/api/v1/config", body: "queues:\n- name: a\n---\n"},
		{method: "DELETE", route: "/api/v1/jobs", path: "/api/v1/jobs"},
		{method: "GET", route: "/api/v1/agents/{node}/watch", path: "/api/v1/agents/n1/watch?wait=61"},
	} {
		check(c)
	}
	// Requests: the admin asks, an operator decides.
	olga := h.addUser("olga", "operator")
	start := h.clock.Now().Add(time.Hour).Format(time.RFC3339)
	end := h.clock.Now().Add(2 * time.Hour).Format(time.RFC3339)
	for _, c := range []call{
		{method: "POST", route: "/api/v1/requests", path: "/api/v1/requests",
			body: fmt.Sprintf(`{"kind":"reservation","gpus":1,"gpu_model":"H100","start":%q,"end":%q,"reason":"eval"}`, start, end)},
		{method: "POST", route: "/api/v1/requests", path: "/api/v1/requests", body: `{"kind":"quota","team":"default","reason":"x"}`},
		{method: "POST", route: "/api/v1/requests/{id}/approve", path: "/api/v1/requests/1/approve", token: olga, body: `{"note":"ok"}`},
		{method: "POST", route: "/api/v1/requests/{id}/deny", path: "/api/v1/requests/1/deny", token: olga, body: `{"note":"late"}`},
		{method: "GET", route: "/api/v1/requests", path: "/api/v1/requests?state=approved"},
		{method: "GET", route: "/api/v1/requests/{id}", path: "/api/v1/requests/1"},
		{method: "GET", route: "/api/v1/requests/{id}", path: "/api/v1/requests/7"},
		{method: "GET", route: "/api/v1/audit", path: "/api/v1/audit?kind=request"},
	} {
		check(c)
	}
	for _, want := range []string{"200", "201", "400", "401", "404", "405", "409"} {
		if !statuses[want] {
			t.Errorf("the scenario produced no %s answer; it no longer covers that status", want)
		}
	}
}

// contractCall sends one request and returns the status and body. Agent routes go
// through the in-process agent; the others carry token, or the admin's when it is "".
func contractCall(t *testing.T, h *harness, method, path, body, token string) (int, http.Header, []byte) {
	t.Helper()
	client, base := http.DefaultClient, h.http.URL
	if strings.HasPrefix(path, "/api/v1/agents/") {
		client, base, token = h.agent, "http://rota-up", "-"
	}
	req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", contentTypeFor(path))
	}
	switch token {
	case "":
		req.Header.Set("Authorization", "Bearer "+h.token)
	case "-":
	default:
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data
}

// contentTypeFor is the type of the body the contract test sends to path.
func contentTypeFor(path string) string {
	if strings.HasSuffix(path, "/config") {
		return "application/yaml"
	}
	return "application/json"
}

// responseSchema finds the schema of the JSON body the spec documents for route, method
// and status.
func responseSchema(doc specDoc, route, method string, status int) (*specSchema, error) {
	var resp specResp
	if status == http.StatusMethodNotAllowed {
		resp = specResp{Ref: "#/components/responses/MethodNotAllowed"}
	} else {
		item, ok := doc.Paths[route]
		if !ok {
			return nil, fmt.Errorf("the spec has no path %s", route)
		}
		op := map[string]*specOp{"GET": item.Get, "POST": item.Post, "PUT": item.Put, "DELETE": item.Delete}[method]
		if op == nil {
			return nil, fmt.Errorf("the spec has no %s %s", method, route)
		}
		if resp, ok = op.Responses[fmt.Sprint(status)]; !ok {
			if resp, ok = op.Responses["default"]; !ok {
				return nil, fmt.Errorf("status %d is not documented", status)
			}
		}
	}
	if resp.Ref != "" {
		r, ok := doc.Components.Responses[strings.TrimPrefix(resp.Ref, "#/components/responses/")]
		if !ok {
			return nil, fmt.Errorf("dangling $ref %s", resp.Ref)
		}
		resp = r
	}
	media, ok := resp.Content["application/json"]
	if !ok || media.Schema == nil {
		return nil, fmt.Errorf("status %d documents no JSON body", status)
	}
	return media.Schema, nil
}

// conforms lists how v departs from s; at names v in the messages, like $.jobs[0].spec.
// part is set for one schema of an allOf, whose object may hold the other parts'
// properties: the whole allOf is checked for properties no part lists.
func conforms(doc specDoc, s *specSchema, v any, at string, part bool) []string {
	if s.Ref != "" {
		ref, ok := doc.Components.Schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")]
		if !ok {
			return []string{at + ": dangling $ref " + s.Ref}
		}
		return conforms(doc, ref, v, at, part)
	}
	if v == nil {
		if s.Nullable || (s.Type == "" && len(s.AllOf) == 0 && s.Ref == "") {
			return nil
		}
		return []string{at + ": null, which the schema does not allow (no nullable)"}
	}
	var out []string
	for _, p := range s.AllOf {
		out = append(out, conforms(doc, p, v, at, true)...)
	}
	if obj, ok := v.(map[string]any); ok && !part && s.AdditionalProperties == nil && (len(s.Properties) > 0 || len(s.AllOf) > 0) {
		known := properties(doc, s)
		for name := range obj {
			if !known[name] {
				out = append(out, fmt.Sprintf("%s: property %q is not in the schema", at, name))
			}
		}
	}
	if alts := append(s.OneOf, s.AnyOf...); len(alts) > 0 {
		if !slices.ContainsFunc(alts, func(a *specSchema) bool { return len(conforms(doc, a, v, at, part)) == 0 }) {
			out = append(out, at+": matches none of its oneOf/anyOf schemas")
		}
	}
	switch s.Type {
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return append(out, fmt.Sprintf("%s: %T, not an object", at, v))
		}
		for _, name := range s.Required {
			if _, ok := obj[name]; !ok {
				out = append(out, fmt.Sprintf("%s: required property %q is missing", at, name))
			}
		}
		for name, pv := range obj {
			ps, ok := s.Properties[name]
			if ok {
				out = append(out, conforms(doc, ps, pv, at+"."+name, false)...)
			}
		}
	case "array":
		list, ok := v.([]any)
		if !ok {
			return append(out, fmt.Sprintf("%s: %T, not an array", at, v))
		}
		if s.Items != nil {
			for i, item := range list {
				out = append(out, conforms(doc, s.Items, item, fmt.Sprintf("%s[%d]", at, i), false)...)
			}
		}
	case "string":
		str, ok := v.(string)
		if !ok {
			return append(out, fmt.Sprintf("%s: %T, not a string", at, v))
		}
		if len(s.Enum) > 0 && !slices.Contains(s.Enum, str) {
			out = append(out, fmt.Sprintf("%s: %q is not one of %v", at, str, s.Enum))
		}
	case "integer", "number":
		n, ok := v.(float64)
		if !ok {
			return append(out, fmt.Sprintf("%s: %T, not a number", at, v))
		}
		if s.Type == "integer" && n != float64(int64(n)) {
			out = append(out, fmt.Sprintf("%s: %v is not an integer", at, n))
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			out = append(out, fmt.Sprintf("%s: %T, not a boolean", at, v))
		}
	}
	return out
}

// properties is the set of property names s and its allOf parts list.
func properties(doc specDoc, s *specSchema) map[string]bool {
	if s.Ref != "" {
		if ref, ok := doc.Components.Schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")]; ok {
			return properties(doc, ref)
		}
	}
	out := map[string]bool{}
	for name := range s.Properties {
		out[name] = true
	}
	for _, p := range s.AllOf {
		for name := range properties(doc, p) {
			out[name] = true
		}
	}
	return out
}
