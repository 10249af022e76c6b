// Package batch holds the unit of change of a rota server: a Batch of jobs, attempts,
// nodes, events and identity records that commit together, and the records it carries
// that are not wire types (hashed tokens, node certificates, submit keys, settings).
//
// It exists so that the two packages that meet at a batch need not know each other: the
// store commits a Batch and the cluster state applies the same Batch, and neither imports
// the other. It holds types only: no I/O, no clock, no rota package but internal/api.
package batch
