package sched

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPure keeps the core pure: the server and the simulator must get the same decisions
// from the same snapshot, which I/O, clocks, goroutines or global randomness would break.
func TestPure(t *testing.T) {
	forbidden := map[string]bool{
		"net": true, "net/http": true, "os": true, "os/exec": true, "database/sql": true,
		"math/rand": true, "math/rand/v2": true, "crypto/rand": true, "syscall": true,
		"unsafe": true, "io/ioutil": true, "log": true, "log/slog": true, "sync": true,
	}
	// Clock and timer functions of package time.
	forbiddenTime := map[string]bool{
		"Now": true, "Sleep": true, "After": true, "AfterFunc": true, "Tick": true,
		"NewTimer": true, "NewTicker": true, "Since": true, "Until": true,
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		timeName := ""
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if forbidden[path] || strings.HasPrefix(path, "net/") {
				t.Errorf("%s imports %q; internal/sched must stay pure", name, path)
			}
			if strings.HasPrefix(path, "github.com/rotahq/rota") {
				t.Errorf("%s imports %q; internal/sched must import none of rota's packages", name, path)
			}
			if path == "time" {
				timeName = "time"
				if imp.Name != nil {
					timeName = imp.Name.Name
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: goroutine at %s; the core runs on the caller's goroutine", name, fset.Position(n.Pos()))
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && timeName != "" && id.Name == timeName && forbiddenTime[n.Sel.Name] {
					t.Errorf("%s: time.%s at %s; the clock is passed in", name, n.Sel.Name, fset.Position(n.Pos()))
				}
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no source files checked")
	}
}
