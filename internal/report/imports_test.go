package report

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The report package is pure accounting and rendering: of rota's packages it imports only
// the wire types, and nothing that reaches the network, a database, a process or the
// clock of the machine. The CLI prints and writes packs with it, so it must stay that
// small.
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []string{"net", "database/sql", "os/exec", "syscall", "math/rand"}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		src, _ := os.ReadFile(name)
		if strings.Contains(string(src), "time.Now(") {
			t.Errorf("%s reads the clock; now comes in with the Input", name)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(path, "github.com/rotahq/rota/") && path != "github.com/rotahq/rota/internal/api" {
				t.Errorf("%s imports %s; report may import only internal/api of rota's packages", name, path)
			}
			for _, bad := range forbidden {
				if path == bad || strings.HasPrefix(path, bad+"/") {
					t.Errorf("%s imports %s", name, path)
				}
			}
		}
	}
}
