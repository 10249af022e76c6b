package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The report package is pure accounting and rendering, and the CLI prints and writes packs
// with it: now comes in with the Input, never from the machine's clock. (What it may
// import is held by cmd/rota's TestImportDirections.)
func TestNoClock(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		if strings.Contains(string(src), "time.Now(") {
			t.Errorf("%s reads the clock; now comes in with the Input", name)
		}
	}
	if checked == 0 {
		t.Fatal("no source files checked")
	}
}
