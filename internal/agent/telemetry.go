package agent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// Telemetry: every TelemetryInterval the agent reads its GPUs, ties each GPU process to
// the live attempt that owns it, sums what each live task uses, and keeps the reading for
// the next heartbeat. The same tick takes the GPU faults (health.go) and deals with the
// GPU processes of no live attempt (leftovers.go). One goroutine does all of it, so the
// monitor's state needs no lock.

const (
	defaultTelemetryInterval = 5 * time.Second
	// A reading is bounded, so a node with a runaway process count cannot swell its
	// heartbeats: processes beyond the first maxTelemetryProcesses (by GPU, then PID) are
	// left out, and so are GPUs beyond maxTelemetryGPUs.
	maxTelemetryProcesses = 1024
	maxTelemetryGPUs      = 256
	// maxCommandLen bounds the command line reported for a GPU process.
	maxCommandLen = 256
	// maxAncestry bounds the walk from a GPU process up to the attempt that started it.
	maxAncestry = 64
)

// monitor is what the telemetry goroutine remembers from one tick to the next.
type monitor struct {
	// sampleErr and healthErr are the last errors logged, so a broken device layer is
	// logged when its error changes, not every tick.
	sampleErr, healthErr string
	// truncated is set while readings are cut to their bounds, to say so once.
	truncated bool
	// cpu is each live attempt's CPU time at the previous reading.
	cpu map[attemptKey]cpuReading
	// gpus holds each live attempt's GPU indices, read once from its task.json, and
	// memLimit the GPU memory slice of those that share a GPU.
	gpus     map[attemptKey][]int
	memLimit map[attemptKey]int64
	// over is when each task that shares a GPU was first seen above its slice; memGrace
	// how long it may stay there.
	over     map[attemptKey]time.Time
	memGrace time.Duration
	// xids counts the non-fatal faults of each GPU and kind, for the log.
	xids map[faultKey]int
	// unknownGPUs holds the GPU indices faults were reported for that the node does not
	// have, so each is logged once.
	unknownGPUs map[int]bool
	leftovers   leftovers
}

type cpuReading struct {
	seconds float64
	at      time.Time
}

func newMonitor(killAfter time.Duration, realDevices bool) *monitor {
	return &monitor{
		cpu:         map[attemptKey]cpuReading{},
		gpus:        map[attemptKey][]int{},
		memLimit:    map[attemptKey]int64{},
		over:        map[attemptKey]time.Time{},
		xids:        map[faultKey]int{},
		unknownGPUs: map[int]bool{},
		leftovers: leftovers{
			killAfter:   killAfter,
			termWait:    leftoverTermWait,
			seen:        map[int]*leftover{},
			checkDevice: realDevices,
		},
	}
}

// monitorLoop ticks until ctx ends.
func (a *Agent) monitorLoop(ctx context.Context) {
	t := time.NewTicker(a.telemetryEvery)
	defer t.Stop()
	for {
		a.tick(time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tick is one round of the monitor:
//  1. take the GPU faults and mark the GPUs they make unusable;
//  2. list the live attempts, their processes and GPUs;
//  3. stop the tasks on GPUs that turned unhealthy;
//  4. read the GPUs, tie each process to its attempt, and sum each task's use;
//  5. track (and where configured, kill) the processes of no live attempt;
//  6. keep the reading for the next heartbeat.
func (a *Agent) tick(now time.Time) {
	a.takeHealthEvents(now)
	live := a.liveTasks()
	a.stopOnFailedGPUs(live)

	s, err := a.devices.Sample()
	if err != nil {
		if msg := err.Error(); msg != a.mon.sampleErr {
			a.logger.Warn("cannot read the GPUs; no telemetry until this changes", "err", err)
			a.mon.sampleErr = msg
		}
		return
	}
	if a.mon.sampleErr != "" {
		a.logger.Info("reading the GPUs again")
		a.mon.sampleErr = ""
	}
	if s.Time.IsZero() {
		s.Time = now
	}
	tel := &api.Telemetry{Time: s.Time.UTC(), GPUs: s.GPUs, Processes: s.Processes}
	a.bound(tel)
	owners := ownersOf(live)
	gpuMem := map[*liveTask]int64{}
	for i := range tel.Processes {
		p := &tel.Processes[i]
		p.JobID, p.Attempt, p.Since = 0, 0, nil
		// A process of another cluster's attempt (being stopped) names no job of this
		// server's: it is reported like a leftover, and never killed as one.
		if lt := owners.of(p.PID); lt != nil && lt.current {
			p.JobID, p.Attempt = lt.key.job, lt.key.attempt
			gpuMem[lt] += p.MemoryMB
		}
		if p.Command == "" {
			p.Command = commandOf(p.PID)
		}
	}
	tel.Tasks = a.usage(now, live, tel.GPUs, gpuMem)
	a.enforceSlices(now, live, gpuMem)
	a.mon.leftovers.track(now, tel.Processes, owners.protected(), a.logger)

	a.mu.Lock()
	a.telemetry = tel
	a.mu.Unlock()
}

// bound cuts a reading to its limits, saying so once while it has to.
func (a *Agent) bound(tel *api.Telemetry) {
	cut := len(tel.Processes) > maxTelemetryProcesses || len(tel.GPUs) > maxTelemetryGPUs
	if cut && !a.mon.truncated {
		a.logger.Warn("GPU reading too large; reporting part of it", "processes", len(tel.Processes), "gpus", len(tel.GPUs),
			"max_processes", maxTelemetryProcesses, "max_gpus", maxTelemetryGPUs)
	}
	a.mon.truncated = cut
	slices.SortFunc(tel.Processes, func(x, y api.GPUProcess) int {
		if x.GPU != y.GPU {
			return x.GPU - y.GPU
		}
		return x.PID - y.PID
	})
	if len(tel.Processes) > maxTelemetryProcesses {
		tel.Processes = tel.Processes[:maxTelemetryProcesses]
	}
	if len(tel.GPUs) > maxTelemetryGPUs {
		tel.GPUs = tel.GPUs[:maxTelemetryGPUs]
	}
}

// liveTask is a live attempt as one tick sees it.
type liveTask struct {
	key attemptKey
	att *attempt
	// current is set for an attempt of the cluster the node serves.
	current bool
	status  api.TaskStatus
	gpus    []int
	// gpuMemLimit is the GPU memory slice of a task that shares a GPU (0: whole GPUs).
	gpuMemLimit int64
	// pids are the attempt's processes; supervisor is its supervisor's PID (0: unknown).
	pids       []int
	supervisor int
}

// liveTasks lists the attempts whose processes may still run, of any cluster: one of
// another cluster being stopped still owns its processes.
func (a *Agent) liveTasks() []*liveTask {
	a.mu.Lock()
	var live []*liveTask
	for k, att := range a.attempts {
		if !isClosed(att.exited) {
			live = append(live, &liveTask{key: k, att: att, current: a.isCurrent(k)})
		}
	}
	a.mu.Unlock()
	keep := map[attemptKey]bool{}
	for _, lt := range live {
		keep[lt.key] = true
		lt.status, _ = lt.att.snapshot()
		lt.pids = lt.att.pids()
		if pid, ok := readInt(filepath.Join(lt.att.dir, fileSupervisorPID)); ok && pid > 1 {
			lt.supervisor = pid
		}
		gpus, ok := a.mon.gpus[lt.key]
		if !ok {
			var t struct {
				GPUIndices       []int `json:"gpu_indices"`
				GPUMemoryLimitMB int64 `json:"gpu_memory_limit_mb"`
			}
			// Written before the supervisor starts; a task without one has no GPUs.
			if _, err := readJSON(filepath.Join(lt.att.dir, fileTask), &t); err == nil {
				gpus = t.GPUIndices
				a.mon.gpus[lt.key] = gpus
				if t.GPUMemoryLimitMB > 0 {
					a.mon.memLimit[lt.key] = t.GPUMemoryLimitMB
				}
			}
		}
		lt.gpus = gpus
		lt.gpuMemLimit = a.mon.memLimit[lt.key]
	}
	for k := range a.mon.gpus {
		if !keep[k] {
			delete(a.mon.gpus, k)
			delete(a.mon.memLimit, k)
			delete(a.mon.over, k)
		}
	}
	for k := range a.mon.cpu {
		if !keep[k] {
			delete(a.mon.cpu, k)
		}
	}
	return live
}

// owners finds the live attempt a process belongs to: one of its processes, its
// supervisor, or a descendant of either (a process that left the attempt's group); failing
// those, a process whose environment names the attempt (ROTA_JOB_ID, ROTA_ATTEMPT and its
// events file, as killRemains checks them): a container's processes run under the
// runtime, not under the supervisor.
type owners struct {
	byPID map[int]*liveTask
	// byEnv maps the variables that name an attempt to it.
	byEnv map[attemptEnv]*liveTask
	// parents maps each process to its parent; read once per tick, when first needed.
	parents map[int]int
}

// attemptEnv is what a job's environment says of its attempt.
type attemptEnv struct {
	job, attempt, events string
}

func ownersOf(live []*liveTask) *owners {
	o := &owners{byPID: map[int]*liveTask{}, byEnv: map[attemptEnv]*liveTask{}}
	for _, lt := range live {
		for _, pid := range lt.pids {
			o.byPID[pid] = lt
		}
		if lt.supervisor > 0 {
			o.byPID[lt.supervisor] = lt
		}
		o.byEnv[attemptEnv{strconv.FormatInt(lt.key.job, 10), strconv.Itoa(lt.key.attempt), eventsPath(lt.att.dir, lt.key.legacy)}] = lt
	}
	return o
}

func (o *owners) of(pid int) *liveTask {
	if len(o.byEnv) == 0 {
		return nil
	}
	if lt := o.byPID[pid]; lt != nil {
		return lt
	}
	if o.parents == nil {
		o.parents = map[int]int{}
		for _, p := range listProcs() {
			o.parents[p.pid] = p.ppid
		}
	}
	p := pid
	for range maxAncestry {
		parent, ok := o.parents[p]
		if !ok || parent <= 1 {
			break
		}
		if lt := o.byPID[parent]; lt != nil {
			return lt
		}
		p = parent
	}
	return o.byEnv[environOf(pid)]
}

// environOf reads the variables of a process's environment that name an attempt.
func environOf(pid int) attemptEnv {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return attemptEnv{}
	}
	var e attemptEnv
	for kv := range strings.SplitSeq(string(data), "\x00") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case api.EnvJobID:
			e.job = v
		case api.EnvAttempt:
			e.attempt = v
		case api.EnvEventsFile:
			e.events = v
		}
	}
	return e
}

// protected lists the PIDs no leftover kill may touch: every process of a live attempt
// and every supervisor.
func (o *owners) protected() map[int]bool {
	out := make(map[int]bool, len(o.byPID))
	for pid := range o.byPID {
		out[pid] = true
	}
	return out
}

// usage sums what each running task uses: its GPUs' mean utilisation, the GPU memory of
// its processes (gpuMem), and its CPU and memory as its processes' accounting shows them.
func (a *Agent) usage(now time.Time, live []*liveTask, gpus []api.GPUSample, gpuMem map[*liveTask]int64) []api.TaskUsage {
	util := map[int]float64{}
	for _, g := range gpus {
		util[g.Index] = g.UtilizationPct
	}
	var out []api.TaskUsage
	for _, lt := range live {
		if lt.status.State != api.StateRunning || !lt.current {
			continue
		}
		u := api.TaskUsage{JobID: lt.key.job, Attempt: lt.key.attempt, GPUMemoryMB: gpuMem[lt]}
		if len(lt.gpus) > 0 {
			var sum float64
			for _, g := range lt.gpus {
				sum += util[g]
			}
			u.GPUUtilPct = sum / float64(len(lt.gpus))
		}
		if cpu, mem, ok := lt.att.resourceUse(); ok {
			u.MemoryMB = mem
			u.CPUPct = a.cpuPct(lt, now, cpu)
		}
		out = append(out, u)
	}
	slices.SortFunc(out, func(x, y api.TaskUsage) int {
		if x.JobID != y.JobID {
			return int(x.JobID - y.JobID)
		}
		return x.Attempt - y.Attempt
	})
	return out
}

// cpuPct is the task's CPU use since the previous reading, in percent of one CPU; the
// first reading averages over the task's life so far.
func (a *Agent) cpuPct(lt *liveTask, now time.Time, seconds float64) float64 {
	prev, ok := a.mon.cpu[lt.key]
	a.mon.cpu[lt.key] = cpuReading{seconds: seconds, at: now}
	if !ok {
		if lt.status.StartTime == nil {
			return 0
		}
		prev = cpuReading{at: *lt.status.StartTime}
	}
	wall := now.Sub(prev.at).Seconds()
	if wall <= 0 || seconds < prev.seconds {
		// A clock step or a counter that went back: no honest figure this time.
		return 0
	}
	return 100 * (seconds - prev.seconds) / wall
}

// commandOf is a process's command line, shortened, for a reader to tell what holds a
// GPU; "" once the process is gone.
func commandOf(pid int) string {
	cmd := strings.Join(cmdlineOf(pid), " ")
	if len(cmd) > maxCommandLen {
		cmd = strings.ToValidUTF8(cmd[:maxCommandLen], "") + "…"
	}
	return cmd
}
