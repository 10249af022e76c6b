package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/sched"
)

// Config says how a workload is replayed. The same workload, Config and policy give the same
// Result.
type Config struct {
	// Scale multiplies the arrival rate: every job's submit offset from the first submit is
	// divided by Scale, so 2 replays the same jobs in half the time, at twice the load.
	// Durations are unchanged. Zero means 1.
	Scale float64
	// TimeLimit is the rule for jobs whose trace records no time limit: "hour" (the default:
	// the duration rounded up to a whole hour, as a user who knows roughly how long a job
	// takes would ask), "exact" (the duration itself: perfect estimates) or a Go duration
	// such as "24h" (the same limit for every job; longer jobs end in TIMEOUT).
	TimeLimit string
	// Checkpoint is the interval at which running jobs save their work. A preempted job, or
	// one lost with its node, keeps what it had saved and loses the rest; zero means jobs
	// never checkpoint and restart from the beginning.
	Checkpoint time.Duration
	// NodeMTBF is the mean time between failures of each node (exponentially distributed,
	// drawn from Seed); zero means nodes never fail. NodeRepair is the mean time to repair.
	NodeMTBF   time.Duration
	NodeRepair time.Duration
	// Retries is how many times a job lost to a node failure is requeued before it FAILs.
	Retries int
	// Seed feeds the only randomness of a replay: node failures.
	Seed uint64
	// HalfLife decays each team's GPU-seconds for the fair-share factor (default 7 days).
	HalfLife time.Duration
	// Progress, if set, is called with the number of jobs that just reached an end. Policies
	// run concurrently may call it concurrently.
	Progress func(n int)
}

// DefaultConfig returns the Config the rota sim command starts from.
func DefaultConfig() Config {
	return Config{
		Scale:      1,
		TimeLimit:  "hour",
		Checkpoint: 30 * time.Minute,
		NodeRepair: 4 * time.Hour,
		Retries:    3,
		HalfLife:   7 * 24 * time.Hour,
	}
}

// timeLimitRule turns Config.TimeLimit into a function from duration to time limit.
func timeLimitRule(s string) (func(time.Duration) time.Duration, error) {
	switch s {
	case "", "hour":
		return func(d time.Duration) time.Duration {
			return max(time.Hour, (d+time.Hour-1)/time.Hour*time.Hour)
		}, nil
	case "exact":
		return func(d time.Duration) time.Duration { return max(d, time.Second) }, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return nil, fmt.Errorf("time limit %q: want hour, exact or a positive duration such as 24h", s)
	}
	return func(time.Duration) time.Duration { return d }, nil
}

// planFunc is the scheduler as the engine sees it.
type planFunc func(s *sched.Snapshot, now time.Time) sched.Plan

// Event kinds, in the order they apply at one instant: resources free before anything
// else, so that arrivals at the same instant see them.
type eventKind uint8

const (
	evEnd eventKind = iota
	evNodeDown
	evNodeUp
	evArrive // arrivals are read from the sorted job list, not the heap
	evWake
)

// event is something that happens at a virtual time. For evEnd, id is the job and epoch its
// attempt, so that the end of an attempt that was preempted is recognised as stale.
type event struct {
	at    int64
	kind  eventKind
	epoch int32
	id    int64
}

func (a event) less(b event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.kind != b.kind {
		return a.kind < b.kind
	}
	return a.id < b.id
}

// eventHeap is a binary min-heap, written out to keep container/heap's interface calls off
// the hot path.
type eventHeap []event

func (h *eventHeap) push(e event) {
	*h = append(*h, e)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s[i].less(s[p]) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *eventHeap) pop() event {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && s[l].less(s[m]) {
			m = l
		}
		if r < n && s[r].less(s[m]) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}

// jobRun is the simulator's state of one job.
type jobRun struct {
	state    api.JobState
	attempts int32
	losses   int32
	// pendPos and runPos index engine.pending and engine.running; -1 when not there.
	pendPos, runPos int32
	timeout         bool // the current attempt ends at its time limit
	gpus            int
	team            int32
	limit           time.Duration
	// Times are nanoseconds of virtual time; firstStart is -1 until the job starts.
	arrive, firstStart, start, end int64
	// progress is the work saved: completed attempts and checkpoints, in work (run time
	// at speed 1), not wall time.
	progress time.Duration
	// speed is the relative speed of the current attempt's GPU model (Cluster.Speed).
	speed float64
	// attained is GPU-seconds received in the attempts that ended (least attained
	// service); lastRun and requeued are the run time and end of the latest of them
	// (requeued is -1 before any), for the LAS order's starvation guard.
	attained float64
	lastRun  time.Duration
	requeued int64
}

// teamAcct accounts one team's GPU use over virtual time.
type teamAcct struct {
	name   string
	weight float64
	quota  map[string]sched.Quota
	gpus   int     // GPUs held now
	at     int64   // when gpuSec was last brought up to date
	gpuSec float64 // GPU-seconds held, all attempts
}

// engine replays one workload under one policy.
type engine struct {
	// nodesVersion changes whenever a node fails or is repaired, so the scheduler may keep
	// its node layout between the calls in between.
	nodesVersion uint64
	w            *Workload
	cfg          Config
	plan         planFunc
	policy       string
	base         time.Time // virtual time zero: the first submit
	now          int64
	// share is the teams' fair-share usage, kept as the server keeps it.
	share *cluster.FairShare

	nodes    []sched.Node
	nodeIdx  map[string]int
	gpuOwner [][]int64 // per node, per GPU index: the job holding it, or 0
	freeCPU  []int
	freeMem  []int64
	nodeRand []*rand.Rand
	down     int

	queues map[string]sched.Queue
	teams  []teamAcct
	snapT  map[string]sched.Team

	jobs        []jobRun
	arrivals    []int64
	nextArrival int
	// ends counts the end events in the heap, stale ones included.
	ends int
	// pending is in the order of the last plan's Pending list, later arrivals and requeued
	// jobs after it (see keepOrder); spare is keepOrder's other array.
	pending []sched.Job
	spare   []sched.Job
	running []sched.Running
	// claims are the last plan's claims, passed back in each snapshot while their jobs
	// wait, as the server does: what preemption frees goes to the job it was for.
	claims []sched.Claim
	heap   eventHeap
	wakeAt int64

	// Integrals over virtual time, in GPU-seconds.
	lastT               int64
	allocGPUs, capGPUs  int
	allocSec, capSec    float64
	satAlloc, satCap    float64
	satTime             int64
	stats               counters
	progressUnreported  int
	maxPlansPerInstance int
}

// counters are the engine's tallies beyond per-job times.
type counters struct {
	events, plans      int
	preemptions        int
	preemptedSec       float64 // GPU-seconds lost to preemption
	failures, lostJobs int
	lostSec            float64 // GPU-seconds lost to node failures
	lastEnd            int64
}

func newEngine(w *Workload, cfg Config, policy string, plan planFunc) (*engine, error) {
	if cfg.Scale == 0 {
		cfg.Scale = 1
	}
	if cfg.Scale < 0 || math.IsNaN(cfg.Scale) || math.IsInf(cfg.Scale, 0) {
		return nil, fmt.Errorf("scale %v: want a positive number", cfg.Scale)
	}
	if cfg.HalfLife <= 0 {
		cfg.HalfLife = DefaultConfig().HalfLife
	}
	if cfg.NodeMTBF > 0 && cfg.NodeRepair <= 0 {
		return nil, fmt.Errorf("node repair time must be positive when nodes fail")
	}
	limitOf, err := timeLimitRule(cfg.TimeLimit)
	if err != nil {
		return nil, err
	}
	e := &engine{nodesVersion: 1,
		w: w, cfg: cfg, plan: plan, policy: policy,
		share: cluster.NewFairShare(cfg.HalfLife), nodeIdx: map[string]int{},
		queues: map[string]sched.Queue{}, snapT: map[string]sched.Team{},
		maxPlansPerInstance: 4,
	}
	c := w.Cluster
	for i, n := range c.Nodes {
		sn := sched.Node{
			Name: n.Name, Labels: n.Labels, Schedulable: true, CPUs: n.CPUs, MemoryMB: n.MemoryMB,
			GPUs: make([]sched.GPU, n.GPUs),
		}
		for g := range sn.GPUs {
			sn.GPUs[g] = sched.GPU{Index: g, ID: n.Name + "/" + strconv.Itoa(g), Model: n.GPUModel, MemoryMB: n.GPUMemoryMB, Healthy: true}
		}
		e.nodes = append(e.nodes, sn)
		e.nodeIdx[n.Name] = i
		e.gpuOwner = append(e.gpuOwner, make([]int64, n.GPUs))
		e.freeCPU = append(e.freeCPU, n.CPUs)
		e.freeMem = append(e.freeMem, n.MemoryMB)
		e.capGPUs += n.GPUs
		if cfg.NodeMTBF > 0 {
			r := rand.New(rand.NewPCG(cfg.Seed, uint64(i)))
			e.nodeRand = append(e.nodeRand, r)
			e.heap.push(event{at: e.draw(r, cfg.NodeMTBF), kind: evNodeDown, id: int64(i)})
		}
	}
	for _, q := range c.Queues {
		e.queues[q.Name] = sched.Queue{Name: q.Name, Tier: q.Tier, Preemptible: q.Preemptible, NeverPreempt: q.NeverPreempt}
	}
	teamIdx := map[string]int32{}
	for _, t := range c.Teams {
		ta := teamAcct{name: t.Name, weight: t.Weight}
		for model, q := range t.Quota {
			if ta.quota == nil {
				ta.quota = map[string]sched.Quota{}
			}
			if model == "any" {
				model = ""
			}
			ta.quota[model] = sched.Quota{Guaranteed: q.Guaranteed, Limit: q.Limit}
		}
		teamIdx[t.Name] = int32(len(e.teams))
		e.teams = append(e.teams, ta)
	}
	if len(w.Jobs) > 0 {
		e.base = w.Jobs[0].Submit
	}
	e.jobs = make([]jobRun, len(w.Jobs))
	e.arrivals = make([]int64, len(w.Jobs))
	for i, j := range w.Jobs {
		ti, ok := teamIdx[j.Team]
		if !ok {
			ti = int32(len(e.teams))
			teamIdx[j.Team] = ti
			e.teams = append(e.teams, teamAcct{name: j.Team, weight: 1})
		}
		limit := j.TimeLimit
		if limit == 0 {
			limit = limitOf(j.Duration)
		}
		at := int64(math.Round(float64(j.Submit.Sub(e.base)) / cfg.Scale))
		e.arrivals[i] = at
		e.jobs[i] = jobRun{
			state: api.StatePending, pendPos: -1, runPos: -1, gpus: j.GPUs, team: ti,
			limit: limit, arrive: at, firstStart: -1, requeued: -1,
		}
	}
	return e, nil
}

// draw returns a virtual time an exponentially distributed interval of the given mean after
// now, at least a second later so that a node is never down and up at one instant.
func (e *engine) draw(r *rand.Rand, mean time.Duration) int64 {
	d := max(time.Duration(r.ExpFloat64()*float64(mean)), time.Second)
	return e.now + int64(d)
}

func (e *engine) t(at int64) time.Time { return e.base.Add(time.Duration(at)) }

// active reports whether anything can still happen: jobs to arrive or to end, or pending
// jobs that a node coming back could unblock. Node failures alone do not keep a replay
// going, nor do jobs that never end (FillWorkload).
func (e *engine) active() bool {
	return e.nextArrival < len(e.arrivals) || e.ends > 0 || (len(e.pending) > 0 && e.down > 0)
}

// run replays the workload. Each step: (1) move the clock to the next event time,
// accounting what was held meanwhile; (2) apply every event of that instant; (3) if that
// changed what the scheduler sees, plan once and apply the plan.
func (e *engine) run(ctx context.Context) error {
	for steps := 0; e.active(); steps++ {
		if steps&1023 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		at := e.nextTime()
		e.advance(at)
		changed, err := e.applyEventsAt(at)
		if err != nil {
			return err
		}
		if changed && len(e.pending) > 0 {
			if err := e.schedule(); err != nil {
				return err
			}
		}
	}
	e.report(0)
	return nil
}

func (e *engine) nextTime() int64 {
	at := int64(math.MaxInt64)
	if len(e.heap) > 0 {
		at = e.heap[0].at
	}
	if e.nextArrival < len(e.arrivals) {
		at = min(at, e.arrivals[e.nextArrival])
	}
	return at
}

// advance moves the clock to at, integrating allocation and capacity over the interval.
func (e *engine) advance(at int64) {
	if at > e.lastT {
		dt := float64(at-e.lastT) / 1e9
		a, c := float64(e.allocGPUs)*dt, float64(e.capGPUs)*dt
		e.allocSec += a
		e.capSec += c
		if len(e.pending) > 0 {
			e.satAlloc += a
			e.satCap += c
			e.satTime += at - e.lastT
		}
		e.lastT = at
	}
	e.now = at
}

// applyEventsAt applies the events of instant at in kind order and reports whether any
// changed what the scheduler sees.
func (e *engine) applyEventsAt(at int64) (bool, error) {
	changed := false
	for len(e.heap) > 0 && e.heap[0].at == at && e.heap[0].kind < evArrive {
		ev := e.heap.pop()
		e.stats.events++
		switch ev.kind {
		case evEnd:
			e.ends--
			changed = e.end(ev) || changed
		case evNodeDown:
			e.nodeDown(int(ev.id))
			changed = true
		case evNodeUp:
			e.nodeUp(int(ev.id))
			changed = true
		}
	}
	for e.nextArrival < len(e.arrivals) && e.arrivals[e.nextArrival] == at {
		e.addPending(e.nextArrival)
		e.nextArrival++
		e.stats.events++
		changed = true
	}
	for len(e.heap) > 0 && e.heap[0].at == at {
		e.heap.pop() // a wake-up: replan at an estimated start
		e.stats.events++
		e.wakeAt = 0
		changed = true
	}
	return changed, nil
}

// addPending puts job i (index into w.Jobs) into the snapshot's pending list.
func (e *engine) addPending(i int) {
	j := &e.jobs[i]
	wj := &e.w.Jobs[i]
	sh := e.w.shapes[i]
	req := sched.Request{GPUs: wj.GPUs, GPUModel: wj.GPUModel, CPUs: sh.cpus, MemoryMB: sh.memoryMB}
	if len(wj.GPUModels) > 0 {
		req.GPUModels, req.Speeds = wj.GPUModels, e.listSpeeds(wj)
	}
	if sh.nodes > 1 {
		req.Nodes, req.GPUsPerNode = sh.nodes, sh.gpusPerNode
	}
	j.pendPos = int32(len(e.pending))
	e.pending = append(e.pending, sched.Job{
		ID: wj.ID, Queue: wj.Queue, Team: wj.Team, User: wj.User, SubmitTime: e.t(j.arrive),
		TimeLimit: j.limit, Request: req,
		Duration:        wj.Duration - j.progress,
		AttainedService: j.attained, LastRun: j.lastRun, Requeued: e.requeuedAt(j),
	})
}

// listSpeeds gives the speeds of the models a job lists, where the cluster file or the
// trace gives any; nil otherwise, and the list's order and fit decide.
func (e *engine) listSpeeds(wj *Job) map[string]float64 {
	if len(e.w.Cluster.Speeds) == 0 && len(wj.Speeds) == 0 {
		return nil
	}
	speeds := make(map[string]float64, len(wj.GPUModels))
	for _, m := range wj.GPUModels {
		speeds[m] = e.w.Cluster.Speed(wj.Speeds, m)
	}
	return speeds
}

// requeuedAt is when job j's latest attempt ended, zero if none did.
func (e *engine) requeuedAt(j *jobRun) time.Time {
	if j.requeued < 0 {
		return time.Time{}
	}
	return e.t(j.requeued)
}

func (e *engine) removePending(i int) {
	// The jobs after it move up one place rather than the last into its place: the list
	// stays in the plan's order, which keepOrder then need not restore.
	pos := e.jobs[i].pendPos
	last := len(e.pending) - 1
	copy(e.pending[pos:], e.pending[pos+1:])
	for k := int(pos); k < last; k++ {
		e.jobs[e.pending[k].ID-1].pendPos = int32(k)
	}
	e.pending[last] = sched.Job{}
	e.pending = e.pending[:last]
	e.jobs[i].pendPos = -1
}

func (e *engine) removeRunning(i int) {
	pos := e.jobs[i].runPos
	last := len(e.running) - 1
	if int(pos) != last {
		e.running[pos] = e.running[last]
		e.jobs[e.running[pos].ID-1].runPos = pos
	}
	e.running[last] = sched.Running{}
	e.running = e.running[:last]
	e.jobs[i].runPos = -1
}

// transition moves job i through the server's job state machine.
func (e *engine) transition(i int, to api.JobState, reason string) error {
	j := &e.jobs[i]
	aj := api.Job{ID: int64(i + 1), State: j.state, Attempts: int(j.attempts)}
	if _, err := cluster.Transition(&aj, to, reason, "", "sim", e.t(e.now)); err != nil {
		return err
	}
	j.state = aj.State
	return nil
}

// schedule plans and applies the plan. When the plan preempts, the victims stop at once (the
// grace period is not modelled) and the scheduler is asked again at the same instant, so
// that the jobs they made room for can start.
func (e *engine) schedule() error {
	nowT := e.t(e.now)
	for pass := 0; pass < e.maxPlansPerInstance && len(e.pending) > 0; pass++ {
		snap := e.snapshot()
		p := e.plan(snap, nowT)
		e.stats.plans++
		for _, pr := range p.Preemptions {
			if err := e.preempt(pr); err != nil {
				return err
			}
		}
		for _, pl := range p.Placements {
			if err := e.start(pl); err != nil {
				return err
			}
		}
		e.claims = p.Claims
		e.scheduleWake(p.Pending, p.Recheck)
		e.keepOrder(p.Pending)
		if len(p.Preemptions) == 0 {
			break
		}
	}
	return nil
}

// keepOrder puts the pending jobs in the order of the plan's Pending list, which is the
// policy's order, and the jobs the plan did not see (requeued by its preemptions) after
// them. The scheduler's order is total, so the order of Snapshot.Pending changes no plan;
// but between two events few jobs change places, and sorting a list already nearly in
// order costs the scheduler little, where sorting the list removePending shuffles cost it
// a third of a replay on a long queue.
func (e *engine) keepOrder(planned []sched.PendingJob) {
	// The jobs before the first out of place stay where they are: often all of them, when
	// the plan started nothing and a new job sorts last.
	m := 0
	for m < len(planned) && m < len(e.pending) && e.pending[m].ID == planned[m].JobID {
		m++
	}
	if m == len(e.pending) {
		return
	}
	rest := e.spare[:0]
	for k := m; k < len(planned); k++ {
		if pos := e.jobs[planned[k].JobID-1].pendPos; pos >= 0 {
			rest = append(rest, e.pending[pos])
			e.jobs[planned[k].JobID-1].pendPos = -2 // taken
		}
	}
	for k := m; k < len(e.pending); k++ {
		if e.jobs[e.pending[k].ID-1].pendPos >= 0 {
			rest = append(rest, e.pending[k])
		}
	}
	copy(e.pending[m:], rest)
	for k := m; k < len(e.pending); k++ {
		e.jobs[e.pending[k].ID-1].pendPos = int32(k)
	}
	clear(rest) // the jobs live on in pending; the spare array need not hold them too
	e.spare = rest[:0]
}

// snapshot brings the parts of the scheduler's view that change with time up to date and
// returns it. Nodes, pending and running lists are kept current as events apply, so this
// costs O(teams + running), not O(jobs).
func (e *engine) snapshot() *sched.Snapshot {
	nowT := e.t(e.now)
	for ti := range e.teams {
		t := &e.teams[ti]
		e.snapT[t.name] = sched.Team{Name: t.name, Quota: t.quota, Weight: t.weight, Usage: e.share.Usage(t.name, nowT)}
	}
	ck := int64(e.cfg.Checkpoint)
	for k := range e.running {
		r := &e.running[k]
		j := &e.jobs[r.ID-1]
		if n := (e.now - j.start) / max(ck, 1); ck > 0 && n > 0 {
			r.LastCheckpoint = e.t(j.start + n*ck)
		}
		// As the server counts it: earlier attempts, and this one up to now.
		r.AttainedService = j.attained + float64(j.gpus)*float64(e.now-j.start)/1e9
	}
	// A plan claims only for jobs it leaves pending, and nothing but a plan starts a job,
	// so this drops nothing today; it keeps the rule the server follows.
	e.claims = slices.DeleteFunc(e.claims, func(c sched.Claim) bool { return e.jobs[c.JobID-1].pendPos < 0 })
	return &sched.Snapshot{Nodes: e.nodes, NodesVersion: e.nodesVersion, Queues: e.queues, Teams: e.snapT, Running: e.running, Pending: e.pending, Claims: e.claims}
}

// accrue brings a team's GPU-seconds up to now.
func (e *engine) accrue(t *teamAcct) {
	if e.now <= t.at {
		return
	}
	t.gpuSec += float64(t.gpus) * float64(e.now-t.at) / 1e9
	t.at = e.now
}

// addTeamGPUs changes what team ti holds from now on, for its GPU-seconds and its fair
// share.
func (e *engine) addTeamGPUs(ti int32, n int) {
	t := &e.teams[ti]
	e.accrue(t)
	t.gpus += n
	e.share.Hold(t.name, float64(n), e.t(e.now))
}

// scheduleWake makes sure the scheduler is asked again at the earliest estimated start of a
// pending job, in case nothing else happens then (a protected victim becoming preemptible),
// or at the plan's recheck (LAS queues shifting), whichever comes first.
func (e *engine) scheduleWake(pending []sched.PendingJob, recheck time.Time) {
	first := int64(math.MaxInt64)
	if !recheck.IsZero() {
		if at := int64(recheck.Sub(e.base)); at > e.now {
			first = at
		}
	}
	for k := range pending {
		est := pending[k].EstimatedStart
		if est.IsZero() {
			continue
		}
		if at := int64(est.Sub(e.base)); at > e.now && at < first {
			first = at
		}
	}
	if first == math.MaxInt64 || (e.wakeAt != 0 && e.wakeAt <= first) {
		return
	}
	e.wakeAt = first
	e.heap.push(event{at: first, kind: evWake})
}

// start applies a placement after checking it against what is free: a plan that gives away
// a busy GPU, or one another job's claim holds, is a scheduler bug, and the replay stops
// rather than report wrong numbers.
func (e *engine) start(pl sched.Placement) error {
	i := int(pl.JobID - 1)
	if i < 0 || i >= len(e.jobs) || e.jobs[i].state != api.StatePending || e.jobs[i].pendPos < 0 {
		return fmt.Errorf("policy %s placed job %d, which is not pending", e.policy, pl.JobID)
	}
	if id, node, gpu, ok := e.claimedByOther(pl); ok {
		return fmt.Errorf("policy %s placed job %d on GPU %s/%d, which job %d's claim holds", e.policy, pl.JobID, node, gpu, id)
	}
	j := &e.jobs[i]
	gpus := 0
	model := ""
	for _, a := range pl.Allocs {
		n, ok := e.nodeIdx[a.Node]
		if !ok || !e.nodes[n].Schedulable {
			return fmt.Errorf("policy %s placed job %d on node %q, which cannot take work", e.policy, pl.JobID, a.Node)
		}
		for _, g := range a.GPUIndices {
			if g < 0 || g >= len(e.gpuOwner[n]) || e.gpuOwner[n][g] != 0 {
				return fmt.Errorf("policy %s placed job %d on GPU %s/%d, which is busy or absent", e.policy, pl.JobID, a.Node, g)
			}
			e.gpuOwner[n][g] = pl.JobID
			model = e.nodes[n].GPUs[g].Model
		}
		if a.CPUs > e.freeCPU[n] || a.MemoryMB > e.freeMem[n] {
			return fmt.Errorf("policy %s placed job %d on node %s beyond its free CPUs or memory", e.policy, pl.JobID, a.Node)
		}
		e.freeCPU[n] -= a.CPUs
		e.freeMem[n] -= a.MemoryMB
		gpus += len(a.GPUIndices)
	}
	if gpus != j.gpus {
		return fmt.Errorf("policy %s gave job %d %d GPUs, it asked for %d", e.policy, pl.JobID, gpus, j.gpus)
	}
	if err := e.transition(i, api.StateAssigned, ""); err != nil {
		return err
	}
	if err := e.transition(i, api.StateRunning, ""); err != nil {
		return err
	}
	e.removePending(i)
	j.attempts++
	j.start = e.now
	if j.firstStart < 0 {
		j.firstStart = e.now
	}
	wj := &e.w.Jobs[i]
	j.speed = 1
	if model != "" {
		j.speed = e.w.Cluster.Speed(wj.Speeds, model)
	}
	run := wallTime(wj.Duration-j.progress, j.speed)
	j.timeout = j.limit > 0 && j.limit < run
	if j.timeout {
		run = j.limit
	}
	r := sched.Running{
		ID: wj.ID, Queue: wj.Queue, Team: wj.Team, User: wj.User, Start: e.t(e.now),
		Allocs: pl.Allocs, Borrowing: pl.Borrowing,
		AttainedService: j.attained, LastRun: j.lastRun, Requeued: e.requeuedAt(j),
	}
	if j.limit > 0 {
		r.End = e.t(e.now + int64(j.limit))
	}
	j.runPos = int32(len(e.running))
	e.running = append(e.running, r)
	e.heap.push(event{at: e.now + int64(run), kind: evEnd, id: wj.ID, epoch: j.attempts})
	e.ends++
	e.allocGPUs += j.gpus
	e.addTeamGPUs(j.team, j.gpus)
	return nil
}

// claimedByOther finds a GPU of the placement that a claim of another job holds, among
// the claims the plan was made with. Claims are few: a scan is enough.
func (e *engine) claimedByOther(pl sched.Placement) (int64, string, int, bool) {
	for _, c := range e.claims {
		if c.JobID == pl.JobID {
			continue
		}
		for _, ca := range c.Allocs {
			for _, a := range pl.Allocs {
				if a.Node != ca.Node {
					continue
				}
				for _, g := range a.GPUIndices {
					if slices.Contains(ca.GPUIndices, g) {
						return c.JobID, a.Node, g, true
					}
				}
			}
		}
	}
	return 0, "", 0, false
}

// release frees what job i holds and returns the GPU-seconds of its current attempt.
func (e *engine) release(i int) float64 {
	j := &e.jobs[i]
	r := &e.running[j.runPos]
	for _, a := range r.Allocs {
		n := e.nodeIdx[a.Node]
		for _, g := range a.GPUIndices {
			e.gpuOwner[n][g] = 0
		}
		e.freeCPU[n] += a.CPUs
		e.freeMem[n] += a.MemoryMB
	}
	e.removeRunning(i)
	e.allocGPUs -= j.gpus
	e.addTeamGPUs(j.team, -j.gpus)
	gpuSec := float64(j.gpus) * float64(e.now-j.start) / 1e9
	j.attained += gpuSec
	j.lastRun, j.requeued = time.Duration(e.now-j.start), e.now
	return gpuSec
}

// end completes an attempt at its duration or its time limit. A stale end (the attempt was
// preempted or lost) changes nothing.
func (e *engine) end(ev event) bool {
	i := int(ev.id - 1)
	j := &e.jobs[i]
	if j.state != api.StateRunning || ev.epoch != j.attempts {
		return false
	}
	e.release(i)
	to, reason := api.StateSucceeded, ""
	if j.timeout {
		to, reason = api.StateTimeout, api.ReasonTimeout
		j.progress += e.workDone(i, time.Duration(e.now-j.start))
	} else {
		j.progress = e.w.Jobs[i].Duration
	}
	e.finish(i, to, reason)
	return true
}

// finish moves job i to a terminal state.
func (e *engine) finish(i int, to api.JobState, reason string) {
	if err := e.transition(i, to, reason); err != nil {
		panic(err) // only reached from RUNNING, where every terminal state is allowed
	}
	e.jobs[i].end = e.now
	e.stats.lastEnd = max(e.stats.lastEnd, e.now)
	e.report(1)
}

func (e *engine) report(n int) {
	if e.cfg.Progress == nil {
		return
	}
	e.progressUnreported += n
	if e.progressUnreported >= 256 || (n == 0 && e.progressUnreported > 0) {
		e.cfg.Progress(e.progressUnreported)
		e.progressUnreported = 0
	}
}

// maxWallTime bounds an attempt's wall time (100 years), so that a long job on a slow
// model cannot overflow the clock.
const maxWallTime = 100 * 365 * 24 * time.Hour

// wallTime is how long work (run time at speed 1) takes at the given speed.
func wallTime(work time.Duration, speed float64) time.Duration {
	if speed == 1 {
		return work
	}
	w := math.Round(float64(work) / speed)
	if w >= float64(maxWallTime) {
		return maxWallTime
	}
	return time.Duration(w)
}

// workDone is the work job i did in wall time d of its current attempt, at most what it
// had left.
func (e *engine) workDone(i int, d time.Duration) time.Duration {
	j := &e.jobs[i]
	left := e.w.Jobs[i].Duration - j.progress
	if j.speed != 1 {
		d = time.Duration(math.Min(math.Round(float64(d)*j.speed), float64(left)))
	}
	return min(d, left)
}

// stop ends job i's attempt early (preemption, node loss). The job keeps the work it had
// checkpointed; the GPU-seconds since its last checkpoint are lost and returned.
func (e *engine) stop(i int) float64 {
	j := &e.jobs[i]
	elapsed := time.Duration(e.now - j.start)
	kept := time.Duration(0)
	if ck := e.cfg.Checkpoint; ck > 0 {
		kept = elapsed / ck * ck
	}
	j.progress += e.workDone(i, kept)
	e.release(i)
	return float64(j.gpus) * (elapsed - kept).Seconds()
}

func (e *engine) preempt(pr sched.Preemption) error {
	i := int(pr.JobID - 1)
	if i < 0 || i >= len(e.jobs) || e.jobs[i].state != api.StateRunning {
		return fmt.Errorf("policy %s preempted job %d, which is not running", e.policy, pr.JobID)
	}
	e.stats.preemptions++
	e.stats.preemptedSec += e.stop(i)
	if err := e.transition(i, api.StatePending, api.ReasonPreempted); err != nil {
		return err
	}
	e.addPending(i)
	return nil
}

// nodeDown fails node n: it takes no work until repaired, and the jobs on it are lost:
// requeued while they have retries left, FAILED after.
func (e *engine) nodeDown(n int) {
	node := &e.nodes[n]
	node.Schedulable = false
	e.nodesVersion++
	e.down++
	e.capGPUs -= len(node.GPUs)
	e.stats.failures++
	var victims []int
	for k := range e.running {
		for _, a := range e.running[k].Allocs {
			if a.Node == node.Name {
				victims = append(victims, int(e.running[k].ID-1))
				break
			}
		}
	}
	for _, i := range victims {
		e.stats.lostJobs++
		e.stats.lostSec += e.stop(i)
		j := &e.jobs[i]
		j.losses++
		if int(j.losses) > e.cfg.Retries {
			e.finish(i, api.StateFailed, api.ReasonNodeLost)
			continue
		}
		if err := e.transition(i, api.StatePending, api.ReasonNodeLost); err != nil {
			panic(err) // RUNNING to PENDING is always allowed
		}
		e.addPending(i)
	}
	e.heap.push(event{at: e.draw(e.nodeRand[n], e.cfg.NodeRepair), kind: evNodeUp, id: int64(n)})
}

func (e *engine) nodeUp(n int) {
	node := &e.nodes[n]
	node.Schedulable = true
	e.nodesVersion++
	e.down--
	e.capGPUs += len(node.GPUs)
	e.heap.push(event{at: e.draw(e.nodeRand[n], e.cfg.NodeMTBF), kind: evNodeDown, id: int64(n)})
}
