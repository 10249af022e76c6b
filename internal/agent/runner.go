package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// runnerPoll is how often the agent looks at an attempt it follows: a supervisor is not
// necessarily its child, so its end shows as status.json, not as a wait.
const runnerPoll = 100 * time.Millisecond

// runner starts attempts under supervisors and follows each to its end, whether this agent
// process started it or found it left by an earlier one.
type runner struct {
	dataDir string
	// supervisor is the command that supervises one attempt; its directory is appended.
	// supervisorPath is the file executed for it: supervisor[0], or selfExe for this
	// executable (startfault.go).
	supervisor     []string
	supervisorPath string
	// supervisorEnv is the environment supervisors start with: the agent's own, which a
	// job of the agent's own account inherits.
	supervisorEnv []string
	logger        *slog.Logger
	// flushWait bounds how long an ended attempt waits for its log to reach the server
	// before its end is reported, so the server usually sees a complete log with the end
	// state but never waits on an unreachable server.
	flushWait time.Duration
	poll      time.Duration
	// maxLogSize is the most of an attempt's output its log keeps, in bytes; 0 keeps it
	// all (Config.MaxLogSize).
	maxLogSize int64
	// noCgroup has supervisors track jobs as on nodes without cgroup v2 (tests of that
	// fallback set it).
	noCgroup bool
	// onDiskFault is called when an attempt could not be prepared because the disk of the
	// data dir failed; it returns the attempt's end reason and message.
	onDiskFault func(error) (reason, message string)
	// onSupervisorFault is called when an attempt's supervisor could not be started; it
	// returns the attempt's end reason and message (startfault.go).
	onSupervisorFault func(error) (reason, message string)
	// onChange is called when an attempt's reported status changes.
	onChange func()
	// runtime is the node's container runtime for tasks with an image; none where Name
	// is empty, and such a task then fails with start_error.
	runtime containerRuntime
	// jobEnv is added to every task's environment where the server did not set the same
	// variable (the fake device layer's ROTA_FAKE_GPU_DIR).
	jobEnv map[string]string
	// mpsDir is the MPS pipe directory looked in for a running control daemon.
	mpsDir string

	// ctx ends the goroutines that follow attempts; wg counts them. Ending them leaves
	// the attempts running: their supervisors do not depend on the agent.
	ctx context.Context
	wg  sync.WaitGroup
}

// attempt is one attempt on this node as the agent sees it: its directory, its supervisor
// and what the server has acknowledged of it.
type attempt struct {
	key     attemptKey
	dir     string
	logPath string
	logger  *slog.Logger
	// events is read only under the agent's lock.
	events *eventsReader

	// child is closed when the supervisor this agent process started has exited; nil for
	// one found running.
	child chan struct{}
	// exited is closed once the end is recorded: nothing of the attempt runs any more and
	// output.log is final.
	exited chan struct{}
	// logShipped is closed once no log shipper will send more.
	logShipped     chan struct{}
	logShippedOnce sync.Once

	mu     sync.Mutex // guards the fields below
	status api.TaskStatus
	// job is job.json once the job has started: its cgroups and process group.
	job jobRecord
	// ended is set once the end may be reported: recorded, and the log shipped or given
	// up on for now.
	ended bool
	// orphanKilled counts processes killed after the supervisor was found dead.
	orphanKilled int

	// Guarded by the agent's lock.
	endAcked     bool
	stopReason   string
	stopped      *api.StoppedTask
	stoppedAcked bool
	shipping     bool // a shipper was started, or none will be
}

func (r *runner) newAttempt(k attemptKey, dir string) *attempt {
	logger := r.logger.With("job", k.job, "attempt", k.attempt)
	if k.cluster != "" {
		logger = logger.With("cluster", k.cluster)
	}
	return &attempt{
		key:        k,
		dir:        dir,
		logPath:    filepath.Join(dir, fileOutput),
		logger:     logger,
		events:     newEventsReader(eventsPath(dir, k.legacy), filepath.Join(dir, fileEventsOffset), logger),
		exited:     make(chan struct{}),
		logShipped: make(chan struct{}),
		// ASSIGNED until the supervisor says the job's process exists: the server must not
		// call a job RUNNING, or signal it, before there is anything to run or signal.
		status: api.TaskStatus{JobID: k.job, Attempt: k.attempt, State: api.StateAssigned},
	}
}

// start creates the attempt's directory and starts its supervisor. It always returns an
// attempt: one that could not start ends FAILED with reason start_error, so the server
// hears about it like any other end.
func (r *runner) start(k attemptKey, t api.Task) *attempt {
	dir := attemptDir(r.dataDir, k)
	a := r.newAttempt(k, dir)
	if err := r.prepare(a, t); err != nil {
		rec := endRecord{State: api.StateFailed, Reason: api.ReasonStartError, Message: err.Error()}
		if diskFault(err) && r.onDiskFault != nil {
			rec.Reason, rec.Message = r.onDiskFault(err)
		}
		r.endAtOnce(a, rec)
		return a
	}
	if err := r.startSupervisor(a); err != nil {
		err = r.startError(err)
		if f, ferr := os.OpenFile(a.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); ferr == nil {
			fmt.Fprintf(f, "rota: %v\n", err)
			f.Close()
		}
		rec := endRecord{State: api.StateFailed, Reason: api.ReasonStartError, Message: err.Error()}
		switch {
		case diskFault(err) && r.onDiskFault != nil:
			rec.Reason, rec.Message = r.onDiskFault(err)
		case r.onSupervisorFault != nil:
			rec.Reason, rec.Message = r.onSupervisorFault(err)
		}
		r.endAtOnce(a, rec)
		return a
	}
	a.logger.Info("task started", "gpus", t.GPUIndices, "command", t.Command, "run_as", t.RunAs)
	r.follow(a)
	return a
}

// stopBeforeStart ends a task the server asked to stop before this node ever ran it, so
// the server hears an end instead of waiting for one, and the attempt never runs later.
func (r *runner) stopBeforeStart(k attemptKey, t api.Task, reason string) *attempt {
	a := r.newAttempt(k, attemptDir(r.dataDir, k))
	state, reason := stopOutcome(reason)
	rec := endRecord{State: state, Reason: reason, Message: "stopped (" + reason + ") before it started on this node"}
	if err := r.prepare(a, t); err != nil {
		a.logger.Warn("record a task stopped before it started", "err", err)
	}
	r.endAtOnce(a, rec)
	return a
}

// prepare makes the attempt's directory with what the supervisor reads. The directory is
// new: an existing one means the attempt was run before, and it must never run twice.
func (r *runner) prepare(a *attempt, t api.Task) error {
	if err := os.MkdirAll(filepath.Dir(a.dir), 0o755); err != nil {
		return fmt.Errorf("create job directory: %w", err)
	}
	// Traversable, not listable: the job reaches its own job/ inside.
	if err := os.Mkdir(a.dir, 0o711); err != nil {
		return fmt.Errorf("create attempt directory: %w", err)
	}
	t.Env = withJobEnv(t.Env, r.jobEnv)
	// The task may hold secrets in its environment.
	if err := writeJSONAtomic(filepath.Join(a.dir, fileTask), t, 0o600, true); err != nil {
		return fmt.Errorf("write task: %w", err)
	}
	meta := attemptMeta{ClusterID: a.key.cluster, LocalCheckpointDir: localCheckpointDir(r.dataDir, a.key), NoCgroup: r.noCgroup,
		Runtime: r.runtime, MPS: t.GPUShare > 0 && mpsRunning(r.mpsDir), MaxLogSize: r.maxLogSize}
	if err := writeJSONAtomic(filepath.Join(a.dir, fileMeta), meta, 0o644, true); err != nil {
		return fmt.Errorf("write attempt: %w", err)
	}
	if err := reserveStatus(a.dir); err != nil {
		a.logger.Warn("cannot set aside the space to record the attempt's end; it is written as any file is", "err", err)
	}
	return nil
}

// withJobEnv adds the node's job variables to a task's, without overriding the server's,
// in a copy: the task's map is the agent's desired state.
func withJobEnv(env, add map[string]string) map[string]string {
	if len(add) == 0 {
		return env
	}
	out := make(map[string]string, len(env)+len(add))
	for k, v := range add {
		out[k] = v
	}
	for k, v := range env {
		out[k] = v
	}
	return out
}

// startSupervisor starts the attempt's supervisor in a session of its own, detached from
// the agent, so that neither the agent's end nor a signal to its group reaches it.
func (r *runner) startSupervisor(a *attempt) error {
	logFile, err := os.OpenFile(filepath.Join(a.dir, fileSupervisorLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(r.supervisorPath, append(slices.Clone(r.supervisor[1:]), a.dir)...)
	cmd.Args[0] = r.supervisor[0]
	cmd.Dir = "/"
	cmd.Env = r.supervisorEnv
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	a.child = make(chan struct{})
	// Reaping is all this process owes its child; it does not depend on the agent's life.
	go func() {
		_ = cmd.Wait()
		close(a.child)
	}()
	return nil
}

// adopt takes up an attempt found on disk: ended (status.json), running under a live
// supervisor, or left by a supervisor that died.
func (r *runner) adopt(f foundAttempt) *attempt {
	a := r.newAttempt(f.key, f.dir)
	a.endAcked = exists(filepath.Join(f.dir, fileAcked))
	a.stoppedAcked = exists(filepath.Join(f.dir, fileStoppedAcked))
	var st api.StoppedTask
	if ok, _ := readJSON(filepath.Join(f.dir, fileStopped), &st); ok {
		a.stopped = &st
	}
	var req stopRequest
	if ok, _ := readJSON(filepath.Join(f.dir, fileStop), &req); ok {
		a.stopReason = req.Reason
	}
	a.noteStarted()
	r.follow(a)
	return a
}

// endAtOnce ends an attempt that has no supervisor, recording the end where it can.
func (r *runner) endAtOnce(a *attempt, rec endRecord) {
	rec.EndTime = time.Now().UTC()
	rec.RecordedBy = "agent"
	if err := writeStatus(a.dir, rec); err != nil && exists(a.dir) {
		a.logger.Error("record the end", "err", err)
	}
	a.logger.Warn("task not started", "reason", rec.Reason, "message", rec.Message)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.finish(a, rec)
	}()
}

// follow watches the attempt until its end is recorded.
func (r *runner) follow(a *attempt) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			if rec, ok := readStatus(a.dir); ok {
				r.finish(a, rec)
				return
			}
			if !a.supervisorAlive() {
				// A supervisor records the end before it exits; look once more.
				rec, ok := readStatus(a.dir)
				if !ok {
					rec = r.orphan(a)
				}
				r.finish(a, rec)
				return
			}
			if a.noteStarted() {
				r.onChange() // the server learns at once that the job runs
			}
			t := time.NewTimer(r.poll)
			select {
			case <-r.ctx.Done():
				t.Stop()
				return
			case <-a.child:
			case <-t.C:
			}
			t.Stop()
		}
	}()
}

// finish reports the recorded end once the log is shipped or flushWait has passed.
func (r *runner) finish(a *attempt, rec endRecord) {
	close(a.exited)
	if r.flushWait > 0 {
		t := time.NewTimer(r.flushWait)
		select {
		case <-a.logShipped:
		case <-t.C:
		case <-r.ctx.Done():
		}
		t.Stop()
	}
	st := rec.taskStatus(a.key)
	// exited is closed: nothing writes the log any more, so this is its whole size.
	if size, err := fileSize(a.logPath); err == nil {
		st.LogSize = size
	}
	a.mu.Lock()
	a.status = st
	a.ended = true
	a.mu.Unlock()
	a.logger.Info("task ended", "state", rec.State, "reason", rec.Reason, "message", rec.Message, "recorded_by", rec.RecordedBy)
	r.onChange()
}

// supervisorAlive reports whether the attempt's supervisor still runs.
func (a *attempt) supervisorAlive() bool {
	if a.child != nil {
		// This process's own child: its pid cannot be reused before it is reaped.
		return !isClosed(a.child)
	}
	if pid, ok := readInt(filepath.Join(a.dir, fileSupervisorPID)); ok {
		return isSupervisorOf(pid, a.dir)
	}
	// Started but not yet written its pid, or never started at all.
	_, ok := findSupervisor(a.dir)
	return ok
}

// noteStarted fills in the running status from job.json once the job has started, and
// reports whether it just did.
func (a *attempt) noteStarted() bool {
	a.mu.Lock()
	known := a.status.PID != 0
	a.mu.Unlock()
	if known {
		return false
	}
	var job jobRecord
	if ok, _ := readJSON(filepath.Join(a.dir, fileJob), &job); !ok || job.PID == 0 {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ended {
		return false
	}
	start := job.StartTime
	a.status.State, a.status.PID, a.status.StartTime = api.StateRunning, job.PID, &start
	a.status.ImageDigest = job.ImageDigest
	a.job = job
	return true
}

// orphan ends an attempt whose supervisor died without recording the end (killed, or the
// machine restarted): whatever of it still runs is killed, since nobody can say how it
// ends any more, and the attempt ends FAILED with reason node_lost, so the server decides
// whether to run the job again.
func (r *runner) orphan(a *attempt) endRecord {
	var job jobRecord
	_, _ = readJSON(filepath.Join(a.dir, fileJob), &job)
	killed := killRemains(a, job)
	msg := "the attempt's supervisor died without recording its end (killed, or the machine restarted); its outcome is unknown"
	if a.key.legacy {
		msg = "the attempt was started by an earlier version of the agent, without a supervisor; its outcome is unknown"
	}
	if killed > 0 {
		msg += fmt.Sprintf("; %d process(es) of it still running were killed", killed)
	}
	rec := endRecord{State: api.StateFailed, Reason: api.ReasonNodeLost, Message: msg, EndTime: time.Now().UTC(),
		LeaderPID: job.PID, Tracking: job.Tracking, RecordedBy: "agent"}
	if !job.StartTime.IsZero() {
		rec.StartTime = &job.StartTime
	}
	a.mu.Lock()
	a.orphanKilled = killed
	a.mu.Unlock()
	a.logger.Warn("supervisor gone without recording the end", "killed", killed)
	if err := writeStatus(a.dir, rec); err != nil {
		a.logger.Error("record the end", "err", err)
	}
	return rec
}

// killRemains kills every process left of an attempt whose supervisor is gone and says
// how many there were: its cgroup where it had one, else its process group and every
// process whose environment names the attempt (so a recycled pid is never killed).
func killRemains(a *attempt, job jobRecord) int {
	killed := map[int]bool{}
	leaf := job.Cgroup
	if data, err := os.ReadFile(filepath.Join(a.dir, fileCgroup)); err == nil && leaf == "" {
		leaf = strings.TrimSpace(string(data))
	}
	leaves := readCgroups1(a.dir)
	if leaf != "" {
		leaves = append([]string{leaf}, leaves...)
	}
	for _, leaf := range leaves {
		if !exists(leaf) {
			continue
		}
		for i := 0; i < 100; i++ {
			pids, err := cgroupProcs(leaf)
			if err != nil || len(pids) == 0 {
				break
			}
			for _, pid := range pids {
				killed[pid] = true
			}
			cgroupSignal(leaf, syscall.SIGKILL)
			time.Sleep(20 * time.Millisecond)
		}
		if err := removeCgroup(leaf); err != nil {
			a.logger.Warn("cgroup left behind", "err", err)
		}
	}
	if job.Container != "" {
		var meta attemptMeta
		_, _ = readJSON(filepath.Join(a.dir, fileMeta), &meta)
		if err := removeContainer(meta.Runtime, job.Container); err != nil {
			a.logger.Warn("container left behind", "err", err)
		}
	}

	want := []string{
		api.EnvJobID + "=" + strconv.FormatInt(a.key.job, 10),
		api.EnvAttempt + "=" + strconv.Itoa(a.key.attempt),
		api.EnvEventsFile + "=" + eventsPath(a.dir, a.key.legacy),
	}
	pgid := job.PGID
	if a.key.legacy {
		pgid, _ = readInt(filepath.Join(a.dir, legacyPIDFile))
	}
	for range 50 {
		var victims []int
		if pgid > 1 {
			var members []int
			verified := false
			for _, p := range listProcs() {
				if p.pgid == pgid && !p.zombie {
					members = append(members, p.pid)
					verified = verified || environMatches(p.pid, want)
				}
			}
			if verified {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				victims = append(victims, members...)
			}
		}
		for _, pid := range processesWithEnv(want) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			victims = append(victims, pid)
		}
		if len(victims) == 0 {
			break
		}
		for _, pid := range victims {
			killed[pid] = true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return len(killed)
}

// stop asks the supervisor to stop the attempt: stop.json says why, SIGUSR1 says now. The
// first reason wins; asking again only repeats the signal.
func (a *attempt) stop(reason string) {
	if isClosed(a.exited) {
		return
	}
	if a.stopReason == "" {
		a.stopReason = reason
		path := filepath.Join(a.dir, fileStop)
		if !exists(path) {
			if err := writeJSONAtomic(path, stopRequest{Reason: reason}, 0o644, true); err != nil {
				a.logger.Error("ask the supervisor to stop", "err", err)
			}
		}
		a.logger.Info("stopping task", "reason", reason)
	}
	// A supervisor writes its pid once its handlers are in place; before that it reads
	// stop.json by itself.
	if pid, ok := readInt(filepath.Join(a.dir, fileSupervisorPID)); ok && isSupervisorOf(pid, a.dir) {
		if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil && !errors.Is(err, syscall.ESRCH) {
			a.logger.Error("signal the supervisor", "err", err)
		}
	}
}

// snapshot is the status to report now, without events.
func (a *attempt) snapshot() (api.TaskStatus, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status, a.ended
}

func (a *attempt) markLogShipped() { a.logShippedOnce.Do(func() { close(a.logShipped) }) }

// stopReasonOf defaults an unspecified stop to a cancel, the stop a user asks for.
func stopReasonOf(t api.Task) string {
	if t.StopReason == "" {
		return api.ReasonCancelled
	}
	return t.StopReason
}
