package server

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// idleQueue creates queue dev with an idle policy of after seconds.
func (h *harness) idleQueue(after int64, action string) {
	h.t.Helper()
	q := api.Queue{Name: "dev", Tier: 50, DefaultTimeLimit: 3600, MaxTimeLimit: 3600, Grace: 10, IdleAfter: after, IdleAction: action}
	var e api.Error
	if code := h.do("PUT", "/api/v1/queues/dev", q, &e); code != 200 {
		h.t.Fatalf("put queue: %d %s", code, e.Message)
	}
}

// idleReading reports the job's one GPU at util percent, a step of the clock later.
func (h *harness) idleReading(j api.Job, util float64, step time.Duration) api.HeartbeatResponse {
	h.t.Helper()
	h.clock.Add(step)
	gpu := h.job(j.ID).AttemptList[0].Placements[0].GPUIndices
	return h.beatFull("n1", 2, withReading(h.clock.Now(), util, 500, gpu, j.ID, 1))
}

// Under action warn, a job whose GPUs stay idle past the window is warned once, through
// an event and its notice file, and the first reading that shows use clears the flag.
func TestIdleWarn(t *testing.T) {
	h := newHarness(t)
	h.idleQueue(60, api.IdleWarn)
	h.beat("n1", 2)
	j := h.startJob("n1", 2, api.JobSpec{GPUs: 1, Queue: "dev", Command: []string{"sleep"}})
	h.idleReading(j, 1, 5*time.Second)
	since := h.clock.Now()
	got := h.job(j.ID)
	if got.IdleSince == nil || !got.IdleSince.Equal(since) || got.IdleWarned {
		t.Fatalf("after one idle reading: since %v warned %v; want since %s, not warned", got.IdleSince, got.IdleWarned, since)
	}
	gpu := got.AttemptList[0].Placements[0].GPUIndices
	if n := h.node("n1"); !slices.Equal(n.UsedGPUs, gpu) || !slices.Equal(n.IdleGPUs, gpu) {
		t.Fatalf("node n1 lists GPUs %v used and %v idle; want %v both", n.UsedGPUs, n.IdleGPUs, gpu)
	}
	resp := h.idleReading(j, 2, 30*time.Second)
	if got := h.job(j.ID); !got.IdleSince.Equal(since) || got.IdleWarned || resp.Tasks[0].Notice != "" {
		t.Fatalf("inside the window: %+v, notice %q", got.Job, resp.Tasks[0].Notice)
	}
	h.idleReading(j, 0, 31*time.Second)
	resp = h.idleReading(j, 0, 5*time.Second)
	got = h.job(j.ID)
	want := "this job has not used its GPUs for 1m (below 5% utilisation) and is flagged as idle"
	if !got.IdleWarned || resp.Tasks[0].Notice != want || resp.Tasks[0].Stop {
		t.Fatalf("past the window: warned %v, task %+v; want the notice %q and no stop", got.IdleWarned, resp.Tasks[0], want)
	}
	if evs := h.events(api.EventIdle); len(evs) != 1 || evs[0].JobID != j.ID || evs[0].Message != want {
		t.Fatalf("idle events %+v; want one, with the notice", evs)
	}
	h.idleReading(j, 30, 5*time.Second)
	got = h.job(j.ID)
	if got.IdleSince != nil || got.IdleWarned || got.State != api.StateRunning {
		t.Errorf("after a reading showing use: since %v warned %v %s; want the flag cleared", got.IdleSince, got.IdleWarned, got.State)
	}
	if n := h.node("n1"); !slices.Equal(n.UsedGPUs, gpu) || len(n.IdleGPUs) != 0 {
		t.Errorf("after a reading showing use, node n1 lists GPUs %v used and %v idle; want %v and none", n.UsedGPUs, n.IdleGPUs, gpu)
	}
	if resp := h.beat("n1", 2); resp.Tasks[0].Notice != "" {
		t.Errorf("notice %q once the job computes again", resp.Tasks[0].Notice)
	}
	// A restart keeps the flag of a job that is idle again.
	h.idleReading(j, 0, 5*time.Second)
	h.restart()
	if got := h.job(j.ID); got.IdleSince == nil {
		t.Error("IdleSince was not stored with the job")
	}
}

// Under action stop, the warned job is stopped a grace after the window and ends CANCELLED
// with reason idle_reclaimed, not requeued.
func TestIdleStop(t *testing.T) {
	h := newHarness(t)
	h.idleQueue(60, api.IdleStop)
	h.beat("n1", 2)
	j := h.startJob("n1", 2, api.JobSpec{GPUs: 1, Queue: "dev", Command: []string{"sleep"}, Retries: intp(3)})
	h.idleReading(j, 0, time.Second)
	since := h.clock.Now()
	resp := h.idleReading(j, 0, 60*time.Second)
	stopAt := since.Add(70 * time.Second).Format("15:04 MST")
	if n := resp.Tasks[0].Notice; !strings.Contains(n, "will be stopped at "+stopAt+" unless they are used") || resp.Tasks[0].Stop {
		t.Fatalf("warned task %+v; want a notice naming %s", resp.Tasks[0], stopAt)
	}
	resp = h.idleReading(j, 0, 5*time.Second)
	if resp.Tasks[0].Stop {
		t.Fatal("stopped before its grace passed")
	}
	resp = h.idleReading(j, 0, 5*time.Second)
	if !resp.Tasks[0].Stop || resp.Tasks[0].StopReason != api.ReasonIdle {
		t.Fatalf("task after the grace %+v; want a stop with reason %s", resp.Tasks[0], api.ReasonIdle)
	}
	// A cancel meanwhile changes nothing: the stop is under way.
	h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", j.ID), nil, nil)
	code := 143
	h.beat("n1", 2, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateCancelled, ExitCode: &code, Reason: api.ReasonIdle})
	got := h.job(j.ID)
	if got.State != api.StateCancelled || got.Reason != api.ReasonIdle || got.Attempts != 1 || !strings.Contains(got.Message, "not used since") {
		t.Fatalf("job %s %s %q after %d attempts; want CANCELLED idle_reclaimed, not requeued", got.State, got.Reason, got.Message, got.Attempts)
	}
	if evs := h.events(api.EventIdle); len(evs) != 2 || evs[1].Reason != api.ReasonIdle {
		t.Errorf("idle events %+v; want the warning and the stop", evs)
	}
}

// A job without readings, or without GPUs, is never idle; nor is one in a queue without a
// policy; a user cancel of a warned job is a plain cancel.
func TestIdleNeedsTelemetry(t *testing.T) {
	h := newHarness(t)
	h.idleQueue(1, api.IdleStop)
	h.beat("n1", 2)
	silent := h.startJob("n1", 2, api.JobSpec{GPUs: 1, Queue: "dev", Command: []string{"a"}})
	cpu := h.startJob("n1", 2, api.JobSpec{GPUs: 0, CPUs: 1, Queue: "dev", Command: []string{"b"}})
	for range 3 {
		h.clock.Add(time.Minute)
		// GPU readings only, no task names either job; then the CPU job's own usage.
		h.beatFull("n1", 2, func(hb *api.Heartbeat) {
			hb.Telemetry = &api.Telemetry{Time: h.clock.Now(), GPUs: []api.GPUSample{{Index: 0}, {Index: 1}},
				Tasks: []api.TaskUsage{{JobID: cpu.ID, Attempt: 1, CPUPct: 0}}}
		})
	}
	for _, id := range []int64{silent.ID, cpu.ID} {
		if got := h.job(id); got.IdleSince != nil || got.CancelRequested {
			t.Errorf("job %d: idle since %v, cancel %v; want never idle", id, got.IdleSince, got.CancelRequested)
		}
	}
	if evs := h.events(api.EventIdle); len(evs) != 0 {
		t.Errorf("idle events %+v", evs)
	}
}

// The shipped interactive queue reclaims idle jobs after 30 minutes.
func TestInteractiveQueueHasIdlePolicy(t *testing.T) {
	h := newHarness(t)
	var list api.QueueList
	h.do("GET", "/api/v1/queues", nil, &list)
	for _, q := range list.Queues {
		want := q.Name == "interactive"
		if has := q.IdleAfter == 1800 && q.IdleAction == api.IdleStop; has != want || (!want && q.IdleAfter != 0) {
			t.Errorf("queue %s: idle after %ds, %q", q.Name, q.IdleAfter, q.IdleAction)
		}
	}
}

// A warned job its owner cancels ends as a plain cancel; a queue's idle policy is checked
// when the queue is set.
func TestIdleCancelAndQueueValidation(t *testing.T) {
	h := newHarness(t)
	h.idleQueue(60, api.IdleWarn)
	h.beat("n1", 2)
	j := h.startJob("n1", 2, api.JobSpec{GPUs: 1, Queue: "dev", Command: []string{"sleep"}})
	h.idleReading(j, 0, time.Second)
	h.idleReading(j, 0, time.Minute)
	if !h.job(j.ID).IdleWarned {
		t.Fatal("not warned")
	}
	h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", j.ID), nil, nil)
	if resp := h.beat("n1", 2); resp.Tasks[0].StopReason != api.ReasonCancelled {
		t.Errorf("stop reason %q; want %s", resp.Tasks[0].StopReason, api.ReasonCancelled)
	}
	code := 143
	h.beat("n1", 2, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateCancelled, ExitCode: &code})
	if got := h.job(j.ID); got.State != api.StateCancelled || got.Reason != api.ReasonCancelled {
		t.Errorf("job %s %s; want CANCELLED cancelled", got.State, got.Reason)
	}
	q := api.Queue{Name: "dev", Tier: 50, DefaultTimeLimit: 3600, MaxTimeLimit: 3600, IdleAfter: 60, IdleAction: "kill"}
	var e api.Error
	if code := h.do("PUT", "/api/v1/queues/dev", q, &e); code != 400 || e.Field != "idle_action" {
		t.Errorf("queue with idle action kill: %d %+v; want 400 naming idle_action", code, e)
	}
}
