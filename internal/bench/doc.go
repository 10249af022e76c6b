// Package bench is rota's benchmark suite, `rota bench`: the numbers to compare across
// commits, measured the same way every time and written as a table or as JSON.
//
// Three suites run by default:
//
//   - sched: one scheduling cycle (sched.ScheduleWith) on a generated snapshot of 1,000 or
//     10,000 nodes of 8 GPUs, half busy, with 10,000 or 100,000 pending jobs of 1 to 8 GPUs
//     in four queues; the "policy" variants add team quotas, gangs, borrowing and
//     preemptible running work, and urgent jobs that preempt. Also one job on an idle
//     1,000-node cluster, the cost of a cycle when nothing waits. Metrics: cycle-ms,
//     placements/s, placed/op, and the allocations of a cycle.
//   - e2e: a real server (internal/server) over a real SQLite file, answering HTTP on
//     loopback. "submit" is durable submissions per second from 8 concurrent clients (a
//     submit is acknowledged only after its commit). "submit-to-running" is the latency from
//     a submit's acknowledgement to the job being RUNNING, with the scheduling loop running
//     and simulated agents (goroutines that heartbeat every 5 ms and "run" each task for
//     50 ms) on nodes of 8 GPUs; the cycle interval is 20 ms, so the latency is mostly the
//     two intervals. Metrics: submits/s; p50-ms, p99-ms.
//   - sim: one replay (sim.Run, default policy) of a generated Philly-like trace on the
//     default Philly cluster (300 nodes of 8 GPUs) loaded to about 80%. Metrics: events/s,
//     jobs/s, plans/op.
//
// One suite runs only when named, for it takes minutes at full size:
//
//   - scale: rota's own binary (ScaleOptions.Binary) started as `rota server --tls` in a
//     process of its own, under a load generator in this process acting as N agents
//     (default 10,000 nodes of 8 GPUs) that join with join tokens and speak the agent
//     protocol over mutual TLS, with a queue of about 100,000 jobs of which 35,000 run.
//     It reports heartbeats/s and their latency (steady, and one full round), submit
//     latency and rate with 64 and 8 clients, the queue listing's latency, the server's
//     CPU (from /proc, while only heartbeats flow and with no traffic), its memory (VmRSS,
//     VmHWM) and the scheduling cycle (from /metrics). docs/scale.md says how to read it.
//     Its quick size is 200 nodes and 2,000 jobs.
//
// Quick mode (Options.Quick) runs smaller sizes for less time: 100 and 1,000 nodes with
// 1,000 and 10,000 pending jobs, 10 agents and 20 latency samples, a 3,000-job trace. It
// finishes in about five seconds; the tests run it. The sizes are part of each benchmark's
// name, so results compare only like with like. A full run takes about 70 seconds on two
// cores, most of it the 100,000-job replay.
//
// Each benchmark runs under measure, which picks the number of iterations as go test -bench
// does (rota's binary does not link package testing); custom metrics come from
// b.ReportMetric. The same numbers, by other code, come
// from the go test -bench targets of internal/sched, internal/server and internal/sim; this
// package exists so that a build of rota can measure itself and write JSON.
//
// bench may import any rota package but nothing imports it except cmd/rota. It must not
// assert durations: it measures and reports them.
package bench
