package server

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/rotahq/rota/internal/api"
)

// islandsInventory is a node of eight H100s in two NVLink islands, {0-3} and {4-7}, with
// the container runtime given ("" for none).
func islandsInventory(node, runtime string) api.Inventory {
	inv := api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake", ContainerRuntime: runtime}
	for i := range 8 {
		g := api.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", node, i), Model: "H100", MemoryMB: 81559, Healthy: true}
		for j := range 8 {
			if j != i && j/4 == i/4 {
				g.NVLinkPeers = append(g.NVLinkPeers, j)
			}
		}
		inv.GPUs = append(inv.GPUs, g)
	}
	return inv
}

// beatChecked reports as the node's agent with a health-check result.
func (h *harness) beatChecked(node string, inv api.Inventory, hc *api.HealthCheck) api.HeartbeatResponse {
	h.t.Helper()
	var resp api.HeartbeatResponse
	hb := api.Heartbeat{Node: node, Inventory: inv, Instance: "agent-" + node, ClusterID: h.srv.ClusterID(), Synced: true, HealthCheck: hc}
	if code := h.do("POST", "/api/v1/agents/"+node+"/heartbeat", hb, &resp); code != http.StatusOK {
		h.t.Fatalf("heartbeat %s: status %d", node, code)
	}
	return resp
}

func (h *harness) why(id int64) api.Why {
	h.t.Helper()
	var why api.Why
	if code := h.do("GET", fmt.Sprintf("/api/v1/jobs/%d/why", id), nil, &why); code != http.StatusOK {
		h.t.Fatalf("why %d: status %d", id, code)
	}
	return why
}

func taskOf(resp api.HeartbeatResponse, id int64) (api.Task, bool) {
	for _, t := range resp.Tasks {
		if t.JobID == id {
			return t, true
		}
	}
	return api.Task{}, false
}

const trainImage = "registry.example.com/ml/train:2.1"

// An image job waits, saying why, while no node has a container runtime, and goes to the
// first node that reports one, whose agent is told the image.
func TestImageJobWaitsForANodeWithAContainerRuntime(t *testing.T) {
	h := newHarness(t)
	h.heartbeat("plain", islandsInventory("plain", ""), nil)
	j := h.submit(api.JobSpec{Command: []string{"python", "train.py"}, GPUs: 2, Image: trainImage})
	h.cycle()
	d := h.job(j.ID)
	if d.Job.State != api.StatePending || d.Job.Reason != "NoNodeMatches" {
		t.Fatalf("job %s %s (%s); want PENDING NoNodeMatches", d.Job.State, d.Job.Reason, d.Job.Message)
	}
	why := strings.Join(h.why(j.ID).Reasons, " ")
	for _, want := range []string{"no node has a container runtime for image jobs", "container image " + trainImage, "podman, docker or apptainer"} {
		if !strings.Contains(why, want) {
			t.Errorf("why %q does not say %q", why, want)
		}
	}
	if resp := h.heartbeat("plain", islandsInventory("plain", ""), nil); len(resp.Tasks) != 0 {
		t.Errorf("node without a runtime given %+v", resp.Tasks)
	}

	// A plain job still runs on the node without a runtime.
	plain := h.submit(api.JobSpec{Command: []string{"x"}, GPUs: 1})
	h.heartbeat("podman", islandsInventory("podman", "podman"), nil)
	h.cycle()
	task, ok := taskOf(h.heartbeat("podman", islandsInventory("podman", "podman"), nil), j.ID)
	if !ok || task.Image != trainImage {
		t.Fatalf("node with a runtime got task %+v (found %v); want job %d with image %s", task, ok, j.ID, trainImage)
	}
	if d := h.job(j.ID); d.Job.State != api.StateAssigned || !slices.Equal(d.Job.Nodes, []string{"podman"}) {
		t.Errorf("image job %s on %v; want ASSIGNED on podman", d.Job.State, d.Job.Nodes)
	}
	// Best fit puts it beside the image job, on the node with fewer GPUs free.
	if task, ok := taskOf(h.heartbeat("podman", islandsInventory("podman", "podman"), nil), plain.ID); !ok || task.Image != "" {
		t.Errorf("plain job's task %+v (found %v); want it on podman, without an image", task, ok)
	}
}

// The queue's allow-list refuses an image outside it at submit, naming the prefixes.
func TestQueueImageAllowList(t *testing.T) {
	h := newHarness(t)
	h.heartbeat("n1", islandsInventory("n1", "podman"), nil)
	var q api.Queue
	for _, x := range h.queues() {
		if x.Name == "train" {
			q = x
		}
	}
	q.Images = []string{"registry.example.com/ml/", "/shared/images/"}
	if code := h.do("PUT", "/api/v1/queues/train", q, nil); code != http.StatusOK && code != http.StatusCreated {
		t.Fatalf("put queue: status %d", code)
	}
	var e api.Error
	code := h.do("POST", "/api/v1/jobs", api.JobSpec{Command: []string{"x"}, Image: "docker.io/library/alpine:3"}, &e)
	if code != http.StatusBadRequest || e.Field != "image" || !strings.Contains(e.Message, "registry.example.com/ml/, /shared/images/") ||
		!strings.Contains(e.Message, "queue train") {
		t.Errorf("image outside the list: %d %+v; want 400 on image naming the queue and its prefixes", code, e)
	}
	for _, image := range []string{trainImage, "/shared/images/torch.sif", ""} {
		if code := h.do("POST", "/api/v1/jobs", api.JobSpec{Command: []string{"x"}, Image: image}, nil); code != http.StatusCreated {
			t.Errorf("image %q: status %d; want 201", image, code)
		}
	}
	// A malformed image is refused for its form, before the allow-list.
	e = api.Error{}
	if code := h.do("POST", "/api/v1/jobs", api.JobSpec{Command: []string{"x"}, Image: "registry.example.com/ml/Train"}, &e); code != http.StatusBadRequest ||
		e.Field != "image" || !strings.Contains(e.Message, "lowercase") {
		t.Errorf("malformed image: %d %+v", code, e)
	}
}

func (h *harness) queues() []api.Queue {
	h.t.Helper()
	var list struct {
		Queues []api.Queue `json:"queues"`
	}
	if code := h.do("GET", "/api/v1/queues", nil, &list); code != http.StatusOK {
		h.t.Fatalf("queues: status %d", code)
	}
	return list.Queues
}

// The NVLink topology an agent reports reaches placement: with GPU 0 taken, a 4-GPU job
// gets the other island whole.
func TestNVLinkIslandsThroughTheServer(t *testing.T) {
	h := newHarness(t)
	inv := islandsInventory("n1", "")
	h.heartbeat("n1", inv, nil)
	one := h.submit(api.JobSpec{Command: []string{"x"}, GPUs: 1})
	h.cycle()
	four := h.submit(api.JobSpec{Command: []string{"x"}, GPUs: 4})
	h.cycle()
	resp := h.heartbeat("n1", inv, nil)
	if task, ok := taskOf(resp, one.ID); !ok || !slices.Equal(task.GPUIndices, []int{0}) {
		t.Fatalf("1-GPU job's task %+v (found %v); want GPU 0", task, ok)
	}
	if task, ok := taskOf(resp, four.ID); !ok || !slices.Equal(task.GPUIndices, []int{4, 5, 6, 7}) {
		t.Errorf("4-GPU job's task %+v (found %v); want GPUs 4-7, one NVLink island", task, ok)
	}
}

// A node whose health check fails takes no new work, and why names it and its output.
func TestFailedHealthCheckKeepsNewWorkAwayAndWhySaysSo(t *testing.T) {
	h := newHarness(t)
	inv := islandsInventory("n1", "")
	bad := &api.HealthCheck{Time: h.clock.Now(), OK: false, ExitCode: 2, Output: "checking\nib0: link down\n"}
	h.beatChecked("n1", inv, bad)
	j := h.submit(api.JobSpec{Command: []string{"x"}, GPUs: 1})
	h.cycle()
	if d := h.job(j.ID); d.Job.State != api.StatePending {
		t.Fatalf("job %s on %v; want it pending while n1's health check fails", d.Job.State, d.Job.Nodes)
	}
	why := strings.Join(h.why(j.ID).Reasons, " ")
	for _, want := range []string{"node n1 failed its health check", "Node n1 takes no new work: its health check failed (exit status 2): ib0: link down."} {
		if !strings.Contains(why, want) {
			t.Errorf("why %q does not say %q", why, want)
		}
	}
	h.beatChecked("n1", inv, &api.HealthCheck{Time: h.clock.Now(), OK: true})
	h.cycle()
	if d := h.job(j.ID); d.Job.State != api.StateAssigned {
		t.Errorf("job %s once the check passes; want ASSIGNED", d.Job.State)
	}
}

// A node whose agent cannot write its data dir takes no new work, and why says so; an
// attempt it could not prepare for that ends node_error, which requeues the job without
// spending its retries, and the job runs elsewhere.
func TestDataDirProblemKeepsNewWorkAway(t *testing.T) {
	h := newHarness(t)
	inv := islandsInventory("n1", "")
	full := "its data dir /var/lib/rota/agent/n1 has 0 MiB free, less than the 64 MiB it keeps for attempts' records"
	send := func(node, problem string, inv api.Inventory, tasks ...api.TaskStatus) {
		t.Helper()
		hb := api.Heartbeat{Node: node, Inventory: inv, Instance: "agent-" + node, ClusterID: h.srv.ClusterID(), Synced: true,
			DataDirProblem: problem, Tasks: tasks}
		if code := h.do("POST", "/api/v1/agents/"+node+"/heartbeat", hb, nil); code != http.StatusOK {
			t.Fatalf("heartbeat %s: status %d", node, code)
		}
	}
	send("n1", full, inv)
	j := h.submit(api.JobSpec{Command: []string{"x"}, GPUs: 1})
	h.cycle()
	if d := h.job(j.ID); d.Job.State != api.StatePending || !strings.Contains(d.Job.Message, "node n1 cannot run attempts (its agent says why in rota nodes)") {
		t.Fatalf("job %s on %v, %q; want it pending while n1 cannot hold attempts, saying so", d.Job.State, d.Job.Nodes, d.Job.Message)
	}
	why := strings.Join(h.why(j.ID).Reasons, " ")
	if want := "Node n1 takes no new work: its agent cannot run attempts: " + full + "."; !strings.Contains(why, want) {
		t.Errorf("why %q does not say %q", why, want)
	}
	if n := h.node("n1"); n.DataDirProblem != full || !slices.Contains(n.Degraded, "its agent cannot run attempts: "+full) || n.TakesWork() {
		t.Errorf("node n1: problem %q, degraded %q, takes work %v; want the problem shown and no new work", n.DataDirProblem, n.Degraded, n.TakesWork())
	}

	// Room again: the job starts there. Then the node fails to prepare it after all.
	send("n1", "", inv)
	h.cycle()
	if d := h.job(j.ID); d.Job.State != api.StateAssigned {
		t.Fatalf("job %s once n1 has room; want ASSIGNED", d.Job.State)
	}
	now := h.clock.Now()
	send("n1", "it could not prepare an attempt: write task: no space left on device", inv,
		api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateFailed, Reason: api.ReasonNodeError, EndTime: &now,
			Message: "this node could not prepare the attempt (write task: no space left on device)"})
	d := h.job(j.ID)
	if d.Job.State != api.StatePending || d.Job.Failures != 0 {
		t.Errorf("after node_error: %s with %d failures counted; want requeued, nothing spent", d.Job.State, d.Job.Failures)
	}
	h.heartbeat("n2", islandsInventory("n2", ""), nil)
	h.cycle()
	if d := h.job(j.ID); d.Job.State != api.StateAssigned || !slices.Equal(d.Job.Nodes, []string{"n2"}) {
		t.Errorf("job %s on %v; want attempt 2 on n2, n1 still out", d.Job.State, d.Job.Nodes)
	}
}

// Unhealthy GPUs take no new work; why says which.
func TestUnhealthyGPUsAndWhy(t *testing.T) {
	h := newHarness(t)
	inv := islandsInventory("n1", "")
	inv.GPUs[2].Healthy, inv.GPUs[2].Health = false, "XID 79"
	inv.GPUs[6].Healthy, inv.GPUs[6].Health = false, "XID 48"
	h.heartbeat("n1", inv, nil)
	j := h.submit(api.JobSpec{Command: []string{"x"}, GPUs: 8})
	h.cycle()
	why := strings.Join(h.why(j.ID).Reasons, " ")
	for _, want := range []string{"2 GPUs of node n1 are unhealthy", "On node n1, GPUs 2, 6 are unhealthy: they take no new work."} {
		if !strings.Contains(why, want) {
			t.Errorf("why %q does not say %q", why, want)
		}
	}
	six := h.submit(api.JobSpec{Command: []string{"x"}, GPUs: 6})
	h.cycle()
	task, ok := taskOf(h.heartbeat("n1", inv, nil), six.ID)
	if !ok || slices.Contains(task.GPUIndices, 2) || slices.Contains(task.GPUIndices, 6) {
		t.Errorf("6-GPU job's task %+v (found %v); want it off the unhealthy GPUs", task, ok)
	}
}

func TestHeldGPUsHint(t *testing.T) {
	job := &api.Job{Spec: api.JobSpec{GPUs: 4}}
	n := &api.Node{Name: "a", HeldGPUs: []int{1, 3}, Inventory: api.Inventory{GPUs: []api.GPU{
		{Index: 0, Model: "H100", Healthy: true}, {Index: 1, Model: "H100", Healthy: true},
		{Index: 2, Model: "H100", Healthy: false}, {Index: 3, Model: "H100", Healthy: true}, {Index: 4, Model: "A100", Missing: true}}}}
	want := "On node a, GPUs 1, 3 are held by processes of no live job, until they exit, and GPUs 2, 4 are unhealthy: they take no new work."
	if got := heldGPUsHint(job, n); got != want {
		t.Errorf("hint %q; want %q", got, want)
	}
	job.Spec.GPUModel = "A100"
	if got, want := heldGPUsHint(job, n), "On node a, GPU 4 is unhealthy: they take no new work."; got != want {
		t.Errorf("hint for A100 %q; want %q", got, want)
	}
	if got := heldGPUsHint(&api.Job{}, n); got != "" {
		t.Errorf("hint for a CPU-only job %q; want none", got)
	}
}

func TestValidateImage(t *testing.T) {
	digest := "@sha256:" + strings.Repeat("0123456789abcdef", 4)
	for _, ok := range []string{
		"", "alpine", "alpine:3.20", "library/alpine", "docker.io/library/alpine:latest", "registry.example.com/ml/train:2.1",
		"localhost/x", "localhost:5000/a/b_c/d-e", "registry.example.com:443/a.b/c__d/e--f:v1.0-rc_1", "alpine" + digest,
		"alpine:3" + digest, "Registry.Example.COM/x", "/shared/images/torch.sif", "/x.sif", strings.Repeat("a", 255),
		"relative/x.sif", // a name like any other, not a path
	} {
		if e := validateImage(ok); e != nil {
			t.Errorf("validateImage(%q) = %s; want it accepted", ok, e.Message)
		}
	}
	for _, bad := range []struct{ image, says string }{
		{"Alpine", "lowercase"},
		{"alpine:", "tag"},
		{"alpine:-1", "tag"},
		{"alpine:" + strings.Repeat("a", 129), "tag"},
		{"alpine@sha256:abc", "digest"},
		{"alpine@md5:" + strings.Repeat("0", 32), "digest"},
		{"alpine" + strings.ToUpper(digest), "digest"},
		{"registry.example.com:0/x", "registry"},
		{"registry.example.com:65536/x", "registry"},
		{"-reg.example.com/x", "registry"},
		{"a//b", "name part"},
		{"a/", "name part"},
		{"a..b", "name part"},
		{"a b", "space"},
		{"a\tb", "space"},
		{"a\x00b", "control"},
		{"a\u009bb", "control"},
		{"a\u2028b", "space"},
		{"/shared/../etc/x.sif", "clean"},
		{"/shared/images/torch", ".sif"},
		{"/shared/images/", ".sif"},
		{"/.sif", ".sif"},
		{"docker://alpine", "registry"},
		{":3", "name part"},
		{strings.Repeat("a", 256), "at most 255"},
		{strings.Repeat("a", 513), "at most 512"},
	} {
		e := validateImage(bad.image)
		if e == nil {
			t.Errorf("validateImage(%q) accepted; want it refused", bad.image)
			continue
		}
		if e.Code != api.CodeInvalid || e.Field != "image" || !strings.Contains(e.Message, bad.says) {
			t.Errorf("validateImage(%q) = %+v; want field image, saying %q", bad.image, e, bad.says)
		}
	}
}

func TestValidateQueueIdle(t *testing.T) {
	for _, ok := range []api.Queue{
		{Name: "q"},
		{Name: "q", IdleAfter: 1800},
		{Name: "q", IdleAfter: 1800, IdleAction: "stop", IdleThresholdPct: 5},
		{Name: "q", IdleAfter: 30 * day, IdleAction: "warn", IdleThresholdPct: 100},
		{Name: "q", IdleAction: "stop"}, // off: IdleAfter is 0
		{Name: "q", Images: []string{"registry.example.com/ml/", "/shared/images/"}},
	} {
		if e := validateQueueIdle(ok); e != nil {
			t.Errorf("validateQueueIdle(%+v) = %s; want it accepted", ok, e.Message)
		}
	}
	many := make([]string, maxQueueImages+1)
	for i := range many {
		many[i] = fmt.Sprintf("r%d/", i)
	}
	for _, bad := range []struct {
		q     api.Queue
		field string
	}{
		{api.Queue{Name: "q", IdleAfter: -1}, "idle_after_s"},
		{api.Queue{Name: "q", IdleAfter: 30*day + 1}, "idle_after_s"},
		{api.Queue{Name: "q", IdleAfter: 60, IdleAction: "kill"}, "idle_action"},
		{api.Queue{Name: "q", IdleAfter: 60, IdleAction: "Warn"}, "idle_action"},
		{api.Queue{Name: "q", IdleThresholdPct: -0.5}, "idle_threshold_pct"},
		{api.Queue{Name: "q", IdleThresholdPct: 100.5}, "idle_threshold_pct"},
		{api.Queue{Name: "q", IdleThresholdPct: math.NaN()}, "idle_threshold_pct"},
		{api.Queue{Name: "q", Images: []string{""}}, "images"},
		{api.Queue{Name: "q", Images: []string{"a b/"}}, "images"},
		{api.Queue{Name: "q", Images: []string{"a\x1b/"}}, "images"},
		{api.Queue{Name: "q", Images: []string{strings.Repeat("a", maxImagePrefixLen+1)}}, "images"},
		{api.Queue{Name: "q", Images: many}, "images"},
	} {
		e := validateQueueIdle(bad.q)
		if e == nil || e.Code != api.CodeInvalid || e.Field != bad.field || !strings.Contains(e.Message, "queue q") {
			t.Errorf("validateQueueIdle(%+v) = %+v; want field %s naming the queue", bad.q, e, bad.field)
		}
	}
}
