package cli

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportsOnlyAPI keeps the CLI a client: of rota's packages it may use only the wire
// types and auth's client-side primitives (the pinned TLS configuration, roles), never
// the server's, the store's or the cluster's insides.
func TestImportsOnlyAPI(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			// internal/report is pure accounting and rendering over API types (its own test
			// keeps it so): the CLI renders usage reports and review packs with it.
			if strings.HasPrefix(path, "github.com/rotahq/rota/") && path != "github.com/rotahq/rota/internal/api" &&
				path != "github.com/rotahq/rota/internal/auth" && path != "github.com/rotahq/rota/internal/report" {
				t.Errorf("%s imports %s; the CLI may import only internal/api, internal/auth and internal/report of rota's packages", name, path)
			}
		}
	}
}
