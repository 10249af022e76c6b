package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rotahq/rota/internal/api"
)

// The data dir holds every attempt's records. A node that cannot write it (its disk full,
// or remounted read-only after errors) would fail every job placed on it with a start
// error, one after another, and empty the queue into FAILED. So the agent watches it:
// every dataDirEvery it checks the free space and that a file can be written there, and
// an attempt it could not prepare for such a cause tells it at once. While it cannot
// write it, every heartbeat says why (api.Heartbeat.DataDirProblem) and the server places
// nothing new on the node; the attempt it could not start ends with reason node_error,
// which the server requeues without spending the job's retries.

const (
	// dataDirEvery is how often the agent checks its data dir.
	dataDirEvery = 10 * time.Second
	// minFreeDisk is the least free space in the data dir's file system with which the
	// node takes new attempts: room for their records. Their logs need more, but a disk
	// that fills costs a log its end (outputcap.go), never an attempt its record.
	minFreeDisk = 64 << 20
	fileProbe   = ".write-probe"
)

// dataDirWatch is how the agent checks its data dir: every (dataDirEvery), for minFree
// bytes free (minFreeDisk). Tests check more often, for less.
type dataDirWatch struct {
	every   time.Duration
	minFree int64
}

// watchDataDir checks the data dir now and then at every interval until ctx ends, and
// while the agent could not start a supervisor, whether it can now (supervisor.go).
func (a *Agent) watchDataDir(ctx context.Context) {
	for {
		a.setDataDirProblem(checkDataDir(a.dataDir, a.dataDirWatch.minFree))
		if a.supervisorProblem.get() != "" {
			a.setSupervisorProblem(a.runner.probeSupervisor(ctx))
		}
		if !sleep(ctx, a.dataDirWatch.every) {
			return
		}
	}
}

// checkDataDir says why attempts cannot be written in dir, or "" when they can.
func checkDataDir(dir string, minFree int64) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Sprintf("its data dir %s cannot be read: %v", dir, err)
	}
	if free := int64(st.Bavail) * st.Bsize; free < minFree {
		return fmt.Sprintf("its data dir %s has %s free, less than the %s it keeps for attempts' records", dir, mib(free), mib(minFree))
	}
	probe := filepath.Join(dir, fileProbe)
	if err := os.WriteFile(probe, []byte("ok\n"), 0o600); err != nil {
		return fmt.Sprintf("its data dir %s cannot be written: %v", dir, errors.Unwrap(err))
	}
	_ = os.Remove(probe)
	return ""
}

func mib(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }

// diskFault reports whether err is the disk's failure rather than anything of the job's.
func diskFault(err error) bool {
	for _, e := range []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT, syscall.EROFS, syscall.EIO} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// setDataDirProblem keeps why attempts cannot be written (empty: they can) for the
// heartbeats, and logs and reports it at once when it changes.
// It takes no lock: the runner reports a fault with the agent's lock held.
func (a *Agent) setDataDirProblem(problem string) {
	a.dataDirProblem.set(a, problem, "this node takes no new work: its data dir cannot hold attempts", "the data dir holds attempts again; this node takes new work")
}

// nodeErrorEnd is the end of an attempt the node could not prepare because its disk
// failed, and the note the agent keeps of it until a check of the data dir passes.
func (a *Agent) nodeErrorEnd(err error) (reason, message string) {
	a.setDataDirProblem("it could not prepare an attempt: " + err.Error())
	return api.ReasonNodeError, "this node could not prepare the attempt (" + err.Error() + "); it takes no new work until its data dir can hold attempts again, and the job is requeued"
}
