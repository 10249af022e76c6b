package server

import (
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
