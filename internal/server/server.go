package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/sched"
	"github.com/rotahq/rota/internal/store"
)

// Clock tells the time. The server takes one so tests can control when nodes go quiet and
// when time limits fall, without sleeping.
type Clock interface {
	Now() time.Time
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now().UTC() }

// Config holds the server's settings. Zero values take the documented defaults.
type Config struct {
	// DataDir holds the job logs shipped by agents.
	DataDir string
	// HeartbeatInterval is how often agents are asked to report (default 2s).
	HeartbeatInterval time.Duration
	// NotReadyAfter is the silence after which a node takes no new work (default 15s).
	NotReadyAfter time.Duration
	// LostAfter is the silence after which a node's jobs are requeued or failed (default 5m).
	LostAfter time.Duration
	// CycleInterval is the longest time between two scheduling cycles (default 1s); a cycle
	// also runs right after any change that may let a job start.
	CycleInterval time.Duration
	// HalfLife is how fast fair-share usage decays (default 7 days).
	HalfLife time.Duration
	// ConfigFile, if set, is applied at start (queues and teams); an invalid file stops the
	// start with the line at fault.
	ConfigFile string
	// Policy configures the scheduling core; the zero value is rota's default policy.
	Policy sched.Options
	Clock  Clock
}

func (c *Config) setDefaults() {
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 2 * time.Second
	}
	if c.NotReadyAfter <= 0 {
		c.NotReadyAfter = 15 * time.Second
	}
	if c.LostAfter <= 0 {
		c.LostAfter = 5 * time.Minute
	}
	if c.CycleInterval <= 0 {
		c.CycleInterval = time.Second
	}
	if c.Clock == nil {
		c.Clock = wallClock{}
	}
	if c.HalfLife <= 0 {
		c.HalfLife = 7 * 24 * time.Hour
	}
}

// Server is the control plane: it owns the live state, commits every change to the store
// before acknowledging it, runs the scheduler and answers the API and the agents.
type Server struct {
	cfg   Config
	log   *slog.Logger
	store store.Store
	kick  chan struct{}

	mu    sync.Mutex // guards the fields below; held across store commits so memory and disk change in the same order
	state *cluster.State
	// reasons holds the last cycle's structured reason per pending job, for rota why.
	reasons map[int64]sched.Reason

	logMu sync.Mutex // serialises writes to shipped log files

	watch nodeWatch
}

// New loads the state from st and returns a server ready to serve. A nil logger discards.
func New(ctx context.Context, cfg Config, st store.Store, logger *slog.Logger) (*Server, error) {
	cfg.setDefaults()
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("server: data dir is required")
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("server: create log dir: %w", err)
	}
	s := &Server{cfg: cfg, log: logger, store: st, kick: make(chan struct{}, 1), state: cluster.New()}
	s.state.HalfLife = cfg.HalfLife
	if err := s.load(ctx); err != nil {
		return nil, err
	}
	if cfg.ConfigFile != "" {
		data, err := os.ReadFile(cfg.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("server: config: %w", err)
		}
		s.mu.Lock()
		_, apiErr := s.applyConfig(ctx, data, "config file")
		s.mu.Unlock()
		if apiErr != nil {
			return nil, fmt.Errorf("server: config %s: %s", cfg.ConfigFile, apiErr.Message)
		}
	}
	return s, nil
}

// load reads the whole state from the store, and installs the default queues the first time.
func (s *Server) load(ctx context.Context) error {
	jobs, err := s.store.LoadJobs(ctx)
	if err != nil {
		return fmt.Errorf("server: load jobs: %w", err)
	}
	attempts, err := s.store.LoadAttempts(ctx)
	if err != nil {
		return fmt.Errorf("server: load attempts: %w", err)
	}
	nodes, err := s.store.LoadNodes(ctx)
	if err != nil {
		return fmt.Errorf("server: load nodes: %w", err)
	}
	queues, err := s.store.LoadQueues(ctx)
	if err != nil {
		return fmt.Errorf("server: load queues: %w", err)
	}
	teams, err := s.store.LoadTeams(ctx)
	if err != nil {
		return fmt.Errorf("server: load teams: %w", err)
	}
	resv, err := s.store.LoadReservations(ctx)
	if err != nil {
		return fmt.Errorf("server: load reservations: %w", err)
	}
	// Nodes were not heard from while the server was down; give each a full
	// NotReadyAfter from now before judging it, so a restart never loses a node.
	now := s.cfg.Clock.Now()
	for i := range nodes {
		nodes[i].LastHeartbeat = now
	}
	s.state.Apply(&store.Batch{Jobs: jobs, Attempts: attempts, Nodes: nodes, Queues: queues, Teams: teams, Reservations: resv})
	if len(queues) == 0 {
		b := &store.Batch{Queues: DefaultQueues()}
		for _, q := range b.Queues {
			b.Events = append(b.Events, api.Event{Time: now, Actor: "system", Kind: api.EventAdmin, Message: "created default queue " + q.Name})
		}
		if err := s.commit(ctx, b); err != nil {
			return fmt.Errorf("server: install default queues: %w", err)
		}
	}
	s.log.Info("state loaded", "jobs", len(jobs), "nodes", len(nodes), "pending", len(s.state.PendingIDs()), "active", len(s.state.ActiveIDs()))
	return nil
}

// commit writes b to the store and, only if that succeeded, to memory. Callers hold s.mu.
func (s *Server) commit(ctx context.Context, b *store.Batch) error {
	if b.Empty() {
		return nil
	}
	if err := s.store.Commit(ctx, b); err != nil {
		return err
	}
	s.state.Apply(b)
	s.watch.bump(b)
	return nil
}

// wake asks the scheduling loop for a cycle soon. It never blocks.
func (s *Server) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run schedules and watches node liveness until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.CycleInterval)
	defer t.Stop()
	for {
		s.checkNodes(ctx)
		if err := s.Cycle(ctx); err != nil {
			s.log.Error("scheduling cycle failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-s.kick:
		}
	}
}

// route is one entry of the API: method, path pattern and handler.
type route struct {
	method, path string
	handle       func(*Server, http.ResponseWriter, *http.Request)
}

// routes is the whole API. A test checks that api/openapi.yaml documents every entry.
var routes = []route{
	{"POST", "/api/v1/jobs", (*Server).handleSubmit},
	{"GET", "/api/v1/jobs", (*Server).handleListJobs},
	{"GET", "/api/v1/jobs/{id}", (*Server).handleGetJob},
	{"POST", "/api/v1/jobs/{id}/cancel", (*Server).handleCancel},
	{"GET", "/api/v1/jobs/{id}/logs", (*Server).handleGetLogs},
	{"POST", "/api/v1/jobs/{id}/hold", (*Server).handleHold},
	{"POST", "/api/v1/jobs/{id}/release", (*Server).handleRelease},
	{"GET", "/api/v1/jobs/{id}/why", (*Server).handleWhy},
	{"GET", "/api/v1/nodes", (*Server).handleNodes},
	{"POST", "/api/v1/nodes/{name}/drain", (*Server).handleDrain},
	{"POST", "/api/v1/nodes/{name}/resume", (*Server).handleResume},
	{"GET", "/api/v1/queues", (*Server).handleQueues},
	{"PUT", "/api/v1/queues/{name}", (*Server).handlePutQueue},
	{"DELETE", "/api/v1/queues/{name}", (*Server).handleDeleteQueue},
	{"GET", "/api/v1/teams", (*Server).handleTeams},
	{"PUT", "/api/v1/teams/{name}", (*Server).handlePutTeam},
	{"DELETE", "/api/v1/teams/{name}", (*Server).handleDeleteTeam},
	{"GET", "/api/v1/reservations", (*Server).handleReservations},
	{"POST", "/api/v1/reservations", (*Server).handleReserve},
	{"DELETE", "/api/v1/reservations/{id}", (*Server).handleUnreserve},
	{"PUT", "/api/v1/config", (*Server).handlePutConfig},
	{"GET", "/api/v1/history", (*Server).handleHistory},
	{"POST", "/api/v1/agents/{node}/heartbeat", (*Server).handleHeartbeat},
	{"GET", "/api/v1/agents/{node}/watch", (*Server).handleWatch},
	{"POST", "/api/v1/agents/{node}/logs/{job}/{attempt}", (*Server).handleShipLog},
}

// Handler returns the HTTP API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	for _, rt := range routes {
		mux.HandleFunc(rt.method+" "+rt.path, func(w http.ResponseWriter, r *http.Request) { rt.handle(s, w, r) })
	}
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Message: "no such API route: " + r.Method + " " + r.URL.Path})
	})
	return mux
}
