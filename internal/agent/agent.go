package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// Defaults for a Config left zero.
const (
	defaultHeartbeat = 5 * time.Second
	heartbeatTimeout = 15 * time.Second
	// stopGrace is how long a heartbeat in flight may finish once the agent is stopping.
	stopGrace          = 2 * time.Second
	maxHeartbeatAnswer = 16 << 20
	// logFlushWait is how long an ended task waits for its last log bytes to ship before
	// its end is reported; see runner.flushWait.
	logFlushWait           = 5 * time.Second
	defaultKeepFinished    = 24 * time.Hour
	defaultKeepCheckpoints = 7 * 24 * time.Hour
	// A refused agent (401, 403, a later 409) retries with backoff up to refusedBackoff
	// and says so at most every refusedLogEvery.
	refusedBackoff  = time.Minute
	refusedLogEvery = time.Minute
)

// Config is what an agent needs to join a cluster.
type Config struct {
	// ServerURL is the server's base URL, e.g. "https://rota-server:8443", or a
	// comma-separated list of a cluster's servers, among which the agent follows the leader.
	ServerURL string
	// Name is the node name; empty means the hostname.
	Name   string
	Labels map[string]string
	// FakeGPUs, if set, replaces NVML discovery with a fake set ("8", "4xH100-SXM-80GB").
	FakeGPUs string
	// CPUs and MemoryMB are what the node offers to jobs; zero means the whole machine,
	// and with FakeGPUs at least 8 CPUs and 64 GiB per fake GPU, so a laptop can play a
	// GPU server whose jobs fit.
	CPUs     int
	MemoryMB int64
	// DataDir holds the node's identity, its attempts, logs and checkpoints. One agent
	// process uses it at a time.
	DataDir string
	// HeartbeatInterval until the server says otherwise; zero means 5s.
	HeartbeatInterval time.Duration
	// HTTPClient talks to the server and is used as given: no join, no client
	// certificate (inside `rota up` it reaches the in-process server in memory). Nil
	// means the agent's own client, with the node's certificate over https.
	HTTPClient *http.Client
	// Join is a join token from `rota admin join-token`. It is used once, when the data
	// directory holds no identity for the token's cluster: the agent then gets a
	// certificate from the server and uses it from then on.
	Join string
	// SupervisorCommand starts the supervisor of one attempt, with the attempt's
	// directory appended; empty means this executable with "supervise" (rota supervise).
	SupervisorCommand []string
	// KeepFinished is how long an ended attempt's directory stays after the server has
	// its end and its whole log; zero means 24 hours.
	KeepFinished time.Duration
	// KeepCheckpoints is how long a job's node-local checkpoints stay after its last
	// attempt directory is removed; zero means 7 days.
	KeepCheckpoints time.Duration
	// FakeGPUsConfig, if set, is a YAML file describing fake GPUs (models, NVLink
	// topology, metric curves); it replaces NVML like FakeGPUs, and excludes it.
	FakeGPUsConfig string
	// TelemetryInterval is how often the GPUs are read and faults looked for; zero means
	// 5s.
	TelemetryInterval time.Duration
	// HealthCheck, if set, is a command run with /bin/sh -c every HealthCheckInterval
	// (zero: 60s); it fails when it exits non-zero or runs past HealthCheckTimeout
	// (zero: 30s), and its last result goes with every heartbeat.
	HealthCheck         string
	HealthCheckInterval time.Duration
	HealthCheckTimeout  time.Duration
	// KillLeftoversAfter is how long a GPU process of no live attempt may stay before the
	// agent kills it; zero means never: leftovers are only reported.
	KillLeftoversAfter time.Duration
	// ContainerRuntime runs image jobs: "" finds podman, docker or apptainer; "none"
	// runs no image jobs; anything else names the runtime or its path.
	ContainerRuntime string
	// GPUMemoryGrace is how long a task that shares a GPU may hold more GPU memory than
	// its slice before the agent stops it (gpu_memory_exceeded); zero means 10s.
	GPUMemoryGrace time.Duration
	// MPSPipeDir is where an NVIDIA MPS control daemon's pipes are; where its control
	// pipe exists, tasks that share a GPU get MPS's memory and thread limits. Empty:
	// $CUDA_MPS_PIPE_DIRECTORY, else /tmp/nvidia-mps.
	MPSPipeDir string
	// MaxLogSize is the most of each attempt's output the node keeps in its log, in
	// bytes, past which the rest is dropped and the job runs on: zero means
	// DefaultMaxLogSize, less than zero no limit.
	MaxLogSize int64
}

// DefaultMaxLogSize is Config.MaxLogSize's default: 1 GiB of each attempt's output, the
// same as the server keeps of a rank's log by default.
const DefaultMaxLogSize = 1 << 30

// maxLogSize is the most of an attempt's output its log keeps, 0 for no limit.
func (cfg Config) maxLogSize() int64 {
	switch {
	case cfg.MaxLogSize == 0:
		return DefaultMaxLogSize
	case cfg.MaxLogSize < 0:
		return 0
	}
	return cfg.MaxLogSize
}

// check refuses the settings New cannot work with, naming each.
func (cfg Config) check() error {
	if cfg.CPUs < 0 || cfg.MemoryMB < 0 {
		return fmt.Errorf("CPUs %d and memory %d MB: want 0 (the whole machine) or more", cfg.CPUs, cfg.MemoryMB)
	}
	if cfg.FakeGPUs != "" && cfg.FakeGPUsConfig != "" {
		return errors.New("--fake-gpus and --fake-gpus-config: give one or the other")
	}
	durations := []struct {
		name string
		d    time.Duration
		def  string
	}{
		{"telemetry interval", cfg.TelemetryInterval, "the default, 5s"},
		{"health-check interval", cfg.HealthCheckInterval, "the default, 60s"},
		{"health-check timeout", cfg.HealthCheckTimeout, "the default, 30s"},
		{"kill-leftovers-after", cfg.KillLeftoversAfter, "never kill, only report"},
		{"GPU memory grace", cfg.GPUMemoryGrace, "the default, 10s"},
	}
	for _, d := range durations {
		if d.d < 0 {
			return fmt.Errorf("%s %v: want 0 (%s) or more", d.name, d.d, d.def)
		}
	}
	return nil
}

// Agent runs the jobs the server places on this node.
type Agent struct {
	servers  *serverSet
	name     string
	dataDir  string
	interval time.Duration
	// jitter turns the interval into the next heartbeat's wait (jittered; tests set it).
	jitter func(time.Duration) time.Duration
	logger *slog.Logger
	// inventory is read and changed under mu. When a GPU turns unhealthy its GPU list is
	// replaced, never changed in place: a heartbeat encodes its copy after letting go.
	inventory api.Inventory
	// heldHash is the inventory hash the server's last answer said it holds; "" after a
	// heartbeat that failed, or from a server that keeps no hash. While it is the hash
	// of inventory, heartbeats leave the inventory out. Guarded by mu.
	heldHash string
	// logSizes is set while the server's answers say it takes TaskStatus.LogSize.
	logSizes bool
	runner   *runner
	shipper  *logShipper
	creds    *credentials
	// lock holds the data directory for this process.
	lock             *os.File
	instance         string
	previousInstance string
	keepFinished     time.Duration
	keepCheckpoints  time.Duration
	// wake asks the loop for an early heartbeat, when a task changes state.
	wake chan struct{}
	// watchUntil gives the watch, after each heartbeat answered, the time by which its
	// long-poll must end: before the next heartbeat is due (offerWatch).
	watchUntil chan time.Time
	// devices reads the GPUs; mon is the telemetry goroutine's own state.
	devices        Devices
	telemetryEvery time.Duration
	mon            *monitor
	// healthCmd is the node's health-check command, "" for none.
	healthCmd     string
	healthEvery   time.Duration
	healthTimeout time.Duration

	// client is set by New, or by Run once the node has joined; a renewed certificate
	// replaces it.
	client atomic.Pointer[http.Client]

	mu sync.Mutex // guards the fields below
	// cluster is the cluster whose attempts the node runs; empty until known. One
	// remembered from an earlier server is a guess until confirmed: a server, or the
	// node's identity, has named it. Logs ship and other clusters are fenced only then,
	// so a server on a fresh data dir never gets another cluster's log for a job ID the
	// two share.
	cluster   string
	confirmed bool
	// attempts holds what may still need reporting, stopping or shipping: running
	// attempts, ended ones the server has not acknowledged, stops it has not recorded.
	attempts map[attemptKey]*attempt
	// answered is set by the first answer; listed holds the attempts the last one listed.
	answered bool
	listed   map[attemptKey]bool
	// sentSynced is what the last heartbeat that got an answer said of Synced;
	// syncEpoch is the last answer's sync epoch, which the next heartbeat echoes.
	sentSynced bool
	syncEpoch  uint64
	// warnedNoCluster keeps a server that names no cluster from filling the log.
	warnedNoCluster bool
	running         bool
	// ctx and bg are Run's, for the log shippers reconcile starts.
	ctx context.Context
	bg  *sync.WaitGroup
	// telemetry is the latest reading not yet sent; healthCheck the last health-check
	// result, sent with every heartbeat.
	telemetry   *api.Telemetry
	healthCheck *api.HealthCheck
	// dataDirProblem is why attempts cannot be written in the data dir (datadir.go), and
	// supervisorProblem why their supervisors cannot be started (startfault.go); either
	// keeps new work off the node. dataDirField is set while the server's answers say it
	// takes them.
	dataDirProblem    nodeFault
	supervisorProblem nodeFault
	dataDirField      bool
	dataDirWatch      dataDirWatch
	// notices holds, per live attempt, the notice text last written to its notice file.
	notices map[attemptKey]string
	// relays holds the interactive attempts whose terminal relay runs.
	relays map[attemptKey]bool
}

// New checks cfg, takes the data directory, discovers the GPUs and loads or prepares the
// node's identity. Only Run talks to the server.
func New(cfg Config, logger *slog.Logger) (*Agent, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	servers, scheme, err := parseServers(cfg.ServerURL)
	if err != nil {
		return nil, err
	}
	name := cfg.Name
	if name == "" {
		if name, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("node name: %w", err)
		}
	}
	if cfg.DataDir == "" {
		return nil, errors.New("data directory: none given")
	}
	// Absolute, because the paths go into the environment of jobs that run elsewhere.
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	supervisor, supervisorPath, err := supervisorCommand(cfg.SupervisorCommand)
	if err != nil {
		return nil, err
	}

	lock, err := lockDataDir(dataDir)
	if err != nil {
		return nil, err
	}
	keep := false
	defer func() {
		if !keep {
			lock.Close()
		}
	}()
	creds, err := loadCredentials(cfg, name, dataDir, scheme, servers)
	if err != nil {
		return nil, err
	}
	instance, previous, err := newInstance(dataDir)
	if err != nil {
		return nil, err
	}

	devices, err := openDevices(cfg, name, dataDir, logger)
	if err != nil {
		return nil, err
	}
	defer func() {
		if !keep {
			closeDevices(devices)
		}
	}()
	disc, err := devices.Discover()
	if err != nil {
		return nil, fmt.Errorf("discover GPUs: %w", err)
	}
	if disc.Source == SourceNone {
		logger.Warn("no NVIDIA GPUs: " + disc.Reason + "; running CPU-only jobs")
	}
	inv, err := inventory(disc, cfg.Labels)
	if err != nil {
		return nil, err
	}
	if disc.Source == SourceFake {
		inv.CPUs = max(inv.CPUs, fakeCPUsPerGPU*len(inv.GPUs))
		inv.MemoryMB = max(inv.MemoryMB, fakeMemoryMBPerGPU*int64(len(inv.GPUs)))
	}
	if cfg.CPUs > 0 {
		inv.CPUs = cfg.CPUs
	}
	if cfg.MemoryMB > 0 {
		inv.MemoryMB = cfg.MemoryMB
	}
	rt, err := containerRuntimeFor(cfg.ContainerRuntime, logger)
	if err != nil {
		return nil, err
	}
	inv.ContainerRuntime = rt.Name
	inv.Limits = limitsMode()

	interval := cmp(cfg.HeartbeatInterval, defaultHeartbeat)
	logger = logger.With("node", name)
	a := &Agent{
		servers:          servers,
		name:             name,
		dataDir:          dataDir,
		interval:         interval,
		jitter:           jittered,
		logger:           logger,
		inventory:        inv,
		creds:            creds,
		lock:             lock,
		instance:         instance,
		previousInstance: previous,
		keepFinished:     cmp(cfg.KeepFinished, defaultKeepFinished),
		keepCheckpoints:  cmp(cfg.KeepCheckpoints, defaultKeepCheckpoints),
		wake:             make(chan struct{}, 1),
		watchUntil:       make(chan time.Time, 1),
		devices:          devices,
		telemetryEvery:   cmp(cfg.TelemetryInterval, defaultTelemetryInterval),
		mon:              newMonitor(cfg.KillLeftoversAfter, disc.Source == SourceNVML),
		healthCmd:        strings.TrimSpace(cfg.HealthCheck),
		healthEvery:      cmp(cfg.HealthCheckInterval, defaultHealthCheckInterval),
		healthTimeout:    cmp(cfg.HealthCheckTimeout, defaultHealthCheckTimeout),
		attempts:         map[attemptKey]*attempt{},
		notices:          map[attemptKey]string{},
		relays:           map[attemptKey]bool{},
		cluster:          creds.clusterID(),
	}
	a.confirmed = a.cluster != ""
	if a.cluster == "" {
		a.cluster = readClusterFile(dataDir)
	}
	a.runner = &runner{
		dataDir:        dataDir,
		supervisor:     supervisor,
		supervisorPath: supervisorPath,
		supervisorEnv:  os.Environ(),
		logger:         logger,
		flushWait:      logFlushWait,
		poll:           runnerPoll,
		onChange:       a.poke,
		runtime:        rt,
		mpsDir:         mpsPipeDir(cfg.MPSPipeDir),
		maxLogSize:     cfg.maxLogSize(),
	}
	a.runner.onDiskFault = a.nodeErrorEnd
	a.runner.onSupervisorFault = a.supervisorFault
	a.dataDirWatch = dataDirWatch{every: dataDirEvery, minFree: minFreeDisk}
	a.mon.memGrace = cmp(cfg.GPUMemoryGrace, defaultGPUMemoryGrace)
	if fake, ok := devices.(*FakeDevices); ok {
		// Jobs see their fake GPUs the way the fake layer says (its directory, say).
		a.runner.jobEnv = fake.JobEnv()
	}
	a.shipper = newLogShipper(a.httpClient, servers, name, logger, min(interval, maxLogPoll))
	if cfg.HTTPClient != nil {
		a.setClient(cfg.HTTPClient)
	} else if !creds.joining() {
		client, err := creds.client()
		if err != nil {
			return nil, err
		}
		a.setClient(client)
	}
	logger.Info("agent ready", "gpus", len(inv.GPUs), "device_source", inv.DeviceSource,
		"cpus", inv.CPUs, "memory_mb", inv.MemoryMB, "data_dir", dataDir, "cluster", a.cluster,
		"instance", instance, "previous_instance", previous, "container_runtime", inv.ContainerRuntime,
		"limits", inv.Limits)
	keep = true
	return a, nil
}

// openDevices picks the device layer: a fake one from a config file or a --fake-gpus
// spec, else NVML. A fake layer keeps its processes and faults under the data directory,
// where tests and demos drop them.
func openDevices(cfg Config, name, dataDir string, logger *slog.Logger) (Devices, error) {
	var fake *FakeDevices
	var err error
	switch {
	case cfg.FakeGPUsConfig != "":
		if fake, err = LoadFakeGPUs(cfg.FakeGPUsConfig, name); err != nil {
			return nil, fmt.Errorf("--fake-gpus-config: %w", err)
		}
	case cfg.FakeGPUs != "":
		if fake, err = ParseFakeGPUs(cfg.FakeGPUs, name); err != nil {
			return nil, err
		}
	default:
		return OpenNVML(logger), nil
	}
	fake.Dir = filepath.Join(dataDir, "fake-gpus")
	fake.Logger = logger
	return fake, nil
}

// closeDevices releases a device layer that holds something (NVML).
func closeDevices(d Devices) {
	if c, ok := d.(io.Closer); ok {
		_ = c.Close()
	}
}

// containerRuntimeFor finds the runtime image jobs run through. Finding none where none was
// asked for is normal (the node takes no image jobs, and says why once); a runtime asked
// for by name that is not there is an error.
func containerRuntimeFor(setting string, logger *slog.Logger) (containerRuntime, error) {
	rt, why := detectContainerRuntime(setting)
	if rt.Name != "" {
		return rt, nil
	}
	if setting != "" && setting != "none" {
		return rt, fmt.Errorf("--container-runtime: %s", why)
	}
	logger.Info("no container runtime: " + why + "; image jobs are not placed on this node")
	return rt, nil
}

func cmp(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func (a *Agent) setClient(c *http.Client) { a.client.Store(c) }

func (a *Agent) httpClient() *http.Client { return a.client.Load() }

// Close releases the data directory and the GPUs' library. The end of the process
// releases them as well; Close is for a process that goes on after its agent has stopped.
func (a *Agent) Close() error {
	closeDevices(a.devices)
	return a.lock.Close()
}

// poke asks for a heartbeat now; one pending request is enough.
func (a *Agent) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Run takes up the attempts earlier agent processes left, then heartbeats and reconciles
// until ctx is done, and returns nil. It never stops a job because the agent stops or
// starts: jobs run under their supervisors, which outlive it. It returns an error only
// when the node cannot join or the server refuses it outright (another live agent serves
// this node name).
func (a *Agent) Run(ctx context.Context) error {
	a.mu.Lock()
	if a.running {
		a.mu.Unlock()
		return errors.New("agent: Run called twice")
	}
	a.running = true
	a.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	var bg sync.WaitGroup
	defer func() {
		cancel()
		bg.Wait()
		a.runner.wg.Wait()
	}()
	a.runner.ctx = ctx
	if a.httpClient() == nil {
		if err := a.join(ctx); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}

	a.shipper.bg = &bg
	bg.Go(func() { a.shipper.run(ctx) })
	a.mu.Lock()
	a.ctx, a.bg = ctx, &bg
	err := a.adoptAll()
	a.mu.Unlock()
	if err != nil {
		return err
	}
	bg.Go(func() { a.housekeeping(ctx) })
	bg.Go(func() { a.watch(ctx) })
	bg.Go(func() { a.monitorLoop(ctx) })
	bg.Go(func() { a.watchDataDir(ctx) })
	if a.healthCmd != "" {
		bg.Go(func() { a.healthChecks(ctx) })
	}
	if a.creds.renewable() {
		bg.Go(func() { a.renewals(ctx) })
	}
	return a.loop(ctx)
}

// loop heartbeats until ctx ends.
func (a *Agent) loop(ctx context.Context) error {
	interval := a.interval
	var downSince, lastRefusalLog time.Time
	downKind := ""
	var backoff time.Duration
	everAnswered := false
	for {
		sent := time.Now()
		resp, err := a.beat(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := interval
		var refused *refusedError
		switch {
		case errors.As(err, &refused):
			// The first answer deciding that another agent serves this node name means
			// this process should not be running at all.
			if refused.status == http.StatusConflict && !everAnswered {
				return fmt.Errorf("the server refused this agent: %s", refused.msg)
			}
			if time.Since(lastRefusalLog) >= refusedLogEvery {
				a.logger.Error("the server refuses this agent; jobs keep running, retrying", "answer", refused.msg)
				lastRefusalLog = time.Now()
			}
			backoff = min(max(2*backoff, interval), refusedBackoff)
			wait = backoff
		case err != nil:
			// Said once per outage, and again when its kind changes: a server that comes
			// back with another cluster's CA is not the one that went away.
			kind := outageKind(err)
			if !downSince.IsZero() && kind == downKind {
				break
			}
			if downSince.IsZero() {
				downSince = time.Now()
			}
			downKind = kind
			if kind == "tls" {
				a.logger.Error("the server's certificate is not from the CA this agent joined: it runs another cluster, or is not the rota server; "+
					"jobs keep running. To move this node to that cluster, join it with a token from it (rota agent --join TOKEN)", "err", err)
				break
			}
			a.logger.Warn("server unreachable; jobs keep running, retrying", "err", err, "every", interval)
		case err == nil:
			everAnswered = true
			backoff = 0
			lastRefusalLog = time.Time{}
			if !downSince.IsZero() {
				a.logger.Info("server reachable again", "down_for", time.Since(downSince).Round(time.Second))
				downSince = time.Time{}
			}
			if resp.HeartbeatSeconds > 0 {
				interval = time.Duration(resp.HeartbeatSeconds * float64(time.Second))
				wait = interval
			}
			a.reconcile(resp.Tasks)
			a.shipper.follow(resp.LogsFollowed)
			a.reship(resp.LogsFollowed)
			// A node whose agent (re)connected takes no work until the server hears it is
			// synced: say so at once rather than a heartbeat later.
			a.mu.Lock()
			changed := a.synced() != a.sentSynced
			a.mu.Unlock()
			if changed {
				a.poke()
			}
		}

		wait = a.jitter(wait)
		wake := a.wake
		if backoff > 0 {
			// A refused agent waits out its backoff; early heartbeats would be refused too.
			wake = nil
		} else {
			wait = keepPhase(wait, time.Since(sent))
		}
		next := time.Now().Add(wait)
		// What the tasks printed since the last heartbeat goes next, on the connection
		// the heartbeat left, before the watch takes it; an early heartbeat asked for
		// meanwhile goes at once.
		if err == nil && a.shipper.round(ctx, next.Add(-watchMargin(wait)), wake) {
			continue
		}
		if err == nil && len(a.wake) == 0 {
			// The watch is held until shortly before the next heartbeat, unless that one
			// is already asked for (the node just synced): it would find the connection
			// taken and open another.
			a.offerWatch(next.Add(-watchMargin(wait)))
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// jittered is d give or take a tenth, at random. A fleet whose heartbeats came to fall
// together (a server that answered all of them at once after a stall) then spreads out
// again over the next minutes, where with a fixed wait it would beat together for ever:
// every interval a burst the server must take all at once, and then nothing.
func jittered(d time.Duration) time.Duration { return d - d/10 + rand.N(d/5+1) }

// keepPhase is how long to wait for the next heartbeat, due every wait since the last
// was sent, elapsed ago: what is left of the wait, or, when the answer took longer, until
// the first time due after now that is at least half a wait away. Counting the wait from
// the answer instead let a server that stalled bunch its fleet: every agent whose
// heartbeat it held got its answer at the same moment and, waiting a whole interval from
// then, beat with all the others ever after. Counted from the send, each agent keeps its
// own place in the interval. The half wait keeps a slow server's load down: an agent
// never beats again sooner than that after an answer.
func keepPhase(wait, elapsed time.Duration) time.Duration {
	if wait <= 0 || elapsed < 0 {
		return wait
	}
	d := wait - elapsed%wait
	if d < wait/2 {
		d += wait
	}
	return d
}

// outageKind sorts a failed heartbeat: "tls" when the server could not be verified, "net"
// for everything else.
func outageKind(err error) string {
	var cv *tls.CertificateVerificationError
	msg := err.Error()
	if errors.As(err, &cv) || strings.Contains(msg, "pinned") || strings.Contains(msg, "x509:") || strings.Contains(msg, "tls:") {
		return "tls"
	}
	return "net"
}

// synced reports whether nothing lives on the node that the last answer did not list (and
// there was an answer). An attempt counts as live until its end is reported, so Synced
// never contradicts a task the same heartbeat reports running. Callers hold a.mu.
func (a *Agent) synced() bool {
	if !a.answered {
		return false
	}
	for k, att := range a.attempts {
		if _, ended := att.snapshot(); !ended && (!a.isCurrent(k) || !a.listed[k]) {
			return false
		}
	}
	return true
}

// adoptAll takes up every attempt an earlier agent process left that still needs
// something: a live supervisor to follow, an end to report, a log to ship, a stop to
// report. Nothing is stopped because the agent restarted.
func (a *Agent) adoptAll() error {
	found, err := scanAttempts(a.dataDir)
	if err != nil {
		return err
	}
	for _, f := range found {
		if a.settledOnDisk(f) {
			continue
		}
		att := a.runner.adopt(f)
		a.attempts[f.key] = att
		att.logger.Info("found attempt", "supervisor_alive", att.supervisorAlive(), "ended", exists(filepath.Join(f.dir, fileStatus)))
	}
	a.settle()
	return nil
}

// reship ships again the logs of ended attempts that the server names among the logs
// followed and that no shipper sends: the server holds only part of each (it took over
// from another, or lost its log directory) and asks for the rest. The attempt may have
// been forgotten: its directory, with its log, stays until housekeeping removes it.
func (a *Agent) reship(refs []api.TaskRef) {
	if len(refs) == 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.confirmed {
		return
	}
	for _, r := range refs {
		k := attemptKey{cluster: a.cluster, job: r.JobID, attempt: r.Attempt}
		if a.shipper.shipping(k) {
			continue
		}
		att, ok := a.attempts[k]
		switch {
		case ok && !isClosed(att.exited):
			continue // running: its log ships as it grows
		case !ok:
			dir := attemptDir(a.dataDir, k)
			if _, ended := readStatus(dir); !ended {
				continue // not here, or not over
			}
			att = a.runner.newAttempt(k, dir)
			close(att.exited)
		}
		att.logger.Info("shipping an ended attempt's log again: the server holds only part of it")
		a.shipper.add(att, func() bool { return a.stillCurrent(k) })
	}
}

// settledOnDisk reports whether an attempt found on disk needs nothing more from this
// agent but housekeeping.
func (a *Agent) settledOnDisk(f foundAttempt) bool {
	if !exists(filepath.Join(f.dir, fileStatus)) {
		return false
	}
	if exists(filepath.Join(f.dir, fileStopped)) && !exists(filepath.Join(f.dir, fileStoppedAcked)) {
		return false
	}
	if !a.isCurrent(f.key) {
		// Another cluster's server will never acknowledge it here; a cluster not yet
		// known may turn out to be its own.
		return a.confirmed
	}
	return exists(filepath.Join(f.dir, fileAcked)) && exists(filepath.Join(f.dir, fileShipped))
}

// isCurrent reports whether k is an attempt of the cluster the node serves.
func (a *Agent) isCurrent(k attemptKey) bool {
	return a.cluster != "" && !k.legacy && k.cluster == a.cluster
}

// settle does what knowing the cluster for sure decides: which logs ship, and which
// attempts, being another cluster's, are stopped and reported. It is idempotent.
func (a *Agent) settle() {
	if !a.confirmed {
		return
	}
	for _, att := range a.attempts {
		cur := a.isCurrent(att.key)
		if !att.shipping {
			att.shipping = true
			if cur && !exists(filepath.Join(att.dir, fileShipped)) {
				a.shipper.add(att, func() bool { return a.stillCurrent(att.key) })
			} else {
				att.markLogShipped()
			}
		}
		if cur || att.stopped != nil {
			continue
		}
		msg := fmt.Sprintf("attempt of cluster %s found on node %s, which serves cluster %s", clusterName(att.key), a.name, a.cluster)
		switch {
		case !isClosed(att.exited) && att.stopReason == "" && att.supervisorAlive():
			att.stop(api.StoppedOtherCluster)
			a.reportStopped(att, api.StoppedOtherCluster, msg+"; stopped")
		case isClosed(att.exited) && att.killedOrphans() > 0:
			a.reportStopped(att, api.StoppedOtherCluster, fmt.Sprintf("%s; its supervisor was gone and %d process(es) still running were killed", msg, att.killedOrphans()))
		}
	}
}

func clusterName(k attemptKey) string {
	if k.legacy {
		return "(none: an agent from before clusters)"
	}
	return k.cluster
}

func (a *Agent) stillCurrent(k attemptKey) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.isCurrent(k)
}

func (att *attempt) killedOrphans() int {
	att.mu.Lock()
	defer att.mu.Unlock()
	return att.orphanKilled
}

// reportStopped records that the agent stopped an attempt on its own; the report goes
// with every heartbeat until the server acknowledges it, across restarts.
func (a *Agent) reportStopped(att *attempt, reason, msg string) {
	att.stopped = &api.StoppedTask{ClusterID: att.key.cluster, JobID: att.key.job, Attempt: att.key.attempt, Reason: reason, Message: msg}
	if err := writeJSONAtomic(filepath.Join(att.dir, fileStopped), att.stopped, 0o644, true); err != nil {
		att.logger.Error("record the stop", "err", err)
	}
	att.logger.Warn("stopped an attempt no server listed", "reason", reason, "message", msg)
}

// setCluster takes the cluster a server answered with.
func (a *Agent) setCluster(id string) {
	switch {
	case id == a.cluster && a.confirmed:
		return
	case id == a.cluster:
		a.confirmed = true
		a.settle()
		return
	case id == "" || !validClusterID(id):
		if !a.confirmed && !a.warnedNoCluster {
			a.logger.Error("the server names no valid cluster; starting nothing until it does", "cluster_id", id)
			a.warnedNoCluster = true
		}
		return
	case a.cluster != "":
		a.logger.Warn("the server serves another cluster; stopping the attempts of the old one", "old", a.cluster, "new", id)
	default:
		a.logger.Info("cluster known", "cluster", id)
	}
	a.cluster, a.confirmed = id, true
	a.listed = nil
	if err := writeClusterFile(a.dataDir, id); err != nil {
		a.logger.Error("remember the cluster", "err", err)
	}
	a.settle()
}

// beat sends one heartbeat. On success the events it carried are delivered, and the ends
// and stops the server acknowledged are recorded as such.
func (a *Agent) beat(ctx context.Context) (*api.HeartbeatResponse, error) {
	type sent struct {
		att    *attempt
		events int
		ended  bool
	}
	a.mu.Lock()
	a.settle()
	keys := make([]attemptKey, 0, len(a.attempts))
	for k := range a.attempts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].cluster != keys[j].cluster {
			return keys[i].cluster < keys[j].cluster
		}
		if keys[i].job != keys[j].job {
			return keys[i].job < keys[j].job
		}
		return keys[i].attempt < keys[j].attempt
	})
	hb := api.Heartbeat{
		Node: a.name, Inventory: a.inventory, Tasks: make([]api.TaskStatus, 0, len(keys)), AgentTime: time.Now().UTC(),
		ClusterID: a.cluster, Instance: a.instance, PreviousInstance: a.previousInstance, PID: os.Getpid(), Version: Version,
		Telemetry: a.telemetry, HealthCheck: a.healthCheck,
	}
	if hb.Inventory.GPUs == nil {
		hb.Inventory.GPUs = []api.GPU{} // a CPU-only node: [] as the spec says, not null
	}
	if a.heldHash != "" {
		// The server keeps inventory hashes (a server that does not would refuse the
		// field): the inventory goes only when it is not the one the server holds.
		hb.InventoryHash = api.InventoryHash(hb.Inventory)
		if hb.InventoryHash == a.heldHash {
			hb.Inventory = api.Inventory{}
		}
	}
	carried := map[attemptKey]sent{}
	stops := map[attemptKey]*attempt{}
	for _, k := range keys {
		att := a.attempts[k]
		cur := a.isCurrent(k)
		st, ended := att.snapshot()
		if !a.logSizes {
			st.LogSize = 0 // a server of an earlier release refuses the field
		}
		if cur && !att.endAcked {
			st.Events = att.events.peek()
			hb.Tasks = append(hb.Tasks, st)
			carried[k] = sent{att: att, events: len(st.Events), ended: ended}
		}
		if att.stopped != nil && !att.stoppedAcked {
			hb.Stopped = append(hb.Stopped, *att.stopped)
			stops[k] = att
		}
	}
	hb.Synced, hb.SyncEpoch = a.synced(), a.syncEpoch
	if a.dataDirField {
		hb.DataDirProblem = a.cannotRun() // a server of an earlier release refuses the field
	}
	a.mu.Unlock()

	resp, err := a.post(ctx, hb)
	if err != nil {
		// Whatever the cause (another server, one that lost its records, one that keeps
		// no hashes), the next heartbeat carries the inventory whole.
		a.mu.Lock()
		a.heldHash = ""
		if errors.Is(err, errBadRequest) {
			// Perhaps a server of an earlier release, refusing a field it does not know.
			a.logSizes, a.dataDirField = false, false
		}
		a.mu.Unlock()
		return nil, err
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	a.heldHash = resp.InventoryHash
	a.logSizes, a.dataDirField = resp.LogSizes, resp.DataDirProblems
	a.sentSynced = hb.Synced
	// A reading goes once; a newer one taken meanwhile waits for the next heartbeat.
	if a.telemetry == hb.Telemetry {
		a.telemetry = nil
	}
	for _, s := range carried {
		s.att.events.drop(s.events)
	}
	a.setCluster(resp.ClusterID)
	for _, ref := range resp.Acked {
		k := attemptKey{cluster: orDefault(ref.ClusterID, resp.ClusterID), job: ref.JobID, attempt: ref.Attempt}
		// Only an end the server has actually seen is recorded as acknowledged.
		if s, ok := carried[k]; ok && s.ended && a.attempts[k] == s.att && !s.att.endAcked {
			s.att.endAcked = true
			if err := mark(filepath.Join(s.att.dir, fileAcked)); err != nil {
				s.att.logger.Error("record the acknowledged end", "err", err)
			}
		}
	}
	for _, ref := range resp.StoppedAcked {
		for k, att := range stops {
			if k.job != ref.JobID || k.attempt != ref.Attempt || att.stoppedAcked {
				continue
			}
			// An empty cluster is the server's own, or the legacy layout's.
			if ref.ClusterID == k.cluster || ref.ClusterID == "" && (k.legacy || a.isCurrent(k)) {
				att.stoppedAcked = true
				if err := mark(filepath.Join(att.dir, fileStoppedAcked)); err != nil {
					att.logger.Error("record the acknowledged stop", "err", err)
				}
			}
		}
	}
	a.answered = true
	a.syncEpoch = resp.SyncEpoch
	a.listed = map[attemptKey]bool{}
	if a.cluster != "" {
		for _, t := range resp.Tasks {
			a.listed[attemptKey{cluster: a.cluster, job: t.JobID, attempt: t.Attempt}] = true
		}
	}
	a.prune()
	return resp, nil
}

// prune forgets the attempts that need nothing more; housekeeping removes their files.
func (a *Agent) prune() {
	if !a.confirmed {
		return
	}
	// Whatever an attempt that ended meanwhile leaves to report is recorded first.
	a.settle()
	for k, att := range a.attempts {
		if !isClosed(att.exited) || !isClosed(att.logShipped) {
			continue
		}
		if a.isCurrent(k) && !att.endAcked {
			continue
		}
		if att.stopped != nil && !att.stoppedAcked {
			continue
		}
		delete(a.attempts, k)
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// errBadRequest marks a heartbeat the server refused as malformed (400).
var errBadRequest = errors.New("refused as malformed")

// refusedError is an answer that says this agent may not serve the node: 401 or 403
// (not joined, certificate superseded) or 409 (another live agent serves the name).
type refusedError struct {
	status int
	msg    string
}

func (e *refusedError) Error() string { return "heartbeat refused: " + e.msg }

func (a *Agent) post(ctx context.Context, hb api.Heartbeat) (*api.HeartbeatResponse, error) {
	body, err := json.Marshal(hb)
	if err != nil {
		return nil, fmt.Errorf("encode heartbeat: %w", err)
	}
	// A heartbeat in flight when the agent is asked to stop may already have reached the
	// server: it is given a moment to come back, so that what it delivered is recorded as
	// delivered and not sent again by the next agent.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), heartbeatTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(stopGrace, cancel) })
	defer stop()
	ctx = pctx
	server := a.servers.current()
	u := server + "/api/v1/agents/" + url.PathEscape(a.name) + "/heartbeat"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("heartbeat request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.httpClient().Do(req)
	if err != nil {
		a.servers.moveOn(server, nil)
		return nil, fmt.Errorf("heartbeat: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		// A standby, or a leader that just lost its lease: nothing was recorded.
		a.servers.moveOn(server, resp)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxHeartbeatAnswer))
	if err != nil {
		return nil, fmt.Errorf("heartbeat: read answer: %w", err)
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusConflict:
		return nil, &refusedError{status: resp.StatusCode, msg: httpError(resp.StatusCode, data)}
	}
	if resp.StatusCode == http.StatusBadRequest {
		return nil, fmt.Errorf("heartbeat: %w: %s", errBadRequest, httpError(resp.StatusCode, data))
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("heartbeat: %s", httpError(resp.StatusCode, data))
	}
	var out api.HeartbeatResponse
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("heartbeat: decode answer: %w", err)
	}
	return &out, nil
}

// reconcile makes the node match the desired tasks: start what is new, stop what the
// server asks to stop, and stop what it no longer lists. Nothing starts until the node
// knows its cluster.
func (a *Agent) reconcile(desired []api.Task) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.confirmed {
		return
	}
	listed := make(map[attemptKey]bool, len(desired))
	for _, t := range desired {
		k := attemptKey{cluster: a.cluster, job: t.JobID, attempt: t.Attempt}
		listed[k] = true
		if att, ok := a.attempts[k]; ok {
			if t.Stop {
				att.stop(stopReasonOf(t))
			} else {
				a.deliverNotice(att, t.Notice)
			}
			continue
		}
		if exists(attemptDir(a.dataDir, k)) {
			// Ended and acknowledged before: an attempt never runs twice.
			continue
		}
		var att *attempt
		if t.Stop {
			att = a.runner.stopBeforeStart(k, t, stopReasonOf(t))
		} else {
			att = a.runner.start(k, t)
		}
		a.attempts[k] = att
		a.poke()
	}
	for k, att := range a.attempts {
		if !a.isCurrent(k) || listed[k] || isClosed(att.exited) {
			continue
		}
		att.stop(api.ReasonCancelled)
		if att.stopped == nil {
			a.reportStopped(att, api.StoppedNotListed, fmt.Sprintf("node %s ran this attempt but the server does not list it; stopped", a.name))
		}
	}
	for k := range a.notices {
		if att, ok := a.attempts[k]; !ok || isClosed(att.exited) {
			delete(a.notices, k)
		}
	}
	a.startRelays(desired)
	a.settle()
}

// watchWait is how long one watch request may be held by the server.
const watchWait = 30 * time.Second

// minWatch is the shortest window between heartbeats a watch is sent for: at intervals
// this short the next heartbeat brings new work about as soon.
const minWatch = 500 * time.Millisecond

// watchMargin is how long before the next heartbeat, due in wait, the watch held meanwhile
// ends: a tenth of the wait, at most a second, so that its answer is back and its
// connection free when the heartbeat goes.
func watchMargin(wait time.Duration) time.Duration { return min(wait/10, time.Second) }

// errNoWatch means the server has no watch route; heartbeats alone keep the node in sync.
var errNoWatch = errors.New("server has no watch route")

// offerWatch lets the watch long-poll until until, in place of any window it has not
// taken yet.
func (a *Agent) offerWatch(until time.Time) {
	select {
	case <-a.watchUntil:
	default:
	}
	select {
	case a.watchUntil <- until:
	default:
	}
}

// watch long-polls the server and asks for a heartbeat as soon as this node's desired state
// changes, so a job placed here starts at once instead of at the next heartbeat.
//
// It watches only between heartbeats, in the window each answered heartbeat offers (until
// shortly before the next is due), so that the watch and the heartbeats take turns on one
// connection. Held across heartbeats, a watch kept a second connection open to the server
// for every node: over HTTP/1.1 a request in flight holds its connection, so each
// heartbeat went on another. At 9,800 nodes the server held 29,600 goroutines, three for
// each node, and 1.9 GB of memory; with the watch between heartbeats, 18,700 and 1.3 GB
// (docs/scale.md). A heartbeat sent early, for a task's end, while a watch is held still
// goes at once, on a second connection the client opens for it.
func (a *Agent) watch(ctx context.Context) {
	var version uint64
	for {
		var until time.Time
		select {
		case <-ctx.Done():
			return
		case until = <-a.watchUntil:
		}
		for left := time.Until(until); left >= minWatch && ctx.Err() == nil; left = time.Until(until) {
			v, err := a.watchOnce(ctx, version, min(left, watchWait))
			if errors.Is(err, errNoWatch) {
				a.logger.Info("server has no watch route; new work arrives with heartbeats")
				return
			}
			if err != nil {
				// The heartbeat loop reports outages; the watch waits for its next window.
				break
			}
			if v != version {
				version = v
				a.poke()
				break
			}
		}
	}
}

// watchOnce long-polls the server for wait at most, and returns the node's version.
func (a *Agent) watchOnce(ctx context.Context, version uint64, wait time.Duration) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, wait+heartbeatTimeout)
	defer cancel()
	server := a.servers.current()
	u := fmt.Sprintf("%s/api/v1/agents/%s/watch?version=%d&wait=%.3f", server, url.PathEscape(a.name), version, wait.Seconds())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := a.httpClient().Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return 0, errNoWatch
	}
	if resp.StatusCode == http.StatusServiceUnavailable {
		a.servers.moveOn(server, resp)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("watch: status %d", resp.StatusCode)
	}
	var ans api.WatchAnswer
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<10)).Decode(&ans); err != nil {
		return 0, fmt.Errorf("watch: decode answer: %w", err)
	}
	return ans.Version, nil
}
