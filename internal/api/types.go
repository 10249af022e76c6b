package api

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// JobState is where a job stands in its lifecycle (DESIGN.md, "Job lifecycle").
type JobState string

const (
	StatePending   JobState = "PENDING"
	StateHeld      JobState = "HELD"
	StateAssigned  JobState = "ASSIGNED"
	StateRunning   JobState = "RUNNING"
	StateSucceeded JobState = "SUCCEEDED"
	StateFailed    JobState = "FAILED"
	StateCancelled JobState = "CANCELLED"
	StateTimeout   JobState = "TIMEOUT"
)

// Terminal reports whether no transition leaves s.
func (s JobState) Terminal() bool {
	switch s {
	case StateSucceeded, StateFailed, StateCancelled, StateTimeout:
		return true
	}
	return false
}

// Active reports whether a job in state s holds resources on a node.
func (s JobState) Active() bool { return s == StateAssigned || s == StateRunning }

// Valid reports whether s is one of the known states.
func (s JobState) Valid() bool {
	switch s {
	case StatePending, StateHeld, StateAssigned, StateRunning,
		StateSucceeded, StateFailed, StateCancelled, StateTimeout:
		return true
	}
	return false
}

// Failure and stop reasons, categorised so reports can count them.
const (
	ReasonExitCode   = "exit_code"
	ReasonOOM        = "oom"
	ReasonGPUError   = "gpu_error"
	ReasonNodeLost   = "node_lost"
	ReasonTimeout    = "timeout"
	ReasonIdle       = "idle_reclaimed"
	ReasonPreempted  = "preempted"
	ReasonCancelled  = "cancelled"
	ReasonStartError = "start_error"
	// ReasonNodeShutdown: the node was shutting down and stopped its jobs.
	ReasonNodeShutdown = "node_shutdown"
	// ReasonGPUMemoryExceeded: a job sharing a GPU held more GPU memory than its slice
	// for longer than the grace, and its node stopped it.
	ReasonGPUMemoryExceeded = "gpu_memory_exceeded"
	// ReasonRankFailed: another rank of a multi-node attempt failed or was lost, so the
	// server stopped this one.
	ReasonRankFailed = "rank_failed"
	// ReasonNotStarted: the agent of its node did not start the attempt (or one of its ranks)
	// within the server's assign timeout.
	ReasonNotStarted = "not_started"
	// ReasonNodeError: the node could not start the attempt through no fault of the job:
	// its agent could not write the attempt's directory (a full or read-only disk) or
	// start its supervisor.
	ReasonNodeError = "node_error"
)

// EndReasons lists every reason rota itself ends an attempt with; an agent may report
// other short codes.
var EndReasons = []string{ReasonExitCode, ReasonOOM, ReasonGPUError, ReasonGPUMemoryExceeded, ReasonNodeLost,
	ReasonNodeShutdown, ReasonTimeout, ReasonIdle, ReasonPreempted, ReasonCancelled, ReasonStartError,
	ReasonRankFailed, ReasonNotStarted, ReasonNodeError}

// JobSpec is what a user asks for. It is stored as submitted, after defaults are filled in.
type JobSpec struct {
	Name  string `json:"name,omitempty" yaml:"name"`
	Queue string `json:"queue,omitempty" yaml:"queue"`
	Team  string `json:"team,omitempty" yaml:"team"`
	// Project names one of the team's projects (Team.Projects) the job is charged to;
	// empty: the team only.
	Project string            `json:"project,omitempty" yaml:"project"`
	User    string            `json:"user,omitempty" yaml:"user"`
	Command []string          `json:"command" yaml:"command"`
	WorkDir string            `json:"workdir,omitempty" yaml:"workdir"`
	Env     map[string]string `json:"env,omitempty" yaml:"env"`

	// GPUs is the total number of whole GPUs. With Nodes > 1 it is Nodes*GPUsPerNode.
	// GPUModel is the model the job needs ("" any), or a comma-separated list of models
	// it accepts ("A100,H100": whichever starts first, all its GPUs of one model). The
	// server stores each name resolved to the full name the nodes report.
	GPUs        int    `json:"gpus" yaml:"gpus"`
	GPUsPerNode int    `json:"gpus_per_node,omitempty" yaml:"gpus_per_node"`
	Nodes       int    `json:"nodes,omitempty" yaml:"nodes"`
	GPUModel    string `json:"gpu_model,omitempty" yaml:"gpu_model"`
	CPUs        int    `json:"cpus" yaml:"cpus"`
	MemoryMB    int64  `json:"memory_mb" yaml:"memory_mb"`
	// GPUShare asks for a share of one GPU's memory and compute, above 0 and below 1 in
	// steps of 0.001 (0.5: half); GPUMemoryMB for a slice of one GPU's memory. At most
	// one of them is given, and then the job runs on one GPU (gpus is 1, or 0 which means
	// 1) of one node, which it shares with other such jobs, on a pool that allows sharing.
	GPUShare    float64 `json:"gpu_share,omitempty" yaml:"gpu_share"`
	GPUMemoryMB int64   `json:"gpu_memory_mb,omitempty" yaml:"gpu_memory_mb"`

	// TimeLimit is in seconds; 0 means the queue's default.
	TimeLimit int64 `json:"time_limit_s" yaml:"time_limit_s"`
	// Signal is sent first when the job must stop (default SIGTERM).
	Signal string `json:"signal,omitempty" yaml:"signal"`
	// Grace is the seconds between the signal and the kill.
	Grace int64 `json:"grace_s,omitempty" yaml:"grace_s"`
	// After lists jobs that must have ended (in any state) before this one may start.
	After []int64 `json:"after,omitempty" yaml:"after"`
	// AfterOK lists jobs that must have SUCCEEDED; if one ends otherwise this job fails
	// with reason "Dependency".
	AfterOK []int64 `json:"after_ok,omitempty" yaml:"after_ok"`
	// Array, e.g. "0-99%8", submits one job per index, at most 8 of them active at once.
	Array string `json:"array,omitempty" yaml:"array"`
	// Hold submits the job HELD until `rota release`.
	Hold bool `json:"hold,omitempty" yaml:"hold"`
	// Nice lowers the job's priority score by this many points (negative raises it; only
	// admins may go below zero).
	Nice int `json:"nice,omitempty" yaml:"nice"`
	// RestartPolicy says when an attempt that ended is followed by another: "never",
	// "on-failure" (after a non-zero exit or a failed start, up to Retries times, with
	// backoff) or "always" (services: after any end but a cancel or time limit; Retries
	// bounds consecutive failures). Empty means the queue's default, else "never", or
	// "on-failure" when Retries is above zero.
	RestartPolicy string `json:"restart_policy,omitempty" yaml:"restart_policy"`
	// Retries is how many failed attempts are followed by another under the restart
	// policy; nil means the default (0 under "never", 3 otherwise). Node loss and
	// preemption never count against it: they are not the job's doing.
	Retries *int `json:"retries,omitempty" yaml:"retries"`
	// Notify lists webhooks told of the job's events, besides its user's and team's.
	Notify []Notify `json:"notify,omitempty" yaml:"notify"`
	// Image runs the job in this OCI container image through the node's container
	// runtime (podman, docker or apptainer), with its GPUs, working directory, ROTA_*
	// variables and checkpoint directory. Empty: the job runs on the node directly.
	Image string `json:"image,omitempty" yaml:"image"`
	// TTY runs the job's command on a pseudo-terminal on its node, which its owner reaches
	// with GET /api/v1/jobs/{id}/attach (rota run, rota attach). The job is single-node and
	// is cancelled when no terminal has been attached for the server's attach grace.
	TTY bool `json:"tty,omitempty" yaml:"tty"`
	// Deadline is when the job must have finished (DeadlineKind "finish", the default) or
	// started ("start"); nil: none. It raises the job's priority within its tier as it
	// nears. A finish-by deadline needs a time limit, and must leave room for it.
	Deadline *time.Time `json:"deadline,omitempty" yaml:"deadline"`
	// DeadlineKind is DeadlineFinish or DeadlineStart; empty means DeadlineFinish.
	DeadlineKind string `json:"deadline_kind,omitempty" yaml:"deadline_kind"`
	// CUDA and Driver are version ranges the job's nodes must report a CUDA and driver
	// version in, e.g. ">=12.4,<13" or ">=550": comparisons >=, >, <=, <, = (==) of
	// dotted numeric versions, joined by commas. Empty: any version. A node that
	// reports no version satisfies no range. Stored as the server normalised them.
	CUDA   string `json:"cuda,omitempty" yaml:"cuda"`
	Driver string `json:"driver,omitempty" yaml:"driver"`
}

// Deadline kinds and results.
const (
	DeadlineFinish = "finish"
	DeadlineStart  = "start"
	DeadlineMet    = "met"
	DeadlineMissed = "missed"
)

// LatestStart is the latest start that meets the spec's deadline: the deadline itself for a
// start-by deadline, the deadline less the time limit for a finish-by one; zero without a
// deadline.
func (s *JobSpec) LatestStart() time.Time {
	if s.Deadline == nil {
		return time.Time{}
	}
	if s.DeadlineKind == DeadlineStart {
		return *s.Deadline
	}
	return s.Deadline.Add(-time.Duration(s.TimeLimit) * time.Second)
}

// Restart policies.
const (
	RestartNever     = "never"
	RestartOnFailure = "on-failure"
	RestartAlways    = "always"
)

// Job is one unit of work and everything the cluster knows about it.
//
// The request is nested under "spec" rather than embedded because a job's top-level "nodes"
// and "gpus" name where it runs (node names, GPU UUIDs), while the spec's are counts.
type Job struct {
	ID    int64    `json:"id"`
	Spec  JobSpec  `json:"spec"`
	State JobState `json:"state"`
	// Reason says why the job is in its state: a pending reason code, or a stop reason.
	Reason string `json:"reason"`
	// Message is the reason in one plain sentence with its numbers.
	Message string `json:"message,omitempty"`

	SubmitTime time.Time  `json:"submit_time"`
	StartTime  *time.Time `json:"start_time,omitempty"`
	EndTime    *time.Time `json:"end_time,omitempty"`
	// EstimatedStart is set for pending jobs when it can be computed.
	EstimatedStart *time.Time `json:"estimated_start,omitempty"`

	// Attempts counts placements so far; the current attempt is number Attempts.
	Attempts int `json:"attempts"`
	// Nodes and GPUs (UUIDs) of the current or last attempt.
	Nodes    []string `json:"nodes"`
	GPUIDs   []string `json:"gpus"`
	ExitCode *int     `json:"exit_code"`

	// CancelRequested is set when a cancel reaches an active job; it ends once the agent reports.
	CancelRequested bool `json:"cancel_requested,omitempty"`
	// PreemptRequested is set when the scheduler chose the job as a preemption victim; the
	// job is requeued as a new attempt once the agent reports it stopped.
	PreemptRequested bool `json:"preempt_requested,omitempty"`
	// UserHold is set by `rota hold` and cleared by `rota release`.
	UserHold bool `json:"user_hold,omitempty"`
	// ArrayID is the ID of the array's first job; ArrayIndex the job's index in it.
	ArrayID    int64 `json:"array_id,omitempty"`
	ArrayIndex *int  `json:"array_index,omitempty"`
	// Array, in a listing asked for with arrays=collapse, sums up the array's listed
	// jobs, this one the first of them.
	Array *ArraySummary `json:"array,omitempty"`
	// ArrayLimit is the most jobs of the array active at once (0: no limit).
	ArrayLimit int `json:"array_limit,omitempty"`
	// Borrowing is true while the job runs on GPUs beyond its team's guaranteed quota.
	Borrowing bool `json:"borrowing,omitempty"`
	// BorrowingInTeam is true while the job runs beyond its project's guaranteed quota
	// but within its team's: it uses another project's idle share of the team, and is
	// reclaimed, after work borrowing across teams, by in-quota jobs of its team.
	BorrowingInTeam bool `json:"borrowing_in_team,omitempty"`
	// BudgetWarning says the job's team or project has passed the soft limit of its
	// GPU-hour budget for the current period (API only, not stored).
	BudgetWarning string `json:"budget_warning,omitempty"`
	// LastCheckpoint is when the job last reported a checkpoint through ROTA_EVENTS_FILE.
	LastCheckpoint *time.Time `json:"last_checkpoint,omitempty"`
	// Stopping is set while the other ranks of a multi-node attempt are being stopped
	// because one rank failed or its node was lost; it names the cause. The attempt ends
	// once every rank has reported.
	Stopping string `json:"stopping,omitempty"`
	// Failures counts the attempts that failed by the job's own doing (non-zero exit,
	// failed start) and were charged to its retries.
	Failures int `json:"failures,omitempty"`
	// NotBefore holds a job that is to be retried until its backoff has passed.
	NotBefore *time.Time `json:"not_before,omitempty"`
	// SubmittedBy names who submitted the job when it is not Spec.User: an admin
	// submitting on another user's behalf.
	SubmittedBy string `json:"submitted_by,omitempty"`
	// Checkpoints says where the job's ROTA_CHECKPOINT_DIR lives and whether a requeued
	// attempt on another node finds it (API only).
	Checkpoints string `json:"checkpoints,omitempty"`
	// Priority is the pending job's score, factor by factor (API only, not stored).
	Priority *Priority `json:"priority,omitempty"`
	// IdleSince is when every GPU of the running job last fell below its queue's idle
	// threshold and stayed there; nil while it computes or without telemetry.
	IdleSince *time.Time `json:"idle_since,omitempty"`
	// IdleWarned is set once the job has been warned (notice file, event) that it holds
	// GPUs without using them.
	IdleWarned bool `json:"idle_warned,omitempty"`
	// Usage is what the current or last attempt used, over all its nodes (API only).
	Usage *Usage `json:"usage,omitempty"`
	// DeadlineResult is DeadlineMet or DeadlineMissed once the job's deadline is decided:
	// a start-by deadline when the job first starts, or passes before it does; a finish-by
	// one when the job succeeds, fails or times out, or passes before it ends. Empty while
	// undecided, without a deadline, and for a job cancelled before its deadline.
	DeadlineResult string `json:"deadline_result,omitempty"`
	// DeadlineMissedBy is how late the job started or ended, in seconds, for a missed
	// deadline; 0 while it still waits or runs past it.
	DeadlineMissedBy int64 `json:"deadline_missed_by_s,omitempty"`
	// DeadlineWarning says, for a job whose deadline is still open, why it looks
	// unreachable: the estimated start is too late, or its latest start has passed (API
	// only, not stored).
	DeadlineWarning string `json:"deadline_warning,omitempty"`
}

// Stat summarises one measured quantity over an attempt's samples.
type Stat struct {
	Mean float64 `json:"mean"`
	P95  float64 `json:"p95"`
	Max  float64 `json:"max"`
	Last float64 `json:"last"`
}

// Usage is what an attempt (or one rank of it) used, from the agents' telemetry. GPU
// utilisation is the mean over its GPUs; GPU memory, CPU and memory are summed over them
// and its processes. CPU is in percent of one CPU (250: two and a half CPUs busy).
type Usage struct {
	// Samples is how many telemetry readings the figures come from; zero means no
	// telemetry reached the server (the figures are then unknown, not zero).
	Samples     int       `json:"samples"`
	First       time.Time `json:"first"`
	Last        time.Time `json:"last"`
	GPUUtilPct  Stat      `json:"gpu_util_pct"`
	GPUMemoryMB Stat      `json:"gpu_memory_mb"`
	CPUPct      Stat      `json:"cpu_pct"`
	MemoryMB    Stat      `json:"memory_mb"`
	// PeakMemoryMB is the cgroup's peak memory, where the node measures it.
	PeakMemoryMB int64 `json:"peak_memory_mb,omitempty"`
}

// Priority explains a pending job's place in the queue, like Slurm's sprio: the queue's
// tier orders first, then the sum of the weighted factors.
type Priority struct {
	Tier      int     `json:"tier"`
	Score     float64 `json:"score"`
	FairShare float64 `json:"fair_share"`
	Age       float64 `json:"age"`
	Size      float64 `json:"size"`
	Deadline  float64 `json:"deadline,omitempty"`
	Nice      float64 `json:"nice"`
}

// Quota bounds a team's GPUs of one model: work up to Guaranteed is in quota; beyond it, up
// to Limit, the team borrows idle GPUs and that work may be preempted.
type Quota struct {
	Guaranteed int `json:"guaranteed" yaml:"guaranteed"`
	Limit      int `json:"limit" yaml:"limit"`
}

// Budget bounds the GPU-hours a team or project uses in each calendar period (UTC): at
// Soft an event is recorded and the team's webhooks are told, once per period; at Hard
// its new jobs stay pending until the period ends or the budget is raised (running jobs
// go on). Zero Soft or Hard: no such limit.
type Budget struct {
	// Period is BudgetDay, BudgetWeek (ISO weeks, from Monday) or BudgetMonth.
	Period string  `json:"period" yaml:"period"`
	Soft   float64 `json:"soft_gpu_hours,omitempty" yaml:"soft_gpu_hours"`
	Hard   float64 `json:"hard_gpu_hours,omitempty" yaml:"hard_gpu_hours"`
}

// Budget periods.
const (
	BudgetDay   = "day"
	BudgetWeek  = "week"
	BudgetMonth = "month"
)

// BudgetPeriods lists the periods a budget may have.
var BudgetPeriods = []string{BudgetDay, BudgetWeek, BudgetMonth}

// PeriodOf returns the calendar period (UTC) of the given kind that holds t: its start,
// its end and its name ("2026-12-01", "2026-W49", "2026-12").
func PeriodOf(kind string, t time.Time) (start, end time.Time, name string) {
	t = t.UTC()
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	switch kind {
	case BudgetDay:
		return day, day.AddDate(0, 0, 1), day.Format("2006-01-02")
	case BudgetWeek:
		start = day.AddDate(0, 0, -((int(day.Weekday()) + 6) % 7))
		y, w := start.ISOWeek()
		return start, start.AddDate(0, 0, 7), fmt.Sprintf("%d-W%02d", y, w)
	default:
		start = time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
		return start, start.AddDate(0, 1, 0), start.Format("2006-01")
	}
}

// Project is a part of a team's work with its own quotas and budget, drawn from the
// team's: a project's guarantee or limit never exceeds its team's for the same resource,
// and its projects' guarantees together fit in the team's.
type Project struct {
	Name string `json:"name" yaml:"name"`
	// Quotas by GPU model, as the team's; the key "*" applies to any model not named.
	Quotas map[string]Quota `json:"quotas,omitempty" yaml:"quotas"`
	// CPUQuota and MemoryQuotaMB bound the CPU cores and memory (MB) the project's jobs
	// request; nil: bounded by the team's only.
	CPUQuota      *Quota `json:"cpu_quota,omitempty" yaml:"cpu_quota,omitempty"`
	MemoryQuotaMB *Quota `json:"memory_quota_mb,omitempty" yaml:"memory_quota_mb,omitempty"`
	// Budget is the project's GPU-hour budget; nil: none.
	Budget *Budget `json:"budget,omitempty" yaml:"budget,omitempty"`
}

// Team is a tenant.
type Team struct {
	Name string `json:"name" yaml:"name"`
	// Quotas by GPU model; the key "*" applies to any model not named.
	Quotas map[string]Quota `json:"quotas,omitempty" yaml:"quotas"`
	// CPUQuota and MemoryQuotaMB bound the CPU cores and memory (MB) the team's jobs
	// request; nil: not bounded.
	CPUQuota      *Quota `json:"cpu_quota,omitempty" yaml:"cpu_quota,omitempty"`
	MemoryQuotaMB *Quota `json:"memory_quota_mb,omitempty" yaml:"memory_quota_mb,omitempty"`
	// Budget is the team's GPU-hour budget, over all its jobs; nil: none.
	Budget *Budget `json:"budget,omitempty" yaml:"budget,omitempty"`
	// Projects divide the team's work; a job names one with JobSpec.Project.
	Projects []Project `json:"projects,omitempty" yaml:"projects,omitempty"`
	// Weight is the team's fair-share weight (default 1).
	Weight float64 `json:"weight" yaml:"weight"`
	// Members are the users whose jobs default to this team.
	Members []string `json:"members,omitempty" yaml:"members"`
	// Notify lists webhooks told of the events of every job of the team.
	Notify []Notify `json:"notify,omitempty" yaml:"notify"`
	// Usage is the team's decayed GPU-hours (API only, not stored).
	UsageGPUHours float64 `json:"usage_gpu_hours" yaml:"-"`
	// GPUsInUse by model (API only).
	GPUsInUse map[string]int `json:"gpus_in_use,omitempty" yaml:"-"`
}

// TeamList is the answer to GET /api/v1/teams.
type TeamList struct {
	Teams []Team `json:"teams"`
}

// Reservation holds GPUs for a team in a time window, in one of two forms. By count (no
// Nodes): GPUs GPUs of model Model ("": any) in pool Pool ("": any), on whichever nodes the
// scheduler finds them free. By node: the whole nodes Nodes, GPUs being the GPUs on them.
type Reservation struct {
	ID    int64     `json:"id"`
	Name  string    `json:"name"`
	Team  string    `json:"team"`
	GPUs  int       `json:"gpus"`
	Nodes []string  `json:"nodes"`
	Model string    `json:"model,omitempty"`
	Pool  string    `json:"pool,omitempty"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Used and Held describe a reservation by count while its window is open (API only):
	// the team's GPUs in use of its model and pool, up to GPUs, and how many of the rest
	// are free and kept for the team now.
	Used int `json:"used,omitempty"`
	Held int `json:"held,omitempty"`
}

// ByCount reports whether the reservation holds a number of GPUs rather than nodes.
func (r *Reservation) ByCount() bool { return len(r.Nodes) == 0 }

// ReservationList is the answer to GET /api/v1/reservations.
type ReservationList struct {
	Reservations []Reservation `json:"reservations"`
}

// Why is the answer to GET /api/v1/jobs/{id}/why: one plain sentence per reason.
type Why struct {
	JobID          int64      `json:"job_id"`
	State          JobState   `json:"state"`
	Reasons        []string   `json:"reasons"`
	EstimatedStart *time.Time `json:"estimated_start,omitempty"`
}

// Placement is the part of an attempt that lands on one node: one rank of a multi-node
// job, whose rank is its index in Attempt.Placements.
type Placement struct {
	Node       string   `json:"node"`
	GPUIndices []int    `json:"gpu_indices"`
	GPUIDs     []string `json:"gpu_ids"`
	CPUs       int      `json:"cpus"`
	MemoryMB   int64    `json:"memory_mb"`
	// GPUShare is the share of its one GPU this rank holds (0.25: a quarter), and
	// GPUMemoryMB the slice of the GPU's memory that goes with it; both absent for
	// whole GPUs.
	GPUShare    float64 `json:"gpu_share,omitempty"`
	GPUMemoryMB int64   `json:"gpu_memory_mb,omitempty"`
	// How this rank is doing, as its node reported it: empty until it starts, RUNNING,
	// then how it ended. A multi-node attempt ends when every rank has ended.
	State    JobState   `json:"state,omitempty"`
	ExitCode *int       `json:"exit_code,omitempty"`
	EndTime  *time.Time `json:"end_time,omitempty"`
	Reason   string     `json:"reason,omitempty"`
	Message  string     `json:"message,omitempty"`
	// Usage is what this rank used; filled in when the rank ends (and live in the API).
	Usage *Usage `json:"usage,omitempty"`
	// ImageDigest is the digest of the container image this rank actually ran.
	ImageDigest string `json:"image_digest,omitempty"`
	// LogSize is the size of the rank's whole log, as its node reported it with the
	// rank's end; 0 when unknown.
	LogSize int64 `json:"log_size,omitempty"`
}

// GPUs is what the rank holds of GPUs: its share of one GPU, or its whole GPUs.
// Accounting charges it, so a job that shares a GPU pays its share.
func (p *Placement) GPUs() float64 {
	if p.GPUShare > 0 {
		return p.GPUShare
	}
	return float64(len(p.GPUIndices))
}

// Attempt is one placement of a job.
type Attempt struct {
	JobID      int64       `json:"job_id"`
	N          int         `json:"attempt"`
	Placements []Placement `json:"placements"`
	State      JobState    `json:"state"`
	AssignTime time.Time   `json:"assign_time"`
	StartTime  *time.Time  `json:"start_time,omitempty"`
	EndTime    *time.Time  `json:"end_time,omitempty"`
	ExitCode   *int        `json:"exit_code,omitempty"`
	Reason     string      `json:"reason,omitempty"`
	Message    string      `json:"message,omitempty"`
}

// NodeState is the scheduling state of a node.
type NodeState string

const (
	NodeReady    NodeState = "READY"
	NodeDraining NodeState = "DRAINING"
	NodeDrained  NodeState = "DRAINED"
	NodeNotReady NodeState = "NOT_READY"
	NodeLost     NodeState = "LOST"
)

// NodeStates are the states a node may be in, in the order rota lists them.
var NodeStates = []NodeState{NodeReady, NodeDraining, NodeDrained, NodeNotReady, NodeLost}

// Valid reports whether s is one of NodeStates.
func (s NodeState) Valid() bool { return slices.Contains(NodeStates, s) }

// GPU is one device as the agent discovered it.
type GPU struct {
	Index    int    `json:"index"`
	UUID     string `json:"uuid"`
	Model    string `json:"model"`
	MemoryMB int64  `json:"memory_mb"`
	// Healthy is false when the device reported errors that make it unusable; Health
	// then says why (an XID, uncorrectable ECC errors, the device vanished). An
	// unhealthy GPU takes no new work.
	Healthy bool   `json:"healthy"`
	Health  string `json:"health,omitempty"`
	// Missing is set when a GPU discovered at start can no longer be found (fallen off
	// the bus): the node is then degraded.
	Missing  bool   `json:"missing,omitempty"`
	PCIBusID string `json:"pci_bus_id,omitempty"`
	// NUMANode is the memory node of the CPU socket the GPU hangs off; nil: unknown.
	NUMANode *int `json:"numa_node,omitempty"`
	// NVLinkPeers lists the indices of the GPUs this one reaches over NVLink.
	NVLinkPeers []int `json:"nvlink_peers,omitempty"`
	// MIGMode is "enabled", "disabled", or empty where the GPU has no MIG. rota reads it
	// and never changes it.
	MIGMode string `json:"mig_mode,omitempty"`
	// MIGParent is set on a MIG device: the index of the GPU it is an instance of. Such a
	// device is numbered 100 + 10×parent + NVML's MIG device index, so it never meets a
	// whole GPU's index; its GPU is then not listed as a device of its own.
	MIGParent *int `json:"mig_parent,omitempty"`
	// MIGProfile is a MIG device's profile as NVIDIA names it, e.g. "3g.40gb".
	MIGProfile string `json:"mig_profile,omitempty"`
}

// GPUSample is one reading of one GPU.
type GPUSample struct {
	Index          int     `json:"index"`
	UtilizationPct float64 `json:"utilization_pct"`
	MemoryUsedMB   int64   `json:"memory_used_mb"`
	PowerW         float64 `json:"power_w"`
	TemperatureC   float64 `json:"temperature_c"`

	// UtilizationUnknown is set where the device cannot tell its utilisation (NVML gives
	// none per MIG device); UtilizationPct is then 0 and means nothing.
	UtilizationUnknown bool `json:"utilization_unknown,omitempty"`
}

// GPUProcess is a process holding memory on a GPU.
type GPUProcess struct {
	// GPU is the device's index on its node.
	GPU      int    `json:"gpu"`
	PID      int    `json:"pid"`
	MemoryMB int64  `json:"memory_mb"`
	Command  string `json:"command,omitempty"`
	// JobID and Attempt name the live attempt the process belongs to (by cgroup or
	// process tree); both zero for a leftover: a process of no live attempt.
	JobID   int64 `json:"job_id,omitempty"`
	Attempt int   `json:"attempt,omitempty"`
	// Since is when the agent first saw a leftover process.
	Since *time.Time `json:"since,omitempty"`
}

// TaskUsage is what one attempt uses on one node at one reading.
type TaskUsage struct {
	JobID   int64 `json:"job_id"`
	Attempt int   `json:"attempt"`
	// GPUUtilPct is the mean over the task's GPUs; GPUMemoryMB the sum over them.
	GPUUtilPct  float64 `json:"gpu_util_pct"`
	GPUMemoryMB int64   `json:"gpu_memory_mb"`
	// CPUPct is in percent of one CPU since the previous reading; MemoryMB is resident.
	CPUPct   float64 `json:"cpu_pct"`
	MemoryMB int64   `json:"memory_mb"`
}

// Telemetry is one reading of a node, taken every few seconds and sent with the next
// heartbeat.
type Telemetry struct {
	Time time.Time   `json:"time"`
	GPUs []GPUSample `json:"gpus"`
	// Processes lists the GPU processes, leftovers included.
	Processes []GPUProcess `json:"processes,omitempty"`
	Tasks     []TaskUsage  `json:"tasks,omitempty"`
}

// HealthCheck is the last run of a node's health-check command.
type HealthCheck struct {
	Time     time.Time `json:"time"`
	OK       bool      `json:"ok"`
	ExitCode int       `json:"exit_code"`
	// Output is the end of what the command printed.
	Output string `json:"output,omitempty"`
}

// Inventory is what an agent reports about its machine.
type Inventory struct {
	CPUs          int               `json:"cpus"`
	MemoryMB      int64             `json:"memory_mb"`
	GPUs          []GPU             `json:"gpus"`
	Labels        map[string]string `json:"labels,omitempty"`
	DriverVersion string            `json:"driver_version,omitempty"`
	CUDAVersion   string            `json:"cuda_version,omitempty"`
	// DeviceSource says where the GPUs came from: "nvml", "fake" or "none".
	DeviceSource string `json:"device_source"`
	Hostname     string `json:"hostname,omitempty"`
	// ContainerRuntime is the runtime image jobs run through ("podman", "docker",
	// "apptainer"); empty where the node has none, and image jobs are not placed there.
	ContainerRuntime string `json:"container_runtime,omitempty"`
	// Limits says how the node enforces CPU and memory limits: "cgroup2", "cgroup1" or
	// "none".
	Limits string `json:"limits,omitempty"`
}

// Node is a machine that runs jobs, as the server knows it.
type Node struct {
	Name string `json:"name"`
	Inventory
	State         NodeState `json:"state"`
	LastHeartbeat time.Time `json:"last_heartbeat"`
	// Agent describes the agent process serving the node, from its last heartbeat.
	Agent *AgentInfo `json:"agent,omitempty"`
	// Syncing is set from an agent's (re)connection until it reports that nothing runs
	// on the node that the server does not list as live; the node takes no new work
	// meanwhile, so a returning node can never run an old attempt beside a new one.
	Syncing bool `json:"syncing,omitempty"`
	// SyncEpoch counts the times the node started syncing; only a heartbeat that speaks
	// of the current one ends it.
	SyncEpoch uint64 `json:"sync_epoch,omitempty"`
	// Filled in by the API from the live state; not stored.
	GPUsUsed int `json:"gpus_used"`
	CPUsUsed int `json:"cpus_used"`
	// Jobs lists the IDs of active jobs on the node (API only).
	Jobs []int64 `json:"jobs,omitempty"`
	// UsedGPUs are the indices, ascending, of the GPUs active jobs hold, whole or in
	// shares: GPUsUsed of them (API only).
	UsedGPUs []int `json:"used_gpus,omitempty"`
	// IdleGPUs are those of UsedGPUs whose jobs are all idle: every GPU of each below
	// its queue's idle threshold by the latest reading (Job.IdleSince) (API only).
	IdleGPUs []int `json:"idle_gpus,omitempty"`
	// Degraded lists why the node is degraded (a GPU vanished, its health check fails);
	// empty when it is not. Derived from the agent's reports.
	Degraded []string `json:"degraded,omitempty"`
	// HealthCheck is the last result of the node's health-check command, if it has one.
	HealthCheck *HealthCheck `json:"health_check,omitempty"`
	// DataDirProblem is why the node's agent cannot run attempts (its data dir's disk is
	// full, say, or it cannot start their supervisors), as it last reported; empty while
	// it can. Like a failed health check it keeps new work off the node.
	DataDirProblem string `json:"data_dir_problem,omitempty"`
	// ClockOffsetS is how far the node's clock is behind the server's, in seconds
	// (negative: ahead of it), where they differ by 2 s or more; the server converts the
	// times the node reports, and the time limits it hands it, by as much (API only).
	ClockOffsetS int64 `json:"clock_offset_s,omitempty"`
	// Telemetry is the node's last reading (API only, not stored).
	Telemetry *Telemetry `json:"telemetry,omitempty"`
	// Leftovers are GPU processes of no live attempt. Their GPUs take no new work until
	// they are gone (API only).
	Leftovers []GPUProcess `json:"leftovers,omitempty"`
	// HeldGPUs are the indices of GPUs kept from new work by leftovers (API only).
	HeldGPUs []int `json:"held_gpus,omitempty"`
	// SharedGPUs lists the node's GPUs that jobs share, with their tenants (API only).
	SharedGPUs []SharedGPU `json:"shared_gpus,omitempty"`
	// Maintenance is the node's drain: why, and the window, planned or open; nil when
	// the node is not drained by an operator.
	Maintenance *Maintenance `json:"maintenance,omitempty"`
	// Drift lists the node's versions outside its pool's wanted ranges, as of its last
	// heartbeat; empty when it does not drift.
	Drift []VersionDrift `json:"drift,omitempty"`
	// DriftDrain is set while the node is draining or drained on its own because it
	// drifts (Pool.DrainOnDrift): it returns to service when its versions are back in
	// range, unless an operator drained it meanwhile.
	DriftDrain bool `json:"drift_drain,omitempty"`
}

// SharedGPU is a GPU that jobs share: its tenants and what they hold of it.
type SharedGPU struct {
	Index int `json:"index"`
	// Share is the part of the GPU its tenants hold together (0.75), MemoryMB the memory
	// of their slices together.
	Share    float64  `json:"share"`
	MemoryMB int64    `json:"memory_mb"`
	Tenants  []Tenant `json:"tenants"`
}

// Tenant is a job that holds a share of a GPU.
type Tenant struct {
	JobID    int64   `json:"job_id"`
	Share    float64 `json:"share"`
	MemoryMB int64   `json:"memory_mb"`
}

// Maintenance is an operator's drain of a node: a window from Start in which the node
// takes no new work. Before Start the node runs only jobs whose time limit ends them by
// then; from Start it is DRAINING, then DRAINED; at End it returns to service by itself.
type Maintenance struct {
	Reason string    `json:"reason"`
	Start  time.Time `json:"start"`
	// End is when the node returns to service on its own; nil: when an operator resumes it.
	End *time.Time `json:"end,omitempty"`
	// By is who asked for it.
	By string `json:"by,omitempty"`
}

// DrainRequest is the optional body of POST /api/v1/nodes/{name}/drain.
type DrainRequest struct {
	// Reason says why, in at most MaxDrainReason characters; empty: DefaultDrainReason.
	Reason string `json:"reason,omitempty"`
	// At plans the window to start later; nil (or now): the drain starts at once.
	At *time.Time `json:"at,omitempty"`
	// Until ends the window: the node returns to service by itself then; nil: at resume.
	Until *time.Time `json:"until,omitempty"`
}

// Limits of a drain request.
const (
	MaxDrainReason     = 200
	DefaultDrainReason = "no reason given"
)

// TelemetryPoint is one point of a downsampled history: the mean over its interval.
type TelemetryPoint struct {
	Time        time.Time `json:"time"`
	GPUUtilPct  float64   `json:"gpu_util_pct"`
	GPUMemoryMB float64   `json:"gpu_memory_mb"`
	PowerW      float64   `json:"power_w,omitempty"`
	// TemperatureC is for GPU series only; CPUPct and MemoryMB for attempt series only.
	TemperatureC float64 `json:"temperature_c,omitempty"`
	CPUPct       float64 `json:"cpu_pct,omitempty"`
	MemoryMB     float64 `json:"memory_mb,omitempty"`
}

// TelemetrySeries is the history of one GPU or one attempt.
type TelemetrySeries struct {
	// Node and GPU name a GPU series; JobID and Attempt an attempt series.
	Node    string `json:"node,omitempty"`
	GPU     *int   `json:"gpu,omitempty"`
	JobID   int64  `json:"job_id,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	// StepSeconds is the interval each point covers.
	StepSeconds float64          `json:"step_s"`
	Points      []TelemetryPoint `json:"points"`
}

// TelemetryList is the answer to GET /api/v1/jobs/{id}/telemetry and
// GET /api/v1/nodes/{name}/telemetry.
type TelemetryList struct {
	Series []TelemetrySeries `json:"series"`
}

// AgentInfo identifies the agent process that serves a node. One node name has one live
// agent: a second process claiming it is refused while the first is heard from.
type AgentInfo struct {
	// Instance is random per agent process.
	Instance string `json:"instance"`
	PID      int    `json:"pid,omitempty"`
	// Address is where its heartbeats come from.
	Address string `json:"address,omitempty"`
	Version string `json:"version,omitempty"`
	// CertSerial is the serial of the client certificate it authenticated with, if any.
	CertSerial string `json:"cert_serial,omitempty"`
}

// Event is one entry of the append-only audit trail: every transition and every change
// made through the API, with who made it, in which role, from where.
type Event struct {
	ID      int64     `json:"id"`
	Time    time.Time `json:"time"`
	Actor   string    `json:"actor"`
	Kind    string    `json:"kind"`
	JobID   int64     `json:"job_id,omitempty"`
	Attempt int       `json:"attempt,omitempty"`
	Node    string    `json:"node,omitempty"`
	From    JobState  `json:"from,omitempty"`
	To      JobState  `json:"to,omitempty"`
	Reason  string    `json:"reason,omitempty"`
	Message string    `json:"message,omitempty"`
	// Role is the actor's role, where the actor is a person or script.
	Role string `json:"role,omitempty"`
	// Source is the address the change came from.
	Source string `json:"source,omitempty"`
	// Before and After are a changed setting's value, as JSON, before and after.
	Before json.RawMessage `json:"before,omitempty"`
	After  json.RawMessage `json:"after,omitempty"`
}

// Event kinds. Transition, checkpoint and preempt record what happened to jobs; the rest
// record changes made through the API and are what `rota admin audit` lists.
const (
	EventSubmit      = "submit"
	EventTransition  = "transition"
	EventCheckpoint  = "checkpoint"
	EventPreempt     = "preempt"
	EventCancel      = "cancel"
	EventHold        = "hold"
	EventRelease     = "release"
	EventNode        = "node"
	EventDrain       = "drain"
	EventQueue       = "queue"
	EventTeam        = "team"
	EventQuota       = "quota"
	EventUser        = "user"
	EventToken       = "token"
	EventJoin        = "join"
	EventReservation = "reservation"
	EventConfig      = "config"
	// EventHealth records a node's health changing: a GPU turned unhealthy, the node became
	// degraded or recovered, a leftover process appeared or the last one went.
	EventHealth = "health"
	// EventIdle records a job warned that it holds GPUs without using them.
	EventIdle = "idle"
	// EventDeadline records a job's deadline passing before it started or ended.
	EventDeadline = "deadline"
	// EventRequest records a request filed, approved, denied or expired, and an approved
	// grant applied or ended (see Request).
	EventRequest = "request"
	// EventBudget records a team or project passing the soft or hard limit of its
	// GPU-hour budget, once per period and limit.
	EventBudget = "budget"
	// EventAdmin is what older servers recorded for every administrative change.
	EventAdmin = "admin"
)

// EventKinds lists every kind, for validation and documentation.
func EventKinds() []string {
	return []string{EventSubmit, EventTransition, EventCheckpoint, EventPreempt, EventCancel, EventHold, EventRelease,
		EventNode, EventDrain, EventQueue, EventTeam, EventQuota, EventUser, EventToken, EventJoin, EventReservation,
		EventConfig, EventHealth, EventIdle, EventDeadline, EventRequest, EventBudget, EventAdmin}
}

// Queue is a class of work. Issue-2 queues carry a priority tier and time limits.
type Queue struct {
	Name string `json:"name" yaml:"name"`
	// Tier orders queues: a higher tier is scheduled first.
	Tier             int   `json:"tier" yaml:"tier"`
	Preemptible      bool  `json:"preemptible" yaml:"preemptible"`
	DefaultTimeLimit int64 `json:"default_time_limit_s" yaml:"default_time_limit_s"`
	// MaxTimeLimit of 0 means unlimited.
	MaxTimeLimit int64 `json:"max_time_limit_s" yaml:"max_time_limit_s"`
	// Grace is the default seconds between stop signal and kill; MaxGrace bounds what a
	// job may ask for (0: Grace is also the maximum).
	Grace    int64 `json:"grace_s" yaml:"grace_s"`
	MaxGrace int64 `json:"max_grace_s,omitempty" yaml:"max_grace_s"`
	// NeverPreempt protects the queue's jobs even while they borrow (services).
	NeverPreempt bool `json:"never_preempt,omitempty" yaml:"never_preempt"`
	// Pools limits the queue to nodes whose "pool" label is one of these (empty: any node).
	Pools []string `json:"pools,omitempty" yaml:"pools"`
	// Users and Teams limit who may submit (both empty: anyone).
	Users []string `json:"users,omitempty" yaml:"users"`
	Teams []string `json:"teams,omitempty" yaml:"teams"`
	// UserGPULimit caps the GPUs one user's jobs in this queue hold at once (0: no cap).
	UserGPULimit int `json:"user_gpu_limit,omitempty" yaml:"user_gpu_limit"`
	// RestartPolicy is the default of the queue's jobs (see JobSpec.RestartPolicy).
	RestartPolicy string `json:"restart_policy,omitempty" yaml:"restart_policy"`
	// CheckpointRoot overrides the cluster's checkpoint root for this queue's jobs.
	CheckpointRoot string `json:"checkpoint_root,omitempty" yaml:"checkpoint_root"`
	// IdleAfter, when above zero, is the seconds a running job's GPUs may all stay below
	// IdleThresholdPct utilisation before IdleAction applies: "warn" (flag it, write its
	// notice file, record an event) or "stop" (warn, then stop it after its grace with
	// reason idle_reclaimed).
	IdleAfter        int64   `json:"idle_after_s,omitempty" yaml:"idle_after_s"`
	IdleAction       string  `json:"idle_action,omitempty" yaml:"idle_action"`
	IdleThresholdPct float64 `json:"idle_threshold_pct,omitempty" yaml:"idle_threshold_pct"`
	// Images, when not empty, are the image prefixes the queue's jobs may run (e.g.
	// "registry.example.com/ml/"); an image job matching none is refused at submit.
	// Empty: any image.
	Images []string `json:"images,omitempty" yaml:"images"`
}

// Idle actions.
const (
	IdleWarn = "warn"
	IdleStop = "stop"
)

// DefaultIdleThresholdPct is the utilisation below which a GPU counts as idle.
const DefaultIdleThresholdPct = 5

// Error is the body of every non-2xx API answer.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
	// Role and Rule explain a 403: the caller's role and the rule that refused it.
	Role string `json:"role,omitempty"`
	Rule string `json:"rule,omitempty"`
}

func (e *Error) Error() string {
	if e.Field != "" {
		return e.Field + ": " + e.Message
	}
	return e.Message
}

// Error codes.
const (
	CodeInvalid  = "invalid"
	CodeNotFound = "not_found"
	CodeConflict = "conflict"
	CodeTooLarge = "too_large"
	CodeInternal = "internal"
	// CodeUnauthorized: no valid credentials (401).
	CodeUnauthorized = "unauthorized"
	// CodeForbidden: valid credentials whose role or ownership does not allow this (403).
	CodeForbidden = "forbidden"
	// CodeMethodNotAllowed: the path exists but not with this method; Allow lists those
	// it takes (405).
	CodeMethodNotAllowed = "method_not_allowed"
	// CodeRateLimited: too many requests; Retry-After says when to try again (429).
	CodeRateLimited = "rate_limited"
	// CodeUnsupportedMedia: a body of the wrong Content-Type (415).
	CodeUnsupportedMedia = "unsupported_media_type"
	// CodeUnavailable: the server cannot answer now, e.g. while it re-reads the store
	// after a commit whose outcome it could not learn (503).
	CodeUnavailable = "unavailable"
	// CodeForwardFailed: a standby forwarded the request to the leader and lost the
	// connection after sending it, so the leader may or may not have acted on it (502).
	CodeForwardFailed = "forward_failed"
	// CodeDiskFull: the server's disk has too little room left to take this, such as the
	// bytes of a job's log (507).
	CodeDiskFull = "disk_full"
)

// JobList is the answer to GET /api/v1/jobs.
type JobList struct {
	Jobs []Job `json:"jobs"`
	// Next is the cursor (after=) for the next page, empty at the end. Prev, given for
	// the jobs not ended, is the cursor (before=) for the page before, empty at the start.
	Next string `json:"next,omitempty"`
	Prev string `json:"prev,omitempty"`
}

// Config is the administrative configuration: what `rota server --config FILE` reads at
// start and `rota admin apply -f FILE` sends to PUT /api/v1/config. It is applied whole or
// not at all. Queues and teams it does not name are left as they are.
type Config struct {
	Queues []Queue `json:"queues,omitempty" yaml:"queues"`
	Teams  []Team  `json:"teams,omitempty" yaml:"teams"`
	// Pools, when given, replace the pool settings whole.
	Pools []Pool `json:"pools,omitempty" yaml:"pools"`
	// Execution and Limits, when given, replace the current settings whole.
	Execution *Execution `json:"execution,omitempty" yaml:"execution,omitempty"`
	Limits    *Limits    `json:"limits,omitempty" yaml:"limits,omitempty"`
	// Notifications, when given, replace the webhook settings whole.
	Notifications *Notifications `json:"notifications,omitempty" yaml:"notifications,omitempty"`
}

// Pool is the settings of the nodes whose "pool" label names it. A pool without settings
// shares no GPUs and is open to every queue.
type Pool struct {
	Name string `json:"name" yaml:"name"`
	// Sharing lets jobs that ask for a share of a GPU (gpu_share, gpu_memory_mb) share
	// the pool's GPUs; whole-GPU jobs never land on a GPU with tenants.
	Sharing bool `json:"sharing,omitempty" yaml:"sharing"`
	// Exclusive keeps the pool's nodes for the queues that name the pool: jobs of other
	// queues, even those that may use any node, never land there.
	Exclusive bool `json:"exclusive,omitempty" yaml:"exclusive"`
	// Driver and CUDA are the version ranges the pool's nodes are wanted in (same
	// language as JobSpec.CUDA); empty: any. A node outside them drifts (Node.Drift).
	Driver string `json:"driver,omitempty" yaml:"driver"`
	CUDA   string `json:"cuda,omitempty" yaml:"cuda"`
	// DrainOnDrift drains a node of the pool on its own when it starts to drift, and
	// returns it to service when its versions are back in range.
	DrainOnDrift bool `json:"drain_on_drift,omitempty" yaml:"drain_on_drift"`
}

// VersionDrift is one version of a node outside its pool's wanted range.
type VersionDrift struct {
	// Component is DriftDriver or DriftCUDA.
	Component string `json:"component"`
	// Version is what the node reports; empty when it reports none.
	Version string `json:"version"`
	// Wanted is the pool's range, Pool its name.
	Wanted string `json:"wanted"`
	Pool   string `json:"pool"`
}

// Drift components.
const (
	DriftDriver = "driver"
	DriftCUDA   = "cuda"
)

// String says it in one sentence fragment, e.g. "driver 535.54 outside wanted >=550 for
// pool train".
func (d VersionDrift) String() string {
	what := "driver"
	if d.Component == DriftCUDA {
		what = "CUDA"
	}
	v := d.Version
	if v == "" {
		v = "(none reported)"
	}
	return what + " " + v + " outside wanted " + d.Wanted + " for pool " + d.Pool
}

// Execution holds cluster-wide settings of how jobs run.
type Execution struct {
	// CheckpointRoot is a directory mounted at the same path on every node (NFS, a
	// parallel file system, an object-store mount). When set, a job's
	// ROTA_CHECKPOINT_DIR is CheckpointRoot/<cluster>/<job> on every node for every
	// attempt; when empty, it is node-local and a requeued attempt on another node
	// starts without its checkpoints. A queue may override it.
	CheckpointRoot string `json:"checkpoint_root,omitempty" yaml:"checkpoint_root"`
	// DrainOnHealthFailure drains a node on its own when it becomes degraded (a GPU
	// vanished, its health check failed) or a GPU turns unhealthy, with the reason.
	DrainOnHealthFailure bool `json:"drain_on_health_failure,omitempty" yaml:"drain_on_health_failure"`
}

// Limits bound what one request and one user may ask of the server. Zero fields take the
// defaults (DefaultLimits).
type Limits struct {
	// MaxBodyBytes bounds any request body.
	MaxBodyBytes int64 `json:"max_body_bytes,omitempty" yaml:"max_body_bytes"`
	// MaxCommandBytes bounds a job's command and arguments together.
	MaxCommandBytes int `json:"max_command_bytes,omitempty" yaml:"max_command_bytes"`
	// MaxEnvBytes bounds a job's environment, names and values together.
	MaxEnvBytes int `json:"max_env_bytes,omitempty" yaml:"max_env_bytes"`
	// MaxNameLength bounds the names of jobs, users and nodes (queues and teams are at
	// most 128 characters whatever it says).
	MaxNameLength int `json:"max_name_length,omitempty" yaml:"max_name_length"`
	// MaxPendingPerUser bounds one user's jobs that have not started (pending or held).
	MaxPendingPerUser int `json:"max_pending_per_user,omitempty" yaml:"max_pending_per_user"`
	// SubmitsPerSecond and SubmitBurst rate-limit each user's submissions (an array
	// counts once); beyond them the answer is 429 with Retry-After.
	SubmitsPerSecond float64 `json:"submits_per_second,omitempty" yaml:"submits_per_second"`
	SubmitBurst      int     `json:"submit_burst,omitempty" yaml:"submit_burst"`
	// WritesPerSecond and WriteBurst rate-limit each user's other changes (cancel, hold,
	// release, tokens, requests, ...); beyond them the answer is 429 with Retry-After.
	// Admins' are not limited.
	WritesPerSecond float64 `json:"writes_per_second,omitempty" yaml:"writes_per_second"`
	WriteBurst      int     `json:"write_burst,omitempty" yaml:"write_burst"`
	// ReadSecondsPerSecond and ReadBurstSeconds bound the server time each user's reads
	// (GET requests) take: a read is let in while the user has time left and pays what it
	// took; beyond them the answer is 429 with Retry-After. MaxReadsInFlight bounds one
	// user's reads running at once. Admins' reads are not bounded.
	ReadSecondsPerSecond float64 `json:"read_seconds_per_second,omitempty" yaml:"read_seconds_per_second"`
	ReadBurstSeconds     float64 `json:"read_burst_seconds,omitempty" yaml:"read_burst_seconds"`
	MaxReadsInFlight     int     `json:"max_reads_in_flight,omitempty" yaml:"max_reads_in_flight"`
}

// OrDefaults returns l with every field it leaves zero taken from DefaultLimits.
func (l Limits) OrDefaults() Limits {
	d := DefaultLimits()
	d.MaxBodyBytes = cmp.Or(l.MaxBodyBytes, d.MaxBodyBytes)
	d.MaxCommandBytes = cmp.Or(l.MaxCommandBytes, d.MaxCommandBytes)
	d.MaxEnvBytes = cmp.Or(l.MaxEnvBytes, d.MaxEnvBytes)
	d.MaxNameLength = cmp.Or(l.MaxNameLength, d.MaxNameLength)
	d.MaxPendingPerUser = cmp.Or(l.MaxPendingPerUser, d.MaxPendingPerUser)
	d.SubmitsPerSecond = cmp.Or(l.SubmitsPerSecond, d.SubmitsPerSecond)
	d.SubmitBurst = cmp.Or(l.SubmitBurst, d.SubmitBurst)
	d.WritesPerSecond = cmp.Or(l.WritesPerSecond, d.WritesPerSecond)
	d.WriteBurst = cmp.Or(l.WriteBurst, d.WriteBurst)
	d.ReadSecondsPerSecond = cmp.Or(l.ReadSecondsPerSecond, d.ReadSecondsPerSecond)
	d.ReadBurstSeconds = cmp.Or(l.ReadBurstSeconds, d.ReadBurstSeconds)
	d.MaxReadsInFlight = cmp.Or(l.MaxReadsInFlight, d.MaxReadsInFlight)
	return d
}

// DefaultLimits are generous for people and scripts and stop floods and typos.
func DefaultLimits() Limits {
	return Limits{
		MaxBodyBytes:      1 << 20,
		MaxCommandBytes:   128 << 10,
		MaxEnvBytes:       256 << 10,
		MaxNameLength:     128,
		MaxPendingPerUser: 100_000,
		SubmitsPerSecond:  50,
		SubmitBurst:       200,
		// rota cancel of 500 jobs at once, then 50 a second.
		WritesPerSecond: 50,
		WriteBurst:      500,
		// A quarter of the server's time, sustained, and 20 s at once: rota queue reads
		// 100,000 jobs in about 5 s.
		ReadSecondsPerSecond: 0.25,
		ReadBurstSeconds:     20,
		MaxReadsInFlight:     16,
	}
}

// QueueList is the answer to GET /api/v1/queues.
type QueueList struct {
	Queues []Queue `json:"queues"`
}

// NodeList is the answer to GET /api/v1/nodes: the nodes that match its filters, by
// name, all of them or a page.
type NodeList struct {
	Nodes []Node `json:"nodes"`
	// Total counts the nodes that match; Offset is how many of them come before the
	// first listed.
	Total  int `json:"total"`
	Offset int `json:"offset"`
	// Next is the cursor (after=) for the page after this one, Prev (before=) for the
	// page before it; each empty when there is none.
	Next string `json:"next,omitempty"`
	Prev string `json:"prev,omitempty"`
	// Jobs, asked for with jobs=true, are the active jobs on the listed nodes that the
	// caller may read, by ID.
	Jobs []Job `json:"jobs,omitempty"`
}

// Top is the cluster at a glance, what `rota top` draws: the answer to GET /api/v1/top.
// Its figures count every node, and every job the caller may read, however few of them
// it lists, so that a screen of it costs the server what the screen shows.
type Top struct {
	Time time.Time `json:"time"`
	// Total sums every node; Pools sums the nodes of each pool, by name, the nodes with
	// no pool label under "".
	Total Load   `json:"total"`
	Pools []Load `json:"pools"`
	// Nodes are the first nodes by name, as many as were asked for, with what active
	// jobs hold on them as in GET /api/v1/nodes.
	Nodes []Node `json:"nodes"`
	// JobLabels names the jobs on the listed nodes that belong to an array,
	// ARRAYID_INDEX, as the job lists show them.
	JobLabels map[int64]string `json:"job_labels,omitempty"`
	// Running (ASSIGNED or RUNNING), Pending and Held count the caller's readable jobs,
	// and Queues the same jobs per queue, by name.
	Running int          `json:"running"`
	Pending int          `json:"pending"`
	Held    int          `json:"held"`
	Queues  []QueueDepth `json:"queues"`
	// RunningJobs are the first running jobs by ID. WaitingJobs are the jobs that wait,
	// pending before held, each soonest to start first, those with no estimate last,
	// then by ID. As many of each as were asked for.
	RunningJobs []Job `json:"running_jobs"`
	WaitingJobs []Job `json:"waiting_jobs"`
}

// QueueDepth counts the jobs of one queue that have not ended: those that wait (pending
// or held) with the GPUs they ask for, and those that run (ASSIGNED or RUNNING).
type QueueDepth struct {
	Queue       string `json:"queue"`
	Pending     int    `json:"pending"`
	Held        int    `json:"held"`
	WaitingGPUs int    `json:"waiting_gpus"`
	Running     int    `json:"running"`
}

// Add counts d of job j (1 to add it, -1 to take it away) by its state; an ended job
// counts in none.
func (q *QueueDepth) Add(j *Job, d int) {
	switch {
	case j.State == StatePending:
		q.Pending += d
		q.WaitingGPUs += d * j.Spec.GPUs
	case j.State == StateHeld:
		q.Held += d
		q.WaitingGPUs += d * j.Spec.GPUs
	case j.State.Active():
		q.Running += d
	}
}

// Load is what a set of nodes holds and, by their latest telemetry, what their GPUs do.
// A lost node counts in Nodes and GPUs, but its last reading no longer says what its
// GPUs do, so it adds nothing measured.
type Load struct {
	Pool     string `json:"pool,omitempty"`
	Nodes    int    `json:"nodes"`
	GPUs     int    `json:"gpus"`
	GPUsUsed int    `json:"gpus_used"`
	// GPUsMeasured counts the GPUs with a reading; GPUUtilPct is the mean utilisation
	// of those that report one (a MIG device does not), absent when none does.
	GPUsMeasured int      `json:"gpus_measured"`
	GPUUtilPct   *float64 `json:"gpu_util_pct,omitempty"`
	// GPUMemoryMB is the memory of the measured GPUs, GPUMemoryUsedMB what they use.
	GPUMemoryUsedMB int64   `json:"gpu_memory_used_mb"`
	GPUMemoryMB     int64   `json:"gpu_memory_mb"`
	PowerW          float64 `json:"power_w"`
	// States counts the GPUs by what they do; NodesDrifting the nodes whose versions
	// are outside their pool's wanted ranges; NodesWithProblems the nodes that need an
	// operator's look (Node.HasProblem), which the node list's problems=true lists.
	States            GPUStates `json:"gpu_states"`
	NodesDrifting     int       `json:"nodes_drifting"`
	NodesWithProblems int       `json:"nodes_with_problems"`

	utilGPUs int // the measured GPUs with a utilisation, and its sum over them
	utilSum  float64
}

// GPUState is what one GPU does, as the web UI's cells and the metrics show it. The
// states are in the order a GPU is judged: the first that applies is its state.
type GPUState int

const (
	GPUUnhealthy   GPUState = iota // the device reports errors, or fell off the bus
	GPUIdle                        // held by jobs, every one of them flagged idle
	GPUUsed                        // held by a job
	GPUHeld                        // kept from new work by leftover processes
	GPUUnavailable                 // free, on a node that takes no new work
	GPUFree
)

// StateOfGPU is what GPU g of node n does; inUse says whether active jobs hold it, idle
// whether every one of them is flagged idle.
func StateOfGPU(n *Node, g *GPU, inUse, idle bool) GPUState {
	switch {
	case !g.Healthy || g.Missing:
		return GPUUnhealthy
	case inUse && idle:
		return GPUIdle
	case inUse:
		return GPUUsed
	case slices.Contains(n.HeldGPUs, g.Index):
		return GPUHeld
	case !n.TakesWork():
		return GPUUnavailable
	}
	return GPUFree
}

// TakesWork reports whether new work may be placed on n: it is ready, its agent is done
// syncing, its health check, if it has one, passes, and its agent can run attempts.
func (n *Node) TakesWork() bool {
	return n.State == NodeReady && !n.Syncing && (n.HealthCheck == nil || n.HealthCheck.OK) && n.DataDirProblem == ""
}

// HasProblem reports whether n needs an operator's look: it is not ready (not ready,
// lost, draining or drained), has a maintenance window, is degraded, drifts from its pool's
// versions, has a GPU unhealthy or missing, fails its health check, or has leftover GPU
// processes or GPUs held by them. These are what rota nodes lists under its table.
func (n *Node) HasProblem() bool {
	return n.State != NodeReady || n.Maintenance != nil || len(n.Degraded) > 0 || len(n.Drift) > 0 ||
		(n.HealthCheck != nil && !n.HealthCheck.OK) || len(n.Leftovers) > 0 || len(n.HeldGPUs) > 0 ||
		slices.ContainsFunc(n.GPUs, func(g GPU) bool { return !g.Healthy || g.Missing })
}

// GPUStates counts GPUs by state (StateOfGPU), each GPU in one.
type GPUStates struct {
	Free        int `json:"free"`
	Used        int `json:"used"`
	Idle        int `json:"idle"`
	Held        int `json:"held"`
	Unhealthy   int `json:"unhealthy"`
	Unavailable int `json:"unavailable"`
}

// Count counts one GPU in state st.
func (s *GPUStates) Count(st GPUState) {
	switch st {
	case GPUUnhealthy:
		s.Unhealthy++
	case GPUIdle:
		s.Idle++
	case GPUUsed:
		s.Used++
	case GPUHeld:
		s.Held++
	case GPUUnavailable:
		s.Unavailable++
	default:
		s.Free++
	}
}

// Add adds o's counts to s.
func (s *GPUStates) Add(o GPUStates) {
	s.Free += o.Free
	s.Used += o.Used
	s.Idle += o.Idle
	s.Held += o.Held
	s.Unhealthy += o.Unhealthy
	s.Unavailable += o.Unavailable
}

// CountGPUStates counts n's GPUs by state; inUse says whether active jobs hold GPU index,
// idle whether every job holding it is flagged idle.
func CountGPUStates(n *Node, inUse, idle func(index int) bool) GPUStates {
	var s GPUStates
	for i := range n.GPUs {
		g := &n.GPUs[i] // not a copy: a glance counts 80,000 of them at 10,000 nodes
		used := inUse(g.Index)
		s.Count(StateOfGPU(n, g, used, used && idle(g.Index)))
	}
	return s
}

// NodeLoad is the load of one node: its GPUs, those in use, and its latest reading, from
// what the node list says of it (UsedGPUs, IdleGPUs).
func NodeLoad(n *Node) Load {
	return NodeLoadOf(n, n.GPUsUsed, func(i int) bool { return slices.Contains(n.UsedGPUs, i) }, func(i int) bool { return slices.Contains(n.IdleGPUs, i) })
}

// NodeLoadOf is NodeLoad where jobs hold gpusUsed of n's GPUs, inUse says which and idle
// which of those are idle.
func NodeLoadOf(n *Node, gpusUsed int, inUse, idle func(index int) bool) Load {
	l := Load{Nodes: 1, GPUs: len(n.GPUs), GPUsUsed: gpusUsed, States: CountGPUStates(n, inUse, idle)}
	if len(n.Drift) > 0 {
		l.NodesDrifting = 1
	}
	if n.HasProblem() {
		l.NodesWithProblems = 1
	}
	if n.Telemetry == nil || n.State == NodeLost {
		return l
	}
	for _, s := range n.Telemetry.GPUs {
		l.GPUsMeasured++
		if !s.UtilizationUnknown {
			l.utilGPUs++
			l.utilSum += s.UtilizationPct
		}
		l.PowerW += s.PowerW
		l.GPUMemoryUsedMB += s.MemoryUsedMB
		for _, g := range n.GPUs {
			if g.Index == s.Index {
				l.GPUMemoryMB += g.MemoryMB
				break
			}
		}
	}
	l.setUtil()
	return l
}

// Add sums o into l. Both are loads made by NodeLoad, or sums of them, in this process:
// the mean utilisation is kept as its sum and count, which do not travel.
func (l *Load) Add(o Load) {
	l.Nodes += o.Nodes
	l.GPUs += o.GPUs
	l.GPUsUsed += o.GPUsUsed
	l.GPUsMeasured += o.GPUsMeasured
	l.utilGPUs += o.utilGPUs
	l.utilSum += o.utilSum
	l.GPUMemoryUsedMB += o.GPUMemoryUsedMB
	l.GPUMemoryMB += o.GPUMemoryMB
	l.PowerW += o.PowerW
	l.States.Add(o.States)
	l.NodesDrifting += o.NodesDrifting
	l.NodesWithProblems += o.NodesWithProblems
	l.setUtil()
}

func (l *Load) setUtil() {
	l.GPUUtilPct = nil
	if l.utilGPUs > 0 {
		mean := l.utilSum / float64(l.utilGPUs)
		l.GPUUtilPct = &mean
	}
}

// EventList is the answer to GET /api/v1/audit: events oldest first.
type EventList struct {
	Events []Event `json:"events"`
	// Next is the cursor (an event ID) for the next page, empty at the end.
	Next string `json:"next,omitempty"`
}

// JobDetail is the answer to GET /api/v1/jobs/{id}: the job with its attempts and events.
type JobDetail struct {
	Job
	AttemptList []Attempt `json:"attempt_list"`
	Events      []Event   `json:"events"`
}

// HistoryRecord is one ended job as accounting sees it: what it asked for and what it used.
// GET /api/v1/history answers a HistoryList; `rota history export` writes it as a rota trace.
type HistoryRecord struct {
	ID         int64      `json:"id"`
	Submit     time.Time  `json:"submit"`
	Start      *time.Time `json:"start,omitempty"`
	End        *time.Time `json:"end,omitempty"`
	RunSeconds float64    `json:"run_s"`
	TimeLimit  int64      `json:"time_limit_s"`
	GPUs       int        `json:"gpus"`
	Nodes      int        `json:"nodes"`
	GPUModel   string     `json:"gpu_model,omitempty"`
	CPUs       int        `json:"cpus"`
	MemoryMB   int64      `json:"memory_mb"`
	Queue      string     `json:"queue"`
	Team       string     `json:"team"`
	Project    string     `json:"project,omitempty"`
	User       string     `json:"user"`
	State      JobState   `json:"state"`
	Attempts   int        `json:"attempts"`
}

// HistoryList is the answer to GET /api/v1/history.
type HistoryList struct {
	Records []HistoryRecord `json:"records"`
	// Next is the cursor for the next page (the after parameter), empty at the end.
	Next string `json:"next,omitempty"`
}

// SizeText is a size in bytes as a person reads it: 1 GiB, 512 MiB, 3000 bytes.
func SizeText(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
