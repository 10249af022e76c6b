package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBuiltWithProfile holds the binary that `go build ./cmd/rota` makes, as README.md
// and docs/scale.md tell users to build it, to the profile committed beside main: a
// default.pgo that is renamed, moved or unreadable would otherwise leave the server
// quietly slower (docs/scale.md, "Profile-guided optimisation").
func TestBuiltWithProfile(t *testing.T) {
	skipShort(t)
	bin := rotaBinary(t)
	out, err := exec.Command("go", "version", "-m", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, out)
	}
	want, err := filepath.Abs("default.pgo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "-pgo=") {
			if got := strings.TrimPrefix(f[1], "-pgo="); got != want {
				t.Fatalf("built with profile %s, want %s", got, want)
			}
			return
		}
	}
	t.Fatalf("the binary records no -pgo build setting: built without a profile\n%s", out)
}
