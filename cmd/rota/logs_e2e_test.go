package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// A log someone follows reaches them within about a second, though the node ships the
// others only after each heartbeat, here every 8 s: the first read wakes the node's
// agent through its watch, and the logs someone reads ship every second.
func TestFollowedLogArrivesBetweenHeartbeats(t *testing.T) {
	u := startUp(t, 1, "--heartbeat-interval", "8s")
	id := u.submit("--", "sh", "-c", `for i in $(seq 1 60); do echo "$(date +%s.%N) line $i"; sleep 0.25; done`)
	u.waitJob(id, 30*time.Second, api.StateRunning)

	cmd := exec.Command(rotaBinary(t), "logs", "-f", strconv.FormatInt(id, 10))
	cmd.Env = append(os.Environ(), u.env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	start := time.Now()
	var lags []time.Duration
	sc := bufio.NewScanner(out)
	for sc.Scan() && time.Since(start) < 7*time.Second {
		came := time.Now()
		var printed time.Time
		for _, f := range strings.Fields(sc.Text()) {
			if s, err := strconv.ParseFloat(f, 64); err == nil && s > 1e9 {
				printed = time.Unix(0, int64(s*1e9))
				break
			}
		}
		// What was printed before the follow began waited for a heartbeat, or for it.
		if printed.After(start.Add(2 * time.Second)) {
			lags = append(lags, came.Sub(printed))
		}
	}
	if len(lags) < 10 {
		t.Fatalf("%d lines printed 2 to 7 s into the follow reached it; want about 20", len(lags))
	}
	worst := lags[0]
	for _, l := range lags {
		worst = max(worst, l)
	}
	if worst > 3*time.Second {
		t.Errorf("a followed line took %s to arrive (all: %v); want a second or two, not a heartbeat interval of 8 s", worst, lags)
	}
}

// A log longer than one answer of the server (2 MiB) comes out whole from `rota logs`.
// And a server that has lost its copies of the logs (its log directory gone, as on a
// machine restored from a backup of the database, or a new leader) gets each ended job's
// log back from its node at the first read.
func TestLogsOutliveTheServersCopies(t *testing.T) {
	u := startUp(t, 1)
	const lines = 400_000 // `seq` prints 2.7 MB
	id := u.submit("--", "seq", strconv.Itoa(lines))
	u.waitJob(id, 60*time.Second, api.StateSucceeded)
	var want strings.Builder
	for i := 1; i <= lines; i++ {
		want.WriteString(strconv.Itoa(i) + "\n")
	}
	ref := strconv.FormatInt(id, 10)
	if r := u.rota("logs", ref); r.code != 0 || r.stdout != want.String() {
		t.Fatalf("rota logs: exit %d, %d bytes of the %d printed; stderr %q", r.code, len(r.stdout), want.Len(), r.stderr)
	}

	u.up.signal(syscall.SIGTERM)
	if _, ok := u.up.waitExit(30 * time.Second); !ok {
		t.Fatal("rota up did not stop on SIGTERM")
	}
	if err := os.RemoveAll(filepath.Join(u.dir, "logs")); err != nil {
		t.Fatal(err)
	}
	u.up = startProc(t, u.dir, "up-again", u.env, u.args...)
	u.waitReady(1)
	if r := u.rota("logs", ref); r.code != 0 || r.stdout != want.String() {
		t.Fatalf("rota logs with the server's copy gone: exit %d, %d bytes of the %d printed; stderr %q", r.code, len(r.stdout), want.Len(), r.stderr)
	}
}

// A job that prints more than rota up's --max-log-size: the node keeps the first part of
// its output and a line that says the rest was dropped, 1 MiB in all, which the server
// keeps whole; the job ends as it would, and rota logs prints that log, the line last.
// (A server whose limit is below its node's: TestLogLimit in internal/server.)
func TestLogsPastTheLimit(t *testing.T) {
	u := startUp(t, 1, "--max-log-size", "1M")
	id := u.submit("--", "seq", "400000") // 2.7 MB
	u.waitJob(id, 60*time.Second, api.StateSucceeded)
	notice := "\nrota: this attempt's output passed 1 MiB, the most this node keeps of one attempt's log (rota agent --max-log-size); the rest was dropped, and the job runs on\n"
	var want strings.Builder
	for i := 1; want.Len() < 1<<20; i++ {
		want.WriteString(strconv.Itoa(i) + "\n")
	}
	r := u.rota("logs", strconv.FormatInt(id, 10))
	if r.code != 0 || r.stdout != want.String()[:1<<20-len(notice)]+notice {
		t.Fatalf("rota logs: exit %d, %d bytes ending %q; want exit 0, the output's first bytes and the node's line, 1 MiB in all\nstderr: %s",
			r.code, len(r.stdout), r.stdout[max(0, len(r.stdout)-200):], r.stderr)
	}
}

func TestMaxLogSizeFlag(t *testing.T) {
	for _, tc := range []struct {
		flag string
		want int64
		err  string
	}{
		{"1G", 1 << 30, ""},
		{"512M", 512 << 20, ""},
		{"off", -1, ""},
		{"OFF", -1, ""},
		{"0", 0, "not off or a size from 1M to 1P"},
		{"-5M", 0, "not off or a size"},
		{"lots", 0, "not off or a size"},
		{"2000P", 0, "not off or a size"},
	} {
		got, err := maxLogSize(tc.flag)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("--max-log-size %s: %d, %v; want %d", tc.flag, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--max-log-size")):
			t.Errorf("--max-log-size %s: %d, %v; want an error naming the flag and %q", tc.flag, got, err, tc.err)
		}
	}
}
