package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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
				WorkDir: "/home/alice/llama", GPUs: 2, GPUModel: "A100", CPUs: 16, MemoryMB: 128 << 10, TimeLimit: 24 * 3600},
			State: api.StateRunning, SubmitTime: *at(-2 * time.Hour), StartTime: at(-90*time.Minute - 7*time.Second),
			Attempts: 2, Nodes: []string{"node-a"}, GPUIDs: []string{"GPU-aaaa-0", "GPU-aaaa-1"},
		},
		{
			ID:    43,
			Spec:  api.JobSpec{Name: "sweep-7", Queue: "batch", Team: "vision", User: "bob", Command: []string{"python", "sweep.py"}, GPUs: 8, GPUsPerNode: 4, Nodes: 2, CPUs: 32, MemoryMB: 1536},
			State: api.StatePending, Reason: "Resources", Message: "needs 4 free GPUs on 2 nodes; best node node-b has 2",
			SubmitTime: *at(-12*time.Minute - 5*time.Second), EstimatedStart: at(2 * time.Hour),
		},
		{
			ID:    44,
			Spec:  api.JobSpec{Queue: "train", User: "carol", Command: []string{"./run.sh"}, GPUs: 1},
			State: api.StateHeld, Reason: "Dependency", SubmitTime: *at(-3 * 24 * time.Hour),
		},
		{
			ID:    45,
			Spec:  api.JobSpec{Name: "a-very-long-job-name-that-goes-on-and-on", Queue: "interactive", User: "dave", Command: []string{"bash"}, GPUs: 1},
			State: api.StateFailed, Reason: api.ReasonOOM, Message: "killed: out of memory (64G limit)",
			SubmitTime: *at(-5 * time.Hour), StartTime: at(-4 * time.Hour), EndTime: at(-3*time.Hour - 30*time.Minute),
			Attempts: 1, Nodes: []string{"node-b"}, GPUIDs: []string{"GPU-bbbb-3"}, ExitCode: intp(137),
		},
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
				Placements: []api.Placement{{Node: "node-a", GPUIndices: []int{4, 5}, GPUIDs: j.GPUIDs, CPUs: 16, MemoryMB: 128 << 10}}},
		},
		Events: []api.Event{
			{ID: 1, Time: *at(-2 * time.Hour), Actor: "alice", Kind: api.EventSubmit, JobID: 42, To: api.StatePending},
			{ID: 2, Time: *at(-119 * time.Minute), Actor: "scheduler", Kind: api.EventTransition, JobID: 42, Attempt: 1, Node: "node-b", From: api.StatePending, To: api.StateAssigned},
			{ID: 3, Time: *at(-95 * time.Minute), Actor: "scheduler", Kind: api.EventTransition, JobID: 42, Attempt: 1, From: api.StateRunning, To: api.StatePending, Reason: api.ReasonPreempted, Message: "urgent job 40 needed the GPUs"},
			{ID: 4, Time: *at(-91 * time.Minute), Actor: "scheduler", Kind: api.EventTransition, JobID: 42, Attempt: 2, Node: "node-a", From: api.StatePending, To: api.StateAssigned},
		},
	}
}

func fixtureNodes() api.NodeList {
	gpus := func(model string, n int, memMB int64) []api.GPU {
		var out []api.GPU
		for i := range n {
			out = append(out, api.GPU{Index: i, UUID: "GPU-" + model + "-" + strconv.Itoa(i), Model: model, MemoryMB: memMB, Healthy: true})
		}
		return out
	}
	b := gpus("H100", 8, 80<<10)
	b[7].Healthy = false
	return api.NodeList{Nodes: []api.Node{
		{Name: "node-a", Inventory: api.Inventory{CPUs: 128, MemoryMB: 1 << 20, GPUs: gpus("A100", 8, 80<<10), Labels: map[string]string{"pool": "train", "rack": "r1"}, DeviceSource: "nvml"},
			State: api.NodeReady, LastHeartbeat: *at(-3 * time.Second), GPUsUsed: 2, CPUsUsed: 16, Jobs: []int64{42}},
		{Name: "node-b", Inventory: api.Inventory{CPUs: 96, MemoryMB: 768 << 10, GPUs: b, DeviceSource: "nvml"},
			State: api.NodeDraining, LastHeartbeat: *at(-75 * time.Second), GPUsUsed: 0, CPUsUsed: 0},
		{Name: "ws-1", Inventory: api.Inventory{CPUs: 8, MemoryMB: 1536, DeviceSource: "none"}, State: api.NodeLost},
	}}
}

// fakeServer answers the client routes from fixtures and records what it was sent.
type fakeServer struct {
	*httptest.Server
	mu       sync.Mutex // guards the fields below
	queries  []string   // raw query of every GET /api/v1/jobs
	spec     api.JobSpec
	logCalls []string // raw query of every logs request
}

func newFakeServer(t *testing.T) *fakeServer {
	f := &fakeServer{}
	mux := http.NewServeMux()
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
		f.mu.Unlock()
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
		default:
			writeJSON(w, http.StatusNotFound, api.Error{Code: api.CodeNotFound, Message: "no job " + r.PathValue("id")})
		}
	})
	mux.HandleFunc("POST /api/v1/jobs/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		jobs := fixtureJobs()
		var job api.Job
		switch r.PathValue("id") {
		case "42":
			job = jobs[0]
			job.CancelRequested = true
		case "43":
			job = jobs[1]
			job.State = api.StateCancelled
		case "45":
			job = jobs[3]
		default:
			writeJSON(w, http.StatusNotFound, api.Error{Code: api.CodeNotFound, Message: "no job " + r.PathValue("id")})
			return
		}
		writeJSON(w, http.StatusOK, job)
	})
	mux.HandleFunc("GET /api/v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, fixtureNodes())
	})
	mux.HandleFunc("GET /api/v1/queues", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string][]api.Queue{"queues": {{Name: "train", Tier: 1, DefaultTimeLimit: 86400}}})
	})
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// run runs one verb against url with the fixed test environment.
func run(t *testing.T, url string, verb string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCtx(t, context.Background(), url, verb, args...)
}

func runCtx(t *testing.T, ctx context.Context, url string, verb string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	env := map[string]string{"ROTA_SERVER": url, "USER": "alice"}
	cfg := Config{
		Stdout:   &out,
		Stderr:   &errOut,
		Now:      func() time.Time { return testNow },
		Location: time.UTC,
		Getenv:   func(k string) string { return env[k] },
		Getwd:    func() (string, error) { return "/home/alice/proj", nil },
	}
	code := cfg.Run(ctx, verb, args)
	return code, out.String(), errOut.String()
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}
