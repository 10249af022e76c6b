package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// GPU health: a fatal fault (an XID that means the GPU cannot be trusted, uncorrectable ECC
// errors, a GPU that vanished) marks the GPU unhealthy in the inventory every heartbeat
// carries, so the server places nothing new on it, and the tasks running on it are stopped
// with reason gpu_error (the server requeues those with retries left). A GPU stays
// unhealthy until the agent restarts: a fault is not undone by time. A non-fatal XID (an
// application's own fault) is only logged and counted.
//
// The node's health-check command, if it has one, runs on its own interval; its last
// result goes with every heartbeat, and the server decides what a failure means.

const (
	defaultHealthCheckInterval = time.Minute
	defaultHealthCheckTimeout  = 30 * time.Second
	// maxHealthOutput is how much of the end of the health check's output is kept.
	maxHealthOutput = 4 << 10
	// maxHealthText bounds a fault's message as the inventory carries it.
	maxHealthText = 200
	// healthCheckWaitDelay is how long the health check's output may stay open after it
	// exited or was killed (a background process it left holding it).
	healthCheckWaitDelay = time.Second
)

// faultKey counts faults of one kind and code on one GPU.
type faultKey struct {
	gpu  int
	kind string
	code uint64
}

// takeHealthEvents drains the device layer's faults and applies them.
func (a *Agent) takeHealthEvents(now time.Time) {
	events, err := a.devices.HealthEvents()
	if err != nil {
		if msg := err.Error(); msg != a.mon.healthErr {
			a.logger.Warn("cannot read GPU faults; looking again every tick", "err", err)
			a.mon.healthErr = msg
		}
	} else if a.mon.healthErr != "" {
		a.logger.Info("reading GPU faults again")
		a.mon.healthErr = ""
	}
	for _, ev := range events {
		if ev.Fatal {
			a.markUnhealthy(ev, now)
			continue
		}
		k := faultKey{ev.GPU, ev.Kind, ev.Code}
		a.mon.xids[k]++
		// The first of each is news; the rest only count.
		if n := a.mon.xids[k]; n == 1 {
			a.logger.Warn("non-fatal GPU fault; the GPU stays in use", "gpu", ev.GPU, "kind", ev.Kind, "code", ev.Code, "message", ev.Message)
		} else {
			a.logger.Debug("non-fatal GPU fault again", "gpu", ev.GPU, "kind", ev.Kind, "code", ev.Code, "count", n)
		}
	}
}

// markUnhealthy records a fatal fault in the inventory. The GPU list is replaced, not
// changed in place: a heartbeat may be encoding the old one.
func (a *Agent) markUnhealthy(ev HealthEvent, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := slices.IndexFunc(a.inventory.GPUs, func(g api.GPU) bool { return g.Index == ev.GPU })
	if i < 0 {
		if !a.mon.unknownGPUs[ev.GPU] {
			a.mon.unknownGPUs[ev.GPU] = true
			a.logger.Warn("fault reported for a GPU this node does not have", "gpu", ev.GPU, "kind", ev.Kind, "code", ev.Code)
		}
		return
	}
	old := a.inventory.GPUs[i]
	vanished := ev.Kind == HealthVanished
	// The first fatal fault says why; only a vanishing is worse news than it.
	if !old.Healthy && (!vanished || old.Missing) {
		a.logger.Debug("another fatal fault on an unhealthy GPU", "gpu", ev.GPU, "kind", ev.Kind, "code", ev.Code)
		return
	}
	g := old
	g.Healthy, g.Health = false, healthText(ev, now)
	g.Missing = g.Missing || vanished
	gpus := slices.Clone(a.inventory.GPUs)
	gpus[i] = g
	a.inventory.GPUs = gpus
	a.logger.Error("GPU unhealthy; no new work goes to it and its tasks are stopped", "gpu", g.Index, "uuid", g.UUID, "health", g.Health)
	a.poke()
}

// xidMeanings says in words what the fatal XIDs seen most often mean (NVIDIA's XID
// catalogue); the device layer's own message stands in for the others.
var xidMeanings = map[uint64]string{
	48:  "double-bit ECC error",
	63:  "ECC page retirement or row remapping recorded",
	64:  "ECC page retirement or row remapping failed",
	74:  "NVLink error",
	79:  "GPU has fallen off the bus",
	92:  "high single-bit ECC error rate",
	94:  "contained ECC error",
	95:  "uncontained ECC error",
	119: "GSP RPC timeout",
	120: "GSP error",
}

// healthText says in a sentence what happened to a GPU, e.g. "XID 79 at
// 2026-11-30T12:00:00Z: GPU has fallen off the bus".
func healthText(ev HealthEvent, now time.Time) string {
	at := now.UTC().Format(time.RFC3339)
	msg := strings.TrimSpace(ev.Message)
	var s string
	switch ev.Kind {
	case HealthXID:
		s = fmt.Sprintf("XID %d at %s", ev.Code, at)
		if m := xidMeanings[ev.Code]; m != "" {
			msg = m
		} else {
			// "XID 62 (GPU fault)" says nothing the start of the sentence does not.
			msg = strings.Trim(strings.TrimPrefix(msg, fmt.Sprintf("XID %d", ev.Code)), " ():-")
		}
	case HealthECC:
		s = "uncorrectable ECC errors at " + at
		if ev.Code > 0 {
			s = fmt.Sprintf("%d uncorrectable ECC errors at %s", ev.Code, at)
		}
		if strings.Contains(strings.ToLower(msg), "ecc") {
			msg = ""
		}
	case HealthVanished:
		s = "vanished at " + at
		if msg == "" {
			msg = "NVML cannot reach it"
		}
	default:
		s = fmt.Sprintf("fault %q at %s", ev.Kind, at)
	}
	if len(msg) > maxHealthText {
		msg = strings.ToValidUTF8(msg[:maxHealthText], "") + "…"
	}
	if msg != "" {
		s += ": " + msg
	}
	return s
}

// stopOnFailedGPUs stops every live task that uses a GPU marked unhealthy, once: a task
// already stopping (for this or any reason) is left to finish stopping.
func (a *Agent) stopOnFailedGPUs(live []*liveTask) {
	a.mu.Lock()
	defer a.mu.Unlock()
	failed := map[int]api.GPU{}
	for _, g := range a.inventory.GPUs {
		if !g.Healthy {
			failed[g.Index] = g
		}
	}
	if len(failed) == 0 {
		return
	}
	for _, lt := range live {
		if lt.att.stopReason != "" || isClosed(lt.att.exited) {
			continue
		}
		for _, idx := range lt.gpus {
			g, bad := failed[idx]
			if !bad {
				continue
			}
			why := fmt.Sprintf("GPU %d (%s) failed: %s", g.Index, g.UUID, g.Health)
			// The stop carries only its reason; the job's log says which GPU and why.
			appendToLog(lt.att, "rota: stopping the job: "+why)
			lt.att.logger.Warn("stopping a task on a failed GPU", "gpu", g.Index, "health", g.Health)
			lt.att.stop(api.ReasonGPUError)
			break
		}
	}
}

// appendToLog adds a line of the agent's own to the job's log, which the user reads.
func appendToLog(att *attempt, line string) {
	f, err := os.OpenFile(att.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		att.logger.Warn("cannot write to the job's log", "err", err)
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}

// healthChecks runs the health-check command until ctx ends: at once, then every
// healthEvery after the previous run ended.
func (a *Agent) healthChecks(ctx context.Context) {
	for {
		res := runHealthCheck(ctx, a.healthCmd, a.healthTimeout)
		if ctx.Err() != nil {
			return
		}
		a.recordHealthCheck(res)
		if !sleep(ctx, a.healthEvery) {
			return
		}
	}
}

// recordHealthCheck keeps the result for the heartbeats, and logs it when it changes.
func (a *Agent) recordHealthCheck(res api.HealthCheck) {
	a.mu.Lock()
	prev := a.healthCheck
	a.healthCheck = &res
	a.mu.Unlock()
	if prev != nil && prev.OK == res.OK && prev.ExitCode == res.ExitCode {
		return
	}
	if res.OK {
		a.logger.Info("health check passes", "command", a.healthCmd)
	} else {
		a.logger.Error("health check fails", "command", a.healthCmd, "exit_code", res.ExitCode, "output", finalLine(res.Output))
	}
	a.poke()
}

// runHealthCheck runs command with /bin/sh -c in a process group of its own, and kills the
// group when it runs past timeout, which is a failure. ExitCode is -1 where the command
// did not exit by itself.
func runHealthCheck(ctx context.Context, command string, timeout time.Duration) api.HealthCheck {
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := &tailBuffer{max: maxHealthOutput}
	cmd := exec.CommandContext(tctx, "/bin/sh", "-c", command)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = healthCheckWaitDelay
	err := cmd.Run()
	if errors.Is(err, exec.ErrWaitDelay) {
		// It exited 0 but left something holding its output: its result stands.
		err = nil
	}
	res := api.HealthCheck{Time: time.Now().UTC(), OK: err == nil}
	var exit *exec.ExitError
	switch {
	case errors.Is(tctx.Err(), context.DeadlineExceeded):
		res.OK, res.ExitCode = false, -1
		fmt.Fprintf(out, "\nrota: the health check ran past its timeout of %v and was killed\n", timeout)
	case errors.As(err, &exit) && exit.Exited():
		res.ExitCode = exit.ExitCode()
	case err != nil:
		res.ExitCode = -1
		fmt.Fprintf(out, "\nrota: %v\n", err)
	}
	res.Output = out.String()
	return res
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return n, nil
}

// String is the kept output; a character cut in half at its start is dropped.
func (t *tailBuffer) String() string { return strings.ToValidUTF8(string(t.buf), "") }

// finalLine is the last non-empty line of s, for a log line.
func finalLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
