package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestNewLogger(t *testing.T) {
	for _, c := range []struct {
		level       string
		says, quiet []string
	}{
		{level: "debug", says: []string{"level=DEBUG", "level=INFO", "level=WARN", "level=ERROR"}},
		{level: "info", says: []string{"level=INFO", "level=WARN", "level=ERROR"}, quiet: []string{"level=DEBUG"}},
		{level: " WARN ", says: []string{"level=WARN", "level=ERROR"}, quiet: []string{"level=DEBUG", "level=INFO"}},
		{level: "error", says: []string{"level=ERROR"}, quiet: []string{"level=DEBUG", "level=INFO", "level=WARN"}},
	} {
		var out bytes.Buffer
		log, err := newLogger(&out, c.level)
		if err != nil {
			t.Fatalf("--log-level %q: %v", c.level, err)
		}
		log.Debug("d")
		log.Info("i")
		log.Warn("w")
		log.Error("e")
		for _, s := range c.says {
			if !strings.Contains(out.String(), s) {
				t.Errorf("--log-level %q: %s is not written:\n%s", c.level, s, out.String())
			}
		}
		for _, s := range c.quiet {
			if strings.Contains(out.String(), s) {
				t.Errorf("--log-level %q: %s is written:\n%s", c.level, s, out.String())
			}
		}
	}
	for _, bad := range []string{"", "loud", "trace", "0"} {
		if _, err := newLogger(&bytes.Buffer{}, bad); err == nil || !strings.Contains(err.Error(), "--log-level") || !strings.Contains(err.Error(), "debug, info, warn or error") {
			t.Errorf("--log-level %q: error %v, want one naming the flag and its levels", bad, err)
		}
	}
}

// TestBadLogLevelStopsEveryDaemon checks that the server, the agent and rota up refuse a
// level they do not know, naming the flag, before they write anything.
func TestBadLogLevelStopsEveryDaemon(t *testing.T) {
	skipShort(t)
	root := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
		env  []string
		says string
	}{
		{name: "server", args: []string{"server", "--listen", freePort(t), "--log-level", "loud"}, says: `rota server: --log-level: "loud" is not a level`},
		{name: "agent", args: []string{"agent", "--server", "https://127.0.0.1:1", "--log-level", "loud"}, says: `rota agent: --log-level: "loud" is not a level`},
		{name: "up", args: []string{"up", "--listen", freePort(t), "--fake-gpus", "1", "--log-level", "loud"}, says: `rota up: --log-level: "loud" is not a level`},
		{name: "server-env", args: []string{"server", "--listen", freePort(t)}, env: []string{"ROTA_LOG_LEVEL=verbose"}, says: `rota server: --log-level: "verbose" is not a level`},
	} {
		dir := filepath.Join(root, c.name)
		args := append(c.args, "--data-dir", dir)
		p := startProc(t, root, c.name, c.env, args...)
		code, exited := p.waitExit(20 * time.Second)
		if !exited || code != 2 {
			t.Fatalf("%s: exited %v with %d, want 2", c.name, exited, code)
		}
		if out := p.output(); !strings.Contains(out, c.says) {
			t.Errorf("%s: the output does not say %q:\n%s", c.name, c.says, tail(out, 2000))
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: refused its log level but made its data dir: %v", c.name, err)
		}
	}
}

// TestSubmitsAreLoggedAtDebug checks that a submit writes no line to the server's log at
// the default level, and one at debug.
func TestSubmitsAreLoggedAtDebug(t *testing.T) {
	skipShort(t)
	for _, level := range []string{"info", "debug"} {
		u := startUp(t, 1, "--log-level", level)
		r := u.rota("submit", "--gpus", "1", "--", "true")
		if r.code != 0 {
			t.Fatalf("submit: %s", r)
		}
		const line = `msg="job submitted" job=1 `
		if level == "debug" {
			waitFor(t, 10*time.Second, "the submit's line in the log at debug", func() bool { return strings.Contains(u.up.output(), line) })
			continue
		}
		// By the job's end the submit's line, written before its answer, would be there.
		waitFor(t, 30*time.Second, "job 1 to succeed", func() bool {
			s := u.rota("show", "1", "-o", "json")
			return s.code == 0 && strings.Contains(s.stdout, `"SUCCEEDED"`)
		})
		if out := u.up.output(); strings.Contains(out, line) {
			t.Errorf("--log-level info logs each submit:\n%s", tail(out, 3000))
		}
	}
}
