package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// Defaults for a Config left zero.
const (
	defaultHeartbeat   = 5 * time.Second
	heartbeatTimeout   = 15 * time.Second
	maxHeartbeatAnswer = 16 << 20
	// logFlushWait is how long an ended task waits for its last log bytes to ship before
	// its end is reported; see runner.flushWait.
	logFlushWait = 5 * time.Second
)

// Config is what an agent needs to join a cluster.
type Config struct {
	// ServerURL is the server's base URL, e.g. "http://rota-server:8080".
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
	// DataDir holds job directories, logs and checkpoints.
	DataDir string
	// HeartbeatInterval until the server says otherwise; zero means 5s.
	HeartbeatInterval time.Duration
	// HTTPClient talks to the server; nil means a default client.
	HTTPClient *http.Client
}

// Agent runs the jobs the server places on this node.
type Agent struct {
	server    string
	name      string
	interval  time.Duration
	client    *http.Client
	logger    *slog.Logger
	inventory api.Inventory
	runner    *runner
	shipper   *logShipper
	// wake asks the loop for an early heartbeat, when a task changes state.
	wake chan struct{}

	mu sync.Mutex // guards the fields below
	// tasks holds running tasks and ended ones the server has not acknowledged.
	tasks map[taskKey]*proc
	// forgotten holds acknowledged attempts, so one listed again is never run twice.
	forgotten map[taskKey]struct{}
	running   bool
}

// New checks cfg, discovers the GPUs and prepares the data directory.
func New(cfg Config, logger *slog.Logger) (*Agent, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	u, err := url.Parse(cfg.ServerURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server URL %q: want http://host:port or https://host:port", cfg.ServerURL)
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
	interval := cfg.HeartbeatInterval
	if interval <= 0 {
		interval = defaultHeartbeat
	}
	client := cfg.HTTPClient
	if client == nil {
		client = &http.Client{}
	}

	var devices Devices = NVMLDevices{}
	if cfg.FakeGPUs != "" {
		if devices, err = ParseFakeGPUs(cfg.FakeGPUs, name); err != nil {
			return nil, err
		}
	}
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
	if cfg.CPUs < 0 || cfg.MemoryMB < 0 {
		return nil, fmt.Errorf("CPUs %d and memory %d MB: want 0 (the whole machine) or more", cfg.CPUs, cfg.MemoryMB)
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

	logger = logger.With("node", name)
	server := strings.TrimRight(cfg.ServerURL, "/")
	a := &Agent{
		server:    server,
		name:      name,
		interval:  interval,
		client:    client,
		logger:    logger,
		inventory: inv,
		wake:      make(chan struct{}, 1),
		tasks:     map[taskKey]*proc{},
		forgotten: map[taskKey]struct{}{},
	}
	a.runner = &runner{
		dataDir:   dataDir,
		baseEnv:   os.Environ(),
		logger:    logger,
		flushWait: logFlushWait,
		onChange:  a.poke,
	}
	a.shipper = &logShipper{client: client, server: server, node: name, poll: min(interval, maxLogPoll)}
	logger.Info("agent ready", "gpus", len(inv.GPUs), "device_source", inv.DeviceSource,
		"cpus", inv.CPUs, "memory_mb", inv.MemoryMB, "data_dir", dataDir)
	return a, nil
}

// poke asks for a heartbeat now; one pending request is enough.
func (a *Agent) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Run heartbeats and reconciles until ctx is done, then returns nil. It leaves running jobs
// alone: they must survive the agent stopping as they survive the server going away.
func (a *Agent) Run(ctx context.Context) error {
	a.mu.Lock()
	if a.running {
		a.mu.Unlock()
		return errors.New("agent: Run called twice")
	}
	a.running = true
	a.mu.Unlock()

	var shippers sync.WaitGroup
	defer shippers.Wait()
	shippers.Go(func() { a.watch(ctx) })
	interval := a.interval
	var downSince time.Time
	for {
		resp, err := a.beat(ctx)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err != nil && downSince.IsZero():
			downSince = time.Now()
			a.logger.Warn("server unreachable; jobs keep running, retrying", "err", err, "every", interval)
		case err == nil:
			if !downSince.IsZero() {
				a.logger.Info("server reachable again", "down_for", time.Since(downSince).Round(time.Second))
				downSince = time.Time{}
			}
			if resp.HeartbeatSeconds > 0 {
				interval = time.Duration(resp.HeartbeatSeconds * float64(time.Second))
			}
			a.reconcile(ctx, &shippers, resp.Tasks)
		}

		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-a.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// beat sends one heartbeat. On success the events it carried are delivered and the ended
// tasks the server acknowledged are forgotten.
func (a *Agent) beat(ctx context.Context) (*api.HeartbeatResponse, error) {
	type sent struct {
		p      *proc
		events int
		ended  bool
	}
	a.mu.Lock()
	keys := make([]taskKey, 0, len(a.tasks))
	for k := range a.tasks {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].job != keys[j].job {
			return keys[i].job < keys[j].job
		}
		return keys[i].attempt < keys[j].attempt
	})
	hb := api.Heartbeat{Node: a.name, Inventory: a.inventory, Tasks: make([]api.TaskStatus, 0, len(keys)), AgentTime: time.Now().UTC()}
	carried := make(map[taskKey]sent, len(keys))
	for _, k := range keys {
		p := a.tasks[k]
		st, ended := p.snapshot()
		st.Events = p.events.peek()
		hb.Tasks = append(hb.Tasks, st)
		carried[k] = sent{p: p, events: len(st.Events), ended: ended}
	}
	a.mu.Unlock()

	resp, err := a.post(ctx, hb)
	if err != nil {
		return nil, err
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range carried {
		s.p.events.drop(s.events)
	}
	for _, ref := range resp.Acked {
		k := taskKey{ref.JobID, ref.Attempt}
		// Only an end the server has actually seen may be forgotten.
		if s, ok := carried[k]; ok && s.ended && a.tasks[k] == s.p {
			delete(a.tasks, k)
			a.forgotten[k] = struct{}{}
		}
	}
	return resp, nil
}

func (a *Agent) post(ctx context.Context, hb api.Heartbeat) (*api.HeartbeatResponse, error) {
	body, err := json.Marshal(hb)
	if err != nil {
		return nil, fmt.Errorf("encode heartbeat: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, heartbeatTimeout)
	defer cancel()
	u := a.server + "/api/v1/agents/" + url.PathEscape(a.name) + "/heartbeat"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("heartbeat request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("heartbeat: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxHeartbeatAnswer))
	if err != nil {
		return nil, fmt.Errorf("heartbeat: read answer: %w", err)
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

// reconcile makes the node match the desired tasks: start what is new, stop what the server
// asks to stop, and cancel what it no longer lists.
func (a *Agent) reconcile(ctx context.Context, shippers *sync.WaitGroup, desired []api.Task) {
	a.mu.Lock()
	defer a.mu.Unlock()
	listed := make(map[taskKey]bool, len(desired))
	for _, t := range desired {
		k := taskKey{t.JobID, t.Attempt}
		listed[k] = true
		if p, ok := a.tasks[k]; ok {
			if t.Stop {
				p.stop(stopReason(t))
			}
			continue
		}
		if _, done := a.forgotten[k]; done {
			continue
		}
		var p *proc
		if t.Stop {
			p = a.runner.stopBeforeStart(t, stopReason(t))
		} else {
			p = a.runner.start(t)
			shippers.Add(1)
			go func() {
				defer shippers.Done()
				a.shipper.ship(ctx, p)
			}()
		}
		a.tasks[k] = p
		a.poke()
	}
	for k, p := range a.tasks {
		if _, ended := p.snapshot(); !listed[k] && !ended {
			p.stop(api.ReasonCancelled)
		}
	}
}

// stopReason defaults an unspecified stop to a cancel, the stop a user asks for.
func stopReason(t api.Task) string {
	if t.StopReason == "" {
		return api.ReasonCancelled
	}
	return t.StopReason
}

// watchWait is how long one watch request may be held by the server.
const watchWait = 30 * time.Second

// errNoWatch means the server has no watch route; heartbeats alone keep the node in sync.
var errNoWatch = errors.New("server has no watch route")

// watch long-polls the server and asks for a heartbeat as soon as this node's desired state
// changes, so a job placed here starts at once instead of at the next heartbeat.
func (a *Agent) watch(ctx context.Context) {
	var version uint64
	for ctx.Err() == nil {
		v, err := a.watchOnce(ctx, version)
		switch {
		case errors.Is(err, errNoWatch):
			a.logger.Info("server has no watch route; new work arrives with heartbeats")
			return
		case err != nil:
			// The heartbeat loop reports outages; this one only waits to try again.
			if !sleep(ctx, a.interval) {
				return
			}
		case v != version:
			version = v
			a.poke()
		}
	}
}

func (a *Agent) watchOnce(ctx context.Context, version uint64) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, watchWait+heartbeatTimeout)
	defer cancel()
	u := fmt.Sprintf("%s/api/v1/agents/%s/watch?version=%d&wait=%d", a.server, url.PathEscape(a.name), version, int(watchWait/time.Second))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return 0, errNoWatch
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
