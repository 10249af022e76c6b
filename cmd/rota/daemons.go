package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/rotahq/rota/internal/agent"
	"github.com/rotahq/rota/internal/auth"
	"github.com/rotahq/rota/internal/cli"
	"github.com/rotahq/rota/internal/sched"
	"github.com/rotahq/rota/internal/server"
	"github.com/rotahq/rota/internal/store"
)

const defaultListen = "127.0.0.1:7070"

func defaultDataDir() string {
	if d := os.Getenv("ROTA_DATA_DIR"); d != "" {
		return d
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".rota")
	}
	return ".rota"
}

// serverFlags are shared by `rota server` and `rota up`.
type serverFlags struct {
	dataDir, listen, storeURL, config, policy       string
	heartbeat, notReady, lost, halfLife, minRuntime time.Duration
	assignTimeout, leaseInterval                    time.Duration
	attachGrace, keepEnded, memoryLimitRefresh      time.Duration
	logRetention                                    time.Duration
	tls, insecureHTTP, metricsPublic                bool
	tlsSANs, memoryLimit, maxLogSize, keepFreeDisk  string
	maxHeartbeats                                   float64
}

func (f *serverFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dataDir, "data-dir", defaultDataDir(), "directory for the database, the cluster CA, the local socket and job logs")
	fs.StringVar(&f.listen, "listen", defaultListen, "TCP address the API listens on (tokens and agent certificates; the local socket needs neither)")
	fs.StringVar(&f.storeURL, "store", "", "store URL: sqlite://PATH or postgres://… (default: sqlite in the data dir)")
	fs.StringVar(&f.config, "config", "", "YAML file of queues, teams, execution settings and limits applied at start (see deploy/rota.yaml)")
	fs.DurationVar(&f.halfLife, "fairshare-half-life", 7*24*time.Hour, "how fast past usage stops counting against a team's fair share")
	fs.StringVar(&f.policy, "policy", "default", "scheduling policy: "+strings.Join(sched.PolicyNames(), ", ")+" (combine with +)")
	fs.DurationVar(&f.minRuntime, "min-runtime", sched.DefaultMinRuntime, "how long a job runs before it may be preempted (0: no protection)")
	fs.DurationVar(&f.heartbeat, "heartbeat-interval", 2*time.Second, "how often agents report, in a cluster small enough for --max-heartbeats-per-second")
	fs.Float64Var(&f.maxHeartbeats, "max-heartbeats-per-second", 1000, "the most heartbeats a second all agents together are asked for: a larger cluster is asked for a longer interval than --heartbeat-interval, and the silences below grow with it (0: no bound; see docs/operations.md)")
	fs.DurationVar(&f.notReady, "node-not-ready-after", 15*time.Second, "silence after which a node takes no new work (at --heartbeat-interval; longer in proportion where the interval is)")
	fs.DurationVar(&f.lost, "node-lost-after", 5*time.Minute, "silence after which a node's jobs are requeued (longer by as much as the not-ready silence, where the interval is)")
	fs.DurationVar(&f.assignTimeout, "assign-timeout", 2*time.Minute, "how long a live node's agent may take to start an attempt before it is requeued")
	fs.DurationVar(&f.leaseInterval, "lease-interval", time.Second, "with a postgres:// store: how often the leader checks its lease and a standby tries to take it (see docs/ha.md)")
	fs.DurationVar(&f.attachGrace, "attach-grace", time.Minute, "how long an interactive job (rota run) may run with no terminal attached before it is cancelled")
	fs.DurationVar(&f.keepEnded, "keep-ended", 24*time.Hour, "how long the server keeps an ended job in memory; older ones are read from the store when asked for (see docs/operations.md)")
	fs.StringVar(&f.maxLogSize, "max-log-size", "1G", "the most of each rank's log the server keeps (and, in rota up, the node too): a size (512M, 4G) or off; the rest stays on the node, and rota logs says so (see docs/execution.md)")
	fs.StringVar(&f.keepFreeDisk, "keep-free-disk", "1G", "the room the server keeps free on its data dir's disk for its store: below it, it takes no more job logs, which wait on their nodes until there is room (a size such as 1G or 10G, or off; see docs/operations.md)")
	fs.DurationVar(&f.logRetention, "log-retention", 0, "how long after a job ends the server keeps its logs, such as 720h for 30 days; each server removes older ones from its data dir every hour (0: keeps them all)")
	fs.StringVar(&f.memoryLimit, "memory-limit", "auto", "soft limit on the server's memory, which the Go runtime keeps to by collecting more often: a size (900M, 1.5G), auto (90% of the memory limit of the server's cgroup, such as systemd's MemoryMax; none without one) or off; GOMEMLIMIT in the environment wins (see docs/operations.md)")
	fs.DurationVar(&f.memoryLimitRefresh, "memory-limit-refresh", time.Minute, "with --memory-limit auto: how often the server reads its cgroup's memory limit again, to follow a change made while it runs (0: only at start)")
	fs.BoolVar(&f.metricsPublic, "metrics-public", false, "serve /metrics without credentials (else a token of any role, or the local socket)")
	fs.BoolVar(&f.tls, "tls", false, "serve TLS on --listen with a certificate from the cluster CA (agents need it; clients pin the CA fingerprint)")
	fs.StringVar(&f.tlsSANs, "tls-san", "", "extra host names and IPs for the server's certificate, comma-separated (it always has localhost, the host name and the --listen address)")
	fs.BoolVar(&f.insecureHTTP, "insecure-http", false, "allow plain HTTP on a non-loopback --listen address (tokens and job secrets then cross the network in clear)")
}

// agentFlags are shared by `rota agent` and `rota up`.
type agentFlags struct {
	name, labels, fakeGPUs, dataDir string
	cpus                            int
	memory                          string
	fakeGPUsConfig                  string
	healthCheck, containerRuntime   string
	healthInterval, healthTimeout   time.Duration
	telemetryInterval, killAfter    time.Duration
	gpuMemGrace                     time.Duration
	mpsPipeDir                      string
}

func (f *agentFlags) register(fs *flag.FlagSet, withDataDir bool) {
	host, _ := os.Hostname()
	fs.StringVar(&f.name, "name", host, "node name")
	fs.StringVar(&f.labels, "labels", "", "node labels, k=v,k2=v2 (e.g. pool=train,rack=r1)")
	fs.StringVar(&f.fakeGPUs, "fake-gpus", "", "report N fake GPUs of MODEL instead of discovering real ones: N or NxMODEL")
	fs.IntVar(&f.cpus, "cpus", 0, "CPUs to offer to jobs (default: all; with --fake-gpus at least 8 per GPU)")
	fs.StringVar(&f.memory, "memory", "", "memory to offer to jobs, e.g. 512G (default: all; with --fake-gpus at least 64G per GPU)")
	fs.StringVar(&f.fakeGPUsConfig, "fake-gpus-config", "", "report fake GPUs described in a YAML `FILE` (models, NVLink topology, metric curves, faults; see examples/fake-gpus.yaml) instead of discovering real ones")
	fs.DurationVar(&f.telemetryInterval, "telemetry-interval", 5*time.Second, "how often GPU utilisation, memory and faults are read")
	fs.StringVar(&f.healthCheck, "health-check", "", "a `COMMAND` (run with /bin/sh -c) that checks the node; a non-zero exit or a timeout is a failure the server sees")
	fs.DurationVar(&f.healthInterval, "health-interval", time.Minute, "how often --health-check runs")
	fs.DurationVar(&f.healthTimeout, "health-timeout", 30*time.Second, "how long --health-check may run before it is killed and counted as failed")
	fs.DurationVar(&f.killAfter, "kill-leftovers-after", 0, "kill a GPU process that belongs to no job (anything rota did not start: a crashed job's child, a process run by hand, Xorg) after it has been there this long (0: never, only report it)")
	fs.DurationVar(&f.gpuMemGrace, "gpu-memory-grace", 10*time.Second, "how long a job that shares a GPU may hold more GPU memory than its slice before it is stopped (gpu_memory_exceeded)")
	fs.StringVar(&f.mpsPipeDir, "mps-pipe-dir", "", "where an NVIDIA MPS control daemon's pipes are; where it runs, jobs that share a GPU get MPS's limits (default: $CUDA_MPS_PIPE_DIRECTORY, else /tmp/nvidia-mps)")
	fs.StringVar(&f.containerRuntime, "container-runtime", "", "runtime for jobs with an image: podman, docker, apptainer, a path to one, or none (default: the first found)")
	if withDataDir {
		fs.StringVar(&f.dataDir, "data-dir", "", "directory for the node's identity, job files, logs and checkpoints (default: "+filepath.Join(defaultDataDir(), "agent", "NAME")+")")
	}
}

func (f *agentFlags) config(serverURL, dataDir string) (agent.Config, error) {
	labels, err := agent.ParseLabels(f.labels)
	if err != nil {
		return agent.Config{}, err
	}
	cfg := agent.Config{ServerURL: serverURL, Name: f.name, Labels: labels, FakeGPUs: f.fakeGPUs, DataDir: dataDir, CPUs: f.cpus,
		FakeGPUsConfig: f.fakeGPUsConfig, TelemetryInterval: f.telemetryInterval, HealthCheck: strings.TrimSpace(f.healthCheck),
		HealthCheckInterval: f.healthInterval, HealthCheckTimeout: f.healthTimeout, KillLeftoversAfter: f.killAfter,
		ContainerRuntime: f.containerRuntime, GPUMemoryGrace: f.gpuMemGrace, MPSPipeDir: f.mpsPipeDir}
	if f.cpus < 0 {
		return agent.Config{}, fmt.Errorf("--cpus: must be 0 (all) or more, got %d", f.cpus)
	}
	if f.fakeGPUs != "" && f.fakeGPUsConfig != "" {
		return agent.Config{}, errors.New("--fake-gpus and --fake-gpus-config: give one or the other")
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--telemetry-interval", f.telemetryInterval}, {"--health-interval", f.healthInterval}, {"--health-timeout", f.healthTimeout},
		{"--gpu-memory-grace", f.gpuMemGrace}} {
		if d.v <= 0 {
			return agent.Config{}, fmt.Errorf("%s: must be more than 0, got %v", d.flag, d.v)
		}
	}
	if f.killAfter < 0 {
		return agent.Config{}, fmt.Errorf("--kill-leftovers-after: must be 0 (never kill) or more, got %v", f.killAfter)
	}
	if f.memory != "" {
		mb, err := cli.ParseSize(f.memory)
		if err != nil {
			return agent.Config{}, fmt.Errorf("--memory: %w", err)
		}
		cfg.MemoryMB = mb
	}
	return cfg, nil
}

func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("rota "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

func parseFlags(fs *flag.FlagSet, args []string) int {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2
	}
	return -1
}

// logLevels are the levels --log-level takes, from the most said to the least.
var logLevels = []struct {
	name  string
	level slog.Level
}{{"debug", slog.LevelDebug}, {"info", slog.LevelInfo}, {"warn", slog.LevelWarn}, {"error", slog.LevelError}}

// registerLogLevel adds --log-level, shared by the server, the agent and rota up.
func registerLogLevel(fs *flag.FlagSet) *string {
	return fs.String("log-level", envOr("ROTA_LOG_LEVEL", "info"), "the least important messages written to stderr: debug, info, warn or error (default $ROTA_LOG_LEVEL, else info); debug adds a line for each submit")
}

// newLogger writes to stderr what is at least as important as level, a --log-level value.
func newLogger(stderr io.Writer, level string) (*slog.Logger, error) {
	for _, l := range logLevels {
		if strings.EqualFold(strings.TrimSpace(level), l.name) {
			return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: l.level})), nil
		}
	}
	return nil, fmt.Errorf("--log-level: %q is not a level: give debug, info, warn or error", level)
}

func runServer(ctx context.Context, args []string, stderr io.Writer) int {
	var sf serverFlags
	fs := newFlagSet("server", stderr)
	sf.register(fs)
	cpuProfile := fs.String("cpu-profile", "", "write a CPU profile (pprof format) of the server to `FILE`, from start until it stops: for finding where a loaded server spends its time")
	memProfile := fs.String("mem-profile", "", "write a heap profile (pprof format) of the server to `FILE` when it stops: for finding what holds its memory")
	logLevel := registerLogLevel(fs)
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "rota server: %v\n", err)
		return 2
	}
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "rota server: --cpu-profile: %v\n", err)
			return 2
		}
		defer stop()
	}
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			fmt.Fprintf(stderr, "rota server: --mem-profile: %v\n", err)
			return 2
		}
		// Written as the server is told to stop, while it still holds everything: the
		// profile is of the heap as the last garbage collection found it.
		written := make(chan struct{})
		go func() {
			defer close(written)
			<-ctx.Done()
			if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
				log.Error("--mem-profile", "err", err)
			}
			f.Close()
		}()
		defer func() { <-written }()
	}
	if err := serve(ctx, sf, server.Config{}, log, nil); err != nil {
		log.Error("server stopped", "err", err)
		return 1
	}
	return 0
}

func runAgent(ctx context.Context, args []string, stderr io.Writer) int {
	var af agentFlags
	fs := newFlagSet("agent", stderr)
	serverURL := fs.String("server", envOr("ROTA_SERVER", "https://"+defaultListen), "server URL (https://HOST:PORT), or a comma-separated list of a cluster's servers, among which the agent follows the leader")
	join := fs.String("join", os.Getenv("ROTA_JOIN_TOKEN"), "join token from `rota admin join-token` (default $ROTA_JOIN_TOKEN); needed only the first time")
	maxLog := fs.String("max-log-size", "1G", "the most of each attempt's output this node keeps in its log: a size (512M, 4G) or off; past it the rest is dropped, the job runs on, and the log says so (see docs/execution.md)")
	af.register(fs, true)
	logLevel := registerLogLevel(fs)
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "rota agent: %v\n", err)
		return 2
	}
	dataDir := af.dataDir
	if dataDir == "" {
		// One directory per node name, so two agents on one machine never share one.
		dataDir = filepath.Join(defaultDataDir(), "agent", af.name)
	}
	cfg, err := af.config(*serverURL, dataDir)
	if err != nil {
		fmt.Fprintf(stderr, "rota agent: %v\n", err)
		return 2
	}
	cfg.Join = strings.TrimSpace(*join)
	if cfg.MaxLogSize, err = maxLogSize(*maxLog); err != nil {
		fmt.Fprintf(stderr, "rota agent: %v\n", err)
		return 2
	}
	if os.Getenv("INVOCATION_ID") != "" {
		// Started by systemd, whose unit delegates the cgroup to the agent (Delegate=yes):
		// cgroup v2 hands the memory and cpu controllers only to the children of a cgroup
		// without processes, so the agent steps into a leaf of its own first.
		if err := agent.EnterDelegatedCgroup(); err != nil {
			log.Warn("cannot prepare the delegated cgroup; jobs' CPU and memory limits may not be enforced", "err", err)
		}
	}
	a, err := agent.New(cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "rota agent: %v\n", err)
		return 1
	}
	defer a.Close()
	if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "rota agent: %v\n", err)
		return 1
	}
	return 0
}

// runUp starts the server and one agent in this process: the one-command start. The agent
// reaches the server through an in-process connection, so it needs no join; people on
// this machine reach it through the local socket, so they need no token.
func runUp(ctx context.Context, args []string, stderr io.Writer) int {
	var sf serverFlags
	var af agentFlags
	fs := newFlagSet("up", stderr)
	sf.register(fs)
	af.register(fs, false)
	logLevel := registerLogLevel(fs)
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "rota up: %v\n", err)
		return 2
	}
	cfg, err := af.config("http://rota-up", filepath.Join(sf.dataDir, "agent", af.name))
	if err == nil {
		// One machine, one limit: the node keeps what the server keeps.
		cfg.MaxLogSize, err = maxLogSize(sf.maxLogSize)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rota up: %v\n", err)
		return 2
	}
	owner := "admin"
	if u, err := user.Current(); err == nil {
		owner = u.Username
	}
	// Whoever starts `rota up` owns it: they are its first admin, and if they are root
	// their jobs may run as root, since they could anyway.
	scfg := server.Config{BootstrapAdmin: owner, BootstrapAllowRoot: os.Geteuid() == 0, LocalUsersAreMembers: true}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := make(chan *server.Server, 1)
	errc := make(chan error, 2)
	local := server.NewLocalListener()
	go func() { errc <- serve(ctx, sf, scfg, log, &upHooks{started: started, local: local}) }()
	select {
	case <-started:
	case err := <-errc:
		log.Error("server stopped", "err", err)
		return 1
	}
	cfg.HTTPClient = local.Client()
	a, err := agent.New(cfg, log.With("component", "agent"))
	if err != nil {
		fmt.Fprintf(stderr, "rota up: %v\n", err)
		return 1
	}
	defer a.Close()
	go func() { errc <- a.Run(ctx) }()
	scheme := "http"
	if sf.tls {
		scheme = "https"
	}
	fmt.Fprintf(stderr, "rota is up: %s://%s (token in %s) and %s on this machine (no token needed); data in %s\n  try: rota submit -- echo hello   then: rota queue\n",
		scheme, sf.listen, filepath.Join(sf.dataDir, "admin-token"), socketPath(sf.dataDir), sf.dataDir)
	err = <-errc
	cancel()
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Error("rota up stopped", "err", err)
		return 1
	}
	return 0
}

// upHooks lets `rota up` learn when the server is ready and serve its agent in-process.
type upHooks struct {
	started chan<- *server.Server
	local   *server.LocalListener
}

func socketPath(dataDir string) string { return filepath.Join(dataDir, "rota.sock") }

// serve runs the control plane until ctx ends: on the local socket, on --listen (TLS with
// --tls), and, for `rota up`, on the in-process listener of its agent.
func serve(ctx context.Context, sf serverFlags, scfg server.Config, log *slog.Logger, up *upHooks) error {
	if err := os.MkdirAll(sf.dataDir, 0o755); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if !sf.tls && !sf.insecureHTTP && !isLoopback(sf.listen) {
		return fmt.Errorf("--listen %s is reachable from other machines: without --tls, API tokens and job secrets would cross the network in clear text; add --tls (agents need it anyway), or --insecure-http to force plain HTTP", sf.listen)
	}
	url := sf.storeURL
	if url == "" {
		url = "sqlite://" + filepath.Join(sf.dataDir, "rota.db")
	}
	if sf.leaseInterval <= 0 {
		return fmt.Errorf("--lease-interval: must be more than 0, got %v", sf.leaseInterval)
	}
	if sf.maxHeartbeats < 0 || math.IsNaN(sf.maxHeartbeats) || math.IsInf(sf.maxHeartbeats, 0) {
		return fmt.Errorf("--max-heartbeats-per-second: must be 0 (no bound) or more, such as 1000, got %v", sf.maxHeartbeats)
	}
	if sf.keepEnded <= 0 {
		return fmt.Errorf("--keep-ended: must be more than 0, such as 24h, got %v", sf.keepEnded)
	}
	if sf.logRetention < 0 {
		return fmt.Errorf("--log-retention: must be 0 (keep every log) or more, such as 720h, got %v", sf.logRetention)
	}
	maxLog, err := maxLogSize(sf.maxLogSize)
	if err != nil {
		return err
	}
	keepFree, err := keepFreeDisk(sf.keepFreeDisk)
	if err != nil {
		return err
	}
	policy, err := sched.OptionsFor(sf.policy)
	if err != nil {
		return fmt.Errorf("--policy: %w", err)
	}
	memLimit, memFrom, followCgroup, err := memoryLimit(sf.memoryLimit, os.Getenv("GOMEMLIMIT"), memlimit.FromCgroup)
	if err != nil {
		return err
	}
	if sf.memoryLimitRefresh < 0 {
		return fmt.Errorf("--memory-limit-refresh: must be 0 (read the cgroup only at start) or more, such as 1m, got %v", sf.memoryLimitRefresh)
	}
	if memLimit > 0 {
		debug.SetMemoryLimit(memLimit)
	}
	if cur := debug.SetMemoryLimit(-1); cur < math.MaxInt64 {
		log.Info("memory limit", "limit", mib(cur), "from", memFrom)
	} else {
		log.Debug("no memory limit", "why", memFrom)
	}
	if followCgroup && sf.memoryLimitRefresh > 0 {
		followCtx, stopFollowing := context.WithCancel(ctx)
		defer stopFollowing()
		go followCgroupLimit(followCtx, sf.memoryLimitRefresh, memlimit.FromCgroup, debug.SetMemoryLimit, log)
	}
	// The listener comes first: with a PostgreSQL store its address is what the lease
	// records, for standbys to send callers to.
	ln, err := net.Listen("tcp", sf.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	scheme := "http"
	if sf.tls {
		scheme = "https"
	}
	selfURL := scheme + "://" + advertised(ln.Addr().String())
	st, err := store.Open(ctx, url, log)
	if err != nil {
		return fmt.Errorf("open store %s: %w", redact(url), err)
	}
	defer st.Close()
	if store.Kind(st) == "postgres" {
		// Several servers may share a PostgreSQL store: one leads, the others stand by.
		host, _ := os.Hostname()
		lease, err := store.OpenLease(url, st, store.LeaseOptions{ID: advertised(ln.Addr().String()), Host: host, URL: selfURL})
		if err != nil {
			return err
		}
		scfg.Lease, scfg.LeaseInterval = lease, sf.leaseInterval
	}
	policy.MinRuntime = sf.minRuntime
	if sf.minRuntime <= 0 {
		policy.MinRuntime = -1
	}
	scfg.Policy, scfg.DataDir, scfg.ConfigFile = policy, sf.dataDir, sf.config
	scfg.HeartbeatInterval, scfg.NotReadyAfter, scfg.LostAfter = sf.heartbeat, sf.notReady, sf.lost
	scfg.MaxHeartbeatsPerSecond = sf.maxHeartbeats
	if sf.maxHeartbeats == 0 {
		scfg.MaxHeartbeatsPerSecond = -1 // the server's Config takes 0 for its default
	}
	scfg.HalfLife, scfg.AssignTimeout = sf.halfLife, sf.assignTimeout
	scfg.AttachGrace, scfg.KeepEnded, scfg.MaxLogSize, scfg.LogRetention = sf.attachGrace, sf.keepEnded, maxLog, sf.logRetention
	scfg.KeepFreeDisk = keepFree
	scfg.MetricsPublic = sf.metricsPublic
	if sf.tls {
		scfg.AdvertiseURL = "https://" + advertised(sf.listen)
	}
	// /metrics shows the Go runtime and the process (memory, CPU, open files) beside rota's own,
	// and the runtime's estimate of where the CPU went (go_cpu_classes_*: the collector's
	// marking, its assists and pauses, returning memory, the rest), so that a busy server's
	// CPU can be split between rota's work and the collector's.
	scfg.Registry = prometheus.NewRegistry()
	cpuClasses := collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/cpu/classes/`)}
	scfg.Registry.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(cpuClasses)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv, err := server.New(ctx, scfg, st, log)
	if err != nil {
		return err
	}
	defer srv.Close()

	if sf.tls {
		cert, err := srv.CA().ServerCertificate(serverHosts(ln.Addr(), sf.tlsSANs), 365*24*time.Hour)
		if err != nil {
			return fmt.Errorf("server certificate: %w", err)
		}
		ln = tls.NewListener(ln, auth.ServerTLSConfig(srv.CA(), cert))
	}
	// What `rota ui` links to when it asks over the local socket.
	srv.SetURL(selfURL)
	sock, err := listenSocket(socketPath(sf.dataDir))
	if err != nil {
		return err
	}
	handler := srv.Handler()
	// net/http's own messages are mostly failed TLS handshakes: an agent of another
	// cluster retrying, a port scanner. They are debug detail, not the server's news.
	httpLog := slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	newHTTP := func() *http.Server {
		return &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ConnContext: srv.ConnContext, ErrorLog: httpLog}
	}
	servers := []*http.Server{newHTTP(), newHTTP()}
	listeners := []net.Listener{ln, sock}
	if up != nil {
		servers = append(servers, newHTTP())
		listeners = append(listeners, up.local)
	}
	log.Info("rota server listening", "addr", scheme+"://"+ln.Addr().String(), "socket", socketPath(sf.dataDir),
		"store", redact(url), "data_dir", sf.dataDir, "cluster", srv.ClusterID(), "ca_fingerprint", srv.CA().Fingerprint())
	if sf.tls {
		log.Info("clients log in with: rota login --server " + scheme + "://" + ln.Addr().String() + " --ca-fingerprint " + srv.CA().Fingerprint() +
			"; agents join with a token from: rota admin join-token")
	}
	if up != nil {
		up.started <- srv
	}
	// Run is stopped and waited for before the store closes: it gives the lease up, so a
	// standby takes over at once.
	runCtx, stopRun := context.WithCancel(ctx)
	runDone := make(chan struct{})
	go func() { defer close(runDone); srv.Run(runCtx) }()
	defer func() { stopRun(); <-runDone }()
	errc := make(chan error, len(servers))
	for i, hs := range servers {
		go func() { errc <- hs.Serve(listeners[i]) }()
	}
	select {
	case <-ctx.Done():
	case err = <-errc:
	case <-srv.Wedged():
		// A handler panicked holding the server's lock: nothing, a clean stop included,
		// can take it. Every change acknowledged is in the store, where a restart (by
		// systemd, or by hand) reads it back.
		log.Error("exiting: the server is wedged after a panic (logged above); start it again, and report the panic")
		os.Exit(1)
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, hs := range servers {
		hs.Shutdown(shutdown)
	}
	os.Remove(socketPath(sf.dataDir))
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// listenSocket listens on the local socket, replacing one a dead server left behind but
// never one a live server answers on. Anyone on the machine may connect: the server tells
// who they are from the socket's peer credentials.
func listenSocket(path string) (net.Listener, error) {
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("another rota server is running on %s; stop it, or give this one another --data-dir", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("open %s to local users: %w", path, err)
	}
	return ln, nil
}

// serverHosts are the names the server's certificate covers.
func serverHosts(addr net.Addr, extra string) []string {
	hosts := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil {
		hosts = append(hosts, h)
	}
	if tcp, ok := addr.(*net.TCPAddr); ok && !tcp.IP.IsUnspecified() {
		hosts = append(hosts, tcp.IP.String())
	}
	for _, h := range strings.Split(extra, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

// advertised is the listen address as other machines reach it: a wildcard host is
// replaced by this machine's name.
func advertised(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	return net.JoinHostPort(host, port)
}

// isLoopback reports whether a listen address can only be reached from this machine.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// redact hides a password in a store URL before it is logged.
func redact(url string) string {
	at := strings.LastIndex(url, "@")
	scheme := strings.Index(url, "://")
	if at < 0 || scheme < 0 {
		return url
	}
	userinfo := url[scheme+3 : at]
	if i := strings.Index(userinfo, ":"); i >= 0 {
		return url[:scheme+3] + userinfo[:i] + ":***" + url[at:]
	}
	return url
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// startCPUProfile profiles the process's CPU into file until the returned stop is called.
func startCPUProfile(file string) (stop func(), err error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// keepFreeDisk is --keep-free-disk in bytes: negative for off (server.Config.KeepFreeDisk).
func keepFreeDisk(flag string) (int64, error) {
	v := strings.TrimSpace(flag)
	if strings.EqualFold(v, "off") {
		return -1, nil
	}
	mb, err := cli.ParseSize(v)
	if err != nil || mb < 1 || mb > 1<<30 {
		return 0, fmt.Errorf("--keep-free-disk: %q is not off or a size from 1M to 1P, such as 1G or 10G", flag)
	}
	return mb << 20, nil
}

// maxLogSize is --max-log-size in bytes: negative for off (server.Config.MaxLogSize,
// agent.Config.MaxLogSize).
func maxLogSize(flag string) (int64, error) {
	v := strings.TrimSpace(flag)
	if strings.EqualFold(v, "off") {
		return -1, nil
	}
	mb, err := cli.ParseSize(v)
	if err != nil || mb < 1 || mb > 1<<30 {
		return 0, fmt.Errorf("--max-log-size: %q is not off or a size from 1M to 1P, such as 512M or 4G", flag)
	}
	return mb << 20, nil
}
