package main

import (
	"errors"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

func TestMemoryLimit(t *testing.T) {
	cgroupOf := func(max uint64, err error) func() (uint64, error) {
		return func() (uint64, error) { return max, err }
	}
	const gib = 1 << 30
	for _, c := range []struct {
		name, flag, env string
		cgroup          func() (uint64, error)
		want            int64
		from, err       string
	}{
		{name: "auto takes 90% of the cgroup's limit", flag: "auto", cgroup: cgroupOf(2*gib, nil), want: 2 * gib * 9 / 10, from: "90% of the cgroup's memory limit of 2048 MiB"},
		{name: "the default is auto", flag: "", cgroup: cgroupOf(gib, nil), want: gib * 9 / 10, from: "auto"},
		{name: "auto in a cgroup without a limit", flag: "auto", cgroup: cgroupOf(0, memlimit.ErrNoLimit), from: "no memory limit"},
		{name: "auto where no cgroup can be read", flag: "AUTO", cgroup: cgroupOf(0, errors.New("cgroups are not mounted")), from: "cgroups are not mounted"},
		{name: "a size in megabytes", flag: "900M", want: 900 << 20, from: "--memory-limit 900M"},
		{name: "a size in gigabytes", flag: "1.5G", want: 1536 << 20},
		{name: "a size with GiB", flag: "2GiB", want: 2 * gib},
		{name: "a bare number is megabytes", flag: "512", want: 512 << 20},
		{name: "off", flag: "off", cgroup: cgroupOf(gib, nil), from: "off"},
		{name: "GOMEMLIMIT wins over a size", flag: "900M", env: "700MiB", from: "GOMEMLIMIT=700MiB"},
		{name: "GOMEMLIMIT wins over auto", flag: "auto", env: "off", cgroup: cgroupOf(gib, nil), from: "GOMEMLIMIT=off"},
		{name: "not a size", flag: "lots", err: `--memory-limit: "lots" is not auto, off or a size such as 900M or 1.5G`},
		{name: "a unit rota does not take", flag: "900K", err: "is not auto, off or a size"},
		{name: "zero", flag: "0", err: "--memory-limit: 0 MiB is below the smallest limit, 64 MiB; off sets none"},
		{name: "below the smallest", flag: "63M", err: "below the smallest limit"},
		{name: "negative", flag: "-1G", err: "is not auto, off or a size"},
		{name: "beyond any machine", flag: "99999999T", err: "larger than any machine's memory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cgroup := c.cgroup
			if cgroup == nil {
				cgroup = func() (uint64, error) { t.Fatal("the cgroup was read for a flag that is not auto"); return 0, nil }
			}
			got, from, err := memoryLimit(c.flag, c.env, cgroup)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("memoryLimit(%q) = %d, %v; want the error %q", c.flag, got, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("memoryLimit(%q): %v", c.flag, err)
			}
			if got != c.want {
				t.Errorf("memoryLimit(%q) = %d bytes, want %d", c.flag, got, c.want)
			}
			if !strings.Contains(from, c.from) {
				t.Errorf("memoryLimit(%q) says it comes from %q, want it to say %q", c.flag, from, c.from)
			}
		})
	}
}

// TestServerMemoryLimit starts the real server with --memory-limit and reads the limit
// back from the Go runtime's own figure on /metrics; a bad value stops the server before
// it writes anything.
func TestServerMemoryLimit(t *testing.T) {
	skipShort(t)
	root := t.TempDir()
	bad := filepath.Join(root, "bad")
	p := startProc(t, root, "bad", nil, "server", "--data-dir", bad, "--listen", freePort(t), "--memory-limit", "12K")
	code, exited := p.waitExit(20 * time.Second)
	if !exited || code == 0 {
		t.Fatalf("the server with --memory-limit 12K exited %v with %d, want a failure", exited, code)
	}
	if out := p.output(); !strings.Contains(out, `--memory-limit: \"12K\" is not auto, off or a size`) {
		t.Errorf("the server's output does not name the bad flag:\n%s", tail(out, 2000))
	}
	if _, err := os.Stat(filepath.Join(bad, "rota.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the server refused its flags but made a database: %v", err)
	}

	for i, c := range []struct {
		flag string
		env  []string
		want int64
	}{
		{flag: "300M", want: 300 << 20},
		{flag: "300M", env: []string{"GOMEMLIMIT=200MiB"}, want: 200 << 20},
		{flag: "off", want: math.MaxInt64},
	} {
		addr := freePort(t)
		startProc(t, root, "server", c.env, "server", "--data-dir", filepath.Join(root, strconv.Itoa(i)), "--listen", addr,
			"--metrics-public", "--memory-limit", c.flag)
		if got := serverMemoryLimit(t, addr); got != c.want {
			t.Errorf("--memory-limit %s with %v: go_gc_gomemlimit_bytes is %d, want %d", c.flag, c.env, got, c.want)
		}
	}
}

// TestServerMemoryLimitFromCgroup runs the server in a cgroup of its own with a memory
// limit, as systemd's MemoryMax or a container would, and checks that the default
// --memory-limit (auto) keeps it to 90% of that.
func TestServerMemoryLimitFromCgroup(t *testing.T) {
	skipShort(t)
	var limit int64 = 1 << 30
	dir, err := memoryCgroup(t, limit)
	if err != nil {
		t.Skipf("no memory cgroup can be made here, so auto has nothing to read (TestMemoryLimit covers its arithmetic): %v", err)
	}
	root := t.TempDir()
	addr := freePort(t)
	// The shell moves itself into the cgroup, then becomes the server.
	p := startBinary(t, "/bin/sh", root, "server", nil, "-c", `echo $$ > "$1/cgroup.procs" && shift && exec "$@"`, "sh", dir,
		rotaBinary(t), "server", "--data-dir", filepath.Join(root, "data"), "--listen", addr, "--metrics-public")
	if got, want := serverMemoryLimit(t, addr), int64(float64(limit)*cgroupShare); got != want {
		t.Errorf("in a cgroup limited to 1 GiB, go_gc_gomemlimit_bytes is %d, want %d (90%%)", got, want)
	}
	if out := p.output(); !strings.Contains(out, "90% of the cgroup's memory limit of 1024 MiB") {
		t.Errorf("the server does not say where its limit came from:\n%s", tail(out, 2000))
	}
}

// memoryCgroup makes a memory cgroup under the test's own, limited to limit bytes, and
// removes it when the test ends (its processes killed by then: cleanups run last first).
func memoryCgroup(t *testing.T, limit int64) (string, error) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	var parent, file string
	for line := range strings.Lines(string(self)) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		switch {
		case len(f) < 3:
		case f[0] == "0" && f[1] == "":
			if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil && parent == "" {
				parent, file = filepath.Join("/sys/fs/cgroup", f[2]), "memory.max"
			}
		case slices.Contains(strings.Split(f[1], ","), "memory"):
			parent, file = filepath.Join("/sys/fs/cgroup/memory", f[2]), "memory.limit_in_bytes"
		}
	}
	if parent == "" {
		return "", errors.New("the test runs in no memory cgroup")
	}
	dir := filepath.Join(parent, "rota-memlimit-test-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	t.Cleanup(func() {
		// The server is killed by its own cleanup, registered later and so run first;
		// the kernel may take a moment to let the emptied cgroup go.
		for range 50 {
			if os.Remove(dir) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("the test's cgroup %s could not be removed", dir)
	})
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
		return "", err
	}
	return dir, nil
}

// serverMemoryLimit is the Go runtime's memory limit of the server on addr, as its
// /metrics shows it.
func serverMemoryLimit(t *testing.T, addr string) int64 {
	t.Helper()
	var got string
	waitFor(t, 20*time.Second, "the server's /metrics", func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for line := range strings.Lines(string(body)) {
			if v, ok := strings.CutPrefix(line, "go_gc_gomemlimit_bytes "); ok {
				got = strings.TrimSpace(v)
				return true
			}
		}
		return false
	})
	v, err := strconv.ParseFloat(got, 64)
	if err != nil {
		t.Fatalf("go_gc_gomemlimit_bytes %q: %v", got, err)
	}
	if v >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}
