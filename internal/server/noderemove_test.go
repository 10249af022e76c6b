package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/rotahq/rota/internal/api"
)

// Removing a node: refused while it runs or is assigned work; with force its ranks end as
// a lost node's do (requeued) in the same commit that forgets the node, its telemetry and
// its inventory, with an audit entry; a bad force value is a 400 naming it; the removal
// survives a restart; and the agent that reports again afterwards registers a new node
// that syncs (stops the removed work) before it takes any.
func TestRemoveNodeForce(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 2)
	running := h.startJob("n1", 2, api.JobSpec{Command: []string{"train"}, GPUs: 1})
	assigned := h.submit(api.JobSpec{Command: []string{"eval"}, GPUs: 1})
	h.cycle()
	if d := h.job(assigned.ID); d.State != api.StateAssigned {
		t.Fatalf("second job: %s; want ASSIGNED on n1", d.State)
	}
	now := h.clock.Now()
	h.beatFull("n1", 2, withReading(now, 90, 1000, []int{0, 1}, running.ID, 1),
		api.TaskStatus{JobID: running.ID, Attempt: 1, State: api.StateRunning, PID: 100, StartTime: &now})
	if code := h.do("GET", "/api/v1/nodes/n1/telemetry", nil, nil); code != http.StatusOK {
		t.Fatalf("telemetry before removal: %d", code)
	}

	// Refused without force: nothing changes.
	code, e, _ := h.rawCall("DELETE", "/api/v1/nodes/n1", "", "")
	if code != http.StatusConflict || e.Field != "name" || !strings.Contains(e.Message, "force") {
		t.Fatalf("remove busy node: %d %+v; want 409 naming the node and --force", code, e)
	}
	for _, bad := range []string{"yes", "1", "TRUE", "true%0a"} {
		code, e, _ = h.rawCall("DELETE", "/api/v1/nodes/n1?force="+bad, "", "")
		if code != http.StatusBadRequest || e.Field != "force" {
			t.Errorf("force=%s: %d %+v; want 400 naming force", bad, code, e)
		}
	}
	if h.node("n1").Name != "n1" || h.job(running.ID).State != api.StateRunning || h.job(assigned.ID).State != api.StateAssigned {
		t.Fatal("a refused removal changed the node or its jobs")
	}

	// Forced: both jobs requeued with a reason that says why, the node gone.
	if code, e, _ := h.rawCall("DELETE", "/api/v1/nodes/n1?force=true", "", ""); code != http.StatusNoContent {
		t.Fatalf("forced removal: %d %+v", code, e)
	}
	for _, id := range []int64{running.ID, assigned.ID} {
		d := h.job(id)
		a := d.AttemptList[0]
		if d.State != api.StatePending || a.Reason != api.ReasonNodeLost || !strings.Contains(a.Placements[0].Message, "removed by an administrator") {
			t.Errorf("job %d after forced removal: %s, attempt 1 %s %q / %q; want PENDING, node_lost, removed by an administrator",
				id, d.State, a.Reason, a.Message, a.Placements[0].Message)
		}
	}
	var list api.NodeList
	h.do("GET", "/api/v1/nodes", nil, &list)
	if len(list.Nodes) != 0 {
		t.Fatalf("nodes after removal: %+v", list.Nodes)
	}
	if code := h.do("GET", "/api/v1/nodes/n1/telemetry", nil, nil); code != http.StatusNotFound {
		t.Errorf("telemetry of a removed node: %d; want 404", code)
	}
	if code, _, _ := h.rawCall("DELETE", "/api/v1/nodes/n1?force=true", "", ""); code != http.StatusNotFound {
		t.Errorf("removing it again: %d; want 404", code)
	}
	evs := h.events(api.EventNode)
	if !slices.ContainsFunc(evs, func(ev api.Event) bool {
		return ev.Actor == "admin" && ev.Node == "n1" && strings.Contains(ev.Message, "removed node n1") &&
			strings.Contains(ev.Message, fmt.Sprintf("forced: ended its ranks of jobs %d, %d", running.ID, assigned.ID))
	}) {
		t.Errorf("no audit entry for the forced removal among %+v", evs)
	}

	// A restart keeps it removed; nothing is placed while no node exists.
	h.restart()
	nodes, err := h.st.LoadNodes(context.Background())
	if err != nil || len(nodes) != 0 {
		t.Fatalf("stored nodes after restart: %v %v", nodes, err)
	}
	h.cycle()

	// The old agent comes back, still running the removed attempt and echoing the epoch
	// it was last answered with: a new node, syncing, told to run nothing.
	hb := api.Heartbeat{Instance: "agent-n1", Synced: true, SyncEpoch: 1,
		Tasks: []api.TaskStatus{{JobID: running.ID, Attempt: 1, State: api.StateRunning, PID: 100, StartTime: &now}}}
	code, resp, e := h.beatAs("n1", hb)
	if code != http.StatusOK {
		t.Fatalf("heartbeat after removal: %d %+v", code, e)
	}
	n := h.node("n1")
	if !n.Syncing || len(resp.Tasks) != 0 || resp.SyncEpoch <= 1 {
		t.Fatalf("re-registered node: syncing %v, told %d tasks, epoch %d; want syncing, none, a new epoch", n.Syncing, len(resp.Tasks), resp.SyncEpoch)
	}
	if !slices.ContainsFunc(h.events(api.EventNode), func(ev api.Event) bool {
		return strings.Contains(ev.Message, "node n1 registered") && ev.Time.Equal(h.clock.Now())
	}) {
		t.Error("the returning agent did not register a new node")
	}
	if d := h.job(running.ID); d.State != api.StatePending || d.Attempts != 1 {
		t.Errorf("the removed attempt's report revived it: %s, %d attempts", d.State, d.Attempts)
	}
	h.cycle()
	if d := h.job(running.ID); d.State != api.StatePending {
		t.Errorf("a syncing node took work: job %d %s", running.ID, d.State)
	}
	// Once it reports the new epoch with nothing running, it takes work again.
	hb = api.Heartbeat{Instance: "agent-n1", Synced: true, SyncEpoch: resp.SyncEpoch}
	if code, _, e := h.beatAs("n1", hb); code != http.StatusOK {
		t.Fatalf("synced heartbeat: %d %+v", code, e)
	}
	if h.node("n1").Syncing {
		t.Fatal("node still syncing after reporting the current epoch")
	}
	h.cycle()
	if d := h.job(running.ID); d.State != api.StateAssigned || d.Attempts != 2 {
		t.Errorf("job %d after the node came back: %s, %d attempts; want ASSIGNED as attempt 2", running.ID, d.State, d.Attempts)
	}
}

// A node that runs nothing is removed without force; only an admin may remove one.
func TestRemoveIdleNode(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 1)
	viewer := h.addUser("vera", "operator")
	if code, _ := h.call(viewer, "DELETE", "/api/v1/nodes/n1?force=true", "", nil); code != http.StatusForbidden {
		t.Errorf("operator removing a node: %d; want 403", code)
	}
	if code, e, _ := h.rawCall("DELETE", "/api/v1/nodes/n1?force=false", "", ""); code != http.StatusNoContent {
		t.Fatalf("remove idle node: %d %+v", code, e)
	}
	var list api.NodeList
	h.do("GET", "/api/v1/nodes", nil, &list)
	if len(list.Nodes) != 0 {
		t.Fatalf("nodes after removal: %+v", list.Nodes)
	}
}
