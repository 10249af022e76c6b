// Package server is rota's control plane: the REST API, the agent protocol, the scheduling
// loop and node liveness. It owns no policy (that is internal/sched) and no SQL (that is
// internal/store); it commits every change to the store before it acknowledges it, and
// applies the same change to the in-memory state (internal/cluster) only after the commit.
package server
