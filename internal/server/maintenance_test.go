package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

func TestMaintenanceWindow(t *testing.T) { testMaintenanceWindow(t, newHarness(t)) }

// A window planned two hours ahead: until it opens, a job that ends before it starts on
// the node and one whose limit crosses it waits, saying why; the plan survives a restart;
// at its start the node drains by itself, at its end it comes back and the waiting job
// starts. Each step is in the audit log.
func testMaintenanceWindow(t *testing.T, h *harness) {
	h.beat("n1", 8)
	t0 := h.clock.Now()
	at, until := t0.Add(2*time.Hour), t0.Add(5*time.Hour)
	var n api.Node
	if code := h.do("POST", "/api/v1/nodes/n1/drain", api.DrainRequest{Reason: "BIOS update OPS-7", At: &at, Until: &until}, &n); code != http.StatusOK {
		t.Fatalf("plan a window: %d", code)
	}
	if n.State != api.NodeReady || n.Maintenance == nil || n.Maintenance.Reason != "BIOS update OPS-7" ||
		!n.Maintenance.Start.Equal(at) || n.Maintenance.End == nil || !n.Maintenance.End.Equal(until) || n.Maintenance.By != "admin" {
		t.Fatalf("node after planning: %s %+v; want READY with the window, by admin", n.State, n.Maintenance)
	}

	short := h.submit(api.JobSpec{GPUs: 1, Command: []string{"short"}, TimeLimit: 3600})
	long := h.submit(api.JobSpec{GPUs: 1, Command: []string{"long"}, TimeLimit: 3 * 3600})
	h.cycle()
	if got := h.job(short.ID); got.State != api.StateAssigned {
		t.Errorf("a one-hour job before a window two hours ahead: %s %s; want ASSIGNED", got.State, got.Message)
	}
	got := h.job(long.ID)
	if got.State != api.StatePending || got.Reason != "Maintenance" || !strings.Contains(got.Message, "BIOS update OPS-7") {
		t.Errorf("a three-hour job: %s %s %q; want PENDING, Maintenance, naming the reason", got.State, got.Reason, got.Message)
	}
	if got.EstimatedStart == nil || !got.EstimatedStart.Equal(until) {
		t.Errorf("three-hour job's estimated start %v; want the window's end %v", got.EstimatedStart, until)
	}
	h.end("n1", short.ID, 1, api.StateSucceeded, 0)

	h.restart()
	if n := h.node("n1"); n.State != api.NodeReady || n.Maintenance == nil || !n.Maintenance.Start.Equal(at) || !n.Maintenance.End.Equal(until) {
		t.Fatalf("after a restart: %s %+v; want READY with the planned window", n.State, n.Maintenance)
	}

	h.clock.Add(2 * time.Hour)
	h.beat("n1", 8)
	h.cycle()
	if n := h.node("n1"); n.State != api.NodeDraining || n.Maintenance == nil {
		t.Fatalf("at the window's start: %s %+v; want DRAINING, window kept", n.State, n.Maintenance)
	}
	h.cycle()
	if n := h.node("n1"); n.State != api.NodeDrained {
		t.Fatalf("a cycle into the window: %s; want DRAINED (nothing runs there)", n.State)
	}
	if got := h.job(long.ID); got.State != api.StatePending {
		t.Fatalf("long job during the window: %s", got.State)
	}
	var why api.Why
	h.do("GET", fmt.Sprintf("/api/v1/jobs/%d/why", long.ID), nil, &why)
	if w := strings.Join(why.Reasons, " "); !strings.Contains(w, "Node n1 takes no new work: it is drained for maintenance (BIOS update OPS-7) until 2026-11-01T14:00:00Z.") {
		t.Errorf("why during the window: %q; want the node's maintenance named", w)
	}

	h.clock.Add(3 * time.Hour)
	h.beat("n1", 8)
	h.cycle()
	if n := h.node("n1"); n.State != api.NodeReady || n.Maintenance != nil {
		t.Fatalf("at the window's end: %s %+v; want READY and no window", n.State, n.Maintenance)
	}
	h.cycle()
	if got := h.job(long.ID); got.State != api.StateAssigned {
		t.Errorf("long job after the window: %s %s; want ASSIGNED", got.State, got.Message)
	}

	var msgs []string
	for _, ev := range h.events(api.EventDrain) {
		msgs = append(msgs, ev.Actor+": "+ev.Message)
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{
		"admin: drain node n1: READY -> READY: BIOS update OPS-7; planned from 2026-11-01T11:00:00Z; until 2026-11-01T14:00:00Z",
		"scheduler: node n1: READY -> DRAINING: maintenance window opened",
		"scheduler: node n1: DRAINED -> READY: maintenance window ended (BIOS update OPS-7)",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("audit log lacks %q:\n%s", want, all)
		}
	}
}

// Bad drain requests are refused with the field at fault, and nothing is stored: the node
// keeps its state and has no window, and no drain event is written.
func TestDrainBadInput(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	now := h.clock.Now()
	ts := func(d time.Duration) string { return now.Add(d).Format(time.RFC3339) }
	for _, c := range []struct {
		body, field string
	}{
		{`{"reason":"` + strings.Repeat("x", api.MaxDrainReason+1) + `"}`, "reason"},
		{`{"reason":"fan\nswap"}`, "reason"},
		{`{"reason":"bell\u0007"}`, "reason"},
		{`{"reason":"fan \u202eswap"}`, "reason"},
		{`{"reason":"tab\there"}`, "reason"},
		{`{"at":"` + ts(-time.Hour) + `"}`, "at"},
		{`{"at":"` + ts(400*24*time.Hour) + `"}`, "at"},
		{`{"at":"` + ts(2*time.Hour) + `","until":"` + ts(time.Hour) + `"}`, "until"},
		{`{"at":"` + ts(2*time.Hour) + `","until":"` + ts(2*time.Hour) + `"}`, "until"},
		{`{"until":"` + ts(-time.Minute) + `"}`, "until"},
		{`{"at":"tomorrow"}`, "at"},
		{`{"when":"now"}`, "when"},
	} {
		code, e, _ := h.rawCall("POST", "/api/v1/nodes/n1/drain", "application/json", c.body)
		if code != http.StatusBadRequest || e.Field != c.field || e.Message == "" {
			t.Errorf("%.80s: %d %+v; want 400 naming %s", c.body, code, e, c.field)
		}
	}
	if code, _, _ := h.rawCall("POST", "/api/v1/nodes/n1/drain", "text/plain", `{"reason":"x"}`); code != http.StatusUnsupportedMediaType {
		t.Errorf("a text/plain body: %d; want 415", code)
	}
	if n := h.node("n1"); n.State != api.NodeReady || n.Maintenance != nil {
		t.Errorf("after refused drains: %s %+v; want READY without a window", n.State, n.Maintenance)
	}
	if evs := h.events(api.EventDrain); len(evs) != 0 {
		t.Errorf("refused drains left events: %+v", evs)
	}
	// A little in the past is now: clocks differ.
	at := now.Add(-time.Minute)
	var n api.Node
	if code := h.do("POST", "/api/v1/nodes/n1/drain", api.DrainRequest{At: &at}, &n); code != http.StatusOK ||
		n.State != api.NodeDraining || n.Maintenance == nil || !n.Maintenance.Start.Equal(now) || n.Maintenance.Reason != api.DefaultDrainReason {
		t.Errorf("drain at a minute ago: %d %s %+v; want DRAINING from now, with the default reason", code, n.State, n.Maintenance)
	}
}

// Resume cancels a planned window; a window cannot be planned ahead on a node already
// draining; a second drain of a draining node changes the reason and end but not when
// the window opened; a bare drain still works and records the default reason.
func TestDrainAndResume(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	h.beat("n2", 8)
	now := h.clock.Now()
	at := now.Add(time.Hour)
	var n api.Node
	h.do("POST", "/api/v1/nodes/n1/drain", api.DrainRequest{Reason: "cabling", At: &at}, &n)
	n = api.Node{}
	if code := h.do("POST", "/api/v1/nodes/n1/resume", nil, &n); code != http.StatusOK || n.State != api.NodeReady || n.Maintenance != nil {
		t.Fatalf("resume of a planned window: %d %s %+v; want READY, window gone", code, n.State, n.Maintenance)
	}
	var e api.Error
	if code := h.do("POST", "/api/v1/nodes/n1/resume", nil, &e); code != http.StatusConflict {
		t.Errorf("resume of a ready node without a window: %d; want 409", code)
	}

	n = api.Node{}
	h.do("POST", "/api/v1/nodes/n2/drain", nil, &n)
	if n.State != api.NodeDraining || n.Maintenance == nil || n.Maintenance.Reason != api.DefaultDrainReason || n.Maintenance.End != nil {
		t.Fatalf("bare drain: %s %+v; want DRAINING, default reason, open-ended", n.State, n.Maintenance)
	}
	if code := h.do("POST", "/api/v1/nodes/n2/drain", api.DrainRequest{Reason: "later", At: &at}, &e); code != http.StatusConflict || e.Field != "at" {
		t.Errorf("planning ahead on a draining node: %d %+v; want 409 on at", code, e)
	}
	h.clock.Add(10 * time.Minute)
	until := h.clock.Now().Add(time.Hour)
	n = api.Node{}
	h.do("POST", "/api/v1/nodes/n2/drain", api.DrainRequest{Reason: "RMA GPU 3", Until: &until}, &n)
	if n.Maintenance == nil || n.Maintenance.Reason != "RMA GPU 3" || !n.Maintenance.Start.Equal(now) || !n.Maintenance.End.Equal(until) {
		t.Errorf("second drain: %+v; want the new reason and end, the start kept at %v", n.Maintenance, now)
	}
	evs := h.events(api.EventDrain)
	if len(evs) != 4 || len(evs[len(evs)-1].Before) == 0 || len(evs[len(evs)-1].After) == 0 {
		t.Errorf("drain events %+v; want four, the last with the window before and after", evs)
	}
	for _, ev := range evs {
		if ev.Node == "" {
			t.Errorf("drain event without its node: %+v", ev)
		}
	}
}
