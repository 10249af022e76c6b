// Package sched is rota's scheduling core: a snapshot of the cluster goes in, a plan comes
// out. It owns the policy: the order of pending jobs (tier, then a multifactor score), team
// quotas, whole-GPU placement on one node or a gang of nodes, EASY backfill with
// reservations and estimated starts, preemption, and a structured reason for every job that
// stays pending.
//
// It must stay pure so that the server and the simulator run exactly the same decisions
// and tests can replay them: no I/O (no net, os, os/exec, database/sql), no goroutines, no
// clock (the caller passes now), no global or unseeded randomness, no package state. Maps
// are sorted before they are iterated, so the same snapshot and now give the same plan.
// It imports none of rota's other packages; the caller builds the snapshot from the live
// state or from a virtual cluster, and applies the plan only if that state is still
// current. pure_test.go enforces the import rules.
package sched
