// Package sched is rota's scheduling core: a snapshot of the cluster goes in, a plan comes
// out (Schedule, ScheduleWith). It owns the policy:
//
//   - the order of pending jobs: queue tier, then a Slurm-like multifactor score (fair
//     share, age, size, deadline, service, nice), least attained service (Tiresias), or a research
//     baseline for the simulator (Options.Order);
//   - admission against team quotas (in quota, borrowing, over the limit);
//   - placement: whole GPUs on one node by best fit (or worst fit), NVLink-aware within a
//     node, and gangs all-or-nothing on nodes of one model and driver, one switch or
//     rack where possible; a job that lists several models (Request.GPUModels) runs on
//     one of them, whichever has room first, the first listed at equal fit, and is
//     admitted by and charged to the quota of the model it lands on; never on a node whose health check failed, a GPU that is
//     unhealthy or held by leftover processes, nor, for a job with an image, a node
//     without a container runtime, nor one whose driver or CUDA version is outside the
//     job's ranges (Request.CUDA, Request.Driver; ParseVersionRange);
//   - EASY backfill: the highest blocked jobs get reservations, which are also their
//     estimated starts, and lower jobs start only where they do not delay them, nor run
//     into another team's reservation or any maintenance window (Snapshot.Maintenance);
//   - reservations by GPU count (Reservation.GPUs without Nodes; hold.go): a number of
//     GPUs of a model and pool kept for a team in a window on no node in particular;
//     other teams' jobs that would run into the window take only what the team does not
//     lack, and nothing is preempted for one;
//   - preemption of borrowed, lower-tier or (under LAS) more-served preemptible work of
//     the same tier, losing the least, for single
//     jobs and gangs alike, with a claim on what the victims free that the caller carries
//     to the next cycles until the job starts (Claim);
//   - a structured reason for every job that stays pending.
//
// # Policies
//
// Options select a policy; OptionsFor names them for rota sim and the server's --policy,
// combined with "+":
//
//   - default: tier, then the multifactor score; EASY backfill; preemption by tier and by
//     reclaiming borrowed GPUs.
//   - las: Tiresias' discretised 2D least attained service (las.go). Within a tier, jobs
//     of preemptible queues fall into LAS queues by the GPU-seconds they have received
//     over all attempts (Job.AttainedService, Running.AttainedService; the caller sums
//     them): below 3250 GPU-seconds queue 0, below 7200 queue 1, else queue 2
//     (Options.LASThresholds). A lower LAS queue goes first, then submit order. A waiting
//     job may preempt running jobs of its own tier that sank to a higher LAS queue, with
//     the usual machinery: claims, signal and grace, requeue, MinRuntime protection, never
//     a queue that is not preemptible, never across tiers against the tier order. The
//     starvation guard (Options.LASStarveLimit, default 8) promotes a job that has waited
//     since its last attempt longer than 8 times that attempt's run to queue 0. Tiers,
//     quotas and the other preemption rights stay above LAS. Plan.Recheck says when the
//     queues next shift, for callers that plan only on events.
//   - service: the default policy with the service factor on (Weights.Service): a job of a
//     preemptible queue that has had GPU time in earlier attempts loses up to 500 points
//     (half at Options.ServiceHalf, 8 GPU-hours), so short experiments do not queue behind
//     requeued week-long training of their tier. Off by default, because it changes who
//     resumes first after a preemption (a fresh small job may take the node a requeued
//     victim needs back).
//   - fifo, sjf: research baselines (submit order; shortest true duration, an oracle);
//     they backfill and never preempt. fifo-strict (fifo+nobackfill): head-of-line
//     blocking, no backfill, as YARN's capacity scheduler: nothing starts behind the first
//     job that waits for resources.
//   - worstfit, bestfit, greedy, nopreempt, nobackfill change one thing each.
//
// One cycle (plan.go) builds a state from the snapshot (state.go), orders the jobs
// (order.go) and runs each through admission (quota.go), the feasibility chain
// (feasible.go), placement (feasible.go, gang.go, topology.go), preemption (preempt.go),
// reasons (reason.go) and backfill reservations (backfill.go). Claims carried from earlier
// cycles are taken out of the state before any job is served (claims.go), and then the
// holds by GPU count are counted on what is left (hold.go).
//
// It must stay pure so that the server and the simulator get exactly the same decisions
// and tests can replay them: no I/O (no net, os, os/exec, database/sql), no goroutines, no
// clock (the caller passes now), no global or unseeded randomness, no package state. Maps
// are sorted before they are iterated where order matters, so the same snapshot and now
// give the same plan. It imports none of rota's other packages; the caller builds the
// snapshot from the live state or from a virtual cluster, and applies the plan only if
// that state is still current. pure_test.go enforces the import rules.
package sched
