// Package store persists rota's state: jobs, attempts, nodes, queues, teams, reservations
// and the event log.
//
// It owns the SQL schema, its embedded migrations and the two backends that run them:
// SQLite (the embedded default, one file in WAL mode) and PostgreSQL (production and HA).
// Both share one implementation; they differ only in how a connection is opened and how
// writers from several processes are serialized. One conformance suite runs against both.
//
// The store writes what it is given in one transaction per Batch and reads it back. It
// must not know about HTTP, the job state machine or scheduling: it never decides whether
// a change is allowed, never fills in defaults and never reads the clock to change state.
//
// Backup copies a live SQLite store to a new file, and Copy a whole store into an empty
// one across backends: `rota admin backup` and `rota admin migrate`.
package store
