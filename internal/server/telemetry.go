package server

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
)

// Telemetry history is kept in memory only, and bounded:
//
//   - per GPU, a ring of gpuPoints one-minute points (each the mean of the readings taken in
//     its minute): the last two hours, about 10 KB per GPU;
//   - per attempt rank, a series of at most rankPoints points. The first each cover
//     rankStepFirst; when the series is full, adjacent points are merged in pairs and the
//     step doubles, so the series always covers the whole run (240 points of 10 s cover
//     40 minutes, of 80 s five hours, of 20 min three days);
//   - per attempt rank, a running summary (api.Usage): the count, mean, max and last of
//     GPU utilisation, GPU memory, CPU and memory, and their 95th percentile from a
//     fixed-size log histogram (histBins bins, each 10% wider than the last, so p95 is
//     within ±5% of the true value). A rank's series and summary take about 25 KB.
//
// When a rank ends, its summary is written to its Placement.Usage, which is stored with the
// attempt; the rank's series is dropped rankKeep after that, or as soon as its attempt is
// no longer the job's live one. A node's latest reading is on api.Node (Telemetry,
// Leftovers, HeldGPUs) in memory only; a restarted server learns it from the next reading.
const (
	gpuPoints     = 120
	gpuStep       = time.Minute
	rankPoints    = 240
	rankStepFirst = 10 * time.Second
	rankKeep      = time.Hour
	histBins      = 320
	// histMin is the upper bound of the histogram's first bin; values below it count as 0.
	histMin = 0.1
	// pruneEvery is how often the history is swept for series to drop.
	pruneEvery = time.Minute
)

// histLogRatio is the log of how much wider each histogram bin is than the one before.
var histLogRatio = math.Log(1.1)

// reading is one telemetry reading of a GPU or an attempt rank. GPU series leave CPU and
// memory zero; attempt series leave the temperature zero.
type reading struct {
	util, gpuMem, power, temp, cpu, mem float64
}

// bucket sums the readings that fall into one point of a series.
type bucket struct {
	start time.Time
	n     int
	sum   reading
}

func (b *bucket) add(r reading) { b.merge(bucket{n: 1, sum: r}) }

func (b *bucket) merge(o bucket) {
	b.n += o.n
	b.sum.util += o.sum.util
	b.sum.gpuMem += o.sum.gpuMem
	b.sum.power += o.sum.power
	b.sum.temp += o.sum.temp
	b.sum.cpu += o.sum.cpu
	b.sum.mem += o.sum.mem
}

// point is the bucket's mean.
func (b bucket) point() api.TelemetryPoint {
	n := float64(max(b.n, 1))
	return api.TelemetryPoint{Time: b.start, GPUUtilPct: round2(b.sum.util / n), GPUMemoryMB: round2(b.sum.gpuMem / n),
		PowerW: round2(b.sum.power / n), TemperatureC: round2(b.sum.temp / n), CPUPct: round2(b.sum.cpu / n), MemoryMB: round2(b.sum.mem / n)}
}

func round2(v float64) float64 { return math.Round(v*100) / 100 }

// gpuHistory is one GPU's last two hours, minute by minute.
type gpuHistory struct {
	ring [gpuPoints]bucket // completed minutes; the oldest is overwritten
	next int               // where the next completed minute goes
	cur  bucket            // the minute being filled
	seen time.Time         // when the GPU was last read
}

func (g *gpuHistory) add(now time.Time, r reading) {
	minute := now.Truncate(gpuStep)
	// A clock that stepped back adds to the current minute rather than reopening one.
	if g.cur.n > 0 && minute.After(g.cur.start) {
		g.ring[g.next] = g.cur
		g.next = (g.next + 1) % gpuPoints
		g.cur = bucket{}
	}
	if g.cur.n == 0 {
		g.cur.start = minute
	}
	g.cur.add(r)
	g.seen = now
}

// points returns the minutes of the last two hours before now, oldest first, the minute
// being filled last.
func (g *gpuHistory) points(now time.Time) []api.TelemetryPoint {
	from := now.Add(-gpuPoints * gpuStep)
	out := []api.TelemetryPoint{}
	for i := range gpuPoints {
		b := g.ring[(g.next+i)%gpuPoints]
		if b.n > 0 && b.start.After(from) {
			out = append(out, b.point())
		}
	}
	if g.cur.n > 0 {
		out = append(out, g.cur.point())
	}
	return out
}

// stat summarises one quantity of a rank's readings.
type stat struct {
	n              int
	sum, max, last float64
	hist           [histBins]uint32
}

func histBin(v float64) int {
	if v < histMin {
		return 0
	}
	return min(1+int(math.Log(v/histMin)/histLogRatio), histBins-1)
}

func (s *stat) add(v float64) {
	if s.n == 0 || v > s.max {
		s.max = v
	}
	s.n++
	s.sum += v
	s.last = v
	s.hist[histBin(v)]++
}

// p95 is the 95th percentile: the geometric middle of the bin it falls in, never above the
// largest value seen.
func (s *stat) p95() float64 {
	if s.n == 0 {
		return 0
	}
	rank := uint32(math.Ceil(0.95 * float64(s.n)))
	var seen uint32
	for i, c := range s.hist {
		seen += c
		if seen < rank {
			continue
		}
		if i == 0 {
			return 0
		}
		return min(histMin*math.Pow(1.1, float64(i)-0.5), s.max)
	}
	return s.max
}

func (s *stat) summary() api.Stat {
	if s.n == 0 {
		return api.Stat{}
	}
	return api.Stat{Mean: round2(s.sum / float64(s.n)), P95: round2(s.p95()), Max: round2(s.max), Last: round2(s.last)}
}

// idleState is what a rank's last reading says about its GPUs.
type idleState int

const (
	idleUnknown idleState = iota // no reading of all its GPUs yet
	idleYes                      // every GPU below the queue's threshold
	idleNo                       // at least one GPU in use
)

// rankSeries is one attempt rank's history and summary.
type rankSeries struct {
	node   string
	step   time.Duration
	origin time.Time
	points []bucket
	first  time.Time
	last   time.Time
	util   stat
	gpuMem stat
	cpu    stat
	mem    stat
	idle   idleState
	// ended is when the rank ended; the series is dropped rankKeep later.
	ended time.Time
}

func (r *rankSeries) add(now time.Time, v reading) {
	if r.util.n == 0 {
		r.origin, r.first, r.step = now, now, rankStepFirst
	}
	r.last = now
	r.util.add(v.util)
	r.gpuMem.add(v.gpuMem)
	r.cpu.add(v.cpu)
	r.mem.add(v.mem)
	k := r.slot(now)
	for k >= rankPoints {
		r.compact()
		k = r.slot(now)
	}
	start := r.origin.Add(time.Duration(k) * r.step)
	if n := len(r.points); n > 0 && !r.points[n-1].start.Before(start) {
		r.points[n-1].add(v)
		return
	}
	b := bucket{start: start}
	b.add(v)
	r.points = append(r.points, b)
}

// slot is the index of the point now falls in.
func (r *rankSeries) slot(now time.Time) int {
	return int(max(now.Sub(r.origin), 0) / r.step)
}

// compact doubles the step, merging the points that fall into one doubled step. The
// points keep distinct slots below rankPoints, so the series never grows past its bound.
func (r *rankSeries) compact() {
	r.step *= 2
	out := r.points[:0]
	for _, b := range r.points {
		b.start = r.origin.Add(time.Duration(r.slot(b.start)) * r.step)
		if n := len(out); n > 0 && out[n-1].start.Equal(b.start) {
			out[n-1].merge(b)
			continue
		}
		out = append(out, b)
	}
	r.points = out
}

func (r *rankSeries) usage() api.Usage {
	return api.Usage{Samples: r.util.n, First: r.first, Last: r.last, GPUUtilPct: r.util.summary(),
		GPUMemoryMB: r.gpuMem.summary(), CPUPct: r.cpu.summary(), MemoryMB: r.mem.summary()}
}

func (r *rankSeries) series() ([]api.TelemetryPoint, float64) {
	out := make([]api.TelemetryPoint, 0, len(r.points))
	for _, b := range r.points {
		p := b.point()
		p.TemperatureC = 0
		out = append(out, p)
	}
	return out, r.step.Seconds()
}

type gpuKey struct {
	node  string
	index int
}

type rankKey struct {
	job     int64
	attempt int
	rank    int
}

// telemetry is the in-memory history (see the bounds at the top of this file). It has its
// own lock so the API can read it without the server's; callers that hold s.mu take it
// after s.mu, never before.
type telemetry struct {
	mu    sync.Mutex // guards the fields below
	gpus  map[gpuKey]*gpuHistory
	ranks map[rankKey]*rankSeries
	// lastReading is the time of each node's last reading, so a heartbeat that is sent
	// again does not count its reading twice.
	lastReading map[string]time.Time
	lastPrune   time.Time
}

func newTelemetry() *telemetry {
	return &telemetry{gpus: map[gpuKey]*gpuHistory{}, ranks: map[rankKey]*rankSeries{}, lastReading: map[string]time.Time{}}
}

// fresh reports whether a reading the node took at taken is new, and records it as seen.
// A reading without a time is always new.
func (t *telemetry) fresh(node string, taken time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !taken.IsZero() && t.lastReading[node].Equal(taken) {
		return false
	}
	t.lastReading[node] = taken
	return true
}

func (t *telemetry) addGPU(k gpuKey, now time.Time, r reading) {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.gpus[k]
	if g == nil {
		g = &gpuHistory{}
		t.gpus[k] = g
	}
	g.add(now, r)
}

// addRank adds a reading of a running rank, with what it says about the rank's GPUs.
func (t *telemetry) addRank(k rankKey, node string, now time.Time, r reading, idle idleState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.ranks[k]
	if s == nil {
		s = &rankSeries{node: node}
		t.ranks[k] = s
	}
	if !s.ended.IsZero() {
		return
	}
	s.add(now, r)
	s.idle = idle
}

// idle returns what the rank's last reading said about its GPUs.
func (t *telemetry) idle(k rankKey) idleState {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.ranks[k]; s != nil && s.ended.IsZero() {
		return s.idle
	}
	return idleUnknown
}

// usage returns the rank's summary so far; false if no reading of it arrived.
func (t *telemetry) usage(k rankKey) (api.Usage, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.ranks[k]
	if s == nil || s.util.n == 0 {
		return api.Usage{}, false
	}
	return s.usage(), true
}

// finish marks the rank ended and returns its summary, which the caller stores on the
// placement; false if no reading of it arrived.
func (t *telemetry) finish(k rankKey, now time.Time) (api.Usage, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.ranks[k]
	if s == nil {
		return api.Usage{}, false
	}
	if s.ended.IsZero() {
		s.ended = now
	}
	if s.util.n == 0 {
		return api.Usage{}, false
	}
	return s.usage(), true
}

// rankSeries returns the rank's points and their step; empty when none are kept.
func (t *telemetry) rankSeries(k rankKey) ([]api.TelemetryPoint, float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.ranks[k]; s != nil {
		return s.series()
	}
	return []api.TelemetryPoint{}, rankStepFirst.Seconds()
}

// gpuSeries returns the GPU's minutes of the last two hours.
func (t *telemetry) gpuSeries(k gpuKey, now time.Time) []api.TelemetryPoint {
	t.mu.Lock()
	defer t.mu.Unlock()
	if g := t.gpus[k]; g != nil {
		return g.points(now)
	}
	return []api.TelemetryPoint{}
}

// prune drops, at most once per pruneEvery, the series of ranks that ended rankKeep ago
// or are no longer live (live says which are), the history of GPUs not read for two hours
// or no longer on their node (gpuKnown says which are), and what it remembers of nodes
// that are gone (nodeKnown).
func (t *telemetry) prune(now time.Time, live func(rankKey) bool, gpuKnown func(gpuKey) bool, nodeKnown func(string) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Sub(t.lastPrune) < pruneEvery {
		return
	}
	t.lastPrune = now
	for k, s := range t.ranks {
		if s.ended.IsZero() && !live(k) {
			s.ended = now
		}
		if !s.ended.IsZero() && now.Sub(s.ended) >= rankKeep {
			delete(t.ranks, k)
		}
	}
	for k, g := range t.gpus {
		if now.Sub(g.seen) >= gpuPoints*gpuStep || !gpuKnown(k) {
			delete(t.gpus, k)
		}
	}
	for node := range t.lastReading {
		if !nodeKnown(node) {
			delete(t.lastReading, node)
		}
	}
}

// rankUsage is one rank's summary with the number of GPUs it had, for combineUsage.
type rankUsage struct {
	u    api.Usage
	gpus int
}

// combineUsage sums up an attempt's ranks. GPU utilisation's mean and last are the means
// over the ranks weighted by their GPUs, its p95 and max those of the busiest rank; GPU
// memory, CPU and memory (and the peak memory) are summed over the ranks, so their p95 and
// max are upper bounds when ranks peak at different times. Nil when no rank has readings.
func combineUsage(parts []rankUsage) *api.Usage {
	var out api.Usage
	weight := 0.0
	for _, p := range parts {
		out.PeakMemoryMB += p.u.PeakMemoryMB
		if p.u.Samples == 0 {
			continue
		}
		w := float64(max(p.gpus, 1))
		if out.Samples == 0 || p.u.First.Before(out.First) {
			out.First = p.u.First
		}
		if p.u.Last.After(out.Last) {
			out.Last = p.u.Last
		}
		out.Samples += p.u.Samples
		weight += w
		out.GPUUtilPct.Mean += w * p.u.GPUUtilPct.Mean
		out.GPUUtilPct.Last += w * p.u.GPUUtilPct.Last
		out.GPUUtilPct.P95 = max(out.GPUUtilPct.P95, p.u.GPUUtilPct.P95)
		out.GPUUtilPct.Max = max(out.GPUUtilPct.Max, p.u.GPUUtilPct.Max)
		for _, pair := range [][2]*api.Stat{{&out.GPUMemoryMB, &p.u.GPUMemoryMB}, {&out.CPUPct, &p.u.CPUPct}, {&out.MemoryMB, &p.u.MemoryMB}} {
			pair[0].Mean += pair[1].Mean
			pair[0].P95 += pair[1].P95
			pair[0].Max += pair[1].Max
			pair[0].Last += pair[1].Last
		}
	}
	if out.Samples == 0 && out.PeakMemoryMB == 0 {
		return nil
	}
	if weight > 0 {
		out.GPUUtilPct.Mean = round2(out.GPUUtilPct.Mean / weight)
		out.GPUUtilPct.Last = round2(out.GPUUtilPct.Last / weight)
	}
	return &out
}

// attemptUsage fills in the live usage of the attempt's running ranks (a's placements are
// cloned first) and returns the attempt's summary. Ended ranks carry their own.
func (s *Server) attemptUsage(a *api.Attempt) *api.Usage {
	a.Placements = slices.Clone(a.Placements)
	parts := make([]rankUsage, 0, len(a.Placements))
	for rank := range a.Placements {
		p := &a.Placements[rank]
		if !p.State.Terminal() {
			if u, ok := s.tel.usage(rankKey{a.JobID, a.N, rank}); ok {
				u.PeakMemoryMB = 0
				if p.Usage != nil {
					u.PeakMemoryMB = p.Usage.PeakMemoryMB
				}
				p.Usage = &u
			}
		}
		if p.Usage != nil {
			parts = append(parts, rankUsage{u: *p.Usage, gpus: len(p.GPUIndices)})
		}
	}
	return combineUsage(parts)
}

// Bounds on what the server keeps of one node's reading. A reading naming GPUs the node
// does not have, or tasks that are not live attempts on it, has those entries ignored,
// never refused: a heartbeat carries the node's liveness and task ends, which must not be
// lost to a bad metric.
const (
	// maxKeptProcesses bounds the processes shown in a node's last reading.
	maxKeptProcesses = 256
	// maxLeftovers bounds the leftover processes listed on a node; the GPUs they hold are
	// counted from all of them.
	maxLeftovers = 64
	// maxCommand bounds a process's command line as shown.
	maxCommand = 128
	// leftoversNamed is how many new leftovers one event names.
	leftoversNamed = 5
)

// nodeReading is one reading of a node, cleaned: what the node shows until the next one,
// the events it causes, and the jobs it has news of, for the idle policy.
type nodeReading struct {
	tel       *api.Telemetry
	leftovers []api.GPUProcess
	held      []int
	jobs      []int64
}

// liveRank is a rank of a live attempt on a node, as a reading refers to it.
type liveRank struct {
	job  api.Job
	rank int
	gpus []int
}

// rankLookup finds the live ranks on one node, remembering each attempt it looked up, so
// a reading costs O(its entries), never a walk over all jobs.
type rankLookup struct {
	s    *Server
	node string
	seen map[[2]int64]*liveRank
}

func (l *rankLookup) find(jobID int64, attempt int) *liveRank {
	if jobID <= 0 || attempt <= 0 {
		return nil
	}
	k := [2]int64{jobID, int64(attempt)}
	if r, ok := l.seen[k]; ok {
		return r
	}
	var r *liveRank
	job, ok := l.s.state.Job(jobID)
	a, hasAttempt := l.s.state.CurrentAttempt(jobID)
	if ok && hasAttempt && job.State.Active() && a.N == attempt {
		if rank := rankOn(a, l.node); rank >= 0 && !a.Placements[rank].State.Terminal() {
			r = &liveRank{job: job, rank: rank, gpus: a.Placements[rank].GPUIndices}
		}
	}
	l.seen[k] = r
	return r
}

// readTelemetry adds a node's reading to the history and returns it cleaned; nil when the
// heartbeat carries no new reading. It runs before the heartbeat's task reports are
// applied, so a rank that ends in the same heartbeat has its last reading in its summary.
// Callers hold s.mu.
func (s *Server) readTelemetry(node api.Node, tel *api.Telemetry, now time.Time) *nodeReading {
	if tel == nil || !s.tel.fresh(node.Name, tel.Time) {
		return nil
	}
	known := make(map[int]bool, len(node.GPUs))
	for _, g := range node.GPUs {
		known[g.Index] = true
	}
	out := &nodeReading{tel: &api.Telemetry{Time: tel.Time, GPUs: []api.GPUSample{}}}
	samples := map[int]api.GPUSample{}
	for _, g := range tel.GPUs[:min(len(tel.GPUs), maxNodeGPUs)] {
		if _, dup := samples[g.Index]; dup || !known[g.Index] {
			continue
		}
		g = cleanSample(g)
		samples[g.Index] = g
		out.tel.GPUs = append(out.tel.GPUs, g)
		s.tel.addGPU(gpuKey{node.Name, g.Index}, now, reading{util: g.UtilizationPct, gpuMem: float64(g.MemoryUsedMB), power: g.PowerW, temp: g.TemperatureC})
	}
	ranks := &rankLookup{s: s, node: node.Name, seen: map[[2]int64]*liveRank{}}
	for _, tu := range tel.Tasks[:min(len(tel.Tasks), maxTaskReport)] {
		r := ranks.find(tu.JobID, tu.Attempt)
		if r == nil {
			continue
		}
		tu = cleanTaskUsage(tu)
		power := 0.0
		for _, i := range r.gpus {
			power += samples[i].PowerW
		}
		idle := rankIdle(r.gpus, samples, s.idlePolicy(r.job.Spec.Queue).threshold)
		s.tel.addRank(rankKey{tu.JobID, tu.Attempt, r.rank}, node.Name, now,
			reading{util: tu.GPUUtilPct, gpuMem: float64(tu.GPUMemoryMB), power: power, cpu: tu.CPUPct, mem: float64(tu.MemoryMB)}, idle)
		out.tel.Tasks = append(out.tel.Tasks, tu)
		if !slices.Contains(out.jobs, tu.JobID) {
			out.jobs = append(out.jobs, tu.JobID)
		}
	}
	held := map[int]bool{}
	for _, p := range tel.Processes {
		if !known[p.GPU] {
			continue
		}
		p = cleanProcess(p)
		if ranks.find(p.JobID, p.Attempt) == nil {
			// A process of no live attempt on this node: a crashed job's, or one
			// started outside rota. Its GPU takes no new work while it holds memory.
			held[p.GPU] = true
			out.leftovers = append(out.leftovers, p)
		}
		if len(out.tel.Processes) < maxKeptProcesses {
			out.tel.Processes = append(out.tel.Processes, p)
		}
	}
	slices.SortFunc(out.leftovers, func(a, b api.GPUProcess) int {
		if a.GPU != b.GPU {
			return a.GPU - b.GPU
		}
		return a.PID - b.PID
	})
	out.leftovers = slices.Clip(out.leftovers[:min(len(out.leftovers), maxLeftovers)])
	for g := range held {
		out.held = append(out.held, g)
	}
	slices.Sort(out.held)
	return out
}

// recordReading records what a node's reading changes beyond the history: an event when
// leftover processes appear on the node or its last one is gone, and the idle policy of
// the jobs it has news of. Callers hold s.mu.
func (s *Server) recordReading(b *store.Batch, old api.Node, rd *nodeReading, now time.Time) {
	if ev, ok := leftoverEvent(old, rd, now); ok {
		b.Events = append(b.Events, ev)
	}
	s.checkIdle(b, rd.jobs, now)
}

// Cleaning keeps a node's figures in range: they are shown to every client and averaged.
func cleanSample(g api.GPUSample) api.GPUSample {
	g.UtilizationPct = clampF(g.UtilizationPct, 0, 100)
	g.MemoryUsedMB = min(max(g.MemoryUsedMB, 0), maxNodeMemMB)
	g.PowerW = clampF(g.PowerW, 0, 100_000)
	g.TemperatureC = clampF(g.TemperatureC, -100, 1000)
	return g
}

func cleanTaskUsage(t api.TaskUsage) api.TaskUsage {
	t.GPUUtilPct = clampF(t.GPUUtilPct, 0, 100)
	t.GPUMemoryMB = min(max(t.GPUMemoryMB, 0), maxNodeMemMB)
	t.CPUPct = clampF(t.CPUPct, 0, 100*maxNodeCPUs)
	t.MemoryMB = min(max(t.MemoryMB, 0), maxNodeMemMB)
	return t
}

func cleanProcess(p api.GPUProcess) api.GPUProcess {
	p.MemoryMB = min(max(p.MemoryMB, 0), maxNodeMemMB)
	p.Command = printable(p.Command)
	if len(p.Command) > maxCommand {
		p.Command = strings.ToValidUTF8(p.Command[:maxCommand], "") + "…"
	}
	if p.JobID < 0 || p.Attempt < 0 {
		p.JobID, p.Attempt = 0, 0
	}
	return p
}

func clampF(v, lo, hi float64) float64 {
	if math.IsNaN(v) {
		return lo
	}
	return min(max(v, lo), hi)
}

// pruneTelemetry drops the history nobody can ask for any more. Callers hold s.mu.
func (s *Server) pruneTelemetry(now time.Time) {
	live := func(k rankKey) bool {
		job, ok := s.state.Job(k.job)
		a, hasAttempt := s.state.CurrentAttempt(k.job)
		return ok && hasAttempt && job.State.Active() && a.N == k.attempt && k.rank < len(a.Placements) &&
			!a.Placements[k.rank].State.Terminal()
	}
	gpuKnown := func(k gpuKey) bool {
		n, ok := s.state.Node(k.node)
		return ok && slices.ContainsFunc(n.GPUs, func(g api.GPU) bool { return g.Index == k.index })
	}
	nodeKnown := func(name string) bool { _, ok := s.state.Node(name); return ok }
	s.tel.prune(now, live, gpuKnown, nodeKnown)
}

// endRankUsage stores the rank's summary on its placement as it ends, with the peak
// memory the node measured.
func (s *Server) endRankUsage(p *api.Placement, k rankKey, peakMB int64, now time.Time) {
	u, ok := s.tel.finish(k, now)
	if !ok && peakMB <= 0 {
		return
	}
	if peakMB > 0 {
		u.PeakMemoryMB = min(peakMB, maxNodeMemMB)
	}
	p.Usage = &u
}

// handleJobTelemetry answers GET /api/v1/jobs/{id}/telemetry[?attempt=N]: one series per
// rank of the attempt (default: the current one).
func (s *Server) handleJobTelemetry(w http.ResponseWriter, r *http.Request) {
	id, ok := s.jobID(w, r)
	if !ok {
		return
	}
	n64, qe := queryInt(r.URL.Query(), "attempt", 1, math.MaxInt32, 0) // 0: the current one
	if qe != nil {
		writeError(w, http.StatusBadRequest, qe)
		return
	}
	n := int(n64)
	who := caller(r)
	job, attempts, found, err := s.lookupJob(r.Context(), id)
	if err != nil {
		storeError(w, "reading the job", err)
		return
	}
	s.mu.Lock()
	var e *api.Error
	if found {
		e = s.mayRead(who, &job)
	}
	s.mu.Unlock()
	switch {
	case !found:
		notFound(w, id)
		return
	case e != nil:
		writeError(w, http.StatusForbidden, e)
		return
	case len(attempts) == 0:
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Field: "attempt", Message: fmt.Sprintf("job %d has not been placed yet, so it has no telemetry", id)})
		return
	case n > len(attempts):
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Field: "attempt", Message: fmt.Sprintf("job %d has %d attempts; there is no attempt %d", id, len(attempts), n)})
		return
	case n == 0:
		n = len(attempts)
	}
	a := attempts[n-1]
	list := api.TelemetryList{Series: []api.TelemetrySeries{}}
	for rank, p := range a.Placements {
		points, step := s.tel.rankSeries(rankKey{id, n, rank})
		list.Series = append(list.Series, api.TelemetrySeries{Node: p.Node, JobID: id, Attempt: n, StepSeconds: step, Points: points})
	}
	writeJSON(w, http.StatusOK, list)
}

// handleNodeTelemetry answers GET /api/v1/nodes/{name}/telemetry: one series per GPU, a
// point a minute for the last two hours.
func (s *Server) handleNodeTelemetry(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	s.mu.Lock()
	n, ok := s.state.Node(name)
	s.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Field: "name", Message: "no node " + truncateName(name)})
		return
	}
	now := s.cfg.Clock.Now()
	list := api.TelemetryList{Series: []api.TelemetrySeries{}}
	for _, g := range n.GPUs {
		idx := g.Index
		list.Series = append(list.Series, api.TelemetrySeries{Node: name, GPU: &idx, StepSeconds: gpuStep.Seconds(), Points: s.tel.gpuSeries(gpuKey{name, idx}, now)})
	}
	writeJSON(w, http.StatusOK, list)
}
