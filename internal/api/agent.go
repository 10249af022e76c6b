package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

// The agent protocol. An agent POSTs a Heartbeat to /api/v1/agents/{node}/heartbeat every
// few seconds; the answer is the node's desired state. The agent makes its processes match
// it and reports what actually runs in the next heartbeat. Both sides are idempotent, so a
// lost request or a restarted server needs no special handling beyond the next heartbeat.

// TaskStatus is the agent's view of one job attempt on its node.
type TaskStatus struct {
	JobID   int64 `json:"job_id"`
	Attempt int   `json:"attempt"`
	// State is ASSIGNED until the job's process has started, RUNNING while it lives, then
	// SUCCEEDED, FAILED, CANCELLED or TIMEOUT.
	State     JobState   `json:"state"`
	PID       int        `json:"pid,omitempty"`
	StartTime *time.Time `json:"start_time,omitempty"`
	EndTime   *time.Time `json:"end_time,omitempty"`
	ExitCode  *int       `json:"exit_code,omitempty"`
	// Reason is one of the Reason* categories when the task ended other than by exiting 0.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Events are lines the job appended to ROTA_EVENTS_FILE since the last heartbeat.
	Events []map[string]any `json:"events,omitempty"`
	// PeakMemoryMB is the task's peak memory as its cgroup measured it, when it ended.
	PeakMemoryMB int64 `json:"peak_memory_mb,omitempty"`
	// ImageDigest is the digest of the container image the task runs.
	ImageDigest string `json:"image_digest,omitempty"`
	// LogSize, on an ended task, is the size of its whole log on the node: a server whose
	// copy is shorter (a new leader, a lost log directory) asks the node for the rest.
	LogSize int64 `json:"log_size,omitempty"`
}

// Heartbeat is what an agent sends: its inventory and the state of its tasks.
type Heartbeat struct {
	Node string `json:"node"`
	// Inventory is the node's hardware and labels. It may be left out (the zero value)
	// when InventoryHash names the inventory the server said it holds for the node.
	Inventory Inventory `json:"inventory,omitzero"`
	// InventoryHash, sent only to a server whose answers carry inventory_hash, is
	// InventoryHash(Inventory) of the inventory the agent has now. With Inventory left
	// out, it says the inventory is the one the server holds; the server answers with
	// the hash it holds, and the agent sends the inventory whole when they differ.
	InventoryHash string `json:"inventory_hash,omitempty"`
	// Tasks holds every task the agent runs and every ended task not yet acknowledged,
	// of the cluster ClusterID.
	Tasks []TaskStatus `json:"tasks"`
	// AgentTime is the agent's clock as it sends the heartbeat: the server measures the
	// node's clock against its own from it, and converts the times the heartbeat carries
	// where they differ (Node.ClockOffsetS).
	AgentTime time.Time `json:"agent_time"`

	// ClusterID is the cluster whose attempts the agent holds; empty before it has heard
	// from any server. Attempts of any other cluster are stopped at once.
	ClusterID string `json:"cluster_id,omitempty"`
	// Instance is random per agent process. PreviousInstance is the instance that used
	// the agent's data directory before this process took it over (a restart): the
	// server lets a restarted agent take over its node at once, and refuses a second,
	// unrelated process claiming a node whose agent is live.
	Instance         string `json:"instance"`
	PreviousInstance string `json:"previous_instance,omitempty"`
	PID              int    `json:"pid,omitempty"`
	Version          string `json:"version,omitempty"`
	// Synced is true when nothing runs on the node that the server's last answer did not
	// list: every attempt the agent found and no server lists has been stopped. A node
	// whose agent (re)connects takes no new work until it reports Synced.
	Synced bool `json:"synced"`
	// Stopped reports attempts the agent stopped because no server listed them (an
	// attempt of another cluster, or one the server had given up when the node was
	// lost), until the server acknowledges them in StoppedAcked.
	Stopped []StoppedTask `json:"stopped,omitempty"`
	// SyncEpoch is the sync_epoch of the answer Synced speaks of. The server clears a
	// node's syncing only for the current epoch, so a heartbeat composed before the node
	// was lost or its agent replaced (delayed in flight, or sent by a process frozen and
	// resumed) cannot let new work in early. Zero: an agent that predates epochs.
	SyncEpoch uint64 `json:"sync_epoch,omitempty"`
	// Telemetry is the node's latest reading, when one was taken since the last heartbeat.
	Telemetry *Telemetry `json:"telemetry,omitempty"`
	// HealthCheck is the last result of the node's health-check command, if it has one.
	HealthCheck *HealthCheck `json:"health_check,omitempty"`
	// DataDirProblem says why the agent cannot run attempts, in one sentence: its data dir
	// cannot hold them (the disk is full, or read-only, or failing), or their supervisors
	// cannot be started (the field's name is older than that cause). Empty while it can;
	// the node takes no new work while it is set.
	DataDirProblem string `json:"data_dir_problem,omitempty"`
}

// StoppedTask is an attempt an agent stopped on its own because no server listed it.
type StoppedTask struct {
	ClusterID string `json:"cluster_id,omitempty"`
	JobID     int64  `json:"job_id"`
	Attempt   int    `json:"attempt"`
	// Reason is "not_listed" (the server does not list it as live) or "other_cluster".
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

// Reasons an agent stops an attempt on its own.
const (
	StoppedNotListed    = "not_listed"
	StoppedOtherCluster = "other_cluster"
)

// Task is one job attempt the server wants on a node.
type Task struct {
	JobID   int64             `json:"job_id"`
	Attempt int               `json:"attempt"`
	Command []string          `json:"command"`
	WorkDir string            `json:"workdir,omitempty"`
	Env     map[string]string `json:"env"`
	// GPUIndices and GPUIDs name the devices this node gives the task.
	GPUIndices []int    `json:"gpu_indices"`
	GPUIDs     []string `json:"gpu_ids"`
	CPUs       int      `json:"cpus"`
	MemoryMB   int64    `json:"memory_mb"`
	// GPUShare is the share of its one GPU the task may use (0.5: half its memory and
	// compute), and GPUMemoryLimitMB the GPU memory it may hold; both zero for whole
	// GPUs. The agent passes them to the task and stops a task that holds more GPU
	// memory than its slice, after a short grace, with reason gpu_memory_exceeded.
	GPUShare         float64 `json:"gpu_share,omitempty"`
	GPUMemoryLimitMB int64   `json:"gpu_memory_limit_mb,omitempty"`
	// TimeLimitEnd is when the agent stops the task on its own, even without the server,
	// on the node's clock (the server converts it where that is off). Zero means no limit.
	TimeLimitEnd time.Time `json:"time_limit_end"`
	Signal       string    `json:"signal"`
	GraceSeconds int64     `json:"grace_s"`
	// Stop asks the agent to stop the task: write the notice, signal, wait grace, kill.
	Stop       bool   `json:"stop,omitempty"`
	StopReason string `json:"stop_reason,omitempty"`
	// Rank is the task's index among the attempt's nodes (0 for a single-node job).
	Rank int `json:"rank"`
	// RunAs is the Unix account the task runs as. An agent running as root switches to
	// it (uid, gid, supplementary groups, home) and refuses uid 0 unless AllowRoot; an
	// agent running as another user runs only tasks of its own account.
	RunAs     string `json:"run_as"`
	AllowRoot bool   `json:"allow_root,omitempty"`
	// CheckpointDir is the job's shared checkpoint directory, the same on every node and
	// for every attempt; empty means a node-local one the agent chooses, which a
	// requeued attempt on another node does not find (the notice file says so).
	CheckpointDir string `json:"checkpoint_dir,omitempty"`
	// Image is the container image the task runs in (empty: directly on the node).
	Image string `json:"image,omitempty"`
	// Notice, when set, is a warning the agent writes to the task's ROTA_NOTICE_FILE
	// (once per distinct text), e.g. that the job holds GPUs it does not use.
	Notice string `json:"notice,omitempty"`
	// TTY: the job's stdin, stdout and stderr are a pseudo-terminal whose other end the
	// agent relays to the server's attach stream (see attach.go).
	TTY bool `json:"tty,omitempty"`
}

// HeartbeatResponse is the node's desired state.
type HeartbeatResponse struct {
	// Tasks the node should run (or stop, where Stop is set). A task the agent runs that is
	// not listed here must be stopped with reason "cancelled".
	Tasks []Task `json:"tasks"`
	// Acked lists ended tasks the server has recorded; the agent may forget them.
	Acked []TaskRef `json:"acked"`
	// StoppedAcked lists the Stopped reports the server has recorded.
	StoppedAcked []TaskRef `json:"stopped_acked,omitempty"`
	// ClusterID is the server's cluster. The agent keeps its attempts under it and stops
	// those of any other cluster.
	ClusterID string `json:"cluster_id"`
	// HeartbeatSeconds is how often the server wants to hear from the agent.
	HeartbeatSeconds float64 `json:"heartbeat_s"`
	// SyncEpoch counts the times the node started syncing; the agent echoes it with
	// Synced (see Heartbeat.SyncEpoch).
	SyncEpoch uint64 `json:"sync_epoch,omitempty"`
	// InventoryHash is InventoryHash of the node's inventory as the server holds it. An
	// agent whose inventory has this hash may leave it out of its next heartbeats.
	InventoryHash string `json:"inventory_hash,omitempty"`
	// LogsFollowed lists the node's tasks whose logs someone reads now (`rota logs -f`, a
	// job's page): the agent ships them every second, not only after each heartbeat. A
	// reader's arrival wakes the node's watch, so the agent learns of it at once. It also
	// names ended tasks whose log the server holds only in part (TaskStatus.LogSize): the
	// agent ships those again from its copy, which it keeps for a while after the end.
	LogsFollowed []TaskRef `json:"logs_followed,omitempty"`
	// LogSizes says the server takes TaskStatus.LogSize: an agent sends it only to a
	// server whose answers say so, as an earlier one refuses the field.
	LogSizes bool `json:"log_sizes,omitempty"`
	// DataDirProblems says the server takes Heartbeat.DataDirProblem: an agent sends it
	// only to a server whose answers say so, as an earlier one refuses the field.
	DataDirProblems bool `json:"data_dir_problems,omitempty"`
}

// InventoryHash is the hex SHA-256 of inv's JSON encoding. Agent and server each work it
// out from their own copy; an encoding one side does not share (a field the other does
// not know) only makes them differ, and the inventory is then always sent.
func InventoryHash(inv Inventory) string {
	data, err := json.Marshal(inv)
	if err != nil {
		return "" // an inventory always encodes; an empty hash matches nothing
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// TaskRef names one attempt of one job, of the server's cluster unless ClusterID says
// otherwise.
type TaskRef struct {
	JobID     int64  `json:"job_id"`
	Attempt   int    `json:"attempt"`
	ClusterID string `json:"cluster_id,omitempty"`
}

// Log shipping, one task at a time: the agent POSTs raw bytes of a task's combined
// stdout/stderr log to /api/v1/agents/{node}/logs/{job}/{attempt}?offset=N. The server
// writes them at offset N of its copy, so a resend after a lost answer is harmless. The
// answer is LogAck. Agents send a LogBatch instead, and this route only to a server
// without that one.
type LogAck struct {
	// Size is the length of the server's copy after the write.
	Size int64 `json:"size"`
}

// LogBatch is the body of POST /api/v1/agents/{node}/logs: pieces of the logs of the
// node's tasks, one request for all of them. An agent sends one batch after each heartbeat
// with what every task printed since the last, so a node costs the server one request per
// interval however many tasks it runs and however much they print; a log someone reads
// now (LogsFollowed) or of a task that ended ships at once.
type LogBatch struct {
	// Chunks are written in order, each at its Offset of its log. At most MaxLogBatchChunks.
	Chunks []LogChunk `json:"chunks"`
}

// MaxLogBatchChunks and MaxLogBatchBytes bound a LogBatch: its chunks, and their data
// together (before base64).
const (
	MaxLogBatchChunks = 1024
	MaxLogBatchBytes  = 1 << 20
)

// LogChunk is the bytes of one task's log from Offset. With no data it writes nothing and
// asks for the size of the server's copy: where an agent restarted mid-log resumes.
type LogChunk struct {
	JobID   int64  `json:"job_id"`
	Attempt int    `json:"attempt"`
	Offset  int64  `json:"offset"`
	Data    []byte `json:"data,omitempty"`
	// Final says the task has ended and this chunk reaches the end of its log: the
	// server makes the copy durable before it answers, and the agent, seeing a size
	// equal to its own, may forget the log. Other chunks are written without waiting for
	// the disk; one a crash of the server's machine loses is sent again, since the next
	// chunk's offset is then past the copy's end.
	Final bool `json:"final,omitempty"`
}

// LogBatchAnswer answers a LogBatch: one LogChunkAck per chunk, in the batch's order.
type LogBatchAnswer struct {
	Chunks []LogChunkAck `json:"chunks"`
}

// LogChunkAck is the size of a chunk's log on the server after its write (the offset
// to send from next), or why the chunk was refused. A refusal with status 404 (the node
// holds no rank of that attempt) will not change; the others (a write that failed) may
// be resent.
type LogChunkAck struct {
	JobID   int64  `json:"job_id"`
	Attempt int    `json:"attempt"`
	Size    int64  `json:"size"`
	Status  int    `json:"status,omitempty"`
	Error   *Error `json:"error,omitempty"`
}

// WatchAnswer is the answer to GET /api/v1/agents/{node}/watch?version=V&wait=S: the node's
// desired-state version, sent as soon as it differs from V or after S seconds. An agent
// heartbeats at once when the version changes, so new work starts without waiting for
// the next heartbeat.
type WatchAnswer struct {
	Version uint64 `json:"version"`
}
