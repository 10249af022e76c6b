package cli

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestVersion checks rota version with no server to ask: it must not try one.
func TestVersion(t *testing.T) {
	var out, errOut strings.Builder
	cfg := Config{
		Stdout: &out,
		Stderr: &errOut,
		Now:    time.Now,
		Getenv: func(string) string { return "" },
		Getwd:  func() (string, error) { return "/", nil },
		HTTP:   nil,
		Binary: Binary{StoreSchema: 7},
	}
	// A server that would never answer: rota version must not wait for it.
	cfg.Getenv = func(k string) string {
		if k == "ROTA_SERVER" {
			return "http://192.0.2.1:7070"
		}
		return ""
	}
	if code := cfg.Run(context.Background(), "version", nil); code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	for _, want := range []string{"rota:", "commit:", "go:  ", runtime.Version(), runtime.GOOS + "/" + runtime.GOARCH, "store schema:  7", "server:        not asked"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	if code := cfg.Run(context.Background(), "version", []string{"-o", "json"}); code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	var b buildInfo
	if err := json.Unmarshal([]byte(out.String()), &b); err != nil {
		t.Fatal(err)
	}
	if b.Version == "" || b.GoVersion != runtime.Version() || b.OS != runtime.GOOS || b.Arch != runtime.GOARCH || b.StoreSchema != 7 {
		t.Errorf("version -o json = %+v", b)
	}
}

func TestVersionFromLinker(t *testing.T) {
	defer func(v string) { Version = v }(Version)
	Version = "v1.2.3"
	if got := readBuildInfo(Binary{}).Version; got != "v1.2.3" {
		t.Errorf("Version set with -ldflags reads %q", got)
	}
	Version = ""
	// A test binary's main module has no version: "devel".
	if got := readBuildInfo(Binary{}).Version; got != "devel" {
		t.Errorf("version without -ldflags = %q, want devel", got)
	}
}
