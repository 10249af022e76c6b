package agent

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/atomicfile"
)

// reasonNodeShutdown is the stop reason of a supervisor told to stop by SIGTERM: the node
// is going down.
const reasonNodeShutdown = api.ReasonNodeShutdown

// supervisorPoll is how often a supervisor looks for a stop request it may have missed
// and for children it was not told about.
const supervisorPoll = time.Second

// notice is what a job finds in ROTA_NOTICE_FILE when it is being stopped.
type notice struct {
	Reason   string    `json:"reason"`
	Deadline time.Time `json:"deadline"`
	// CheckpointDir is ROTA_CHECKPOINT_DIR; CheckpointsShared says whether the next
	// attempt finds it wherever it runs. Checkpoints says so in words.
	CheckpointDir     string `json:"checkpoint_dir"`
	CheckpointsShared bool   `json:"checkpoints_shared"`
	Checkpoints       string `json:"checkpoints,omitempty"`
}

// localCheckpointsNote is the notice's warning where checkpoints stay on the node.
const localCheckpointsNote = "checkpoints are kept on this node only: a requeued attempt on another node starts without them"

// SuperviseMain is `rota supervise ATTEMPT_DIR`, the process that runs one attempt for the
// agent and outlives it (the role of containerd-shim or Nomad's executor). The agent starts
// it in its own session with the attempt's directory prepared (task.json, attempt.json);
// it starts the job, owns its process tree, carries out the time limit and stops, records
// the end in status.json, and exits. See doc.go for the protocol.
func SuperviseMain(args []string, stderr io.Writer) int {
	if len(args) == 1 && args[0] == supervisorProbeArg {
		return 0 // the agent checks that it can start supervisors (startfault.go)
	}
	if len(args) != 1 || !filepath.IsAbs(args[0]) {
		fmt.Fprintln(stderr, "usage: rota supervise ATTEMPT_DIR\n\nRuns one job attempt for rota agent, which starts it; ATTEMPT_DIR is absolute.")
		return 2
	}
	dir := filepath.Clean(args[0])
	s := &supervisor{
		dir:    dir,
		logger: slog.New(slog.NewTextHandler(stderr, nil)).With("attempt_dir", dir, "pid", os.Getpid()),
	}
	if err := s.run(); err != nil {
		s.logger.Error("supervisor failed", "err", err)
		return 1
	}
	return 0
}

// supervisor runs one attempt. It is the job's parent and a child subreaper, so every
// process the job starts comes back to it to be reaped.
type supervisor struct {
	dir    string
	logger *slog.Logger
	sigs   chan os.Signal
	task   api.Task
	meta   attemptMeta
	output *os.File

	// Set once the job has started.
	job      jobRecord
	jobDir   string
	notice   notice
	leaderWS *unix.WaitStatus
	stopping string
	// leftBehind counts the processes still running when the leader exited.
	leftBehind int
	// spec is the job as started: for a container task, its runtime and container.
	spec jobSpec

	// The attempt's cgroup v1 leaves, and the cgroup that measures its memory (a v2 leaf,
	// or the v1 memory leaf where memV1), once made; memEnd is what that said at the end.
	cgroups1  []string
	memCgroup string
	memV1     bool
	memEnd    memoryEnd
	// limits says which limits were enforced, and how.
	limits string
	// containerKilled is set once a kill has removed the task's container.
	containerKilled bool
	// tty is an interactive job's terminal.
	tty *ttyJob
	// outputPipe is the read end of a job's stdout and stderr, which copyOutput reads
	// into its log until it closes outputDone (outputcap.go).
	outputPipe *os.File
	outputDone chan struct{}
}

func (s *supervisor) run() error {
	// Handlers first: the agent signals only a supervisor whose pid file exists, and
	// SIGUSR1's default action would kill it.
	s.sigs = make(chan os.Signal, 64)
	// SIGHUP and SIGINT are caught and dropped, not ignored: an ignored signal stays
	// ignored in the job, whose Ctrl-C (on a terminal) or --signal INT would do nothing.
	signal.Notify(s.sigs, syscall.SIGCHLD, syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGINT)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		s.logger.Warn("cannot become child subreaper; processes that leave the job's group may escape", "err", err)
	}
	if err := atomicfile.Write(filepath.Join(s.dir, fileSupervisorPID), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644, true); err != nil {
		return fmt.Errorf("write pid file: %w", err)
	}
	var err error
	s.output, err = os.OpenFile(filepath.Join(s.dir, fileOutput), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return s.endUnstarted(api.StateFailed, api.ReasonStartError, fmt.Sprintf("create log file: %v", err))
	}
	defer s.output.Close()
	if _, err := readJSON(filepath.Join(s.dir, fileTask), &s.task); err != nil {
		return s.failStart(fmt.Errorf("read the task: %w", err))
	}
	if _, err := readJSON(filepath.Join(s.dir, fileMeta), &s.meta); err != nil {
		return s.failStart(fmt.Errorf("read the attempt: %w", err))
	}
	s.logger = s.logger.With("job", s.task.JobID, "attempt", s.task.Attempt)
	// The pid file is written, so a stop asked before now is in stop.json; one asked
	// after comes with SIGUSR1.
	if reason, ok := s.readStop(); ok {
		state, reason := stopOutcome(reason)
		return s.endUnstarted(state, reason, "stopped ("+reason+") before it started on this node")
	}
	spec, err := s.prepare()
	var stopped errStopped
	if errors.As(err, &stopped) {
		state, reason := stopOutcome(stopped.reason)
		return s.endUnstarted(state, reason, stopped.Error())
	}
	if err != nil {
		return s.failStart(err)
	}
	if err := s.start(spec); err != nil {
		return s.failStart(err)
	}
	s.supervise()
	s.endAll()
	s.drainOutput()
	if s.tty != nil {
		s.tty.close()
	}
	return s.record()
}

// jobSpec is a job ready to start.
type jobSpec struct {
	path    string
	argv    []string
	dir     string
	env     []string
	cred    *syscall.Credential
	cluster string
	// For a task with an image: the runtime, the container's name (podman, docker) and
	// the image's digest.
	runtime   containerRuntime
	container string
	digest    string
}

// prepare resolves the account, creates the job's directories and builds its environment.
// Its errors are start errors the user can act on.
func (s *supervisor) prepare() (jobSpec, error) {
	t := s.task
	if len(t.Command) == 0 || t.Command[0] == "" {
		return jobSpec{}, errors.New("empty command")
	}
	acct, err := resolveAccount(t, os.Geteuid())
	if err != nil {
		return jobSpec{}, err
	}
	if t.RunAs == "" && os.Geteuid() == 0 {
		s.logger.Warn("the task names no account; running it as the agent's own, root")
	}
	s.jobDir = filepath.Join(s.dir, dirJob)
	if err := mkdirOwned(s.jobDir, acct, true); err != nil {
		return jobSpec{}, fmt.Errorf("create job directory: %w", err)
	}
	events := eventsPath(s.dir, false)
	if err := createOwned(events, acct); err != nil {
		return jobSpec{}, fmt.Errorf("create events file: %w", err)
	}

	ckpt, shared := s.meta.LocalCheckpointDir, false
	if t.CheckpointDir != "" {
		ckpt, shared = t.CheckpointDir, true
		if !filepath.IsAbs(ckpt) {
			return jobSpec{}, fmt.Errorf("checkpoint directory %q is not an absolute path", ckpt)
		}
		// Shared storage may refuse root (NFS root_squash); the job may still manage.
		if err := mkdirOwned(ckpt, acct, false); err != nil {
			fmt.Fprintf(s.output, "rota: warning: cannot create the checkpoint directory %s: %v; starting anyway\n", ckpt, err)
			s.logger.Warn("cannot create the shared checkpoint directory", "dir", ckpt, "err", err)
		}
	} else if err := mkdirOwned(ckpt, acct, true); err != nil {
		return jobSpec{}, fmt.Errorf("create checkpoint directory: %w", err)
	}
	s.notice = notice{CheckpointDir: ckpt, CheckpointsShared: shared}
	if !shared {
		s.notice.Checkpoints = localCheckpointsNote
	}

	workDir := s.jobDir
	if t.WorkDir != "" {
		fi, err := os.Stat(t.WorkDir)
		if err != nil {
			return jobSpec{}, fmt.Errorf("working directory: %w", err)
		}
		if !fi.IsDir() {
			return jobSpec{}, fmt.Errorf("working directory %s is not a directory", t.WorkDir)
		}
		workDir = t.WorkDir
	}

	gpus := visibleDevices(t.GPUIndices, t.GPUIDs)
	local := map[string]string{
		api.EnvJobID:   strconv.FormatInt(t.JobID, 10),
		api.EnvAttempt: strconv.Itoa(t.Attempt),
		// Empty, not unset: unset would let a CPU job see every GPU of the node.
		api.EnvCUDAVisibleDevices: strings.Join(gpus, ","),
		api.EnvCheckpointDir:      ckpt,
		api.EnvEventsFile:         events,
		api.EnvNoticeFile:         noticePath(s.dir),
	}
	shareEnv(t, s.meta.MPS, local)
	// CUDA numbers devices fastest first unless told otherwise; the node's indices are
	// NVML's, in PCI bus order.
	if _, set := t.Env[envCUDADeviceOrder]; !set {
		local[envCUDADeviceOrder] = "PCI_BUS_ID"
	}
	env := jobEnv(t, acct, os.Environ(), local)
	if t.Image != "" {
		return s.prepareContainer(acct, env, local, workDir, ckpt)
	}
	path, err := lookPath(t.Command[0], envValue(env, "PATH"))
	if err != nil {
		return jobSpec{}, fmt.Errorf("cannot start %q: %w", t.Command[0], err)
	}
	return jobSpec{path: path, argv: t.Command, dir: workDir, env: env, cred: acct.credential(), cluster: s.meta.ClusterID}, nil
}

// visibleDevices is CUDA_VISIBLE_DEVICES for a task's devices: a whole GPU by its index, a
// MIG device by its UUID, which is the only name CUDA takes for one.
func visibleDevices(indices []int, uuids []string) []string {
	out := make([]string, len(indices))
	for i, g := range indices {
		out[i] = strconv.Itoa(g)
		if i < len(uuids) && isMIGUUID(uuids[i]) {
			out[i] = uuids[i]
		}
	}
	return out
}

// envCUDADeviceOrder is how CUDA is told to number GPUs as NVML does.
const envCUDADeviceOrder = "CUDA_DEVICE_ORDER"

// prepareContainer makes the job a run of its image through the node's runtime: the image
// pulled where missing (a stop meanwhile ends the pull), its digest recorded, the job's
// directories mounted at the same paths and its variables passed in.
func (s *supervisor) prepareContainer(acct account, env []string, local map[string]string, workDir, ckpt string) (jobSpec, error) {
	t, rt := s.task, s.meta.Runtime
	if rt.Name == "" || rt.Path == "" {
		return jobSpec{}, fmt.Errorf("image %s: node has no container runtime", t.Image)
	}
	c := containerJob{
		image: t.Image, command: t.Command, workDir: workDir,
		mounts: []string{workDir, ckpt, s.jobDir},
		uid:    acct.uid, gid: acct.gid, groups: acct.groups,
		gpus: containerGPUs(t.GPUIndices, t.GPUIDs), realGPUs: nvidiaPresent("/dev", cdiDirs),
		limits: planLimits(t.MemoryMB, t.CPUs),
		env:    map[string]string{},
	}
	for k, v := range t.Env {
		c.env[k] = v
	}
	for k, v := range local {
		c.env[k] = v
	}
	spec := jobSpec{dir: workDir, cluster: s.meta.ClusterID, runtime: rt}
	clientEnv := os.Environ()
	if rt.Name == runtimeApptainer {
		// Apptainer runs the job as a process of its caller: the job's account.
		clientEnv, spec.cred = env, acct.credential()
	} else {
		c.name = containerName(s.meta.ClusterID, t.JobID, t.Attempt, t.Rank)
		spec.container = c.name
		if c.realGPUs && len(t.GPUIndices) > 0 {
			// The container sees only its GPUs, numbered from 0.
			seq := make([]string, len(t.GPUIndices))
			for i := range seq {
				seq[i] = strconv.Itoa(i)
			}
			c.env[api.EnvCUDAVisibleDevices] = strings.Join(seq, ",")
		}
		ref, err := s.pullImage(rt, t.Image)
		if err != nil {
			return jobSpec{}, err
		}
		// Run the very image whose digest is recorded, even if the tag moves meanwhile.
		c.image, spec.digest = ref.id, ref.digest
		// A container of this attempt can only be left by a supervisor that died: this
		// attempt must not run twice.
		if err := removeContainer(rt, c.name); err != nil {
			s.logger.Warn("remove a stale container", "err", err)
		}
	}
	spec.argv, spec.env = containerCommand(rt, c, clientEnv)
	spec.path = rt.Path
	return spec, nil
}

// mkdirOwned makes dir, mode 0700, for the job's account. own says the directory is the
// node's, under a parent only the agent's account may change, so an existing one is handed
// to the account too; a shared one that exists is left as it is.
func mkdirOwned(dir string, acct account, own bool) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	err := os.Mkdir(dir, 0o700)
	created := err == nil
	if err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if acct.switchTo && (created || own) {
		return os.Lchown(dir, acct.uid, acct.gid)
	}
	return nil
}

// createOwned creates an empty file for the job; it must not exist (nor be a link).
func createOwned(path string, acct account) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if acct.switchTo {
		return f.Chown(acct.uid, acct.gid)
	}
	return nil
}

// start starts the job in its own process group, in a cgroup v2 leaf where it can make
// one, and records how it tracks it.
func (s *supervisor) start(spec jobSpec) error {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	attr := &os.ProcAttr{
		Dir: spec.dir,
		Env: spec.env,
		Sys: &syscall.SysProcAttr{Setpgid: true, Credential: spec.cred},
	}
	output := newCappedOutput(s.output, s.meta.MaxLogSize, s.logger)
	var master, pipeW *os.File
	if !s.task.TTY {
		// stdout and stderr are one pipe, which the supervisor reads into the log
		// (outputcap.go); the job's process holds the only write end.
		r, w, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("make the job's output pipe: %w", err)
		}
		defer w.Close()
		s.outputPipe, pipeW = r, w
		attr.Files = []*os.File{devnull, w, w}
	} else {
		// The terminal is the job's stdin, stdout and stderr, and its controlling
		// terminal: the job leads a session of its own, whose ID is its process group.
		uid := -1
		if spec.cred != nil {
			uid = int(spec.cred.Uid)
		}
		m, slave, err := openTTY(uid)
		if err != nil {
			return err
		}
		defer slave.Close()
		master = m
		attr.Files = []*os.File{slave, slave, slave}
		attr.Sys.Setpgid, attr.Sys.Setsid, attr.Sys.Setctty, attr.Sys.Ctty = false, true, true, 0
	}

	s.spec = spec
	var proc *os.Process
	leaf, cgfd, why := s.makeCgroup(spec.cluster)
	s.limits = s.applyLimits(leaf, spec)
	if s.limits != "" {
		s.logger.Info("limits", "limits", s.limits)
	}
	// From here to leave() the supervisor is in the job's v1 leaves: nothing but the
	// start may happen.
	leave := s.enterCgroups1()
	if cgfd != nil {
		attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = true, int(cgfd.Fd())
		proc, err = os.StartProcess(spec.path, spec.argv, attr)
		cgfd.Close()
		if err != nil {
			// Nothing ran: either the kernel refused the cgroup or the command failed to
			// exec. Try once more without the cgroup; a real start error repeats.
			why = fmt.Sprintf("starting in cgroup %s failed (%v)", leaf, err)
			_ = removeCgroup(leaf)
			_ = os.Remove(filepath.Join(s.dir, fileCgroup))
			if s.memCgroup == leaf {
				s.memCgroup = ""
			}
			leaf = ""
			attr.Sys.UseCgroupFD, attr.Sys.CgroupFD = false, 0
		}
	}
	if proc == nil {
		if proc, err = os.StartProcess(spec.path, spec.argv, attr); err != nil {
			leave()
			s.cleanCgroups(leaf)
			if master != nil {
				master.Close()
			}
			if s.outputPipe != nil {
				s.outputPipe.Close()
				s.outputPipe = nil
			}
			if spec.runtime.Name != "" {
				return fmt.Errorf("cannot start the container runtime %s: %w", spec.runtime.Path, err)
			}
			return fmt.Errorf("cannot start %q: %w", s.task.Command[0], err)
		}
	}
	leave()
	s.job = jobRecord{PID: proc.Pid, PGID: proc.Pid, StartTime: time.Now().UTC(), Tracking: trackProcessGroup, Cgroup: leaf,
		Cgroups1: s.cgroups1, Container: spec.container, ImageDigest: spec.digest}
	if leaf != "" {
		s.job.Tracking = trackCgroup
		s.logger.Info("job started", "leader", proc.Pid, "tracking", trackCgroup, "cgroup", leaf)
	} else {
		s.logger.Info("job started", "leader", proc.Pid, "tracking", trackProcessGroup, "why", why)
	}
	// The supervisor reaps with wait4(-1); the handle is not needed.
	_ = proc.Release()
	if pipeW != nil {
		// Only the job holds the write end now: the pipe ends when its processes do.
		pipeW.Close()
		s.outputDone = make(chan struct{})
		go copyOutput(s.outputPipe, output, s.outputDone)
	}
	if master != nil {
		if s.tty, err = serveTTY(s.dir, master, output, proc.Pid, s.logger); err != nil {
			// The job runs, and its output reaches the log; no terminal can attach.
			s.logger.Error("serve the job's terminal", "err", err)
			go func() { _, _ = io.Copy(output, master) }()
		}
	}
	if err := writeJSONAtomic(filepath.Join(s.dir, fileJob), s.job, 0o644, true); err != nil {
		s.logger.Error("record the job's process group", "err", err)
	}
	return nil
}

// cleanCgroups removes the cgroups of a job that did not start.
func (s *supervisor) cleanCgroups(leaf string) {
	if leaf != "" {
		_ = removeCgroup(leaf)
	}
	_ = removeCgroups1(s.cgroups1)
	s.cgroups1, s.memCgroup = nil, ""
}

// makeCgroup creates the attempt's leaf under the supervisor's own cgroup and records it.
// It returns a nil file, and why, where it cannot: no cgroup v2, no permission.
func (s *supervisor) makeCgroup(cluster string) (string, *os.File, string) {
	if s.meta.NoCgroup {
		return "", nil, "the agent asked for no cgroup"
	}
	parent, err := attemptCgroup2Parent()
	if err != nil {
		return "", nil, "no cgroup v2: " + err.Error()
	}
	leaf := filepath.Join(parent, cgroupLeafName(cluster, s.task.JobID, s.task.Attempt, s.dir))
	// Record it before it exists, so an agent cleaning up after this supervisor finds it.
	if err := atomicfile.Write(filepath.Join(s.dir, fileCgroup), []byte(leaf+"\n"), 0o644, true); err != nil {
		return "", nil, "record the cgroup: " + err.Error()
	}
	err = os.Mkdir(leaf, 0o755)
	if errors.Is(err, os.ErrExist) {
		// Left by a supervisor of this very directory that died; it must be empty.
		cgroupSignal(leaf, syscall.SIGKILL)
		if err = removeCgroup(leaf); err == nil {
			err = os.Mkdir(leaf, 0o755)
		}
	}
	if err != nil {
		_ = os.Remove(filepath.Join(s.dir, fileCgroup))
		return "", nil, fmt.Sprintf("cannot create cgroup %s: %v", leaf, err)
	}
	fd, err := os.Open(leaf)
	if err != nil {
		_ = removeCgroup(leaf)
		_ = os.Remove(filepath.Join(s.dir, fileCgroup))
		return "", nil, fmt.Sprintf("cannot open cgroup %s: %v", leaf, err)
	}
	return leaf, fd, ""
}

// supervise waits for the leader to exit, carrying out stops and the time limit meanwhile.
func (s *supervisor) supervise() {
	var limit, kill <-chan time.Time
	if end := s.task.TimeLimitEnd; !end.IsZero() {
		t := time.NewTimer(time.Until(end))
		defer t.Stop()
		limit = t.C
	}
	poll := time.NewTicker(supervisorPoll)
	defer poll.Stop()
	stop := func(reason string) {
		if s.stopping != "" {
			return
		}
		kill = s.beginStop(reason)
	}
	for s.leaderWS == nil {
		select {
		case sig := <-s.sigs:
			switch sig {
			case syscall.SIGCHLD:
				s.reap()
			case syscall.SIGUSR1:
				if reason, ok := s.readStop(); ok {
					stop(reason)
				}
			case syscall.SIGTERM:
				stop(reasonNodeShutdown)
			}
		case <-limit:
			limit = nil
			stop(api.ReasonTimeout)
		case <-kill:
			kill = nil
			s.logger.Info("grace period over, killing the job")
			s.signalAll(syscall.SIGKILL)
		case <-poll.C:
			s.reap()
			if reason, ok := s.readStop(); ok {
				stop(reason)
			}
		}
	}
}

// beginStop writes the notice, warns the job with its signal and returns when to kill it.
func (s *supervisor) beginStop(reason string) <-chan time.Time {
	s.stopping = reason
	grace := time.Duration(s.task.GraceSeconds) * time.Second
	sig, err := parseSignal(s.task.Signal)
	if err != nil {
		s.logger.Warn("bad stop signal, using SIGTERM", "err", err)
		sig = syscall.SIGTERM
	}
	n := s.notice
	n.Reason, n.Deadline = reason, time.Now().Add(grace).UTC()
	if err := writeNotice(s.jobDir, n); err != nil {
		s.logger.Error("write stop notice", "err", err)
	}
	s.logger.Info("stopping the job", "reason", reason, "signal", sig.String(), "grace", grace)
	s.signalAll(sig)
	return time.After(grace)
}

// signalAll sends sig to the job's process group and to every other process of the
// attempt: those of its cgroup and the supervisor's descendants.
func (s *supervisor) signalAll(sig syscall.Signal) {
	// The container runs under the runtime's monitor: its client forwards catchable
	// signals to it, and a kill removes it, before the monitor dies with the rest.
	if sig == syscall.SIGKILL && s.spec.container != "" && !s.containerKilled {
		s.containerKilled = true
		if err := removeContainer(s.spec.runtime, s.spec.container); err != nil {
			s.logger.Warn("kill the container", "err", err)
		}
	}
	if s.job.Cgroup != "" && sig == syscall.SIGKILL {
		cgroupSignal(s.job.Cgroup, sig)
	}
	if s.job.PGID > 0 {
		_ = syscall.Kill(-s.job.PGID, sig)
	}
	for _, pid := range s.others() {
		_ = syscall.Kill(pid, sig)
	}
}

// others lists the attempt's live processes outside the job's process group.
func (s *supervisor) others() []int {
	pids := descendants(os.Getpid())
	for _, cg := range s.cgroups() {
		in, _ := cgroupProcs(cg)
		pids = append(pids, in...)
	}
	seen := map[int]bool{}
	out := pids[:0]
	for _, pid := range pids {
		if seen[pid] {
			continue
		}
		seen[pid] = true
		if p, ok := readProcStat(pid); ok && !p.zombie && p.pgid != s.job.PGID {
			out = append(out, pid)
		}
	}
	return out
}

// reap collects every exited child; it reports whether the supervisor has none left.
func (s *supervisor) reap() (none bool) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ECHILD):
			return true
		case err != nil:
			s.logger.Error("wait for children", "err", err)
			return false
		case pid <= 0:
			return false
		case pid == s.job.PID && s.leaderWS == nil:
			s.leaderWS = &ws
		}
	}
}

// endAll kills whatever the leader left running and reaps it: the leader gone means the
// attempt is over, and nothing it started survives it.
func (s *supervisor) endAll() {
	if s.spec.container != "" && !s.containerKilled {
		// The client has exited. --rm removes the container, through the runtime's
		// monitor, which is one of the processes killed next: remove it first.
		s.containerKilled = true
		if err := removeContainer(s.spec.runtime, s.spec.container); err != nil {
			s.logger.Warn("container left behind", "err", err)
		}
	}
	s.leftBehind = len(s.live())
	nextLog := time.Now().Add(10 * time.Second)
	for {
		s.signalAll(syscall.SIGKILL)
		none := s.reap()
		if none && s.cgroupEmpty() {
			break
		}
		if time.Now().After(nextLog) {
			s.logger.Warn("processes of the attempt are slow to die", "live", s.live())
			nextLog = time.Now().Add(time.Minute)
		}
		select {
		case <-s.sigs:
		case <-time.After(20 * time.Millisecond):
		}
	}
	if s.memCgroup != "" {
		s.memEnd = readMemoryEnd(s.memCgroup, s.memV1)
	}
	if s.job.Cgroup != "" {
		if err := removeCgroup(s.job.Cgroup); err != nil {
			s.logger.Warn("cgroup left behind", "err", err)
		}
	}
	if err := removeCgroups1(s.cgroups1); err != nil {
		s.logger.Warn("cgroup left behind", "err", err)
	}
}

// cgroups lists every cgroup that holds the attempt's processes.
func (s *supervisor) cgroups() []string {
	var out []string
	if s.job.Cgroup != "" {
		out = append(out, s.job.Cgroup)
	}
	return append(out, s.cgroups1...)
}

// live lists every live process of the attempt.
func (s *supervisor) live() []int {
	pids := descendants(os.Getpid())
	for _, cg := range s.cgroups() {
		in, _ := cgroupProcs(cg)
		for _, pid := range in {
			if !slices.Contains(pids, pid) && processAlive(pid) {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

func (s *supervisor) cgroupEmpty() bool {
	for _, cg := range s.cgroups() {
		if pids, err := cgroupProcs(cg); err == nil && len(pids) > 0 {
			return false
		}
	}
	return true
}

// record writes how the attempt ended, as the agent's runner decided before supervisors.
func (s *supervisor) record() error {
	ws := *s.leaderWS
	code := ws.ExitStatus()
	desc := fmt.Sprintf("exited with code %d", code)
	if ws.Signaled() {
		code = 128 + int(ws.Signal())
		desc = fmt.Sprintf("killed by signal %d, %s (exit code %d)", int(ws.Signal()), ws.Signal(), code)
	}
	if s.leftBehind > 0 {
		desc += fmt.Sprintf("; %d process(es) it left running were killed", s.leftBehind)
	}
	start := s.job.StartTime
	rec := endRecord{
		State: api.StateFailed, ExitCode: &code, StartTime: &start, EndTime: time.Now().UTC(),
		LeaderPID: s.job.PID, Tracking: s.job.Tracking, RecordedBy: "supervisor",
		Limits: s.limits, ImageDigest: s.spec.digest,
	}
	if s.memEnd.known {
		rec.PeakMemoryMB = mb(s.memEnd.peakBytes)
	}
	switch {
	case s.stopping == api.ReasonTimeout:
		rec.State, rec.Reason = stopOutcome(s.stopping)
		rec.Message = "time limit reached; " + desc
	case s.stopping != "":
		rec.State, rec.Reason = stopOutcome(s.stopping)
		rec.Message = "stopped (" + s.stopping + "); " + desc
	case s.oomKilled(ws):
		rec.Reason = api.ReasonOOM
		rec.Message = s.oomMessage() + "; " + desc
	case code == containerRuntimeError && s.spec.container != "":
		rec.Reason = api.ReasonStartError
		rec.Message = fmt.Sprintf("the container runtime %s failed (exit code %d): %s", s.spec.runtime.Name, code, s.outputTail())
	case code == 0:
		rec.State = api.StateSucceeded
		if s.leftBehind > 0 {
			rec.Message = desc
		}
	default:
		rec.Reason = api.ReasonExitCode
		rec.Message = desc
	}
	s.logger.Info("job ended", "state", rec.State, "reason", rec.Reason, "detail", desc)
	return writeStatus(s.dir, rec)
}

// containerRuntimeError is the exit code podman and docker give when they, not the
// container's command, failed.
const containerRuntimeError = 125

// oomKilled says whether the kernel killed a process of the attempt for want of memory:
// its cgroup counts OOM kills, or, on a kernel that does not, the cgroup hit its limit and
// the leader died of SIGKILL nobody sent. A job one of whose processes was OOM-killed
// fails even where its first process exits 0: its work is likely incomplete.
func (s *supervisor) oomKilled(ws unix.WaitStatus) bool {
	if s.memEnd.oomKills >= 0 {
		return s.memEnd.oomKills > 0
	}
	return s.memEnd.failcnt > 0 && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

func (s *supervisor) oomMessage() string {
	limit := "none"
	if s.task.MemoryMB > 0 {
		limit = fmt.Sprintf("%d MB", s.task.MemoryMB)
	}
	peak := "unknown"
	if s.memEnd.known {
		peak = fmt.Sprintf("%d MB", mb(s.memEnd.peakBytes))
	}
	return fmt.Sprintf("killed by the kernel: out of memory (limit %s, peak %s)", limit, peak)
}

// outputTail is the end of the job's log, where a container runtime writes its errors.
func (s *supervisor) outputTail() string {
	data, err := os.ReadFile(filepath.Join(s.dir, fileOutput))
	if err != nil {
		return err.Error()
	}
	return tail(data, errors.New("no output"))
}

// failStart records a start error, in the log first: it is where a user looks.
func (s *supervisor) failStart(err error) error {
	if s.output != nil {
		fmt.Fprintf(s.output, "rota: %v\n", err)
	}
	return s.endUnstarted(api.StateFailed, api.ReasonStartError, err.Error())
}

func (s *supervisor) endUnstarted(state api.JobState, reason, msg string) error {
	s.logger.Warn("job not started", "reason", reason, "message", msg)
	return writeStatus(s.dir, endRecord{State: state, Reason: reason, Message: msg, EndTime: time.Now().UTC(), RecordedBy: "supervisor", ImageDigest: s.spec.digest})
}

// readStop reads the agent's stop request, if it made one.
func (s *supervisor) readStop() (string, bool) {
	var req stopRequest
	ok, err := readJSON(filepath.Join(s.dir, fileStop), &req)
	if err != nil {
		s.logger.Warn("unreadable stop request", "err", err)
	}
	if !ok {
		return "", false
	}
	if req.Reason == "" {
		req.Reason = api.ReasonCancelled
	}
	return req.Reason, true
}

// stopOutcome is the end state of a task stopped for reason. The time limit has a state
// of its own; a cancel and an idle reclaim (the job held GPUs it did not use, and was
// told) end CANCELLED; any other stop (preemption, drain, node shutdown, a failed GPU) is
// a failure whose reason lets the server decide what follows.
func stopOutcome(reason string) (api.JobState, string) {
	switch reason {
	case api.ReasonTimeout:
		return api.StateTimeout, api.ReasonTimeout
	case api.ReasonCancelled, "":
		return api.StateCancelled, api.ReasonCancelled
	case api.ReasonIdle:
		return api.StateCancelled, api.ReasonIdle
	}
	return api.StateFailed, reason
}

// writeNotice replaces the notice in the job's own directory in one step, so a job
// polling it never reads half. The directory belongs to the job, so the temporary file is
// created exclusively (never through a link the job planted) and renamed over the notice.
// n is a stop notice, or the notice a running job is given (jobNotice).
func writeNotice(jobDir string, n any) error {
	data, err := jsonLine(n)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(jobDir, ".notice*")
	if err != nil {
		return fmt.Errorf("write notice: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(jobDir, fileNotice))
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write notice: %w", err)
	}
	return nil
}
