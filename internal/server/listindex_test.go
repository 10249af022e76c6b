package server

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// scanList is what paging through GET /api/v1/jobs must give, from a scan of every job:
// the filters of the query, and what a member may read.
func (h *harness) scanList(query url.Values, member string) []int64 {
	h.srv.mu.Lock()
	defer h.srv.mu.Unlock()
	var teams []string
	if member != "" {
		teams = h.srv.state.TeamsOf(member)
	}
	var out []int64
	for _, j := range h.srv.state.Jobs(nil) {
		st := query.Get("state")
		switch {
		case st == "" && j.State.Terminal():
			continue
		case st != "" && st != "all" && !slices.Contains(strings.Split(strings.ToUpper(st), ","), string(j.State)):
			continue
		case query.Get("queue") != "" && j.Spec.Queue != query.Get("queue"):
			continue
		case query.Get("user") != "" && j.Spec.User != query.Get("user"):
			continue
		case member != "" && j.Spec.User != member && !slices.Contains(teams, j.Spec.Team):
			continue
		}
		out = append(out, j.ID)
	}
	return out
}

// pageThrough follows the cursor from the first page to the last, limit jobs a page.
func (h *harness) pageThrough(token string, query url.Values, limit int) []int64 {
	h.t.Helper()
	return followCursor(h, token, "/api/v1/jobs", query, limit, 100, func(p *api.JobList) ([]int64, string) {
		ids := make([]int64, 0, len(p.Jobs))
		for _, j := range p.Jobs {
			ids = append(ids, j.ID)
		}
		return ids, p.Next
	})
}

// followCursor follows a listing at path from its first page to its last, limit items a
// page and at most maxPages pages, and returns the items' IDs in the order given: every
// page but the last is full, and its next cursor is its last ID. page reads a page's IDs
// and cursor.
func followCursor[P any](h *harness, token, path string, query url.Values, limit, maxPages int, page func(*P) ([]int64, string)) []int64 {
	h.t.Helper()
	var ids []int64
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	q.Set("limit", fmt.Sprint(limit))
	for pages := 0; ; pages++ {
		var p P
		if code := h.doAs(token, "GET", path+"?"+q.Encode(), nil, &p); code != http.StatusOK {
			h.t.Fatalf("%s?%s: status %d", path, q.Encode(), code)
		}
		got, next := page(&p)
		if len(got) > limit || (next != "" && len(got) != limit) || pages > maxPages {
			h.t.Fatalf("%s?%s: a page of %d with next %q", path, q.Encode(), len(got), next)
		}
		ids = append(ids, got...)
		if next == "" {
			return ids
		}
		if last := got[len(got)-1]; next != fmt.Sprint(last) {
			h.t.Fatalf("%s?%s: next %q, but the page ends with %d", path, q.Encode(), next, last)
		}
		q.Set("after", next)
	}
}

// TestListPagesFromTheIndex pages through jobs of every state, by state, queue and user,
// as an admin and as a member who reads only their own team's jobs, before and after a
// restart, and compares each listing with a scan of every job.
func TestListPagesFromTheIndex(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 2)
	alice := h.addUser("alice", "member", "vision")
	h.addUser("bob", "member")
	for i := range 30 {
		spec := api.JobSpec{Command: []string{"x"}, GPUs: 1, User: []string{"alice", "bob", "admin"}[i%3], Queue: []string{"train", "batch"}[i%2]}
		if i%7 == 0 {
			spec.Hold = true
		}
		j := h.submit(spec)
		if i%5 == 0 {
			h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", j.ID), nil, nil)
		}
	}
	h.cycle()
	queries := []url.Values{{}, {"state": {"all"}}, {"state": {"pending,held"}}, {"state": {"CANCELLED"}},
		{"state": {"ASSIGNED"}}, {"queue": {"batch"}}, {"user": {"alice"}}, {"state": {"all"}, "user": {"bob"}, "queue": {"train"}}}
	check := func(when string) {
		for _, q := range queries {
			for _, limit := range []int{1, 4, 5000} {
				if got, want := h.pageThrough(h.token, q, limit), h.scanList(q, ""); !slices.Equal(got, want) {
					t.Fatalf("%s: %s by %d as admin: %v; a scan says %v", when, q.Encode(), limit, got, want)
				}
				if got, want := h.pageThrough(alice, q, limit), h.scanList(q, "alice"); !slices.Equal(got, want) {
					t.Fatalf("%s: %s by %d as alice: %v; a scan says %v", when, q.Encode(), limit, got, want)
				}
			}
		}
		// Lists of jobs not ended page back too, from a cursor past the last job.
		for _, q := range queries {
			if q.Get("state") == "all" || q.Get("state") == "CANCELLED" {
				continue
			}
			for _, limit := range []int{1, 4, 5000} {
				if got, want := h.pageBack(h.token, q, limit), h.scanList(q, ""); !slices.Equal(got, want) {
					t.Fatalf("%s: %s back by %d as admin: %v; a scan says %v", when, q.Encode(), limit, got, want)
				}
				if got, want := h.pageBack(alice, q, limit), h.scanList(q, "alice"); !slices.Equal(got, want) {
					t.Fatalf("%s: %s back by %d as alice: %v; a scan says %v", when, q.Encode(), limit, got, want)
				}
			}
		}
		if all := h.scanList(url.Values{"state": {"all"}}, ""); len(all) != 30 {
			t.Fatalf("%s: %d jobs; want 30", when, len(all))
		}
	}
	check("live")
	h.restart()
	check("restarted")

	// A cursor is a job ID: past the last job the page is empty; anything else is refused.
	var page api.JobList
	for _, past := range []string{"1000000", "9223372036854775807"} {
		if code := h.do("GET", "/api/v1/jobs?state=all&after="+past, nil, &page); code != http.StatusOK || len(page.Jobs) != 0 || page.Next != "" {
			t.Errorf("cursor %s, past every job: %d, %d jobs, next %q", past, code, len(page.Jobs), page.Next)
		}
	}
	for _, bad := range []string{"-1", "x", "1.5", "99999999999999999999"} {
		var e api.Error
		if code := h.do("GET", "/api/v1/jobs?after="+url.QueryEscape(bad), nil, &e); code != http.StatusBadRequest || e.Field != "after" {
			t.Errorf("after=%s: %d field %q; want 400 after", bad, code, e.Field)
		}
	}
	// Ended jobs may have left memory for the store, and their lists page forward only.
	for _, bad := range []string{"before=0", "before=-1", "before=x", "before=5&after=2", "before=5&state=all", "before=5&state=pending,failed"} {
		var e api.Error
		if code := h.do("GET", "/api/v1/jobs?"+bad, nil, &e); code != http.StatusBadRequest || e.Field != "before" {
			t.Errorf("%s: %d field %q; want 400 before", bad, code, e.Field)
		}
	}
}

// pageBack follows a list of jobs not ended from its last page to its first by the prev
// cursors, limit jobs a page, and returns the IDs in ascending order. Each page says
// whether jobs follow it (next, its last ID) and come before it (prev, its first ID).
func (h *harness) pageBack(token string, query url.Values, limit int) []int64 {
	h.t.Helper()
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	q.Set("limit", fmt.Sprint(limit))
	q.Set("before", "9223372036854775807")
	var ids []int64
	for pages := 0; ; pages++ {
		var p api.JobList
		if code := h.doAs(token, "GET", "/api/v1/jobs?"+q.Encode(), nil, &p); code != http.StatusOK {
			h.t.Fatalf("/api/v1/jobs?%s: status %d", q.Encode(), code)
		}
		var got []int64
		for _, j := range p.Jobs {
			got = append(got, j.ID)
		}
		if len(got) > limit || (p.Prev != "" && len(got) != limit) || pages > 100 {
			h.t.Fatalf("/api/v1/jobs?%s: a page of %d with prev %q", q.Encode(), len(got), p.Prev)
		}
		if len(got) > 0 && p.Prev != "" && p.Prev != fmt.Sprint(got[0]) {
			h.t.Fatalf("/api/v1/jobs?%s: prev %q, but the page starts with %d", q.Encode(), p.Prev, got[0])
		}
		if want := len(ids) > 0; (p.Next != "") != want || (want && p.Next != fmt.Sprint(got[len(got)-1])) {
			h.t.Fatalf("/api/v1/jobs?%s: next %q on a page %s the last", q.Encode(), p.Next, map[bool]string{true: "before", false: "that is"}[want])
		}
		ids = append(got, ids...)
		if p.Prev == "" {
			// Forward from the first page, prev is absent; from the second, it is there.
			var first api.JobList
			fq := url.Values{}
			for k, v := range q {
				fq[k] = v
			}
			fq.Del("before")
			if len(ids) > 0 {
				fq.Set("after", fmt.Sprint(ids[0]))
				h.doAs(token, "GET", "/api/v1/jobs?"+fq.Encode(), nil, &first)
				if len(first.Jobs) > 0 && first.Prev != fmt.Sprint(first.Jobs[0].ID) {
					h.t.Fatalf("/api/v1/jobs?%s: prev %q; want the page's first job, as one comes before it", fq.Encode(), first.Prev)
				}
			}
			return ids
		}
		q.Set("before", p.Prev)
	}
}

// TestSubmitFitFollowsTheNodes: the checks a submit makes follow nodes as they register,
// are lost, come back, change their GPUs and are reloaded at a restart.
func TestSubmitFitFollowsTheNodes(t *testing.T) {
	h := newHarness(t)
	refused := func(spec api.JobSpec, field, says string) {
		t.Helper()
		spec.Command = []string{"x"}
		var e api.Error
		if code := h.do("POST", "/api/v1/jobs", spec, &e); code != http.StatusBadRequest || e.Field != field || !strings.Contains(e.Message, says) {
			t.Fatalf("%+v: %d %s: %s; want 400 %s saying %q", spec, code, e.Field, e.Message, field, says)
		}
	}
	h.beat("n1", 8)
	h.beat("n2", 4)
	h.submit(api.JobSpec{Command: []string{"x"}, GPUs: 8, GPUModel: "h100"})
	h.submit(api.JobSpec{Command: []string{"x"}, Nodes: 2, GPUsPerNode: 4, GPUs: 8})
	refused(api.JobSpec{Nodes: 2, GPUsPerNode: 5, GPUs: 10}, "nodes", "only 1 such nodes exist")
	refused(api.JobSpec{GPUs: 9}, "gpus", "the largest has 8")

	// n1 is lost: it fits nothing, until it comes back.
	h.clock.Add(2 * time.Minute)
	h.beat("n2", 4)
	h.srv.checkNodes(context.Background())
	refused(api.JobSpec{GPUs: 8}, "gpus", "the largest has 4")
	h.beat("n1", 8)
	h.submit(api.JobSpec{Command: []string{"x"}, GPUs: 8})

	// n1's GPUs are now A100s: its H100s are gone, a short name finds the new model.
	inv := api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake"}
	for i := range 8 {
		inv.GPUs = append(inv.GPUs, api.GPU{Index: i, UUID: fmt.Sprintf("GPU-a-%d", i), Model: "NVIDIA A100", MemoryMB: 40960, Healthy: true})
	}
	h.heartbeat("n1", inv, nil)
	refused(api.JobSpec{GPUs: 8, GPUModel: "H100"}, "gpus", "the largest has 4")
	if j := h.submit(api.JobSpec{Command: []string{"x"}, GPUs: 8, GPUModel: "a100"}); j.Spec.GPUModel != "NVIDIA A100" {
		t.Fatalf("a100 resolved to %q", j.Spec.GPUModel)
	}
	refused(api.JobSpec{GPUs: 1, GPUModel: "V100"}, "gpu_model", "models are: H100, NVIDIA A100")

	h.restart()
	refused(api.JobSpec{GPUs: 8, GPUModel: "H100"}, "gpus", "the largest has 4")
	h.submit(api.JobSpec{Command: []string{"x"}, GPUs: 8, GPUModel: "A100,H100"})
	refused(api.JobSpec{GPUs: 1, CPUs: 65}, "cpus", "no node has 1 GPUs together with 65 CPUs")
}
