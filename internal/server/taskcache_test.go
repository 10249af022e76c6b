package server

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// The heartbeat answers with tasks kept encoded from the node's last answer. A kept task
// must follow what it is made of beyond its own job: the host name of a gang's first node,
// the user's Unix account, and the configuration (a queue's checkpoint root).
func TestKeptTasksFollowWhatTheyAreMadeOf(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 1)
	h.beat("n2", 1)
	gang := h.submit(api.JobSpec{GPUs: 2, Nodes: 2, GPUsPerNode: 1, Command: []string{"train"}})
	h.cycle()
	taskOn := func(node string, inv *api.Inventory) api.Task {
		t.Helper()
		var resp api.HeartbeatResponse
		if inv != nil {
			resp = h.heartbeat(node, *inv, nil)
		} else {
			resp = h.beat(node, 1)
		}
		task, ok := taskOf(resp, gang.ID)
		if !ok {
			t.Fatalf("%s is not told to run job %d: %+v", node, gang.ID, resp.Tasks)
		}
		return task
	}
	first := taskOn("n2", nil)
	if first.Env[api.EnvMasterAddr] != "n1" || first.RunAs != gang.Spec.User || first.CheckpointDir != "" {
		t.Fatalf("task before any change: master %q, run as %q, checkpoints %q", first.Env[api.EnvMasterAddr], first.RunAs, first.CheckpointDir)
	}
	if again := taskOn("n2", nil); !reflect.DeepEqual(again, first) {
		t.Fatalf("nothing changed, yet the task did:\n%+v\n%+v", again, first)
	}

	// The first node now reports a host name: the other's task names it.
	inv := api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake", Hostname: "n1.example",
		GPUs: []api.GPU{{Index: 0, UUID: "GPU-n1-0", Model: "H100", MemoryMB: 81559, Healthy: true}}}
	h.heartbeat("n1", inv, nil)
	if got := taskOn("n2", nil).Env[api.EnvMasterAddr]; got != "n1.example" {
		t.Errorf("after the first node reported its host name, MASTER_ADDR is %q", got)
	}

	// The user is given a Unix account.
	// (The harness calls as a user with no record: the record made here is its first.)
	u := api.User{Name: gang.Spec.User, Role: "admin"}
	u.UnixUser = "svc-train"
	var e api.Error
	if code := h.do("PUT", "/api/v1/users/"+gang.Spec.User, u, &e); code != 200 {
		t.Fatalf("set the Unix account: status %d: %s", code, e.Message)
	}
	if got := taskOn("n2", nil).RunAs; got != "svc-train" {
		t.Errorf("after the user got a Unix account the task runs as %q", got)
	}

	// The job's queue is given a checkpoint root.
	q := api.Queue{Name: gang.Spec.Queue, Tier: 1}
	q.CheckpointRoot = "/shared/ckpt"
	if code := h.do("PUT", "/api/v1/queues/"+gang.Spec.Queue, q, &e); code != 200 {
		t.Fatalf("set the checkpoint root: status %d: %s", code, e.Message)
	}
	if got := taskOn("n1", &inv).CheckpointDir; got == "" {
		t.Error("after the queue got a checkpoint root the task has no checkpoint directory")
	}

	// The job is cancelled: the task says stop.
	if code := h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", gang.ID), nil, nil); code != 200 {
		t.Fatalf("cancel: status %d", code)
	}
	if got := taskOn("n2", nil); !got.Stop {
		t.Errorf("after a cancel the task is %+v, want a stop", got)
	}
}

// heartbeatAnswer must encode exactly as api.HeartbeatResponse, which agents decode: the
// same fields, names and options, the tasks aside, and the same bytes for the same answer.
func TestHeartbeatAnswerEncodesAsTheAPIType(t *testing.T) {
	// The tasks first, then answerRest's fields, those of the API type in its order.
	ours, rest, theirs := reflect.TypeFor[heartbeatAnswer](), reflect.TypeFor[answerRest](), reflect.TypeFor[api.HeartbeatResponse]()
	if ours.NumField() != 2 || ours.Field(0).Name != "Tasks" || ours.Field(0).Tag != theirs.Field(0).Tag || !ours.Field(1).Anonymous {
		t.Fatalf("heartbeatAnswer must be the tasks, tagged as the API type's, then answerRest embedded")
	}
	if rest.NumField() != theirs.NumField()-1 {
		t.Fatalf("answerRest has %d fields, api.HeartbeatResponse %d besides its tasks", rest.NumField(), theirs.NumField()-1)
	}
	for i := range rest.NumField() {
		a, b := rest.Field(i), theirs.Field(i+1)
		if a.Name != b.Name || a.Tag != b.Tag || a.Type != b.Type {
			t.Errorf("answerRest field %d: %s %s %s against %s %s %s", i, a.Name, a.Type, a.Tag, b.Name, b.Type, b.Tag)
		}
	}
	end := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	tasks := []api.Task{
		{JobID: 7, Attempt: 2, Rank: 1, Command: []string{"train", "--lr", "0.1"}, Env: map[string]string{"B": "2", "A": "1"},
			GPUIndices: []int{0, 3}, GPUIDs: []string{"GPU-a", "GPU-b"}, CPUs: 8, MemoryMB: 1024, TimeLimitEnd: end, Stop: true, StopReason: api.ReasonCancelled},
		{JobID: 9, Attempt: 1, Command: []string{"eval"}},
	}
	want := api.HeartbeatResponse{Tasks: tasks, Acked: []api.TaskRef{{JobID: 3, Attempt: 1}}, StoppedAcked: []api.TaskRef{{JobID: 4, Attempt: 2, ClusterID: "c"}},
		ClusterID: "cluster-1", HeartbeatSeconds: 2, SyncEpoch: 5, InventoryHash: "ab"}
	got := heartbeatAnswer{answerRest: answerRest{Acked: want.Acked, StoppedAcked: want.StoppedAcked, ClusterID: want.ClusterID,
		HeartbeatSeconds: want.HeartbeatSeconds, SyncEpoch: want.SyncEpoch, InventoryHash: want.InventoryHash}}
	for _, task := range tasks {
		data, err := json.Marshal(task)
		if err != nil {
			t.Fatal(err)
		}
		got.Tasks = append(got.Tasks, data)
	}
	for _, c := range []struct {
		name string
		got  heartbeatAnswer
		want api.HeartbeatResponse
	}{
		{"full", got, want},
		{"empty", heartbeatAnswer{Tasks: []json.RawMessage{}, answerRest: answerRest{Acked: []api.TaskRef{}}}, api.HeartbeatResponse{Tasks: []api.Task{}, Acked: []api.TaskRef{}}},
		{"nil", heartbeatAnswer{answerRest: answerRest{ClusterID: "<&>"}}, api.HeartbeatResponse{ClusterID: "<&>"}},
	} {
		b, _ := json.Marshal(c.want)
		a, _ := json.Marshal(c.got)
		if string(a) != string(b) {
			t.Errorf("%s: heartbeatAnswer encodes as\n%s\napi.HeartbeatResponse as\n%s", c.name, a, b)
		}
		a, err := c.got.appendJSON([]byte("kept"))
		if err != nil || string(a) != "kept"+string(b) {
			t.Errorf("%s: appendJSON gives %s, %v; api.HeartbeatResponse encodes as\n%s", c.name, a, err, b)
		}
	}
}
