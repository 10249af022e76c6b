package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// taskKey names one attempt of one job on this node.
type taskKey struct {
	job     int64
	attempt int
}

func (k taskKey) String() string { return fmt.Sprintf("%d/%d", k.job, k.attempt) }

// runner starts task attempts as processes and supervises them to their end.
type runner struct {
	dataDir string
	// baseEnv is the agent's own environment, the first layer of every job's.
	baseEnv []string
	logger  *slog.Logger
	// flushWait bounds how long an ended task waits for its log to reach the server before
	// its end is reported, so the server usually sees a complete log with the end state but
	// never waits on an unreachable server.
	flushWait time.Duration
	// onChange is called when a task's reported status changes.
	onChange func()
}

// proc is one task attempt: its files, its process and its reported status.
type proc struct {
	task       api.Task
	key        taskKey
	dir        string
	logPath    string
	noticePath string
	logger     *slog.Logger

	// stopCh carries stop reasons to the supervisor; the first one wins.
	stopCh chan string
	// exited is closed once the process group is gone, so output.log no longer grows.
	exited chan struct{}
	// logShipped is closed by the log shipper once it will send no more.
	logShipped     chan struct{}
	logShippedOnce sync.Once

	// events is read only by the agent's reconcile loop.
	events *eventsReader

	mu     sync.Mutex // guards the fields below
	status api.TaskStatus
	ended  bool
}

// notice is what a job finds in ROTA_NOTICE_FILE when it is being stopped.
type notice struct {
	Reason   string    `json:"reason"`
	Deadline time.Time `json:"deadline"`
}

func (r *runner) attemptDir(k taskKey) string {
	return filepath.Join(r.dataDir, "jobs", strconv.FormatInt(k.job, 10), strconv.Itoa(k.attempt))
}

func (r *runner) newProc(t api.Task) *proc {
	k := taskKey{t.JobID, t.Attempt}
	dir := r.attemptDir(k)
	logger := r.logger.With("job", t.JobID, "attempt", t.Attempt)
	return &proc{
		task:       t,
		key:        k,
		dir:        dir,
		logPath:    filepath.Join(dir, "output.log"),
		noticePath: filepath.Join(dir, "notice.json"),
		logger:     logger,
		stopCh:     make(chan string, 1),
		exited:     make(chan struct{}),
		logShipped: make(chan struct{}),
		events:     &eventsReader{path: filepath.Join(dir, "events.jsonl"), logger: logger},
		status:     api.TaskStatus{JobID: t.JobID, Attempt: t.Attempt, State: api.StateRunning},
	}
}

// stopBeforeStart ends a task the server asked to stop before this agent ever ran it, so the
// server hears an end instead of waiting for one.
func (r *runner) stopBeforeStart(t api.Task, reason string) *proc {
	p := r.newProc(t)
	state, reason := stopOutcome(reason)
	r.endUnstarted(p, state, reason, "stopped ("+reason+") before it started on this node")
	return p
}

// stopOutcome is the end state of a task stopped for reason. Only the agent's own time
// limit and a cancel have states of their own; any other stop (preemption, drain) is a
// failure whose reason lets the server decide what follows.
func stopOutcome(reason string) (api.JobState, string) {
	switch reason {
	case api.ReasonTimeout:
		return api.StateTimeout, api.ReasonTimeout
	case api.ReasonCancelled, "":
		return api.StateCancelled, api.ReasonCancelled
	}
	return api.StateFailed, reason
}

// start launches the attempt. It always returns a proc: one that could not start is
// already ended, FAILED with a reason, so the server hears about it like any other end.
func (r *runner) start(t api.Task) *proc {
	p := r.newProc(t)
	dir := p.dir

	// Mkdir, not MkdirAll, on the attempt itself: an existing directory means an earlier
	// agent process started this attempt, and an attempt must never run twice.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		r.endUnstarted(p, api.StateFailed, api.ReasonStartError, fmt.Sprintf("create job directory: %v", err))
		return p
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, os.ErrExist) {
			// Stopping what the earlier agent left running takes up to the grace period;
			// the reconcile loop must not wait for it.
			go r.reapOrphan(p)
			return p
		}
		r.endUnstarted(p, api.StateFailed, api.ReasonStartError, fmt.Sprintf("create attempt directory: %v", err))
		return p
	}
	logFile, err := os.OpenFile(p.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		r.endUnstarted(p, api.StateFailed, api.ReasonStartError, fmt.Sprintf("create log file: %v", err))
		return p
	}
	defer logFile.Close()

	cmd, err := r.command(p)
	if err == nil {
		cmd.Stdout = logFile
		cmd.Stderr = logFile
		err = cmd.Start()
		if err != nil {
			err = fmt.Errorf("cannot start %q: %w", t.Command[0], err)
		}
	}
	if err != nil {
		// The log is where a user looks first, so the reason goes there too.
		fmt.Fprintf(logFile, "rota: %v\n", err)
		r.endUnstarted(p, api.StateFailed, api.ReasonStartError, err.Error())
		return p
	}

	// The process group is recorded so that an agent restarted over this data directory
	// can find and stop it (see reapOrphan).
	if err := os.WriteFile(filepath.Join(dir, pidFile), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		p.logger.Error("record the task's process group", "err", err)
	}
	now := time.Now()
	p.status.PID = cmd.Process.Pid
	p.status.StartTime = &now
	p.logger.Info("task started", "pid", cmd.Process.Pid, "gpus", t.GPUIndices, "command", t.Command)
	go r.supervise(p, cmd)
	return p
}

// command prepares the process of p, or says why it cannot start.
func (r *runner) command(p *proc) (*exec.Cmd, error) {
	t := p.task
	if len(t.Command) == 0 || t.Command[0] == "" {
		return nil, errors.New("empty command")
	}
	workDir := p.dir
	if t.WorkDir != "" {
		fi, err := os.Stat(t.WorkDir)
		if err != nil {
			return nil, fmt.Errorf("working directory: %w", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("working directory %s is not a directory", t.WorkDir)
		}
		workDir = t.WorkDir
	}
	checkpoints := filepath.Join(r.dataDir, "checkpoints", strconv.FormatInt(t.JobID, 10))
	if err := os.MkdirAll(checkpoints, 0o755); err != nil {
		return nil, fmt.Errorf("create checkpoint directory: %w", err)
	}
	if err := os.WriteFile(p.events.path, nil, 0o644); err != nil {
		return nil, fmt.Errorf("create events file: %w", err)
	}

	cmd := exec.Command(t.Command[0], t.Command[1:]...)
	cmd.Dir = workDir
	cmd.Env = r.env(t, checkpoints, p.events.path, p.noticePath)
	// Its own process group, so a stop reaches everything the job started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd, nil
}

// env layers the job's environment: the agent's own, then the task's, then what only this
// node can know, which wins over anything the task says.
func (r *runner) env(t api.Task, checkpoints, eventsPath, noticePath string) []string {
	vars := make(map[string]string, len(r.baseEnv)+len(t.Env)+8)
	for _, kv := range r.baseEnv {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	for k, v := range t.Env {
		vars[k] = v
	}
	// The server sets these, but the agent knows them too; a job should never miss them.
	if _, ok := t.Env[api.EnvJobID]; !ok {
		vars[api.EnvJobID] = strconv.FormatInt(t.JobID, 10)
	}
	if _, ok := t.Env[api.EnvAttempt]; !ok {
		vars[api.EnvAttempt] = strconv.Itoa(t.Attempt)
	}
	gpus := make([]string, len(t.GPUIndices))
	for i, g := range t.GPUIndices {
		gpus[i] = strconv.Itoa(g)
	}
	// Empty, not unset: unset would let a CPU job see every GPU of the node.
	vars[api.EnvCUDAVisibleDevices] = strings.Join(gpus, ",")
	vars[api.EnvCheckpointDir] = checkpoints
	vars[api.EnvEventsFile] = eventsPath
	vars[api.EnvNoticeFile] = noticePath

	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

// endUnstarted ends a task that never ran.
func (r *runner) endUnstarted(p *proc, state api.JobState, reason, msg string) {
	now := time.Now()
	p.logger.Warn("task not started", "reason", reason, "message", msg)
	close(p.exited)
	p.mu.Lock()
	p.status.State = state
	p.status.Reason = reason
	p.status.Message = msg
	p.status.EndTime = &now
	p.ended = true
	p.mu.Unlock()
	r.onChange()
}

// supervise waits for the process, carries out a stop or the time limit, and reports the
// end. It is deliberately not tied to the agent's context: a job outlives a lost server.
func (r *runner) supervise(p *proc, cmd *exec.Cmd) {
	pgid := cmd.Process.Pid
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	var limit <-chan time.Time
	if end := p.task.TimeLimitEnd; !end.IsZero() {
		t := time.NewTimer(time.Until(end))
		defer t.Stop()
		limit = t.C
	}
	var kill <-chan time.Time
	stopping := ""
	beginStop := func(reason string) {
		if stopping != "" {
			return
		}
		stopping = reason
		grace := time.Duration(p.task.GraceSeconds) * time.Second
		t := time.NewTimer(grace)
		kill = t.C
		sig := p.signal()
		if err := writeNotice(p.noticePath, notice{Reason: reason, Deadline: time.Now().Add(grace).UTC()}); err != nil {
			p.logger.Error("write stop notice", "err", err)
		}
		p.logger.Info("stopping task", "reason", reason, "signal", sig.String(), "grace", grace)
		if err := syscall.Kill(-pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			p.logger.Error("signal task", "err", err)
		}
	}

	for {
		select {
		case err := <-waited:
			// The leader is gone; anything it left behind in its group goes with it.
			killGroup(pgid)
			r.finish(p, cmd.ProcessState, err, stopping)
			return
		case <-limit:
			limit = nil
			beginStop(api.ReasonTimeout)
		case reason := <-p.stopCh:
			beginStop(reason)
		case <-kill:
			kill = nil
			p.logger.Info("grace period over, killing task")
			killGroup(pgid)
		}
	}
}

func killGroup(pgid int) {
	// ESRCH only means the group is already empty.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// signal is the task's stop signal; a bad name falls back to SIGTERM rather than leave a
// job without its warning.
func (p *proc) signal() syscall.Signal {
	sig, err := parseSignal(p.task.Signal)
	if err != nil {
		p.logger.Warn("bad stop signal, using SIGTERM", "err", err)
		return syscall.SIGTERM
	}
	return sig
}

// finish records how the process ended, then reports it once the log is shipped or
// flushWait has passed.
func (r *runner) finish(p *proc, ps *os.ProcessState, waitErr error, stopping string) {
	close(p.exited)
	now := time.Now()
	st := api.TaskStatus{State: api.StateFailed}
	var code *int
	desc := ""
	switch {
	case ps == nil:
		desc = fmt.Sprintf("lost track of the process: %v", waitErr)
	default:
		c := ps.ExitCode()
		ws, ok := ps.Sys().(syscall.WaitStatus)
		if ok && ws.Signaled() {
			c = 128 + int(ws.Signal())
			desc = fmt.Sprintf("killed by signal %d, %s (exit code %d)", int(ws.Signal()), ws.Signal(), c)
		} else {
			desc = fmt.Sprintf("exited with code %d", c)
		}
		code = &c
	}
	switch {
	case stopping == api.ReasonTimeout:
		st.State, st.Reason = stopOutcome(stopping)
		st.Message = "time limit reached; " + desc
	case stopping != "":
		st.State, st.Reason = stopOutcome(stopping)
		st.Message = "stopped (" + stopping + "); " + desc
	case code != nil && *code == 0:
		st.State = api.StateSucceeded
	default:
		st.Reason = api.ReasonExitCode
		st.Message = desc
	}
	p.logger.Info("task ended", "state", st.State, "reason", st.Reason, "detail", desc)

	if r.flushWait > 0 {
		t := time.NewTimer(r.flushWait)
		select {
		case <-p.logShipped:
		case <-t.C:
		}
		t.Stop()
	}
	p.mu.Lock()
	p.status.State = st.State
	p.status.Reason = st.Reason
	p.status.Message = st.Message
	p.status.ExitCode = code
	p.status.EndTime = &now
	p.ended = true
	p.mu.Unlock()
	r.onChange()
}

// stop asks the supervisor to stop the task; later requests are ignored.
func (p *proc) stop(reason string) {
	select {
	case p.stopCh <- reason:
	default:
	}
}

// snapshot is the status to report now, without events.
func (p *proc) snapshot() (api.TaskStatus, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status, p.ended
}

func (p *proc) markLogShipped() { p.logShippedOnce.Do(func() { close(p.logShipped) }) }

// writeNotice replaces the notice file in one step, so a job polling it never reads half.
func writeNotice(path string, n notice) error {
	data, err := json.Marshal(n)
	if err != nil {
		return fmt.Errorf("encode notice: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write notice: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write notice: %w", err)
	}
	return nil
}

// pidFile, in an attempt's directory, holds the process group the agent started for it.
const pidFile = "pid"

// reapOrphan handles an attempt an earlier agent process started: its outcome is unknown,
// since the exit status went to the dead agent. Whatever of it still runs is stopped the
// way any job is stopped (notice, signal, grace, kill) so that it cannot keep holding GPUs
// the server gives to its next attempt; the attempt then ends FAILED with reason node_lost,
// and the server requeues the job while it has retries left.
func (r *runner) reapOrphan(p *proc) {
	msg := "the agent restarted while this attempt ran; its outcome is unknown, so it is not run twice"
	if pgid, ok := orphanGroup(p); ok {
		grace := time.Duration(p.task.GraceSeconds) * time.Second
		if err := writeNotice(p.noticePath, notice{Reason: api.ReasonNodeLost, Deadline: time.Now().Add(grace).UTC()}); err != nil {
			p.logger.Error("write stop notice", "err", err)
		}
		p.logger.Warn("stopping a task left running by an earlier agent", "pgid", pgid, "grace", grace)
		_ = syscall.Kill(-pgid, p.signal())
		deadline := time.Now().Add(grace)
		for time.Now().Before(deadline) && syscall.Kill(-pgid, 0) == nil {
			time.Sleep(100 * time.Millisecond)
		}
		killGroup(pgid)
		msg = fmt.Sprintf("the agent restarted while this attempt ran (process group %d); it was stopped so that it is not run twice", pgid)
	}
	r.endUnstarted(p, api.StateFailed, api.ReasonNodeLost, msg)
}

// orphanGroup returns the attempt's recorded process group if it still runs and is this
// attempt's: the leader's environment must name the job and attempt, so a recycled PID is
// never signalled.
func orphanGroup(p *proc) (int, bool) {
	data, err := os.ReadFile(filepath.Join(p.dir, pidFile))
	if err != nil {
		return 0, false
	}
	pgid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pgid <= 1 || syscall.Kill(-pgid, 0) != nil {
		return 0, false
	}
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pgid))
	if err != nil {
		return 0, false
	}
	vars := strings.Split(string(env), "\x00")
	want := []string{api.EnvJobID + "=" + strconv.FormatInt(p.key.job, 10), api.EnvAttempt + "=" + strconv.Itoa(p.key.attempt)}
	for _, w := range want {
		if !slices.Contains(vars, w) {
			return 0, false
		}
	}
	return pgid, true
}
