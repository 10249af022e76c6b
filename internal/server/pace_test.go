package server

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

func TestBeatInterval(t *testing.T) {
	const s = time.Second
	for _, c := range []struct {
		base  time.Duration
		rate  float64
		nodes int
		want  time.Duration
	}{
		{base: 2 * s, rate: 1000, nodes: 0, want: 2 * s},
		{base: 2 * s, rate: 1000, nodes: 1, want: 2 * s},
		{base: 2 * s, rate: 1000, nodes: 2000, want: 2 * s},
		{base: 2 * s, rate: 1000, nodes: 2001, want: 2100 * time.Millisecond}, // rounded up to a tenth
		{base: 2 * s, rate: 1000, nodes: 10000, want: 10 * s},
		{base: 2 * s, rate: 1000, nodes: 100000, want: 100 * s},
		{base: 30 * s, rate: 1000, nodes: 10000, want: 30 * s}, // the base is the least
		{base: 2 * s, rate: 0.5, nodes: 3, want: 6 * s},
		{base: 2 * s, rate: -1, nodes: 100000, want: 2 * s}, // no bound
	} {
		if got := beatInterval(c.base, c.rate, c.nodes); got != c.want {
			t.Errorf("beatInterval(%v, %v/s, %d nodes) = %v, want %v", c.base, c.rate, c.nodes, got, c.want)
		}
	}
}

// TestHeartbeatsPaced grows a cluster past what its heartbeat bound allows at the base
// interval, then shrinks it: the answers name the longer interval, and no node is judged
// silent, or given to a second agent, by a shorter one than its last answer named.
func TestHeartbeatsPaced(t *testing.T) {
	h := &harness{t: t, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir(),
		cfg: func(c *Config) { c.MaxHeartbeatsPerSecond = 1 }} // 2 s interval, not ready after 10 s, lost after 1m
	h.open()
	var logs syncBuffer
	h.srv.log = slog.New(slog.NewTextHandler(&logs, nil))
	ctx := context.Background()
	interval := func(resp api.HeartbeatResponse) time.Duration {
		return time.Duration(resp.HeartbeatSeconds * float64(time.Second))
	}
	state := func(node string) api.NodeState { return h.node(node).State }

	// Two nodes at one heartbeat a second: the base interval.
	h.beat("n1", 1)
	if got := interval(h.beat("n2", 1)); got != 2*time.Second {
		t.Fatalf("two nodes: the answer names %v, want 2s", got)
	}
	// Four: each is asked for one every 4 s, once liveness has counted them.
	h.beat("n3", 1)
	h.beat("n4", 1)
	h.srv.checkNodes(ctx)
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		if got := interval(h.beat(n, 1)); got != 4*time.Second {
			t.Fatalf("four nodes at one heartbeat a second: %s's answer names %v, want 4s", n, got)
		}
	}
	if out := h.scrape(); !strings.Contains(out, "\nrota_heartbeat_interval_seconds 4\n") {
		t.Errorf("/metrics does not show the 4 s interval:\n%s", grepLines(out, "rota_heartbeat_interval"))
	}
	if got := grepLines(logs.String(), "heartbeat interval"); strings.Count(got, "\n") != 0 ||
		!strings.Contains(got, "every=4s nodes=4 max_per_second=1 not_ready_after=20s lost_after=1m10s") {
		t.Errorf("the log says of the interval %q; want one line with 4s and its silences", got)
	}

	// At twice the interval, the silences are twice as long: not ready after 20 s, not 10.
	h.clock.Add(15 * time.Second)
	h.srv.checkNodes(ctx)
	if got := state("n1"); got != api.NodeReady {
		t.Fatalf("15 s silent, told to report every 4 s: n1 is %s, want READY (not ready after 20 s)", got)
	}
	// A second agent may not take a node its agent was heard from 15 s ago.
	if code, _, e := h.beatAs("n1", api.Heartbeat{Instance: "other", PID: 2}); code != http.StatusConflict || !strings.Contains(e.Message, "wait 5s") {
		t.Fatalf("a second agent for n1, 15 s after the first was heard: %d %q; want 409 saying to wait 5s", code, e.Message)
	}
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		h.beat(n, 1)
	}

	// Two nodes removed: the interval is the base again, but n1 and n2 were told 4 s.
	for _, n := range []string{"n3", "n4"} {
		if code := h.do("DELETE", "/api/v1/nodes/"+n, nil, nil); code != http.StatusNoContent {
			t.Fatalf("removing %s: %d", n, code)
		}
	}
	h.srv.checkNodes(ctx)
	if out := h.scrape(); !strings.Contains(out, "\nrota_heartbeat_interval_seconds 2\n") {
		t.Errorf("/metrics does not show the 2 s interval:\n%s", grepLines(out, "rota_heartbeat_interval"))
	}
	if got := grepLines(logs.String(), "heartbeat interval"); !strings.Contains(got, "every=2s nodes=2") {
		t.Errorf("the log says of the interval %q; want a line with 2s, back at the base", got)
	}
	h.clock.Add(15 * time.Second)
	h.srv.checkNodes(ctx)
	if got := state("n2"); got != api.NodeReady {
		t.Fatalf("15 s silent after its answer named 4 s: n2 is %s, want READY", got)
	}
	// n1 hears of 2 s; n2 stays silent.
	if got := interval(h.beat("n1", 1)); got != 2*time.Second {
		t.Fatalf("two nodes again: the answer names %v, want 2s", got)
	}
	h.clock.Add(11 * time.Second)
	h.srv.checkNodes(ctx)
	if got := state("n1"); got != api.NodeNotReady {
		t.Errorf("11 s silent after its answer named 2 s: n1 is %s, want NOT_READY", got)
	}
	if got := state("n2"); got != api.NodeNotReady {
		t.Errorf("26 s silent after its answer named 4 s: n2 is %s, want NOT_READY", got)
	}

	// Lost comes as much later as not ready does: 1m + 10 s at 4 s.
	h.beat("n3", 1)
	h.beat("n4", 1)
	h.srv.checkNodes(ctx) // four nodes again
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		h.beat(n, 1)
	}
	h.clock.Add(65 * time.Second)
	h.srv.checkNodes(ctx)
	if got := state("n1"); got != api.NodeNotReady {
		t.Fatalf("65 s silent at 4 s: n1 is %s, want NOT_READY (lost after 70 s)", got)
	}
	h.clock.Add(6 * time.Second)
	h.srv.checkNodes(ctx)
	if got := state("n1"); got != api.NodeLost {
		t.Fatalf("71 s silent at 4 s: n1 is %s, want LOST", got)
	}

	// A restarted server names the interval of the nodes it loads from its first answer.
	for _, n := range []string{"n1", "n2", "n3", "n4"} {
		h.beat(n, 1)
	}
	h.srv.checkNodes(ctx)
	h.restart()
	if got := interval(h.beat("n1", 1)); got != 4*time.Second {
		t.Errorf("after a restart: the first answer names %v, want 4s", got)
	}
}

// TestHeartbeatsUnpaced: with no bound, every answer names the base interval however
// many nodes there are.
func TestHeartbeatsUnpaced(t *testing.T) {
	h := &harness{t: t, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir(),
		cfg: func(c *Config) { c.MaxHeartbeatsPerSecond = -1; c.HeartbeatInterval = time.Second }}
	h.open()
	for _, n := range []string{"n1", "n2", "n3", "n4", "n5"} {
		h.beat(n, 1)
	}
	h.srv.checkNodes(context.Background())
	if got := h.beat("n1", 1).HeartbeatSeconds; got != 1 {
		t.Errorf("five nodes with no bound: the answer names %vs, want 1s", got)
	}
}

// TestPaceLogsWholeSteps: as a cluster grows a node at a time, the interval moves by a
// tenth of a second at a time; the log says it only once it has moved a second, and when
// it is back at the base.
func TestPaceLogsWholeSteps(t *testing.T) {
	h := newHarness(t) // 2 s base, 1,000 heartbeats a second
	var logs syncBuffer
	h.srv.log = slog.New(slog.NewTextHandler(&logs, nil))
	h.srv.mu.Lock()
	defer h.srv.mu.Unlock()
	for _, step := range []struct {
		nodes int
		log   string // the interval the log says, or "" for no line
	}{
		{nodes: 1500}, {nodes: 2001}, {nodes: 2900}, {nodes: 3000, log: "3s"}, {nodes: 3500},
		{nodes: 10000, log: "10s"}, {nodes: 9050}, {nodes: 2500, log: "2.5s"}, {nodes: 1900, log: "2s"}, {nodes: 10},
	} {
		before := logs.String()
		h.srv.paceHeartbeats(step.nodes)
		line := strings.TrimPrefix(logs.String(), before)
		switch {
		case step.log == "" && line != "":
			t.Errorf("%d nodes (%v): the log says %q; want nothing, the interval moved less than a second", step.nodes, h.srv.beatEvery, line)
		case step.log != "" && !strings.Contains(line, "every="+step.log+" nodes="+strconv.Itoa(step.nodes)+" "):
			t.Errorf("%d nodes (%v): the log says %q; want the interval %s", step.nodes, h.srv.beatEvery, line, step.log)
		}
	}
}
