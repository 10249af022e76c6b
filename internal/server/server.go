package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
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

// DefaultMaxLogSize is Config.MaxLogSize's default: 1 GiB of each rank's log.
const DefaultMaxLogSize = 1 << 30

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
	// LogRepairWait is how long a read of an ended rank's log, of which this server holds
	// only part, waits for the node to send more of the rest before it answers with what
	// there is, marked incomplete (default 10s). Each piece that arrives starts it again.
	LogRepairWait time.Duration
	// MaxLogSize is the most of each rank's log the server keeps (default 1 GiB;
	// negative: no limit). Bytes past it are refused, and the copy ends there: a job
	// that prints without end must not fill the server's disk.
	MaxLogSize int64
	// KeepFreeDisk is the room the server keeps free on its data dir's disk, for its
	// store (default 1 GiB; negative: none): below it, it takes no more job logs, which
	// wait on their nodes (diskroom.go).
	KeepFreeDisk int64
	// LogRetention, when more than 0, is how long after a job ends its logs stay on the
	// server: each server removes older ones from its data dir every hour
	// (logretention.go). 0 keeps them.
	LogRetention time.Duration
	// MaxHeartbeatsPerSecond bounds the heartbeats all agents together are asked for
	// (default 1,000; negative: no bound). Where the nodes at HeartbeatInterval would send
	// more, agents are asked for a longer interval, and NotReadyAfter and LostAfter grow
	// with it (pace.go).
	MaxHeartbeatsPerSecond float64
	// CycleInterval is the longest time between two scheduling cycles (default 1s); a cycle
	// also runs right after any change that may let a job start.
	CycleInterval time.Duration
	// RecomputeInterval is the longest time between two cycles while nothing changes
	// (default 5 × CycleInterval): what depends on time alone, such as a job's age,
	// fair-share decay, a deadline nearing or a maintenance window opening, is weighed
	// again at least this often.
	RecomputeInterval time.Duration
	// HalfLife is how fast fair-share usage decays (default 7 days).
	HalfLife time.Duration
	// ConfigFile, if set, is applied at start (queues and teams); an invalid file stops the
	// start with the line at fault.
	ConfigFile string
	// Policy configures the scheduling core; the zero value is rota's default policy.
	Policy sched.Options
	Clock  Clock
	// Registry receives the server's Prometheus metrics and is what /metrics serves; nil
	// means a registry of the server's own. MetricsPublic serves /metrics without
	// credentials (else it needs a token of any role, or the local socket).
	Registry      *prometheus.Registry
	MetricsPublic bool
	// AssignTimeout is how long an attempt may stay ASSIGNED on a node whose agent is
	// heard from but does not report it, before it is requeued (default 2m).
	AssignTimeout time.Duration

	// BootstrapAdmin is the user the first start creates, with an admin token written to
	// DataDir/admin-token (default "admin"). BootstrapAllowRoot lets that user's jobs run
	// as root: `rota up` started by root sets it, since its owner is root already.
	BootstrapAdmin     string
	BootstrapAllowRoot bool
	// LocalUsersAreMembers admits every Unix account that calls on the local socket as a
	// member, without a rota user of its own: the workstation case of `rota up`.
	LocalUsersAreMembers bool
	// AdvertiseURL is the server's address as agents reach it (https://HOST:PORT), for
	// the command line a join token is printed with; empty means the request's host.
	AdvertiseURL string
	// Lease, when set, makes this server one of several on a PostgreSQL store: it writes
	// and schedules only while it holds the lease, and stands by otherwise (see ha.go).
	// LeaseInterval is how often the leader checks its lease and a standby tries to take
	// it (default 1s); it bounds how long a failover takes once the old session is gone.
	Lease         *store.Lease
	LeaseInterval time.Duration
	// MaxInflightSubmits bounds the jobs waiting for their group commit (default 50,000):
	// beyond it a submit is answered 429 with Retry-After (groupcommit.go).
	MaxInflightSubmits int
	// AttachGrace is how long an interactive job may run with no terminal attached before
	// it is cancelled (default 1m).
	AttachGrace time.Duration
	// KeepEnded is how long an ended job stays in memory (default 24h). Older ones are
	// read from the store when asked for, which every API answer does alike; memory then
	// follows the jobs that run, wait or ended recently, not all ever submitted.
	KeepEnded time.Duration
	// WedgedAfter is how long the server's lock may stay held after a handler panicked
	// before the server says it is wedged (Server.Wedged; default 30s, far longer than
	// any scheduling cycle or commit holds it).
	WedgedAfter time.Duration
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
	if c.MaxLogSize == 0 {
		c.MaxLogSize = DefaultMaxLogSize
	}
	if c.KeepFreeDisk == 0 {
		c.KeepFreeDisk = DefaultKeepFreeDisk
	}
	if c.LogRepairWait <= 0 {
		c.LogRepairWait = 10 * time.Second
	}
	if c.MaxHeartbeatsPerSecond == 0 {
		c.MaxHeartbeatsPerSecond = defaultMaxHeartbeatsPerSecond
	}
	if c.CycleInterval <= 0 {
		c.CycleInterval = time.Second
	}
	if c.RecomputeInterval <= 0 {
		c.RecomputeInterval = 5 * c.CycleInterval
	}
	if c.Clock == nil {
		c.Clock = wallClock{}
	}
	if c.HalfLife <= 0 {
		c.HalfLife = 7 * 24 * time.Hour
	}
	if c.AssignTimeout <= 0 {
		c.AssignTimeout = 2 * time.Minute
	}
	if c.AttachGrace <= 0 {
		c.AttachGrace = time.Minute
	}
	if c.BootstrapAdmin == "" {
		c.BootstrapAdmin = "admin"
	}
	if c.MaxInflightSubmits <= 0 {
		c.MaxInflightSubmits = 50000
	}
	if c.LeaseInterval <= 0 {
		c.LeaseInterval = time.Second
	}
	if c.KeepEnded <= 0 {
		c.KeepEnded = 24 * time.Hour
	}
	if c.WedgedAfter <= 0 {
		c.WedgedAfter = defaultWedgedAfter
	}
}

// defaultWedgedAfter is Config.WedgedAfter's default. A binary built for the fault
// injection test sets it shorter (faultinject.go).
var defaultWedgedAfter = 30 * time.Second

// Server is the control plane: it owns the live state, commits every change to the store
// before acknowledging it, runs the scheduler and answers the API and the agents.
type Server struct {
	cfg   Config
	log   *slog.Logger
	store store.Store
	kick  chan struct{}
	// wedged is closed, once, when a handler that panicked left mu held (wedge.go).
	wedged     chan struct{}
	wedgedOnce sync.Once

	// clusterID names this cluster: agents keep their attempts under it, and it is in
	// every certificate the CA issues. ca issues node certificates at join and renewal.
	clusterID string
	ca        *auth.CA

	// beats runs heartbeats' critical sections under mu, many to one hold when they
	// queue (combine.go).
	beats combiner

	mu    sync.Mutex // guards the fields below; held across store commits so memory and disk change in the same order
	state *cluster.State
	// view holds what authenticating an agent's request reads, beside the state and
	// readable without mu (authview.go).
	view authView
	// bestNodes holds, for the last cycle's pending jobs that have one, the node that
	// came closest to taking the job, for rota why (bestNodeOf). Only that: a whole reason
	// kept for each of 69,000 waiting jobs was 27 MB the plan's own list holds again. It is
	// a list, searched by rota why alone: a map of 69,000 took 14 ms of a 230 ms cycle to
	// build, at every cycle.
	bestNodes []bestNode
	// suspect is set when a commit failed in a way that may have hidden its outcome (a
	// connection lost during COMMIT): memory may lack what the store holds, so nothing
	// changes until the state has been read again.
	suspect bool
	// budgets are the GPU-hour budgets as the last cycle found them (budgets.go).
	budgets []budgetState
	// claims are the resources held for jobs waiting on their preemption victims, carried
	// from one scheduling cycle to the next (see sched.Claim).
	claims []sched.Claim
	// nextJobID is the lowest job ID not yet handed out, and groups the submits waiting
	// for their group commit (groupcommit.go).
	nextJobID int64
	groups    groupCommitter
	wq        writeQueue
	// committing counts the running group committers; Close waits for them, so that no
	// commit outlives the server into a closed store.
	committing sync.WaitGroup
	// cycleMu makes cycles run one at a time (Cycle plans without s.mu). cycled is the
	// state's change sequence the last cycle saw, lastCycle when it ran, and wakeAt the
	// earliest time a job held back by a timer (a retry's backoff) may start: the loop
	// runs a cycle only when one of them says something may have changed (cycleDue).
	cycleMu sync.Mutex
	// stall says whether what changed since the last cycle can let no job start
	// (stall.go). Guarded by mu.
	stall stall
	// ledger is the evicted jobs' use that budgets count; cycleMu guards it.
	ledger    budgetLedger
	cycled    uint64
	lastCycle time.Time
	wakeAt    time.Time
	// restUntil (Unix nanoseconds of the wall clock) is when the loop may start the next
	// cycle after a long one (see cycleDue).
	restUntil atomic.Int64
	// lastTook is how long the loop's last cycle took, which stretches the recompute
	// interval on a large cluster (cycleDue).
	lastTook atomic.Int64
	// planning and planned, if set (by tests and benchmarks), run while a cycle plans,
	// without s.mu: before the plan is made and after.
	planning, planned func()
	// snapshotPaused, if set (by tests and benchmarks), runs each time a cycle's snapshot
	// lets go of the lock between chunks of jobs.
	snapshotPaused func()
	// planner plans every cycle (made by the first); cycleMu guards it.
	planner *sched.Planner
	// betweenReads, if set (by tests), runs where a listing has read memory and released
	// s.mu, before it reads the store (see evictedView).
	betweenReads func()
	// invHashes holds, per node, the hash of the inventory its record holds (see
	// inventoryHash). Guarded by mu.
	invHashes map[string]heldInventory
	// tasks holds, per node, the tasks of its last heartbeat answer, encoded (see
	// desiredAnswer). Guarded by mu.
	tasks map[string][]cachedTask
	// beatEvery is the heartbeat interval answers name now, and told, per node, the one
	// its last answer named (pace.go). Guarded by mu.
	beatEvery time.Duration
	told      map[string]time.Duration
	// clocks holds, per node, what its heartbeats said of its clock (clock.go). Guarded
	// by mu.
	clocks map[string]*nodeClock
	// beatLogged is the interval the log last said answers name (pace.go). Guarded by mu.
	beatLogged time.Duration
	// attached, if set (by tests), runs as a terminal attaches to a job: after it has
	// joined the job's session, before the output it is owed is written to it.
	attached func(job int64)
	// openingLog, if set (by tests), runs as a shipped log is about to be made, once it
	// has its place among the logs being made: a disk slow to make files.
	openingLog func(name string)

	logLocks logLocks   // order the writes to shipped log files (logs.go)
	putOff   logsPutOff // the pieces of logs put off lately (logs.go)
	room     *diskRoom  // whether the data dir's disk has room for more logs
	hold     writeHold  // the store's run of refused writes; guarded by mu

	logWriteErrs logWriteErrors
	// logs is the directory of shipped logs; every log file is opened through it.
	logs *os.Root

	watch    nodeWatch
	follows  logFollows
	attach   attachHub
	lastUsed lastUse
	// submits, writes and reads bound each user's submits, other changes and reads
	// (limits.go).
	submits userLimiter
	writes  userLimiter
	reads   readBudget
	// tel is the telemetry history, in memory only (see telemetry.go).
	tel *telemetry
	// metrics are what /metrics serves (metrics.go); notifier delivers webhooks (notify.go).
	metrics  *serverMetrics
	notifier *notifier
	// ui holds the web UI's one-time login links (ui.go).
	ui *uiLinkStore

	// leader is set while this server holds the lease (always true in effect without
	// one: see isLeader); leaderURL is the leader's address as last read from the store,
	// which a standby hands to its callers (ha.go); outage is set while the lease loop
	// cannot reach the store (storeFailed). started is when New ran.
	leader    atomic.Bool
	leaderURL atomic.Pointer[string]
	leaseKick chan struct{}
	outage    atomic.Pointer[storeOutage]
	started   time.Time
	// proxy carries a standby's forwarded calls to the leader (forwardToLeader); nil
	// without a lease.
	proxy *http.Transport

	// evictedAt is when ended jobs last left memory (evictEnded); guarded by mu.
	evictedAt time.Time
}

// New loads the state from st and returns a server ready to serve. A nil logger discards.
func New(ctx context.Context, cfg Config, st store.Store, logger *slog.Logger) (_ *Server, err error) {
	cfg.setDefaults()
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.DataDir == "" {
		return nil, fmt.Errorf("server: data dir is required")
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "logs"), 0o750); err != nil {
		return nil, fmt.Errorf("server: create log dir: %w", err)
	}
	logs, err := os.OpenRoot(filepath.Join(cfg.DataDir, "logs"))
	if err != nil {
		return nil, fmt.Errorf("server: open log dir: %w", err)
	}
	s := &Server{cfg: cfg, log: logger, store: st, kick: make(chan struct{}, 1), wedged: make(chan struct{}), state: cluster.New(), logs: logs, tel: newTelemetry(), ui: newUILinkStore(),
		started: time.Now().UTC(), leaseKick: make(chan struct{}, 1),
		beatEvery: cfg.HeartbeatInterval, beatLogged: cfg.HeartbeatInterval}
	s.logLocks.init()
	s.openingLog = defaultOpeningLog
	s.room = &diskRoom{dir: cfg.DataDir, keep: cfg.KeepFreeDisk, log: logger, freeOf: statfsFree, now: cfg.Clock.Now}
	s.state.HalfLife = cfg.HalfLife
	s.view.reset(s.state)
	if cfg.Lease != nil {
		// A server that fails to start must not keep the lease from the others.
		defer func() {
			if err != nil {
				cfg.Lease.Release()
			}
		}()
		term, err := cfg.Lease.TryAcquire(ctx)
		if err != nil {
			return nil, fmt.Errorf("server: leader lease: %w", err)
		}
		s.leader.Store(term > 0)
		if term > 0 {
			logger.Info("took the leader lease: leading", "term", term)
		} else {
			logger.Info("another server holds the leader lease: standing by")
		}
	}
	if err := s.load(ctx); err != nil {
		return nil, err
	}
	if !s.isLeader() {
		if err := s.waitForCluster(ctx); err != nil {
			return nil, err
		}
	}
	if err := s.bootstrap(ctx); err != nil {
		return nil, err
	}
	if cfg.Lease != nil {
		s.proxy = leaderTransport(s.ca)
	}
	if cfg.ConfigFile != "" && s.isLeader() {
		data, err := os.ReadFile(cfg.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("server: config: %w", err)
		}
		s.mu.Lock()
		_, apiErr := s.applyConfig(ctx, data, api.Event{Actor: "config file", Source: cfg.ConfigFile})
		s.mu.Unlock()
		if apiErr != nil {
			return nil, fmt.Errorf("server: config %s: %s", cfg.ConfigFile, apiErr.Message)
		}
	}
	s.metrics = newServerMetrics(s)
	s.notifier = newNotifier(s)
	return s, nil
}

// Close releases what the server holds open. The store is the caller's to close.
func (s *Server) Close() error {
	s.committing.Wait()
	if s.proxy != nil {
		s.proxy.CloseIdleConnections()
	}
	s.notifier.close()
	return s.logs.Close()
}

// load reads the whole state from the store into a fresh memory state. It runs at start
// and again after a commit whose outcome was unknown.
func (s *Server) load(ctx context.Context) error {
	// Writes queued for the store were made from the memory about to be replaced: the
	// one under way settles, the others fail (writequeue.go).
	if err := s.settleWriting(); err != nil {
		s.log.Warn("a queued write failed as the state was read again", "err", err)
	}
	s.failQueued(errStale)
	// Jobs that ended before the KeepEnded window stay in the store: of them memory keeps
	// their final state, and their attempts charge fair share here and are dropped.
	cutoff := s.cfg.Clock.Now().Add(-s.cfg.KeepEnded)
	jobs, err := s.store.LoadRecentJobs(ctx, cutoff)
	if err != nil {
		return fmt.Errorf("server: load jobs: %w", err)
	}
	ended, err := s.store.LoadEndedBefore(ctx, cutoff)
	if err != nil {
		return fmt.Errorf("server: load ended jobs: %w", err)
	}
	all, err := s.store.LoadAttempts(ctx)
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
	state := cluster.New()
	state.HalfLife = s.cfg.HalfLife
	team := make(map[int64]string, len(ended))
	for _, e := range ended {
		state.Forget(e.ID, e.State, cutoff)
		team[e.ID] = e.Team
	}
	attempts := all[:0]
	for _, a := range all {
		if t, ok := team[a.JobID]; ok {
			state.ChargeEnded(t, a)
		} else {
			attempts = append(attempts, a)
		}
	}
	b := &store.Batch{Jobs: jobs, Attempts: attempts, Nodes: nodes, Queues: queues, Teams: teams, Reservations: resv}
	if err := s.loadIdentity(ctx, b); err != nil {
		return err
	}
	// Nodes were not heard from while the server was down; give each a full
	// NotReadyAfter from now before judging it, so a restart never loses a node.
	now := s.cfg.Clock.Now()
	for i := range nodes {
		nodes[i].LastHeartbeat = now
	}
	s.state = state
	s.invHashes = nil // of the records just replaced
	s.tasks = nil     // made from the state just replaced
	s.told = nil      // what this server told no node yet
	s.state.Apply(b)
	s.paceHeartbeats(s.reportingNodes())
	s.view.reset(s.state)
	s.evictedAt = now
	s.log.Info("state loaded", "jobs", len(jobs), "ended_in_store", len(ended), "nodes", len(nodes), "pending", len(s.state.PendingIDs()), "active", len(s.state.ActiveIDs()))
	return nil
}

// evictEvery is how often the scheduling loop lets go of jobs that ended before the
// KeepEnded window: a pass walks every job in memory, so not every cycle.
const evictEvery = time.Minute

// evictEnded drops from memory the jobs that ended more than KeepEnded ago, at most once
// per evictEvery. Cycle calls it, so it runs at least every RecomputeInterval. Callers
// hold s.mu.
func (s *Server) evictEnded() {
	now := s.cfg.Clock.Now()
	if now.Sub(s.evictedAt) < evictEvery {
		return
	}
	s.evictedAt = now
	if n := s.state.Evict(now.Add(-s.cfg.KeepEnded)); n > 0 {
		s.log.Info("ended jobs left memory", "jobs", n, "kept", s.state.JobCount())
	}
}

// commitTimeout bounds one commit. It replaces the request's own deadline, which must not
// cut a commit short (see commit).
const commitTimeout = 30 * time.Second

// errStale answers a change while the server cannot vouch for its memory (see commit).
var errStale = errors.New("the server is re-reading its store after a commit whose outcome it could not learn; try again shortly")

// commit writes b to the store and, only if that succeeded, to memory. Callers hold s.mu.
//
// A commit's outcome must never be ambiguous to the server. So the store commits with a
// context that a client hanging up cannot cancel (a COMMIT cancelled half-way may still
// have been applied), and after any error, whose outcome may be unknown, the server reads
// the whole state back from the store before it changes anything again.
func (s *Server) commit(ctx context.Context, b *store.Batch) error {
	if b.Empty() {
		return nil
	}
	if err := s.holdWrites(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	defer cancel()
	// Writes applied to memory before b, and so perhaps read in making it, reach the
	// store first: the one under way, then those queued, in b's transaction (writequeue.go).
	if err := s.settleWriting(); err != nil {
		return err
	}
	if err := s.resync(ctx); err != nil {
		return err
	}
	ahead := s.wq.pending
	s.wq.pending = nil
	merged := b
	if len(ahead) > 0 {
		merged = mergeWrites(ahead, b)
	}
	start := time.Now()
	if err := s.store.Commit(ctx, merged); err != nil {
		s.writeFailed(err)
		if len(ahead) > 0 {
			return s.dropQueued(ahead, err)
		}
		if errors.Is(err, store.ErrNotLeader) {
			// Refused before anything was written: memory still matches the store as far
			// as this server's term went, and the new leader reads the store afresh.
			s.stepDown(err)
			return fmt.Errorf("%w: %v", errNotLeader, err)
		}
		s.suspect = true
		if rerr := s.resync(ctx); rerr != nil {
			s.log.Error("re-reading the store after a failed commit", "err", rerr)
		}
		return err
	}
	s.writeSucceeded()
	took := time.Since(start)
	if len(ahead) > 0 {
		spreadEventIDs(append(batchesOf(ahead), b), merged)
		for _, w := range ahead {
			s.completeWrite(w, took)
		}
	}
	s.applyCommitted(b, took)
	return nil
}

// applyCommitted brings memory and those watching it up to date with a batch the store
// now holds. Callers hold s.mu.
func (s *Server) applyCommitted(b *store.Batch, took time.Duration) {
	s.observeCommit(b, took)
	s.applyState(b)
	s.watch.bump(b)
	s.notifyCommitted(b)
}

// resync re-reads the state from the store if a failed commit left memory suspect.
// Callers hold s.mu.
func (s *Server) resync(ctx context.Context) error {
	if !s.suspect {
		return nil
	}
	if err := s.load(ctx); err != nil {
		return fmt.Errorf("%w: %v", errStale, err)
	}
	s.suspect = false
	s.claims = nil
	s.watch.bumpAll()
	s.log.Warn("state re-read from the store after a commit whose outcome was unknown")
	return nil
}

// commitError answers a failed commit: 503 while the state cannot be vouched for, else 500.
func commitError(w http.ResponseWriter, what string, err error) {
	setRetryAfter(w, err)
	status, e := commitErrorOf(what, err)
	writeError(w, status, e)
}

// commitErrorOf is what commitError writes.
func commitErrorOf(what string, err error) (int, *api.Error) {
	status, code := http.StatusInternalServerError, api.CodeInternal
	if errors.Is(err, errStale) || errors.Is(err, errNotLeader) || errors.Is(err, errWritesHeld) {
		status, code = http.StatusServiceUnavailable, api.CodeUnavailable
	}
	return status, &api.Error{Code: code, Message: what + ": " + err.Error()}
}

// cycleRestAfter is how long a cycle takes before the loop rests after it, and
// recomputeStretch how many times its length the time-only recompute waits (cycleDue).
const (
	cycleRestAfter   = 100 * time.Millisecond
	recomputeStretch = 10
)

// wake asks the scheduling loop for a cycle soon. It never blocks.
func (s *Server) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Run schedules and watches node liveness until ctx ends; with a lease, it also keeps or
// seeks the lease, and schedules only while it leads. It returns once the lease, if
// held, has been given up.
func (s *Server) Run(ctx context.Context) error {
	if s.cfg.Lease != nil {
		done := make(chan struct{})
		go func() { defer close(done); s.leaseLoop(ctx) }()
		defer func() { <-done }()
	}
	sweeping := make(chan struct{})
	go func() { defer close(sweeping); s.sweepLogsLoop(ctx) }()
	defer func() { <-sweeping }()
	t := time.NewTicker(s.cfg.CycleInterval)
	defer t.Stop()
	// Liveness depends on time alone, so it is checked at each tick, not again at each
	// change that wakes the loop: a stream of submits would otherwise walk every node
	// under the lock once per submit.
	check := true
	for {
		if s.isLeader() {
			if check {
				s.checkNodes(ctx)
			}
			if s.cycleDue() {
				s.loopCycle(ctx)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			check = true
		case <-s.kick:
			check = false
		}
	}
}

// loopCycle runs one cycle for the loop, and has the loop rest after it as long as it
// took when that was long (cycleDue).
func (s *Server) loopCycle(ctx context.Context) {
	start := time.Now()
	if err := s.Cycle(ctx); err != nil && !errors.Is(err, errNotLeader) && !errors.Is(err, errWritesHeld) {
		s.log.Error("scheduling cycle failed", "err", err)
	}
	took := time.Since(start)
	s.lastTook.Store(int64(took))
	if took >= cycleRestAfter {
		s.restUntil.Store(time.Now().Add(took).UnixNano())
	}
}

// cycleDue reports whether a cycle may decide anything the last one did not: the state
// changed since (beyond arrivals that cannot start: stall.go), a timer it noted is due,
// or RecomputeInterval has passed. Cycles are thus coalesced: any number of changes
// between two ticks make one cycle, and an idle cluster makes none beyond the bounded
// recompute. After a cycle that took longer than
// cycleRestAfter, the loop rests as long as it took before the next one: on a large
// cluster with a steady stream of submits, planning takes at most half of one core and
// leaves the rest to heartbeats and requests, as Slurm's minimum scheduling interval does.
// Likewise, the recompute that nothing but time asks for waits at least recomputeStretch
// times as long as the last cycle took, so an idle large cluster spends at most a tenth of
// a core on it.
func (s *Server) cycleDue() bool {
	if time.Now().UnixNano() < s.restUntil.Load() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Clock.Now()
	recompute := max(s.cfg.RecomputeInterval, recomputeStretch*time.Duration(s.lastTook.Load()))
	changed := s.state.Seq() != s.cycled && !s.stalled()
	return changed || now.Sub(s.lastCycle) >= recompute ||
		(!s.wakeAt.IsZero() && !now.Before(s.wakeAt))
}

// route is one entry of the API: method, path pattern, who may call it, what body it
// takes, and the handler.
type route struct {
	method, path string
	rule         rule
	body         bodyKind
	handle       func(*Server, http.ResponseWriter, *http.Request)
}

// bodyKind is what a route reads from the request body. JSON routes insist on the JSON
// content type, so a page in a browser cannot post a form or text/plain to them.
type bodyKind int

const (
	noBody bodyKind = iota
	jsonBody
	optionalJSON // a JSON body that may be left out
	yamlBody     // PUT /config: YAML or JSON
	bytesBody    // log chunks from agents
)

// routes is the whole API. A test checks that api/openapi.yaml documents every entry, and
// another calls every entry in every role against its rule.
var routes = []route{
	{"POST", "/api/v1/jobs", ruleMember, jsonBody, (*Server).handleSubmit},
	{"GET", "/api/v1/jobs", ruleViewer, noBody, (*Server).handleListJobs},
	{"GET", "/api/v1/jobs/{id}", ruleViewer, noBody, (*Server).handleGetJob},
	{"POST", "/api/v1/jobs/{id}/cancel", ruleMember, noBody, (*Server).handleCancel},
	{"GET", "/api/v1/jobs/{id}/logs", ruleMember, noBody, (*Server).handleGetLogs},
	{"GET", "/api/v1/jobs/{id}/attach", ruleMember, noBody, (*Server).handleAttach},
	{"POST", "/api/v1/jobs/{id}/hold", ruleMember, noBody, (*Server).handleHold},
	{"POST", "/api/v1/jobs/{id}/release", ruleMember, noBody, (*Server).handleRelease},
	{"GET", "/api/v1/jobs/{id}/why", ruleViewer, noBody, (*Server).handleWhy},
	{"GET", "/api/v1/jobs/{id}/telemetry", ruleViewer, noBody, (*Server).handleJobTelemetry},
	{"GET", "/api/v1/arrays/{id}", ruleViewer, noBody, (*Server).handleGetArray},
	{"POST", "/api/v1/arrays/{id}/cancel", ruleMember, noBody, (*Server).handleArrayCancel},
	{"POST", "/api/v1/arrays/{id}/hold", ruleMember, noBody, (*Server).handleArrayHold},
	{"POST", "/api/v1/arrays/{id}/release", ruleMember, noBody, (*Server).handleArrayRelease},
	{"GET", "/api/v1/nodes", ruleViewer, noBody, (*Server).handleNodes},
	{"GET", "/api/v1/top", ruleViewer, noBody, (*Server).handleTop},
	{"GET", "/api/v1/nodes/{name}/telemetry", ruleViewer, noBody, (*Server).handleNodeTelemetry},
	{"POST", "/api/v1/nodes/{name}/drain", ruleOperator, optionalJSON, (*Server).handleDrain},
	{"POST", "/api/v1/nodes/{name}/resume", ruleOperator, noBody, (*Server).handleResume},
	{"DELETE", "/api/v1/nodes/{name}", ruleAdmin, noBody, (*Server).handleDeleteNode},
	{"GET", "/api/v1/queues", ruleViewer, noBody, (*Server).handleQueues},
	{"PUT", "/api/v1/queues/{name}", ruleOperator, jsonBody, (*Server).handlePutQueue},
	{"DELETE", "/api/v1/queues/{name}", ruleOperator, noBody, (*Server).handleDeleteQueue},
	{"GET", "/api/v1/teams", ruleViewer, noBody, (*Server).handleTeams},
	{"PUT", "/api/v1/teams/{name}", ruleAdmin, jsonBody, (*Server).handlePutTeam},
	{"DELETE", "/api/v1/teams/{name}", ruleAdmin, noBody, (*Server).handleDeleteTeam},
	{"GET", "/api/v1/reservations", ruleViewer, noBody, (*Server).handleReservations},
	{"POST", "/api/v1/reservations", ruleAdmin, jsonBody, (*Server).handleReserve},
	{"DELETE", "/api/v1/reservations/{id}", ruleAdmin, noBody, (*Server).handleUnreserve},
	{"PUT", "/api/v1/config", ruleAdmin, yamlBody, (*Server).handlePutConfig},
	{"GET", "/api/v1/history", ruleViewer, noBody, (*Server).handleHistory},
	{"GET", "/api/v1/whoami", ruleAnyone, noBody, (*Server).handleWhoami},
	{"GET", "/api/v1/users", ruleAdmin, noBody, (*Server).handleUsers},
	{"PUT", "/api/v1/users/{name}", ruleAdmin, jsonBody, (*Server).handlePutUser},
	{"DELETE", "/api/v1/users/{name}", ruleAdmin, noBody, (*Server).handleDeleteUser},
	{"GET", "/api/v1/tokens", ruleAnyone, noBody, (*Server).handleTokens},
	{"POST", "/api/v1/tokens", ruleAnyone, jsonBody, (*Server).handleCreateToken},
	{"DELETE", "/api/v1/tokens/{id}", ruleAnyone, noBody, (*Server).handleRevokeToken},
	{"GET", "/api/v1/join-tokens", ruleAdmin, noBody, (*Server).handleJoinTokens},
	{"POST", "/api/v1/join-tokens", ruleAdmin, jsonBody, (*Server).handleCreateJoinToken},
	{"DELETE", "/api/v1/join-tokens/{id}", ruleAdmin, noBody, (*Server).handleRevokeJoinToken},
	{"GET", "/api/v1/audit", ruleAdmin, noBody, (*Server).handleAudit},
	{"GET", "/api/v1/usage", ruleViewer, noBody, (*Server).handleUsage},
	{"GET", "/api/v1/prices", ruleViewer, noBody, (*Server).handlePrices},
	{"PUT", "/api/v1/prices/{model}", ruleAdmin, jsonBody, (*Server).handlePutPrice},
	{"DELETE", "/api/v1/prices/{model}", ruleAdmin, noBody, (*Server).handleDeletePrice},
	{"PUT", "/api/v1/users/{name}/notify", ruleAnyone, jsonBody, (*Server).handlePutUserNotify},
	{"POST", "/api/v1/ui/links", ruleAnyone, noBody, (*Server).handleUILink},
	{"POST", "/api/v1/ui/session", rulePublic, jsonBody, (*Server).handleUISession},
	{"POST", "/api/v1/join", rulePublic, jsonBody, (*Server).handleJoin},
	{"POST", heartbeatPath, ruleAgent, jsonBody, (*Server).handleHeartbeat},
	{"GET", "/api/v1/agents/{node}/watch", ruleAgent, noBody, (*Server).handleWatch},
	{"POST", logBatchPath, ruleAgent, jsonBody, (*Server).handleShipLogBatch},
	{"POST", "/api/v1/agents/{node}/logs/{job}/{attempt}", ruleAgent, bytesBody, (*Server).handleShipLog},
	{"GET", "/api/v1/agents/{node}/attach/{job}/{attempt}", ruleAgent, noBody, (*Server).handleAgentAttach},
	{"POST", "/api/v1/agents/{node}/renew", ruleAgent, jsonBody, (*Server).handleRenew},
	{"GET", statusPath, ruleViewer, noBody, (*Server).handleStatus},
	{"POST", "/api/v1/requests", ruleMember, jsonBody, (*Server).handleCreateRequest},
	{"GET", "/api/v1/requests", ruleMember, noBody, (*Server).handleListRequests},
	{"GET", "/api/v1/requests/{id}", ruleMember, noBody, (*Server).handleGetRequest},
	{"POST", "/api/v1/requests/{id}/approve", ruleOperator, optionalJSON, (*Server).handleApproveRequest},
	{"POST", "/api/v1/requests/{id}/deny", ruleOperator, jsonBody, (*Server).handleDenyRequest},
}

// statusPath is the one route a standby serves (see ha.go).
const statusPath = "/api/v1/status"

// heartbeatPath is the route every agent calls every few seconds, and logBatchPath the
// one it calls after each heartbeat while its tasks print.
const (
	heartbeatPath = "/api/v1/agents/{node}/heartbeat"
	logBatchPath  = "/api/v1/agents/{node}/logs"
)

// Handler returns the HTTP API. Serve it with ConnContext set, so that callers on the
// local socket and the in-process agent are known.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/healthz", methodNotAllowed([]string{"GET", "HEAD"}))
	allowed := map[string][]string{} // path → its methods, in the routes' order
	agents := newHandOff(2 * time.Second)
	for _, rt := range routes {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.serve(rt, w, r) })
		if rt.path == heartbeatPath || rt.path == logBatchPath {
			// Every agent's connection waits for its next heartbeat and the log batch
			// that follows it: the handlers run elsewhere, so that its goroutine keeps a
			// small stack (offload.go).
			h = agents.wrap(h)
		}
		// Timed from the connection's goroutine, so that a request's latency includes
		// its wait for a goroutine to run it.
		h = s.instrument(rt, h)
		mux.HandleFunc(rt.method+" "+rt.path, h)
		allowed[rt.path] = append(allowed[rt.path], rt.method)
		if rt.method == "GET" {
			allowed[rt.path] = append(allowed[rt.path], "HEAD") // served by the GET route
		}
	}
	// A pattern without a method matches what the routes of its path leave over.
	for path, methods := range allowed {
		mux.HandleFunc(path, methodNotAllowed(methods))
	}
	s.mountMetrics(mux)
	s.mountUI(mux)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Message: "no such API route: " + r.Method + " " + r.URL.Path})
	})
	return mux
}

// methodNotAllowed answers a known path called with a method it does not take: 405 with
// the methods it does take in Allow, where a catch-all 404 would say the path is unknown.
func methodNotAllowed(methods []string) http.HandlerFunc {
	allow := strings.Join(methods, ", ")
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, &api.Error{Code: api.CodeMethodNotAllowed,
			Message: fmt.Sprintf("%s %s is not supported; this path takes %s", r.Method, r.URL.Path, allow)})
	}
}

// serve authenticates and authorizes a request for rt, checks its content type, and only
// then runs the handler, with the caller's identity in the request's context.
func (s *Server) serve(rt route, w http.ResponseWriter, r *http.Request) {
	// A standby's memory is as old as its start, so it answers nothing from it: the
	// leader answers through it, or the caller is sent there.
	if !s.isLeader() && rt.path != statusPath {
		s.forwardToLeader(w, r)
		return
	}
	id, e := s.authenticate(r)
	if e != nil {
		writeError(w, http.StatusUnauthorized, e)
		return
	}
	if id.Kind == "" && rt.rule != rulePublic {
		writeError(w, http.StatusUnauthorized, unauthorized("credentials needed: send \"Authorization: Bearer TOKEN\", or call on the server's local socket"))
		return
	}
	if e := authorize(id, rt, r); e != nil {
		writeError(w, http.StatusForbidden, e)
		return
	}
	if e := checkContentType(r, rt.body); e != nil {
		writeError(w, http.StatusUnsupportedMediaType, e)
		return
	}
	if rt.method != http.MethodGet && rt.path != "/api/v1/jobs" && limitedCaller(id) {
		// Submits have a limit of their own (handleSubmit).
		lim := s.view.limits.Load()
		if wait, ok := s.writes.allow(id.User, lim.WritesPerSecond, lim.WriteBurst, s.cfg.Clock.Now()); !ok {
			secs := int(math.Ceil(wait.Seconds()))
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			writeError(w, http.StatusTooManyRequests, &api.Error{Code: api.CodeRateLimited, Message: fmt.Sprintf(
				"%s makes changes faster than the limit of %g per second (bursts of %d: limits.writes_per_second and limits.write_burst); try again in %d s",
				id.User, lim.WritesPerSecond, lim.WriteBurst, secs)})
			return
		}
	}
	if rt.method == http.MethodGet {
		paid, ok := s.admitRead(w, id, longPolls[rt.path])
		if !ok {
			return
		}
		defer paid()
	}
	if r.Method == http.MethodGet {
		// A read answers from memory and the store together: it waits for the writes
		// memory holds that the store may not yet (writequeue.go), so that what an earlier
		// answer showed, a later one finds in the store too.
		s.waitWritten()
	}
	defer s.recoverHandler(rt)
	rt.handle(s, w, r.WithContext(auth.WithIdentity(r.Context(), id)))
}

// admitRead lets a read of id's in under its user's read budget (limits.go), or answers
// 429 and says no. A read let in calls paid when it ends.
func (s *Server) admitRead(w http.ResponseWriter, id auth.Identity, longPoll bool) (paid func(), ok bool) {
	if !limitedCaller(id) {
		return func() {}, true
	}
	lim := *s.view.limits.Load()
	if no := s.reads.admit(id.User, lim, s.cfg.Clock.Now(), longPoll); no != nil {
		w.Header().Set("Retry-After", strconv.Itoa(int(no.wait/time.Second)))
		writeError(w, http.StatusTooManyRequests, &api.Error{Code: api.CodeRateLimited, Message: no.message})
		return nil, false
	}
	start := time.Now()
	return func() { s.reads.pay(id.User, lim, s.cfg.Clock.Now(), time.Since(start), longPoll) }, true
}

// limitedCaller reports whether id's requests count against the read budget and the
// write limit (limits.go): people's and scripts' do, admins' (who set them) and agents'
// do not.
func limitedCaller(id auth.Identity) bool {
	return (id.Kind == auth.KindToken || id.Kind == auth.KindUnix) && id.Role != auth.RoleAdmin
}

// longPolls are the reads that wait for something to happen, holding no lock while they
// wait (see readBudget.admit).
var longPolls = map[string]bool{
	"/api/v1/jobs/{id}/logs":   true, // rota logs -f: ?wait=
	"/api/v1/jobs/{id}/attach": true, // a terminal session
}

// caller is the identity serve established for r.
func caller(r *http.Request) auth.Identity {
	id, _ := auth.FromContext(r.Context())
	return id
}
