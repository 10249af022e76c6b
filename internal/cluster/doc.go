// Package cluster owns the authoritative in-memory state of a rota server (jobs, attempts,
// nodes, queues), the job state machine, and the snapshots the scheduler plans on.
//
// It does no I/O: the server commits each change to the store first and then hands the same
// batch to State.Apply, so memory is always a replay of what is durable.
package cluster
