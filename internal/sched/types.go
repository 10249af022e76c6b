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
}

// Node is one machine as the scheduler sees it.
type Node struct {
	Name   string
	Labels map[string]string
	// Schedulable is false for nodes that take no new work (draining, not ready, lost).
	Schedulable   bool
	CPUs          int
	MemoryMB      int64
	DriverVersion string
	// GPUs by index. Occupancy comes from Snapshot.Running, not from here.
	GPUs []GPU
}

// GPU is one device of a node.
type GPU struct {
	Index    int
	ID       string
	Model    string
	MemoryMB int64
	Healthy  bool
}

// Queue is the part of a queue's configuration the scheduler uses.
type Queue struct {
	Name        string
	Tier        int
	Preemptible bool
}

// Request is what a job needs.
type Request struct {
	// GPUs in total. For a job on one node it is all on that node.
	GPUs int
	// Nodes and GPUsPerNode describe a gang; zero Nodes means one node.
	Nodes       int
	GPUsPerNode int
	GPUModel    string
	CPUs        int
	MemoryMB    int64
}

// Job is a pending job.
type Job struct {
	ID         int64
	Queue      string
	Team       string
	User       string
	SubmitTime time.Time
	// TimeLimit bounds the runtime; backfill and estimates depend on it.
	TimeLimit time.Duration
	Request   Request
}

// Running is a job that holds resources.
type Running struct {
	ID    int64
	Queue string
	Team  string
	User  string
	// Start is when it was assigned; End is Start plus its time limit (zero: unlimited).
	Start  time.Time
	End    time.Time
	Allocs []Alloc
}

// Alloc is what a job holds, or is given, on one node.
type Alloc struct {
	Node       string
	GPUIndices []int
	CPUs       int
	MemoryMB   int64
}

// Plan is the scheduler's answer for one snapshot.
type Plan struct {
	// Placements to apply, in the order they were decided.
	Placements []Placement
	// Pending has one entry for every job of the snapshot that stays pending.
	Pending []PendingJob
}

// Placement gives a job its resources.
type Placement struct {
	JobID  int64
	Allocs []Alloc
}

// PendingJob explains why a job stays pending.
type PendingJob struct {
	JobID  int64
	Reason Reason
	// EstimatedStart is zero where no estimate can be computed.
	EstimatedStart time.Time
}

// ReasonCode says, in a word, why a job waits.
type ReasonCode string

const (
	// ReasonNoNodeMatches: no node could ever run the request (model, size, count).
	ReasonNoNodeMatches ReasonCode = "NoNodeMatches"
	// ReasonResources: some node could run it, but not enough is free now.
	ReasonResources ReasonCode = "Resources"
	// ReasonPriority: jobs ahead in order are waiting for the resources this job needs.
	ReasonPriority ReasonCode = "Priority"
	// ReasonNoQueue: the job names a queue the snapshot lacks.
	ReasonNoQueue ReasonCode = "NoQueue"
)

// Reason is a code with the numbers behind it. Message is one plain sentence.
type Reason struct {
	Code    ReasonCode
	Message string
	// BestNode is the node that came closest, where one did.
	BestNode string
	// Missing says what BestNode lacks, e.g. {"gpus": 2}.
	Missing map[string]int64
	// Ahead counts the jobs of higher priority that wait for the same resources.
	Ahead int
}
