package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/rotahq/rota/internal/api"
)

// The help topics: what a man page would hold and no verb's -h has room for. Their
// tables are kept complete by help_test.go, against the api package's constants and
// JobSpec's fields.

const helpUsage = `rota help [TOPIC | VERB]

Without a topic, lists the topics. rota help VERB is rota VERB -h.`

type helpTopic struct {
	name, summary string
	write         func(io.Writer)
}

var helpTopics = []helpTopic{
	{"job", "what a job gets and says: environment, notice and events files, exit codes and reasons", writeJobHelp},
	{"spec", "the job spec file of rota submit -f: every field", writeSpecHelp},
	{"errors", "rota's own exit codes, and its errors as JSON under -o json", writeErrorsHelp},
}

func runHelp(ctx context.Context, cfg Config, args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(cfg.Stdout, "Help topics (rota help TOPIC):")
		tw := newTable(cfg.Stdout)
		for _, t := range helpTopics {
			fmt.Fprintf(tw, "  %s\t%s\n", t.name, t.summary)
		}
		tw.Flush()
		fmt.Fprintln(cfg.Stdout, "\nrota -h lists the verbs; rota help VERB (or rota VERB -h) gives a verb's flags.")
		return ExitOK
	}
	switch args[0] {
	case "-h", "-help", "--help":
		fmt.Fprintf(cfg.Stderr, "usage: %s\n", helpUsage)
		return ExitOK
	}
	if len(args) > 1 {
		return cfg.usageError("help", "want one topic or verb, got %q", strings.Join(args, " "))
	}
	for _, t := range helpTopics {
		if t.name == args[0] {
			t.write(cfg.Stdout)
			return ExitOK
		}
	}
	for _, v := range verbs {
		if v.Name == args[0] && v.Name != "help" {
			return v.run(ctx, cfg, []string{"-h"})
		}
	}
	names := make([]string, len(helpTopics))
	for i, t := range helpTopics {
		names[i] = t.name
	}
	return cfg.usageError("help", "unknown topic %q: want %s, or a verb", args[0], orList(names))
}

// jobEnv is the job contract's environment, in the order a person reads it.
var jobEnv = []struct{ name, what string }{
	{api.EnvJobID, "the job's ID"},
	{api.EnvAttempt, "the attempt's number, 1 for the first placement; a requeue or retry adds one"},
	{api.EnvQueue, "the queue the job runs in"},
	{api.EnvTimeLimitEnd, "when the time limit ends, RFC 3339; unset without a limit"},
	{api.EnvCUDAVisibleDevices, "the job's GPUs on this node; it sees no others"},
	{api.EnvCheckpointDir, "a directory kept across the job's attempts: save checkpoints here and resume from them"},
	{api.EnvEventsFile, "a file the job appends JSON lines to; see Events below"},
	{api.EnvNoticeFile, "a file rota writes before it stops the job, or to warn it; see Notices below"},
	{api.EnvArrayJobID, "in an array element: the array's ID (its first job's)"},
	{api.EnvArrayIndex, "in an array element: its index"},
	{api.EnvNodeList, "the nodes of the attempt, comma-separated, rank 0 first"},
	{api.EnvMasterAddr, "multi-node: the host of rank 0, for torchrun's rendezvous"},
	{api.EnvMasterPort, "multi-node: a port for the rendezvous, derived from the job's ID"},
	{api.EnvNNodes, "multi-node: the number of nodes"},
	{api.EnvNodeRank, "multi-node: this node's rank, from 0"},
	{api.EnvNProcPerNode, "multi-node: the GPUs on this node, one process each"},
	{api.EnvWorldSize, "multi-node: the GPUs of all nodes"},
}

// endReasons are the reasons an attempt ends with, as rota show and the API give them.
var endReasons = []struct{ name, what string }{
	{api.ReasonExitCode, "the job exited by itself; its exit code says how"},
	{api.ReasonOOM, "it went over its memory (--mem) and was killed; rota show gives its peak"},
	{api.ReasonGPUError, "one of its GPUs failed (a critical XID or uncorrectable ECC errors)"},
	{api.ReasonGPUMemoryExceeded, "it shared a GPU and held more GPU memory than its slice (--gpu-mem, --gpus 0.5)"},
	{api.ReasonNodeLost, "its node stopped answering, or rebooted: the outcome is unknown"},
	{api.ReasonNodeShutdown, "its node was shutting down and stopped its jobs"},
	{api.ReasonTimeout, "it reached its time limit (state TIMEOUT)"},
	{api.ReasonIdle, "it held GPUs without using them, in a queue that stops such jobs"},
	{api.ReasonPreempted, "a job of higher priority needed its GPUs; it is requeued"},
	{api.ReasonCancelled, "rota cancel (state CANCELLED)"},
	{api.ReasonStartError, "it could not start: no such command, working directory or user, say"},
	{api.ReasonRankFailed, "multi-node: another rank failed, so this one was stopped"},
	{api.ReasonNotStarted, "the agent of its node did not start it in time; it is requeued"},
	{api.ReasonNodeError, "its node could not start it (its disk full or failing, or the supervisor would not start); it is requeued, and the node takes no new work"},
}

func writeJobHelp(w io.Writer) {
	fmt.Fprint(w, `rota help job: what a job gets and what it may say

A job runs its command under its user's Unix account, in its working directory (by
default the directory it was submitted from), under a supervisor that outlives the
agent. Its stdout and stderr go to a log per attempt that rota logs prints, and its
stdin is /dev/null. An interactive job (rota run from a terminal, spec tty: true) has a
pseudo-terminal on its node as stdin, stdout and stderr and controlling terminal instead,
relayed to the terminal of rota run or rota attach; it runs as its user with its cgroup
and limits all the same, and what it writes still goes to its log.

Environment
  Besides the variables of its spec (--env, env:), every job is started with:
`)
	tw := newTable(w)
	for _, e := range jobEnv {
		fmt.Fprintf(tw, "  %s\t%s\n", e.name, e.what)
	}
	tw.Flush()
	fmt.Fprintf(w, `  A spec may not set ROTA_* or %s itself.

Events (%s)
  Append one JSON object per line. A line with a "checkpoint" key, e.g.
    {"checkpoint": {"step": 1200}}
  is recorded as the job's last checkpoint (rota show): when a job must be preempted,
  the one that loses least work goes first. Other lines (progress, say) are not
  stored. A line that is not a JSON object is skipped; lines over 64 KiB too.

Notices (%s)
  Before rota stops a job (time limit, preemption, cancel, node drain) it writes
    {"reason": "...", "deadline": "RFC 3339", "checkpoint_dir": "...",
     "checkpoints_shared": true|false, "checkpoints": "..."}
  then sends the job's signal (--signal, default SIGTERM), waits the grace period
  (--grace) and kills everything the attempt started. Read the file on the signal,
  save a checkpoint before the deadline and exit. "checkpoints_shared": false says the
  next attempt may run on another node without this node's checkpoint directory.
  A job holding GPUs it does not use is warned the same way:
    {"reason": "idle", "message": "..."}
  and the warning is taken back once it uses them again.

Exit codes
  The job's exit code is its first process's; killed by a signal, 128 plus the
  signal's number (137 for SIGKILL, 143 for SIGTERM). 0 is SUCCEEDED, anything else
  FAILED, unless rota stopped it. --retries and --restart-policy say whether a failed
  attempt is followed by another; node loss and preemption never count against them.

Reasons an attempt ends with (rota show, -o json "reason")
`, api.EnvCUDAVisibleDevices, api.EnvEventsFile, api.EnvNoticeFile)
	tw = newTable(w)
	for _, r := range endReasons {
		fmt.Fprintf(tw, "  %s\t%s\n", r.name, r.what)
	}
	tw.Flush()
	fmt.Fprint(w, `
A job that has not started says why in rota why.
`)
}

// specFields describes every field of a job spec, by its JSON name (the YAML key of a
// spec file is the same).
var specFields = []struct{ name, what string }{
	{"command", "the command and its arguments, a list: [python, train.py, --lr, \"0.1\"] (required)"},
	{"name", "the job's name"},
	{"queue", "the queue to submit to (default: the server's)"},
	{"team", "the team the job is accounted to"},
	{"project", "the project of the team the job is accounted to: its quotas and GPU-hour budget apply as well as the team's"},
	{"user", "submit on behalf of this user (admins only)"},
	{"workdir", "the working directory (default: the one rota submit ran in)"},
	{"env", "environment variables, a map: {LR: \"0.1\"}"},
	{"gpus", "the total number of whole GPUs"},
	{"gpus_per_node", "GPUs on each node of a multi-node job"},
	{"nodes", "the number of nodes (default 1); gpus is nodes times gpus_per_node"},
	{"gpu_model", "the GPU model the job needs, or several it accepts: A100,H100"},
	{"gpu_share", "a share of one GPU's memory and compute, below 1: 0.5 (on a pool that allows sharing)"},
	{"gpu_memory_mb", "a slice of one GPU's memory, in megabytes (on a pool that allows sharing)"},
	{"cpus", "CPUs (default: the server's)"},
	{"memory_mb", "memory in megabytes"},
	{"time_limit_s", "the time limit in seconds; 0 means the queue's default"},
	{"signal", "the signal sent first when the job must stop (default SIGTERM)"},
	{"grace_s", "seconds from that signal to the kill"},
	{"after", "job IDs that must have ended, in any state, before this one starts"},
	{"after_ok", "job IDs that must have succeeded; the job fails if one does not"},
	{"array", "one job per index: 0-99, 0-99%8 (at most 8 at once), 1,3,5, 0-10:2"},
	{"hold", "true submits the job held, until rota release"},
	{"nice", "lowers the job's priority score by this many points"},
	{"restart_policy", "never, on-failure or always (default: the queue's)"},
	{"retries", "failed attempts followed by another under the restart policy"},
	{"notify", "webhooks told of the job's events: [{url: URL, events: [started, ended]}]"},
	{"image", "run in this OCI container image through the node's container runtime"},
	{"deadline", "when the job must have finished (or started), RFC 3339: 2026-12-01T18:00:00Z"},
	{"deadline_kind", "finish (default: start + time limit by the deadline) or start (start by it)"},
	{"tty", "run on a pseudo-terminal that rota attach connects to (rota run sets it)"},
	{"cuda", "the CUDA versions the job's nodes must report, a range: \">=12.4,<13\" (quoted in YAML)"},
	{"driver", "the driver versions the job's nodes must report, a range: \">=550\""},
}

func writeSpecHelp(w io.Writer) {
	fmt.Fprint(w, `rota help spec: the job spec

rota submit -f FILE reads a job spec in YAML; the API (POST /api/v1/jobs) takes the same
fields in JSON. Flags given to rota submit override the file's fields, and a command
after -- overrides its command. An unknown field is an error naming it.

  command: [python, train.py]
  gpus: 8
  time_limit_s: 14400
  env: {LR: "0.1"}

Fields:
`)
	tw := newTable(w)
	for _, f := range specFields {
		fmt.Fprintf(tw, "  %s\t%s\n", f.name, f.what)
	}
	tw.Flush()
}

func writeErrorsHelp(w io.Writer) {
	fmt.Fprintf(w, `rota help errors: exit codes and errors

Every client verb exits
  %d  when it did what was asked
  %d  when the server refused, failed or could not be reached
  %d  on bad flags or arguments, before anything was sent

With -o json an error is one line of JSON on stderr, never plain text:
  {"code": "not_found", "message": "job 99 not found", "exit_code": 1}
"code" is the server's (%s, %s, %s, ...) for its refusals, else
%s (bad flags or arguments), %s (no connection to the server),
%s or %s. "field" names the offending field where it is known.
`, ExitOK, ExitError, ExitUsage, api.CodeInvalid, api.CodeNotFound, api.CodeConflict,
		codeUsage, codeUnreachable, codeInterrupted, codeError)
}
