package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cli"
)

// The end-to-end tests run the real binary (see harness_test.go): a server with TLS and
// agents that joined it as separate processes, jobs as real processes, state in a real
// SQLite file.

func TestEndToEnd(t *testing.T) {
	skipShort(t)
	t.Parallel()
	c := newCluster(t, map[string]string{"node-a": "4xH100", "node-b": "4xH100"})

	t.Run("the server logs the CA fingerprint clients pin", func(t *testing.T) {
		c.t = t
		if want := "ca_fingerprint=" + c.fingerprint; !strings.Contains(c.server.output(), want) {
			t.Errorf("the server's log lacks %q", want)
		}
	})

	t.Run("fill and overflow the GPUs", func(t *testing.T) {
		c.t = t
		// 10 one-GPU jobs on 8 GPUs: 8 start, 2 wait with a reason, then run when GPUs free.
		var ids []int64
		for i := range 10 {
			j := c.submit(api.JobSpec{Name: fmt.Sprintf("fill-%d", i), GPUs: 1,
				Command: shell(`echo "job $ROTA_JOB_ID attempt $ROTA_ATTEMPT gpus $CUDA_VISIBLE_DEVICES"; sleep 2; echo done >&2`)})
			ids = append(ids, j.ID)
		}
		var running []api.JobDetail
		waitFor(t, 20*time.Second, "8 jobs running", func() bool {
			running = running[:0]
			for _, id := range ids {
				if d := c.job(id); d.State == api.StateRunning || d.State == api.StateAssigned {
					running = append(running, d)
				}
			}
			return len(running) == 8
		})
		seen := map[string]int64{}
		for _, d := range running {
			if len(d.GPUIDs) != 1 || len(d.Nodes) != 1 {
				t.Fatalf("job %d holds gpus %v on nodes %v; want one GPU on one node", d.ID, d.GPUIDs, d.Nodes)
			}
			if other, dup := seen[d.GPUIDs[0]]; dup {
				t.Fatalf("GPU %s given to jobs %d and %d", d.GPUIDs[0], other, d.ID)
			}
			seen[d.GPUIDs[0]] = d.ID
		}
		waiting := 0
		for _, id := range ids {
			if d := c.job(id); d.State == api.StatePending {
				waiting++
				if d.Reason == "" || d.Message == "" {
					t.Errorf("pending job %d has no reason: %+v", id, d.Job)
				}
			}
		}
		if waiting != 2 {
			t.Errorf("%d jobs pending while 8 run; want 2", waiting)
		}
		// rota top says the same, from the server's glance: every GPU in use, both nodes
		// full, the running and the waiting jobs. The jobs run 2 s, so it is read at once.
		top := c.rota("top", "--once")
		for _, want := range []string{"GPUs 8/8 in use", "8 running  2 pending  0 held", "RUNNING", "WAITING",
			fmt.Sprint(ids[9], " "), "4/4"} {
			if top.code != 0 || !strings.Contains(top.stdout, want) {
				t.Errorf("rota top --once lacks %q: %s", want, top)
			}
		}
		if n := strings.Count(top.stdout, "4/4"); n != 2 {
			t.Errorf("rota top shows %d full nodes, want node-a and node-b: %s", n, top)
		}
		for _, id := range ids {
			d := c.waitState(id, 30*time.Second, api.StateSucceeded)
			if d.ExitCode == nil || *d.ExitCode != 0 || d.Attempts != 1 {
				t.Errorf("job %d: exit code %v attempts %d; want 0 and 1", id, d.ExitCode, d.Attempts)
			}
			log := c.logs(id)
			want := fmt.Sprintf("job %d attempt 1 gpus ", id)
			if !strings.Contains(log, want) || !strings.Contains(log, "done") {
				t.Errorf("job %d log %q lacks %q and the stderr line", id, log, want)
			}
		}
	})

	t.Run("cancel a running job", func(t *testing.T) {
		c.t = t
		j := c.submit(api.JobSpec{GPUs: 2, Command: shell(`trap 'echo got TERM; cat "$ROTA_NOTICE_FILE"; exit 3' TERM; echo ready; while true; do sleep 0.1; done`)})
		c.waitState(j.ID, 20*time.Second, api.StateRunning)
		waitFor(t, 10*time.Second, "job printed ready", func() bool {
			var buf bytes.Buffer
			c.client.Logs(context.Background(), j.ID, cli.LogOptions{}, &buf)
			return strings.Contains(buf.String(), "ready")
		})
		if _, err := c.client.Cancel(context.Background(), j.ID); err != nil {
			t.Fatal(err)
		}
		d := c.waitState(j.ID, 20*time.Second, api.StateCancelled, api.StateFailed, api.StateSucceeded)
		if d.State != api.StateCancelled || d.Reason != api.ReasonCancelled {
			t.Fatalf("cancelled job ended %s (%s); want CANCELLED (cancelled)", d.State, d.Reason)
		}
		log := c.logs(j.ID)
		if !strings.Contains(log, "got TERM") || !strings.Contains(log, `"reason"`) {
			t.Errorf("job did not see SIGTERM and the notice file before it was stopped; log %q", log)
		}
		// Cancelling again is refused: the job has ended.
		if _, err := c.client.Cancel(context.Background(), j.ID); !isAPIStatus(err, http.StatusConflict) {
			t.Errorf("second cancel: %v; want 409", err)
		}
		// A pending job is cancelled at once.
		p := c.submit(api.JobSpec{GPUs: 0, Command: []string{"true"}, Queue: "batch", GPUModel: "", Name: "later"})
		if _, err := c.client.Cancel(context.Background(), p.ID); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("time limit", func(t *testing.T) {
		c.t = t
		grace := int64(1)
		j := c.submit(api.JobSpec{GPUs: 1, TimeLimit: 2, Grace: grace, Command: shell(`trap '' TERM; echo start; sleep 300`)})
		d := c.waitState(j.ID, 30*time.Second, api.StateTimeout, api.StateFailed, api.StateSucceeded)
		if d.State != api.StateTimeout || d.Reason != api.ReasonTimeout {
			t.Fatalf("job past its limit ended %s (%s); want TIMEOUT (timeout)", d.State, d.Reason)
		}
	})

	t.Run("bad input stores nothing", func(t *testing.T) {
		c.t = t
		before := countJobs(t, c.client)
		cases := []struct {
			name, body, field string
			status            int
		}{
			{"unknown field", `{"command":["true"],"gpuz":1}`, "gpuz", 400},
			{"negative gpus", `{"command":["true"],"gpus":-1}`, "gpus", 400},
			{"absurd memory", `{"command":["true"],"memory_mb":999999999999}`, "memory_mb", 400},
			{"unknown queue", `{"command":["true"],"queue":"nope"}`, "queue", 400},
			{"unknown model", `{"command":["true"],"gpus":1,"gpu_model":"A100"}`, "gpu_model", 400},
			{"empty command", `{"command":[]}`, "command", 400},
			{"too many gpus for any node", `{"command":["true"],"gpus":16}`, "gpus", 400},
			{"time limit over queue max", `{"command":["true"],"queue":"interactive","time_limit_s":86400}`, "time_limit_s", 400},
			{"wrong type", `{"command":"true"}`, "command", 400},
			{"oversized body", `{"command":["` + strings.Repeat("x", 2<<20) + `"]}`, "", 413},
		}
		for _, tc := range cases {
			status, body := c.request(http.MethodPost, "/api/v1/jobs", c.token, strings.NewReader(tc.body))
			var e api.Error
			json.Unmarshal(body, &e)
			if status != tc.status || e.Field != tc.field || e.Message == "" {
				t.Errorf("%s: got %d field %q message %q; want %d field %q and a message", tc.name, status, e.Field, e.Message, tc.status, tc.field)
			}
		}
		if after := countJobs(t, c.client); after != before {
			t.Errorf("bad submissions stored jobs: %d before, %d after", before, after)
		}
	})

	t.Run("CLI submit and show", func(t *testing.T) {
		c.t = t
		r := c.rota("submit", "--gpus", "1", "--gpu-model", "H100", "--time", "10m", "--", "echo", "from-cli")
		if r.code != 0 {
			t.Fatalf("rota submit: %s", r)
		}
		id := lastLineID(t, r.stdout)
		c.waitState(id, 20*time.Second, api.StateSucceeded)
		r = c.rota("show", "-o", "json", strconv.FormatInt(id, 10))
		if r.code != 0 {
			t.Fatalf("rota show: %s", r)
		}
		var shown map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &shown); err != nil {
			t.Fatalf("rota show -o json: %v\n%s", err, r.stdout)
		}
		for _, k := range []string{"id", "state", "reason", "nodes", "gpus", "exit_code", "attempts"} {
			if _, ok := shown[k]; !ok {
				t.Errorf("rota show -o json lacks %q", k)
			}
		}
		if shown["state"] != "SUCCEEDED" {
			t.Errorf("state %v; want SUCCEEDED", shown["state"])
		}
		if gpus, _ := shown["gpus"].([]any); len(gpus) != 1 || !strings.HasPrefix(fmt.Sprint(gpus[0]), "GPU-") {
			t.Errorf("gpus %v; want one GPU UUID", shown["gpus"])
		}
	})

	t.Run("server killed while jobs run", func(t *testing.T) {
		c.t = t
		var running, queued []int64
		for range 4 {
			running = append(running, c.submit(api.JobSpec{GPUs: 2, Command: shell(`sleep 4; echo survived`)}).ID)
		}
		for range 3 {
			queued = append(queued, c.submit(api.JobSpec{GPUs: 2, Command: shell(`echo queued-ran`)}).ID)
		}
		for _, id := range running {
			c.waitState(id, 20*time.Second, api.StateRunning)
		}
		c.server.kill() // SIGKILL: no shutdown, no flush
		time.Sleep(500 * time.Millisecond)
		c.startServer()
		for _, id := range append(running, queued...) {
			d := c.waitState(id, 40*time.Second, api.StateSucceeded, api.StateFailed, api.StateCancelled)
			if d.State != api.StateSucceeded || d.Attempts != 1 {
				t.Errorf("job %d after server restart: %s after %d attempts; want SUCCEEDED in 1", id, d.State, d.Attempts)
			}
		}
		for _, id := range running {
			if log := c.logs(id); !strings.Contains(log, "survived") {
				t.Errorf("job %d log %q lacks its output", id, log)
			}
		}
	})
}

// checkpointing is a job that saves its attempt number when told to stop, and on a later
// attempt reports what it resumed from.
const checkpointing = `trap 'echo "stopping attempt $ROTA_ATTEMPT"; echo $ROTA_ATTEMPT > "$ROTA_CHECKPOINT_DIR/ckpt"; exit 0' TERM
if [ -f "$ROTA_CHECKPOINT_DIR/ckpt" ]; then echo "resumed from attempt $(cat "$ROTA_CHECKPOINT_DIR/ckpt") as attempt $ROTA_ATTEMPT"; exit 0; fi
echo started; while true; do sleep 0.1; done`

func TestEndToEndPreemption(t *testing.T) {
	skipShort(t)
	t.Parallel()
	c := newCluster(t, map[string]string{"node-a": "4", "node-b": "4"})
	var sweeps []int64
	for range 2 {
		sweeps = append(sweeps, c.submit(api.JobSpec{Queue: "batch", GPUs: 4, Grace: 10, Command: shell(checkpointing)}).ID)
	}
	for _, id := range sweeps {
		c.waitState(id, 20*time.Second, api.StateRunning)
	}
	urgent := c.submit(api.JobSpec{Queue: "urgent", GPUs: 4, Command: shell(`echo urgent on $CUDA_VISIBLE_DEVICES; sleep 1`)})
	c.waitState(urgent.ID, 30*time.Second, api.StateSucceeded)

	// Exactly one sweep was preempted: it saw SIGTERM, saved its checkpoint, was requeued
	// as attempt 2 on the node it had, and resumed from the checkpoint.
	var victim, other api.JobDetail
	waitFor(t, 30*time.Second, "the preempted sweep to finish its second attempt", func() bool {
		a, b := c.job(sweeps[0]), c.job(sweeps[1])
		if b.Attempts > a.Attempts {
			a, b = b, a
		}
		victim, other = a, b
		return victim.State == api.StateSucceeded
	})
	if victim.Attempts != 2 || other.Attempts != 1 || other.State != api.StateRunning {
		t.Fatalf("after preemption: victim %s attempt %d, other %s attempt %d; want SUCCEEDED at 2 and RUNNING at 1",
			victim.State, victim.Attempts, other.State, other.Attempts)
	}
	if victim.AttemptList[0].Reason != api.ReasonPreempted {
		t.Errorf("first attempt ended with reason %q; want preempted", victim.AttemptList[0].Reason)
	}
	if log := c.logs(victim.ID); !strings.Contains(log, "resumed from attempt 1 as attempt 2") {
		t.Errorf("second attempt log %q: it did not find its checkpoint", log)
	}
	var buf bytes.Buffer
	c.client.Logs(context.Background(), victim.ID, cli.LogOptions{Attempt: 1}, &buf)
	if !strings.Contains(buf.String(), "stopping attempt 1") {
		t.Errorf("first attempt log %q: it was not signalled before it was stopped", buf.String())
	}
	c.client.Cancel(context.Background(), other.ID)
	c.waitState(other.ID, 20*time.Second, api.StateCancelled)
}

// The accounting records come out as a rota trace that rota sim replays.
func TestHistoryExportReplays(t *testing.T) {
	skipShort(t)
	t.Parallel()
	c := newCluster(t, map[string]string{"node-a": "2"})
	for range 3 {
		c.submit(api.JobSpec{GPUs: 1, Command: shell(`sleep 1`)})
	}
	failed := c.submit(api.JobSpec{GPUs: 2, Command: shell(`exit 3`)})
	c.waitState(failed.ID, 30*time.Second, api.StateFailed)
	for id := int64(1); id <= 3; id++ {
		c.waitState(id, 30*time.Second, api.StateSucceeded)
	}
	trace := filepath.Join(t.TempDir(), "month.csv")
	cluster := filepath.Join(t.TempDir(), "cluster.yaml")
	if r := c.rota("history", "export", "--since", "1h", "--out", trace, "--cluster-out", cluster); r.code != 0 {
		t.Fatalf("rota history export: %s", r)
	}
	data, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "id,submit,start,end,duration_s") || !strings.Contains(lines[4], "FAILED") {
		t.Fatalf("exported trace:\n%s\nwant a header and 4 jobs, the last FAILED", data)
	}
	out, err := exec.Command(rotaBinary(t), "sim", "--trace", trace, "--format", "rota", "--cluster", cluster, "--add-nodes", "1xH100", "--policy", "default,fifo").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "4 jobs replayed") || !strings.Contains(string(out), "2 nodes, 10 GPUs") {
		t.Fatalf("rota sim on the exported trace: %v\n%s", err, out)
	}
}

// A placed job starts when the agent hears of it through its watch, not at its next
// heartbeat: here heartbeats are a minute apart and the job must run well before that.
func TestJobStartsWithoutWaitingForAHeartbeat(t *testing.T) {
	skipShort(t)
	t.Parallel()
	c := newClusterWith(t, map[string]string{"node-a": "2"}, "60s")
	for range 3 {
		j := c.submit(api.JobSpec{GPUs: 1, Command: shell(`echo started`)})
		c.waitState(j.ID, 20*time.Second, api.StateSucceeded)
	}
}
