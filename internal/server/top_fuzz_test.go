package server

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/rotahq/rota/internal/api"
)

// topQuerySeeds are query strings of GET /api/v1/top: the defaults, every node, none,
// the limits and past them, repeats, and text where numbers go.
var topQuerySeeds = []string{"", "nodes=all", "nodes=0&jobs=0", "nodes=1&jobs=100", "jobs=101", "nodes=-1",
	"nodes=1&nodes=2", "nodes=%zz", "jobs=", "nodes=99999999999999999999", "x=1&nodes=3", "nodes=ALL", "jobs=1e2"}

// topTarget is a server with two nodes and jobs running, waiting and held.
type topTarget struct{ queryTarget }

// FuzzTopQuery asks GET /api/v1/top with fuzzed query strings. Oracle: never a 5xx; a
// 400 names nodes or jobs; a 200 lists no more nodes and jobs than asked for (or the
// defaults), every node only when asked for all, and counts at least what it lists.
func FuzzTopQuery(f *testing.F) {
	for _, s := range topQuerySeeds {
		f.Add(s)
	}
	tt := &topTarget{}
	f.Cleanup(tt.close)
	f.Fuzz(tt.check)
}

func (tt *topTarget) check(t *testing.T, query string) {
	env := tt.ready(t, func(env *submitEnv) error {
		if err := env.submitAll(`{"command":["x"],"gpus":4}`, `{"command":["x"],"gpus":8}`, `{"command":["x"],"gpus":8}`, `{"command":["x"],"gpus":1,"hold":true}`); err != nil {
			return err
		}
		return env.srv.Cycle(t.Context())
	})
	code, body := env.get("/api/v1/top", query)
	switch code {
	case http.StatusBadRequest:
		var e api.Error
		if err := json.Unmarshal(body, &e); err != nil || (e.Field != "nodes" && e.Field != "jobs") || e.Message == "" {
			t.Fatalf("?%s: 400 %s; want the field nodes or jobs named, with why", query, body)
		}
		return
	case http.StatusOK:
	default:
		t.Fatalf("?%s: %d %s", query, code, body)
	}
	var top api.Top
	if err := json.Unmarshal(body, &top); err != nil {
		t.Fatalf("?%s: 200 with %v: %s", query, err, body)
	}
	q, _ := url.ParseQuery(query)
	nodes, jobs := defaultTopNodes, defaultTopJobs
	if v := q.Get("nodes"); v == "all" {
		nodes = top.Total.Nodes
	} else if n, err := strconv.Atoi(v); err == nil {
		nodes = n
	}
	if v, err := strconv.Atoi(q.Get("jobs")); err == nil {
		jobs = v
	}
	switch {
	case top.Total.Nodes != 2 || top.Running+top.Pending+top.Held != 4:
		t.Fatalf("?%s: %d nodes and %d jobs counted; want 2 and 4", query, top.Total.Nodes, top.Running+top.Pending+top.Held)
	case len(top.Nodes) != min(nodes, top.Total.Nodes):
		t.Fatalf("?%s: %d nodes listed; want %d", query, len(top.Nodes), min(nodes, top.Total.Nodes))
	case len(top.RunningJobs) != min(jobs, top.Running), len(top.WaitingJobs) != min(jobs, top.Pending+top.Held):
		t.Fatalf("?%s: %d running and %d waiting listed of %d and %d; want at most %d each", query,
			len(top.RunningJobs), len(top.WaitingJobs), top.Running, top.Pending+top.Held, jobs)
	}
}
