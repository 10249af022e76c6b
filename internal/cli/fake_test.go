package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rotahq/rota/internal/api"
)

// testNow is the fixed clock of every test; fixtures sit relative to it.
var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) *time.Time {
	t := testNow.Add(d)
	return &t
}

func intp(i int) *int { return &i }

// fixtureJobs are what the fake server lists, in two pages: a running two-GPU job, a
// pending one with a reason and an estimate, a held one and one that failed.
func fixtureJobs() []api.Job {
	return []api.Job{
		{
			ID: 42,
			Spec: api.JobSpec{Name: "llama-ft", Queue: "train", Team: "nlp", User: "alice",
				Command: []string{"torchrun", "--nproc-per-node=2", "train.py", "--lr", "3e-4 warm"},
				WorkDir: "/home/alice/llama", GPUs: 2, GPUModel: "A100", CPUs: 16, MemoryMB: 128 << 10, TimeLimit: 24 * 3600,
				Image: "registry.example.com/ml/llama:2.1"},
			State: api.StateRunning, SubmitTime: *at(-2 * time.Hour), StartTime: at(-90*time.Minute - 7*time.Second),
			Attempts: 2, Nodes: []string{"node-a"}, GPUIDs: []string{"GPU-aaaa-0", "GPU-aaaa-1"},
			Borrowing: true, LastCheckpoint: at(-20 * time.Minute),
			IdleSince: at(-34 * time.Minute), IdleWarned: true, Usage: fixtureUsage(),
		},
		{
			ID: 43,
			Spec: api.JobSpec{Name: "sweep-7", Queue: "batch", Team: "vision", User: "bob", Command: []string{"python", "sweep.py"}, GPUs: 8, GPUsPerNode: 4, Nodes: 2, CPUs: 32, MemoryMB: 1536,
				Deadline: at(time.Hour), DeadlineKind: api.DeadlineStart, CUDA: ">=12.4", Driver: ">=550,<560"},
			State: api.StatePending, Reason: "Resources", Message: "needs 4 free GPUs on 2 nodes; best node node-b has 2",
			SubmitTime: *at(-12*time.Minute - 5*time.Second), EstimatedStart: at(2 * time.Hour),
			Priority:        &api.Priority{Tier: 1, Score: 0.8375, FairShare: 0.5, Age: 0.3125, Size: 0.1, Deadline: 0.2, Nice: 0.275},
			DeadlineWarning: "the deadline (start by 2026-03-01T13:00:00Z) looks unreachable: the estimated start 2026-03-01T14:00:00Z is after the latest start that meets it, 2026-03-01T13:00:00Z",
		},
		{
			ID: 44,
			Spec: api.JobSpec{Queue: "train", User: "carol", Command: []string{"./run.sh"}, GPUs: 1,
				After: []int64{40}, AfterOK: []int64{41, 42}, Array: "0-9%2", Hold: true},
			State: api.StateHeld, Reason: "Dependency", SubmitTime: *at(-3 * 24 * time.Hour),
			UserHold: true, ArrayID: 44, ArrayIndex: intp(0), ArrayLimit: 2,
		},
		{
			ID:    45,
			Spec:  api.JobSpec{Name: "a-very-long-job-name-that-goes-on-and-on", Queue: "interactive", User: "dave", Command: []string{"bash"}, GPUs: 1},
			State: api.StateFailed, Reason: api.ReasonOOM, Message: "killed: out of memory (64G limit)",
			SubmitTime: *at(-5 * time.Hour), StartTime: at(-4 * time.Hour), EndTime: at(-3*time.Hour - 30*time.Minute),
			Attempts: 1, Nodes: []string{"node-b"}, GPUIDs: []string{"GPU-bbbb-3"}, ExitCode: intp(137),
		},
		arrayJob(60, 0, api.StateSucceeded, func(j *api.Job) {
			j.StartTime, j.EndTime, j.Nodes, j.ExitCode, j.Attempts = at(-50*time.Minute), at(-20*time.Minute), []string{"node-b"}, intp(0), 1
		}),
		arrayJob(61, 2, api.StateRunning, func(j *api.Job) { j.StartTime, j.Nodes, j.Attempts = at(-50*time.Minute), []string{"node-b"}, 1 }),
		arrayJob(62, 4, api.StateRunning, func(j *api.Job) {
			j.StartTime, j.Nodes, j.Attempts, j.IdleSince = at(-20*time.Minute), []string{"node-a"}, 1, at(-10*time.Minute)
		}),
		arrayJob(63, 6, api.StatePending, func(j *api.Job) { j.EstimatedStart = at(40 * time.Minute) }),
		arrayJob(64, 8, api.StatePending, func(j *api.Job) { j.EstimatedStart = at(30 * time.Minute) }),
	}
}

// fixtureUsage is what job 42's running attempt has used so far: two A100s, busy, then
// idle for the last half hour.
func fixtureUsage() *api.Usage {
	return &api.Usage{Samples: 540, First: *at(-90 * time.Minute), Last: *at(-10 * time.Second),
		GPUUtilPct:  api.Stat{Mean: 61.4, P95: 97.2, Max: 100, Last: 0.5},
		GPUMemoryMB: api.Stat{Mean: 101376, P95: 150528, Max: 155000, Last: 98304},
		CPUPct:      api.Stat{Mean: 352, P95: 780, Max: 1210, Last: 95},
		MemoryMB:    api.Stat{Mean: 40960, P95: 51200, Max: 52000, Last: 40000},
	}
}

// arrayJob is one job of array 60, "0-8:2%2": five jobs, at most two of them running.
func arrayJob(id int64, index int, state api.JobState, edit func(*api.Job)) api.Job {
	j := api.Job{
		ID:    id,
		Spec:  api.JobSpec{Name: "lr-sweep", Queue: "batch", User: "erin", Command: []string{"python", "sweep.py"}, GPUs: 1, Array: "0-8:2%2"},
		State: state, SubmitTime: *at(-time.Hour), ArrayID: 60, ArrayIndex: intp(index), ArrayLimit: 2,
	}
	if state == api.StatePending {
		j.Reason, j.Message = "ArrayLimit", "array 60 runs at most 2 jobs at once"
	}
	edit(&j)
	return j
}

// fixtureMultiNode is job 47: its two-node first attempt failed on rank 1, which stopped
// rank 0, and it waits out its backoff before the retry its restart policy allows.
func fixtureMultiNode() api.JobDetail {
	j := api.Job{
		ID: 47,
		Spec: api.JobSpec{Name: "pretrain", Queue: "train", Team: "nlp", User: "alice", Command: []string{"torchrun", "pretrain.py"},
			WorkDir: "/home/alice/lm", GPUs: 16, GPUsPerNode: 8, Nodes: 2, CPUs: 64, MemoryMB: 512 << 10,
			RestartPolicy: api.RestartOnFailure, Retries: intp(3)},
		State: api.StatePending, Reason: "Backoff", Message: "retries after its backoff: attempt 1 failed",
		SubmitTime: *at(-time.Hour), Attempts: 1, Nodes: []string{"node-a", "node-b"}, ExitCode: intp(1),
		Failures: 1, NotBefore: at(45 * time.Second), SubmittedBy: "root",
		Checkpoints: "/shared/ckpt/c1/47, on every node: a retry elsewhere finds them",
		Usage: &api.Usage{Samples: 330, First: *at(-57 * time.Minute), Last: *at(-time.Minute),
			GPUUtilPct: api.Stat{Mean: 88, P95: 99, Max: 100, Last: 91}, GPUMemoryMB: api.Stat{Mean: 600 << 10, P95: 610 << 10, Max: 620 << 10},
			CPUPct: api.Stat{Mean: 1600, P95: 2400, Last: 1550}, MemoryMB: api.Stat{Mean: 200 << 10, P95: 210 << 10, Max: 215 << 10}},
	}
	eight := []int{0, 1, 2, 3, 4, 5, 6, 7}
	return api.JobDetail{
		Job: j,
		AttemptList: []api.Attempt{{JobID: 47, N: 1, State: api.StateFailed, AssignTime: *at(-58 * time.Minute),
			StartTime: at(-57 * time.Minute), EndTime: at(-time.Minute), ExitCode: intp(1), Reason: api.ReasonExitCode,
			Placements: []api.Placement{
				{Node: "node-a", GPUIndices: eight, CPUs: 32, MemoryMB: 256 << 10, State: api.StateCancelled, EndTime: at(-time.Minute),
					Reason: api.ReasonCancelled, Message: "stopped: rank 1 failed", Usage: &api.Usage{Samples: 330,
						GPUUtilPct: api.Stat{Mean: 88, P95: 99, Max: 100, Last: 91}, GPUMemoryMB: api.Stat{Mean: 600 << 10, P95: 610 << 10, Max: 620 << 10},
						CPUPct: api.Stat{Mean: 1600, P95: 2400, Last: 1550}, MemoryMB: api.Stat{Mean: 200 << 10, P95: 210 << 10, Max: 215 << 10}}},
				{Node: "node-b", GPUIndices: eight, CPUs: 32, MemoryMB: 256 << 10, State: api.StateFailed, ExitCode: intp(1),
					EndTime: at(-70 * time.Second), Reason: api.ReasonExitCode, Message: "exited with status 1"},
			}}},
		Events: []api.Event{
			{ID: 7, Time: *at(-time.Hour), Actor: "root", Role: "admin", Source: "10.0.0.9", Kind: api.EventSubmit, JobID: 47, To: api.StatePending},
			{ID: 8, Time: *at(-58 * time.Minute), Actor: "scheduler", Kind: api.EventTransition, JobID: 47, Attempt: 1, From: api.StatePending, To: api.StateAssigned},
			{ID: 9, Time: *at(-time.Minute), Actor: "node-b", Kind: api.EventTransition, JobID: 47, Attempt: 1, Node: "node-b",
				From: api.StateRunning, To: api.StatePending, Reason: api.ReasonExitCode, Message: "rank 1 exited with status 1; retry 1 of 3"},
		},
	}
}

// fixtureOOM is job 45 in full: its one attempt was killed for memory, with its peak.
func fixtureOOM() api.JobDetail {
	j := fixtureJobs()[3]
	j.Usage = &api.Usage{Samples: 180, First: *at(-4 * time.Hour), Last: *at(-3*time.Hour - 30*time.Minute),
		GPUUtilPct: api.Stat{Mean: 35, P95: 80, Max: 92, Last: 12}, GPUMemoryMB: api.Stat{Mean: 20 << 10, P95: 30 << 10, Max: 31 << 10, Last: 30 << 10},
		CPUPct: api.Stat{Mean: 100, P95: 200, Max: 250, Last: 210}, MemoryMB: api.Stat{Mean: 40 << 10, P95: 60 << 10, Max: 63 << 10, Last: 63 << 10},
		PeakMemoryMB: 64 << 10}
	return api.JobDetail{Job: j, AttemptList: []api.Attempt{{JobID: 45, N: 1, State: api.StateFailed, AssignTime: *at(-4 * time.Hour),
		StartTime: j.StartTime, EndTime: j.EndTime, ExitCode: intp(137), Reason: api.ReasonOOM,
		Message: "killed: out of memory, peak 64G of its 64G limit",
		Placements: []api.Placement{{Node: "node-b", GPUIndices: []int{3}, GPUIDs: j.GPUIDs, CPUs: 4, MemoryMB: 64 << 10,
			State: api.StateFailed, ExitCode: intp(137), EndTime: j.EndTime, Reason: api.ReasonOOM, Usage: j.Usage}}}},
		Events: []api.Event{}}
}

// fixtureStopping is job 48: a running two-node attempt whose rank 1 failed while rank 0
// is being stopped.
func fixtureStopping() api.JobDetail {
	d := fixtureMultiNode()
	d.ID, d.State, d.Reason, d.Message, d.NotBefore, d.ExitCode = 48, api.StateRunning, "", "", nil, nil
	d.Stopping = "rank 1 on node-b exited with status 1"
	d.AttemptList[0].State, d.AttemptList[0].EndTime, d.AttemptList[0].ExitCode = api.StateRunning, nil, nil
	d.AttemptList[0].Placements[0].State, d.AttemptList[0].Placements[0].Reason, d.AttemptList[0].Placements[0].Message = "", "", ""
	return d
}

// rankLogs are the logs of the ranks of job 47's attempt 1, in the chunks the fake serves
// them in. Rank 1's log ends without a newline.
var rankLogs = [][]string{
	{"step 1 loss 2.31\n", "step 2 loss 2.17\n", "saved checkpoint\n"},
	{"step 1 loss 2.30\nstep 2 ", "loss nan\n", "Traceback: loss is NaN"},
}

func fixtureUsers() api.UserList {
	return api.UserList{Users: []api.User{
		{Name: "alice", Role: "admin", Created: *at(-30 * 24 * time.Hour), Teams: []string{"nlp"}},
		{Name: "bob", Role: "member", UnixUser: "bsmith", Created: *at(-7 * 24 * time.Hour), Teams: []string{"nlp", "vision"}},
		{Name: "ci", Role: "operator", AllowRoot: true, Created: *at(-2 * time.Hour)},
	}}
}

func fixtureTokens() api.TokenList {
	return api.TokenList{Tokens: []api.TokenInfo{
		{ID: "aaaa1111", User: "alice", Description: "laptop", Created: *at(-30 * 24 * time.Hour), LastUsed: at(-time.Minute)},
		{ID: "bbbb2222", User: "bob", Created: *at(-7 * 24 * time.Hour), Expires: at(23 * 24 * time.Hour)},
		{ID: "cccc3333", User: "bob", Description: "old CI token of the vision team's nightly evaluation", Created: *at(-90 * 24 * time.Hour),
			Expires: at(-60 * 24 * time.Hour), LastUsed: at(-61 * 24 * time.Hour)},
		{ID: "dddd4444", User: "ci", Description: "deploys", Created: *at(-5 * 24 * time.Hour), Revoked: at(-24 * time.Hour)},
	}}
}

func fixtureJoinTokens() []api.JoinTokenInfo {
	return []api.JoinTokenInfo{
		{ID: "jt01", Created: *at(-10 * time.Minute), Expires: *at(50 * time.Minute), Uses: 1, Used: 0, Node: "gpu-07"},
		{ID: "jt02", Created: *at(-2 * time.Hour), Expires: *at(22 * time.Hour), Uses: 10, Used: 4},
	}
}

// fixtureAudit is the audit trail, in two pages.
func fixtureAudit() []api.EventList {
	return []api.EventList{
		{Events: []api.Event{
			{ID: 101, Time: *at(-3 * time.Hour), Actor: "alice", Role: "admin", Source: "10.0.0.5", Kind: api.EventQueue,
				Message: "queue train changed",
				Before:  json.RawMessage(`{"name":"train","tier":1,"pools":["train"],"grace_s":300}`),
				After:   json.RawMessage(`{"grace_s": 300, "name":"train","tier":2,"pools":["train","dev"]}`)},
			{ID: 102, Time: *at(-2 * time.Hour), Actor: "bob", Role: "member", Source: "10.0.0.7", Kind: api.EventCancel, JobID: 43,
				From: api.StatePending, To: api.StateCancelled},
		}, Next: "102"},
		{Events: []api.Event{
			{ID: 103, Time: *at(-time.Hour), Actor: "alice", Role: "admin", Source: "unix", Kind: api.EventUser,
				Message: "user carol added", After: json.RawMessage(`{"name":"carol","role":"member"}`)},
			{ID: 104, Time: *at(-30 * time.Minute), Actor: "scheduler", Kind: api.EventTransition, JobID: 42, Attempt: 2, Node: "node-a",
				From: api.StatePending, To: api.StateAssigned},
		}},
	}
}

func fixtureDetail() api.JobDetail {
	j := fixtureJobs()[0]
	return api.JobDetail{
		Job: j,
		AttemptList: []api.Attempt{
			{JobID: 42, N: 1, State: api.StatePending, AssignTime: *at(-119 * time.Minute), StartTime: at(-118 * time.Minute), EndTime: at(-95 * time.Minute), Reason: api.ReasonPreempted,
				Placements: []api.Placement{{Node: "node-b", GPUIndices: []int{0, 1}, GPUIDs: []string{"GPU-bbbb-0", "GPU-bbbb-1"}, CPUs: 16, MemoryMB: 128 << 10}}},
			{JobID: 42, N: 2, State: api.StateRunning, AssignTime: *at(-91 * time.Minute), StartTime: j.StartTime,
				Placements: []api.Placement{{Node: "node-a", GPUIndices: []int{4, 5}, GPUIDs: j.GPUIDs, CPUs: 16, MemoryMB: 128 << 10,
					Usage: fixtureUsage(), ImageDigest: "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}}},
		},
		Events: []api.Event{
			{ID: 1, Time: *at(-2 * time.Hour), Actor: "alice", Kind: api.EventSubmit, JobID: 42, To: api.StatePending},
			{ID: 2, Time: *at(-119 * time.Minute), Actor: "scheduler", Kind: api.EventTransition, JobID: 42, Attempt: 1, Node: "node-b", From: api.StatePending, To: api.StateAssigned},
			{ID: 3, Time: *at(-95 * time.Minute), Actor: "scheduler", Kind: api.EventTransition, JobID: 42, Attempt: 1, From: api.StateRunning, To: api.StatePending, Reason: api.ReasonPreempted, Message: "urgent job 40 needed the GPUs"},
			{ID: 4, Time: *at(-91 * time.Minute), Actor: "scheduler", Kind: api.EventTransition, JobID: 42, Attempt: 2, Node: "node-a", From: api.StatePending, To: api.StateAssigned},
		},
	}
}

// fixtureNodes are four nodes. node-a runs job 42 on GPUs 4 and 5 of its eight NVLinked
// A100s; node-b, in the same pool with H100s and another driver, lost GPU 7 off the bus,
// has a leftover process holding GPU 2 and fails its health check; ws-1 is lost; ws-2
// has no GPUs and syncs.
func fixtureNodes() api.NodeList {
	gpus := func(model string, n int, memMB int64) []api.GPU {
		var out []api.GPU
		for i := range n {
			numa := i / 4
			out = append(out, api.GPU{Index: i, UUID: "GPU-" + model + "-" + strconv.Itoa(i), Model: model, MemoryMB: memMB, Healthy: true,
				PCIBusID: fmt.Sprintf("00000000:%02X:00.0", 0x07+i*0x10), NUMANode: &numa, MIGMode: "disabled"})
		}
		return out
	}
	a := gpus("A100", 8, 80<<10)
	for i := range a {
		// Two NVLink islands of four.
		for j := i / 4 * 4; j < i/4*4+4; j++ {
			if j != i {
				a[i].NVLinkPeers = append(a[i].NVLinkPeers, j)
			}
		}
	}
	var samples []api.GPUSample
	for i := range 8 {
		s := api.GPUSample{Index: i, MemoryUsedMB: 0, PowerW: 62, TemperatureC: 31}
		if i == 4 || i == 5 {
			s = api.GPUSample{Index: i, UtilizationPct: 97 + float64(i-4), MemoryUsedMB: 76 << 10, PowerW: 392.5, TemperatureC: 71}
		}
		samples = append(samples, s)
	}
	b := gpus("H100", 8, 80<<10)
	b[7].Healthy, b[7].Missing, b[7].Health = false, true, "XID 79: GPU has fallen off the bus"
	leftover := api.GPUProcess{GPU: 2, PID: 51515, MemoryMB: 12800, Command: "python eval.py", Since: at(-20 * time.Minute)}
	return api.NodeList{Nodes: []api.Node{
		{Name: "node-a", Inventory: api.Inventory{CPUs: 128, MemoryMB: 1 << 20, GPUs: a, Labels: map[string]string{"pool": "train", "rack": "r1"},
			DeviceSource: "nvml", DriverVersion: "550.54.15", CUDAVersion: "12.4", Hostname: "node-a.example", ContainerRuntime: "podman", Limits: "cgroup2"},
			State: api.NodeReady, LastHeartbeat: *at(-3 * time.Second), GPUsUsed: 3, CPUsUsed: 16, Jobs: []int64{42, 43, 44},
			SharedGPUs: []api.SharedGPU{{Index: 0, Share: 0.75, MemoryMB: 60 << 10, Tenants: []api.Tenant{
				{JobID: 43, Share: 0.5, MemoryMB: 40 << 10}, {JobID: 44, Share: 0.25, MemoryMB: 20 << 10}}}},
			Telemetry: &api.Telemetry{Time: *at(-5 * time.Second), GPUs: samples, Processes: []api.GPUProcess{
				{GPU: 4, PID: 3101, MemoryMB: 76 << 10, Command: "python train.py", JobID: 42, Attempt: 2},
				{GPU: 5, PID: 3102, MemoryMB: 76 << 10, Command: "python train.py", JobID: 42, Attempt: 2},
			}},
			HealthCheck: &api.HealthCheck{Time: *at(-time.Minute), OK: true},
			Maintenance: &api.Maintenance{Reason: "BIOS update OPS-7", Start: *at(2 * time.Hour), End: at(6 * time.Hour), By: "olga"}},
		{Name: "node-b", Inventory: api.Inventory{CPUs: 96, MemoryMB: 768 << 10, GPUs: b, Labels: map[string]string{"pool": "train"},
			DeviceSource: "nvml", DriverVersion: "535.104.05", CUDAVersion: "12.2", Limits: "none"},
			State: api.NodeDraining, LastHeartbeat: *at(-75 * time.Second), GPUsUsed: 0, CPUsUsed: 0,
			Degraded: []string{"GPU 7 (GPU-H100-7) is missing: it can no longer be found (XID 79: GPU has fallen off the bus)",
				"the health check failed with exit code 1: GPU 3: 2 uncorrectable errors"},
			HealthCheck: &api.HealthCheck{Time: *at(-2 * time.Minute), ExitCode: 1, Output: "ECC check:\n\x1b[31mGPU 3: 2 uncorrectable errors\x1b[0m\n"},
			Telemetry: &api.Telemetry{Time: *at(-80 * time.Second), GPUs: []api.GPUSample{
				{Index: 0, PowerW: 70, TemperatureC: 30}, {Index: 1, PowerW: 70, TemperatureC: 30}, {Index: 2, MemoryUsedMB: 12800, PowerW: 90, TemperatureC: 35},
				{Index: 3, PowerW: 70, TemperatureC: 30}, {Index: 4, PowerW: 70, TemperatureC: 30}, {Index: 5, PowerW: 70, TemperatureC: 30},
				{Index: 6, PowerW: 70, TemperatureC: 30},
			}, Processes: []api.GPUProcess{leftover}},
			Leftovers: []api.GPUProcess{leftover}, HeldGPUs: []int{2},
			Drift: []api.VersionDrift{{Component: api.DriftDriver, Version: "535.104.05", Wanted: ">=550", Pool: "train"}}, DriftDrain: true},
		{Name: "ws-1", Inventory: api.Inventory{CPUs: 8, MemoryMB: 1536, DeviceSource: "none"}, State: api.NodeLost},
		{Name: "ws-2", Inventory: api.Inventory{CPUs: 8, MemoryMB: 1536, DeviceSource: "none"}, State: api.NodeReady, Syncing: true,
			LastHeartbeat: *at(-time.Second)},
	}}
}

func fixtureQueues() []api.Queue {
	return []api.Queue{
		{Name: "interactive", Tier: 3, DefaultTimeLimit: 3600, MaxTimeLimit: 8 * 3600, Grace: 30, Pools: []string{"dev"}, UserGPULimit: 2,
			IdleAfter: 1800, IdleAction: api.IdleStop},
		{Name: "train", Tier: 1, DefaultTimeLimit: 86400, MaxTimeLimit: 7 * 86400, Grace: 300, MaxGrace: 1800, Pools: []string{"train", "dev"},
			IdleAfter: 3600, IdleAction: api.IdleWarn, IdleThresholdPct: 2.5, Images: []string{"registry.example.com/ml/", "nvcr.io/nvidia/pytorch:"}},
		{Name: "batch", Tier: 0, Preemptible: true, DefaultTimeLimit: 4 * 3600, MaxTimeLimit: 2 * 86400, Grace: 60},
		{Name: "urgent", Tier: 5, DefaultTimeLimit: 86400, Grace: 300, Users: []string{"alice"}, Teams: []string{"release"}},
		{Name: "inference", Tier: 4, NeverPreempt: true, Grace: 30, Pools: []string{"inference"}},
	}
}

func fixtureTeams() api.TeamList {
	return api.TeamList{Teams: []api.Team{
		{Name: "nlp", Weight: 2, Quotas: map[string]api.Quota{"H100": {Guaranteed: 8, Limit: 16}, "*": {Guaranteed: 2, Limit: 4}, "A100": {Guaranteed: 4, Limit: 8}},
			Members: []string{"alice", "bob"}, UsageGPUHours: 1234.56, GPUsInUse: map[string]int{"H100": 10, "A100": 2}},
		{Name: "vision", Weight: 1, Quotas: map[string]api.Quota{"*": {Guaranteed: 4, Limit: 8}}, UsageGPUHours: 0.04},
		{Name: "guests", Weight: 0.5, Members: []string{"eve"}, GPUsInUse: map[string]int{"A100": 0}},
	}}
}

func fixtureReservations() api.ReservationList {
	return api.ReservationList{Reservations: []api.Reservation{
		{ID: 3, Name: "release-run", Team: "nlp", GPUs: 16, Nodes: []string{"node-a", "node-b"}, Start: *at(21 * time.Hour), End: *at(25 * time.Hour)},
		{ID: 4, Team: "vision", GPUs: 4, Start: *at(48 * time.Hour), End: *at(72 * time.Hour)},
		{ID: 6, Name: "request-2", Team: "vision", GPUs: 8, Model: "H100", Pool: "train", Start: *at(-time.Hour), End: *at(3 * time.Hour), Used: 3, Held: 5},
	}}
}

// The fake server's API tokens, and who each makes its caller.
const (
	adminToken  = "rota_admin"
	memberToken = "rota_member"
	viewerToken = "rota_viewer"
)

var fakeTokens = map[string]api.Whoami{
	adminToken:  {User: "alice", Role: "admin", Kind: "token", TokenID: "aaaa1111", Teams: []string{"nlp"}},
	memberToken: {User: "bob", Role: "member", Kind: "token", TokenID: "bbbb2222", Teams: []string{"nlp", "vision"}},
	viewerToken: {User: "vic", Role: "viewer", Kind: "token", TokenID: "vvvv3333"},
}

// unixCaller is who the fake takes a caller on its Unix socket for, token or not.
var unixCaller = api.Whoami{User: "alice", Role: "admin", Kind: "unix"}

// fakeServer answers the client routes from fixtures and records what it was sent. Like
// the real server it wants credentials (401 without), JSON bodies as application/json
// (415 otherwise), and an admin for the admin routes (403 with role and rule).
type fakeServer struct {
	*httptest.Server
	mu          sync.Mutex // guards the fields below
	auth        []string   // the Authorization header of every request
	queries     []string   // raw query of every GET /api/v1/jobs, and path and query of /api/v1/top and /api/v1/nodes
	spec        api.JobSpec
	submitKeys  []string // the Idempotency-Key of every submit
	actions     []string // "POST /path" of every job and array action
	queue       api.Queue
	team        api.Team
	user        api.User
	tokenReq    api.TokenRequest
	drains      []api.DrainRequest // the body of every drain
	joinReq     api.JoinTokenRequest
	auditQuery  []string // raw query of every GET /api/v1/audit
	reservation api.Reservation
	config      []byte // body of the last PUT /api/v1/config
	configType  string // and its Content-Type
	deleted     []string
}

// callerKey is the context key under which the fake's handlers find the caller.
type callerKey struct{}

func newFakeServer(t *testing.T) *fakeServer {
	return newFakeServerWith(t, (*httptest.Server).Start)
}

// newFakeServerWith serves the fake with start: Start, StartTLS, or one that swaps the
// listener first.
func newFakeServerWith(t *testing.T, start func(*httptest.Server)) *fakeServer {
	f := &fakeServer{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/whoami", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, r.Context().Value(callerKey{}))
	})
	mux.HandleFunc("GET /api/v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.queries = append(f.queries, r.URL.RawQuery)
		f.mu.Unlock()
		jobs := fixtureJobs()
		if r.URL.Query().Get("after") == "page2" {
			writeJSON(w, http.StatusOK, api.JobList{Jobs: jobs[2:]})
			return
		}
		writeJSON(w, http.StatusOK, api.JobList{Jobs: jobs[:2], Next: "page2"})
	})
	mux.HandleFunc("POST /api/v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		var spec api.JobSpec
		if err := json.NewDecoder(r.Body).Decode(&spec); err != nil {
			writeJSON(w, http.StatusBadRequest, api.Error{Code: api.CodeInvalid, Message: err.Error()})
			return
		}
		f.mu.Lock()
		f.spec = spec
		f.submitKeys = append(f.submitKeys, r.Header.Get("Idempotency-Key"))
		f.mu.Unlock()
		who := r.Context().Value(callerKey{}).(api.Whoami)
		switch {
		case spec.Name == "flood":
			w.Header().Set("Retry-After", "7")
			writeJSON(w, http.StatusTooManyRequests, api.Error{Code: api.CodeRateLimited, Message: "more than 50 submits a second"})
			return
		case spec.User != "" && spec.User != who.User && who.Role != "admin":
			writeJSON(w, http.StatusForbidden, api.Error{Code: api.CodeForbidden, Role: who.Role, Rule: "submit.on-behalf",
				Message: "only an admin may submit as another user"})
			return
		}
		if spec.User == "" {
			spec.User = who.User
		}
		if spec.Queue == "" {
			spec.Queue = "train"
		}
		if spec.Queue == "nope" {
			writeJSON(w, http.StatusBadRequest, api.Error{Code: api.CodeInvalid, Message: `no queue "nope"`, Field: "queue"})
			return
		}
		writeJSON(w, http.StatusCreated, api.Job{ID: 46, Spec: spec, State: api.StatePending, SubmitTime: testNow})
	})
	mux.HandleFunc("GET /api/v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("id") {
		case "42":
			writeJSON(w, http.StatusOK, fixtureDetail())
		case "43":
			j := fixtureJobs()[1]
			writeJSON(w, http.StatusOK, api.JobDetail{Job: j, AttemptList: []api.Attempt{}, Events: []api.Event{
				{ID: 5, Time: j.SubmitTime, Actor: "bob", Kind: api.EventSubmit, JobID: 43, To: api.StatePending},
			}})
		case "44":
			j := fixtureJobs()[2]
			writeJSON(w, http.StatusOK, api.JobDetail{Job: j, AttemptList: []api.Attempt{}, Events: []api.Event{
				{ID: 6, Time: j.SubmitTime, Actor: "carol", Kind: api.EventSubmit, JobID: 44, To: api.StateHeld, Reason: "Dependency"},
			}})
		case "45":
			writeJSON(w, http.StatusOK, fixtureOOM())
		case "47":
			writeJSON(w, http.StatusOK, fixtureMultiNode())
		case "48":
			writeJSON(w, http.StatusOK, fixtureStopping())
		default:
			j, ok := fixtureJob(r.PathValue("id"))
			if !ok {
				writeJSON(w, http.StatusNotFound, api.Error{Code: api.CodeNotFound, Message: "no job " + r.PathValue("id")})
				return
			}
			writeJSON(w, http.StatusOK, api.JobDetail{Job: j, AttemptList: []api.Attempt{}, Events: []api.Event{}})
		}
	})
	mux.HandleFunc("GET /api/v1/jobs/47/logs", func(w http.ResponseWriter, r *http.Request) {
		rank, _ := strconv.Atoi(r.URL.Query().Get("rank"))
		switch r.URL.Query().Get("node") {
		case "":
		case "node-a":
			rank = 0
		case "node-b":
			rank = 1
		default:
			writeJSON(w, http.StatusNotFound, api.Error{Code: api.CodeNotFound, Message: "attempt 1 of job 47 has no rank on " + r.URL.Query().Get("node")})
			return
		}
		w.Header().Set("X-Rota-Log-Rank", strconv.Itoa(rank))
		w.Header().Set("X-Rota-Log-Node", []string{"node-a", "node-b"}[rank])
		serveChunks(t, w, r, rankLogs[rank], 1)
	})
	mux.HandleFunc("POST /api/v1/jobs/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		f.record(r)
		job, ok := fixtureJob(r.PathValue("id"))
		if !ok {
			writeJSON(w, http.StatusNotFound, api.Error{Code: api.CodeNotFound, Message: "no job " + r.PathValue("id")})
			return
		}
		writeJSON(w, http.StatusOK, cancelled(job))
	})
	mux.HandleFunc("GET /api/v1/arrays/{id}", func(w http.ResponseWriter, r *http.Request) {
		var elems []api.Job
		for _, j := range fixtureJobs() {
			if strconv.FormatInt(j.ArrayID, 10) == r.PathValue("id") {
				elems = append(elems, j)
			}
		}
		if elems == nil {
			writeJSON(w, http.StatusNotFound, api.Error{Code: api.CodeNotFound, Field: "id", Message: "no array " + r.PathValue("id") + ": an array's ID is the ID of its first job"})
			return
		}
		writeJSON(w, http.StatusOK, api.JobList{Jobs: elems})
	})
	mux.HandleFunc("POST /api/v1/arrays/{id}/{action}", func(w http.ResponseWriter, r *http.Request) {
		f.record(r)
		var elems []api.Job
		for _, j := range fixtureJobs() {
			if strconv.FormatInt(j.ArrayID, 10) != r.PathValue("id") {
				continue
			}
			switch r.PathValue("action") {
			case "cancel":
				j = cancelled(j)
			case "hold":
				j.UserHold = j.State == api.StatePending || j.State == api.StateHeld
			case "release":
				j.UserHold = false
			}
			elems = append(elems, j)
		}
		if elems == nil {
			writeJSON(w, http.StatusNotFound, api.Error{Code: api.CodeNotFound, Message: "no array " + r.PathValue("id")})
			return
		}
		writeJSON(w, http.StatusOK, api.JobList{Jobs: elems})
	})
	mux.HandleFunc("GET /api/v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.queries = append(f.queries, r.URL.Path+"?"+r.URL.RawQuery)
		f.mu.Unlock()
		// The name filter, as a server applies it.
		list := fixtureNodes()
		list.Nodes = slices.DeleteFunc(list.Nodes, func(n api.Node) bool { return !strings.Contains(n.Name, r.URL.Query().Get("name")) })
		writeJSON(w, http.StatusOK, list)
	})
	mux.HandleFunc("GET /api/v1/top", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.queries = append(f.queries, r.URL.Path+"?"+r.URL.RawQuery)
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, fakeTop(r.URL.Query(), fixtureNodes().Nodes, fixtureJobs()))
	})
	mux.HandleFunc("POST /api/v1/jobs/{id}/hold", func(w http.ResponseWriter, r *http.Request) {
		f.record(r)
		jobs := fixtureJobs()
		switch r.PathValue("id") {
		case "42":
			writeJSON(w, http.StatusConflict, api.Error{Code: api.CodeConflict, Message: "job 42 is running; only a job that has not started can be held"})
		case "43":
			job := jobs[1]
			job.State, job.UserHold = api.StateHeld, true
			writeJSON(w, http.StatusOK, job)
		default:
			writeJSON(w, http.StatusNotFound, api.Error{Code: api.CodeNotFound, Message: "no job " + r.PathValue("id")})
		}
	})
	mux.HandleFunc("POST /api/v1/jobs/{id}/release", func(w http.ResponseWriter, r *http.Request) {
		f.record(r)
		jobs := fixtureJobs()
		switch r.PathValue("id") {
		case "43":
			writeJSON(w, http.StatusOK, jobs[1])
		case "44":
			job := jobs[2]
			job.UserHold, job.Message = false, "waits for jobs 41 and 42 to succeed"
			writeJSON(w, http.StatusOK, job)
		default:
			writeJSON(w, http.StatusNotFound, api.Error{Code: api.CodeNotFound, Message: "no job " + r.PathValue("id")})
		}
	})
	mux.HandleFunc("GET /api/v1/jobs/{id}/why", func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("id") {
		case "42":
			writeJSON(w, http.StatusOK, api.Why{JobID: 42, State: api.StateRunning, Reasons: []string{}})
		case "43":
			writeJSON(w, http.StatusOK, fixtureWhy())
		default:
			writeJSON(w, http.StatusNotFound, api.Error{Code: api.CodeNotFound, Message: "no job " + r.PathValue("id")})
		}
	})
	mux.HandleFunc("GET /api/v1/queues", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, api.QueueList{Queues: fixtureQueues()})
	})
	mux.HandleFunc("PUT /api/v1/queues/{name}", func(w http.ResponseWriter, r *http.Request) {
		var q api.Queue
		if !f.decode(w, r, &q) {
			return
		}
		f.mu.Lock()
		f.queue = q
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, q)
	})
	mux.HandleFunc("GET /api/v1/teams", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, fixtureTeams())
	})
	mux.HandleFunc("PUT /api/v1/teams/{name}", func(w http.ResponseWriter, r *http.Request) {
		var t api.Team
		if !f.decode(w, r, &t) {
			return
		}
		f.mu.Lock()
		f.team = t
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, t)
	})
	for _, route := range []string{"/api/v1/queues/{name}", "/api/v1/teams/{name}", "/api/v1/reservations/{name}"} {
		mux.HandleFunc("DELETE "+route, func(w http.ResponseWriter, r *http.Request) {
			switch name := r.PathValue("name"); name {
			case "nlp", "batch", "3":
				f.mu.Lock()
				f.deleted = append(f.deleted, r.URL.Path)
				f.mu.Unlock()
				w.WriteHeader(http.StatusNoContent)
			default:
				writeJSON(w, http.StatusNotFound, api.Error{Code: api.CodeNotFound, Message: "no such thing: " + name})
			}
		})
	}
	mux.HandleFunc("POST /api/v1/nodes/{name}/{action}", func(w http.ResponseWriter, r *http.Request) {
		for _, n := range fixtureNodes().Nodes {
			if n.Name != r.PathValue("name") {
				continue
			}
			switch r.PathValue("action") {
			case "drain":
				var req api.DrainRequest
				if r.ContentLength != 0 {
					if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
						writeJSON(w, http.StatusBadRequest, api.Error{Code: api.CodeInvalid, Message: err.Error()})
						return
					}
				}
				f.mu.Lock()
				f.drains = append(f.drains, req)
				f.mu.Unlock()
				m := &api.Maintenance{Reason: cmp.Or(req.Reason, api.DefaultDrainReason), Start: testNow, End: req.Until, By: "admin"}
				if req.At != nil && req.At.After(testNow) {
					m.Start = *req.At
				} else {
					n.State = api.NodeDrained
					if len(n.Jobs) > 0 {
						n.State = api.NodeDraining
					}
				}
				n.Maintenance = m
			case "resume":
				n.State, n.Maintenance = api.NodeReady, nil
			}
			writeJSON(w, http.StatusOK, n)
			return
		}
		writeJSON(w, http.StatusNotFound, api.Error{Code: api.CodeNotFound, Message: "no node " + r.PathValue("name")})
	})
	mux.HandleFunc("GET /api/v1/reservations", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, fixtureReservations())
	})
	mux.HandleFunc("POST /api/v1/reservations", func(w http.ResponseWriter, r *http.Request) {
		var res api.Reservation
		if !f.decode(w, r, &res) {
			return
		}
		f.mu.Lock()
		f.reservation = res
		f.mu.Unlock()
		res.ID = 5
		for range res.Nodes {
			res.GPUs += 8
		}
		writeJSON(w, http.StatusCreated, res)
	})
	mux.HandleFunc("PUT /api/v1/config", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.config, f.configType = body, r.Header.Get("Content-Type")
		f.mu.Unlock()
		var c api.Config
		if err := yaml.Unmarshal(body, &c); err != nil {
			writeJSON(w, http.StatusBadRequest, api.Error{Code: api.CodeInvalid, Message: err.Error()})
			return
		}
		for _, q := range c.Queues {
			if q.Tier < 0 {
				writeJSON(w, http.StatusBadRequest, api.Error{Code: api.CodeInvalid, Message: "line 3: queue " + q.Name + ": tier must be 0 or more"})
				return
			}
		}
		writeJSON(w, http.StatusOK, c)
	})
	mux.HandleFunc("GET /api/v1/users", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, fixtureUsers())
	})
	mux.HandleFunc("PUT /api/v1/users/{name}", func(w http.ResponseWriter, r *http.Request) {
		var u api.User
		if !f.decode(w, r, &u) {
			return
		}
		f.mu.Lock()
		f.user = u
		f.mu.Unlock()
		if u.Created.IsZero() {
			u.Created = testNow
		}
		writeJSON(w, http.StatusOK, u)
	})
	mux.HandleFunc("GET /api/v1/tokens", func(w http.ResponseWriter, r *http.Request) {
		list := fixtureTokens()
		if user := r.URL.Query().Get("user"); user != "" {
			list.Tokens = slices.DeleteFunc(list.Tokens, func(t api.TokenInfo) bool { return t.User != user })
		}
		writeJSON(w, http.StatusOK, list)
	})
	mux.HandleFunc("POST /api/v1/tokens", func(w http.ResponseWriter, r *http.Request) {
		var req api.TokenRequest
		if !f.decode(w, r, &req) {
			return
		}
		f.mu.Lock()
		f.tokenReq = req
		f.mu.Unlock()
		tok := api.NewToken{TokenInfo: api.TokenInfo{ID: "eeee5555", User: req.User, Description: req.Description, Created: testNow},
			Token: "rota_eeee5555secretsecretsecretsecre"}
		if tok.User == "" {
			tok.User = r.Context().Value(callerKey{}).(api.Whoami).User
		}
		if req.TTLSeconds > 0 {
			tok.Expires = at(time.Duration(req.TTLSeconds) * time.Second)
		}
		writeJSON(w, http.StatusCreated, tok)
	})
	mux.HandleFunc("POST /api/v1/join-tokens", func(w http.ResponseWriter, r *http.Request) {
		var req api.JoinTokenRequest
		if !f.decode(w, r, &req) {
			return
		}
		f.mu.Lock()
		f.joinReq = req
		f.mu.Unlock()
		writeJSON(w, http.StatusCreated, api.NewJoinToken{
			JoinTokenInfo: api.JoinTokenInfo{ID: "jt03", Created: testNow, Expires: *at(time.Duration(req.TTLSeconds) * time.Second), Uses: req.Uses, Node: req.Node},
			Token:         "rotajoin_jt03secret",
			Command:       "rota agent --join rotajoin_jt03secret --server https://rota.example:7443",
		})
	})
	mux.HandleFunc("GET /api/v1/join-tokens", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"join_tokens": fixtureJoinTokens()})
	})
	mux.HandleFunc("GET /api/v1/audit", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.auditQuery = append(f.auditQuery, r.URL.RawQuery)
		f.mu.Unlock()
		pages := fixtureAudit()
		if r.URL.Query().Get("after") == pages[0].Next {
			writeJSON(w, http.StatusOK, pages[1])
			return
		}
		writeJSON(w, http.StatusOK, pages[0])
	})
	for route, known := range map[string][]string{
		"/api/v1/users/{name}":       {"carol"},
		"/api/v1/tokens/{name}":      {"bbbb2222"},
		"/api/v1/join-tokens/{name}": {"jt01"},
		"/api/v1/nodes/{name}":       {"ws-1"},
	} {
		mux.HandleFunc("DELETE "+route, func(w http.ResponseWriter, r *http.Request) {
			name := r.PathValue("name")
			switch {
			case name == "node-a" && r.URL.Query().Get("force") == "true":
				f.mu.Lock()
				f.deleted = append(f.deleted, r.URL.Path+"?"+r.URL.RawQuery)
				f.mu.Unlock()
				w.WriteHeader(http.StatusNoContent)
			case name == "node-a":
				writeJSON(w, http.StatusConflict, api.Error{Code: api.CodeConflict, Message: "node node-a runs job 42; drain it and wait for its jobs to end"})
			case slices.Contains(known, name):
				f.mu.Lock()
				f.deleted = append(f.deleted, r.URL.Path)
				f.mu.Unlock()
				w.WriteHeader(http.StatusNoContent)
			default:
				writeJSON(w, http.StatusNotFound, api.Error{Code: api.CodeNotFound, Message: "no such thing: " + name})
			}
		})
	}
	f.Server = httptest.NewUnstartedServer(f.authenticate(mux))
	start(f.Server)
	t.Cleanup(f.Close)
	return f
}

// authenticate answers as the real server does before any route: 401 without a known
// token (but not on the Unix socket, whose callers the server knows by their account),
// 415 for a body that is not JSON, and 403 for what the caller's role may not do.
func (f *fakeServer) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.auth = append(f.auth, r.Header.Get("Authorization"))
		f.mu.Unlock()
		who, ok := fakeTokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
		if addr, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr); addr != nil && addr.Network() == "unix" {
			who, ok = unixCaller, true
		}
		if !ok {
			writeJSON(w, http.StatusUnauthorized, api.Error{Code: api.CodeUnauthorized, Message: "missing or unknown API token"})
			return
		}
		wantType := "application/json"
		if r.URL.Path == "/api/v1/config" {
			wantType = "application/yaml"
		}
		if ct := r.Header.Get("Content-Type"); r.ContentLength != 0 && ct != wantType {
			writeJSON(w, http.StatusUnsupportedMediaType, api.Error{Code: api.CodeUnsupportedMedia, Message: "want a body of " + wantType + ", got " + ct})
			return
		}
		if rule := adminRule(r); rule != "" && who.Role != "admin" {
			writeJSON(w, http.StatusForbidden, api.Error{Code: api.CodeForbidden, Message: "only admins may do this", Role: who.Role, Rule: rule})
			return
		}
		if who.Role == "viewer" && r.Method != http.MethodGet {
			writeJSON(w, http.StatusForbidden, api.Error{Code: api.CodeForbidden, Role: who.Role, Rule: "read-only",
				Message: "role viewer may only read (rule read-only)"})
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, who)))
	})
}

// adminRule names the rule that keeps a route to admins, "" for the others.
func adminRule(r *http.Request) string {
	switch p := r.URL.Path; {
	case strings.HasPrefix(p, "/api/v1/users"):
		return "users.manage"
	case strings.HasPrefix(p, "/api/v1/join-tokens"):
		return "nodes.join"
	case p == "/api/v1/audit":
		return "audit.read"
	case r.Method == http.MethodDelete && strings.HasPrefix(p, "/api/v1/nodes/"):
		return "nodes.remove"
	}
	return ""
}

// record notes a job or array action.
func (f *fakeServer) record(r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.actions = append(f.actions, r.Method+" "+r.URL.Path)
}

// fixtureJob finds a job of fixtureJobs by its ID as the path gives it.
func fixtureJob(id string) (api.Job, bool) {
	for _, j := range fixtureJobs() {
		if strconv.FormatInt(j.ID, 10) == id {
			return j, true
		}
	}
	return api.Job{}, false
}

// cancelled is job after a cancel: a job that waits ends at once, an active one is asked to.
func cancelled(job api.Job) api.Job {
	switch {
	case job.State.Active():
		job.CancelRequested = true
	case !job.State.Terminal():
		job.State = api.StateCancelled
	}
	return job
}

// serveChunks serves a log in chunks: each request gets the next chunk from its offset,
// and the request that reaches the end is told the log is done.
func serveChunks(t *testing.T, w http.ResponseWriter, r *http.Request, chunks []string, attempt int) {
	log := strings.Join(chunks, "")
	var offset int
	if o := r.URL.Query().Get("offset"); o != "" {
		var err error
		if offset, err = strconv.Atoi(o); err != nil {
			t.Errorf("offset %q: %v", o, err)
		}
	}
	end := len(log)
	for i, n := 0, 0; i < len(chunks); i++ {
		if n += len(chunks[i]); n > offset {
			end = n
			break
		}
	}
	// Without wait, a request gets everything there is.
	if r.URL.Query().Get("wait") == "" {
		end = len(log)
	}
	w.Header().Set("X-Rota-Log-Size", strconv.Itoa(end))
	w.Header().Set("X-Rota-Log-Attempt", strconv.Itoa(attempt))
	if end == len(log) {
		w.Header().Set("X-Rota-Log-Done", "true")
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Write([]byte(log[offset:end]))
}

// decode reads a JSON request body into v, answering 400 when it cannot.
func (f *fakeServer) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		writeJSON(w, http.StatusUnsupportedMediaType, api.Error{Code: api.CodeInvalid, Message: "Content-Type " + ct})
		return false
	}
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		writeJSON(w, http.StatusBadRequest, api.Error{Code: api.CodeInvalid, Message: err.Error()})
		return false
	}
	return true
}

func fixtureWhy() api.Why {
	return api.Why{JobID: 43, State: api.StatePending, EstimatedStart: at(2*time.Hour + 10*time.Minute), Reasons: []string{
		"It needs 4 free GPUs on each of 2 nodes; the best node, node-b, has 2 free.",
		"3 jobs of higher priority wait ahead of it in queue batch.",
	}}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// run runs one verb against url with the fixed test environment: an admin's token.
func run(t *testing.T, url string, verb string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCtx(t, context.Background(), url, verb, args...)
}

func runCtx(t *testing.T, ctx context.Context, url string, verb string, args ...string) (int, string, string) {
	t.Helper()
	return testRun{env: map[string]string{"ROTA_SERVER": url, "ROTA_TOKEN": adminToken}}.runCtx(t, ctx, verb, args...)
}

// testRun is an environment to run verbs in, for the tests that need another than run's.
type testRun struct {
	env       map[string]string
	stdin     string
	configDir string
	http      *http.Client
	stdout    io.Writer // where the verb writes, in place of the stdout returned
}

func (tr testRun) run(t testing.TB, verb string, args ...string) (int, string, string) {
	t.Helper()
	return tr.runCtx(t, context.Background(), verb, args...)
}

func (tr testRun) runCtx(t testing.TB, ctx context.Context, verb string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	var stdout io.Writer = &out
	if tr.stdout != nil {
		stdout = tr.stdout
	}
	cfg := Config{
		Stdout:    stdout,
		Stderr:    &errOut,
		Stdin:     strings.NewReader(tr.stdin),
		Now:       func() time.Time { return testNow },
		Location:  time.UTC,
		Getenv:    func(k string) string { return tr.env[k] },
		ConfigDir: tr.configDir,
		Getwd:     func() (string, error) { return "/home/alice/proj", nil },
		HTTP:      tr.http,
	}
	code := cfg.Run(ctx, verb, args)
	return code, out.String(), errOut.String()
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}
