package sched

import "time"

// Snapshot is everything the scheduler may look at. The caller builds it from the live state
// (the server) or from a virtual cluster (the simulator) and must not change it while Plan
// runs. Plan does not modify it.
type Snapshot struct {
	// Nodes in any order; Plan treats them in name order.
	Nodes []Node
	// Queues by name. A job whose queue is missing is left pending with NoQueue.
	Queues map[string]Queue
	// Running holds every job that holds resources (assigned or running).
	Running []Running
	// Pending holds the jobs waiting for a placement, in any order; Plan orders them.
	Pending []Job
	// Teams by name: quotas, fair-share weight and decayed usage. Nil switches quotas off
	// and gives every team the same fair share.
	Teams map[string]Team
	// Reservations are administrative windows that hold nodes, or a number of GPUs, for
	// one team.
	Reservations []Reservation
	// Maintenance lists the planned maintenance windows of nodes: no job of any team may
	// run on the node during one.
	Maintenance []Maintenance
	// Claims are the previous plan's Plan.Claims of the jobs still pending: the caller
	// passes them back unchanged until the job starts, and drops the others.
	Claims []Claim
	// NodesVersion lets a Planner keep its node layout between calls: a caller that plans
	// the same nodes many times sets it non-zero and changes it whenever Nodes change in
	// any way (added, removed, reordered, a field changed). Zero means unknown.
	NodesVersion uint64
}

// Team is a tenant: what it may use and what it has used.
type Team struct {
	Name string
	// Quota by GPU model; the key "" applies to any model the map does not name. A team
	// without a matching entry is not limited.
	Quota map[string]Quota
	// Weight is the team's fair-share weight; shares are weights normalised over all teams.
	Weight float64
	// Usage is the team's decayed GPU-seconds (the caller applies the half-life).
	Usage float64
	// CPU and Memory cap the CPU cores and memory (MB) the team's jobs request, by their
	// Limit (at least Guaranteed); nil: no cap.
	CPU, Memory *Quota
	// Projects by name. A job of a project is held to the project's quotas as well as the
	// team's; beyond the project's guarantee it first borrows the team's unused guarantee
	// (BorrowingInTeam), and only beyond the team's guarantee capacity across teams.
	Projects map[string]Project
}

// Project is a part of a team with quotas of its own, within the team's.
type Project struct {
	Name string
	// Quota by GPU model, as Team.Quota.
	Quota map[string]Quota
	// CPU and Memory cap the project's jobs as Team.CPU and Team.Memory do the team's.
	CPU, Memory *Quota
}

// Quota bounds a team's GPUs of one model. Up to Guaranteed a job runs in quota; beyond it,
// up to Limit, it borrows idle GPUs and may be reclaimed. A Limit below Guaranteed means
// Guaranteed (no borrowing).
type Quota struct {
	Guaranteed int
	Limit      int
}

// Reservation holds whole nodes, or a number of GPUs, for a team from Start to End.
//
// With Nodes, it holds those nodes: other teams' jobs may use them only if their time
// limit ends them before Start. Without Nodes, it holds GPUs GPUs of model Model ("": any)
// in pool Pool ("": any) on no node in particular: during the window other teams' jobs
// may take such GPUs only while as many stay free as the team lacks (GPUs less what its
// jobs use of them), and before Start the same holds for a job whose time limit would run
// into the window (see hold.go).
type Reservation struct {
	// ID numbers the reservation in messages where it is set; Name names it otherwise.
	ID    int64
	Name  string
	Team  string
	Nodes []string
	GPUs  int
	Model string
	Pool  string
	Start time.Time
	End   time.Time
}

// Maintenance is a planned window in which a node runs no job: from Start (zero: already
// open) until End (zero: open-ended, until an operator resumes the node). Before it
// opens the node takes only jobs whose time limit ends them by Start; a job without a
// time limit does not start there at all. The caller marks the node unschedulable once
// the window is open; the window alone keeps it free of work too.
type Maintenance struct {
	Node   string
	Reason string
	Start  time.Time
	End    time.Time
}

// Node is one machine as the scheduler sees it.
type Node struct {
	Name   string
	Labels map[string]string
	// Schedulable is false for nodes that take no new work (draining, not ready, lost).
	Schedulable bool
	CPUs        int
	MemoryMB    int64
	// DriverVersion and CUDAVersion are what the node reports (e.g. "535.104.05",
	// "12.2"); empty where it reports none, which satisfies no version constraint.
	DriverVersion string
	CUDAVersion   string
	// GPUs by index. Occupancy comes from Snapshot.Running, not from here.
	GPUs []GPU
	// ContainerRuntime names the runtime image jobs run through ("podman", "docker",
	// "apptainer"); empty where the node has none, and a job with an image is never
	// placed there.
	ContainerRuntime string
	// HealthFailed is set while the node's health-check command fails, or its agent
	// cannot run attempts (CannotRun): like an unschedulable node it takes no new work,
	// and reasons name it.
	HealthFailed bool
	// CannotRun is set while the node's agent says it cannot run attempts (its data dir
	// cannot hold them, or it cannot start their supervisors): reasons say so rather than
	// that a health check failed.
	CannotRun bool
	// Sharing is set where the node's pool lets jobs share GPUs: only there do requests
	// for a share of a GPU (Request.GPUShare, Request.GPUMemoryMB) land.
	Sharing bool
	// ExclusivePool is set where the node's pool is kept for the queues that name it
	// (Queue.Pools): jobs of other queues, even those that may use any node, never land
	// there.
	ExclusivePool bool
}

// GPU is one device of a node.
type GPU struct {
	Index    int
	ID       string
	Model    string
	MemoryMB int64
	// Healthy is false for a GPU that reported errors or vanished: it takes no new work.
	Healthy bool
	// Held is set while processes of no live attempt (leftovers) hold memory on the GPU:
	// healthy or not, it takes no new work until they are gone.
	Held bool
	// NVLinkPeers lists the indices of the GPUs this one reaches over NVLink; empty when
	// the topology is unknown, in which case the lowest free indices are used.
	NVLinkPeers []int
}

// Queue is the part of a queue's configuration the scheduler uses.
type Queue struct {
	Name        string
	Tier        int
	Preemptible bool
	// NeverPreempt protects the queue's jobs even while they borrow (services).
	// Without it, borrowing jobs of any queue may be reclaimed by in-quota work.
	NeverPreempt bool
	// Pools limits the queue to nodes whose "pool" label is one of these (empty: any).
	Pools []string
	// UserGPULimit caps the GPUs one user's jobs in this queue hold at once (0: no cap).
	UserGPULimit int
}

// Request is what a job needs.
type Request struct {
	// GPUs in total. For a job on one node it is all on that node.
	GPUs int
	// Nodes and GPUsPerNode describe a gang; zero Nodes means one node.
	Nodes       int
	GPUsPerNode int
	// GPUModel names the one GPU model the job runs on; "" takes any model.
	GPUModel string
	// GPUModels, when it holds two or more names, lists the models the job accepts
	// instead ("A100 or H100, whichever starts first"), in the job's order of preference;
	// GPUModel is then ignored, and one name means what GPUModel would. A job runs on one
	// model (a gang's nodes included) and is charged to that model's quota. Placement
	// prefers a model where the job starts now, then best fit as for any job; list order
	// only breaks ties (with both free, "A100,H100" takes the A100 that fits as tightly as
	// the H100), since the scheduler knows no speed per model.
	GPUModels []string
	// Speeds, where known, gives the job's relative speed on each model it lists (3 on
	// an H100 and 1 on a T4: it runs three times as fast on the H100). A job that lists
	// models then takes the fastest listed model that can start it now, whatever the fit;
	// models it leaves out of Speeds count as speed 1.
	Speeds map[string]float64
	// CPUs and MemoryMB are per node.
	CPUs     int
	MemoryMB int64
	// GPUShare asks for a share of one GPU in milli-GPU (1 to 999: 500 is half a GPU's
	// memory and compute), and GPUMemoryMB for a slice of one GPU's memory; at most one
	// of them is set, and then the job runs on one node and one GPU (GPUs is 0 or 1),
	// which it shares with other such jobs on a node that allows sharing (Node.Sharing).
	// A GPU with tenants takes no job that wants whole GPUs.
	GPUShare    int
	GPUMemoryMB int64
	// CUDA and Driver are version ranges (see ParseVersionRange) the node's reported
	// versions must satisfy; empty: any version, or none.
	CUDA   string
	Driver string
}

// Shared reports whether the request is for a share of one GPU.
func (r *Request) Shared() bool { return r.GPUShare > 0 || r.GPUMemoryMB > 0 }

// Job is a pending job.
type Job struct {
	ID    int64
	Queue string
	Team  string
	// Project is one of the team's Projects; empty (or a project the team lacks): the
	// team only.
	Project    string
	User       string
	SubmitTime time.Time
	// TimeLimit bounds the runtime; backfill and estimates depend on it. Zero: unlimited.
	TimeLimit time.Duration
	Request   Request
	// Nice lowers the job's multifactor priority by this many points (negative raises it).
	Nice int
	// Duration is the job's true runtime, known only to the simulator; the "sjf" order
	// uses it as an oracle. Zero: unknown (the time limit stands in).
	Duration time.Duration
	// AttainedService is the GPU-seconds the job received over all its attempts so far
	// (GPUs × time run, summed). The "las" order queues by it, and the default policy's
	// service factor weighs it; both only in preemptible queues.
	AttainedService float64
	// LastRun is how long the job's latest attempt ran, and Requeued when that attempt
	// ended; both zero for a job that never ran. The "las" order's starvation guard
	// promotes a job that has waited since Requeued longer than Options.LASStarveLimit
	// times LastRun.
	LastRun  time.Duration
	Requeued time.Time
	// Image is the container image the job runs in; empty: none. A job with an image
	// runs only on nodes with a ContainerRuntime.
	Image string
	// StartBy is the latest start that meets the job's deadline (for a finish-by
	// deadline, the deadline less the time limit); zero: no deadline. The default
	// policy's deadline factor raises the job as it nears, within its tier.
	StartBy time.Time
}

// Running is a job that holds resources.
type Running struct {
	ID      int64
	Queue   string
	Team    string
	Project string
	User    string
	// Start is when it was assigned; End is Start plus its time limit (zero: unlimited).
	Start  time.Time
	End    time.Time
	Allocs []Alloc
	// Borrowing is true when the job was placed beyond its team's guaranteed quota; such
	// work may be reclaimed by in-quota jobs.
	Borrowing bool
	// BorrowingInTeam is true when the job was placed beyond its project's guarantee but
	// within its team's: in-quota jobs of the same team may reclaim it, after the jobs that
	// borrow across teams.
	BorrowingInTeam bool
	// LastCheckpoint is the job's latest reported checkpoint; zero means none (work since
	// Start would be lost).
	LastCheckpoint time.Time
	// Preempting is true once the job has been told to stop; its resources are about to
	// free and it is never chosen as a victim again. What it holds that a claim names goes
	// to the claiming job; the rest may go to any job.
	Preempting bool
	// AttainedService is the GPU-seconds the job received over all its attempts, the
	// current one up to now included; the "las" order demotes and preempts by it.
	AttainedService float64
	// LastRun and Requeued are those of the attempt before the current one (zero if there
	// was none), as Job's: an attempt the starvation guard started counts its service
	// from its own start.
	LastRun  time.Duration
	Requeued time.Time
}

// Alloc is what a job holds, or is given, on one node.
type Alloc struct {
	Node       string
	GPUIndices []int
	CPUs       int
	MemoryMB   int64
	// GPUShare, when set, says the alloc holds only this share of its one GPU, in
	// milli-GPU, and GPUMemoryMB is the slice of the GPU's memory that goes with it.
	GPUShare    int
	GPUMemoryMB int64
}

// MilliGPU is one whole GPU in the unit of GPUShare.
const MilliGPU = 1000

// milli is what the alloc holds of GPUs, in milli-GPU.
func (a *Alloc) milli() int {
	if a.GPUShare > 0 {
		return a.GPUShare
	}
	return len(a.GPUIndices) * MilliGPU
}

// Plan is the scheduler's answer for one snapshot.
type Plan struct {
	// Placements to apply, in the order they were decided.
	Placements []Placement
	// Pending has one entry for every job of the snapshot that stays pending, in priority
	// order.
	Pending []PendingJob
	// Preemptions are running jobs to stop so that higher-right jobs can start in a later
	// cycle.
	Preemptions []Preemption
	// Claims hold resources for the jobs that wait for preemption victims to stop: one for
	// each job this cycle chose victims for, and one for each job of Snapshot.Claims still
	// waiting for its victims. The caller passes them back in the next snapshot.
	Claims []Claim
	// Reservations are the backfill reservations of the highest blocked jobs: where and
	// when each is expected to start. Lower jobs were placed only where they do not delay
	// these.
	Reservations []JobReservation
	// Recheck is the earliest time after now at which the same state could be planned
	// differently without any event: under the "las" order, a running job crossing into a
	// lower-priority queue or leaving its MinRuntime protection, or a waiting job reaching
	// the starvation limit, while jobs wait. Zero: none. A caller that plans only on
	// events (the simulator) plans again then; the server's periodic cycle covers it.
	Recheck time.Time
}

// Preemption asks for a running job to be stopped.
type Preemption struct {
	JobID int64
	// ForJob is the pending job that needs the resources.
	ForJob int64
	// Reason is one plain sentence, e.g. "reclaimed by team vision's in-quota job 42".
	Reason string
}

// Claim holds resources for a pending job that preemption is making room for: from the
// cycle that chose its victims until the job starts. Nothing else may be placed on them.
//
// A claim carries over between cycles through the caller (Plan.Claims, then
// Snapshot.Claims), so that the GPUs its victims free go to the job they were stopped for,
// not to the victims themselves when they are requeued, nor to any other job. The job is
// placed exactly on its claim once the victims are gone; until then it waits with
// WaitingForPreemption and chooses no new victims, so no job is stopped twice for it. A
// claim that can no longer be met is dropped, and the job searches afresh: its node left
// the schedulable set, a GPU failed, a window for another team now covers the node, a job
// that is not stopping holds its GPUs or the CPUs or memory it needs, or its team's quota
// no longer allows the model.
type Claim struct {
	JobID int64
	// Allocs are what the job will take on each node: one alloc, or one per node of a
	// gang, in node name order.
	Allocs []Alloc
}

// JobReservation is where and when a blocked job is expected to start.
type JobReservation struct {
	JobID int64
	Nodes []string
	Start time.Time
	// End is zero for a job without a time limit.
	End time.Time
}

// Placement gives a job its resources.
type Placement struct {
	JobID  int64
	Allocs []Alloc
	// Borrowing marks work placed beyond the team's guaranteed quota: it is preemptible.
	Borrowing bool
	// BorrowingInTeam marks work placed beyond its project's guarantee but within its
	// team's (Running.BorrowingInTeam).
	BorrowingInTeam bool
}

// PendingJob explains why a job stays pending.
type PendingJob struct {
	JobID  int64
	Reason Reason
	// EstimatedStart is zero where no estimate can be computed.
	EstimatedStart time.Time
	// Priority is the breakdown of the job's place in the order, like Slurm's sprio.
	Priority Priority
}

// Priority shows how a job's order was decided: first the queue tier, then Score, the sum
// of the weighted factors below (each already multiplied by its weight). Under the "las"
// order, LASQueue decides before Score.
type Priority struct {
	Tier      int
	Score     float64
	FairShare float64
	Age       float64
	Size      float64
	// Deadline raises a job whose deadline nears (see Options.DeadlineHorizon).
	Deadline float64
	// Service and Nice are subtracted: Score = FairShare + Age + Size + Deadline -
	// Service - Nice. Service holds back jobs of preemptible queues that have had much
	// GPU time.
	Service float64
	Nice    float64
	// LASQueue is the job's queue under the "las" order: 0 is served first.
	LASQueue int
}

// ReasonCode says, in a word, why a job waits.
type ReasonCode string

const (
	// ReasonNoNodeMatches: no node could ever run the request (model, size, count,
	// versions).
	ReasonNoNodeMatches ReasonCode = "NoNodeMatches"
	// ReasonResources: some node could run it, but not enough is free now.
	ReasonResources ReasonCode = "Resources"
	// ReasonPriority: jobs ahead in order are waiting for the resources this job needs.
	ReasonPriority ReasonCode = "Priority"
	// ReasonNoQueue: the job names a queue the snapshot lacks.
	ReasonNoQueue ReasonCode = "NoQueue"
	// ReasonFragmented: enough GPUs are free in total, but no node has enough of them.
	ReasonFragmented ReasonCode = "Fragmented"
	// ReasonQuotaExceeded: the job would take its team beyond its quota limit.
	ReasonQuotaExceeded ReasonCode = "QuotaExceeded"
	// ReasonWaitingForPreemption: victims are being stopped to make room for the job.
	ReasonWaitingForPreemption ReasonCode = "WaitingForPreemption"
	// ReasonReserved: the only nodes that fit, or the free GPUs of the model, are held by a
	// reservation for another team.
	ReasonReserved ReasonCode = "Reserved"
	// ReasonUserLimit: the job would take its user beyond the queue's per-user GPU cap.
	ReasonUserLimit ReasonCode = "UserLimit"
	// ReasonMaintenance: the only nodes with room go into planned maintenance before the
	// job's time limit would end it.
	ReasonMaintenance ReasonCode = "Maintenance"
)

// Reason is a code with the numbers behind it. Message is one plain sentence.
type Reason struct {
	Code    ReasonCode
	Message string
	// BestNode is the node that came closest, where one did.
	BestNode string
	// Missing says what BestNode lacks, e.g. {"gpus": 2}. Jobs that share a reason
	// share the map (at 100,000 pending jobs a copy each is a cost): read it only.
	Missing map[string]int64
	// Ahead counts the jobs of higher priority that wait for the same resources.
	Ahead int
	// Team, Used and Limit explain QuotaExceeded, in GPUs (in CPU cores or memory MB
	// where Resource says so), with Project where the project's quota refused; User, Used
	// and Limit explain UserLimit.
	Team     string
	Project  string
	Resource string
	User     string
	Used     int
	Limit    int
	// Victims are the jobs being stopped for WaitingForPreemption.
	Victims []int64
}
