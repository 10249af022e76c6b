package cli

import (
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/rotahq/rota/internal/api"
)

// openAPI is the part of api/openapi.yaml the test reads.
type openAPI struct {
	Paths      map[string]map[string]any `yaml:"paths"`
	Components struct {
		Schemas map[string]schema `yaml:"schemas"`
	} `yaml:"components"`
}

type schema struct {
	Ref        string            `yaml:"$ref"`
	AllOf      []schema          `yaml:"allOf"`
	Properties map[string]schema `yaml:"properties"`
}

func readOpenAPI(t *testing.T) openAPI {
	t.Helper()
	data, err := os.ReadFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc openAPI
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("api/openapi.yaml: %v", err)
	}
	return doc
}

func TestOpenAPIHasEveryRoute(t *testing.T) {
	doc := readOpenAPI(t)
	for _, r := range []struct{ method, path string }{
		{"get", "/healthz"},
		{"post", "/api/v1/jobs"},
		{"get", "/api/v1/jobs"},
		{"get", "/api/v1/jobs/{id}"},
		{"post", "/api/v1/jobs/{id}/cancel"},
		{"get", "/api/v1/jobs/{id}/logs"},
		{"get", "/api/v1/nodes"},
		{"get", "/api/v1/queues"},
		{"post", "/api/v1/jobs/{id}/hold"},
		{"post", "/api/v1/jobs/{id}/release"},
		{"get", "/api/v1/jobs/{id}/why"},
		{"get", "/api/v1/teams"},
		{"put", "/api/v1/teams/{name}"},
		{"delete", "/api/v1/teams/{name}"},
		{"put", "/api/v1/queues/{name}"},
		{"delete", "/api/v1/queues/{name}"},
		{"post", "/api/v1/nodes/{name}/drain"},
		{"post", "/api/v1/nodes/{name}/resume"},
		{"get", "/api/v1/reservations"},
		{"post", "/api/v1/reservations"},
		{"delete", "/api/v1/reservations/{id}"},
		{"put", "/api/v1/config"},
		{"get", "/api/v1/history"},
		{"get", "/api/v1/whoami"},
		{"get", "/api/v1/users"},
		{"put", "/api/v1/users/{name}"},
		{"delete", "/api/v1/users/{name}"},
		{"get", "/api/v1/tokens"},
		{"post", "/api/v1/tokens"},
		{"delete", "/api/v1/tokens/{id}"},
		{"get", "/api/v1/join-tokens"},
		{"post", "/api/v1/join-tokens"},
		{"delete", "/api/v1/join-tokens/{id}"},
		{"get", "/api/v1/audit"},
		{"delete", "/api/v1/nodes/{name}"},
		{"post", "/api/v1/arrays/{id}/cancel"},
		{"post", "/api/v1/arrays/{id}/hold"},
		{"post", "/api/v1/arrays/{id}/release"},
		{"get", "/api/v1/agents/{node}/watch"},
		{"post", "/api/v1/agents/{node}/heartbeat"},
		{"post", "/api/v1/agents/{node}/logs/{job}/{attempt}"},
	} {
		if _, ok := doc.Paths[r.path][r.method]; !ok {
			t.Errorf("api/openapi.yaml lacks %s %s", strings.ToUpper(r.method), r.path)
		}
	}
}

// TestOpenAPISchemasMatchWireTypes keeps the schemas' properties equal to the JSON names
// of internal/api's types, so neither can drift from the other unnoticed.
func TestOpenAPISchemasMatchWireTypes(t *testing.T) {
	doc := readOpenAPI(t)
	for name, v := range map[string]any{
		"Job": api.Job{}, "JobSpec": api.JobSpec{}, "JobDetail": api.JobDetail{}, "JobList": api.JobList{},
		"Attempt": api.Attempt{}, "Placement": api.Placement{}, "Event": api.Event{},
		"Node": api.Node{}, "NodeList": api.NodeList{}, "GPU": api.GPU{}, "Inventory": api.Inventory{},
		"Queue": api.Queue{}, "QueueList": api.QueueList{}, "Error": api.Error{},
		"Team": api.Team{}, "Quota": api.Quota{}, "TeamList": api.TeamList{},
		"Reservation": api.Reservation{}, "ReservationList": api.ReservationList{},
		"Why": api.Why{}, "Priority": api.Priority{}, "Config": api.Config{},
		"HistoryList": api.HistoryList{}, "HistoryRecord": api.HistoryRecord{}, "WatchAnswer": api.WatchAnswer{},
		"Heartbeat": api.Heartbeat{}, "HeartbeatResponse": api.HeartbeatResponse{},
		"Task": api.Task{}, "TaskStatus": api.TaskStatus{}, "TaskRef": api.TaskRef{}, "LogAck": api.LogAck{},
		"Whoami": api.Whoami{}, "User": api.User{}, "UserList": api.UserList{}, "TokenInfo": api.TokenInfo{},
		"TokenList": api.TokenList{}, "TokenRequest": api.TokenRequest{}, "NewToken": api.NewToken{},
		"JoinTokenRequest": api.JoinTokenRequest{}, "JoinTokenInfo": api.JoinTokenInfo{}, "NewJoinToken": api.NewJoinToken{},
		"EventList": api.EventList{},
	} {
		s, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("api/openapi.yaml has no schema %s", name)
			continue
		}
		got := schemaProperties(t, doc, s)
		want := jsonNames(reflect.TypeOf(v))
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("schema %s has properties %v; api.%s has JSON fields %v", name, got, name, want)
		}
	}
}

// schemaProperties lists a schema's property names, following $ref and allOf.
func schemaProperties(t *testing.T, doc openAPI, s schema) []string {
	if s.Ref != "" {
		ref, ok := doc.Components.Schemas[strings.TrimPrefix(s.Ref, "#/components/schemas/")]
		if !ok {
			t.Errorf("dangling $ref %s", s.Ref)
			return nil
		}
		return schemaProperties(t, doc, ref)
	}
	var names []string
	for n := range s.Properties {
		names = append(names, n)
	}
	for _, part := range s.AllOf {
		names = append(names, schemaProperties(t, doc, part)...)
	}
	return names
}

// jsonNames lists the JSON field names encoding/json gives a struct type, with embedded
// untagged structs flattened.
func jsonNames(typ reflect.Type) []string {
	var names []string
	for f := range typ.Fields() {
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			names = append(names, jsonNames(f.Type)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	return names
}
