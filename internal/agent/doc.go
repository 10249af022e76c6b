// Package agent is the node agent: it discovers the machine's GPUs (NVML, or a fake set for
// tests and demos), heartbeats to the server, and reconciles the job processes on its node
// with the desired state the server answers with. It owns the job contract on the node: the
// environment a job starts with, its process group, the stop sequence (notice, signal, grace,
// kill), the time limit, the per-attempt log file and its shipping, and the events file.
//
// The agent speaks to the server only through the wire types of internal/api over HTTP. It
// must never import internal/server, internal/store, internal/sched or internal/cluster: a
// node runs nothing but this package and the API types, and the server may be on another
// version or unreachable. Jobs must keep running while the server is away, so nothing in the
// agent ties a job's life to a connection or to Run's context.
package agent
