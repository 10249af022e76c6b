package server

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// Every route the server serves is documented in api/openapi.yaml.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	data, err := os.ReadFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	for _, rt := range routes {
		if _, ok := doc.Paths[rt.path][strings.ToLower(rt.method)]; !ok {
			t.Errorf("api/openapi.yaml does not document %s %s", rt.method, rt.path)
		}
	}
}

// Each operation documents the statuses its route can answer before its handler decides
// anything: 415 (the Content-Type check runs on every route), 401 on every route but the
// public ones, 403 where a role or the agent's node is checked, 400 and 413 where a body
// is read (with the limit stated), 400 and 404 where the path holds an ID, and 429 on
// submit and on every route a user's read budget or write limit bounds. What the handlers answer beyond that is checked on the wire: the contract and
// spec-fuzz tests fail on any status kin-openapi finds undocumented for its operation.
func TestSpecDocumentsTheStatuses(t *testing.T) {
	doc := kinSpec(t)
	for _, rt := range routes {
		op := doc.Paths.Value(rt.path).GetOperation(rt.method)
		if op == nil {
			t.Errorf("no %s %s in api/openapi.yaml", rt.method, rt.path)
			continue
		}
		want := []int{http.StatusUnsupportedMediaType}
		if rt.rule != rulePublic {
			want = append(want, http.StatusUnauthorized)
		}
		if rt.rule != rulePublic && rt.rule != ruleAnyone {
			want = append(want, http.StatusForbidden)
		}
		if rt.body != noBody {
			want = append(want, http.StatusBadRequest, http.StatusRequestEntityTooLarge)
		}
		for _, p := range append(doc.Paths.Value(rt.path).Parameters, op.Parameters...) {
			if p.Value.In == "path" && p.Value.Schema.Value.Type.Is("integer") {
				// A number in the path: 400 when it is not one, 404 when nothing has it.
				want = append(want, http.StatusBadRequest, http.StatusNotFound)
			}
		}
		if rt.method == "POST" && rt.path == "/api/v1/jobs" {
			want = append(want, http.StatusTooManyRequests)
		}
		if rt.rule != ruleAgent && rt.rule != ruleAdmin && rt.rule != rulePublic {
			want = append(want, http.StatusTooManyRequests) // a user's read budget or write limit
		}
		for _, code := range want {
			if op.Responses.Status(code) == nil {
				t.Errorf("%s %s does not document %d", rt.method, rt.path, code)
			}
		}
		if rt.body != noBody {
			limit := "1 MiB"
			if rt.body == bytesBody {
				limit = "2 MiB"
			}
			resp := op.Responses.Status(http.StatusRequestEntityTooLarge)
			if resp != nil && resp.Value != nil && resp.Value.Description != nil && !strings.Contains(*resp.Value.Description, limit) {
				t.Errorf("%s %s: its 413 does not state the %s limit", rt.method, rt.path, limit)
			}
		}
	}
}
