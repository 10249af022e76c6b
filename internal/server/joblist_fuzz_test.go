package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rotahq/rota/internal/api"
)

// jobQuerySeeds are query strings of GET /api/v1/jobs: pages either way, arrays collapsed,
// states, and bad values.
var jobQuerySeeds = []string{"", "limit=2", "limit=2&after=3", "limit=2&before=9", "arrays=collapse&limit=1",
	"arrays=collapse&limit=2&after=2", "arrays=collapse&limit=1&before=20", "arrays=collapse&state=pending,held&limit=3",
	"state=running&limit=1&before=99", "state=all&limit=2", "state=all&before=3", "arrays=collapse&state=all",
	"arrays=yes", "before=0", "limit=2&after=1&before=5", "queue=train&arrays=collapse&limit=2", "user=admin&limit=1&before=12"}

// jobListTarget is a server with single jobs and arrays, some running, some waiting, one
// held, one cancelled.
type jobListTarget struct{ queryTarget }

// FuzzJobList asks GET /api/v1/jobs with fuzzed query strings. Oracle: never a 5xx; a 400
// names a parameter of the route; a 200 of jobs not ended is, in order, a run of the whole
// listing with the same filters (asked for again, unpaged): one job an entry, or with
// arrays=collapse each array folded into its entry as ArraySummary.Add folds it; no longer
// than the limit, past its cursor, with next and prev its last and first jobs when jobs
// come after and before it.
func FuzzJobList(f *testing.F) {
	for _, s := range jobQuerySeeds {
		f.Add(s)
	}
	jt := &jobListTarget{}
	f.Cleanup(jt.close)
	f.Fuzz(jt.check)
}

func (jt *jobListTarget) check(t *testing.T, query string) {
	env := jt.ready(t, func(env *submitEnv) error {
		if err := env.submitAll(`{"command":["x"],"gpus":1}`, `{"command":["x"],"gpus":1,"array":"0-6"}`, `{"command":["x"],"hold":true}`,
			`{"command":["x"],"gpus":2,"array":"3-5"}`, `{"command":["x"]}`, `{"command":["x"],"array":"0-2","hold":true}`, `{"command":["x"],"array":"9"}`); err != nil {
			return err
		}
		if code, body := env.post("/api/v1/jobs/5/cancel", ""); code != http.StatusOK {
			return fmt.Errorf("cancel: %d %s", code, body)
		}
		return env.srv.Cycle(t.Context())
	})
	code, body := env.get("/api/v1/jobs", query)
	switch code {
	case http.StatusBadRequest:
		var e api.Error
		if err := json.Unmarshal(body, &e); err != nil || !slices.Contains([]string{"state", "limit", "after", "before", "arrays"}, e.Field) || e.Message == "" {
			t.Fatalf("?%s: 400 %s; want a parameter of the route named, with why", query, body)
		}
		return
	case http.StatusOK:
	default:
		t.Fatalf("?%s: %d %s", query, code, body)
	}
	var page api.JobList
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatalf("?%s: 200 with %v: %s", query, err, body)
	}
	q, _ := url.ParseQuery(query)
	for _, st := range strings.Split(q.Get("state"), ",") {
		if st = strings.ToUpper(strings.TrimSpace(st)); st == "ALL" || api.JobState(st).Terminal() {
			return // lists with ended jobs are read through the store too: other tests
		}
	}
	whole := url.Values{"limit": {"5000"}}
	for _, k := range []string{"state", "queue", "user"} {
		if v, ok := q[k]; ok {
			whole[k] = v
		}
	}
	code, body = env.get("/api/v1/jobs", whole.Encode())
	var all api.JobList
	if code != http.StatusOK || json.Unmarshal(body, &all) != nil || all.Next != "" {
		t.Fatalf("?%s: the same filters unpaged: %d %s", whole.Encode(), code, body)
	}
	// The entries the whole listing makes, and the jobs of each.
	now := env.clock.Now()
	var entries []api.Job
	var members [][]int64
	collapse := q.Get("arrays") == "collapse"
	for i := range all.Jobs {
		j := all.Jobs[i]
		if n := len(entries); collapse && n > 0 && j.ArrayIndex != nil && entries[n-1].Array != nil && entries[n-1].ArrayID == j.ArrayID {
			entries[n-1].Array.Add(&j, now)
			members[n-1] = append(members[n-1], j.ID)
			continue
		}
		if collapse && j.ArrayIndex != nil {
			j.Array = &api.ArraySummary{}
			j.Array.Add(&j, now)
		}
		entries = append(entries, j)
		members = append(members, []int64{j.ID})
	}
	after, _ := strconv.ParseInt(q.Get("after"), 10, 64)
	before, _ := strconv.ParseInt(q.Get("before"), 10, 64)
	// A cursor inside an array splits it: the oracle holds for cursors between entries.
	for _, m := range members {
		lo, hi := m[0], m[len(m)-1]
		if (after >= lo && after < hi) || (before > lo && before <= hi) {
			return
		}
	}
	start := slices.IndexFunc(entries, func(e api.Job) bool { return len(page.Jobs) > 0 && e.ID == page.Jobs[0].ID })
	switch {
	case len(page.Jobs) == 0:
		if page.Next != "" || page.Prev != "" {
			t.Fatalf("?%s: an empty page with next %q prev %q", query, page.Next, page.Prev)
		}
		return
	case start < 0 || start+len(page.Jobs) > len(entries):
		t.Fatalf("?%s: the page starts with job %d, not a run of the whole listing's %d entries", query, page.Jobs[0].ID, len(entries))
	}
	for i, got := range page.Jobs {
		want := entries[start+i]
		if got.ID != want.ID || !reflect.DeepEqual(got.Array, want.Array) {
			t.Fatalf("?%s: entry %d is job %d with %+v; the whole listing has job %d with %+v", query, i, got.ID, got.Array, want.ID, want.Array)
		}
	}
	limit, err := strconv.Atoi(q.Get("limit"))
	if err != nil {
		limit = defaultPage
	}
	end := start + len(page.Jobs)
	for _, m := range members[start:end] {
		if (after > 0 && m[0] <= after) || (before > 0 && m[len(m)-1] >= before) {
			t.Fatalf("?%s: job %d is on the wrong side of the cursor", query, m[0])
		}
	}
	// The page is the run nearest its cursor: nothing between the cursor and the page.
	switch {
	case before > 0 && end < len(entries) && members[end][0] < before,
		before == 0 && after > 0 && start > 0 && members[start-1][len(members[start-1])-1] > after,
		before == 0 && after == 0 && start != 0:
		t.Fatalf("?%s: entries %d to %d of %d leave some between the cursor and the page", query, start, end, len(entries))
	}
	if len(page.Jobs) > limit {
		t.Fatalf("?%s: %d entries; the limit is %d", query, len(page.Jobs), limit)
	}
	if want := strconv.FormatInt(members[end-1][len(members[end-1])-1], 10); (end < len(entries)) != (page.Next == want) || (end == len(entries) && page.Next != "") {
		t.Fatalf("?%s: next %q with entries %d to %d of %d", query, page.Next, start, end, len(entries))
	}
	if want := strconv.FormatInt(members[start][0], 10); (start > 0) != (page.Prev == want) || (start == 0 && page.Prev != "") {
		t.Fatalf("?%s: prev %q with entries %d to %d of %d", query, page.Prev, start, end, len(entries))
	}
}
