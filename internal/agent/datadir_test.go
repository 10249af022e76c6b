package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// mountTmpfs mounts a tmpfs of size (with opts) on a new directory for the test, or
// skips it where that cannot be done.
func mountTmpfs(t *testing.T, opts string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// fillDisk writes a file in dir until its file system is full, and returns the file.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "fill")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 64<<10)
	for {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill the disk: %v", err)
			}
			return path
		}
	}
}

func TestCheckDataDir(t *testing.T) {
	dir := t.TempDir()
	if got := checkDataDir(dir, 1); got != "" {
		t.Errorf("a writable dir with room: %q, want no problem", got)
	}
	if got := checkDataDir(dir, 1<<62); !strings.Contains(got, "its data dir "+dir+" has ") || !strings.Contains(got, "less than the ") {
		t.Errorf("a dir with less room than wanted: %q", got)
	}
	if got := checkDataDir(filepath.Join(dir, "gone"), 1); !strings.Contains(got, "cannot be read") {
		t.Errorf("a dir that is not there: %q", got)
	}
	ro := mountTmpfs(t, "size=1m,ro")
	if got := checkDataDir(ro, 0); !strings.Contains(got, "its data dir "+ro+" cannot be written: read-only file system") {
		t.Errorf("a read-only dir: %q", got)
	}
}

// A node whose data dir fills says so in its heartbeats, to a server whose answers say it
// takes the field; an attempt it cannot prepare there ends node_error, not start_error;
// once there is room again the heartbeats say nothing of it. A server of an earlier
// release, which would refuse the field, is never sent it.
func TestAgentReportsADataDirThatCannotHoldAttempts(t *testing.T) {
	dir := mountTmpfs(t, "size=16m")
	s := newFakeServer(t)
	launch(t, agentConfig(t, s, dir), testLogger(t), func(a *Agent) { a.dataDirWatch = dataDirWatch{every: 50 * time.Millisecond, minFree: 1 << 20} })
	eventually(t, 10*time.Second, "a few heartbeats", func() bool { return len(s.heartbeats()) > 2 })
	fill := fillDisk(t, dir)
	time.Sleep(300 * time.Millisecond) // several checks of the full disk
	for _, hb := range s.heartbeats() {
		if hb.DataDirProblem != "" {
			t.Fatalf("a server that did not say it takes the field was sent %q", hb.DataDirProblem)
		}
	}

	s.mu.Lock()
	s.dataDirProblems = true
	s.mu.Unlock()
	eventually(t, 10*time.Second, "a heartbeat saying the data dir is full", func() bool {
		hb, _ := s.lastBeat()
		return strings.Contains(hb.DataDirProblem, "its data dir "+dir+" has 0 MiB free")
	})
	k := taskKey{1, 1}
	s.setDesired(api.Task{JobID: 1, Attempt: 1, Command: []string{"true"}})
	eventually(t, 10*time.Second, "the attempt's end", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := s.final[k]
		return ok
	})
	s.mu.Lock()
	st := s.final[k]
	s.mu.Unlock()
	if st.State != api.StateFailed || st.Reason != api.ReasonNodeError || !strings.Contains(st.Message, "no space left on device") {
		t.Errorf("the attempt on the full disk ended %s %s %q; want FAILED node_error saying why", st.State, st.Reason, st.Message)
	}

	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "heartbeats that say nothing of the data dir", func() bool {
		hb, _ := s.lastBeat()
		return hb.DataDirProblem == ""
	})
}
