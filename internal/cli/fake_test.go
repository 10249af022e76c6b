package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
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
				WorkDir: "/home/alice/llama", GPUs: 2, GPUModel: "A100", CPUs: 16, MemoryMB: 128 << 10, TimeLimit: 24 * 3600},
			State: api.StateRunning, SubmitTime: *at(-2 * time.Hour), StartTime: at(-90*time.Minute - 7*time.Second),
			Attempts: 2, Nodes: []string{"node-a"}, GPUIDs: []string{"GPU-aaaa-0", "GPU-aaaa-1"},
			Borrowing: true, LastCheckpoint: at(-20 * time.Minute),
		},
		{
			ID:    43,
			Spec:  api.JobSpec{Name: "sweep-7", Queue: "batch", Team: "vision", User: "bob", Command: []string{"python", "sweep.py"}, GPUs: 8, GPUsPerNode: 4, Nodes: 2, CPUs: 32, MemoryMB: 1536},
			State: api.StatePending, Reason: "Resources", Message: "needs 4 free GPUs on 2 nodes; best node node-b has 2",
			SubmitTime: *at(-12*time.Minute - 5*time.Second), EstimatedStart: at(2 * time.Hour),
			Priority: &api.Priority{Tier: 1, Score: 0.8375, FairShare: 0.5, Age: 0.3125, Size: 0.1, Nice: 0.075},
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

func fixtureQueues() []api.Queue {
	return []api.Queue{
		{Name: "interactive", Tier: 3, DefaultTimeLimit: 3600, MaxTimeLimit: 8 * 3600, Grace: 30, Pools: []string{"dev"}, UserGPULimit: 2},
		{Name: "train", Tier: 1, DefaultTimeLimit: 86400, MaxTimeLimit: 7 * 86400, Grace: 300, MaxGrace: 1800, Pools: []string{"train", "dev"}},
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
	}}
}

// fakeServer answers the client routes from fixtures and records what it was sent.
type fakeServer struct {
	*httptest.Server
	mu          sync.Mutex // guards the fields below
	queries     []string   // raw query of every GET /api/v1/jobs
	spec        api.JobSpec
	logCalls    []string // raw query of every logs request
	queue       api.Queue
	team        api.Team
	reservation api.Reservation
	config      []byte // body of the last PUT /api/v1/config
	configType  string // and its Content-Type
	deleted     []string
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
		case "44":
			j := fixtureJobs()[2]
			writeJSON(w, http.StatusOK, api.JobDetail{Job: j, AttemptList: []api.Attempt{}, Events: []api.Event{
				{ID: 6, Time: j.SubmitTime, Actor: "carol", Kind: api.EventSubmit, JobID: 44, To: api.StateHeld, Reason: "Dependency"},
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
	mux.HandleFunc("POST /api/v1/jobs/{id}/hold", func(w http.ResponseWriter, r *http.Request) {
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
				n.State = api.NodeDrained
				if len(n.Jobs) > 0 {
					n.State = api.NodeDraining
				}
			case "resume":
				n.State = api.NodeReady
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
		res.ID, res.Nodes = 5, []string{"node-a", "node-b"}
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
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
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
