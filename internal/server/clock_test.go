package server

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
)

// skewedBeat sends node's heartbeat as an agent whose clock is off by -behind from the
// server's (behind > 0: the node's clock is behind), with the tasks' times already on
// that clock, and returns the answer.
func (h *harness) skewedBeat(node string, behind time.Duration, tasks ...api.TaskStatus) api.HeartbeatResponse {
	h.t.Helper()
	code, resp, e := h.beatAs(node, api.Heartbeat{Tasks: append([]api.TaskStatus{}, tasks...), Instance: "agent-" + node, Synced: true,
		AgentTime: h.clock.Now().Add(-behind)})
	if code != http.StatusOK {
		h.t.Fatalf("heartbeat %s: %d %s", node, code, e.Message)
	}
	return resp
}

// A node whose clock is off keeps its jobs' time limits on its own clock, and the times
// it reports are brought to the server's: the job runs its whole limit, and its start,
// end and GPU-hours are what they were. Without this, a node an hour ahead stops every
// job of a shorter limit at once, and one an hour behind runs each an hour too long.
func TestNodeClockIsConverted(t *testing.T) {
	for _, tc := range []struct {
		name   string
		behind time.Duration
		want   int64 // clock_offset_s
	}{
		{"an hour behind", time.Hour, 3600},
		{"an hour ahead", -time.Hour, -3600},
		{"a second off", time.Second, 0}, // within the tolerance: nothing is converted
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.skewedBeat("n1", tc.behind)
			j := h.submit(api.JobSpec{GPUs: 1, Command: []string{"train"}, TimeLimit: 1800})
			h.cycle()
			assigned := h.clock.Now()
			resp := h.skewedBeat("n1", tc.behind)
			if len(resp.Tasks) != 1 {
				t.Fatalf("answer has %d tasks; want job %d", len(resp.Tasks), j.ID)
			}
			offset := time.Duration(tc.want) * time.Second
			task := resp.Tasks[0]
			wantEnd := assigned.Add(30*time.Minute - offset)
			if !task.TimeLimitEnd.Equal(wantEnd) || task.Env[api.EnvTimeLimitEnd] != wantEnd.Format(time.RFC3339) {
				t.Errorf("time limit handed to the node: %s (env %s); want %s, on the node's clock", task.TimeLimitEnd, task.Env[api.EnvTimeLimitEnd], wantEnd)
			}
			if n := h.node("n1"); n.ClockOffsetS != tc.want {
				t.Errorf("node's clock_offset_s = %d; want %d", n.ClockOffsetS, tc.want)
			}

			// The job starts 5 s after it was assigned and ends 10 minutes later, as the
			// node's clock reads them.
			h.clock.Add(5 * time.Second)
			started := h.clock.Now()
			nodeStart := started.Add(-tc.behind)
			h.skewedBeat("n1", tc.behind, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateRunning, PID: 42, StartTime: &nodeStart})
			h.clock.Add(10 * time.Minute)
			nodeEnd := h.clock.Now().Add(-tc.behind)
			zero := 0
			h.skewedBeat("n1", tc.behind, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateSucceeded, StartTime: &nodeStart, EndTime: &nodeEnd, ExitCode: &zero})
			d := h.job(j.ID)
			// Within the tolerance the node's own times stand, a second off.
			slack := tc.behind.Abs()
			if tc.want != 0 {
				slack = 0
			}
			if d.State != api.StateSucceeded || d.StartTime == nil || d.EndTime == nil ||
				d.StartTime.Sub(started).Abs() > slack || d.EndTime.Sub(h.clock.Now()).Abs() > slack {
				t.Fatalf("job: %s, start %v, end %v; want SUCCEEDED, started %s and ended %s on the server's clock", d.State, d.StartTime, d.EndTime, started, h.clock.Now())
			}

			evs, err := h.st.Events(context.Background(), store.EventFilter{Actor: "node:n1", Kind: api.EventNode})
			if err != nil {
				t.Fatal(err)
			}
			said := ""
			for _, e := range evs {
				if strings.Contains(e.Message, "clock") {
					said = e.Message
				}
			}
			switch {
			case tc.want > 0 && !strings.Contains(said, "node n1's clock is 1h0m0s behind the server's"),
				tc.want < 0 && !strings.Contains(said, "node n1's clock is 1h0m0s ahead of the server's"),
				tc.want == 0 && said != "":
				t.Errorf("the node's events say %q of its clock", said)
			}
		})
	}
}

// The offset is the least a node's last heartbeats measured, as their time in flight only
// adds to it: a clock that moves ahead is followed at once, one that falls behind once
// clockSamples heartbeats have said so.
func TestNodeClockReading(t *testing.T) {
	var c nodeClock
	for _, d := range []time.Duration{time.Hour + 300*time.Millisecond, time.Hour + 2*time.Second, time.Hour} {
		c.observe(d)
	}
	if c.applied != time.Hour {
		t.Errorf("after readings of an hour and some: %s; want 1h0m0s", c.applied)
	}
	if c.observe(40 * time.Millisecond); c.applied != 0 {
		t.Errorf("after the clock was set right: %s; want 0", c.applied)
	}
	for i := range clockSamples {
		if c.observe(time.Hour); i < clockSamples-1 && c.applied != 0 {
			t.Fatalf("reading %d of a clock set an hour behind: %s; want 0 until every reading says so", i+1, c.applied)
		}
	}
	if c.applied != time.Hour {
		t.Errorf("after %d readings of an hour behind: %s; want 1h0m0s", clockSamples, c.applied)
	}
	if c.observe(time.Hour + 1500*time.Millisecond); c.applied != time.Hour {
		t.Errorf("a reading further off does not move the least: %s", c.applied)
	}
	if c.observe(-time.Hour); c.applied != -time.Hour {
		t.Errorf("a clock set an hour ahead: %s; want -1h0m0s at once", c.applied)
	}
}
