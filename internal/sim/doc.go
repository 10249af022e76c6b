// Package sim is rota's trace simulator, `rota sim`: it replays recorded or public GPU
// cluster traces in virtual time through the real scheduler (internal/sched) and the server's
// job state machine (internal/cluster.Transition), under several policies side by side, and
// reports job completion times, queueing delays, utilisation, preemptions and fairness.
//
// It owns the trace loaders, the cluster file, the event engine and the metrics. It must
// not make scheduling decisions of its own: every placement and preemption comes from
// sched, and policy.go is the one file that knows how a policy name becomes sched.Options.
// No network, no database, no wall clock in the replay (the progress bar alone reads it).
//
// # Engine
//
// A virtual clock and a min-heap of events: job ends (completion or time limit), node
// failures and repairs, wake-ups at estimated starts; arrivals come from the job list sorted
// by submit time. Events of one instant apply in a fixed order (ends, node failures, node
// repairs, arrivals, wake-ups; then job ID), and then, if anything changed and a job waits,
// the scheduler plans once on a snapshot kept up to date incrementally. Preemption victims
// stop at once (the grace period is not modelled) and the scheduler is asked again at the
// same instant so that the preemptor can start. The plan's claims (sched.Claim: what the
// preemptor will take) go back in the next snapshot while their jobs wait, as the server
// passes them, so the preemptor starts on what its victims freed; a placement on another
// job's claim stops the replay as a scheduler bug. A job's trace duration is its work: its
// run time at speed 1. Placed on a GPU model of relative speed s (the job's own speeds
// column, else the cluster file's speeds, else 1; a gang's nodes share one model), an
// attempt needs (work left) / s of wall time, at most 100 years. A started job ends at start
// + that, or at start + its time limit if that is sooner (TIMEOUT: limits are wall time, as
// on the server). A preempted job, or one lost with a failed node, keeps the work it
// checkpointed (--checkpoint, an interval of wall time; the work saved is the wall time
// saved × s) and returns to PENDING as a new attempt, which runs at the speed of wherever
// it lands next; SJF orders by work left at speed 1; a job lost more than --retries times FAILs. The replay stops
// when no job can arrive, run or be unblocked by a node coming back; jobs still waiting
// then are counted as never started.
// Teams' fair-share usage is kept by cluster.FairShare, the server's own accumulator
// (--half-life), so a replay of `rota history export` orders the queue as the server did;
// TestReplayServerHistory checks it on a recorded server history.
//
// Speed: a replay plans at every event that changes what the scheduler sees, and every plan
// weighs every pending job, so a long queue is the costly case. Between events the engine
// keeps its pending list in the last plan's order, which makes the scheduler's sort short,
// and a sched.Planner keeps the node layout, each pending job's demand while its request
// stays the same, and its buffers. BenchmarkSimPhillyContended
// measures the contended Philly extract; TestPlanIdentity holds every plan fixed against
// hashes in testdata/plan_hashes.txt; docs/scheduling.md gives the figures.
//
// Determinism: the only randomness is node failures (--node-mtbf), drawn per node from
// --seed, so the same trace, flags and seed give byte-identical output. Policies replay
// concurrently, each in its own engine.
//
// # Trace formats (--format)
//
//   - philly: philly.csv of the Philly job extract (columns timestamp, duration, num_gpus,
//     gpu_time, cluster). Each virtual cluster is a team. Rows need not be sorted; blank
//     lines are ignored. Jobs state no model, CPUs or memory. Without --cluster the cluster
//     is 300 nodes of 8 GPUs (PhillyCluster). Jobs larger than a node become gangs of whole
//     nodes (16 GPUs: 2 nodes × 8).
//
//   - alibaba-gpu2023: an openb pod list of the Alibaba GPU trace v2023 (FGD, ATC'23).
//     Submit is creation_time; the run time is deletion_time − scheduled_time (or −
//     creation_time for pods never scheduled). A task list without creation_time and
//     deletion_time loads for --fill only. Fractional GPU requests (gpu_milli below 1000)
//     are rounded up to one whole GPU in a replay and kept as shares by --fill; CPUs are
//     rounded up to whole cores (--fill keeps milli-CPUs); gpu_spec "A|B" binds --fill to
//     those models and lets a replay use any; the QoS class is the team. Without
//     --cluster, openb_node_list_all_node.csv next to the trace is the cluster; --cluster
//     may name any openb node list (the FGD paper's cluster is openb_node_list_gpu_node.csv).
//
//   - rota: rota's own format, which `rota history export` writes (WriteRotaTrace). A CSV
//     file with a header; columns may come in any order, and only submit and gpus are
//     required:
//
//     id            the job's ID (kept as its name)
//     submit        submit time, RFC 3339
//     start, end    start and end of the last attempt, RFC 3339; empty if none
//     duration_s    seconds the job ran; if empty, end − start
//     time_limit_s  the job's time limit in seconds; empty: the --time-limit rule
//     gpus          GPUs in total (0 for a CPU-only job)
//     nodes         nodes of a gang (empty, 0 or 1: one node); gpus must divide evenly
//     gpu_model     required GPU model; empty: any
//     cpus          CPUs in total (shared out evenly over a gang's nodes)
//     memory_mb     memory in MB in total
//     queue         queue name; empty: the cluster's default queue
//     team, user    owner
//     state         final state (SUCCEEDED, FAILED, TIMEOUT, CANCELLED, …); informative,
//     except that a job that never started has nothing to replay and is skipped
//     speeds        the job's relative speed per GPU model, MODEL=SPEED separated by
//     semicolons (e.g. H100=1;T4=0.3), each speed in (0, 100]; it overrides the cluster
//     file's speeds for the models it names; a model no node has is never used; empty:
//     the cluster's table. `rota history export` does not write it.
//
// A rota trace needs --cluster; --add-nodes 4xH100 asks "what if we bought four more nodes".
//
// Each line is one row: a quoted field may not span lines, so a stray quote spoils its own
// line only. Bad rows (malformed CSV, a wrong number of fields, missing or malformed fields, bad timestamps, negative durations, requests that
// no node or set of nodes can ever satisfy, unknown queues) are skipped and listed by line
// with the reason; --strict makes the first one fatal. A header that lacks a required
// column is always fatal.
//
// # Cluster file (--cluster, YAML)
//
//	nodes:                   # a node, or a group of nodes with count
//	  - name: a100           # with count, nodes are a100-000, a100-001, …
//	    count: 3
//	    gpus: 8
//	    gpu_model: A100
//	    gpu_memory_mb: 81920
//	    cpus: 128
//	    memory_mb: 1048576
//	    labels: {pool: train}
//	queues:                  # default: one preemptible queue named "default"
//	  - {name: train, tier: 10, preemptible: true}
//	  - {name: urgent, tier: 100, preemptible: false}
//	default_queue: train     # for jobs whose trace names none; default: the first queue
//	teams:                   # teams of the trace not listed here have weight 1, no quota
//	  - name: vision
//	    weight: 2            # fair-share weight, default 1
//	    quota:               # per GPU model; "any" covers models not named
//	      A100: {guaranteed: 8, limit: 16}
//	speeds: {A100: 1.0, L4: 0.4}  # relative speed per GPU model; default 1 for models not named
//
// Unknown keys are errors. speeds: a trace's duration is a job's run time at speed 1, and on
// a model of speed s it runs duration / s; each speed must be a number in (0, 100], and each
// model one that a node of the file has. testdata/cluster.yaml uses every key but speeds
// (speeds_test.go covers it), so that the goldens stay a replay at one speed.
//
// # Flags
//
// --scale X multiplies the arrival rate: each submit offset from the first submit is
// divided by X; durations are unchanged. --time-limit is the limit of jobs whose trace has
// none: "hour" (default; the duration rounded up to a whole hour, at least one hour: a user
// who roughly knows the run time), "exact" (perfect estimates) or a duration for every job.
// --node-mtbf and --node-repair model node failures (exponential, per node, from --seed).
// --fill X runs the FGD paper's experiment instead of a replay in trace time (FillWorkload,
// RunFill): every job of the trace once, topped up with draws with replacement, in an order
// fixed by --seed, arriving one by one until their GPU requests (milli-GPU, fractions kept)
// reach X times the cluster's GPU capacity, and never ending. Each is placed at once or never;
// nothing queues, so the columns are placements (--placement), not policies (--policy is
// refused): fgd (fragmentation gradient descent, Weng et al., ATC'23: the node and GPU that
// least increase the node's expected fragmentation, the free GPU capacity each kind of task
// of the workload's mix could not use, weighted by the kind's share, over the most frequent
// kinds that make up 95% of the tasks; equal scores go to the node left with the least free
// GPU capacity), bestfit (least CPU and
// GPU left, as the FGD simulator's BestFit) and packing (partly used GPUs first, as its
// GpuPacking); all three by default. A fractional task takes a share of one GPU, a
// multi-GPU task whole free GPUs. Remaining ties go to the first node of the cluster. The report's
// allocation rows then measure how much GPU capacity a placement allocates as demand passes
// capacity; the progress bar counts GPUs requested. The paper's protocol over its workloads
// and seeds, next to its published results, is TestFGDProtocol (ROTA_FGD_PROTOCOL=1).
// Policies are sched's (PolicyNames); the default set is default, fifo, sjf (oracle
// durations), las (Tiresias' discretised least attained service: queues by GPU-seconds
// received, preempting jobs of the same tier that sank to a lower queue, with a starvation
// guard; only preemptible queues take part) and worstfit (spread); fifo-strict is the
// papers' YARN-like baseline: head-of-line blocking, no backfill. The default policy
// places best-fit. Names combine with "+", e.g. fifo+worstfit. docs/scheduling.md says
// more, with the Philly comparison.
//
// METRICS.md defines every number of the report.
package sim
