package server

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// reservationsSetup gives two 8-GPU H100 nodes in pool train, one 4-GPU A100 node in no
// pool, and teams vision and nlp with members.
func reservationsSetup(t *testing.T) *harness {
	h := newHarness(t)
	h.heartbeat("n1", h.poolNode("n1", "train", 8), nil)
	h.heartbeat("n2", h.poolNode("n2", "train", 8), nil)
	inv := api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake"}
	for i := range 4 {
		inv.GPUs = append(inv.GPUs, api.GPU{Index: i, UUID: "GPU-a-" + string(rune('0'+i)), Model: "A100", MemoryMB: 40960, Healthy: true})
	}
	h.heartbeat("a1", inv, nil)
	h.do("PUT", "/api/v1/teams/vision", api.Team{}, nil)
	h.do("PUT", "/api/v1/teams/nlp", api.Team{}, nil)
	h.addUser("alice", "member", "vision")
	h.addUser("bob", "member", "nlp")
	return h
}

func (h *harness) reservations() []api.Reservation {
	h.t.Helper()
	var list api.ReservationList
	if code := h.do("GET", "/api/v1/reservations", nil, &list); code != http.StatusOK {
		h.t.Fatalf("list reservations: %d", code)
	}
	return list.Reservations
}

// Bad reservations are refused naming the field, and nothing is stored: not in the list,
// not in the audit trail, not after a restart.
func TestReservationValidation(t *testing.T) {
	h := reservationsSetup(t)
	now := h.clock.Now()
	start, end := now.Add(time.Hour), now.Add(3*time.Hour)
	if code := h.do("POST", "/api/v1/reservations", api.Reservation{Team: "vision", GPUs: 12, Model: "H100", Start: start, End: end}, nil); code != http.StatusCreated {
		t.Fatalf("a valid reservation: %d", code)
	}
	for _, c := range []struct {
		name   string
		r      api.Reservation
		status int
		field  string
		says   string
	}{
		{"zero GPUs", api.Reservation{Team: "vision", GPUs: 0, Start: start, End: end}, 400, "gpus", "between 1 and"},
		{"negative GPUs", api.Reservation{Team: "vision", GPUs: -3, Start: start, End: end}, 400, "gpus", "got -3"},
		{"more than the model has", api.Reservation{Team: "vision", GPUs: 5, Model: "A100", Start: start, End: end}, 400, "gpus", "the cluster has 4 A100 GPUs; 5 asked"},
		{"more than the pool has", api.Reservation{Team: "vision", GPUs: 17, Pool: "train", Start: start, End: end}, 400, "gpus", "16 GPUs in pool train"},
		{"more than the cluster has", api.Reservation{Team: "vision", GPUs: 21, Start: start, End: end}, 400, "gpus", "the cluster has 20 GPUs"},
		{"unknown model", api.Reservation{Team: "vision", GPUs: 1, Model: "B200", Start: start, End: end}, 400, "model", "A100, H100"},
		{"unknown pool", api.Reservation{Team: "vision", GPUs: 1, Pool: "infer", Start: start, End: end}, 400, "pool", "train"},
		{"end before start", api.Reservation{Team: "vision", GPUs: 1, Start: end, End: start}, 400, "end", "not after the start"},
		{"unknown team", api.Reservation{Team: "nope", GPUs: 1, Start: start, End: end}, 400, "team", "unknown team"},
		{"unknown node", api.Reservation{Team: "vision", Nodes: []string{"n9"}, Start: start, End: end}, 400, "nodes", "unknown node"},
		{"node twice", api.Reservation{Team: "vision", Nodes: []string{"n1", "n1"}, Start: start, End: end}, 400, "nodes", "named twice"},
		{"nodes and model", api.Reservation{Team: "vision", Nodes: []string{"n1"}, Model: "H100", Start: start, End: end}, 400, "nodes", "whole"},
		// 12 of the 16 H100s are held from +1h to +3h: 5 more overlapping is too many.
		{"overlap beyond capacity", api.Reservation{Team: "nlp", GPUs: 5, Model: "H100", Start: now.Add(2 * time.Hour), End: now.Add(4 * time.Hour)}, 409, "gpus",
			"reservation 1 holds 12 of the 16 GPUs this one could use; with its 5 that makes 17"},
		{"overlap through any model", api.Reservation{Team: "nlp", GPUs: 9, Start: now.Add(2 * time.Hour), End: now.Add(4 * time.Hour)}, 409, "gpus",
			"holds 12 of the 20 GPUs this one could use; with its 9 that makes 21"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, e := h.call(h.token, "POST", "/api/v1/reservations", "application/json", mustJSON(t, c.r))
			if code != c.status || e.Field != c.field || !strings.Contains(e.Message, c.says) {
				t.Errorf("%d %+v; want %d naming %s, saying %q", code, e, c.status, c.field, c.says)
			}
		})
	}
	check := func(when string) {
		if rs := h.reservations(); len(rs) != 1 || rs[0].ID != 1 {
			t.Errorf("%s: reservations %+v; want only the valid one", when, rs)
		}
	}
	check("after the refusals")
	h.restart()
	check("after a restart")

	// Overlapping reservations that fit together are fine, as are ones that do not meet:
	// A100s, or after the first ends.
	for _, r := range []api.Reservation{
		{Team: "nlp", GPUs: 4, Model: "H100", Start: start, End: end},
		{Team: "nlp", GPUs: 4, Model: "A100", Start: start, End: end},
		{Team: "nlp", GPUs: 16, Model: "H100", Start: end, End: end.Add(time.Hour)},
	} {
		if code, e := h.call(h.token, "POST", "/api/v1/reservations", "application/json", mustJSON(t, r)); code != http.StatusCreated {
			t.Errorf("%+v: %d %+v; want 201", r, code, e)
		}
	}
}

// A reservation by count holds GPUs of its model for its team without naming nodes: other
// teams' jobs are kept off what the team lacks and told why, the team's jobs take the held
// GPUs, the list shows held and used, a restart keeps it all, and at its end it lets go.
func TestCountReservationHolds(t *testing.T) {
	h := reservationsSetup(t)
	now := h.clock.Now()
	var r api.Reservation
	if code := h.do("POST", "/api/v1/reservations", api.Reservation{Team: "vision", GPUs: 6, Model: "H100", Start: now, End: now.Add(6 * time.Hour)}, &r); code != http.StatusCreated {
		t.Fatalf("reserve: %d", code)
	}
	if r.ID != 1 || r.Name != "resv-1" || len(r.Nodes) != 0 || r.GPUs != 6 || r.Model != "H100" {
		t.Fatalf("reservation %+v; want 6 H100 GPUs by count, no nodes", r)
	}
	h.restart() // the reservation is in the store, not only in memory

	// nlp takes 8 of the 16; 4 more would leave 4 for vision's 6.
	first := h.submit(api.JobSpec{User: "bob", Team: "nlp", GPUs: 8, GPUModel: "H100", TimeLimit: 8 * 3600, Command: []string{"a"}})
	second := h.submit(api.JobSpec{User: "bob", Team: "nlp", GPUs: 4, GPUModel: "H100", TimeLimit: 3600, Command: []string{"b"}})
	h.cycle()
	if got := h.job(first.ID); got.State != api.StateAssigned {
		t.Fatalf("nlp's first job: %s; want ASSIGNED", got.State)
	}
	if got := h.job(second.ID); got.State != api.StatePending {
		t.Fatalf("nlp's second job: %s; want PENDING, off the held GPUs", got.State)
	}
	const want = "6 of the 8 free H100 GPUs are held for team vision by reservation 1 until 15:00."
	if why := h.why(second.ID); len(why.Reasons) == 0 || why.Reasons[0] != want {
		t.Errorf("why: %q; want %q", why.Reasons, want)
	}
	rs := h.reservations()
	if len(rs) != 1 || rs[0].Used != 0 || rs[0].Held != 6 {
		t.Errorf("list: %+v; want used 0, held 6", rs)
	}

	// vision's job takes held GPUs; used and held follow.
	own := h.submit(api.JobSpec{User: "alice", Team: "vision", GPUs: 4, GPUModel: "H100", TimeLimit: 3600, Command: []string{"c"}})
	h.cycle()
	if got := h.job(own.ID); got.State != api.StateAssigned {
		t.Fatalf("vision's job: %s; want ASSIGNED on its held GPUs", got.State)
	}
	if rs := h.reservations(); len(rs) != 1 || rs[0].Used != 4 || rs[0].Held != 2 {
		t.Errorf("list: %+v; want used 4, held 2", rs)
	}
	if got := h.job(second.ID); got.State != api.StatePending {
		t.Errorf("nlp's second job: %s; want PENDING: 4 free, 2 of them held", got.State)
	}
	h.restart()
	h.cycle()
	if got := h.job(second.ID); got.State != api.StatePending {
		t.Errorf("after a restart nlp's second job: %s; want still PENDING", got.State)
	}

}

// A reservation by count ends by itself: the job it kept off starts at its end, and it is
// no longer listed.
func TestCountReservationExpires(t *testing.T) {
	h := reservationsSetup(t)
	now := h.clock.Now()
	if code := h.do("POST", "/api/v1/reservations", api.Reservation{Team: "vision", GPUs: 16, Pool: "train", Start: now.Add(-time.Minute), End: now.Add(time.Hour)}, nil); code != http.StatusCreated {
		t.Fatalf("reserve: %d", code)
	}
	j := h.submit(api.JobSpec{User: "bob", Team: "nlp", GPUs: 4, GPUModel: "H100", TimeLimit: 3600, Command: []string{"d"}})
	h.cycle()
	if got := h.job(j.ID); got.State != api.StatePending {
		t.Fatalf("nlp's job during the window: %s; want PENDING", got.State)
	}
	if why := h.why(j.ID); len(why.Reasons) == 0 || !strings.HasPrefix(why.Reasons[0], "16 of the 16 free GPUs in pool train are held for team vision by reservation 1 until 10:00.") {
		t.Errorf("why: %q", why.Reasons)
	}
	h.clock.Add(time.Hour)
	h.heartbeat("n1", h.poolNode("n1", "train", 8), nil)
	h.heartbeat("n2", h.poolNode("n2", "train", 8), nil)
	h.cycle()
	if got := h.job(j.ID); got.State != api.StateAssigned {
		t.Errorf("after the window: nlp's job %s; want ASSIGNED (%q)", got.State, h.why(j.ID).Reasons)
	}
	if rs := h.reservations(); len(rs) != 0 {
		t.Errorf("after the window: %+v listed; want none", rs)
	}
}
