package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rotahq/rota/internal/api"
)

// nodeQuerySeeds are query strings of GET /api/v1/nodes: each filter, pages either way
// from names that are nodes' and names that are not, past both ends, and bad values.
var nodeQuerySeeds = []string{"", "limit=2", "limit=2&after=node-a", "limit=2&before=rack-2", "limit=1&before=a",
	"limit=3&after=zzz", "state=READY,drained", "state=LOST", "pool=train&limit=1&jobs=true", "name=rack",
	"drifting=true", "problems=true&limit=2", "limit=1000&before=node-b", "limit=0", "limit=1001", "after=x", "jobs=true",
	"limit=2&after=a&before=b", "state=", "name=%00", "pool=" + strings.Repeat("p", 257), "limit=2&jobs=1",
	"free=2&limit=1", "free=1&state=READY&jobs=true&limit=5", "free=0", "free=99999999999999999999"}

// nodeListTarget is a server with six nodes of two pools, one drained, jobs on some.
type nodeListTarget struct{ queryTarget }

// FuzzNodeList asks GET /api/v1/nodes with fuzzed query strings. Oracle: never a 5xx; a
// 400 names a parameter of the route; a 200 is, in order, the slice of the filtered list
// (asked for again, whole) that starts at its offset, no longer than the limit, past the
// cursor, with next and prev its last and first names when nodes come after and before
// it; its jobs are on its nodes.
func FuzzNodeList(f *testing.F) {
	for _, s := range nodeQuerySeeds {
		f.Add(s)
	}
	nt := &nodeListTarget{}
	f.Cleanup(nt.close)
	f.Fuzz(nt.check)
}

func (nt *nodeListTarget) check(t *testing.T, query string) {
	env := nt.ready(t, func(env *submitEnv) error {
		for _, n := range []string{"rack-1", "rack-2", "rack-3", "spare"} {
			pool := map[bool]string{true: "train", false: "serve"}[strings.HasPrefix(n, "rack")]
			if err := env.beat(n, "NVIDIA H100 80GB HBM3", 2, map[string]string{"pool": pool}); err != nil {
				return err
			}
		}
		if code, body := env.post("/api/v1/nodes/rack-2/drain", `{"reason":"fuzz"}`); code != http.StatusOK {
			return fmt.Errorf("drain: %d %s", code, body)
		}
		if err := env.submitAll(`{"command":["x"],"gpus":8}`, `{"command":["x"],"gpus":2}`, `{"command":["x"],"gpus":1,"hold":true}`); err != nil {
			return err
		}
		return env.srv.Cycle(t.Context())
	})
	code, body := env.get("/api/v1/nodes", query)
	switch code {
	case http.StatusBadRequest:
		var e api.Error
		if err := json.Unmarshal(body, &e); err != nil || !slices.Contains([]string{"state", "pool", "name", "drifting", "problems", "free", "limit", "after", "before", "jobs"}, e.Field) || e.Message == "" {
			t.Fatalf("?%s: 400 %s; want a parameter of the route named, with why", query, body)
		}
		return
	case http.StatusOK:
	default:
		t.Fatalf("?%s: %d %s", query, code, body)
	}
	var page api.NodeList
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatalf("?%s: 200 with %v: %s", query, err, body)
	}
	// The whole filtered list, from the same filters without the page.
	q, _ := url.ParseQuery(query)
	whole := url.Values{}
	for _, k := range []string{"state", "pool", "name", "drifting", "problems", "free"} {
		if v, ok := q[k]; ok {
			whole[k] = v
		}
	}
	code, body = env.get("/api/v1/nodes", whole.Encode())
	var all api.NodeList
	if code != http.StatusOK || json.Unmarshal(body, &all) != nil {
		t.Fatalf("?%s: the same filters unpaged: %d %s", whole.Encode(), code, body)
	}
	names := nodeNames(page.Nodes)
	allNames := nodeNames(all.Nodes)
	switch {
	case !slices.IsSorted(allNames) || all.Total != len(allNames):
		t.Fatalf("?%s: the whole list %v (total %d) is not in order or miscounted", whole.Encode(), allNames, all.Total)
	case page.Total != all.Total || page.Offset < 0 || page.Offset+len(names) > all.Total:
		t.Fatalf("?%s: total %d offset %d with %d listed; the whole list has %d", query, page.Total, page.Offset, len(names), all.Total)
	case !slices.Equal(names, allNames[page.Offset:page.Offset+len(names)]):
		t.Fatalf("?%s: %v at offset %d; the whole list is %v", query, names, page.Offset, allNames)
	}
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit > 0 && len(names) > limit {
		t.Fatalf("?%s: %d listed; the limit is %d", query, len(names), limit)
	}
	if limit == 0 && len(names) != all.Total {
		t.Fatalf("?%s: %d listed unpaged of %d", query, len(names), all.Total)
	}
	for _, n := range names {
		if (q.Get("after") != "" && n <= q.Get("after")) || (q.Get("before") != "" && n >= q.Get("before")) {
			t.Fatalf("?%s: %s is on the wrong side of the cursor", query, n)
		}
	}
	if len(names) > 0 {
		if later := page.Offset+len(names) < all.Total; later != (page.Next == names[len(names)-1]) || (!later && page.Next != "") {
			t.Fatalf("?%s: next %q with %v listed of %v", query, page.Next, names, allNames)
		}
		if earlier := page.Offset > 0; earlier != (page.Prev == names[0]) || (!earlier && page.Prev != "") {
			t.Fatalf("?%s: prev %q with %v listed of %v", query, page.Prev, names, allNames)
		}
	}
	for _, j := range page.Jobs {
		if !slices.ContainsFunc(j.Nodes, func(n string) bool { return slices.Contains(names, n) }) {
			t.Fatalf("?%s: job %d on %v, none of them listed (%v)", query, j.ID, j.Nodes, names)
		}
	}
}
