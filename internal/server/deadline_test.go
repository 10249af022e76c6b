package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// Bad deadlines are refused with the field at fault, and no job is stored.
func TestDeadlineBadInput(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 1)
	now := h.clock.Now()
	ts := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339) }
	for _, c := range []struct{ body, field, msg string }{
		{`{"command":["x"],"deadline":"` + ts(-time.Minute) + `"}`, "deadline", "in the past"},
		{`{"command":["x"],"deadline":"next friday"}`, "deadline", "not an RFC 3339 time"},
		{`{"command":["x"],"time_limit_s":7200,"deadline":"` + ts(time.Hour) + `"}`, "deadline", "less than the time limit of 2h"},
		// The train queue's default limit is a day: a deadline in six hours cannot be met.
		{`{"command":["x"],"deadline":"` + ts(6*time.Hour) + `"}`, "deadline", "less than the time limit of 1d"},
		{`{"command":["x"],"queue":"inference","deadline":"` + ts(6*time.Hour) + `"}`, "deadline", "needs a time limit"},
		{`{"command":["x"],"deadline":"` + ts(400*24*time.Hour) + `","deadline_kind":"start"}`, "deadline", "days ahead"},
		{`{"command":["x"],"deadline":"` + ts(time.Hour) + `","deadline_kind":"soon"}`, "deadline_kind", "unknown kind"},
		{`{"command":["x"],"deadline_kind":"start"}`, "deadline_kind", "without a deadline"},
	} {
		code, e, _ := h.rawCall("POST", "/api/v1/jobs", "application/json", c.body)
		if code != http.StatusBadRequest || e.Field != c.field || !strings.Contains(e.Message, c.msg) {
			t.Errorf("%s: %d %+v; want 400 on %s saying %q", c.body, code, e, c.field, c.msg)
		}
	}
	var list api.JobList
	h.do("GET", "/api/v1/jobs?state=all", nil, &list)
	if len(list.Jobs) != 0 {
		t.Errorf("refused submits stored %d jobs", len(list.Jobs))
	}
	// A start-by deadline needs no time limit; the kind is stored spelt out otherwise.
	dl := now.Add(time.Hour)
	j := h.submit(api.JobSpec{Command: []string{"x"}, Queue: "inference", Deadline: &dl, DeadlineKind: api.DeadlineStart})
	k := h.submit(api.JobSpec{Command: []string{"x"}, TimeLimit: 600, Deadline: &dl})
	if j.Spec.DeadlineKind != api.DeadlineStart || k.Spec.DeadlineKind != api.DeadlineFinish || !k.Spec.Deadline.Equal(dl) {
		t.Errorf("stored kinds %q, %q; want start, finish", j.Spec.DeadlineKind, k.Spec.DeadlineKind)
	}
}

// A start-by deadline that the estimated start cannot meet is warned about in why and in
// the job; it is marked missed when it passes, through a restart, with an event; the
// lateness is recorded when the job starts. A finish-by deadline is met by success in
// time, and missed by a failure.
func TestDeadlineWarningAndResult(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 1)
	now := h.clock.Now()
	blocker := h.submit(api.JobSpec{GPUs: 1, Command: []string{"long"}, TimeLimit: 2 * 3600})
	h.cycle()
	h.beat("n1", 1, api.TaskStatus{JobID: blocker.ID, Attempt: 1, State: api.StateRunning, PID: 10, StartTime: &now})

	startBy := now.Add(time.Hour)
	waiter := h.submit(api.JobSpec{GPUs: 1, Command: []string{"eval"}, TimeLimit: 600, Deadline: &startBy, DeadlineKind: api.DeadlineStart})
	h.cycle()
	got := h.job(waiter.ID)
	if got.State != api.StatePending || got.EstimatedStart == nil || !strings.Contains(got.DeadlineWarning, "looks unreachable: the estimated start 2026-11-01T11:00:00Z") {
		t.Fatalf("waiting job: %s est %v warning %q; want a warning naming the estimated start", got.State, got.EstimatedStart, got.DeadlineWarning)
	}
	if l := h.listJobs(); len(l) != 2 || l[1].ID != waiter.ID || l[1].DeadlineWarning != got.DeadlineWarning {
		t.Errorf("the job list: %+v; want job %d with the warning its own page gives", l, waiter.ID)
	}
	if got.Priority == nil || got.Priority.Deadline <= 0 {
		t.Errorf("priority %+v; want a deadline factor", got.Priority)
	}
	var why api.Why
	h.do("GET", fmt.Sprintf("/api/v1/jobs/%d/why", waiter.ID), nil, &why)
	if w := strings.Join(why.Reasons, " "); !strings.Contains(w, "Warning: the deadline (start by 2026-11-01T10:00:00Z) looks unreachable") ||
		!strings.Contains(w, "+ deadline ") {
		t.Errorf("why: %q; want the deadline warning and factor", w)
	}

	h.clock.Add(61 * time.Minute)
	h.beat("n1", 1, api.TaskStatus{JobID: blocker.ID, Attempt: 1, State: api.StateRunning, PID: 10, StartTime: &now})
	h.cycle()
	h.restart()
	got = h.job(waiter.ID)
	if got.DeadlineResult != api.DeadlineMissed || got.DeadlineMissedBy != 0 || got.DeadlineWarning != "" {
		t.Errorf("after the start-by deadline passed: %q by %d, warning %q; want missed, no lateness yet, no warning", got.DeadlineResult, got.DeadlineMissedBy, got.DeadlineWarning)
	}
	if evs := h.events(api.EventDeadline); len(evs) != 1 || evs[0].JobID != waiter.ID || !strings.Contains(evs[0].Message, "deadline missed") {
		t.Errorf("deadline events %+v; want one for job %d", evs, waiter.ID)
	}

	h.clock.Add(59 * time.Minute)
	h.end("n1", blocker.ID, 1, api.StateSucceeded, 0)
	h.cycle()
	got = h.job(waiter.ID)
	if got.State != api.StateAssigned || got.DeadlineResult != api.DeadlineMissed || got.DeadlineMissedBy != 3600 {
		t.Errorf("started an hour late: %s %q by %ds; want ASSIGNED, missed by 3600s", got.State, got.DeadlineResult, got.DeadlineMissedBy)
	}
	h.end("n1", waiter.ID, 1, api.StateSucceeded, 0)
	h.cycle()

	// Finish-by: success in time is met; a failure in time is missed.
	finishBy := h.clock.Now().Add(3 * time.Hour)
	ok := h.submit(api.JobSpec{GPUs: 1, Command: []string{"ok"}, TimeLimit: 3600, Deadline: &finishBy})
	h.cycle()
	h.end("n1", ok.ID, 1, api.StateSucceeded, 0)
	bad := h.submit(api.JobSpec{GPUs: 1, Command: []string{"bad"}, TimeLimit: 3600, Deadline: &finishBy})
	h.cycle()
	h.end("n1", bad.ID, 1, api.StateFailed, 3)
	h.restart()
	if got := h.job(ok.ID); got.State != api.StateSucceeded || got.DeadlineResult != api.DeadlineMet {
		t.Errorf("finished in time: %s %q; want SUCCEEDED, met", got.State, got.DeadlineResult)
	}
	if got := h.job(bad.ID); got.State != api.StateFailed || got.DeadlineResult != api.DeadlineMissed {
		t.Errorf("failed in time: %s %q; want FAILED, missed", got.State, got.DeadlineResult)
	}
}
