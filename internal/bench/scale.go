package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/url"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// ScaleOptions size the scale suite. Zero values take the suite's defaults, which
// Options.Quick makes small.
type ScaleOptions struct {
	// Binary is the rota executable the suite runs as `rota server` (the running binary,
	// for `rota bench`). The suite cannot run without one.
	Binary string
	// Nodes is how many simulated agents join, each a node of 8 GPUs (default 10,000;
	// quick 200).
	Nodes int
	// Jobs is how many jobs the queue holds when the measurements start, counting those
	// the submit measurements add (default 104,000; quick 2,000).
	Jobs int
	// Running is how many of them run, filling every GPU (default 35,000; quick 700); the
	// rest wait.
	Running int
	// Heartbeat is the interval the server asks agents to heartbeat at (default 2s, the
	// server's own default).
	Heartbeat time.Duration
	// Window is how long each steady measurement lasts (default 20s; quick 2s).
	Window time.Duration
	// NoWatch leaves out the agents' watch long-polls, which they hold between heartbeats
	// on the heartbeats' connection. New work then reaches an agent with its next
	// heartbeat.
	NoWatch bool
	// ServerCPUProfile, if set, is a file the server writes a CPU profile of the whole
	// run to (rota server --cpu-profile).
	ServerCPUProfile string
	// ServerMemProfile, if set, is a file the server writes a heap profile to as it is
	// stopped (rota server --mem-profile).
	ServerMemProfile string
	// ServerMemoryLimit, if set, is the server's --memory-limit (its default, auto, where
	// not): a soft limit the Go runtime keeps the server's memory under by collecting
	// more often, at a cost in CPU the steady figures show.
	ServerMemoryLimit string
	// ServerMaxHeartbeats, if set, is the server's --max-heartbeats-per-second (its
	// default where not): 0 has every agent heartbeat at Heartbeat however many there are.
	ServerMaxHeartbeats string
}

// Sized fills in the defaults, the quick ones with quick, and checks that the sizes make
// sense, naming the flag at fault.
func (o ScaleOptions) Sized(quick bool) (ScaleOptions, error) {
	def := ScaleOptions{Nodes: 10_000, Jobs: 104_000, Running: 35_000, Heartbeat: 2 * time.Second, Window: 20 * time.Second}
	if quick {
		def = ScaleOptions{Nodes: 200, Jobs: 2_000, Running: 700, Heartbeat: 2 * time.Second, Window: 2 * time.Second}
	}
	if o.Nodes == 0 {
		o.Nodes = def.Nodes
	}
	if o.Jobs == 0 {
		o.Jobs = def.Jobs
	}
	if o.Running == 0 {
		o.Running = def.Running
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = def.Heartbeat
	}
	if o.Window == 0 {
		o.Window = def.Window
	}
	gpus := 8 * o.Nodes
	k64, k8 := submitCounts(quick)
	switch {
	case o.Binary == "":
		return o, errors.New("scale: no rota binary to run as the server")
	case o.Nodes < 1 || o.Nodes > 100_000:
		return o, fmt.Errorf("--nodes: must be between 1 and 100000, got %d", o.Nodes)
	case o.Running < (gpus+7)/8 || o.Running > gpus:
		return o, fmt.Errorf("--running: the running jobs fill the %d GPUs of %d nodes with jobs of 1 to 8 GPUs, so there must be between %d and %d of them, got %d",
			gpus, o.Nodes, (gpus+7)/8, gpus, o.Running)
	case o.Jobs < o.Running+k64+k8:
		return o, fmt.Errorf("--jobs: must be at least --running (%d) plus the %d jobs the submit measurements add, got %d", o.Running, k64+k8, o.Jobs)
	case o.Heartbeat < 100*time.Millisecond || o.Heartbeat > time.Minute:
		return o, fmt.Errorf("--heartbeat: must be between 100ms and 1m, got %v", o.Heartbeat)
	case o.Window < time.Second || o.Window > 10*time.Minute:
		return o, fmt.Errorf("--window: must be between 1s and 10m, got %v", o.Window)
	}
	return o, nil
}

// submitCounts is how many jobs the submit measurements add, with 64 and with 8 clients.
func submitCounts(quick bool) (k64, k8 int) {
	if quick {
		return 64 * 5, 8 * 10
	}
	// Several seconds of each at the rates a 2-core machine gives, so that a window
	// spans many scheduling cycles and group commits, not the luck of one: 1,600 submits
	// were a fraction of a second to two, and their rate swung by ten times from run to
	// run with whether a cycle fell in the window.
	return 64 * 150, 8 * 300
}

// runningMix is how many jobs of each size (in GPUs) fill gpus GPUs with exactly running
// jobs. It uses two neighbouring sizes among 1, 2, 4 and 8, which divide a node's 8 GPUs:
// a scheduler that packs nodes well leaves no GPU free, and one that does not shows it
// in the running count the suite reports.
func runningMix(gpus, running int) map[int]int {
	for _, sz := range [][2]int{{4, 8}, {2, 4}, {1, 2}} {
		small, big := sz[0], sz[1]
		// small*x + big*y = gpus, x + y = running.
		y := (gpus - small*running) / (big - small)
		x := running - y
		if x >= 0 && y >= 0 && small*x+big*y == gpus {
			return map[int]int{small: x, big: y}
		}
	}
	return map[int]int{1: running} // unreachable for the sizes Sized accepts
}

// arrayChunk is how many jobs one array submit creates while the queue is filled: one
// request and one commit each, so that filling 100,000 jobs takes seconds, not the
// submit measurement's minutes.
const arrayChunk = 1000

// stallTimeout ends a run whose server has made no progress for this long: a wait for
// nodes to register, or for jobs to start, that would otherwise never end.
const stallTimeout = 3 * time.Minute

// generatorGCPercent is the load generator's GOGC while the scale suite runs.
const generatorGCPercent = 400

// runScale runs the scale suite: a real server process under a simulated fleet. See
// doc.go for what it measures and docs/scale.md for how to read it.
func runScale(ctx context.Context, opts Options) (results []Result, err error) {
	o, err := opts.Scale.Sized(opts.Quick)
	if err != nil {
		return nil, err
	}
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	say := func(format string, args ...any) { fmt.Fprintf(progress, "bench: scale: "+format+"\n", args...) }
	// The load generator shares the machine with the server it measures, so it spends
	// memory to spare CPU: its collector runs a quarter as often as by default. Its heap
	// is the agents' connections and task lists, and its garbage the heartbeats' bodies.
	defer debug.SetGCPercent(debug.SetGCPercent(generatorGCPercent))
	size := fmt.Sprintf("%dnodes/%djobs", o.Nodes, o.Jobs)
	add := func(name string, n int, took time.Duration, metrics map[string]float64) {
		r := Result{Suite: "scale", Name: name + "/" + size, N: n, Metrics: metrics}
		if n > 0 {
			r.NsPerOp = float64(took.Nanoseconds()) / float64(n)
		}
		results = append(results, r)
		say("%s: %s", r.Name, formatMetrics(metrics))
	}
	// A connection per agent, on both ends, for its heartbeats and its watch in turn.
	if err := raiseFileLimit(uint64(o.Nodes+256), fmt.Sprintf("%d simulated agents, each with a connection, need", o.Nodes)); err != nil {
		return nil, err
	}

	say("starting %s server (heartbeat interval %s, watches %v)", o.Binary, o.Heartbeat, !o.NoWatch)
	srv, err := startServerProc(ctx, o)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	pid := srv.cmd.Process.Pid
	// Fail with what the server said if it died: that is the finding, not the symptom.
	defer func() {
		if err != nil {
			if e := srv.alive(); e != nil {
				err = fmt.Errorf("%w; %v", err, e)
			}
		}
	}()
	// The benchmark submits far faster than one person may.
	if err := srv.do(ctx, http.MethodPut, "/api/v1/config", nil, "limits:\n  submits_per_second: 1000000\n  submit_burst: 10000000\n  max_pending_per_user: 10000000\n", nil); err != nil {
		return nil, err
	}

	// 1. The server with nothing to do: no node, no job, no request.
	cpu, err := measureCPU(ctx, pid, min(o.Window, 5*time.Second))
	if err != nil {
		return nil, err
	}
	add("idle-empty", 0, 0, map[string]float64{"server-cpu-s/s": cpu})

	// 2. Every node joins, then registers with its first heartbeat.
	say("joining %d nodes, %d at a time", o.Nodes, joinConcurrency)
	joinStart := time.Now()
	fl, joins, err := joinFleet(ctx, srv, o.Nodes, progress)
	if err != nil {
		return nil, err
	}
	joinTook := time.Since(joinStart)
	regStart := time.Now()
	fl.start(ctx, o.Heartbeat, !o.NoWatch)
	defer fl.stop()
	// A server that cannot keep up answers some heartbeats late or never; the wait goes on
	// while more nodes get their first answer.
	lastBeaten, lastChange, lastSaid := int64(0), time.Now(), time.Now()
	if err := waitFor(ctx, srv, fl, "every node to register", func() (bool, error) {
		n := fl.beaten.Load()
		if n != lastBeaten {
			lastBeaten, lastChange = n, time.Now()
		}
		if time.Since(lastSaid) >= 15*time.Second {
			say("%d of %d nodes have had an answer to a heartbeat (%.0fs)", n, o.Nodes, time.Since(regStart).Seconds())
			lastSaid = time.Now()
		}
		if time.Since(lastChange) > stallTimeout {
			return false, fmt.Errorf("only %d of %d nodes had an answer to a heartbeat, and none more in %s", n, o.Nodes, stallTimeout)
		}
		return int(n) == o.Nodes, nil
	}); err != nil {
		return nil, err
	}
	add("join", len(joins), joinTook, map[string]float64{
		"joins/s": float64(len(joins)) / joinTook.Seconds(), "p50-ms": percentileMS(joins, .5), "p99-ms": percentileMS(joins, .99),
		"join-s": joinTook.Seconds(), "register-s": time.Since(regStart).Seconds(),
	})

	// 3. The queue: jobs that fill every GPU, then jobs that wait.
	k64, k8 := submitCounts(opts.Quick)
	fillStart := time.Now()
	mix := runningMix(8*o.Nodes, o.Running)
	say("submitting %d jobs that fill the cluster (%v by GPUs), waiting for them to run", o.Running, mix)
	for _, gpus := range []int{8, 4, 2, 1} { // the largest first: they are hardest to fit
		if err := submitArrays(ctx, srv, mix[gpus], gpus, "scale-run"); err != nil {
			return nil, err
		}
	}
	if err := waitSettled(ctx, srv, fl, o, say); err != nil {
		return nil, err
	}
	waiting := o.Jobs - o.Running - k64 - k8
	say("submitting %d jobs that wait", waiting)
	for i, gpus := range []int{1, 2, 4, 8} {
		n := waiting / 4
		if i < waiting%4 {
			n++
		}
		if err := submitArrays(ctx, srv, n, gpus, "scale-wait"); err != nil {
			return nil, err
		}
	}
	if err := waitSettled(ctx, srv, fl, o, say); err != nil {
		return nil, err
	}
	m, err := srv.scrape(ctx)
	if err != nil {
		return nil, err
	}
	add("fill", o.Jobs-k64-k8, time.Since(fillStart), map[string]float64{
		"running": m.sum("rota_jobs", "state", string(api.StateRunning)), "pending": m.sum("rota_pending_jobs"),
		"fill-s": time.Since(fillStart).Seconds(),
	})

	// 4. Heartbeats as they come: every agent at its interval, nothing else.
	say("heartbeats for %s", o.Window)
	steady, err := measureSteady(ctx, srv, fl, o.Window)
	if err != nil {
		return nil, err
	}
	// The agents beat at the interval the server names, which is longer than Heartbeat
	// where the nodes would send more than its --max-heartbeats-per-second.
	every := time.Duration(fl.interval.Load())
	steady["interval-s"] = every.Seconds()
	steady["target-heartbeats/s"] = float64(o.Nodes) / every.Seconds()
	beats := int(steady["n"])
	delete(steady, "n")
	add("heartbeat-steady", beats, o.Window, steady)

	// 4b. The same, with every running task printing a line or two each interval, which
	// each agent ships after its heartbeat in one batch for all its tasks.
	say("heartbeats with every running task's log for %s", o.Window)
	line := []byte(benchLogLine)
	fl.logs.take()
	fl.logChunks.Store(0)
	fl.logRefused.Store(0)
	fl.logPutOff.Store(0)
	fl.logLine.Store(&line)
	withLogs, err := measureSteady(ctx, srv, fl, o.Window)
	fl.logLine.Store(nil)
	if err != nil {
		return nil, err
	}
	batches, batchErrs := fl.logs.take()
	beats = int(withLogs["n"])
	delete(withLogs, "n")
	withLogs["log-batches/s"] = float64(len(batches)) / o.Window.Seconds()
	withLogs["log-chunks/s"] = float64(fl.logChunks.Load()) / o.Window.Seconds()
	withLogs["log-p50-ms"], withLogs["log-p99-ms"] = percentileMS(batches, .5), percentileMS(batches, .99)
	withLogs["log-errors"], withLogs["log-refused"] = float64(batchErrs), float64(fl.logRefused.Load())
	withLogs["log-put-off"] = float64(fl.logPutOff.Load())
	add("heartbeat-logs", beats, o.Window, withLogs)

	// 5. One heartbeat from every node, as fast as the server takes them.
	say("one round of %d heartbeats, 64 at a time", o.Nodes)
	took, lat, errs, err := fl.round(ctx, 64)
	if err != nil {
		return nil, err
	}
	if err := fl.err(); err != nil {
		return nil, err
	}
	add("heartbeat-round", len(lat), took, map[string]float64{
		"round-s": took.Seconds(), "heartbeats/s": float64(len(lat)) / took.Seconds(),
		"p50-ms": percentileMS(lat, .5), "p99-ms": percentileMS(lat, .99), "errors": float64(errs),
	})

	// 6. Submits with the full queue, the agents heartbeating meanwhile.
	// How many cycles ran meanwhile, and how many submits made none due (arrivals that
	// cannot start on the full cluster: see docs/scheduling.md), come from /metrics.
	for _, c := range []struct{ clients, n int }{{64, k64}, {8, k8}} {
		say("%d submits from %d clients", c.n, c.clients)
		before, err := srv.scrape(ctx)
		if err != nil {
			return nil, err
		}
		server, err := startCPU(pid)
		if err != nil {
			return nil, err
		}
		self, selfGCs := ownCPU(), ownGCs()
		idleBefore, err := machineIdleSeconds()
		if err != nil {
			return nil, err
		}
		took, lat, rates, err := measureSubmits(ctx, srv, c.clients, c.n)
		if err != nil {
			return nil, err
		}
		gen, genGCs := ownCPU()-self, ownGCs()-selfGCs
		idleAfter, err := machineIdleSeconds()
		if err != nil {
			return nil, err
		}
		cpu, err := server.rate()
		if err != nil {
			return nil, err
		}
		after, err := srv.scrape(ctx)
		if err != nil {
			return nil, err
		}
		cyc := after.histogram("rota_scheduler_cycle_duration_seconds").since(before.histogram("rota_scheduler_cycle_duration_seconds"))
		// How many submits each group commit carried: one transaction and one disk sync
		// for all of them, so the fewer the commits, the less each submit costs.
		groups := after.histogram("rota_submit_group_size").since(before.histogram("rota_submit_group_size"))
		// The store's commits meanwhile (the groups', and the few of the heartbeats and
		// the cycles), each from its start until it is written and, for a group, the
		// server's lock is taken again to bring memory up to date.
		commits := after.histogram("rota_store_commit_duration_seconds").since(before.histogram("rota_store_commit_duration_seconds"))
		add(fmt.Sprintf("submit-%dclients", c.clients), len(lat), took, map[string]float64{
			"submits/s":      float64(len(lat)) / took.Seconds(),
			"median-third/s": rates[len(rates)/2], "slowest-third/s": rates[0], "fastest-third/s": rates[len(rates)-1],
			"p50-ms": percentileMS(lat, .5), "p99-ms": percentileMS(lat, .99),
			"cycles": cyc.n, "deferred": after.sum("rota_scheduler_arrivals_deferred_total") - before.sum("rota_scheduler_arrivals_deferred_total"),
			"group-commits": groups.n, "submits/group": groups.mean(),
			// The share of the stream some commit was under way (group commits run one at
			// a time): near 1 when the commits, not the requests, set the pace.
			"commit-mean-ms": commits.mean() * 1000, "commit-busy-s/s": commits.sum / took.Seconds(),
			// What each submit cost the two processes that share the machine: the
			// server (its heartbeats meanwhile included) and this one, the clients and
			// the agents together.
			"server-cpu-s/s": cpu, "generator-cpu-s/s": gen / took.Seconds(),
			"server-cpu-us/submit": cpu * took.Seconds() / float64(len(lat)) * 1e6, "generator-cpu-us/submit": gen / float64(len(lat)) * 1e6,
			// The CPU no process used: near 0 when the stream is held back by the CPU,
			// well above it when the submits wait on something else (a lock, the disk).
			"machine-idle-s/s": (idleAfter - idleBefore) / took.Seconds(),
			// The garbage collections of each process meanwhile: on a small machine, one
			// takes the stream's rate down by a third or more, so runs of one build differ
			// by whether one fell in the stream.
			"server-gcs":    after.sum("go_gc_duration_seconds_count") - before.sum("go_gc_duration_seconds_count"),
			"generator-gcs": genGCs,
		})
	}

	// 7. What `rota queue` asks for: the first page, then every page.
	say("listing the queue")
	q, err := measureQueue(ctx, srv, opts.Quick)
	if err != nil {
		return nil, err
	}
	cliSamples := 20
	if opts.Quick {
		cliSamples = 5
	}
	cli, err := measureQueueCLI(ctx, o.Binary, srv, cliSamples)
	if err != nil {
		return nil, err
	}
	maps.Copy(q, cli)
	samples, mean := int(q["n"]), time.Duration(q["first-page-mean-ms"]*float64(time.Millisecond))
	delete(q, "n")
	delete(q, "first-page-mean-ms")
	add("queue", samples, time.Duration(samples)*mean, q)

	// What `rota top` asks for at each refresh: a glance with a screen's worth of nodes.
	say("glancing at the cluster")
	top, err := measureTop(ctx, srv, opts.Quick)
	if err != nil {
		return nil, err
	}
	samples, mean = int(top["n"]), time.Duration(top["mean-ms"]*float64(time.Millisecond))
	delete(top, "n")
	delete(top, "mean-ms")
	add("top", samples, time.Duration(samples)*mean, top)

	// 8. The server's memory with everything in it, and the cycle over the whole run.
	rss, hwm, err := memoryMB(pid)
	if err != nil {
		return nil, err
	}
	if m, err = srv.scrape(ctx); err != nil {
		return nil, err
	}
	cyc := m.histogram("rota_scheduler_cycle_duration_seconds")
	add("server", 0, 0, map[string]float64{
		"rss-mb": rss, "hwm-mb": hwm, "nodes": m.sum("rota_nodes"),
		"running": m.sum("rota_jobs", "state", string(api.StateRunning)), "pending": m.sum("rota_pending_jobs"),
		"cycles": cyc.n, "cycle-mean-ms": cyc.mean() * 1000, "cycle-p99-bound-ms": cyc.reportBound(.99) * 1000,
		// What the RSS is made of, as the Go runtime counts it: the heap's spans in use,
		// the size it lets the heap grow to before the next collection (about twice what
		// the last one found alive), and goroutine stacks, with how many goroutines
		// hold them (about one per open connection).
		"heap-inuse-mb": m.sum("go_memstats_heap_inuse_bytes") / mb, "heap-goal-mb": m.sum("go_memstats_next_gc_bytes") / mb,
		"stacks-mb": m.sum("go_memstats_stack_inuse_bytes") / mb, "goroutines": m.sum("go_goroutines"),
		// The soft memory limit the server runs under (--server-memory-limit, or its
		// cgroup's), 0 for none.
		"memory-limit-mb": memoryLimitMB(m.sum("go_gc_gomemlimit_bytes")),
		// The collector over the whole run, from the runtime's own estimates of where
		// its processors' time went (go_cpu_classes_*, updated at each collection): its
		// share of the time they were busy, and the share of its marking done on
		// processors that had nothing else to run.
		"gc-cycles":          m.sum("go_gc_duration_seconds_count"),
		"gc-cpu-share":       share(m.sum("go_cpu_classes_gc_total_cpu_seconds_total"), m.sum("go_cpu_classes_total_cpu_seconds_total")-m.sum("go_cpu_classes_idle_cpu_seconds_total")),
		"gc-idle-mark-share": share(m.sum("go_cpu_classes_gc_mark_idle_cpu_seconds_total"), m.sum("go_cpu_classes_gc_total_cpu_seconds_total")),
	})

	// 9. The loaded server with no request at all: the agents gone (for less time than a
	// node takes to be declared not ready, so nothing changes).
	if err := fl.err(); err != nil {
		return nil, err
	}
	fl.stop()
	before, err := srv.scrape(ctx)
	if err != nil {
		return nil, err
	}
	window := min(o.Window, 10*time.Second)
	say("no traffic for %s", window)
	cpu, err = measureCPU(ctx, pid, window)
	if err != nil {
		return nil, err
	}
	after, err := srv.scrape(ctx)
	if err != nil {
		return nil, err
	}
	cyc = after.histogram("rota_scheduler_cycle_duration_seconds").since(before.histogram("rota_scheduler_cycle_duration_seconds"))
	com := after.histogram("rota_store_commit_duration_seconds").since(before.histogram("rota_store_commit_duration_seconds"))
	add("idle-loaded", 0, 0, map[string]float64{
		"server-cpu-s/s": cpu, "cycles/s": cyc.n / window.Seconds(), "cycle-mean-ms": cyc.mean() * 1000,
		"commits/s": com.n / window.Seconds(), "commit-mean-ms": com.mean() * 1000,
	})
	return results, srv.alive()
}

// benchLogLine is what each running task prints each heartbeat interval in the suite's
// heartbeat-logs phase: a training loop's progress line or two.
const benchLogLine = "step 12000 | loss 2.3141 | lr 3.00e-04 | grad_norm 0.871 | tokens/s 412345 | mfu 41.2%\n" +
	"step 12010 | loss 2.3127 | lr 3.00e-04 | grad_norm 0.864 | tokens/s 412901 | mfu 41.3%\n"

// measureCPU is the server's CPU seconds per wall second over d.
func measureCPU(ctx context.Context, pid int, d time.Duration) (float64, error) {
	m, err := startCPU(pid)
	if err != nil {
		return 0, err
	}
	if !sleepCtx(ctx, d) {
		return 0, ctx.Err()
	}
	return m.rate()
}

// measureSteady watches the fleet heartbeat on its own for d: the rate and latency of
// heartbeats, the CPU of the server and of this process, and the scheduling cycles.
func measureSteady(ctx context.Context, srv *serverProc, fl *fleet, d time.Duration) (map[string]float64, error) {
	before, err := srv.scrape(ctx)
	if err != nil {
		return nil, err
	}
	fl.beats.take()
	server, err := startCPU(srv.cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	self, start := ownCPU(), time.Now()
	if !sleepCtx(ctx, d) {
		return nil, ctx.Err()
	}
	lat, errs := fl.beats.take()
	took := time.Since(start)
	gen := (ownCPU() - self) / took.Seconds()
	cpu, err := server.rate()
	if err != nil {
		return nil, err
	}
	after, err := srv.scrape(ctx)
	if err != nil {
		return nil, err
	}
	if err := fl.err(); err != nil {
		return nil, err
	}
	cyc := after.histogram("rota_scheduler_cycle_duration_seconds").since(before.histogram("rota_scheduler_cycle_duration_seconds"))
	com := after.histogram("rota_store_commit_duration_seconds").since(before.histogram("rota_store_commit_duration_seconds"))
	// The server's own view of a heartbeat: from its headers read to its answer handed
	// to the connection's buffer, the wait for a goroutine to run it included; without
	// reading the headers, sending the answer, or the generator's side.
	const route = "/api/v1/agents/{node}/heartbeat"
	hb := after.histogram("rota_api_request_duration_seconds", "route", route).since(before.histogram("rota_api_request_duration_seconds", "route", route))
	return map[string]float64{
		"n": float64(len(lat)), "heartbeats/s": float64(len(lat)) / took.Seconds(),
		"p50-ms": percentileMS(lat, .5), "p99-ms": percentileMS(lat, .99), "errors": float64(errs),
		"handler-p50-bound-ms": hb.reportBound(.5) * 1000, "handler-p99-bound-ms": hb.reportBound(.99) * 1000,
		"server-cpu-s/s": cpu, "generator-cpu-s/s": gen,
		"cycles/s": cyc.n / took.Seconds(), "cycle-mean-ms": cyc.mean() * 1000, "cycle-p99-bound-ms": cyc.reportBound(.99) * 1000,
		"commits/s": com.n / took.Seconds(), "commit-mean-ms": com.mean() * 1000,
	}, nil
}

// ownCPU is this process's CPU seconds, user and system.
func ownCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// ownGCs is how many garbage collections this process has completed.
func ownGCs() float64 {
	sample := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return float64(sample[0].Value.Uint64())
}

// submitArrays submits n jobs of gpus GPUs each as arrays of up to arrayChunk jobs.
func submitArrays(ctx context.Context, srv *serverProc, n, gpus int, name string) error {
	for n > 0 {
		k := min(n, arrayChunk)
		spec := api.JobSpec{Name: fmt.Sprintf("%s-%dgpu", name, gpus), User: "bench", Command: []string{"bench-task"}, GPUs: gpus,
			Array: fmt.Sprintf("0-%d", k-1)}
		if err := srv.do(ctx, http.MethodPost, "/api/v1/jobs", idempotent(), spec, nil); err != nil {
			return fmt.Errorf("fill the queue: %w", err)
		}
		n -= k
	}
	return nil
}

func idempotent() http.Header {
	return http.Header{"Idempotency-Key": {api.NewIdempotencyKey(time.Now())}}
}

// waitSettled waits until the scheduler has placed what it can and the agents run it: no
// job assigned and not yet running, and nothing placed for a few cycles. Jobs that do not
// fit stay pending; that is the point of them.
func waitSettled(ctx context.Context, srv *serverProc, fl *fleet, o ScaleOptions, say func(string, ...any)) error {
	start, lastChange, lastRunning, lastCycles := time.Now(), time.Now(), -1.0, 0.0
	// Quiet for a few cycles, and for a heartbeat interval, after the last change.
	quiet := max(3*time.Second, 2*o.Heartbeat)
	lastSaid := time.Now()
	for {
		if !sleepCtx(ctx, time.Second) {
			return ctx.Err()
		}
		if err := errors.Join(fl.err(), srv.alive()); err != nil {
			return err
		}
		m, err := srv.scrape(ctx)
		if err != nil {
			return err
		}
		running, assigned, pending := m.sum("rota_jobs", "state", string(api.StateRunning)), m.sum("rota_jobs", "state", string(api.StateAssigned)), m.sum("rota_pending_jobs")
		cycles := m.histogram("rota_scheduler_cycle_duration_seconds").n
		if running != lastRunning || assigned > 0 {
			lastRunning, lastChange, lastCycles = running, time.Now(), cycles
		}
		if time.Since(lastSaid) >= 15*time.Second {
			say("%.0f running, %.0f assigned, %.0f pending after %.0fs", running, assigned, pending, time.Since(start).Seconds())
			lastSaid = time.Now()
		}
		if assigned == 0 && (pending == 0 || time.Since(lastChange) >= quiet && cycles >= lastCycles+3) {
			return nil
		}
		if time.Since(lastChange) > stallTimeout {
			return fmt.Errorf("no job started or ended in %s: %.0f running, %.0f assigned, %.0f pending", stallTimeout, running, assigned, pending)
		}
	}
}

// waitFor polls cond every 50ms while the fleet and the server are well.
func waitFor(ctx context.Context, srv *serverProc, fl *fleet, what string, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if err := errors.Join(fl.err(), srv.alive()); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// submitParts is how many parts measureSubmits splits its stream of submits into, by
// the order they completed in, to give the rate of each: a stream of a few seconds on a
// 2-core machine halves its rate when a collection of either process falls in it, and
// the median of three parts does not move with one.
const submitParts = 3

// measureSubmits sends n submits from clients clients at once, each over its own
// connection with the admin token and an idempotency key, as `rota submit` does; each
// answer comes after the job's commit. Each client makes its connection before the
// stream starts, as a client that keeps submitting holds one. It returns the time the
// stream took, every submit's latency, sorted, and the rates of its submitParts parts,
// sorted: part k runs from the completion of the (k*n/3)-th submit to that of the
// ((k+1)*n/3)-th, so one stream, not windows that each wait for their slowest submit.
func measureSubmits(ctx context.Context, srv *serverProc, clients, n int) (time.Duration, []time.Duration, []float64, error) {
	bearer := "Bearer " + srv.token
	cs := make([]*leanConn, clients)
	for i := range cs {
		c, err := srv.newLeanConn()
		if err != nil {
			return 0, nil, nil, err
		}
		defer c.Close()
		if status, data, err := c.do(ctx, http.MethodGet, "/healthz", nil); err != nil || status != http.StatusOK {
			return 0, nil, nil, cmp.Or(err, answerError(status, data))
		}
		cs[i] = c
	}
	body, err := json.Marshal(api.JobSpec{Name: "scale-submit", User: "bench", Command: []string{"bench-task"}, GPUs: 1})
	if err != nil {
		return 0, nil, nil, err
	}
	var (
		next  atomic.Int64
		lat   latencies
		done  latencies // when each submit completed, from the start
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	start := time.Now()
	for _, c := range cs {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				t0 := time.Now()
				status, data, err := c.do(ctx, http.MethodPost, "/api/v1/jobs", body,
					"Authorization", bearer, "Idempotency-Key", api.NewIdempotencyKey(t0))
				if err == nil && status/100 != 2 {
					err = fmt.Errorf("submit: %w", answerError(status, data))
				}
				if err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
					return
				}
				lat.add(time.Since(t0))
				done.add(time.Since(start))
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if first != nil {
		return 0, nil, nil, first
	}
	d, _ := lat.take()
	at, _ := done.take()
	return took, d, partRates(at, n), nil
}

// partRates is the rate of each of submitParts parts of a stream of n submits, given when
// each completed (from the stream's start), sorted; the rates come sorted too.
func partRates(at []time.Duration, n int) []float64 {
	rates := make([]float64, 0, submitParts)
	var from time.Duration
	for k := range submitParts {
		lo, hi := k*n/submitParts, (k+1)*n/submitParts
		if hi == lo {
			continue
		}
		to := at[hi-1]
		rates = append(rates, float64(hi-lo)/max(to-from, time.Microsecond).Seconds())
		from = to
	}
	slices.Sort(rates)
	return rates
}

// timeGets times GET path samples times (50, or 10 when quick), decoding each answer into
// out, and returns the latencies, sorted, and their mean.
func timeGets(ctx context.Context, srv *serverProc, path string, quick bool, out any) ([]time.Duration, float64, error) {
	samples := 50
	if quick {
		samples = 10
	}
	lat := make([]time.Duration, 0, samples)
	var total time.Duration
	for range samples {
		t0 := time.Now()
		if err := srv.do(ctx, http.MethodGet, path, nil, nil, out); err != nil {
			return nil, 0, err
		}
		d := time.Since(t0)
		lat, total = append(lat, d), total+d
	}
	slices.Sort(lat)
	return lat, ms(total) / float64(samples), nil
}

// measureTop times GET /api/v1/top as `rota top` sends it on a screen of 50 lines, and
// checks that its counts cover the whole cluster.
func measureTop(ctx context.Context, srv *serverProc, quick bool) (map[string]float64, error) {
	var top api.Top
	lat, mean, err := timeGets(ctx, srv, "/api/v1/top?nodes=50&jobs=10", quick, &top)
	if err != nil {
		return nil, err
	}
	if len(top.Nodes) != min(50, top.Total.Nodes) || top.Running == 0 || top.Pending == 0 {
		return nil, fmt.Errorf("GET /api/v1/top lists %d nodes of %d, counts %d running and %d pending", len(top.Nodes), top.Total.Nodes, top.Running, top.Pending)
	}
	return map[string]float64{
		"n": float64(len(lat)), "mean-ms": mean, "p50-ms": percentileMS(lat, .5), "p99-ms": percentileMS(lat, .99),
		"nodes": float64(top.Total.Nodes), "running": float64(top.Running), "pending": float64(top.Pending),
	}, nil
}

// measureQueue times GET /api/v1/jobs as `rota queue` sends it: the first page, some
// times over, then one walk through every page.
func measureQueue(ctx context.Context, srv *serverProc, quick bool) (map[string]float64, error) {
	var first api.JobList
	sorted, mean, err := timeGets(ctx, srv, "/api/v1/jobs", quick, &first)
	if err != nil {
		return nil, err
	}
	perPage := len(first.Jobs)
	start, pages, after := time.Now(), 0, ""
	for {
		var list api.JobList
		path := "/api/v1/jobs"
		if after != "" {
			path += "?after=" + url.QueryEscape(after)
		}
		if err := srv.do(ctx, http.MethodGet, path, nil, nil, &list); err != nil {
			return nil, err
		}
		pages++
		if list.Next == "" {
			break
		}
		after = list.Next
	}
	return map[string]float64{
		"n": float64(len(sorted)), "first-page-mean-ms": mean,
		"first-page-p50-ms": percentileMS(sorted, .5), "first-page-p99-ms": percentileMS(sorted, .99), "jobs/page": float64(perPage),
		"all-pages-s": time.Since(start).Seconds(), "pages": float64(pages),
	}, nil
}

// memoryLimitMB is the Go runtime's memory limit in MB, 0 for none (math.MaxInt64 bytes,
// which the gauge shows for none).
func memoryLimitMB(bytes float64) float64 {
	if bytes <= 0 || bytes >= math.MaxInt64 {
		return 0
	}
	return bytes / mb
}

// share is part/whole, or 0 where there is no whole (no collection yet).
func share(part, whole float64) float64 {
	if whole <= 0 {
		return 0
	}
	return part / whole
}
