package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

func (h *harness) putConfig(yamlText string) (int, api.Error) {
	h.t.Helper()
	req, _ := http.NewRequest("PUT", h.http.URL+"/api/v1/config", bytes.NewBufferString(yamlText))
	req.Header.Set("Authorization", "Bearer "+h.token)
	req.Header.Set("Content-Type", "application/yaml")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	var e api.Error
	if resp.StatusCode != http.StatusOK {
		json.NewDecoder(resp.Body).Decode(&e)
	}
	return resp.StatusCode, e
}

func (h *harness) end(node string, id int64, attempt int, state api.JobState, code int) {
	h.t.Helper()
	h.beat(node, 8, api.TaskStatus{JobID: id, Attempt: attempt, State: state, ExitCode: &code})
}

func TestDependencies(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	a := h.submit(api.JobSpec{GPUs: 1, Command: []string{"a"}})
	anyEnd := h.submit(api.JobSpec{GPUs: 1, Command: []string{"b"}, After: []int64{a.ID}})
	onlyOK := h.submit(api.JobSpec{GPUs: 1, Command: []string{"c"}, AfterOK: []int64{a.ID}})
	if anyEnd.State != api.StateHeld || anyEnd.Reason != reasonDependency || onlyOK.State != api.StateHeld {
		t.Fatalf("dependent jobs start %s/%s (%s); want HELD (Dependency)", anyEnd.State, onlyOK.State, anyEnd.Reason)
	}
	h.cycle()
	h.end("n1", a.ID, 1, api.StateFailed, 1)
	h.cycle()
	if got := h.job(anyEnd.ID); got.State != api.StateAssigned {
		t.Errorf("--after job once its dependency ended: %s; want ASSIGNED", got.State)
	}
	if got := h.job(onlyOK.ID); got.State != api.StateFailed || got.Reason != reasonDependency || !strings.Contains(got.Message, "can never be met") {
		t.Errorf("--after-ok job whose dependency failed: %s (%s: %s); want FAILED (Dependency)", got.State, got.Reason, got.Message)
	}
	var e api.Error
	if code := h.do("POST", "/api/v1/jobs", api.JobSpec{Command: []string{"x"}, After: []int64{999}}, &e); code != 400 || e.Field != "after" {
		t.Errorf("dependency on an unknown job: %d field %q; want 400 after", code, e.Field)
	}
}

func TestHoldAndRelease(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	j := h.submit(api.JobSpec{GPUs: 1, Command: []string{"a"}, Hold: true})
	h.cycle()
	if got := h.job(j.ID); got.State != api.StateHeld || got.Reason != reasonUserHold {
		t.Fatalf("submitted with --hold: %s (%s); want HELD (UserHold)", got.State, got.Reason)
	}
	var out api.Job
	h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/release", j.ID), nil, &out)
	h.cycle()
	if got := h.job(j.ID); got.State != api.StateAssigned {
		t.Fatalf("released: %s; want ASSIGNED", got.State)
	}
	if code := h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/hold", j.ID), nil, nil); code != http.StatusConflict {
		t.Errorf("hold of a placed job: %d; want 409", code)
	}
	p := h.submit(api.JobSpec{GPUs: 1, Command: []string{"b"}})
	h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/hold", p.ID), nil, &out)
	h.cycle()
	if got := h.job(p.ID); got.State != api.StateHeld {
		t.Errorf("held pending job: %s; want HELD and not placed", got.State)
	}
}

func TestArrayLimit(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	var first api.Job
	if code := h.do("POST", "/api/v1/jobs", api.JobSpec{GPUs: 1, Command: []string{"sweep"}, Array: "0-5%2"}, &first); code != 201 {
		t.Fatalf("array submit: %d", code)
	}
	h.cycle()
	var list api.JobList
	h.do("GET", "/api/v1/jobs?state=all", nil, &list)
	if len(list.Jobs) != 6 {
		t.Fatalf("array 0-5 made %d jobs; want 6", len(list.Jobs))
	}
	placed, limited := 0, 0
	for i, j := range list.Jobs {
		if j.ArrayID != first.ID || j.ArrayIndex == nil || *j.ArrayIndex != i {
			t.Errorf("job %d: array %d index %v; want %d index %d", j.ID, j.ArrayID, j.ArrayIndex, first.ID, i)
		}
		switch {
		case j.State == api.StateAssigned:
			placed++
		case j.Reason == reasonArrayLimit:
			limited++
		}
	}
	if placed != 2 || limited != 4 {
		t.Errorf("with %%2: %d placed, %d held back by the limit; want 2 and 4", placed, limited)
	}
	for _, bad := range []string{"5-1", "x", "0-3%0", "0-20000000", "1:2"} {
		var e api.Error
		if code := h.do("POST", "/api/v1/jobs", api.JobSpec{Command: []string{"x"}, Array: bad}, &e); code != 400 || e.Field != "array" {
			t.Errorf("array %q: %d field %q; want 400 array", bad, code, e.Field)
		}
	}
}

func TestConfigAppliedWholeOrNotAtAll(t *testing.T) {
	h := newHarness(t)
	bad := `queues:
  - name: gold
    tier: 90
    default_time_limit_s: 3600
    max_time_limit_s: 7200
teams:
  - name: vision
    quotas: {"*": {guaranteed: 8, limit: 4}}
`
	code, e := h.putConfig(bad)
	if code != 400 || !strings.Contains(e.Message, "line 7") || !strings.Contains(e.Message, "limit 4 is below guaranteed 8") {
		t.Fatalf("bad config: %d %q; want 400 naming line 7 and the rule", code, e.Message)
	}
	var qs api.QueueList
	h.do("GET", "/api/v1/queues", nil, &qs)
	for _, q := range qs.Queues {
		if q.Name == "gold" {
			t.Fatalf("the valid queue of a refused config was applied")
		}
	}
	if code, e := h.putConfig("queues:\n  - name: gold\n    colour: red\n"); code != 400 || !strings.Contains(e.Message, "line 3") {
		t.Errorf("unknown field: %d %q; want 400 naming line 3", code, e.Message)
	}
	good := strings.Replace(bad, "limit: 4", "limit: 16", 1)
	if code, e := h.putConfig(good); code != 200 {
		t.Fatalf("good config: %d %s", code, e.Message)
	}
	var teams api.TeamList
	h.do("GET", "/api/v1/teams", nil, &teams)
	if len(teams.Teams) != 1 || teams.Teams[0].Quotas["*"].Limit != 16 || teams.Teams[0].Weight != 1 {
		t.Errorf("teams after apply: %+v", teams.Teams)
	}
	// The configuration survives a restart.
	h.restart()
	h.do("GET", "/api/v1/queues", nil, &qs)
	found := false
	for _, q := range qs.Queues {
		found = found || q.Name == "gold" && q.Tier == 90
	}
	if !found {
		t.Errorf("queue gold lost over a restart")
	}
}

func TestQueueAccessAndGrace(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	if code, e := h.putConfig("queues:\n  - {name: vip, tier: 50, default_time_limit_s: 60, max_time_limit_s: 120, grace_s: 30, teams: [ops]}\nteams:\n  - {name: ops, members: [olga]}\n"); code != 200 {
		t.Fatal(e.Message)
	}
	var e api.Error
	if code := h.do("POST", "/api/v1/jobs", api.JobSpec{Command: []string{"x"}, Queue: "vip", User: "mallory"}, &e); code != 400 || e.Field != "queue" {
		t.Errorf("outsider in a restricted queue: %d field %q; want 400 queue", code, e.Field)
	}
	j := h.submit(api.JobSpec{Command: []string{"x"}, Queue: "vip", User: "olga"})
	if j.Spec.Team != "ops" || j.Spec.Grace != 30 || j.Spec.TimeLimit != 60 {
		t.Errorf("member's job: team %s grace %d limit %d; want ops, 30, 60 from membership and queue", j.Spec.Team, j.Spec.Grace, j.Spec.TimeLimit)
	}
	if code := h.do("POST", "/api/v1/jobs", api.JobSpec{Command: []string{"x"}, Queue: "vip", User: "olga", Grace: 31}, &e); code != 400 || e.Field != "grace_s" {
		t.Errorf("grace above the queue's: %d field %q; want 400 grace_s", code, e.Field)
	}
	if code := h.do("POST", "/api/v1/jobs", api.JobSpec{Command: []string{"x"}, Team: "ghosts"}, &e); code != 400 || e.Field != "team" {
		t.Errorf("unknown team: %d field %q; want 400 team", code, e.Field)
	}
}

func TestDrainLetsRunningJobsFinish(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	run := h.submit(api.JobSpec{GPUs: 1, Command: []string{"a"}})
	h.cycle()
	var n api.Node
	h.do("POST", "/api/v1/nodes/n1/drain", nil, &n)
	wait := h.submit(api.JobSpec{GPUs: 1, Command: []string{"b"}})
	h.cycle()
	if got := h.job(wait.ID); got.State != api.StatePending {
		t.Fatalf("job submitted during a drain: %s; want PENDING", got.State)
	}
	if resp := h.beat("n1", 8); len(resp.Tasks) != 1 || resp.Tasks[0].Stop {
		t.Fatalf("drain touched the running job: %+v", resp.Tasks)
	}
	h.end("n1", run.ID, 1, api.StateSucceeded, 0)
	h.cycle()
	var nodes api.NodeList
	h.do("GET", "/api/v1/nodes", nil, &nodes)
	if nodes.Nodes[0].State != api.NodeDrained {
		t.Fatalf("node after its last job: %s; want DRAINED", nodes.Nodes[0].State)
	}
	h.do("POST", "/api/v1/nodes/n1/resume", nil, &n)
	h.beat("n1", 8)
	h.cycle()
	if got := h.job(wait.ID); got.State != api.StateAssigned {
		t.Errorf("after resume: %s; want ASSIGNED", got.State)
	}
}

func TestReservations(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	h.beat("n2", 8)
	h.putConfig("teams:\n  - {name: vision}\n")
	start := h.clock.Now().Add(time.Hour)
	var r api.Reservation
	if code := h.do("POST", "/api/v1/reservations", api.Reservation{Team: "vision", Nodes: []string{"n1"}, Start: start, End: start.Add(2 * time.Hour)}, &r); code != 201 {
		t.Fatalf("reserve: %d", code)
	}
	if len(r.Nodes) != 1 || r.ID != 1 || r.GPUs != 8 {
		t.Fatalf("reservation %+v; want node n1 and its 8 GPUs", r)
	}
	var e api.Error
	if code := h.do("POST", "/api/v1/reservations", api.Reservation{Team: "vision", Nodes: []string{"n2", "n1"}, Start: start, End: start.Add(time.Hour)}, &e); code != 409 || e.Field != "nodes" {
		t.Errorf("a node already reserved in an overlapping window: %d %+v; want 409 nodes", code, e)
	}
	if code := h.do("POST", "/api/v1/reservations", api.Reservation{Team: "vision", GPUs: 1, Start: start, End: start.Add(-time.Hour)}, &e); code != 400 || e.Field != "end" {
		t.Errorf("end before start: %d field %q", code, e.Field)
	}
	// Another team's job that would run into the window stays off the reserved node.
	long := h.submit(api.JobSpec{GPUs: 8, TimeLimit: 3 * 3600, Command: []string{"x"}})
	h.cycle()
	if got := h.job(long.ID); got.State != api.StateAssigned || got.Nodes[0] == r.Nodes[0] {
		t.Errorf("a job running into the window went to %v (reserved: %v)", got.Nodes, r.Nodes)
	}
	if code := h.do("DELETE", "/api/v1/reservations/1", nil, nil); code != http.StatusNoContent {
		t.Errorf("unreserve: %d", code)
	}
}

func TestWhy(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 4)
	h.submit(api.JobSpec{GPUs: 4, TimeLimit: 3600, Command: []string{"a"}})
	wait := h.submit(api.JobSpec{GPUs: 2, Command: []string{"b"}})
	h.cycle()
	var why api.Why
	h.do("GET", fmt.Sprintf("/api/v1/jobs/%d/why", wait.ID), nil, &why)
	if len(why.Reasons) < 2 || !strings.Contains(why.Reasons[0], "free") || why.EstimatedStart == nil {
		t.Fatalf("why: %+v; want a resources sentence, the priority and an estimated start", why)
	}
	if !strings.Contains(why.Reasons[1], "1 of the 1 jobs on n1 end within 1h0m0s") {
		t.Errorf("why does not say when the jobs on the best node end: %q", why.Reasons[1])
	}
	if want := h.clock.Now().Add(time.Hour); !why.EstimatedStart.Equal(want) {
		t.Errorf("estimated start %s; want %s, when the running job's time limit ends", why.EstimatedStart, want)
	}
}

func TestAdminPutAndDelete(t *testing.T) {
	h := newHarness(t)
	var team api.Team
	if code := h.do("PUT", "/api/v1/teams/vision", api.Team{Quotas: map[string]api.Quota{"*": {Guaranteed: 4}}}, &team); code != 200 || team.Name != "vision" || team.Quotas["*"].Limit != 4 {
		t.Fatalf("put team: %d %+v; want the name from the URL and limit defaulting to guaranteed", code, team)
	}
	var e api.Error
	if code := h.do("PUT", "/api/v1/teams/vision", api.Team{Name: "nlp"}, &e); code != 400 || e.Field != "name" {
		t.Errorf("mismatched name: %d field %q; want 400 name", code, e.Field)
	}
	if code := h.do("PUT", "/api/v1/queues/gold", api.Queue{Tier: 5000}, &e); code != 400 || e.Field != "tier" {
		t.Errorf("tier out of range: %d field %q; want 400 tier", code, e.Field)
	}
	var q api.Queue
	if code := h.do("PUT", "/api/v1/queues/gold", api.Queue{Tier: 90, DefaultTimeLimit: 60}, &q); code != 200 || q.Name != "gold" {
		t.Fatalf("put queue: %d %+v", code, q)
	}
	h.submit(api.JobSpec{Command: []string{"x"}, Queue: "gold", Team: "vision"})
	if code := h.do("DELETE", "/api/v1/queues/gold", nil, &e); code != 409 {
		t.Errorf("delete a queue with waiting jobs: %d; want 409", code)
	}
	if code := h.do("DELETE", "/api/v1/teams/vision", nil, &e); code != 409 {
		t.Errorf("delete a team with waiting jobs: %d; want 409", code)
	}
	if code := h.do("DELETE", "/api/v1/queues/batch", nil, &e); code != 409 || !strings.Contains(e.Message, "default queues") {
		t.Errorf("delete a default queue: %d %s; want 409 naming the default queues", code, e.Message)
	}
	if code := h.do("PUT", "/api/v1/queues/silver", api.Queue{Tier: 10}, nil); code != 200 {
		t.Fatalf("create queue silver: %d", code)
	}
	if code := h.do("DELETE", "/api/v1/queues/silver", nil, nil); code != 204 {
		t.Errorf("delete an unused queue: %d; want 204", code)
	}
	if code := h.do("DELETE", "/api/v1/queues/silver", nil, nil); code != 404 {
		t.Errorf("delete it again: %d; want 404", code)
	}
}
