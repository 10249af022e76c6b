package server

import (
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/store"
)

// Prometheus metrics, served at /metrics (docs/metrics.md lists them). They come in two
// kinds:
//
//   - events, counted as they happen by hooks the server calls: API, commit and cycle
//     latency, each job's wait when it is assigned, ended attempts, webhook deliveries.
//     The hooks run with s.mu held, so each does O(1) work, or O(batch) for a commit.
//   - state, read when Prometheus scrapes: GPUs, nodes and jobs by state, the latest GPU
//     readings, teams against their quotas. stateCollector copies what it needs under
//     s.mu and writes the answer after releasing it, so a slow scraper never holds up the
//     scheduler.

// latencyBuckets (seconds) span an in-memory API answer to a commit on a struggling store.
var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// waitBuckets (seconds) span a job that starts at once on an idle cluster to one that
// waits a week.
var waitBuckets = []float64{1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 2 * 3600, 4 * 3600, 8 * 3600, 16 * 3600, 86400, 2 * 86400, 4 * 86400, 7 * 86400}

// serverMetrics holds the server's event metrics and the handler that serves them all.
type serverMetrics struct {
	handler  http.Handler
	reg      *prometheus.Registry     // the events' (and cfg.Registry's) series, without the state's
	requests *prometheus.HistogramVec // by method, route pattern and status code
	commits  prometheus.Histogram
	cycles   prometheus.Histogram
	// groups is how many submits each group commit carried (groupcommit.go).
	groups prometheus.Histogram
	wait   *prometheus.HistogramVec // by queue
	ended  *prometheus.CounterVec   // by state and reason

	// deferred counts the arrivals left to the recompute rather than a cycle (stall.go).
	deferred prometheus.Counter
	// logsPutOff counts log chunks answered 503 for their batch's time (logs.go).
	logsPutOff prometheus.Counter

	webhookDeliveries, webhookRetries, webhookDrops prometheus.Counter
}

// newServerMetrics registers the server's metrics with cfg.Registry, or with a registry
// of its own when none is given. A registry that already holds them (a second server on
// one registry) is logged, not fatal: metrics are no reason to refuse to run.
func newServerMetrics(s *Server) *serverMetrics {
	reg := s.cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m := &serverMetrics{
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rota_api_request_duration_seconds", Help: "API request latency by method, route pattern and status code.", Buckets: latencyBuckets,
		}, []string{"method", "route", "code"}),
		commits: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "rota_store_commit_duration_seconds", Help: "Latency of successful store commits.", Buckets: latencyBuckets,
		}),
		cycles: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "rota_scheduler_cycle_duration_seconds", Help: "Duration of scheduling cycles, commits included.", Buckets: latencyBuckets,
		}),
		groups: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "rota_submit_group_size", Help: "Submits written by one group commit: one transaction, one disk sync.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024},
		}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "rota_job_wait_seconds", Help: "Time a job waited for an attempt to be assigned: from submission, or from the end of its previous attempt.", Buckets: waitBuckets,
		}, []string{"queue"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rota_attempts_ended_total", Help: "Attempts that ended, by final state and reason.",
		}, []string{"state", "reason"}),
		deferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rota_scheduler_arrivals_deferred_total",
			Help: "Jobs that arrived needing more GPUs on one node than any had free, after a long cycle that placed nothing, and so made no cycle due.",
		}),
		logsPutOff: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rota_log_chunks_put_off_total",
			Help: "Chunks of agents' log batches put off (answered 503, sent again later) because the chunks before them took the disk longer than a batch may take.",
		}),
		webhookDeliveries: prometheus.NewCounter(prometheus.CounterOpts{Name: "rota_webhook_deliveries_total", Help: "Webhook notifications delivered."}),
		webhookRetries:    prometheus.NewCounter(prometheus.CounterOpts{Name: "rota_webhook_retries_total", Help: "Webhook delivery attempts that failed and were retried."}),
		webhookDrops:      prometheus.NewCounter(prometheus.CounterOpts{Name: "rota_webhook_drops_total", Help: "Webhook notifications dropped: queue full, or retries exhausted."}),
	}
	room := s.room
	diskFree := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rota_server_data_dir_free_bytes",
		Help: "Bytes free on the disk of the server's data dir (-1 where it cannot be read). Below rota_server_data_dir_keep_free_bytes the server takes no more job logs.",
	}, room.freeNow)
	diskKeep := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rota_server_data_dir_keep_free_bytes",
		Help: "Bytes the server keeps free on its data dir's disk for its store (rota server --keep-free-disk; 0: none).",
	}, func() float64 { return float64(max(room.keep, 0)) })
	for _, c := range []prometheus.Collector{m.requests, m.commits, m.cycles, m.groups, m.wait, m.ended, m.deferred, m.logsPutOff,
		m.webhookDeliveries, m.webhookRetries, m.webhookDrops, diskFree, diskKeep} {
		if err := reg.Register(c); err != nil {
			s.log.Error("metrics: cannot register a collector", "err", err)
		}
	}
	// The state's series have a registry of their own, so that the text answer can take
	// the per-node ones out of it (metricstext.go).
	state := prometheus.NewRegistry()
	state.MustRegister(stateCollector{s})
	m.reg = reg
	m.handler = promhttp.HandlerFor(prometheus.Gatherers{reg, state}, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelError),
		ErrorHandling: promhttp.ContinueOnError,
	})
	return m
}

// The notifier reports each webhook's fate through these. They are safe on a nil
// receiver, for a server built without metrics.

func (m *serverMetrics) observeGroup(submits int) {
	if m != nil {
		m.groups.Observe(float64(submits))
	}
}

func (m *serverMetrics) arrivalsDeferred(n int) {
	if m != nil {
		m.deferred.Add(float64(n))
	}
}

func (m *serverMetrics) logChunksPutOff(n int) {
	if m != nil && n > 0 {
		m.logsPutOff.Add(float64(n))
	}
}

func (m *serverMetrics) webhookDelivered() {
	if m != nil {
		m.webhookDeliveries.Inc()
	}
}

func (m *serverMetrics) webhookRetried() {
	if m != nil {
		m.webhookRetries.Inc()
	}
}

func (m *serverMetrics) webhookDropped() {
	if m != nil {
		m.webhookDrops.Inc()
	}
}

// instrument wraps a route's handler to measure API request latency, labelled with the
// route's pattern rather than its path so that job IDs do not each make a series.
func (s *Server) instrument(rt route, h http.HandlerFunc) http.HandlerFunc {
	if s.metrics == nil {
		return h
	}
	obs := s.metrics.requests.MustCurryWith(prometheus.Labels{"route": rt.path})
	return promhttp.InstrumentHandlerDuration(obs, h)
}

// mountMetrics serves /metrics.
func (s *Server) mountMetrics(mux *http.ServeMux) {
	mux.HandleFunc("GET /metrics", s.handleMetrics)
}

// handleMetrics answers a scrape. Callers on the local socket need nothing more; others
// need credentials the API accepts (any role: a scraper's token is best a viewer's),
// unless the server was told to serve metrics to anyone.
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	info, _ := r.Context().Value(connKey{}).(connInfo)
	if !s.metricsPublic() && !info.unix && !info.local {
		id, e := s.authenticate(r)
		if e != nil {
			writeError(w, http.StatusUnauthorized, e)
			return
		}
		if id.Kind == "" {
			writeError(w, http.StatusUnauthorized, unauthorized("credentials needed to read metrics: send \"Authorization: Bearer TOKEN\" (a viewer's token will do)"))
			return
		}
		// A scrape is the costliest read there is (every node, GPU and job): it counts
		// against the caller's read budget like any other.
		paid, ok := s.admitRead(w, id, false)
		if !ok {
			return
		}
		defer paid()
	}
	s.serveMetrics(w, r)
}

// metricsPublic reports whether /metrics needs no credentials.
func (s *Server) metricsPublic() bool { return s.cfg.MetricsPublic }

// observeCommit records a store commit's latency and what the batch changed: the wait of
// each job it assigns, and each attempt it ends. It runs before the batch is applied, so
// the state still shows what came before. Callers hold s.mu.
func (s *Server) observeCommit(b *store.Batch, d time.Duration) {
	s.recordCommit(s.changesOf(b), d)
}

// commitChanges is what a batch changes that the metrics count, read from the state
// before the batch is applied: a write applied to memory before it is durable
// (writequeue.go) is counted only once it is.
type commitChanges struct {
	waits []queueWait
	ended [][2]string // state and reason label of each attempt ended
}

type queueWait struct {
	queue string
	wait  time.Duration
}

// changesOf reads what b changes, before it is applied. Callers hold s.mu.
func (s *Server) changesOf(b *store.Batch) commitChanges {
	var c commitChanges
	if s.metrics == nil {
		return c
	}
	now := s.cfg.Clock.Now()
	for i := range b.Jobs {
		j := &b.Jobs[i]
		if from, ok := s.waitStart(j); ok {
			c.waits = append(c.waits, queueWait{queueName(j.Spec.Queue), now.Sub(from)})
		}
	}
	for i := range b.Attempts {
		a := &b.Attempts[i]
		if a.EndTime != nil && s.attemptOpen(a.JobID, a.N) {
			c.ended = append(c.ended, [2]string{string(a.State), reasonLabel(a.Reason)})
		}
	}
	return c
}

// recordCommit records a durable commit that took d and changed c. Callers hold s.mu.
func (s *Server) recordCommit(c commitChanges, d time.Duration) {
	m := s.metrics
	if m == nil {
		return // commits made while the server starts
	}
	m.commits.Observe(d.Seconds())
	for _, w := range c.waits {
		m.wait.WithLabelValues(w.queue).Observe(w.wait.Seconds())
	}
	for _, e := range c.ended {
		m.ended.WithLabelValues(e[0], e[1]).Inc()
	}
}

// waitStart returns when j began to wait for the attempt the batch assigns it: its
// submission for the first attempt, else the end of the previous one. ok is false when
// j is not newly assigned.
func (s *Server) waitStart(j *api.Job) (from time.Time, ok bool) {
	if j.State != api.StateAssigned {
		return time.Time{}, false
	}
	if old, found := s.state.Job(j.ID); found && old.State == api.StateAssigned {
		return time.Time{}, false // still assigned; something else about it changed
	}
	prev, found := s.state.CurrentAttempt(j.ID)
	if !found || prev.N >= j.Attempts || prev.EndTime == nil {
		return j.SubmitTime, true
	}
	return *prev.EndTime, true
}

// attemptOpen reports whether the state has attempt n of the job as not ended, or not
// at all.
func (s *Server) attemptOpen(job int64, n int) bool {
	list := s.state.Attempts(job)
	return n > len(list) || list[n-1].EndTime == nil
}

// reasonLabel bounds the reasons an attempt is counted under to those rota gives: an
// agent may report any short code, and each distinct label value costs a series.
func reasonLabel(r string) string {
	if r == "" || slices.Contains(api.EndReasons, r) {
		return r
	}
	return "other"
}

func queueName(q string) string {
	if q == "" {
		return DefaultQueue
	}
	return q
}

// observeCycle records a scheduling cycle that began at start. Callers hold s.mu.
func (s *Server) observeCycle(start time.Time) {
	if s.metrics != nil {
		s.metrics.cycles.Observe(time.Since(start).Seconds())
	}
}

// Metrics read from the state at each scrape.
var (
	descGPUs = prometheus.NewDesc("rota_gpus",
		"GPUs by state per pool and model; each GPU is in exactly one state.", []string{"pool", "model", "state"}, nil)
	descNodes = prometheus.NewDesc("rota_nodes",
		"Nodes by state per pool.", []string{"pool", "state"}, nil)
	descJobs = prometheus.NewDesc("rota_jobs",
		"Jobs that have not ended, by queue and state.", []string{"queue", "state"}, nil)
	descPending = prometheus.NewDesc("rota_pending_jobs",
		"Jobs waiting for the scheduler to place them.", nil, nil)
	descBeatInterval = prometheus.NewDesc("rota_heartbeat_interval_seconds",
		"The heartbeat interval the server asks of agents now: --heartbeat-interval, or longer where the nodes would send more than --max-heartbeats-per-second.", nil, nil)
	descUtil     = prometheus.NewDesc(famUtil.name, famUtil.help, gpuLabels, nil)
	descMemory   = prometheus.NewDesc(famMemory.name, famMemory.help, gpuLabels, nil)
	descPower    = prometheus.NewDesc(famPower.name, famPower.help, gpuLabels, nil)
	descTemp     = prometheus.NewDesc(famTemp.name, famTemp.help, gpuLabels, nil)
	descTeamUsed = prometheus.NewDesc("rota_team_gpus_in_use",
		"GPUs a team's jobs hold, by GPU model.", []string{"team", "model"}, nil)
	descTeamGuaranteed = prometheus.NewDesc("rota_team_gpu_quota_guaranteed",
		"A team's guaranteed GPUs by quota entry (model \"*\": any model the quota does not name).", []string{"team", "model"}, nil)
	descDrift     = prometheus.NewDesc(famDrift.name, famDrift.help, []string{"pool", "node", "component"}, nil)
	descTeamLimit = prometheus.NewDesc("rota_team_gpu_quota_limit",
		"A team's GPU limit by quota entry (model \"*\": any model the quota does not name).", []string{"team", "model"}, nil)

	descBudgetUsed = prometheus.NewDesc("rota_budget_used_gpu_hours",
		"GPU-hours a team (project \"\") or project used in the current period of its budget, as of the last scheduling cycle.",
		[]string{"team", "project", "period"}, nil)
	descBudgetLimit = prometheus.NewDesc("rota_budget_limit_gpu_hours",
		"A team's or project's GPU-hour budget for the period, by limit (soft, hard); only the limits set.",
		[]string{"team", "project", "period", "limit"}, nil)

	gpuLabels = []string{"pool", "node", "gpu", "uuid", "model"}
)

// The states each count is reported in, zero or not, so that a series never vanishes
// because nothing is in its state at the moment.
var (
	// gpuStates names api.GPUState's states in the metric's labels.
	gpuStates = []string{api.GPUUnhealthy: "unhealthy", api.GPUIdle: "idle_holding", api.GPUUsed: "allocated",
		api.GPUHeld: "held", api.GPUUnavailable: "unavailable", api.GPUFree: "free"}
	nodeStates = api.NodeStates
	jobStates  = []api.JobState{api.StatePending, api.StateHeld, api.StateAssigned, api.StateRunning}
)

// stateCollector reports the state as it is at each scrape.
type stateCollector struct{ s *Server }

func (stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descGPUs, descNodes, descJobs, descPending, descBeatInterval, descUtil, descMemory,
		descPower, descTemp, descTeamUsed, descTeamGuaranteed, descTeamLimit, descDrift, descBudgetUsed, descBudgetLimit} {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.Lock()
	st := c.s.stateMetrics()
	c.s.mu.Unlock()
	st.emit(ch)
}

// Keys of the counts a scrape reports.
type (
	poolModel struct{ pool, model string }
	teamModel struct{ team, model string }
)

// gpuReading is one GPU's latest reading, with the labels it is reported under.
type gpuReading struct {
	pool, node, uuid, model   string
	index                     int
	util, memBytes, power, tc float64
	utilUnknown               bool // a MIG device's: no utilisation series
}

// stateCounts is what a scrape reports about the state: counts and copies, sharing
// nothing with the state, so they can be written out after s.mu is released. Each row
// of gpus, nodes and jobs counts by state, in the order of gpuStates, nodeStates and
// jobStates.
type stateCounts struct {
	gpus     map[poolModel][]int
	nodes    map[string][]int // by pool
	jobs     map[string][]int // by queue
	pending  int
	beat     time.Duration // the heartbeat interval answers name
	readings []gpuReading
	teamUsed map[teamModel]int
	quotas   map[teamModel]api.Quota
	drift    []driftReading
	budgets  []budgetState
}

// driftReading is one node's drift gauge for one component.
type driftReading struct {
	pool, node, component string
	drifts                bool
}

// value is the gauge's value: 1 while the component drifts.
func (d driftReading) value() float64 {
	if d.drifts {
		return 1
	}
	return 0
}

// bump counts one thing of key k in state i, of n states.
func bump[K comparable](m map[K][]int, k K, i, n int) {
	row := m[k]
	if row == nil {
		row = make([]int, n)
		m[k] = row
	}
	if i >= 0 {
		row[i]++
	}
}

// activeJob is what the GPU count needs to know of a job that holds GPUs.
type activeJob struct {
	team string
	idle bool
}

// stateMetrics counts what a scrape reports. It is O(nodes × GPUs + jobs not ended),
// with one map update per GPU and per job. Callers hold s.mu.
func (s *Server) stateMetrics() *stateCounts {
	c := &stateCounts{
		gpus: map[poolModel][]int{}, nodes: map[string][]int{}, jobs: map[string][]int{},
		teamUsed: map[teamModel]int{}, quotas: map[teamModel]api.Quota{},
	}
	for _, q := range s.state.Queues() {
		bump(c.jobs, q.Name, -1, len(jobStates))
	}
	active := c.countJobs(s.state)
	usage := s.state.Usage()
	nodes := s.state.Nodes()
	gpus := 0
	for _, n := range nodes {
		gpus += len(n.GPUs)
	}
	c.readings = make([]gpuReading, 0, gpus)
	pools := s.state.Pools()
	for _, n := range nodes {
		c.countNode(&n, usage[n.Name], active)
		c.countDrift(&n, pools)
	}
	c.budgets = slices.Clone(s.budgets)
	c.beat = s.beatEvery
	for _, t := range s.state.Teams() {
		for model, q := range t.Quotas {
			// Admission lets a team hold the larger of the two.
			q.Limit = max(q.Limit, q.Guaranteed)
			c.quotas[teamModel{t.Name, model}] = q
			if model != "*" {
				c.teamUsed[teamModel{t.Name, model}] += 0 // report zero use against the quota
			}
		}
	}
	return c
}

// countJobs counts the jobs that have not ended by queue and state, and returns those
// that hold resources.
func (c *stateCounts) countJobs(st *cluster.State) map[int64]activeJob {
	count := func(ids []int64) {
		for _, id := range ids {
			j, _ := st.Job(id)
			bump(c.jobs, queueName(j.Spec.Queue), slices.Index(jobStates, j.State), len(jobStates))
		}
	}
	pending := st.PendingIDs()
	c.pending = len(pending)
	count(pending)
	count(st.HeldIDs())
	ids := st.ActiveIDs()
	active := make(map[int64]activeJob, len(ids))
	for _, id := range ids {
		j, _ := st.Job(id)
		bump(c.jobs, queueName(j.Spec.Queue), slices.Index(jobStates, j.State), len(jobStates))
		active[id] = activeJob{team: j.Spec.Team, idle: j.IdleSince != nil}
	}
	return active
}

// countNode counts a node, its GPUs by state and by the team that holds them, and copies
// its latest readings.
func (c *stateCounts) countNode(n *api.Node, u *cluster.NodeUsage, active map[int64]activeJob) {
	pool := n.Labels["pool"]
	if pool == "" {
		pool = "default"
	}
	bump(c.nodes, pool, slices.Index(nodeStates, n.State), len(nodeStates))
	for i := range n.GPUs {
		g := &n.GPUs[i]
		job, allocated := int64(0), false
		if u != nil {
			job, allocated = u.GPUs[g.Index]
		}
		idle := allocated && gpuIdle(u, g.Index, func(id int64) bool { return active[id].idle })
		state := api.StateOfGPU(n, g, allocated, idle)
		bump(c.gpus, poolModel{pool, g.Model}, int(state), len(gpuStates))
		if allocated {
			c.teamUsed[teamModel{active[job].team, g.Model}]++
		}
	}
	// A node not heard from lately has no current reading: its last one would show a
	// GPU as busy, or idle, long after it stopped being either.
	if n.Telemetry == nil || n.State == api.NodeNotReady || n.State == api.NodeLost {
		return
	}
	for _, g := range n.GPUs {
		for _, r := range n.Telemetry.GPUs {
			if r.Index == g.Index {
				c.readings = append(c.readings, gpuReading{
					pool: pool, node: n.Name, uuid: g.UUID, model: g.Model, index: g.Index,
					util: r.UtilizationPct / 100, memBytes: float64(r.MemoryUsedMB) * (1 << 20), power: r.PowerW, tc: r.TemperatureC,
					utilUnknown: r.UtilizationUnknown,
				})
			}
		}
	}
}

// countDrift copies the node's drift for each component its pool wants a range for, as of
// its last heartbeat.
func (c *stateCounts) countDrift(n *api.Node, pools map[string]api.Pool) {
	pool := n.Labels["pool"]
	p, ok := pools[pool]
	if pool == "" || !ok {
		return
	}
	for _, w := range []struct{ component, wanted string }{{api.DriftDriver, p.Driver}, {api.DriftCUDA, p.CUDA}} {
		if w.wanted == "" {
			continue
		}
		drifts := slices.ContainsFunc(n.Drift, func(d api.VersionDrift) bool { return d.Component == w.component })
		c.drift = append(c.drift, driftReading{pool: pool, node: n.Name, component: w.component, drifts: drifts})
	}
}

// emit writes the counts and the per-node series as metrics.
func (c *stateCounts) emit(ch chan<- prometheus.Metric) {
	c.emitCounts(ch)
	c.emitNodes(ch)
}

// emitNodes writes the series that grow with the cluster: each GPU's readings and each
// node's drift. writeNodeSeries writes the same as text.
func (c *stateCounts) emitNodes(ch chan<- prometheus.Metric) {
	gauge := gaugeTo(ch)
	for _, r := range c.readings {
		gpu := strconv.Itoa(r.index)
		if !r.utilUnknown {
			gauge(descUtil, r.util, r.pool, r.node, gpu, r.uuid, r.model)
		}
		gauge(descMemory, r.memBytes, r.pool, r.node, gpu, r.uuid, r.model)
		gauge(descPower, r.power, r.pool, r.node, gpu, r.uuid, r.model)
		gauge(descTemp, r.tc, r.pool, r.node, gpu, r.uuid, r.model)
	}
	for _, d := range c.drift {
		gauge(descDrift, d.value(), d.pool, d.node, d.component)
	}
}

// gaugeTo returns a function that sends a gauge of d with value v and labels to ch.
func gaugeTo(ch chan<- prometheus.Metric) func(d *prometheus.Desc, v float64, labels ...string) {
	return func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
}

// emitCounts writes the counts: series by pool, model, queue and team, few whatever the
// cluster's size.
func (c *stateCounts) emitCounts(ch chan<- prometheus.Metric) {
	gauge := gaugeTo(ch)
	for k, row := range c.gpus {
		for i, n := range row {
			gauge(descGPUs, float64(n), k.pool, k.model, gpuStates[i])
		}
	}
	for pool, row := range c.nodes {
		for i, n := range row {
			gauge(descNodes, float64(n), pool, string(nodeStates[i]))
		}
	}
	for queue, row := range c.jobs {
		for i, n := range row {
			gauge(descJobs, float64(n), queue, string(jobStates[i]))
		}
	}
	gauge(descPending, float64(c.pending))
	gauge(descBeatInterval, c.beat.Seconds())
	for k, n := range c.teamUsed {
		gauge(descTeamUsed, float64(n), k.team, k.model)
	}
	for k, q := range c.quotas {
		gauge(descTeamGuaranteed, float64(q.Guaranteed), k.team, k.model)
		gauge(descTeamLimit, float64(q.Limit), k.team, k.model)
	}
	for _, b := range c.budgets {
		gauge(descBudgetUsed, b.used, b.team, b.project, b.period)
		if b.budget.Soft > 0 {
			gauge(descBudgetLimit, b.budget.Soft, b.team, b.project, b.period, "soft")
		}
		if b.budget.Hard > 0 {
			gauge(descBudgetLimit, b.budget.Hard, b.team, b.project, b.period, "hard")
		}
	}
}
