package server

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/store"
)

var arraySeeds = []string{
	"0-99", "0-99%8", "1,3,5", "0-10:2", "0-9,20-29%4", "7", "0", "1000000", "0-9999", "0-10000",
	"999990-1000000", "0-1000000:100", "1000001", "9-0", "1,1", "0-4,2", "0-10:0", "5:2", "0-10:2:3",
	"%3", "1%0", "1%", "1%-1", ",", "1,", "-1", "+1", " 1", "1-", "-", "1-+3", "0x10",
	"1%99999999999999999999", "99999999999999999999", "",
}

// FuzzParseArray reads a fuzzed array spec. Oracle: accepted indices are distinct, lie in
// 0..maxArrayIndex and number 1 to maxArrayJobs; a limit given is at least 1; a refusal is
// an invalid-request error on the field "array".
func FuzzParseArray(f *testing.F) {
	for _, s := range arraySeeds {
		f.Add(s)
	}
	f.Fuzz(checkParseArray)
}

func checkParseArray(t *testing.T, s string) {
	indices, limit, e := parseArray(s)
	if e != nil {
		if e.Code != api.CodeInvalid || e.Field != "array" || e.Message == "" {
			t.Fatalf("parseArray(%q): error %+v", s, e)
		}
		return
	}
	if len(indices) == 0 || len(indices) > maxArrayJobs {
		t.Fatalf("parseArray(%q): %d indices", s, len(indices))
	}
	seen := map[int]bool{}
	for _, i := range indices {
		if i < 0 || i > maxArrayIndex || seen[i] {
			t.Fatalf("parseArray(%q): index %d repeated or outside 0..%d", s, i, maxArrayIndex)
		}
		seen[i] = true
	}
	if limit < 0 || (strings.Contains(s, "%") && limit < 1) {
		t.Fatalf("parseArray(%q): limit %d", s, limit)
	}
}

// specSeeds are submit bodies: what the CLI sends, and what a hostile client might.
var specSeeds = []string{
	`{"command":["python","train.py"],"gpus":2,"cpus":8,"memory_mb":65536,"time_limit_s":7200}`,
	`{"name":"ft","queue":"batch","team":"nlp","command":["torchrun","t.py"],"workdir":"/data","env":{"A":"1","B_2":"x=y"},"gpus":16,"nodes":2,"gpus_per_node":8,"gpu_model":"h100","cpus":4,"memory_mb":1024,"time_limit_s":3600,"signal":"usr1","grace_s":30,"after":[1],"after_ok":[1],"array":"0-9%2","hold":true,"nice":5,"restart_policy":"on-failure","retries":3}`,
	`{"command":["x"],"queue":"inference","retries":2}`,
	`{"command":["x"],"queue":"interactive","gpus_per_node":4}`,
	`{"command":["/usr/bin/env"],"gpus":4,"gpu_model":"A100"}`,
	`{"command":["x"],"restart_policy":"never","retries":0,"signal":"SIGKILL"}`,
	`{"command":["x"],"nodes":1,"gpus_per_node":8,"gpus":8}`,
	`{"command":["x"],"gpus":9}`,
	`{"command":["x"],"gpus":2,"nodes":2,"gpus_per_node":2}`,
	`{"command":["x"],"gpu_model":"a"}`,
	`{"command":["x"],"cpus":1000}`,
	`{"command":["x"],"memory_mb":9223372036854775807}`,
	`{"command":["x"],"time_limit_s":-1}`,
	`{"command":["x"],"queue":"interactive","time_limit_s":86400}`,
	`{"command":["x"],"grace_s":3601}`,
	`{"command":["x"],"nice":-10001}`,
	`{"command":["x"],"retries":101}`,
	`{"command":["x"],"restart_policy":"sometimes"}`,
	`{"command":["x"],"signal":"SIGSEGV"}`,
	`{"command":["x"],"env":{"ROTA_JOB_ID":"1"}}`,
	`{"command":["x"],"env":{"CUDA_VISIBLE_DEVICES":"0"}}`,
	`{"command":["x"],"env":{"1A":"x"}}`,
	`{"command":["x"],"env":{"A":"a\u0000b"}}`,
	`{"command":["a\u0000b"]}`,
	`{"command":["x"],"workdir":"relative"}`,
	`{"command":["x"],"name":"-bad"}`,
	`{"command":["x"],"team":"nope"}`,
	`{"command":["x"],"queue":"nope"}`,
	`{"command":["x"],"after":[99]}`,
	`{"command":[" "]}`,
	`{"command":["..."]}`,
	`{"command":["\u00e9\u00e9"]}`,
	`{"command":[]}`,
	`{"command":null}`,
	`{"gpus":"2","command":["x"]}`,
	`{"gpus":1e3,"command":["x"]}`,
	`{"gpus":2.5,"command":["x"]}`,
	`{"command":["x"],"bogus":1}`,
	`{"command":["x"],"image":"registry.example.com/ml/train:2.1"}`,
	`{"command":["x"],"image":"localhost:5000/a/b@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}`,
	`{"command":["x"],"image":"docker.io/library/alpine:3.20@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}`,
	`{"command":["x"],"image":"/shared/images/torch.sif"}`,
	`{"command":["x"],"image":"alpine"}`,
	`{"command":["x"],"image":"Alpine"}`,
	`{"command":["x"],"image":"alpine:-bad"}`,
	`{"command":["x"],"image":"alpine@sha256:abc"}`,
	`{"command":["x"],"image":"registry:99999/x"}`,
	`{"command":["x"],"image":"a b"}`,
	`{"command":["x"],"image":"a\u0000b"}`,
	`{"command":["x"],"image":"a\u009bb"}`,
	`{"command":["x"],"image":"/shared/../etc/x.sif"}`,
	`{"command":["x"],"image":"relative/x.sif"}`,
	`{"command":["x"],"image":"/.sif"}`,
	`{"command":["x"],"image":"a//b"}`,
	`{"command":["x"],"image":"-a"}`,
	`{"command":["x"],"queue":"batch","image":"registry.example.com/ml/x:1"}`,
	`{"command":["x"],"queue":"batch","image":"evil.example.com/ml/x:1"}`,
	`{"command":["x"]} {}`,
	`{"command":["x"]`,
	`[]`,
	`null`,
	``,
}

// specTokens are what the mutator inserts into JSON bodies.
var specTokens = []string{
	`"gpus":`, `"nodes":`, `"gpus_per_node":`, `"cpus":`, `"memory_mb":`, `"time_limit_s":`, `"grace_s":`,
	`"retries":`, `"nice":`, `"array":"0-9%2",`, `"queue":"batch",`, `"env":{"A":"1"},`, `"name":"n",`,
	`"user":"bob",`, `"team":"default",`, `"gpu_model":"A100",`, `"signal":"term",`, `"after":[1],`,
	`"image":"registry.example.com/ml/`, `"image":"/images/`, `:latest"`, `@sha256:`, `.sif"`, `"image":"`,
	`-1`, `0`, `64`, `4096`, `9223372036854775807`, `1e308`, `null`, `true`, `"\u0000"`, `"\u009b"`, `,`, `{`, `}`,
}

// validationState is a cluster with the default queues (batch allowing only images of
// registry.example.com/ml/ and /images/), one team, one job to depend on and two nodes:
// eight H100s, and four A100s on a smaller node.
func validationState() *cluster.State {
	st := cluster.New()
	queues := cluster.DefaultQueues()
	for i := range queues {
		if queues[i].Name == "batch" {
			queues[i].Images = []string{"registry.example.com/ml/", "/images/"}
		}
	}
	b := &store.Batch{Queues: queues, Teams: []api.Team{{Name: "nlp", Weight: 1}},
		Jobs: []api.Job{{ID: 1, Spec: api.JobSpec{Command: []string{"x"}, User: "admin"}, State: api.StateSucceeded}}}
	for _, n := range []struct {
		name, model string
		gpus, cpus  int
		memoryMB    int64
	}{{"node-a", "NVIDIA H100 80GB HBM3", 8, 64, 512 << 10}, {"node-b", "NVIDIA A100-SXM4-40GB", 4, 32, 256 << 10}} {
		node := api.Node{Name: n.name, State: api.NodeReady, Inventory: api.Inventory{CPUs: n.cpus, MemoryMB: n.memoryMB, DeviceSource: "fake"}}
		for i := range n.gpus {
			node.GPUs = append(node.GPUs, api.GPU{Index: i, UUID: n.name + "-gpu", Model: n.model, MemoryMB: 81559, Healthy: true})
		}
		b.Nodes = append(b.Nodes, node)
	}
	st.Apply(b)
	return st
}

// FuzzValidateSpec decodes a fuzzed submit body and validates it as the submit handler
// does (decodeJSON, checkSizes, validateSpec). Oracle: a refusal is a 4xx invalid-request
// error naming its field; an accepted spec has its defaults filled within bounds, fits a
// node, and validates again unchanged.
func FuzzValidateSpec(f *testing.F) {
	for _, s := range specSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(checkValidateSpec)
}

func checkValidateSpec(t *testing.T, body []byte) {
	limits := api.DefaultLimits()
	var spec api.JobSpec
	r := httptest.NewRequest("POST", "/api/v1/jobs", bytes.NewReader(body))
	if status, e := decodeJSON(httptest.NewRecorder(), r, &spec, limits.MaxBodyBytes); e != nil {
		if status/100 != 4 || e.Message == "" {
			t.Fatalf("decoding %q: status %d, error %+v", body, status, e)
		}
		return
	}
	st := validationState()
	// What submitter does for an admin.
	if spec.User == "" {
		spec.User = "admin"
	}
	if spec.Team == "" {
		spec.Team = st.TeamOf(spec.User)
	}
	e := checkSizes(&spec, limits)
	if e == nil {
		e = validateSpec(&spec, st)
	}
	if e != nil {
		if e.Code != api.CodeInvalid || e.Field == "" || e.Message == "" {
			t.Fatalf("refusing %q: error %+v does not name a field", body, e)
		}
		return
	}
	checkFilledSpec(t, body, spec, st, limits)
	again := cloneSpec(spec)
	if e := checkSizes(&again, limits); e != nil {
		t.Fatalf("%q validates to %+v, which checkSizes then refuses: %s", body, spec, e.Message)
	}
	if e := validateSpec(&again, st); e != nil {
		t.Fatalf("%q validates to %+v, which validateSpec then refuses: %s", body, spec, e.Message)
	}
	if !reflect.DeepEqual(again, spec) {
		t.Fatalf("validating %q twice changes it:\n%+v\n%+v", body, spec, again)
	}
}

func cloneSpec(s api.JobSpec) api.JobSpec {
	data, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	var c api.JobSpec
	if err := json.Unmarshal(data, &c); err != nil {
		panic(err)
	}
	// JSON leaves out what omitempty drops; the copy must be the value, not its encoding.
	c.Env, c.After, c.AfterOK = s.Env, s.After, s.AfterOK
	return c
}

// checkFilledSpec checks what validateSpec promises of a spec it accepted.
func checkFilledSpec(t *testing.T, body []byte, s api.JobSpec, st *cluster.State, l api.Limits) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%q accepted as %+v: "+format, append([]any{body, s}, args...)...)
	}
	q, ok := st.Queue(s.Queue)
	switch {
	case len(s.Command) == 0 || len(s.Command) > maxArgs || strings.TrimSpace(s.Command[0]) == "":
		fail("command")
	case !nameRE().MatchString(s.Name) || len(s.Name) > l.MaxNameLength:
		fail("name")
	case !ok:
		fail("unknown queue")
	case s.Team != "default" && !hasTeam(st, s.Team):
		fail("unknown team")
	case s.Nice < -10000 || s.Nice > 10000:
		fail("nice")
	case s.GPUs < 0 || s.GPUs > maxGPUs || s.Nodes < 0 || s.Nodes > maxNodes || s.GPUsPerNode < 0 || s.GPUsPerNode > 64:
		fail("GPUs or nodes out of bounds")
	case (s.Nodes > 1 || s.GPUsPerNode > 0) && (s.Nodes < 1 || s.GPUs != s.Nodes*s.GPUsPerNode):
		fail("gang shape")
	case s.CPUs < 1 || s.CPUs > maxCPUs || s.MemoryMB < 0 || s.MemoryMB > maxMemoryMB:
		fail("CPUs or memory out of bounds")
	case !validRestartPolicy(s.RestartPolicy) || s.Retries == nil || *s.Retries < 0 || *s.Retries > maxRetries:
		fail("restart policy or retries")
	case s.TimeLimit < 0 || s.TimeLimit > maxTimeLimit || (q.MaxTimeLimit > 0 && s.TimeLimit > q.MaxTimeLimit):
		fail("time limit")
	case s.Grace < 0 || s.Grace > max(q.Grace, q.MaxGrace):
		fail("grace")
	case !slices.Contains(signals, s.Signal):
		fail("signal")
	case len(s.Env) > maxEnv:
		fail("env size")
	case len(s.Image) > maxImageLen || strings.ContainsFunc(s.Image, badImageRune):
		fail("image size or characters")
	case s.Image != "" && !strings.HasPrefix(s.Image, "/") && !ociReferenceRE.MatchString(s.Image):
		fail("image is no OCI reference")
	case strings.HasPrefix(s.Image, "/") && (!strings.HasSuffix(s.Image, ".sif") || strings.Contains(s.Image, "/../") || strings.Contains(s.Image, "//")):
		fail("image path")
	case s.Image != "" && len(q.Images) > 0 && !slices.ContainsFunc(q.Images, func(p string) bool { return strings.HasPrefix(s.Image, p) }):
		fail("image outside queue %s's allow-list", q.Name)
	}
	for k := range s.Env {
		if !envKeyRE().MatchString(k) || strings.HasPrefix(k, "ROTA_") || k == api.EnvCUDAVisibleDevices {
			fail("env key %q", k)
		}
	}
	for _, id := range append(slices.Clone(s.After), s.AfterOK...) {
		if _, ok := st.Job(id); !ok {
			fail("depends on unknown job %d", id)
		}
	}
	perNode := s.GPUs
	if s.Nodes > 1 {
		perNode = s.GPUsPerNode
	}
	fits := 0
	for _, n := range st.Nodes() {
		gpus := 0
		for _, g := range n.GPUs {
			if takesModel(s.GPUModel, g.Model) {
				gpus++
			}
		}
		if n.State != api.NodeLost && gpus >= perNode && n.CPUs >= s.CPUs && n.MemoryMB >= s.MemoryMB {
			fits++
		}
	}
	if fits < max(s.Nodes, 1) {
		fail("fits %d nodes, needs %d", fits, max(s.Nodes, 1))
	}
}

// ociReferenceRE is the distribution project's grammar of an image reference, digests
// narrowed to sha256: what an accepted image must match, written apart from the
// validator's own parsing.
var ociReferenceRE = func() *regexp.Regexp {
	domainComponent := `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
	domain := domainComponent + `(?:\.` + domainComponent + `)*(?::[0-9]+)?`
	pathComponent := `[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*`
	name := `(?:` + domain + `/)?` + pathComponent + `(?:/` + pathComponent + `)*`
	return regexp.MustCompile(`^` + name + `(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$`)
}()

func hasTeam(st *cluster.State, name string) bool {
	_, ok := st.Team(name)
	return ok
}

// heartbeatSeeds are agent reports: a realistic one and ones a broken or hostile agent
// might send.
var heartbeatSeeds = []string{
	`{"node":"node-a","inventory":{"cpus":64,"memory_mb":524288,"gpus":[{"index":0,"uuid":"GPU-a-0","model":"H100","memory_mb":81559,"healthy":true},{"index":1,"uuid":"GPU-a-1","model":"H100","memory_mb":81559,"healthy":false}],"labels":{"rack":"r1","pool":"train"},"driver_version":"550.54","cuda_version":"12.4","device_source":"nvml","hostname":"node-a.example"},"tasks":[{"job_id":7,"attempt":1,"state":"RUNNING","pid":4242},{"job_id":8,"attempt":2,"state":"FAILED","exit_code":1,"reason":"exit_code","message":"exited with status 1","events":[{"kind":"checkpoint","path":"/ckpt/8"}]}],"agent_time":"2026-11-01T09:00:00Z","cluster_id":"c1","instance":"agent-node-a","previous_instance":"agent-old","pid":99,"version":"0.4.0","synced":true,"stopped":[{"cluster_id":"c0","job_id":3,"attempt":1,"reason":"other_cluster","message":"m"}]}`,
	`{"instance":"i","inventory":{}}`,
	`{"instance":"i","inventory":{"cpus":-1}}`,
	`{"instance":"i","inventory":{"memory_mb":1099511627777}}`,
	`{"instance":"i","inventory":{"gpus":[{"index":0,"uuid":"u","model":"m"},{"index":0,"uuid":"u","model":"m"}]}}`,
	`{"instance":"i","inventory":{"gpus":[{"index":1024,"uuid":"u","model":"m"}]}}`,
	`{"instance":"i","inventory":{"gpus":[{"index":0,"uuid":"","model":"m"}]}}`,
	`{"instance":"i","inventory":{"hostname":"a\u001b[31mred"}}`,
	`{"instance":"i","inventory":{"labels":{"-k":"v"}}}`,
	`{"instance":"i","inventory":{"labels":{"k":"v\n"}}}`,
	`{"instance":"i","version":"\u007f"}`,
	`{"instance":"i","tasks":[{"job_id":0,"attempt":1,"state":"RUNNING"}]}`,
	`{"instance":"i","tasks":[{"job_id":1,"attempt":1,"state":"BOGUS"}]}`,
	`{"instance":"i","tasks":[{"job_id":1,"attempt":1,"state":"SUCCEEDED","message":"a\u0000b"}]}`,
	`{"instance":"","inventory":{}}`,
	`{"instance":"i/../j"}`,
	`{"instance":"i","previous_instance":"p q"}`,
	`{"instance":"i","agent_time":"yesterday"}`,
	`{"instance":"i","tasks":{}}`,
	`{"instance":"i","unknown":1}`,
	`null`,
	``,
}

var heartbeatTokens = []string{
	`"index":`, `"model":"H100",`, `"uuid":"u",`, `"hostname":"h",`, `"labels":{"k":"v"},`, `"reason":"oom",`,
	`"state":"FAILED",`, `"job_id":1,`, `"attempt":1,`, `"\u001b"`, `"\u0085"`, `"\u009b"`, `"\u2028"`, `-1`, `1024`,
	`{"index":3,"uuid":"x","model":"y"},`, `null`, `,`, `{`, `}`, `[`, `]`,
}

// FuzzValidateHeartbeat decodes a fuzzed heartbeat and validates it. Oracle: an accepted
// report has bounded counts, distinct GPU indices in range, and every string that reaches
// the node's or a placement's record as sent bounded and free of control characters
// (messages are not checked: they pass through printable() where they are stored).
func FuzzValidateHeartbeat(f *testing.F) {
	for _, s := range heartbeatSeeds {
		f.Add([]byte(s))
	}
	// Regression seeds of bugs this target found: a task's reason went unchecked into the
	// placement `rota show` prints, and the C1 controls (U+0080..U+009F, such as U+009B,
	// CSI) passed cleanString.
	f.Add([]byte(`{"instance":"i","tasks":[{"job_id":1,"attempt":1,"state":"FAILED","reason":"\u001b]0;pwned\u0007"}]}`))
	f.Add([]byte(`{"instance":"i","inventory":{"hostname":"\u009b31mred"}}`))
	f.Fuzz(checkValidateHeartbeat)
}

func checkValidateHeartbeat(t *testing.T, body []byte) {
	var hb api.Heartbeat
	r := httptest.NewRequest("POST", "/api/v1/agents/node-a/heartbeat", bytes.NewReader(body))
	if status, e := decodeJSON(httptest.NewRecorder(), r, &hb, api.DefaultLimits().MaxBodyBytes); e != nil {
		if status/100 != 4 || e.Message == "" {
			t.Fatalf("decoding %q: status %d, error %+v", body, status, e)
		}
		return
	}
	if e := validateHeartbeat(&hb); e != nil {
		if e.Code != api.CodeInvalid || e.Field == "" || e.Message == "" {
			t.Fatalf("refusing %q: error %+v does not name a field", body, e)
		}
		return
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("accepted %q: "+format, append([]any{body}, args...)...)
	}
	inv := hb.Inventory
	switch {
	case !instanceRE.MatchString(hb.Instance) || (hb.PreviousInstance != "" && !instanceRE.MatchString(hb.PreviousInstance)):
		fail("instance")
	case inv.CPUs < 0 || inv.CPUs > maxNodeCPUs || inv.MemoryMB < 0 || inv.MemoryMB > maxNodeMemMB:
		fail("CPUs or memory out of bounds")
	case len(inv.GPUs) > maxNodeGPUs || len(inv.Labels) > maxLabels || len(hb.Tasks) > maxTaskReport || len(hb.Stopped) > maxStopped:
		fail("too many GPUs, labels, tasks or stopped attempts")
	case inv.DeviceSource == "":
		fail("no device source filled in")
	}
	strs := map[string]string{"inventory.driver_version": inv.DriverVersion, "inventory.cuda_version": inv.CUDAVersion,
		"inventory.device_source": inv.DeviceSource, "inventory.hostname": inv.Hostname, "version": hb.Version, "cluster_id": hb.ClusterID}
	seen := map[int]bool{}
	for i, g := range inv.GPUs {
		if g.Index < 0 || g.Index >= maxNodeGPUs || seen[g.Index] || g.MemoryMB < 0 || g.MemoryMB > maxNodeMemMB || g.Model == "" || g.UUID == "" {
			fail("GPU %d: %+v", i, g)
		}
		seen[g.Index] = true
		strs["inventory.gpus[].model"], strs["inventory.gpus[].uuid"] = g.Model, g.UUID
		checkShown(t, body, strs)
	}
	for k, v := range inv.Labels {
		if !nameRE().MatchString(k) {
			fail("label key %q", k)
		}
		strs["inventory.labels key"], strs["inventory.labels value"] = k, v
		checkShown(t, body, strs)
	}
	for i, task := range hb.Tasks {
		if !task.State.Valid() || task.JobID <= 0 || task.Attempt <= 0 || len(task.Events) > maxEvents {
			fail("task %d: %+v", i, task)
		}
		strs["tasks[].reason"] = task.Reason
		checkShown(t, body, strs)
	}
	checkShown(t, body, strs)
}

// checkShown fails when a string shown to people as stored is long or holds a control
// character (Unicode's Cc: C0, DEL and C1), which would break tables and terminals.
func checkShown(t *testing.T, body []byte, strs map[string]string) {
	t.Helper()
	for field, v := range strs {
		if len(v) > maxInvString || strings.ContainsFunc(v, unicode.IsControl) {
			t.Fatalf("accepted %q with %s %q", body, field, v)
		}
	}
}

// The regular expressions isInstanceID and isReasonCode were written from, kept as their
// reference.
var (
	instanceRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	reasonRE   = regexp.MustCompile(`^[a-z0-9_]{0,64}$`)
)

// FuzzHeartbeatClasses holds isInstanceID and isReasonCode to the regular expressions
// they replace, over any string: multi-byte UTF-8, control characters, every length.
func FuzzHeartbeatClasses(f *testing.F) {
	for _, seed := range []string{"", "a", "agent-n1_2", "A-Z", "exit_code", "node_shutdown", "Exit", "é", "a b", "a\n",
		"x-", "a.b", "a:b", strings.Repeat("a", 64), strings.Repeat("a", 65), strings.Repeat("é", 32), "\x00", "a\xff"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if got, want := isInstanceID(v), instanceRE.MatchString(v); got != want {
			t.Errorf("isInstanceID(%q) = %v, the expression says %v", v, got, want)
		}
		if got, want := isReasonCode(v), reasonRE.MatchString(v); got != want {
			t.Errorf("isReasonCode(%q) = %v, the expression says %v", v, got, want)
		}
	})
}
