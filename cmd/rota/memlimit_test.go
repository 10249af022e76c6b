package main

import (
	"errors"
	"io"
	"log/slog"
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
		follow          bool
	}{
		{name: "auto takes 90% of the cgroup's limit", flag: "auto", cgroup: cgroupOf(2*gib, nil), want: 2 * gib * 9 / 10, from: "90% of the cgroup's memory limit of 2048 MiB", follow: true},
		{name: "the default is auto", flag: "", cgroup: cgroupOf(gib, nil), want: gib * 9 / 10, from: "auto", follow: true},
		// A limit may be given to the cgroup later, so auto follows it even without one.
		{name: "auto in a cgroup without a limit", flag: "auto", cgroup: cgroupOf(0, memlimit.ErrNoLimit), from: "no memory limit", follow: true},
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
			got, from, follow, err := memoryLimit(c.flag, c.env, cgroup)
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
			if follow != c.follow {
				t.Errorf("memoryLimit(%q) says follow the cgroup %v, want %v", c.flag, follow, c.follow)
			}
		})
	}
}

// TestRefreshLimit walks the runtime's limit through the changes of a cgroup's: raised,
// lowered, taken away, given again, and a read that fails in between.
func TestRefreshLimit(t *testing.T) {
	const gib = 1 << 30
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	runtimeLimit := int64(gib * 9 / 10) // what the server set at start, from 1 GiB
	var sets []int64
	set := func(v int64) int64 {
		if v < 0 {
			t.Fatal("refreshLimit asked the runtime for its limit; it is given it")
		}
		sets = append(sets, v)
		old := runtimeLimit
		runtimeLimit = v
		return old
	}
	for i, step := range []struct {
		max     uint64
		err     error
		want    int64
		set, in string // the limit set (none if ""), and what the log says
	}{
		{max: gib, want: gib * 9 / 10},
		{max: 2 * gib, want: 2 * gib * 9 / 10, set: "yes", in: "limit=\"1843 MiB\" was=\"921 MiB\""},
		{max: 2 * gib, want: 2 * gib * 9 / 10},
		{err: errors.New("the cgroup is gone"), want: 2 * gib * 9 / 10, in: "the cgroup is gone"},
		{max: 512 << 20, want: 512 << 20 * 9 / 10, set: "yes", in: "limit=\"460 MiB\" was=\"1843 MiB\""},
		{err: memlimit.ErrNoLimit, want: math.MaxInt64, set: "yes", in: "limit=none was=\"460 MiB\""},
		{err: memlimit.ErrNoLimit, want: math.MaxInt64},
		{max: gib, want: gib * 9 / 10, set: "yes", in: "limit=\"921 MiB\" was=none"},
	} {
		logs.Reset()
		before := len(sets)
		got := refreshLimit(runtimeLimit, func() (uint64, error) { return step.max, step.err }, set, log)
		if got != step.want || runtimeLimit != step.want {
			t.Errorf("step %d: refreshLimit says %d and the runtime has %d, want %d", i, got, runtimeLimit, step.want)
		}
		if did := len(sets) > before; did != (step.set != "") {
			t.Errorf("step %d: the runtime's limit set %v, want %v", i, did, step.set != "")
		}
		if !strings.Contains(logs.String(), step.in) {
			t.Errorf("step %d: the log says %q, want it to say %q", i, logs.String(), step.in)
		}
		if step.set == "" && step.err == nil && logs.Len() > 0 {
			t.Errorf("step %d: nothing changed, yet the log says %q", i, logs.String())
		}
	}
}

// TestServerMemoryLimit starts the real server with --memory-limit and reads the limit
// back from the Go runtime's own figure on /metrics; a bad value stops the server before
// it writes anything.
func TestServerMemoryLimit(t *testing.T) {
	skipShort(t)
	root := t.TempDir()
	for i, c := range []struct{ flag, value, says string }{
		{flag: "--memory-limit", value: "12K", says: `--memory-limit: \"12K\" is not auto, off or a size`},
		{flag: "--memory-limit-refresh", value: "-1s", says: "--memory-limit-refresh: must be 0 (read the cgroup only at start) or more"},
	} {
		bad := filepath.Join(root, "bad"+strconv.Itoa(i))
		p := startProc(t, root, "bad", nil, "server", "--data-dir", bad, "--listen", freePort(t), c.flag, c.value)
		code, exited := p.waitExit(20 * time.Second)
		if !exited || code == 0 {
			t.Fatalf("the server with %s %s exited %v with %d, want a failure", c.flag, c.value, exited, code)
		}
		if out := p.output(); !strings.Contains(out, c.says) {
			t.Errorf("the server's output does not name the bad flag %s:\n%s", c.flag, tail(out, 2000))
		}
		if _, err := os.Stat(filepath.Join(bad, "rota.db")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the server refused %s %s but made a database: %v", c.flag, c.value, err)
		}
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
// --memory-limit (auto) keeps it to 90% of that, and follows the limit when it is changed
// while the server runs (systemctl set-property), and when it is taken away.
func TestServerMemoryLimitFromCgroup(t *testing.T) {
	skipShort(t)
	const gib = 1 << 30
	autoOf := func(cgroupMax int64) int64 { return int64(float64(cgroupMax) * cgroupShare) }
	dir, limitFile, err := memoryCgroup(t, gib)
	if err != nil {
		t.Skipf("no memory cgroup can be made here, so auto has nothing to read (TestMemoryLimit covers its arithmetic): %v", err)
	}
	root := t.TempDir()
	addr := freePort(t)
	// The shell moves itself into the cgroup, then becomes the server.
	p := startBinary(t, "/bin/sh", root, "server", nil, "-c", `echo $$ > "$1/cgroup.procs" && shift && exec "$@"`, "sh", dir,
		rotaBinary(t), "server", "--data-dir", filepath.Join(root, "data"), "--listen", addr, "--metrics-public", "--memory-limit-refresh", "200ms")
	if got, want := serverMemoryLimit(t, addr), autoOf(gib); got != want {
		t.Errorf("in a cgroup limited to 1 GiB, go_gc_gomemlimit_bytes is %d, want %d (90%%)", got, want)
	}
	if out := p.output(); !strings.Contains(out, "90% of the cgroup's memory limit of 1024 MiB") {
		t.Errorf("the server does not say where its limit came from:\n%s", tail(out, 2000))
	}

	for _, c := range []struct {
		limit string
		want  int64
		log   string
	}{
		{limit: strconv.Itoa(2 * gib), want: autoOf(2 * gib), log: `limit="1843 MiB" was="921 MiB"`},
		{limit: "max", want: math.MaxInt64, log: `limit=none was="1843 MiB"`},
	} {
		if limitFile == "memory.limit_in_bytes" && c.limit == "max" {
			c.limit = "-1" // cgroup v1's word for none
		}
		if err := os.WriteFile(filepath.Join(dir, limitFile), []byte(c.limit), 0o644); err != nil {
			t.Fatalf("setting the cgroup's limit to %s: %v", c.limit, err)
		}
		var got int64
		waitFor(t, 20*time.Second, "the server's limit to follow its cgroup's", func() bool {
			got = serverMemoryLimit(t, addr)
			return got == c.want
		})
		if out := p.output(); !strings.Contains(out, c.log) {
			t.Errorf("the cgroup's limit set to %s: the server's log does not say %s:\n%s", c.limit, c.log, tail(out, 2000))
		}
	}
}

// memoryCgroup makes a memory cgroup under the test's own, limited to limit bytes, and
// removes it when the test ends (its processes killed by then: cleanups run last first).
// It returns the cgroup's directory and the name of its file that holds the limit.
func memoryCgroup(t *testing.T, limit int64) (dir, limitFile string, err error) {
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", "", err
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
		return "", "", errors.New("the test runs in no memory cgroup")
	}
	dir = filepath.Join(parent, "rota-memlimit-test-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", "", err
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
		return "", "", err
	}
	return dir, file, nil
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
