// Package sched is rota's scheduling core: a snapshot of the cluster goes in, a plan comes
// out (Schedule, ScheduleWith). It owns the policy:
//
//   - the order of pending jobs: queue tier, then a Slurm-like multifactor score (fair
//     share, age, size, nice), or a research baseline for the simulator (Options.Order);
//   - admission against team quotas (in quota, borrowing, over the limit);
//   - placement: whole GPUs on one node by best fit (or worst fit), NVLink-aware within a
//     node, and gangs all-or-nothing on nodes of one model and driver, one switch or
//     rack where possible; never on a node whose health check failed, a GPU that is
//     unhealthy or held by leftover processes, nor, for a job with an image, a node
//     without a container runtime;
//   - EASY backfill: the highest blocked jobs get reservations, which are also their
//     estimated starts, and lower jobs start only where they do not delay them;
//   - preemption of borrowed or lower-tier preemptible work, losing the least, for single
//     jobs and gangs alike, with a claim on what the victims free that the caller carries
//     to the next cycles until the job starts (Claim);
//   - a structured reason for every job that stays pending.
//
// One cycle (plan.go) builds a state from the snapshot (state.go), orders the jobs
// (order.go) and runs each through admission (quota.go), the feasibility chain
// (feasible.go), placement (feasible.go, gang.go, topology.go), preemption (preempt.go),
// reasons (reason.go) and backfill reservations (backfill.go). Claims carried from earlier
// cycles are taken out of the state before any job is served (claims.go).
//
// It must stay pure so that the server and the simulator get exactly the same decisions
// and tests can replay them: no I/O (no net, os, os/exec, database/sql), no goroutines, no
// clock (the caller passes now), no global or unseeded randomness, no package state. Maps
// are sorted before they are iterated where order matters, so the same snapshot and now
// give the same plan. It imports none of rota's other packages; the caller builds the
// snapshot from the live state or from a virtual cluster, and applies the plan only if
// that state is still current. pure_test.go enforces the import rules.
package sched
