package agent

import (
	"bytes"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// Leftovers are GPU processes that belong to no live attempt: a crashed job's child that
// escaped, something started by hand, a process of an attempt that has ended. They hold
// GPU memory the scheduler thinks is free, so the agent reports each with when it first
// saw it (the server keeps its GPU from new work), and where the node is configured to,
// kills it after a grace: SIGTERM, then SIGKILL leftoverTermWait later.

// leftoverTermWait is how long a leftover has between SIGTERM and SIGKILL.
const leftoverTermWait = 10 * time.Second

// maxFDScan bounds the file descriptors looked at to tell whether a process holds a GPU.
const maxFDScan = 4096

// leftovers tracks the leftover processes from one tick to the next.
type leftovers struct {
	// killAfter is the grace before a leftover is killed; zero: never.
	killAfter time.Duration
	termWait  time.Duration
	// checkDevice makes a kill wait for proof that the PID holds an NVIDIA device open.
	// NVML may report PIDs of another PID namespace (an agent in a container): a PID that
	// does not hold a GPU here is somebody else's process. Fake GPUs have no device file.
	checkDevice bool
	seen        map[int]*leftover
}

// leftover is one process of no live attempt.
type leftover struct {
	since time.Time
	// start is the process's start time in clock ticks since boot (0: unreadable), so a
	// recycled PID is never taken for the process first seen.
	start  uint64
	termAt time.Time
	killed bool
	// spared is set once the agent has said why it does not kill the process.
	spared bool
}

// track stamps each leftover among procs (those with no JobID) with when it was first
// seen, forgets those that are gone, and kills those past their grace. protected holds
// the PIDs of live attempts and their supervisors, which are never killed.
func (l *leftovers) track(now time.Time, procs []api.GPUProcess, protected map[int]bool, logger *slog.Logger) {
	current := map[int]bool{}
	for i := range procs {
		p := &procs[i]
		if p.JobID != 0 {
			continue
		}
		lo := l.seen[p.PID]
		if !current[p.PID] {
			current[p.PID] = true
			start, _ := procStart(p.PID)
			if lo == nil || lo.start != start {
				lo = &leftover{since: now, start: start}
				l.seen[p.PID] = lo
				logger.Warn("GPU process of no live attempt; its GPU takes no new work while it stays",
					"pid", p.PID, "gpu", p.GPU, "memory_mb", p.MemoryMB, "command", p.Command)
			}
		}
		since := lo.since
		p.Since = &since
	}
	for pid, lo := range l.seen {
		if !current[pid] {
			logger.Info("leftover GPU process gone", "pid", pid, "since", lo.since.UTC().Format(time.RFC3339), "killed", !lo.termAt.IsZero())
			delete(l.seen, pid)
		}
	}
	if l.killAfter <= 0 {
		return
	}
	for pid, lo := range l.seen {
		l.kill(now, pid, lo, protected, logger)
	}
}

// kill sends a leftover past its grace SIGTERM, and SIGKILL termWait later, once it is
// sure the PID is still the process first seen and no one's it must spare.
func (l *leftovers) kill(now time.Time, pid int, lo *leftover, protected map[int]bool, logger *slog.Logger) {
	if pid <= 1 || pid == os.Getpid() || protected[pid] || lo.killed {
		return
	}
	var sig syscall.Signal
	switch {
	case lo.termAt.IsZero() && now.Sub(lo.since) >= l.killAfter:
		sig = syscall.SIGTERM
	case !lo.termAt.IsZero() && now.Sub(lo.termAt) >= l.termWait:
		sig = syscall.SIGKILL
	default:
		return
	}
	spare := func(why string) {
		if !lo.spared {
			logger.Warn("not killing a leftover GPU process: "+why, "pid", pid)
			lo.spared = true
		}
	}
	start, ok := procStart(pid)
	switch {
	case !ok:
		spare("it is not a process of this machine's PID namespace, or has just ended")
		return
	case start != lo.start:
		// Recycled since it was first seen; the next tick sees it afresh.
		return
	case l.checkDevice && !holdsNVIDIADevice(pid):
		spare("it holds no NVIDIA device open here (NVML may report PIDs of another namespace)")
		return
	}
	command := commandOf(pid)
	if err := syscall.Kill(pid, sig); err != nil {
		spare("kill: " + err.Error())
		return
	}
	if sig == syscall.SIGTERM {
		lo.termAt = now
	} else {
		lo.killed = true
	}
	logger.Warn("killed a leftover GPU process", "pid", pid, "signal", sig.String(), "command", command,
		"since", lo.since.UTC().Format(time.RFC3339), "grace", l.killAfter)
}

// procStart reads a process's start time, in clock ticks since boot, from /proc/PID/stat.
func procStart(pid int) (uint64, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name may hold spaces and parentheses; the fields follow the last ')',
	// starting with the state (field 3); the start time is field 22.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 20 {
		return 0, false
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	return start, err == nil
}

// holdsNVIDIADevice reports whether the process has a /dev/nvidia* device open.
func holdsNVIDIADevice(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	f, err := os.Open(dir)
	if err != nil {
		return false
	}
	defer f.Close()
	names, _ := f.Readdirnames(maxFDScan)
	for _, n := range names {
		if target, err := os.Readlink(dir + "/" + n); err == nil && strings.HasPrefix(target, "/dev/nvidia") {
			return true
		}
	}
	return false
}
