package server

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/notify"
	"github.com/rotahq/rota/internal/store"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// requestsSetup gives a cluster of two 8-GPU H100 nodes and one 4-GPU A100 node, team ml
// (H100: 4 guaranteed, limit 8) with member mia, operator olga and viewer vic.
func requestsSetup(t *testing.T) (h *harness, mia, olga, vic string) {
	h = newHarness(t)
	h.beat("n1", 8)
	h.beat("n2", 8)
	inv := api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake"}
	for i := range 4 {
		inv.GPUs = append(inv.GPUs, api.GPU{Index: i, UUID: fmt.Sprintf("GPU-a-%d", i), Model: "A100", MemoryMB: 40960, Healthy: true})
	}
	h.heartbeat("a1", inv, nil)
	if code := h.do("PUT", "/api/v1/teams/ml", api.Team{Quotas: map[string]api.Quota{"H100": {Guaranteed: 4, Limit: 8}}}, nil); code != http.StatusOK {
		t.Fatalf("team ml: %d", code)
	}
	return h, h.addUser("mia", "member", "ml"), h.addUser("olga", "operator"), h.addUser("vic", "viewer")
}

func (h *harness) fileRequest(token string, req api.Request) api.Request {
	h.t.Helper()
	var out api.Request
	var e api.Error
	if code := h.doAs(token, "POST", "/api/v1/requests", req, &out); code != http.StatusCreated {
		h.doAs(token, "POST", "/api/v1/requests", req, &e)
		h.t.Fatalf("file %+v: %d %s", req, code, e.Message)
	}
	return out
}

func (h *harness) request(id int64) api.Request {
	h.t.Helper()
	var out api.Request
	if code := h.do("GET", fmt.Sprintf("/api/v1/requests/%d", id), nil, &out); code != http.StatusOK {
		h.t.Fatalf("get request %d: %d", id, code)
	}
	return out
}

func (h *harness) h100Limit(team string) (api.Quota, bool) {
	h.srv.mu.Lock()
	defer h.srv.mu.Unlock()
	tm, _ := h.srv.state.Team(team)
	q, ok := tm.Quotas["H100"]
	return q, ok
}

// A quota raise: filed by a member, seen by its asker and the operators only, approved by
// an operator, which raises the limit at once; the decision survives a restart, a second
// decision is refused, and at the end the limit goes back by itself.
func TestRequestQuotaFlow(t *testing.T) {
	h, mia, olga, vic := requestsSetup(t)
	t0 := h.clock.Now()
	req := h.fileRequest(mia, api.Request{Kind: api.RequestQuota, Team: "ml", GPUModel: "H100", Limit: 12, For: 2 * 86400, Reason: "paper deadline"})
	if req.State != api.RequestPending || req.User != "mia" || !req.Expires.Equal(t0.Add(72*time.Hour)) || req.ID != 1 {
		t.Fatalf("filed: %+v; want pending, by mia, expiring in 72h", req)
	}

	var list api.RequestList
	if code := h.doAs(olga, "GET", "/api/v1/requests?state=pending", nil, &list); code != http.StatusOK || len(list.Requests) != 1 {
		t.Fatalf("operator's list: %d %+v; want the one request", code, list)
	}
	other := h.addUser("otto", "member", "ml")
	if code := h.doAs(other, "GET", "/api/v1/requests", nil, &list); code != http.StatusOK || len(list.Requests) != 0 {
		t.Errorf("another member's list: %d %+v; want none (members see their own)", code, list)
	}
	if code, e := h.call(other, "GET", "/api/v1/requests/1", "", nil); code != http.StatusForbidden || e.Rule != ruleOwnRequests {
		t.Errorf("another member reads request 1: %d %+v; want 403 own-requests", code, e)
	}
	if code, _ := h.call(vic, "GET", "/api/v1/requests", "", nil); code != http.StatusForbidden {
		t.Errorf("viewer lists requests: %d; want 403", code)
	}
	if code, _ := h.call(mia, "POST", "/api/v1/requests/1/approve", "", nil); code != http.StatusForbidden {
		t.Errorf("member approves: %d; want 403", code)
	}

	var got api.Request
	if code := h.doAs(olga, "POST", "/api/v1/requests/1/approve", api.Decision{Note: "ok for the deadline"}, &got); code != http.StatusOK {
		t.Fatalf("approve: %d", code)
	}
	if got.State != api.RequestApproved || got.DecidedBy != "olga" || got.End == nil || !got.End.Equal(t0.Add(48*time.Hour)) ||
		got.Previous == nil || got.Previous.Limit != 8 {
		t.Fatalf("approved: %+v; want approved by olga, ending in 48h, previous limit 8", got)
	}
	if q, _ := h.h100Limit("ml"); q.Limit != 12 || q.Guaranteed != 4 {
		t.Fatalf("quota after approval: %+v; want guaranteed 4, limit 12", q)
	}

	h.restart()
	if r := h.request(1); r.State != api.RequestApproved || r.DecidedBy != "olga" {
		t.Fatalf("after a restart: %+v", r)
	}
	if code, e := h.call(h.token, "POST", "/api/v1/requests/1/deny", "application/json", []byte(`{"note":"changed my mind"}`)); code != http.StatusConflict ||
		!strings.Contains(e.Message, "already approved by olga") {
		t.Errorf("deny after approval: %d %q; want 409 naming the decision", code, e.Message)
	}

	h.clock.Add(47 * time.Hour)
	h.cycle()
	if q, _ := h.h100Limit("ml"); q.Limit != 12 {
		t.Fatalf("before the end: limit %d; want 12", q.Limit)
	}
	h.restart()
	h.clock.Add(time.Hour)
	h.cycle()
	if r := h.request(1); r.State != api.RequestEnded || !strings.Contains(r.Message, "back to 8") {
		t.Errorf("at the end: %s %q; want ended, limit back to 8", r.State, r.Message)
	}
	if q, _ := h.h100Limit("ml"); q.Limit != 8 || q.Guaranteed != 4 {
		t.Errorf("quota after the end: %+v; want guaranteed 4, limit 8", q)
	}

	var events api.EventList
	h.do("GET", "/api/v1/audit?kind=request", nil, &events)
	if n := len(events.Events); n != 3 {
		t.Errorf("request events: %d; want filed, approved, ended", n)
	}
	h.do("GET", "/api/v1/audit?kind=quota", nil, &events)
	if n := len(events.Events); n != 2 {
		t.Errorf("quota events: %d; want the raise and its end", n)
	}
}

// A raise whose quota an admin changed meanwhile is not undone over the admin's change.
func TestRequestQuotaEndKeepsALaterChange(t *testing.T) {
	h, mia, olga, _ := requestsSetup(t)
	h.fileRequest(mia, api.Request{Kind: api.RequestQuota, Team: "ml", GPUModel: "H100", Limit: 12, For: 3600, Reason: "sweep"})
	if code := h.doAs(olga, "POST", "/api/v1/requests/1/approve", nil, nil); code != http.StatusOK {
		t.Fatalf("approve: %d", code)
	}
	if code := h.do("PUT", "/api/v1/teams/ml", api.Team{Members: []string{"mia"}, Quotas: map[string]api.Quota{"H100": {Guaranteed: 6, Limit: 14}}}, nil); code != http.StatusOK {
		t.Fatalf("admin's change: %d", code)
	}
	h.clock.Add(time.Hour)
	h.cycle()
	if q, _ := h.h100Limit("ml"); q.Limit != 14 || q.Guaranteed != 6 {
		t.Errorf("quota: %+v; want the admin's 6/14 kept", q)
	}
	if r := h.request(1); r.State != api.RequestEnded || !strings.Contains(r.Message, "changed since") {
		t.Errorf("request: %s %q", r.State, r.Message)
	}
}

// Denying needs a note; a denied request cannot be approved after; nobody, not even an
// admin, decides their own request.
func TestRequestDenyAndSelfDecision(t *testing.T) {
	h, mia, olga, _ := requestsSetup(t)
	h.fileRequest(mia, api.Request{Kind: api.RequestQuota, Team: "ml", GPUModel: "H100", Limit: 10, Reason: "more"})
	if code, e := h.call(olga, "POST", "/api/v1/requests/1/deny", "application/json", []byte(`{}`)); code != http.StatusBadRequest || e.Field != "note" {
		t.Errorf("deny without a note: %d %+v; want 400 note", code, e)
	}
	var got api.Request
	if code := h.doAs(olga, "POST", "/api/v1/requests/1/deny", api.Decision{Note: "the cluster is full this week"}, &got); code != http.StatusOK ||
		got.State != api.RequestDenied || got.Note != "the cluster is full this week" {
		t.Fatalf("deny: %d %+v", code, got)
	}
	if q, _ := h.h100Limit("ml"); q.Limit != 8 {
		t.Errorf("quota after a denial: %d; want 8", q.Limit)
	}
	if code, e := h.call(h.token, "POST", "/api/v1/requests/1/approve", "", nil); code != http.StatusConflict || !strings.Contains(e.Message, "already denied") {
		t.Errorf("approve after deny: %d %q; want 409", code, e.Message)
	}

	own := h.fileRequest(h.token, api.Request{Kind: api.RequestQuota, Team: "ml", GPUModel: "H100", Limit: 16, Reason: "admin's own"})
	if code, e := h.call(h.token, "POST", fmt.Sprintf("/api/v1/requests/%d/approve", own.ID), "", nil); code != http.StatusForbidden ||
		!strings.Contains(e.Message, "your own") {
		t.Errorf("admin approves own request: %d %q; want 403", code, e.Message)
	}
	olgas := h.fileRequest(olga, api.Request{Kind: api.RequestQuota, Team: "ml", GPUModel: "H100", Limit: 16, Reason: "operator's own"})
	if code, _ := h.call(olga, "POST", fmt.Sprintf("/api/v1/requests/%d/deny", olgas.ID), "application/json", []byte(`{"note":"x"}`)); code != http.StatusForbidden {
		t.Errorf("operator denies own request: %d; want 403", code)
	}
	if code := h.doAs(olga, "POST", fmt.Sprintf("/api/v1/requests/%d/approve", own.ID), nil, nil); code != http.StatusOK {
		t.Errorf("operator approves the admin's request: %d; want 200", code)
	}
}

// A request nobody decides expires, across a restart, and cannot be decided after.
func TestRequestExpiresUndecided(t *testing.T) {
	h, mia, olga, _ := requestsSetup(t)
	h.fileRequest(mia, api.Request{Kind: api.RequestQuota, Team: "ml", GPUModel: "H100", Limit: 10, Reason: "more"})
	h.restart()
	h.clock.Add(72 * time.Hour)
	if code, e := h.call(olga, "POST", "/api/v1/requests/1/approve", "", nil); code != http.StatusConflict || !strings.Contains(e.Message, "expired") {
		t.Errorf("approve at expiry: %d %q; want 409 expired", code, e.Message)
	}
	h.cycle()
	if r := h.request(1); r.State != api.RequestExpired {
		t.Errorf("after a cycle: %s; want expired", r.State)
	}
	if q, _ := h.h100Limit("ml"); q.Limit != 8 {
		t.Errorf("quota: %d; want 8", q.Limit)
	}
}

// A queue grant lets its asker submit to a restricted queue until it ends.
func TestRequestQueueGrant(t *testing.T) {
	h, mia, olga, _ := requestsSetup(t)
	q, _ := h.srv.state.Queue("urgent")
	q.Teams = []string{"ops"}
	if code := h.do("PUT", "/api/v1/queues/urgent", q, nil); code != http.StatusOK {
		t.Fatalf("restrict urgent: %d", code)
	}
	spec := api.JobSpec{Queue: "urgent", GPUs: 1, Command: []string{"fix"}}
	if code, e := h.call(mia, "POST", "/api/v1/jobs", "application/json", mustJSON(t, spec)); code != http.StatusBadRequest || e.Field != "queue" {
		t.Fatalf("submit to urgent before: %d %+v; want 400 queue", code, e)
	}
	if code, e := h.call(mia, "POST", "/api/v1/requests", "application/json", mustJSON(t, api.Request{Kind: api.RequestQueue, Queue: "train", Reason: "x"})); code != http.StatusBadRequest || e.Field != "queue" {
		t.Errorf("ask for an open queue: %d %+v; want 400 queue", code, e)
	}
	h.fileRequest(mia, api.Request{Kind: api.RequestQueue, Queue: "urgent", For: 86400, Reason: "production model broken"})
	if code := h.doAs(olga, "POST", "/api/v1/requests/1/approve", nil, nil); code != http.StatusOK {
		t.Fatalf("approve: %d", code)
	}
	if code, e := h.call(mia, "POST", "/api/v1/jobs", "application/json", mustJSON(t, spec)); code != http.StatusCreated {
		t.Fatalf("submit to urgent with the grant: %d %+v", code, e)
	}
	h.restart()
	h.clock.Add(24 * time.Hour)
	h.cycle()
	if code, _ := h.call(mia, "POST", "/api/v1/jobs", "application/json", mustJSON(t, spec)); code != http.StatusBadRequest {
		t.Errorf("submit to urgent after the grant ended: %d; want 400", code)
	}
}

// An approved request for a number of GPUs becomes a reservation by GPU count, which the
// scheduler enforces, and which ends by itself.
func TestRequestReservation(t *testing.T) {
	h, mia, olga, _ := requestsSetup(t)
	start, end := h.clock.Now().Add(time.Hour), h.clock.Now().Add(5*time.Hour)
	req := h.fileRequest(mia, api.Request{Kind: api.RequestReservation, GPUs: 10, GPUModel: "H100", Start: &start, End: &end, Reason: "eval run"})
	if req.Team != "ml" || !req.Expires.Equal(start) {
		t.Errorf("filed: team %s expires %v; want ml, expiring at the start", req.Team, req.Expires)
	}
	// Each fits alone; after the first, only one of them.
	h.fileRequest(mia, api.Request{Kind: api.RequestReservation, GPUs: 4, GPUModel: "H100", Start: &start, End: &end, Reason: "more"})
	h.fileRequest(mia, api.Request{Kind: api.RequestReservation, GPUs: 4, GPUModel: "H100", Start: &start, End: &end, Reason: "even more"})
	var got api.Request
	if code := h.doAs(olga, "POST", "/api/v1/requests/1/approve", nil, &got); code != http.StatusOK {
		t.Fatalf("approve: %d", code)
	}
	var list api.ReservationList
	h.do("GET", "/api/v1/reservations", nil, &list)
	if len(list.Reservations) != 1 || got.Reservation != list.Reservations[0].ID {
		t.Fatalf("reservations: %+v; request %+v", list, got)
	}
	r := list.Reservations[0]
	if r.Team != "ml" || r.GPUs != 10 || r.Model != "H100" || len(r.Nodes) != 0 || r.Name != "request-1" || !r.Start.Equal(start) || !r.End.Equal(end) {
		t.Errorf("reservation: %+v; want 10 H100 GPUs by count for ml in the window", r)
	}
	if !strings.Contains(got.Message, "holds 10 H100 GPUs for team ml") {
		t.Errorf("message %q", got.Message)
	}
	if code := h.doAs(olga, "POST", "/api/v1/requests/2/approve", nil, &got); code != http.StatusOK {
		t.Fatalf("approve the second: %d", code)
	}
	// 10 and 4 of the 16 H100s are held in the window: 4 more are not there.
	if code, e := h.call(olga, "POST", "/api/v1/requests/3/approve", "", nil); code != http.StatusConflict || e.Field != "gpus" || !strings.Contains(e.Message, "with its 4 that makes 18") {
		t.Errorf("approve beyond what is free: %d %+v; want 409 gpus with the numbers", code, e)
	}
	if r := h.request(3); r.State != api.RequestPending {
		t.Errorf("a refused approval left the request %s; want pending", r.State)
	}
	// Filed now, the same request is refused at once, and not stored.
	if code, e := h.call(mia, "POST", "/api/v1/requests", "application/json", mustJSON(t,
		api.Request{Kind: api.RequestReservation, GPUs: 4, GPUModel: "H100", Start: &start, End: &end, Reason: "late"})); code != http.StatusConflict || e.Field != "gpus" {
		t.Errorf("filing beyond what the reservations leave: %d %+v; want 409 gpus", code, e)
	}
	var reqs api.RequestList
	if h.do("GET", "/api/v1/requests", nil, &reqs); len(reqs.Requests) != 3 {
		t.Errorf("%d requests stored; want the 3 filed before", len(reqs.Requests))
	}

	// Before the window, another team's job that would run into it may take only what
	// the window leaves: 2 H100s.
	long := h.submit(api.JobSpec{Team: "default", GPUs: 4, GPUModel: "H100", TimeLimit: 2 * 3600, Command: []string{"x"}})
	short := h.submit(api.JobSpec{Team: "default", GPUs: 8, GPUModel: "H100", TimeLimit: 1800, Command: []string{"x"}})
	h.cycle()
	if got := h.job(long.ID); got.State != api.StatePending {
		t.Errorf("a job running into the window: %s; want PENDING", got.State)
	}
	if got := h.job(short.ID); got.State != api.StateAssigned {
		t.Errorf("a job ending before the window: %s; want ASSIGNED", got.State)
	}

	h.clock.Add(5 * time.Hour)
	h.cycle()
	if r := h.request(1); r.State != api.RequestEnded || r.Message != "reservation 1 ended" {
		t.Errorf("after the window: %s %q; want ended", r.State, r.Message)
	}
	if rs := h.reservations(); len(rs) != 0 {
		t.Errorf("after the window: %+v still listed", rs)
	}
}

// Bad requests are refused naming the field, and nothing is stored.
func TestRequestValidation(t *testing.T) {
	h, mia, _, vic := requestsSetup(t)
	now := h.clock.Now()
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	for _, c := range []struct {
		name  string
		req   api.Request
		field string
	}{
		{"no reason", api.Request{Kind: api.RequestQuota, Team: "ml", GPUModel: "H100", Limit: 10}, "reason"},
		{"unknown kind", api.Request{Kind: "gpus", Reason: "x"}, "kind"},
		{"quota above the cluster", api.Request{Kind: api.RequestQuota, Team: "ml", GPUModel: "H100", Limit: 17, Reason: "x"}, "limit"},
		{"quota of a model not here", api.Request{Kind: api.RequestQuota, Team: "ml", GPUModel: "B200", Limit: 1, Reason: "x"}, "limit"},
		{"quota not a raise", api.Request{Kind: api.RequestQuota, Team: "ml", GPUModel: "H100", Limit: 8, Reason: "x"}, "limit"},
		{"quota without a model", api.Request{Kind: api.RequestQuota, Team: "ml", Limit: 10, Reason: "x"}, "gpu_model"},
		{"unknown team", api.Request{Kind: api.RequestQuota, Team: "nope", GPUModel: "H100", Limit: 10, Reason: "x"}, "team"},
		{"end before start", api.Request{Kind: api.RequestReservation, GPUs: 4, Start: at(2 * time.Hour), End: at(time.Hour), Reason: "x"}, "end"},
		{"past start", api.Request{Kind: api.RequestReservation, GPUs: 4, Start: at(-time.Hour), End: at(time.Hour), Reason: "x"}, "start"},
		{"no end", api.Request{Kind: api.RequestReservation, GPUs: 4, Start: at(time.Hour), Reason: "x"}, "end"},
		{"more GPUs than the model has", api.Request{Kind: api.RequestReservation, GPUs: 5, GPUModel: "A100", Start: at(time.Hour), End: at(2 * time.Hour), Reason: "x"}, "gpus"},
		{"no GPUs", api.Request{Kind: api.RequestReservation, GPUs: 0, Start: at(time.Hour), End: at(2 * time.Hour), Reason: "x"}, "gpus"},
		{"reservation of an unknown model", api.Request{Kind: api.RequestReservation, GPUs: 1, GPUModel: "B200", Start: at(time.Hour), End: at(2 * time.Hour), Reason: "x"}, "model"},
		{"reservation in an unknown pool", api.Request{Kind: api.RequestReservation, GPUs: 1, Pool: "infer", Start: at(time.Hour), End: at(2 * time.Hour), Reason: "x"}, "pool"},
		{"grant too long", api.Request{Kind: api.RequestQueue, Queue: "urgent", For: 400 * 86400, Reason: "x"}, "for_s"},
		{"unknown queue", api.Request{Kind: api.RequestQueue, Queue: "nope", Reason: "x"}, "queue"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, e := h.call(mia, "POST", "/api/v1/requests", "application/json", mustJSON(t, c.req))
			if code != http.StatusBadRequest || e.Field != c.field || e.Message == "" {
				t.Errorf("%d %+v; want 400 naming %s", code, e, c.field)
			}
		})
	}
	if code := h.do("PUT", "/api/v1/teams/ops", api.Team{}, nil); code != http.StatusOK {
		t.Fatalf("team ops: %d", code)
	}
	if code, e := h.call(mia, "POST", "/api/v1/requests", "application/json",
		mustJSON(t, api.Request{Kind: api.RequestQuota, Team: "ops", GPUModel: "H100", Limit: 10, Reason: "x"})); code != http.StatusForbidden || e.Rule != ruleOwnRequests {
		t.Errorf("a member asks for another team: %d %+v; want 403 own-requests", code, e)
	}
	if code, _ := h.call(vic, "POST", "/api/v1/requests", "application/json", mustJSON(t, api.Request{Kind: api.RequestQueue, Queue: "urgent", Reason: "x"})); code != http.StatusForbidden {
		t.Errorf("a viewer files: %d; want 403", code)
	}
	var list api.RequestList
	h.do("GET", "/api/v1/requests", nil, &list)
	if len(list.Requests) != 0 {
		t.Errorf("stored after refusals: %+v", list.Requests)
	}
	if code, _ := h.call(h.token, "GET", "/api/v1/requests?state=bogus", "", nil); code != http.StatusBadRequest {
		t.Errorf("bad state filter: %d; want 400", code)
	}
	if code, _ := h.call(h.token, "POST", "/api/v1/requests/99/approve", "", nil); code != http.StatusNotFound {
		t.Errorf("approve a request that does not exist: %d; want 404", code)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Webhooks that name the request event hear of a request filed (the deciders' hooks) and
// decided (the asker's); hooks that do not name it hear nothing.
func TestRequestWebhooks(t *testing.T) {
	h, mia, olga, _ := requestsSetup(t)
	h.useNotifier(notify.Options{Clock: instantRetries{}})
	asker, decider, other := newReceiver(t, nil), newReceiver(t, nil), newReceiver(t, nil)
	var e api.Error
	if code := h.doAs(mia, "PUT", "/api/v1/users/mia/notify", []api.Notify{{URL: asker.URL, Events: []string{api.NotifyRequest}}, {URL: other.URL}}, &e); code != http.StatusOK {
		t.Fatalf("mia's webhooks: %d %s", code, e.Message)
	}
	if code := h.doAs(olga, "PUT", "/api/v1/users/olga/notify", []api.Notify{{URL: decider.URL, Events: []string{api.NotifyRequest}}}, &e); code != http.StatusOK {
		t.Fatalf("olga's webhooks: %d %s", code, e.Message)
	}
	h.fileRequest(mia, api.Request{Kind: api.RequestQuota, Team: "ml", GPUModel: "H100", Limit: 12, Reason: "deadline"})
	got := decider.wait(t, 1)
	if n := got[0].n; n.Event != api.NotifyRequest || n.Request == nil || n.Request.ID != 1 || n.Request.State != api.RequestPending {
		t.Errorf("the decider heard %s", got[0].raw)
	}
	if code := h.doAs(olga, "POST", "/api/v1/requests/1/approve", nil, nil); code != http.StatusOK {
		t.Fatalf("approve: %d", code)
	}
	got = asker.wait(t, 2)
	states := []api.RequestState{got[0].n.Request.State, got[1].n.Request.State}
	slices.Sort(states)
	if states[0] != api.RequestApproved || states[1] != api.RequestPending {
		t.Errorf("the asker heard %s", events(got))
	}
	decider.quiet(t, 1)
	other.quiet(t, 0)
}

// One user may have at most maxPending requests waiting; decided ones do not count.
func TestRequestPendingCap(t *testing.T) {
	h, mia, olga, _ := requestsSetup(t)
	ask := api.Request{Kind: api.RequestQuota, Team: "ml", GPUModel: "H100", Limit: 10, Reason: "more"}
	for range maxPending {
		h.fileRequest(mia, ask)
	}
	if code, e := h.call(mia, "POST", "/api/v1/requests", "application/json", mustJSON(t, ask)); code != http.StatusConflict || !strings.Contains(e.Message, "waiting") {
		t.Fatalf("one request too many: %d %+v; want 409", code, e)
	}
	if code := h.doAs(olga, "POST", "/api/v1/requests/1/deny", api.Decision{Note: "one at a time"}, nil); code != http.StatusOK {
		t.Fatalf("deny: %d", code)
	}
	h.fileRequest(mia, ask)
}

// A raise for a model the team has no quota of keeps the guarantee of its "*" quota, and
// at the end the model falls back under "*".
func TestRequestQuotaOfAModelUnderStar(t *testing.T) {
	h, mia, olga, _ := requestsSetup(t)
	if code := h.do("PUT", "/api/v1/teams/ml", api.Team{Members: []string{"mia"}, Quotas: map[string]api.Quota{"*": {Guaranteed: 2, Limit: 4}}}, nil); code != http.StatusOK {
		t.Fatalf("team ml: %d", code)
	}
	h.fileRequest(mia, api.Request{Kind: api.RequestQuota, Team: "ml", GPUModel: "H100", Limit: 12, For: 3600, Reason: "x"})
	if code := h.doAs(olga, "POST", "/api/v1/requests/1/approve", nil, nil); code != http.StatusOK {
		t.Fatalf("approve: %d", code)
	}
	if q, ok := h.h100Limit("ml"); !ok || q.Guaranteed != 2 || q.Limit != 12 {
		t.Errorf("H100 quota during the raise: %+v %v; want 2/12", q, ok)
	}
	h.clock.Add(time.Hour)
	h.cycle()
	if q, ok := h.h100Limit("ml"); ok {
		t.Errorf("H100 quota after the raise: %+v; want none (back under *)", q)
	}
}

// BenchmarkExpireRequests is one cycle's request housekeeping with many requests decided
// long ago and a few still open: the cost should follow the open ones.
func BenchmarkExpireRequests(b *testing.B) {
	env := benchServer(b)
	now := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	batch := &store.Batch{}
	for i := int64(1); i <= 10000; i++ {
		r := api.Request{ID: i, Kind: api.RequestQueue, User: "mia", Team: "default", State: api.RequestEnded, Queue: "urgent",
			Reason: "x", Created: now, Expires: now.Add(time.Hour)}
		if i%1000 == 0 {
			r.State = api.RequestPending
			r.Expires = now.Add(100 * time.Hour)
		}
		batch.Settings = append(batch.Settings, cluster.RequestSetting(r))
	}
	env.srv.mu.Lock()
	defer env.srv.mu.Unlock()
	if err := env.srv.commit(context.Background(), batch); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		var out store.Batch
		env.srv.expireRequests(&out, now)
		if len(out.Settings) != 0 {
			b.Fatalf("expired %d requests; want none", len(out.Settings))
		}
	}
}
