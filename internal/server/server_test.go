package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
	"github.com/rotahq/rota/internal/store/storetest"
)

// fakeClock is set by the test; the server reads it for every timestamp and liveness check.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type harness struct {
	t     *testing.T
	url   string // store URL; empty means SQLite in dir
	srv   *Server
	http  *httptest.Server
	clock *fakeClock
	dir   string
	st    store.Store
	// token is the first admin's, which the server writes to its data dir; people's
	// calls carry it. agent reaches the server in-process, as the agent of `rota up`
	// does: agents' calls go through it.
	token string
	agent *http.Client
	// cfg is applied to the server's Config at every open; wrap, if set, stands between
	// the server and the store, to inject faults.
	cfg  func(*Config)
	wrap func(store.Store) store.Store
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir()}
	h.open()
	return h
}

// open starts a server on the harness's data dir, as a restart would.
func (h *harness) open() {
	h.t.Helper()
	url := h.url
	if url == "" {
		url = "sqlite://" + filepath.Join(h.dir, "rota.db")
	}
	st, err := store.Open(context.Background(), url, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	cfg := Config{DataDir: h.dir, Clock: h.clock, LostAfter: time.Minute, NotReadyAfter: 10 * time.Second}
	if h.cfg != nil {
		h.cfg(&cfg)
	}
	var served store.Store = st
	if h.wrap != nil {
		served = h.wrap(st)
	}
	srv, err := New(context.Background(), cfg, served, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	tok, err := os.ReadFile(filepath.Join(h.dir, "admin-token"))
	if err != nil {
		h.t.Fatal(err)
	}
	h.token = strings.TrimSpace(string(tok))
	h.srv, h.st = srv, st
	h.http = httptest.NewUnstartedServer(srv.Handler())
	h.http.Config.ConnContext = srv.ConnContext
	h.http.Start()
	local := NewLocalListener()
	hs := &http.Server{Handler: srv.Handler(), ConnContext: srv.ConnContext}
	go hs.Serve(local)
	h.agent = local.Client()
	h.t.Cleanup(func() { hs.Close(); h.http.Close(); srv.Close(); st.Close() })
}

func (h *harness) restart() {
	h.http.Close()
	h.st.Close()
	h.open()
}

// do calls the API as the first admin, or, for agent routes, as the in-process agent.
func (h *harness) do(method, path string, body any, out any) int {
	h.t.Helper()
	return h.doAs(h.token, method, path, body, out)
}

// doAs calls the API with a token ("" for none); agent routes go in-process.
func (h *harness) doAs(token, method, path string, body any, out any) int {
	h.t.Helper()
	var buf bytes.Buffer
	if body != nil {
		json.NewEncoder(&buf).Encode(body)
	}
	client, base := http.DefaultClient, h.http.URL
	if strings.HasPrefix(path, "/api/v1/agents/") {
		client, base, token = h.agent, "http://rota-up", ""
	}
	req, _ := http.NewRequest(method, base+path, &buf)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode
}

func (h *harness) submit(spec api.JobSpec) api.Job {
	h.t.Helper()
	var j api.Job
	if code := h.do("POST", "/api/v1/jobs", spec, &j); code != http.StatusCreated {
		h.t.Fatalf("submit: status %d", code)
	}
	return j
}

func (h *harness) job(id int64) api.JobDetail {
	h.t.Helper()
	var d api.JobDetail
	if code := h.do("GET", fmt.Sprintf("/api/v1/jobs/%d", id), nil, &d); code != http.StatusOK {
		h.t.Fatalf("get job %d: status %d", id, code)
	}
	return d
}

func (h *harness) beat(node string, gpus int, tasks ...api.TaskStatus) api.HeartbeatResponse {
	h.t.Helper()
	inv := api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake"}
	for i := range gpus {
		inv.GPUs = append(inv.GPUs, api.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", node, i), Model: "H100", MemoryMB: 81559, Healthy: true})
	}
	return h.heartbeat(node, inv, tasks)
}

// heartbeat reports as the node's one agent, synced to the last answer.
func (h *harness) heartbeat(node string, inv api.Inventory, tasks []api.TaskStatus) api.HeartbeatResponse {
	h.t.Helper()
	var resp api.HeartbeatResponse
	var e api.Error
	hb := api.Heartbeat{Node: node, Inventory: inv, Tasks: tasks, Instance: "agent-" + node, ClusterID: h.srv.ClusterID(), Synced: true}
	if code := h.do("POST", "/api/v1/agents/"+node+"/heartbeat", hb, &resp); code != http.StatusOK {
		h.do("POST", "/api/v1/agents/"+node+"/heartbeat", hb, &e)
		h.t.Fatalf("heartbeat %s: status %d: %s", node, code, e.Message)
	}
	return resp
}

func (h *harness) cycle() {
	h.t.Helper()
	if err := h.srv.Cycle(context.Background()); err != nil {
		h.t.Fatal(err)
	}
}

func intp(v int) *int { return &v }

func TestLifecycleThroughAgentProtocol(t *testing.T) {
	testLifecycle(t, newHarness(t))
}

// The same story on PostgreSQL, the production backend, including a restart.
func TestLifecycleOnPostgres(t *testing.T) {
	url := storetest.StartPostgres(t)
	h := &harness{t: t, url: url, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir()}
	h.open()
	testLifecycle(t, h)
	h.restart()
	var list api.JobList
	h.do("GET", "/api/v1/jobs?state=all", nil, &list)
	if len(list.Jobs) != 2 || list.Jobs[0].State != api.StateSucceeded || list.Jobs[1].State != api.StateAssigned {
		t.Fatalf("after a restart on PostgreSQL: %+v", list.Jobs)
	}
}

func testLifecycle(t *testing.T, h *harness) {
	h.beat("n1", 2)
	a := h.submit(api.JobSpec{GPUs: 2, Command: []string{"train"}, Env: map[string]string{"LR": "0.1"}})
	b := h.submit(api.JobSpec{GPUs: 1, Command: []string{"eval"}})
	h.cycle()

	if got := h.job(a.ID); got.State != api.StateAssigned || len(got.GPUIDs) != 2 {
		t.Fatalf("job a: %s on %v; want ASSIGNED with 2 GPUs", got.State, got.GPUIDs)
	}
	if got := h.job(b.ID); got.State != api.StatePending || got.Reason == "" {
		t.Fatalf("job b: %s reason %q; want PENDING with a reason", got.State, got.Reason)
	}

	resp := h.beat("n1", 2)
	if len(resp.Tasks) != 1 || resp.Tasks[0].JobID != a.ID || resp.Tasks[0].Attempt != 1 {
		t.Fatalf("desired tasks %+v; want job %d attempt 1", resp.Tasks, a.ID)
	}
	task := resp.Tasks[0]
	if task.Env[api.EnvJobID] != fmt.Sprint(a.ID) || task.Env["LR"] != "0.1" || task.Env[api.EnvQueue] != "train" || task.Env[api.EnvTimeLimitEnd] == "" {
		t.Errorf("task env %v lacks the job contract", task.Env)
	}

	now := h.clock.Now()
	h.beat("n1", 2, api.TaskStatus{JobID: a.ID, Attempt: 1, State: api.StateRunning, PID: 42, StartTime: &now})
	if got := h.job(a.ID); got.State != api.StateRunning || got.StartTime == nil {
		t.Fatalf("job a: %s; want RUNNING with a start time", got.State)
	}

	code := 0
	end := api.TaskStatus{JobID: a.ID, Attempt: 1, State: api.StateSucceeded, ExitCode: &code}
	resp = h.beat("n1", 2, end)
	if len(resp.Acked) != 1 || resp.Acked[0].JobID != a.ID {
		t.Fatalf("acked %+v; want job %d", resp.Acked, a.ID)
	}
	if len(resp.Tasks) != 0 {
		t.Errorf("desired tasks after the end: %+v; want none", resp.Tasks)
	}
	// A duplicated report of the same end changes nothing and is acknowledged again.
	resp = h.beat("n1", 2, end)
	if got := h.job(a.ID); got.State != api.StateSucceeded || *got.ExitCode != 0 || len(resp.Acked) != 1 {
		t.Fatalf("job a after a duplicate report: %s; want SUCCEEDED and acked", got.State)
	}
	h.cycle()
	if got := h.job(b.ID); got.State != api.StateAssigned {
		t.Fatalf("job b: %s; want ASSIGNED once the GPUs freed", got.State)
	}

	d := h.job(a.ID)
	var kinds []string
	for _, e := range d.Events {
		kinds = append(kinds, fmt.Sprintf("%s:%s", e.Kind, e.To))
	}
	want := []string{"submit:PENDING", "transition:ASSIGNED", "transition:RUNNING", "transition:SUCCEEDED"}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Errorf("events %v; want %v", kinds, want)
	}
}

// Node loss is not the job's doing: it requeues the job without spending its retries, up
// to maxSystemRequeues lost attempts.
func TestNodeLostRequeuesWithoutSpendingRetries(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 1)
	h.beat("n2", 1)
	keep := h.submit(api.JobSpec{GPUs: 1, Command: []string{"a"}, Retries: intp(1)})
	none := h.submit(api.JobSpec{GPUs: 1, Command: []string{"b"}, Retries: intp(0)})
	h.cycle()

	// Both nodes go silent past LostAfter.
	h.clock.Add(2 * time.Minute)
	h.srv.checkNodes(context.Background())
	for _, j := range []api.Job{keep, none} {
		if got := h.job(j.ID); got.State != api.StatePending || got.Reason != api.ReasonNodeLost || got.Failures != 0 {
			t.Fatalf("job %d after its node was lost: %s (%s), %d failures; want PENDING (node_lost) with none spent", j.ID, got.State, got.Reason, got.Failures)
		}
	}
	// A node that comes back syncs first (its agent may still run the lost attempts):
	// nothing is placed there until its agent confirms, in the next heartbeat, that it
	// runs nothing unlisted. Then the requeued job runs there as attempt 2.
	h.beat("n1", 1)
	h.cycle()
	if got := h.job(keep.ID); got.State != api.StatePending {
		t.Fatalf("placed on a node that has not synced: %s on %v", got.State, got.Nodes)
	}
	h.beat("n1", 1)
	h.cycle()
	resp := h.beat("n1", 1)
	if len(resp.Tasks) != 1 || resp.Tasks[0].JobID != keep.ID || resp.Tasks[0].Attempt != 2 {
		t.Fatalf("desired tasks %+v; want job %d attempt 2", resp.Tasks, keep.ID)
	}
	// A late report about attempt 1 is stale: acknowledged, and it changes nothing.
	code := 0
	resp = h.beat("n1", 1, api.TaskStatus{JobID: keep.ID, Attempt: 1, State: api.StateSucceeded, ExitCode: &code})
	if got := h.job(keep.ID); got.State != api.StateAssigned || got.Attempts != 2 || len(resp.Acked) != 1 {
		t.Fatalf("after a stale report: %s attempt %d acked %v; want ASSIGNED attempt 2 acked", got.State, got.Attempts, resp.Acked)
	}

	// A job whose every node dies is requeued maxSystemRequeues times, then fails with
	// its next loss.
	for i := 0; ; i++ {
		h.beat("n2", 1) // back: syncing
		h.beat("n2", 1) // synced
		h.cycle()
		got := h.job(none.ID)
		if got.State == api.StateFailed {
			if got.Attempts != maxSystemRequeues+1 || !strings.Contains(got.Message, "not requeued again") {
				t.Fatalf("failed after %d attempts (%s); want %d", got.Attempts, got.Message, maxSystemRequeues+1)
			}
			break
		}
		if got.State != api.StateAssigned || i > maxSystemRequeues {
			t.Fatalf("round %d: %s, attempt %d", i, got.State, got.Attempts)
		}
		h.clock.Add(2 * time.Minute)
		h.beat("n1", 1) // n1 stays alive
		h.srv.checkNodes(context.Background())
	}
}

func TestRestartKeepsAcknowledgedWork(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 1)
	run := h.submit(api.JobSpec{GPUs: 1, Command: []string{"a"}})
	wait := h.submit(api.JobSpec{GPUs: 1, Command: []string{"b"}})
	h.cycle()
	h.restart()

	if got := h.job(run.ID); got.State != api.StateAssigned || len(got.GPUIDs) != 1 {
		t.Fatalf("after restart, placed job: %s %v", got.State, got.GPUIDs)
	}
	if got := h.job(wait.ID); got.State != api.StatePending {
		t.Fatalf("after restart, waiting job: %s", got.State)
	}
	// The node is not judged lost for the downtime: it has a full period from the restart.
	h.srv.checkNodes(context.Background())
	var nodes api.NodeList
	h.do("GET", "/api/v1/nodes", nil, &nodes)
	if len(nodes.Nodes) != 1 || nodes.Nodes[0].State != api.NodeReady || nodes.Nodes[0].GPUsUsed != 1 {
		t.Fatalf("nodes after restart: %+v", nodes.Nodes)
	}
	// IDs continue after the highest stored one.
	if next := h.submit(api.JobSpec{Command: []string{"c"}}); next.ID != wait.ID+1 {
		t.Errorf("next ID %d; want %d", next.ID, wait.ID+1)
	}
}

func TestCancel(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 1)
	running := h.submit(api.JobSpec{GPUs: 1, Command: []string{"a"}})
	pending := h.submit(api.JobSpec{GPUs: 1, Command: []string{"b"}})
	h.cycle()

	var j api.Job
	h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", pending.ID), nil, &j)
	if j.State != api.StateCancelled {
		t.Fatalf("pending job after cancel: %s; want CANCELLED at once", j.State)
	}
	h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", running.ID), nil, &j)
	if j.State != api.StateAssigned || !j.CancelRequested {
		t.Fatalf("active job after cancel: %s requested=%v; want it to wait for the agent", j.State, j.CancelRequested)
	}
	resp := h.beat("n1", 1)
	if len(resp.Tasks) != 1 || !resp.Tasks[0].Stop || resp.Tasks[0].StopReason != api.ReasonCancelled {
		t.Fatalf("desired tasks %+v; want a stop order", resp.Tasks)
	}
	code := 143
	h.beat("n1", 1, api.TaskStatus{JobID: running.ID, Attempt: 1, State: api.StateCancelled, Reason: api.ReasonCancelled, ExitCode: &code})
	if got := h.job(running.ID); got.State != api.StateCancelled {
		t.Fatalf("after the agent's report: %s; want CANCELLED", got.State)
	}
	if status := h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", running.ID), nil, nil); status != http.StatusConflict {
		t.Errorf("cancel of an ended job: %d; want 409", status)
	}
	if status := h.do("POST", "/api/v1/jobs/999/cancel", nil, nil); status != http.StatusNotFound {
		t.Errorf("cancel of an unknown job: %d; want 404", status)
	}
}

func TestSubmitValidation(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	cases := []struct {
		name  string
		spec  api.JobSpec
		field string
	}{
		{"empty command", api.JobSpec{}, "command"},
		{"negative gpus", api.JobSpec{Command: []string{"x"}, GPUs: -1}, "gpus"},
		{"more gpus than any node", api.JobSpec{Command: []string{"x"}, GPUs: 9}, "gpus"},
		{"unknown model", api.JobSpec{Command: []string{"x"}, GPUs: 1, GPUModel: "A100"}, "gpu_model"},
		{"unknown queue", api.JobSpec{Command: []string{"x"}, Queue: "fast"}, "queue"},
		{"time over queue max", api.JobSpec{Command: []string{"x"}, Queue: "interactive", TimeLimit: 9 * 3600}, "time_limit_s"},
		{"bad signal", api.JobSpec{Command: []string{"x"}, Signal: "SIGFOO"}, "signal"},
		{"reserved env", api.JobSpec{Command: []string{"x"}, Env: map[string]string{"ROTA_JOB_ID": "1"}}, "env"},
		{"gang without per-node count", api.JobSpec{Command: []string{"x"}, Nodes: 2}, "gpus_per_node"},
		{"too many cpus", api.JobSpec{Command: []string{"x"}, CPUs: 100}, "cpus"},
		{"bad name", api.JobSpec{Command: []string{"x"}, Name: "a b"}, "name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var e api.Error
			if code := h.do("POST", "/api/v1/jobs", tc.spec, &e); code != http.StatusBadRequest || e.Field != tc.field || e.Message == "" {
				t.Errorf("got %d field %q (%s); want 400 field %q", code, e.Field, e.Message, tc.field)
			}
		})
	}
	var list api.JobList
	h.do("GET", "/api/v1/jobs?state=all", nil, &list)
	if len(list.Jobs) != 0 {
		t.Errorf("refused submissions stored %d jobs", len(list.Jobs))
	}
	// Defaults are filled in and a short model name resolves to the node's.
	j := h.submit(api.JobSpec{Command: []string{"/usr/bin/python3", "x.py"}, GPUs: 1, GPUModel: "h100"})
	if j.Spec.Queue != "train" || j.Spec.TimeLimit != day || j.Spec.CPUs != 1 || j.Spec.Signal != "SIGTERM" || j.Spec.Name != "python3" ||
		j.Spec.GPUModel != "H100" || *j.Spec.Retries != 0 || j.Spec.RestartPolicy != api.RestartNever || j.Spec.User != "admin" {
		t.Errorf("defaults not filled in: %+v", j.Spec)
	}
}

func TestListPaginates(t *testing.T) {
	h := newHarness(t)
	for range 7 {
		h.submit(api.JobSpec{Command: []string{"x"}})
	}
	var ids []int64
	after := ""
	for {
		var page api.JobList
		h.do("GET", "/api/v1/jobs?limit=3"+after, nil, &page)
		for _, j := range page.Jobs {
			ids = append(ids, j.ID)
		}
		if page.Next == "" {
			break
		}
		after = "&after=" + page.Next
	}
	if fmt.Sprint(ids) != "[1 2 3 4 5 6 7]" {
		t.Errorf("paged IDs %v", ids)
	}
}

func TestLogShipping(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 1)
	j := h.submit(api.JobSpec{GPUs: 1, Command: []string{"x"}})
	h.cycle()
	post := func(node string, offset int, data string) (int, api.LogAck) {
		req, _ := http.NewRequest("POST", fmt.Sprintf("http://rota-up/api/v1/agents/%s/logs/%d/1?offset=%d", node, j.ID, offset), bytes.NewBufferString(data))
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := h.agent.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var ack api.LogAck
		json.NewDecoder(resp.Body).Decode(&ack)
		return resp.StatusCode, ack
	}
	if _, ack := post("n1", 0, "hello "); ack.Size != 6 {
		t.Fatalf("size %d after first chunk", ack.Size)
	}
	if _, ack := post("n1", 0, "hello "); ack.Size != 6 {
		t.Fatalf("a resent chunk grew the log to %d", ack.Size)
	}
	if _, ack := post("n1", 20, "gap"); ack.Size != 6 {
		t.Fatalf("a chunk past the end was written: size %d", ack.Size)
	}
	post("n1", 6, "world\n")
	if code, _ := post("n2", 0, "intruder"); code != http.StatusNotFound {
		t.Errorf("a node the job is not on shipped a log: %d", code)
	}
	got, hdr := h.readLog(j.ID, 6, "0")
	if got != "world\n" || hdr.Get("X-Rota-Log-Size") != "12" || hdr.Get("X-Rota-Log-Done") != "false" {
		t.Errorf("log read %q size %s done %s", got, hdr.Get("X-Rota-Log-Size"), hdr.Get("X-Rota-Log-Done"))
	}
}

func TestGangGetsTorchrunEnvironment(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	h.beat("n2", 8)
	j := h.submit(api.JobSpec{Nodes: 2, GPUsPerNode: 8, Command: []string{"torchrun", "train.py"}})
	h.cycle()
	got := h.job(j.ID)
	if got.State != api.StateAssigned || len(got.Nodes) != 2 || len(got.GPUIDs) != 16 {
		t.Fatalf("gang: %s on %v with %d GPUs; want ASSIGNED on 2 nodes with 16", got.State, got.Nodes, len(got.GPUIDs))
	}
	ranks := map[string]bool{}
	for _, node := range []string{"n1", "n2"} {
		resp := h.beat(node, 8)
		if len(resp.Tasks) != 1 {
			t.Fatalf("%s has %d tasks; want 1", node, len(resp.Tasks))
		}
		env := resp.Tasks[0].Env
		if env[api.EnvNNodes] != "2" || env[api.EnvNProcPerNode] != "8" || env[api.EnvWorldSize] != "16" ||
			env[api.EnvMasterAddr] != got.Nodes[0] || env[api.EnvMasterPort] == "" || env[api.EnvNodeList] != strings.Join(got.Nodes, ",") {
			t.Errorf("%s: torchrun environment %v", node, env)
		}
		ranks[env[api.EnvNodeRank]] = true
	}
	if !ranks["0"] || !ranks["1"] {
		t.Errorf("node ranks %v; want 0 and 1", ranks)
	}
}

// A job that succeeds before a cancel or a preemption reaches it is recorded as succeeded,
// not cancelled or requeued to run again.
func TestSuccessBeatsALateStop(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 2)
	j := h.submit(api.JobSpec{GPUs: 1, Command: []string{"a"}})
	h.cycle()
	h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", j.ID), nil, nil)
	code := 0
	h.beat("n1", 2, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateSucceeded, ExitCode: &code})
	if got := h.job(j.ID); got.State != api.StateSucceeded {
		t.Errorf("job that exited 0 before its cancel landed: %s; want SUCCEEDED", got.State)
	}
}

// A watching agent hears that its node's desired state changed as soon as a job is placed
// there, and a watch on another node keeps waiting.
func TestWatchAnswersWhenTheNodeChanges(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 1)
	h.beat("n2", 1)
	answers := make(chan string, 2)
	for _, node := range []string{"n1", "n2"} {
		go func() {
			var ans api.WatchAnswer
			resp, err := h.agent.Get("http://rota-up/api/v1/agents/" + node + "/watch?version=0&wait=5")
			if err != nil {
				answers <- node + " error"
				return
			}
			json.NewDecoder(resp.Body).Decode(&ans)
			resp.Body.Close()
			answers <- fmt.Sprintf("%s %d", node, ans.Version)
		}()
	}
	time.Sleep(100 * time.Millisecond) // let both requests start waiting
	h.submit(api.JobSpec{GPUs: 1, Command: []string{"x"}})
	h.cycle()
	if got := <-answers; got != "n1 1" {
		t.Errorf("first watch answer %q; want n1 at version 1 (the job went to n1)", got)
	}
	if got := <-answers; got != "n2 0" {
		t.Errorf("second watch answer %q; want n2 unchanged at 0 after its wait", got)
	}
}
