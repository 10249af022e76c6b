package server

import (
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"testing"

	"github.com/rotahq/rota/internal/api"
)

// A listing with arrays=collapse is the element listing with each array's run of jobs
// made one entry: its first job, with the summary of all of them that the same jobs
// summed up one by one make. The limit counts entries, no array is split between pages,
// and the cursors are the last and first jobs read; read back by the prev cursors, the
// entries are the same. As an admin and as a member, by several page sizes.
func TestCollapsedArrays(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 4)
	alice := h.addUser("alice", "member", "vision")
	submit := func(token string, spec api.JobSpec) api.Job {
		t.Helper()
		var j api.Job
		if code := h.doAs(token, "POST", "/api/v1/jobs", spec, &j); code != http.StatusCreated {
			t.Fatalf("submit %+v: %d", spec, code)
		}
		return j
	}
	submit(h.token, api.JobSpec{Command: []string{"x"}, GPUs: 1})
	submit(alice, api.JobSpec{Command: []string{"x"}, GPUs: 1, Array: "0-6"})
	submit(h.token, api.JobSpec{Command: []string{"x"}, GPUs: 1, Hold: true})
	submit(h.token, api.JobSpec{Command: []string{"x"}, GPUs: 1, Array: "3-5"})
	submit(alice, api.JobSpec{Command: []string{"x"}, GPUs: 1, Array: "10-11", Hold: true})
	h.cycle() // four GPUs: some of the first array run, the rest wait
	submit(alice, api.JobSpec{Command: []string{"x"}, Array: "0"})

	for _, who := range []struct{ name, token string }{{"admin", h.token}, {"alice", alice}} {
		for _, q := range []url.Values{{}, {"state": {"pending,held"}}} {
			elems := h.pageThrough(who.token, q, 5000)
			var all api.JobList
			h.doAs(who.token, "GET", "/api/v1/jobs?limit=5000&"+q.Encode(), nil, &all)
			// What collapsing must give: runs of one array's jobs, summed up.
			var want []api.Job
			for i := range all.Jobs {
				j := all.Jobs[i]
				if n := len(want); n > 0 && j.ArrayIndex != nil && want[n-1].Array != nil && want[n-1].ArrayID == j.ArrayID {
					want[n-1].Array.Add(&j, h.clock.Now())
					continue
				}
				if j.ArrayIndex != nil {
					j.Array = &api.ArraySummary{}
					j.Array.Add(&j, h.clock.Now())
				}
				want = append(want, j)
			}
			if len(elems) != len(all.Jobs) || len(want) >= len(all.Jobs) {
				t.Fatalf("%s %s: %d jobs, %d entries expected: the set-up lists no array", who.name, q.Encode(), len(all.Jobs), len(want))
			}
			for _, limit := range []int{1, 2, 3, 100} {
				var got []api.Job
				cq := url.Values{"arrays": {"collapse"}, "limit": {strconv.Itoa(limit)}}
				for k, v := range q {
					cq[k] = v
				}
				for pages := 0; ; pages++ {
					var p api.JobList
					if code := h.doAs(who.token, "GET", "/api/v1/jobs?"+cq.Encode(), nil, &p); code != http.StatusOK || pages > 50 {
						t.Fatalf("%s ?%s: %d after %d pages", who.name, cq.Encode(), code, pages)
					}
					if len(p.Jobs) > limit || (p.Next != "" && len(p.Jobs) != limit) || (p.Prev != "") != (len(got) > 0) {
						t.Fatalf("%s ?%s: %d entries, next %q, prev %q", who.name, cq.Encode(), len(p.Jobs), p.Next, p.Prev)
					}
					got = append(got, p.Jobs...)
					if p.Next == "" {
						break
					}
					cq.Set("after", p.Next)
				}
				// And back from past the last job by the prev cursors: the same entries.
				var back []api.Job
				cq.Del("after")
				cq.Set("before", "9223372036854775807")
				for pages := 0; ; pages++ {
					var p api.JobList
					if code := h.doAs(who.token, "GET", "/api/v1/jobs?"+cq.Encode(), nil, &p); code != http.StatusOK || pages > 50 {
						t.Fatalf("%s ?%s: %d after %d pages", who.name, cq.Encode(), code, pages)
					}
					if len(p.Jobs) > limit || (p.Prev != "" && len(p.Jobs) != limit) || (p.Next != "") != (len(back) > 0) {
						t.Fatalf("%s ?%s: %d entries, prev %q, next %q", who.name, cq.Encode(), len(p.Jobs), p.Prev, p.Next)
					}
					back = append(p.Jobs, back...)
					if p.Prev == "" {
						break
					}
					cq.Set("before", p.Prev)
				}
				for dir, got := range map[string][]api.Job{"forward": got, "back": back} {
					if len(got) != len(want) {
						t.Fatalf("%s %s by %d %s: %d entries; want %d", who.name, q.Encode(), limit, dir, len(got), len(want))
					}
					for i := range got {
						g, w := got[i], want[i]
						if g.ID != w.ID || !reflect.DeepEqual(g.Array, w.Array) {
							t.Fatalf("%s %s by %d %s: entry %d is job %d with %s; want job %d with %s", who.name, q.Encode(), limit, dir, i, g.ID, summary(g.Array), w.ID, summary(w.Array))
						}
					}
				}
			}
		}
	}

	for _, bad := range []string{"arrays=", "arrays=yes", "arrays=collapse&arrays=collapse", "arrays=collapse&state=all",
		"arrays=collapse&state=pending,failed"} {
		var e api.Error
		if code := h.do("GET", "/api/v1/jobs?"+bad, nil, &e); code != http.StatusBadRequest || e.Field != "arrays" {
			t.Errorf("%s: %d field %q; want 400 naming arrays", bad, code, e.Field)
		}
	}
}

func summary(s *api.ArraySummary) string {
	if s == nil {
		return "no summary"
	}
	return fmt.Sprintf("%+v", *s)
}
