package agent

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// An attempt's processes and its CPU and memory use are seen while it runs, from its
// cgroups where it has them and from /proc where it has none, and read safely while the
// runner follows it.
func TestAttemptResourceUse(t *testing.T) {
	for _, cgroup := range []bool{true, false} {
		t.Run(map[bool]string{true: "cgroups", false: "processes"}[cgroup], func(t *testing.T) {
			r := newTestRunner(t)
			r.noCgroup = !cgroup
			pidFile := filepath.Join(t.TempDir(), "child.pid")
			// A child holding 30 MB, and a busy leader. The child's last command is the
			// builtin `:`, not sleep: a shell (dash, bash) runs the last command of a
			// subshell in place of the subshell, so sleep would take the child's PID and
			// drop the 30 MB moments after they were read, and the test would see them only
			// if it looked in that moment.
			script := `(x=$(head -c 30000000 /dev/zero | tr '\0' a); sleep 600; :) & echo $! > "$1"; while :; do :; done`
			task := shTask(1, script, pidFile)
			task.GraceSeconds = 5
			a := startTask(t, r, task)
			child := readPID(t, pidFile)

			// Telemetry reads from another goroutine while the runner follows.
			var wg sync.WaitGroup
			done := make(chan struct{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-done:
						return
					default:
						a.pids()
						a.resourceUse()
					}
				}
			}()
			defer func() { close(done); wg.Wait() }()

			eventually(t, 10*time.Second, "the leader and the child among the attempt's processes", func() bool {
				st, _ := a.snapshot()
				pids := a.pids()
				return st.PID != 0 && slices.Contains(pids, st.PID) && slices.Contains(pids, child)
			})
			// What the last reading saw is said if none sees both.
			var cpu float64
			var mem int64
			var read bool
			deadline := time.Now().Add(30 * time.Second)
			for {
				cpu, mem, read = a.resourceUse()
				if read && cpu > 0.05 && mem >= 25 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("timed out after 30s waiting for CPU time and 30 MB of memory: last read %v, %.2f s of CPU, %d MB", read, cpu, mem)
				}
				time.Sleep(10 * time.Millisecond)
			}
			if mem > 1000 {
				t.Errorf("memory %d MB: far more than the job holds", mem)
			}
			a.stop(api.ReasonCancelled)
			waitEnd(t, a)
			if pids := a.pids(); len(pids) != 0 {
				t.Errorf("an ended attempt lists processes %v", pids)
			}
			if _, _, ok := a.resourceUse(); ok {
				t.Error("an ended attempt reports use")
			}
		})
	}
}

func TestProcUse(t *testing.T) {
	cpu, rss := procUse([]int{1 << 30}) // no such process
	if cpu != 0 || rss != 0 {
		t.Errorf("a missing process counts %v s, %d bytes", cpu, rss)
	}
	_, rss = procUse([]int{os.Getpid()})
	if rss <= 0 {
		t.Errorf("this process has %d bytes resident", rss)
	}
}
