package server

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rotahq/rota/internal/api"
)

// listNodes reads GET /api/v1/nodes with the query as token, failing unless it is 200.
func (h *harness) listNodes(token string, q url.Values) api.NodeList {
	h.t.Helper()
	var list api.NodeList
	if code := h.doAs(token, "GET", "/api/v1/nodes?"+q.Encode(), nil, &list); code != http.StatusOK {
		h.t.Fatalf("GET /api/v1/nodes?%s: %d", q.Encode(), code)
	}
	return list
}

func nodeNames(nodes []api.Node) []string {
	out := []string{}
	for _, n := range nodes {
		out = append(out, n.Name)
	}
	return out
}

// The node list pages by name in either direction, each page counting what matches and
// where it starts, and filters by state, pool, part of the name, version drift and
// problems.
func TestNodeListPagesAndFilters(t *testing.T) {
	h := newHarness(t)
	var all []string
	for i := range 11 {
		name := "gpu" + strconv.Itoa(i)
		pool := "train"
		if i%3 == 0 {
			pool = "serve"
		}
		h.versionNode(name, pool, "550.54.15", "12.4")
		all = append(all, name)
	}
	slices.Sort(all)
	h.versionNode("old", "train", "535.54", "12.2")
	h.beatFull("sick", 2, func(hb *api.Heartbeat) {
		hb.Inventory.Labels = map[string]string{"pool": "train"}
		hb.Inventory.DriverVersion, hb.Inventory.CUDAVersion = "550.54.15", "12.4"
		hb.Inventory.GPUs[1].Healthy, hb.Inventory.GPUs[1].Health = false, "XID 79"
	})
	all = append(all, "old", "sick")
	if code, e := h.putConfig("pools:\n  - name: train\n    driver: \">=550\"\n"); code != 200 {
		t.Fatalf("config: %d %s", code, e.Message)
	}
	h.versionNode("old", "train", "535.54", "12.2")
	var drained api.Node
	if code := h.do("POST", "/api/v1/nodes/gpu4/drain", api.DrainRequest{Reason: "cabling"}, &drained); code != http.StatusOK {
		t.Fatalf("drain gpu4: %d", code)
	}

	// Without limit, every node, as before.
	whole := h.listNodes(h.token, nil)
	if got := nodeNames(whole.Nodes); !slices.Equal(got, all) || whole.Total != len(all) || whole.Offset != 0 || whole.Next != "" || whole.Prev != "" {
		t.Fatalf("the whole list: %v total %d offset %d next %q prev %q; want %v", got, whole.Total, whole.Offset, whole.Next, whole.Prev, all)
	}

	// Forward by fives, then back from the end: each name once, in order.
	var fwd []string
	q := url.Values{"limit": {"5"}}
	for pages := 0; ; pages++ {
		p := h.listNodes(h.token, q)
		if p.Total != len(all) || p.Offset != len(fwd) {
			t.Fatalf("page %d: total %d offset %d; want %d and %d", pages, p.Total, p.Offset, len(all), len(fwd))
		}
		if (p.Prev == "") != (len(fwd) == 0) {
			t.Errorf("page %d: prev %q; want one on every page but the first", pages, p.Prev)
		}
		fwd = append(fwd, nodeNames(p.Nodes)...)
		if p.Next == "" {
			break
		}
		if pages > len(all) {
			t.Fatal("the pages do not end")
		}
		q.Set("after", p.Next)
	}
	if !slices.Equal(fwd, all) {
		t.Fatalf("paging forward: %v; want %v", fwd, all)
	}
	var back []string
	last := h.listNodes(h.token, url.Values{"limit": {"5"}, "after": {all[len(all)-6]}})
	back = nodeNames(last.Nodes)
	for p := last; p.Prev != ""; {
		p = h.listNodes(h.token, url.Values{"limit": {"5"}, "before": {p.Prev}})
		back = append(nodeNames(p.Nodes), back...)
		if p.Offset != len(all)-len(back) {
			t.Fatalf("paging back: offset %d with %v listed after it; want %d", p.Offset, back, len(all)-len(back))
		}
	}
	if !slices.Equal(back, all) {
		t.Fatalf("paging back: %v; want %v", back, all)
	}
	// A cursor need not be a node's name (the node may have left): the page starts at the
	// next name after it.
	if p := h.listNodes(h.token, url.Values{"limit": {"2"}, "after": {"gpu10a"}}); !slices.Equal(nodeNames(p.Nodes), []string{"gpu2", "gpu3"}) || p.Offset != 3 {
		t.Errorf("after a name no node has: %v offset %d; want gpu2, gpu3 at 3", nodeNames(p.Nodes), p.Offset)
	}

	// Past either end the page is empty, with no cursor, and counts what matches.
	for _, q := range []url.Values{{"limit": {"3"}, "before": {"a"}}, {"limit": {"3"}, "before": {all[0]}}, {"limit": {"3"}, "after": {"zzz"}}} {
		if p := h.listNodes(h.token, q); len(p.Nodes) != 0 || p.Next != "" || p.Prev != "" || p.Total != len(all) {
			t.Errorf("%s: %v next %q prev %q total %d; want an empty page of %d", q.Encode(), nodeNames(p.Nodes), p.Next, p.Prev, p.Total, len(all))
		}
	}
	for _, c := range []struct {
		query url.Values
		want  []string
	}{
		{url.Values{"pool": {"serve"}}, []string{"gpu0", "gpu3", "gpu6", "gpu9"}},
		{url.Values{"state": {"draining,drained"}}, []string{"gpu4"}},
		{url.Values{"state": {"READY"}, "pool": {"serve"}, "name": {"gpu"}}, []string{"gpu0", "gpu3", "gpu6", "gpu9"}},
		{url.Values{"name": {"1"}}, []string{"gpu1", "gpu10"}},
		{url.Values{"drifting": {"true"}}, []string{"old"}},
		{url.Values{"problems": {"true"}}, []string{"gpu4", "old", "sick"}},
		{url.Values{"problems": {"true"}, "state": {"READY"}}, []string{"old", "sick"}},
		{url.Values{"pool": {"none"}}, []string{}},
		{url.Values{"pool": {"serve"}, "limit": {"3"}, "after": {"gpu0"}}, []string{"gpu3", "gpu6", "gpu9"}},
	} {
		got := h.listNodes(h.token, c.query)
		if !slices.Equal(nodeNames(got.Nodes), c.want) {
			t.Errorf("%s: %v; want %v", c.query.Encode(), nodeNames(got.Nodes), c.want)
		}
		if c.query.Get("limit") == "" && got.Total != len(c.want) {
			t.Errorf("%s: total %d; want %d", c.query.Encode(), got.Total, len(c.want))
		}
	}
	if p := h.listNodes(h.token, url.Values{"pool": {"serve"}, "limit": {"3"}}); p.Total != 4 || p.Next != "gpu6" {
		t.Errorf("a filtered page: total %d next %q; want 4 and gpu6", p.Total, p.Next)
	}
}

// With jobs=true the page carries the jobs on its nodes, only those the caller may read,
// their environment hidden as in any listing; jobs on other nodes are not read.
func TestNodeListJobs(t *testing.T) {
	h := newHarness(t)
	alice := h.addUser("alice", "member", "vision")
	bob := h.addUser("bob", "member")
	for _, n := range []string{"a", "b", "c"} {
		h.beat(n, 2)
	}
	var mine, theirs api.Job
	if code := h.doAs(alice, "POST", "/api/v1/jobs", api.JobSpec{GPUs: 2, Command: []string{"x"}, Env: map[string]string{"SECRET": "s"}}, &mine); code != http.StatusCreated {
		t.Fatalf("alice's submit: %d", code)
	}
	if code := h.doAs(bob, "POST", "/api/v1/jobs", api.JobSpec{GPUs: 2, Command: []string{"y"}, Env: map[string]string{"SECRET": "t"}}, &theirs); code != http.StatusCreated {
		t.Fatalf("bob's submit: %d", code)
	}
	h.cycle()
	where := map[int64]string{mine.ID: h.job(mine.ID).Nodes[0], theirs.ID: h.job(theirs.ID).Nodes[0]}
	ids := func(jobs []api.Job) []int64 {
		var out []int64
		for _, j := range jobs {
			out = append(out, j.ID)
		}
		return out
	}
	// page reads a page of the nodes given, found by name (each name a letter of its own).
	page := func(token string, nodes ...string) []api.Job {
		q := url.Values{"limit": {"3"}, "jobs": {"true"}}
		if len(nodes) == 1 {
			q.Set("name", nodes[0])
		}
		list := h.listNodes(token, q)
		if got := nodeNames(list.Nodes); !slices.Equal(got, nodes) {
			t.Fatalf("the page: %v; want %v", got, nodes)
		}
		return list.Jobs
	}
	both := page(h.token, "a", "b", "c")
	if got := ids(both); !slices.Equal(got, []int64{mine.ID, theirs.ID}) {
		t.Fatalf("an admin's page of every node: jobs %v; want %d and %d", got, mine.ID, theirs.ID)
	}
	if both[0].Spec.Env["SECRET"] != "s" {
		t.Errorf("an admin reads the environment %v; want it whole", both[0].Spec.Env)
	}
	if got := ids(page(alice, "a", "b", "c")); !slices.Equal(got, []int64{mine.ID}) {
		t.Errorf("alice's page: jobs %v; want only her own %d", got, mine.ID)
	}
	if got := ids(page(bob, where[mine.ID])); len(got) != 0 {
		t.Errorf("bob's page of the node alice's job runs on: jobs %v; want none", got)
	}
	if got := ids(page(h.token, where[theirs.ID])); !slices.Equal(got, []int64{theirs.ID}) {
		t.Errorf("the page of bob's node: jobs %v; want only %d", got, theirs.ID)
	}
	// A teammate reads alice's job, her environment hidden.
	carol := h.addUser("carol", "member", "vision")
	got := page(carol, where[mine.ID])
	if len(got) != 1 || got[0].ID != mine.ID || got[0].Spec.Env["SECRET"] == "s" {
		t.Errorf("alice's teammate's page: %+v; want job %d with its environment hidden", got, mine.ID)
	}
}

// Bad parameters are refused naming the parameter; nothing is listed.
// TestNodeListFreeFilter lists the nodes with at least N GPUs free, as the glance counts
// a free GPU: healthy, held by no job, on a node that takes work. Each answer is held to
// a count made here from the whole node list.
func TestNodeListFreeFilter(t *testing.T) {
	h := newHarness(t)
	for _, n := range []string{"a", "b", "c", "d"} {
		h.beat(n, 4)
	}
	h.beatFull("sick", 4, func(hb *api.Heartbeat) { hb.Inventory.GPUs[1].Healthy, hb.Inventory.GPUs[1].Health = false, "XID 79" })
	if code := h.do("POST", "/api/v1/nodes/d/drain", nil, nil); code != http.StatusOK {
		t.Fatalf("drain d: %d", code)
	}
	three := h.submit(api.JobSpec{GPUs: 4, Command: []string{"x"}})
	two := h.submit(api.JobSpec{GPUs: 2, Command: []string{"y"}})
	h.cycle()
	if h.job(three.ID).State != api.StateAssigned || h.job(two.ID).State != api.StateAssigned {
		t.Fatalf("the jobs are %s and %s; want both placed", h.job(three.ID).State, h.job(two.ID).State)
	}
	free := map[string]int{}
	for _, n := range h.listNodes(h.token, nil).Nodes {
		if n.State != api.NodeReady || n.Syncing {
			continue
		}
		for _, g := range n.GPUs {
			if g.Healthy && !g.Missing && !slices.Contains(n.UsedGPUs, g.Index) && !slices.Contains(n.HeldGPUs, g.Index) {
				free[n.Name]++
			}
		}
	}
	// d is drained, one of sick's GPUs is unhealthy, and the 4-GPU job fills a, b or c.
	full := 0
	for _, n := range []string{"a", "b", "c"} {
		if free[n] == 0 {
			full++
		}
	}
	if free["d"] != 0 || free["sick"] > 3 || full != 1 {
		t.Fatalf("the scenario lacks a case: free GPUs %v", free)
	}
	for want := 1; want <= 5; want++ {
		var names []string
		for _, n := range []string{"a", "b", "c", "d", "sick"} {
			if free[n] >= want {
				names = append(names, n)
			}
		}
		got := h.listNodes(h.token, url.Values{"free": {strconv.Itoa(want)}})
		if !slices.Equal(nodeNames(got.Nodes), append([]string{}, names...)) || got.Total != len(names) {
			t.Errorf("free=%d: %v (total %d); want %v (free GPUs %v)", want, nodeNames(got.Nodes), got.Total, names, free)
		}
	}
	// With the other filters and a page.
	if got := h.listNodes(h.token, url.Values{"free": {"1"}, "state": {"DRAINED,DRAINING"}, "limit": {"1"}}); len(got.Nodes) != 0 || got.Total != 0 {
		t.Errorf("free=1 with the drained nodes: %v (total %d); want none: a drained node has no GPU free", nodeNames(got.Nodes), got.Total)
	}
}

func TestNodeListRefusesBadQueries(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 1)
	long := strings.Repeat("n", maxNodeQuery+1)
	for _, c := range []struct{ query, field string }{
		{"state=READY,BUSY", "state"},
		{"state=", "state"},
		{"state=READY&state=LOST", "state"},
		{"pool=", "pool"},
		{"pool=" + long, "pool"},
		{"name=a%00b", "name"},
		{"drifting=yes", "drifting"},
		{"problems=1", "problems"},
		{"free=0", "free"},
		{"free=1025", "free"},
		{"free=x", "free"},
		{"free=1&free=2", "free"},
		{"limit=0", "limit"},
		{"limit=1001", "limit"},
		{"limit=x", "limit"},
		{"after=n1", "limit"},
		{"before=n1", "limit"},
		{"limit=5&after=a&before=b", "before"},
		{"after=" + long + "&limit=1", "after"},
		{"jobs=true", "jobs"},
		{"jobs=1&limit=2", "jobs"},
	} {
		var e api.Error
		if code := h.do("GET", "/api/v1/nodes?"+c.query, nil, &e); code != http.StatusBadRequest || e.Field != c.field || e.Message == "" {
			t.Errorf("%.60s: %d field %q %q; want 400 naming %s", c.query, code, e.Field, e.Message, c.field)
		}
	}
}
