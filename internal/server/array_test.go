package server

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/rotahq/rota/internal/api"
)

// GET /api/v1/arrays/{id} answers every element of the array in ID order, each in its own
// state; an element's ID or a plain job's is not an array; a member of another team may
// not read it, and only the owner sees the environment.
func TestGetArray(t *testing.T) {
	h := newHarness(t)
	h.do("PUT", "/api/v1/teams/vision", api.Team{}, nil)
	h.do("PUT", "/api/v1/teams/nlp", api.Team{}, nil)
	alice := h.addUser("alice", "member", "vision")
	carol := h.addUser("carol", "member", "vision")
	bob := h.addUser("bob", "member", "nlp")
	h.beat("n1", 2)

	var first api.Job
	body, _ := json.Marshal(api.JobSpec{GPUs: 1, Command: []string{"sweep"}, Array: "0-9:3", Env: map[string]string{"WANDB_KEY": "s3cret"}})
	if code := h.doRaw(alice, "POST", "/api/v1/jobs", body, &first); code != 201 {
		t.Fatalf("submit array: %d", code)
	}
	h.cycle() // two of the four start on the node's two GPUs
	var cancelled api.Job
	if code := h.doAs(alice, "POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", first.ID+3), nil, &cancelled); code != 200 {
		t.Fatalf("cancel the last element: %d", code)
	}
	path := fmt.Sprintf("/api/v1/arrays/%d", first.ID)

	var list api.JobList
	if code := h.doRaw(alice, "GET", path, nil, &list); code != 200 {
		t.Fatalf("get the array: %d", code)
	}
	if len(list.Jobs) != 4 {
		t.Fatalf("get the array: %d elements; want 4", len(list.Jobs))
	}
	states := map[api.JobState]int{}
	for i, j := range list.Jobs {
		if j.ID != first.ID+int64(i) || j.ArrayID != first.ID || j.ArrayIndex == nil || *j.ArrayIndex != 3*i {
			t.Errorf("element %d: job %d array %d index %v; want job %d index %d", i, j.ID, j.ArrayID, j.ArrayIndex, first.ID+int64(i), 3*i)
		}
		if j.Spec.Env["WANDB_KEY"] != "s3cret" {
			t.Errorf("the owner sees element %d's environment as %q", j.ID, j.Spec.Env["WANDB_KEY"])
		}
		states[j.State]++
	}
	if states[api.StateAssigned]+states[api.StateRunning] != 2 || states[api.StatePending] != 1 || states[api.StateCancelled] != 1 {
		t.Errorf("element states %v; want 2 started, 1 pending, 1 cancelled", states)
	}

	// Carol (same team) reads it with the environment redacted; Bob (other team) may not.
	if code := h.doRaw(carol, "GET", path, nil, &list); code != 200 || len(list.Jobs) != 4 || list.Jobs[0].Spec.Env["WANDB_KEY"] != redacted {
		t.Errorf("carol reads the array: %d, %d elements, env %q", code, len(list.Jobs), list.Jobs[0].Spec.Env["WANDB_KEY"])
	}
	var e api.Error
	if code := h.doAs(bob, "GET", path, nil, &e); code != 403 || e.Rule == "" {
		t.Errorf("bob reads another team's array: %d %+v; want 403 naming the rule", code, e)
	}

	// Only an array's first job names it.
	plain := h.submit(api.JobSpec{Command: []string{"x"}})
	for _, id := range []int64{first.ID + 1, plain.ID, 999} {
		e = api.Error{}
		if code := h.do("GET", fmt.Sprintf("/api/v1/arrays/%d", id), nil, &e); code != 404 || e.Field != "id" {
			t.Errorf("get array %d: %d %+v; want 404 on field id", id, code, e)
		}
	}
	for _, bad := range []string{"0", "-1", "x", "1_2"} {
		if code := h.do("GET", "/api/v1/arrays/"+bad, nil, nil); code != 400 {
			t.Errorf("get array %q: %d; want 400", bad, code)
		}
	}
}
