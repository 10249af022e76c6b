package server

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// versionNode registers or refreshes a node of a pool with two H100s and the given
// driver and CUDA versions.
func (h *harness) versionNode(node, pool, driver, cuda string) {
	h.t.Helper()
	h.beatFull(node, 2, func(hb *api.Heartbeat) {
		hb.Inventory.Labels = map[string]string{"pool": pool}
		hb.Inventory.DriverVersion, hb.Inventory.CUDAVersion = driver, cuda
	})
}

// Pools' version ranges are checked when the configuration is applied, naming the pool
// and the field, and stored normalised.
func TestPoolVersionConfig(t *testing.T) {
	h := newHarness(t)
	for _, c := range []struct{ yaml, field, want string }{
		{"pools:\n  - name: train\n    driver: \"abc\"\n", "pools.driver", "pool train: \"abc\" is not a version range"},
		{"pools:\n  - name: train\n    cuda: \">=13,<12\"\n", "pools.cuda", "pool train: \">=13,<12\" matches no version"},
		{"pools:\n  - name: train\n    cuda: \"~12\"\n", "pools.cuda", "operators >=, >, <=, <, =, =="},
		{"pools:\n  - name: train\n    driver: >=550\n", "config", `quote version ranges that start with >, e.g. driver: ">=550"`},
	} {
		code, e := h.putConfig(c.yaml)
		if code != 400 || e.Field != c.field || !strings.Contains(e.Message, c.want) {
			t.Errorf("%q: %d %s: %s; want 400 %s saying %q", c.yaml, code, e.Field, e.Message, c.field, c.want)
		}
	}
	if code, e := h.putConfig("pools:\n  - name: train\n    driver: \" >= 550 , < 560\"\n    cuda: \"==12.4\"\n    drain_on_drift: true\n"); code != 200 {
		t.Fatalf("config: %d %s", code, e.Message)
	}
	p := h.srv.state.Pools()["train"]
	if p.Driver != ">=550,<560" || p.CUDA != "=12.4" || !p.DrainOnDrift {
		t.Errorf("stored pool %+v; want the ranges normalised and drain_on_drift", p)
	}
}

// A job's version ranges are checked at submit: a bad one is refused naming the field,
// and nothing is stored; a good one is stored normalised, and the job is placed only on
// a node whose versions satisfy it; one no node satisfies waits, and why names what the
// nodes report.
func TestJobVersionConstraints(t *testing.T) {
	h := newHarness(t)
	h.versionNode("old", "train", "535.104.05", "12.2")
	for _, c := range []struct {
		spec  api.JobSpec
		field string
		want  string
	}{
		{api.JobSpec{GPUs: 1, Command: []string{"x"}, CUDA: ">=13,<12"}, "cuda", "matches no version"},
		{api.JobSpec{GPUs: 1, Command: []string{"x"}, CUDA: "twelve"}, "cuda", "is not a version range"},
		{api.JobSpec{GPUs: 1, Command: []string{"x"}, Driver: ">=550;<560"}, "driver", "is not a version range"},
		{api.JobSpec{GPUs: 1, Command: []string{"x"}, Driver: ">=" + strings.Repeat("5", 200)}, "driver", "at most 128 are allowed"},
	} {
		code, e := h.submitErr(c.spec)
		if code != 400 || e.Field != c.field || !strings.Contains(e.Message, c.want) {
			t.Errorf("%+v: %d %s: %s; want 400 %s saying %q", c.spec, code, e.Field, e.Message, c.field, c.want)
		}
	}
	if n := len(h.listJobs()); n != 0 {
		t.Fatalf("%d jobs stored after refusals", n)
	}
	j := h.submit(api.JobSpec{GPUs: 1, Command: []string{"x"}, CUDA: " >= 12.4 ", Driver: "==550.54.15"})
	if j.Spec.CUDA != ">=12.4" || j.Spec.Driver != "=550.54.15" {
		t.Errorf("stored ranges %q, %q; want them normalised", j.Spec.CUDA, j.Spec.Driver)
	}
	h.cycle()
	got := h.job(j.ID)
	if got.State != api.StatePending || got.Reason != "NoNodeMatches" {
		t.Fatalf("job on a node with CUDA 12.2: %s %s", got.State, got.Reason)
	}
	why := h.why(j.ID)
	if len(why.Reasons) == 0 || why.Reasons[0] != "needs CUDA >=12.4; nodes report 12.2 (1 node)." {
		t.Errorf("why %q; want the CUDA mismatch named first", why.Reasons)
	}
	h.versionNode("new", "train", "550.54.15", "12.4")
	h.cycle()
	if got := h.job(j.ID); got.State != api.StateAssigned || got.Nodes[0] != "new" {
		t.Fatalf("job once a node has the versions: %s on %v; want ASSIGNED on new", got.State, got.Nodes)
	}
	h.restart()
	if got := h.job(j.ID); got.Spec.CUDA != ">=12.4" || got.Spec.Driver != "=550.54.15" {
		t.Errorf("after a restart: ranges %q, %q", got.Spec.CUDA, got.Spec.Driver)
	}
}

// A node outside its pool's wanted versions is flagged in the API and /metrics, with one
// event when it starts to drift however many heartbeats follow; with drain_on_drift it
// drains on its own, once, and returns to service when its versions are back in range.
func TestVersionDrift(t *testing.T) {
	h := newHarness(t)
	h.versionNode("a", "train", "535.54", "12.2")
	h.versionNode("b", "train", "550.54.15", "12.4")
	if n := h.node("a"); len(n.Drift) != 0 {
		t.Fatalf("drift %+v before the pool wants versions", n.Drift)
	}
	if code, e := h.putConfig("pools:\n  - name: train\n    driver: \">=550\"\n    cuda: \">=12.4\"\n"); code != 200 {
		t.Fatalf("config: %d %s", code, e.Message)
	}
	for range 3 {
		h.versionNode("a", "train", "535.54", "12.2")
		h.versionNode("b", "train", "550.54.15", "12.4")
	}
	a := h.node("a")
	want := []api.VersionDrift{{Component: "driver", Version: "535.54", Wanted: ">=550", Pool: "train"}, {Component: "cuda", Version: "12.2", Wanted: ">=12.4", Pool: "train"}}
	if len(a.Drift) != 2 || a.Drift[0] != want[0] || a.Drift[1] != want[1] || a.State != api.NodeReady {
		t.Fatalf("node a: %s, drift %+v; want READY drifting %+v (no drain without drain_on_drift)", a.State, a.Drift, want)
	}
	if b := h.node("b"); len(b.Drift) != 0 {
		t.Errorf("node b drifts %+v; its versions are in range", b.Drift)
	}
	drifts := func() []api.Event {
		var out []api.Event
		for _, e := range h.events(api.EventNode) {
			if strings.Contains(e.Message, "drift") || strings.Contains(e.Message, "back within") {
				out = append(out, e)
			}
		}
		return out
	}
	if evs := drifts(); len(evs) != 1 || evs[0].Message != "node a drifts: driver 535.54 outside wanted >=550 for pool train; CUDA 12.2 outside wanted >=12.4 for pool train" {
		t.Fatalf("drift events %+v; want one for node a", evs)
	}
	_, fams := h.scrapeMetrics(h.token)
	fams.check(t, []series{
		{"rota_node_version_drift", labels{"pool": "train", "node": "a", "component": "driver"}, 1},
		{"rota_node_version_drift", labels{"pool": "train", "node": "a", "component": "cuda"}, 1},
		{"rota_node_version_drift", labels{"pool": "train", "node": "b", "component": "driver"}, 0},
		{"rota_node_version_drift", labels{"pool": "train", "node": "b", "component": "cuda"}, 0},
	})

	// With drain_on_drift, a node that starts to drift drains: one event, however many
	// heartbeats; a job runs elsewhere.
	if code, e := h.putConfig("pools:\n  - name: train\n    driver: \">=550\"\n    drain_on_drift: true\n"); code != 200 {
		t.Fatalf("config: %d %s", code, e.Message)
	}
	h.versionNode("b", "train", "535.54", "12.4") // b is downgraded
	for range 3 {
		h.versionNode("b", "train", "535.54", "12.4")
	}
	b := h.node("b")
	if b.State != api.NodeDraining || !b.DriftDrain || len(b.Drift) != 1 {
		t.Fatalf("node b: %s, drift drain %v, drift %+v; want DRAINING on its own", b.State, b.DriftDrain, b.Drift)
	}
	drains := h.events(api.EventDrain)
	if len(drains) != 1 || drains[0].Actor != "system" || drains[0].Node != "b" ||
		!strings.Contains(drains[0].Message, "drain_on_drift): driver 535.54 outside wanted >=550 for pool train") {
		t.Fatalf("drain events %+v; want one by the system for b naming the drift", drains)
	}
	// A job only b could run waits, and why says b drained for drift.
	waiting := h.submit(api.JobSpec{GPUs: 2, Command: []string{"x"}, CUDA: "=12.4"})
	h.cycle()
	if why := h.why(waiting.ID); !slices.ContainsFunc(why.Reasons, func(r string) bool {
		return strings.HasPrefix(r, "Node b takes no new work: it drained on its own because its versions drift (driver 535.54 outside wanted >=550")
	}) {
		t.Errorf("why %q; want node b's drift drain named", why.Reasons)
	}
	// Node a drifted before the policy and is not drained by it: only a node that starts
	// to drift is.
	if a := h.node("a"); a.State != api.NodeReady {
		t.Errorf("node a %s; it drifted before drain_on_drift", a.State)
	}
	_, fams = h.scrapeMetrics(h.token)
	fams.check(t, []series{{"rota_node_version_drift", labels{"pool": "train", "node": "b", "component": "driver"}, 1}})
	if _, ok := fams.value("rota_node_version_drift", labels{"node": "b", "component": "cuda"}); ok {
		t.Errorf("a cuda drift series for b; the pool wants no CUDA range now")
	}

	// The cycle finds b empty: DRAINED. That survives a restart; back in range, b returns
	// to service on its own, once, and the waiting job starts there.
	h.restart()
	if b := h.node("b"); !b.DriftDrain || b.State != api.NodeDrained {
		t.Fatalf("after a restart: %s, drift drain %v", b.State, b.DriftDrain)
	}
	for range 2 {
		h.versionNode("b", "train", "550.54.15", "12.4")
	}
	b = h.node("b")
	if b.State != api.NodeReady || b.DriftDrain || len(b.Drift) != 0 {
		t.Fatalf("node b back in range: %s, drift drain %v, drift %+v; want READY", b.State, b.DriftDrain, b.Drift)
	}
	if drains := h.events(api.EventDrain); len(drains) != 2 || !strings.Contains(drains[1].Message, "returned to service on its own") {
		t.Fatalf("drain events %+v; want the return to service", drains)
	}
	h.cycle()
	if got := h.job(waiting.ID); got.State != api.StateAssigned || got.Nodes[0] != "b" {
		t.Errorf("the waiting job: %s on %v; want ASSIGNED on b", got.State, got.Nodes)
	}

	// An operator's drain is the operator's: b drifts and drains again, the operator
	// drains it for maintenance, and back in range it stays drained.
	h.versionNode("b", "train", "535.54", "12.4")
	var n api.Node
	if code := h.do("POST", "/api/v1/nodes/b/drain", api.DrainRequest{Reason: "reimage"}, &n); code != 200 {
		t.Fatalf("drain: %d", code)
	}
	h.versionNode("b", "train", "550.54.15", "12.4")
	if b := h.node("b"); b.State != api.NodeDraining || b.Maintenance == nil {
		t.Errorf("node b drained by an operator, back in range: %s; want it left DRAINING", b.State)
	}
	// Resumed by the operator while it drifts, it is not drained again until it has been
	// back in range.
	if code := h.do("POST", "/api/v1/nodes/b/resume", nil, &n); code != 200 {
		t.Fatalf("resume: %d", code)
	}
	h.versionNode("b", "train", "535.54", "12.4")
	if code := h.do("POST", "/api/v1/nodes/b/resume", nil, &n); code != 200 {
		t.Fatalf("resume: %d", code)
	}
	for range 2 {
		h.versionNode("b", "train", "535.54", "12.4")
	}
	if b := h.node("b"); b.State != api.NodeReady || b.DriftDrain {
		t.Errorf("node b resumed while drifting: %s, drift drain %v; want READY", b.State, b.DriftDrain)
	}
}

// A node drained for drift that is lost and comes back still drifting is drained again:
// coming back makes a node READY, and the drift drain must outlive that.
func TestVersionDriftDrainOutlivesLoss(t *testing.T) {
	h := newHarness(t)
	if code, e := h.putConfig("pools:\n  - name: train\n    cuda: \">=12.4\"\n    drain_on_drift: true\n"); code != 200 {
		t.Fatalf("config: %d %s", code, e.Message)
	}
	h.versionNode("a", "train", "535.54", "12.2")
	if a := h.node("a"); a.State != api.NodeDraining || !a.DriftDrain {
		t.Fatalf("node a registered drifting: %s, drift drain %v; want DRAINING on its own", a.State, a.DriftDrain)
	}
	h.clock.Add(2 * time.Minute) // past the harness's LostAfter
	h.srv.checkNodes(context.Background())
	if a := h.node("a"); a.State != api.NodeLost {
		t.Fatalf("node a %s; want LOST", a.State)
	}
	h.versionNode("a", "train", "535.54", "12.2")
	if a := h.node("a"); a.State != api.NodeDraining || !a.DriftDrain {
		t.Errorf("node a back, still drifting: %s, drift drain %v; want DRAINING on its own", a.State, a.DriftDrain)
	}
	if drains := h.events(api.EventDrain); len(drains) != 2 {
		t.Errorf("drain events %+v; want one at registration and one on coming back", drains)
	}
}
