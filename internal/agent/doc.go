// Package agent is the node agent: it discovers the machine's GPUs (NVML, or a fake set for
// tests and demos), heartbeats to the server, and reconciles the attempts on its node with
// the desired state the server answers with. It owns the job contract on the node: the
// account and environment a job starts with, its process tree, the stop sequence (notice,
// signal, grace, kill), the time limit, the per-attempt log file and its shipping, the
// events file and the checkpoint directory.
//
// # Supervisors
//
// Each attempt runs under its own supervisor, `rota supervise ATTEMPT_DIR` (SuperviseMain),
// the role of containerd-shim or Nomad's executor. The agent starts it in a session of its
// own and does not wait on it: the supervisor is the job's parent and a child subreaper,
// starts the job in its own process group and, where the node has cgroup v2 and allows it,
// in a cgroup leaf of its own (otherwise the process group and the subreaper are how it
// tracks the job, and it says so in status.json). It enforces the time limit, carries out
// stops, reaps every descendant, and when the job's leader exits it kills whatever the job
// left and records the end durably. An agent that stops or restarts stops no job; a new
// agent re-adopts what it finds.
//
// The protocol is files in the attempt's directory, plus two signals:
//
//	task.json, attempt.json   written by the agent before it starts the supervisor
//	supervisor.pid            the supervisor's pid, once it takes signals
//	cgroup                    the attempt's cgroup leaf, before the job starts in it
//	job.json                  the job's leader pid and process group, start time, tracking
//	output.log                the job's stdout and stderr (and an interactive job's terminal
//	                          output)
//	stop.json                 written by the agent to stop the attempt ({"reason": ...}),
//	                          then SIGUSR1 to the supervisor; SIGTERM to the supervisor is a
//	                          stop with reason node_shutdown; SIGHUP and SIGINT are caught
//	                          and dropped (not ignored, which the job would inherit)
//	attach.sock               an interactive attempt's terminal (tty.go), which the agent
//	                          relays to the server (attach.go)
//	status.json               the end: state, reason, message, exit code, times, tracking
//	job/                      the job's own (its account's, 0700): its default working
//	                          directory, ROTA_EVENTS_FILE and ROTA_NOTICE_FILE
//
// The agent adds markers as the server acknowledges things (acked, stopped.json,
// stopped.acked, shipped, events.offset), so a restarted agent repeats no report and
// resends no event or log byte. A restarted agent reports an ended attempt until the
// server acknowledges it, follows a live supervisor (one whose process names the attempt),
// and ends FAILED node_lost an attempt whose supervisor died without a record, after
// killing whatever of it still runs.
//
// # Data directory and fencing
//
// The data directory (layout in layout.go) is held by one agent process at a time, by an
// flock on agent.lock. Attempts live under clusters/<cluster>/jobs/<job>/<attempt>/ and
// node-local checkpoints under clusters/<cluster>/checkpoints/<job>/, so a server on a fresh
// data directory, which reuses job IDs, never meets another cluster's attempts: those are
// stopped and reported in Heartbeat.Stopped once the node knows its cluster (from its join
// identity, or from a server's answer), and their logs never ship. An attempt of the node's
// cluster that the server does not list is stopped and reported too; until nothing runs
// that the last answer did not list, heartbeats say Synced false. Every heartbeat carries a
// random instance ID per agent process and the previous one, so the server can tell a
// restart from a second agent claiming the node; a 409 to the first heartbeat ends Run.
// Housekeeping removes what the server has and no longer needs keeping.
//
// # Dependencies
//
// The agent speaks to the server only through the wire types of internal/api over HTTP,
// with internal/auth for joining and mutual TLS. It must never import internal/server,
// internal/store, internal/sched or internal/cluster: a node runs nothing but this package
// and the API types, and the server may be on another version or unreachable. Jobs must
// keep running while the server is away, so nothing in the agent ties a job's life to a
// connection, to Run's context or to the agent process.
package agent
