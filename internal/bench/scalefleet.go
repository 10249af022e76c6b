package bench

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
)

// The load generator: a fleet of simulated agents in this process, each speaking the real
// agent protocol to the server process over its own mutual-TLS connections. Each one
// joined with a join token and holds the certificate the server issued it; it heartbeats
// at the interval the server asks for, holds a watch long-poll between its heartbeats on
// the same connection, as rota agent does, and heartbeats at once when it fires; it
// reports every task it is given as RUNNING in the heartbeat that follows, as a real
// agent does once the task's process has started. It starts no process.

// Timeouts of the simulated agents: as generous as the real agent's, so that a slow
// server shows as latency rather than as failures.
const (
	fleetHeartbeatTimeout = 60 * time.Second
	fleetWatchWait        = 30 * time.Second
	// fleetMinWatch is the shortest window between heartbeats a watch is sent for, and a
	// tenth of the interval, at most a second, is left between a watch's end and the next
	// heartbeat: rota agent's figures (minWatch, watchMargin).
	fleetMinWatch = 500 * time.Millisecond
	// joinConcurrency is how many agents join at once: enough to keep the server busy
	// while it signs certificates and commits, as a fleet booting together would.
	joinConcurrency = 16
)

// latencies collects request latencies from many goroutines.
type latencies struct {
	mu     sync.Mutex // guards the fields below
	d      []time.Duration
	errors int
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) fail() {
	l.mu.Lock()
	l.errors++
	l.mu.Unlock()
}

// take returns what was collected since the last take, sorted, and starts afresh.
func (l *latencies) take() (sorted []time.Duration, errors int) {
	l.mu.Lock()
	d, e := l.d, l.errors
	l.d, l.errors = nil, 0
	l.mu.Unlock()
	slices.Sort(d)
	return d, e
}

// percentileMS is the q-th quantile of sorted latencies in milliseconds.
func percentileMS(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := min(int(q*float64(len(sorted))), len(sorted)-1)
	return ms(sorted[i])
}

// fleet is the simulated agents.
type fleet struct {
	srv       *serverProc
	clusterID string
	agents    []*simAgent

	// gate lets a phase stop the agents' own heartbeats and watches: each beat, and each
	// watch while it is held, holds it for reading.
	gate sync.RWMutex
	// interval is the heartbeat interval the server asks for, in nanoseconds; started is
	// when the agents were set going, from which each keeps its phase (simAgent.slot).
	interval atomic.Int64
	started  time.Time

	// roundStart and roundEnd are when the last round began and ended (Unix nanoseconds).
	roundStart, roundEnd atomic.Int64

	beats   latencies
	running atomic.Int64 // tasks the agents have reported RUNNING and still hold

	// logLine, when set, is what every running task prints each interval: after each
	// heartbeat its agent ships it for all of them in one batch, as rota agent does.
	// logs are the batches' latencies, logChunks how many chunks they carried,
	// logPutOff how many of those the server put off for a later batch (503: its disk
	// took the batch's time), and logRefused how many it refused otherwise.
	logLine    atomic.Pointer[[]byte]
	logs       latencies
	logChunks  atomic.Int64
	logPutOff  atomic.Int64
	logRefused atomic.Int64
	beaten     atomic.Int64 // agents that have had at least one answer

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	errMu sync.Mutex // guards refused
	// refused is the first heartbeat the server refused: a protocol error, which ends
	// the run, unlike a slow or lost answer.
	refused error
}

// simAgent is one simulated node.
type simAgent struct {
	f        *fleet
	name     string
	instance string
	conn     *leanConn // for the heartbeats and the watch, in turn
	// connMu holds conn from a request until its answer is decoded: the answer is the
	// connection's only until its next request, which the heartbeats' goroutine and the
	// watch's may each send.
	connMu   sync.Mutex
	beatPath string
	logsPath string
	inv      api.Inventory
	invHash  string // api.InventoryHash(inv)
	wake     chan struct{}
	// watchUntil gives the watch, after each heartbeat answered, the time by which it must
	// end, as rota agent's (Agent.offerWatch).
	watchUntil chan time.Time
	// phase is where in every interval its heartbeats fall, as a fraction of it: agents
	// that start at different times spread their beats over the interval, whatever it is.
	phase float64
	// lastBeat is when its last heartbeat was sent (Unix nanoseconds), by itself or by
	// the round.
	lastBeat atomic.Int64

	mu    sync.Mutex // guards the fields below
	tasks map[api.TaskRef]*api.TaskStatus
	// logSize is the size of each task's log on the server, from the last batch's answer.
	logSize  map[api.TaskRef]int64
	epoch    uint64
	answered bool // the server has answered at least once
	// heldHash is the inventory hash of the server's last answer; "" after a failure.
	// As the real agent does, a heartbeat leaves the inventory out while it matches.
	heldHash string
}

// joinFleet joins n nodes with join tokens, as `rota agent --join` does on each: a key and
// a certificate request made on the node, POST /api/v1/join over TLS pinned to the CA in
// the token. It returns the join latencies.
func joinFleet(ctx context.Context, srv *serverProc, n int, progress io.Writer) (*fleet, []time.Duration, error) {
	f := &fleet{srv: srv, agents: make([]*simAgent, n)}
	// A join token admits at most 10,000 nodes; larger fleets get several.
	const perToken = 10_000
	var tokens []string
	for left := n; left > 0; left -= perToken {
		var tok api.NewJoinToken
		if err := srv.do(ctx, http.MethodPost, "/api/v1/join-tokens", nil, api.JoinTokenRequest{TTLSeconds: 24 * 3600, Uses: min(left, perToken)}, &tok); err != nil {
			return nil, nil, fmt.Errorf("create a join token: %w", err)
		}
		tokens = append(tokens, tok.Token)
	}
	var (
		next  atomic.Int64
		lat   latencies
		wg    sync.WaitGroup
		errMu sync.Mutex
		first error
	)
	start := time.Now()
	for range joinConcurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				a, cluster, err := f.join(ctx, fmt.Sprintf("scale-%05d", i), tokens[i/perToken])
				errMu.Lock()
				first = cmp.Or(first, err)
				f.clusterID = cluster
				errMu.Unlock()
				if err != nil {
					return
				}
				lat.add(time.Since(t0))
				f.agents[i] = a
				if done := i + 1; done%2000 == 0 {
					fmt.Fprintf(progress, "bench: scale: %d of %d nodes joined (%.0fs)\n", done, n, time.Since(start).Seconds())
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return nil, nil, first
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	d, _ := lat.take()
	return f, d, nil
}

func (f *fleet) join(ctx context.Context, name, token string) (a *simAgent, clusterID string, err error) {
	tok, err := auth.ParseJoinToken(token)
	if err != nil {
		return nil, "", err
	}
	keyPEM, err := auth.NewNodeKey()
	if err != nil {
		return nil, "", err
	}
	csr, err := auth.NodeCSR(keyPEM, name)
	if err != nil {
		return nil, "", err
	}
	cfg, err := auth.ClientTLSConfig(tok.Pin(), nil)
	if err != nil {
		return nil, "", err
	}
	// A node joins over a connection of its own, as each agent does.
	tr := &http.Transport{TLSClientConfig: cfg}
	defer tr.CloseIdleConnections()
	var resp api.JoinResponse
	if err := postJSON(ctx, &http.Client{Transport: tr}, f.srv.url+"/api/v1/join", api.JoinRequest{Token: token, Node: name, CSR: string(csr), Hostname: name}, &resp); err != nil {
		return nil, "", fmt.Errorf("join %s: %w", name, err)
	}
	id := auth.NodeIdentity{ClusterID: resp.ClusterID, Node: name, CAPEM: []byte(resp.CA), CertPEM: []byte(resp.Certificate), KeyPEM: keyPEM}
	cert, err := id.TLSCertificate()
	if err != nil {
		return nil, "", fmt.Errorf("%s: the issued certificate: %w", name, err)
	}
	tlsCfg, err := auth.ClientTLSConfig(id.Pin(), &cert)
	if err != nil {
		return nil, "", err
	}
	a = &simAgent{f: f, name: name, instance: randomInstance(), wake: make(chan struct{}, 1), watchUntil: make(chan time.Time, 1), tasks: map[api.TaskRef]*api.TaskStatus{},
		inv: api.Inventory{CPUs: 128, MemoryMB: 1 << 20, DeviceSource: "fake", Hostname: name, DriverVersion: "550.54.15", CUDAVersion: "12.4"},
	}
	// One connection, as the real agent's heartbeats and watch take turns on one: a
	// leanConn, which costs this process, on the server's machine, less CPU than
	// http.Client.
	if a.conn, err = newLeanConn(f.srv.url, tlsCfg); err != nil {
		return nil, "", err
	}
	a.beatPath = "/api/v1/agents/" + url.PathEscape(name) + "/heartbeat"
	a.logsPath = "/api/v1/agents/" + url.PathEscape(name) + "/logs"
	a.logSize = map[api.TaskRef]int64{}
	for g := range 8 {
		a.inv.GPUs = append(a.inv.GPUs, api.GPU{Index: g, UUID: fmt.Sprintf("GPU-%s-%d", name, g), Model: "H100", MemoryMB: 81559, Healthy: true})
	}
	a.invHash = api.InventoryHash(a.inv)
	return a, resp.ClusterID, nil
}

func randomInstance() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// start sets every agent going. Their first heartbeats are spread over one interval, as
// a fleet's agents start at different times.
func (f *fleet) start(ctx context.Context, interval time.Duration, watch bool) {
	f.interval.Store(int64(interval))
	f.ctx, f.cancel = context.WithCancel(ctx)
	f.started = time.Now()
	for i, a := range f.agents {
		a.phase = float64(i) / float64(len(f.agents))
		f.wg.Go(a.loop)
		if watch {
			f.wg.Go(a.watch)
		}
	}
}

// stop ends every agent and closes their connections.
func (f *fleet) stop() {
	if f.cancel == nil {
		return
	}
	f.cancel()
	f.wg.Wait()
	for _, a := range f.agents {
		a.conn.Close()
	}
}

// err is the first refusal, if any.
func (f *fleet) err() error {
	f.errMu.Lock()
	defer f.errMu.Unlock()
	return f.refused
}

// loop is one agent's heartbeats, until the fleet stops.
//
// Each agent keeps its place in the interval: its beats fall at its phase plus whole
// intervals (slot), and a beat the round sent for it (fleet.round) stands for the one that
// fell due meanwhile. An agent held back by the round otherwise sent the moment it ended,
// all of them at once, and they kept beating together from then on: every 2 s a second
// of 10,000 heartbeats and then none, through the submit measurements that follow the
// round, rather than the steady 5,000 a second a fleet that started at different times
// sends. When the server names another interval, each agent takes its place in that one:
// beats spread over 2 s would otherwise stay bunched in 2 s of every 10. An agent woken
// to report new work at once goes back to its place after.
func (a *simAgent) loop() {
	ctx := a.f.ctx
	last := time.Duration(a.f.interval.Load())
	next := a.slot(time.Now(), last)
	again := false // the last answer gave new work: beat again at once
	for ctx.Err() == nil {
		woke := again
		if !again {
			t := time.NewTimer(time.Until(next))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-a.wake:
				woke = true
			case <-t.C:
			}
			t.Stop()
		}
		wait := time.Duration(a.f.interval.Load())
		a.f.gate.RLock()
		if !woke && a.f.beatInRound(a, next) {
			a.f.gate.RUnlock()
			for now := time.Now(); !next.After(now); {
				next = next.Add(wait)
			}
			continue
		}
		newWork, err := a.beat(ctx)
		if err == nil && !newWork {
			a.shipLogs(ctx)
		}
		a.f.gate.RUnlock()
		// The real agent retries at its interval after an error; so does this one. New
		// tasks are "started": it says so at once, as the agent does when a process
		// starts.
		again = err == nil && newWork && ctx.Err() == nil
		if cur := time.Duration(a.f.interval.Load()); cur != last {
			last = cur
			next = a.slot(time.Now(), cur)
			continue
		}
		if woke {
			// Back to its place, not an interval after the wake: the agents woken
			// together for new work would otherwise beat together from then on, and a
			// window shorter than the interval could see none of them.
			next = a.slot(time.Now(), wait)
		}
		for now := time.Now(); !next.After(now); {
			next = next.Add(wait)
		}
		if err == nil && !again {
			offerWatch(a.watchUntil, next.Add(-min(wait/10, time.Second)))
		}
	}
}

// slot is the first time after now the agent's beats fall at with interval every: its
// phase of the interval, plus whole intervals from when the fleet started.
func (a *simAgent) slot(now time.Time, every time.Duration) time.Time {
	first := a.f.started.Add(time.Duration(a.phase * float64(every)))
	if first.After(now) {
		return first
	}
	return first.Add((now.Sub(first)/every + 1) * every)
}

// beatInRound reports whether the last round sent a's beat due at slot: the slot fell due
// before the round ended, and the round beat a.
func (f *fleet) beatInRound(a *simAgent, slot time.Time) bool {
	start := f.roundStart.Load()
	return start != 0 && a.lastBeat.Load() >= start && slot.UnixNano() <= f.roundEnd.Load()
}

// beat sends one heartbeat and applies the answer; it reports whether the answer gave
// the node new tasks. A refusal (4xx) is recorded for the fleet: the suite fails on it.
func (a *simAgent) beat(ctx context.Context) (newWork bool, err error) {
	a.lastBeat.Store(time.Now().UnixNano())
	a.mu.Lock()
	hb := api.Heartbeat{Node: a.name, Inventory: a.inv, Tasks: make([]api.TaskStatus, 0, len(a.tasks)), AgentTime: time.Now().UTC(),
		ClusterID: a.f.clusterID, Instance: a.instance, PID: 1, Version: "bench", Synced: true, SyncEpoch: a.epoch}
	if a.heldHash != "" {
		hb.InventoryHash = a.invHash
		if a.heldHash == a.invHash {
			hb.Inventory = api.Inventory{}
		}
	}
	for _, st := range a.tasks {
		hb.Tasks = append(hb.Tasks, *st)
	}
	a.mu.Unlock()
	slices.SortFunc(hb.Tasks, func(x, y api.TaskStatus) int { return int(x.JobID - y.JobID) })

	start := time.Now()
	var resp beatAnswer
	ctx, cancel := context.WithTimeout(ctx, fleetHeartbeatTimeout)
	defer cancel()
	err = a.post(ctx, &hb, &resp)
	if err != nil {
		a.mu.Lock()
		a.heldHash = ""
		a.mu.Unlock()
		if a.f.ctx.Err() != nil {
			return false, err
		}
		a.f.beats.fail()
		var refused *refusedError
		if errors.As(err, &refused) {
			a.f.errMu.Lock()
			a.f.refused = cmp.Or(a.f.refused, fmt.Errorf("heartbeat of %s: %w", a.name, err))
			a.f.errMu.Unlock()
		}
		return false, err
	}
	a.f.beats.add(time.Since(start))
	if resp.HeartbeatSeconds > 0 {
		a.f.interval.Store(int64(resp.HeartbeatSeconds * float64(time.Second)))
	}

	now := time.Now().UTC()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.heldHash = resp.InventoryHash
	if !a.answered {
		a.answered = true
		a.f.beaten.Add(1)
	}
	a.epoch = resp.SyncEpoch
	for _, ref := range resp.Acked {
		if st, ok := a.tasks[api.TaskRef{JobID: ref.JobID, Attempt: ref.Attempt}]; ok && st.State.Terminal() {
			delete(a.tasks, api.TaskRef{JobID: ref.JobID, Attempt: ref.Attempt})
		}
	}
	listed := map[api.TaskRef]bool{}
	for _, t := range resp.Tasks {
		ref := api.TaskRef{JobID: t.JobID, Attempt: t.Attempt}
		listed[ref] = true
		st, ok := a.tasks[ref]
		switch {
		case !ok && !t.Stop:
			start := now
			a.tasks[ref] = &api.TaskStatus{JobID: t.JobID, Attempt: t.Attempt, State: api.StateRunning, PID: int(t.JobID), StartTime: &start}
			a.f.running.Add(1)
			newWork = true
		case !ok && t.Stop:
			// Told to stop what it never started: it ended before it began.
			end := now
			a.tasks[ref] = &api.TaskStatus{JobID: t.JobID, Attempt: t.Attempt, State: api.StateCancelled, Reason: t.StopReason, EndTime: &end}
			newWork = true
		case ok && t.Stop && !st.State.Terminal():
			// Stopped at once: nothing runs, so the grace is not needed.
			end := now
			st.State, st.Reason, st.EndTime = api.StateCancelled, t.StopReason, &end
			a.f.running.Add(-1)
			newWork = true
		}
	}
	// A task the server no longer lists is stopped and forgotten, as the real agent does.
	for ref, st := range a.tasks {
		if !listed[ref] && !st.State.Terminal() {
			delete(a.tasks, ref)
			a.f.running.Add(-1)
		}
	}
	return newWork, nil
}

// shipLogs sends, when the fleet's tasks print, what each running task printed since the
// last heartbeat, in one batch on the agent's connection, as rota agent does after each
// heartbeat, and takes each chunk's answer as the size to send from next.
func (a *simAgent) shipLogs(ctx context.Context) {
	line := a.f.logLine.Load()
	if line == nil {
		return
	}
	a.mu.Lock()
	batch := api.LogBatch{Chunks: make([]api.LogChunk, 0, len(a.tasks))}
	for ref, st := range a.tasks {
		if st.State == api.StateRunning {
			batch.Chunks = append(batch.Chunks, api.LogChunk{JobID: ref.JobID, Attempt: ref.Attempt, Offset: a.logSize[ref], Data: *line})
		}
	}
	a.mu.Unlock()
	if len(batch.Chunks) == 0 {
		return
	}
	body, err := json.Marshal(batch)
	if err != nil {
		a.f.logs.fail()
		return
	}
	ctx, cancel := context.WithTimeout(ctx, fleetHeartbeatTimeout)
	defer cancel()
	start := time.Now()
	var ans api.LogBatchAnswer
	a.connMu.Lock()
	status, data, err := a.conn.do(ctx, http.MethodPost, a.logsPath, body)
	if err == nil && status/100 != 2 {
		err = answerError(status, data)
	}
	if err == nil && (jsonv2.Unmarshal(data, &ans) != nil || len(ans.Chunks) != len(batch.Chunks)) {
		err = fmt.Errorf("log batch of %s: answer %.200s", a.name, data)
	}
	a.connMu.Unlock()
	if err != nil {
		if a.f.ctx.Err() == nil {
			a.f.logs.fail()
		}
		return
	}
	a.f.logs.add(time.Since(start))
	a.f.logChunks.Add(int64(len(ans.Chunks)))
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ack := range ans.Chunks {
		ref := api.TaskRef{JobID: ack.JobID, Attempt: ack.Attempt}
		switch {
		case ack.Status == http.StatusServiceUnavailable:
			a.f.logPutOff.Add(1)
			continue
		case ack.Status != 0:
			a.f.logRefused.Add(1)
			continue
		}
		if _, ok := a.tasks[ref]; ok {
			a.logSize[ref] = ack.Size
		}
	}
	for ref := range a.logSize {
		if _, ok := a.tasks[ref]; !ok {
			delete(a.logSize, ref)
		}
	}
}

// post sends heartbeat hb on the agent's own connection and decodes the answer into ans.
func (a *simAgent) post(ctx context.Context, hb *api.Heartbeat, ans *beatAnswer) error {
	buf := beatBodies.Get().(*bytes.Buffer)
	defer beatBodies.Put(buf)
	buf.Reset()
	if err := json.NewEncoder(buf).Encode(hb); err != nil {
		return err
	}
	a.connMu.Lock()
	defer a.connMu.Unlock()
	status, data, err := a.conn.do(ctx, http.MethodPost, a.beatPath, buf.Bytes())
	if err != nil {
		return err
	}
	if status/100 != 2 {
		return answerError(status, data)
	}
	return decodeAnswer(data, ans)
}

// beatBodies lends heartbeats the buffers they are encoded into.
var beatBodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// beatAnswer is the part of api.HeartbeatResponse a simulated agent acts on. The load
// generator shares the server's machine, so it decodes only that, and with the faster
// decoder the server uses (decodeFast in internal/server): decoding every task's
// command, environment and devices with encoding/json, as rota agent does, was the
// largest part of the generator's CPU, taken from the server it measures.
type beatAnswer struct {
	Tasks            []beatTask    `json:"tasks"`
	Acked            []api.TaskRef `json:"acked"`
	HeartbeatSeconds float64       `json:"heartbeat_s"`
	SyncEpoch        uint64        `json:"sync_epoch"`
	InventoryHash    string        `json:"inventory_hash"`
}

// beatTask is the part of api.Task a simulated agent acts on.
type beatTask struct {
	JobID      int64  `json:"job_id"`
	Attempt    int    `json:"attempt"`
	Stop       bool   `json:"stop"`
	StopReason string `json:"stop_reason"`
}

// watch holds the agent's long-poll between its heartbeats, in the window each answered
// heartbeat offers, and asks for a heartbeat when the node's desired state changes, as
// rota agent's watch does. While a watch is held it holds the fleet's gate, so a round
// waits for the watches to end and finds every connection free.
func (a *simAgent) watch() {
	ctx := a.f.ctx
	var version uint64
	for {
		var until time.Time
		select {
		case <-ctx.Done():
			return
		case until = <-a.watchUntil:
		}
		for left := time.Until(until); left >= fleetMinWatch && ctx.Err() == nil; left = time.Until(until) {
			a.f.gate.RLock()
			v, err := a.watchOnce(ctx, version, min(left, fleetWatchWait))
			a.f.gate.RUnlock()
			if err != nil {
				break
			}
			if v != version {
				version = v
				select {
				case a.wake <- struct{}{}:
				default:
				}
				break
			}
		}
	}
}

// offerWatch puts until in ch in place of any window not taken yet.
func offerWatch(ch chan time.Time, until time.Time) {
	select {
	case <-ch:
	default:
	}
	select {
	case ch <- until:
	default:
	}
}

func (a *simAgent) watchOnce(ctx context.Context, version uint64, wait time.Duration) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, wait+fleetHeartbeatTimeout)
	defer cancel()
	path := fmt.Sprintf("/api/v1/agents/%s/watch?version=%d&wait=%.3f", url.PathEscape(a.name), version, wait.Seconds())
	a.connMu.Lock()
	defer a.connMu.Unlock()
	status, data, err := a.conn.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return 0, err
	}
	if status != http.StatusOK {
		return 0, fmt.Errorf("watch: status %d", status)
	}
	var ans api.WatchAnswer
	if err := json.Unmarshal(data, &ans); err != nil {
		return 0, fmt.Errorf("watch: %w", err)
	}
	return ans.Version, nil
}

// round sends one heartbeat from every agent, concurrency at a time, with the agents' own
// heartbeats held back, and returns how long the round took and its latencies.
func (f *fleet) round(ctx context.Context, concurrency int) (time.Duration, []time.Duration, int, error) {
	f.gate.Lock()
	defer f.gate.Unlock()
	f.roundStart.Store(time.Now().UnixNano())
	defer func() { f.roundEnd.Store(time.Now().UnixNano()) }()
	f.beats.take() // what the agents sent before the round is not the round's
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(f.agents) || ctx.Err() != nil {
					return
				}
				f.agents[i].beat(ctx)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	d, errs := f.beats.take()
	return took, d, errs, ctx.Err()
}

// refusedError is an answer in the 4xx range: the server refuses the request, and sending
// it again would not help.
type refusedError struct {
	status int
	msg    string
}

func (e *refusedError) Error() string { return fmt.Sprintf("status %d: %s", e.status, e.msg) }

// postJSON posts v as JSON and decodes the answer into out: with the faster decoder for a
// heartbeat's answer (beatAnswer), else with encoding/json.
func postJSON(ctx context.Context, c *http.Client, u string, v, out any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return answerError(resp.StatusCode, data)
	}
	if ans, ok := out.(*beatAnswer); ok {
		return decodeAnswer(data, ans)
	}
	return json.Unmarshal(data, out)
}

// decodeAnswer decodes a heartbeat's answer into ans, skipping what beatAnswer leaves out.
func decodeAnswer(data []byte, ans *beatAnswer) error { return jsonv2.Unmarshal(data, ans) }

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
