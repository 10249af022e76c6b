package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/agent"
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
}

func (f *serverFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.dataDir, "data-dir", defaultDataDir(), "directory for the database and job logs")
	fs.StringVar(&f.listen, "listen", defaultListen, "address the API listens on")
	fs.StringVar(&f.storeURL, "store", "", "store URL: sqlite://PATH or postgres://… (default: sqlite in the data dir)")
	fs.StringVar(&f.config, "config", "", "YAML file of queues and teams applied at start (see deploy/rota.yaml)")
	fs.DurationVar(&f.halfLife, "fairshare-half-life", 7*24*time.Hour, "how fast past usage stops counting against a team's fair share")
	fs.StringVar(&f.policy, "policy", "default", "scheduling policy: "+strings.Join(sched.PolicyNames(), ", ")+" (combine with +)")
	fs.DurationVar(&f.minRuntime, "min-runtime", sched.DefaultMinRuntime, "how long a job runs before it may be preempted (0: no protection)")
	fs.DurationVar(&f.heartbeat, "heartbeat-interval", 2*time.Second, "how often agents report")
	fs.DurationVar(&f.notReady, "node-not-ready-after", 15*time.Second, "silence after which a node takes no new work")
	fs.DurationVar(&f.lost, "node-lost-after", 5*time.Minute, "silence after which a node's jobs are requeued")
}

// agentFlags are shared by `rota agent` and `rota up`.
type agentFlags struct {
	name, labels, fakeGPUs, dataDir string
	cpus                            int
	memory                          string
}

func (f *agentFlags) register(fs *flag.FlagSet, withDataDir bool) {
	host, _ := os.Hostname()
	fs.StringVar(&f.name, "name", host, "node name")
	fs.StringVar(&f.labels, "labels", "", "node labels, k=v,k2=v2 (e.g. pool=train,rack=r1)")
	fs.StringVar(&f.fakeGPUs, "fake-gpus", "", "report N fake GPUs of MODEL instead of discovering real ones: N or NxMODEL")
	fs.IntVar(&f.cpus, "cpus", 0, "CPUs to offer to jobs (default: all; with --fake-gpus at least 8 per GPU)")
	fs.StringVar(&f.memory, "memory", "", "memory to offer to jobs, e.g. 512G (default: all; with --fake-gpus at least 64G per GPU)")
	if withDataDir {
		fs.StringVar(&f.dataDir, "data-dir", filepath.Join(defaultDataDir(), "agent"), "directory for job files, logs and checkpoints")
	}
}

func (f *agentFlags) config(serverURL, dataDir string) (agent.Config, error) {
	labels, err := agent.ParseLabels(f.labels)
	if err != nil {
		return agent.Config{}, err
	}
	cfg := agent.Config{ServerURL: serverURL, Name: f.name, Labels: labels, FakeGPUs: f.fakeGPUs, DataDir: dataDir, CPUs: f.cpus}
	if f.cpus < 0 {
		return agent.Config{}, fmt.Errorf("--cpus: must be 0 (all) or more, got %d", f.cpus)
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

func newLogger(stderr io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func runServer(ctx context.Context, args []string, stderr io.Writer) int {
	var sf serverFlags
	fs := newFlagSet("server", stderr)
	sf.register(fs)
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	log := newLogger(stderr)
	if err := serve(ctx, sf, log, nil); err != nil {
		log.Error("server stopped", "err", err)
		return 1
	}
	return 0
}

func runAgent(ctx context.Context, args []string, stderr io.Writer) int {
	var af agentFlags
	fs := newFlagSet("agent", stderr)
	serverURL := fs.String("server", envOr("ROTA_SERVER", "http://"+defaultListen), "server URL")
	af.register(fs, true)
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	log := newLogger(stderr)
	cfg, err := af.config(*serverURL, af.dataDir)
	if err != nil {
		fmt.Fprintf(stderr, "rota agent: %v\n", err)
		return 2
	}
	a, err := agent.New(cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "rota agent: %v\n", err)
		return 1
	}
	if err := a.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error("agent stopped", "err", err)
		return 1
	}
	return 0
}

// runUp starts the server and one agent in this process: the one-command start.
func runUp(ctx context.Context, args []string, stderr io.Writer) int {
	var sf serverFlags
	var af agentFlags
	fs := newFlagSet("up", stderr)
	sf.register(fs)
	af.register(fs, false)
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	log := newLogger(stderr)
	cfg, err := af.config("http://"+sf.listen, filepath.Join(sf.dataDir, "agent"))
	if err != nil {
		fmt.Fprintf(stderr, "rota up: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := make(chan string, 1)
	errc := make(chan error, 2)
	go func() { errc <- serve(ctx, sf, log, started) }()
	var addr string
	select {
	case addr = <-started:
	case err := <-errc:
		log.Error("server stopped", "err", err)
		return 1
	}
	cfg.ServerURL = "http://" + addr
	a, err := agent.New(cfg, log.With("component", "agent"))
	if err != nil {
		fmt.Fprintf(stderr, "rota up: %v\n", err)
		return 1
	}
	go func() { errc <- a.Run(ctx) }()
	fmt.Fprintf(stderr, "rota is up: API at http://%s, data in %s\n  try: rota submit -- echo hello   then: rota queue\n", addr, sf.dataDir)
	err = <-errc
	cancel()
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Error("rota up stopped", "err", err)
		return 1
	}
	return 0
}

// serve runs the control plane until ctx ends. It sends the bound address on started, if given.
func serve(ctx context.Context, sf serverFlags, log *slog.Logger, started chan<- string) error {
	if err := os.MkdirAll(sf.dataDir, 0o755); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	url := sf.storeURL
	if url == "" {
		url = "sqlite://" + filepath.Join(sf.dataDir, "rota.db")
	}
	st, err := store.Open(ctx, url, log)
	if err != nil {
		return fmt.Errorf("open store %s: %w", redact(url), err)
	}
	defer st.Close()
	policy, err := sched.OptionsFor(sf.policy)
	if err != nil {
		return fmt.Errorf("--policy: %w", err)
	}
	policy.MinRuntime = sf.minRuntime
	if sf.minRuntime <= 0 {
		policy.MinRuntime = -1
	}
	srv, err := server.New(ctx, server.Config{Policy: policy, DataDir: sf.dataDir, HeartbeatInterval: sf.heartbeat, NotReadyAfter: sf.notReady, LostAfter: sf.lost, HalfLife: sf.halfLife, ConfigFile: sf.config}, st, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", sf.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	log.Info("rota server listening", "addr", ln.Addr().String(), "store", redact(url), "data_dir", sf.dataDir)
	if started != nil {
		started <- ln.Addr().String()
	}
	go srv.Run(ctx)
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(shutdown)
	}()
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
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
