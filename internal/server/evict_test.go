package server

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store/storetest"
)

func TestEvictedJobsReadFromTheStore(t *testing.T) {
	h := &harness{t: t, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir()}
	testEvictedJobs(t, h)
}

func TestEvictedJobsOnPostgres(t *testing.T) {
	h := &harness{t: t, url: storetest.StartPostgres(t), clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir()}
	testEvictedJobs(t, h)
}

// inMemory reports whether the server holds job id in memory, and whether it counts it
// among the evicted ones.
func (h *harness) inMemory(id int64) (held, evicted bool) {
	h.srv.mu.Lock()
	defer h.srv.mu.Unlock()
	_, held = h.srv.state.Job(id)
	_, evicted = h.srv.state.Evicted(id)
	return held, evicted
}

func (h *harness) teamUsage(at time.Time) map[string]float64 {
	h.srv.mu.Lock()
	defer h.srv.mu.Unlock()
	return h.srv.state.TeamUsage(at)
}

func sameUsage(t *testing.T, what string, got, want map[string]float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: usage %v; want %v", what, got, want)
	}
	for team, w := range want {
		if g := got[team]; math.Abs(g-w) > 1e-9*math.Max(1, math.Abs(w)) {
			t.Errorf("%s: team %s usage %v; want %v", what, team, g, w)
		}
	}
}

// testEvictedJobs ends jobs, lets them leave memory past KeepEnded, and checks that every
// read of them answers as it did while they were in memory, and after a restart.
func testEvictedJobs(t *testing.T, h *harness) {
	h.cfg = func(c *Config) { c.KeepEnded = time.Hour }
	h.open()
	h.do("PUT", "/api/v1/teams/vision", api.Team{}, nil)
	h.do("PUT", "/api/v1/teams/nlp", api.Team{}, nil)
	alice := h.addUser("alice", "member", "vision")
	bob := h.addUser("bob", "member", "nlp")
	h.beat("n1", 8)

	// ok succeeds with a log, bad fails, arr is an array cancelled while held, and wait
	// is held throughout.
	spec := api.JobSpec{User: "alice", Team: "vision", GPUs: 2, Command: []string{"train"}}
	code, ok, _ := h.postSubmit(spec, "key-ok")
	if code != http.StatusCreated {
		t.Fatalf("submit: %d", code)
	}
	bad := h.submit(api.JobSpec{User: "alice", Team: "vision", GPUs: 1, Command: []string{"crash"}})
	h.cycle()
	start := h.clock.Now()
	h.beat("n1", 8, api.TaskStatus{JobID: ok.ID, Attempt: 1, State: api.StateRunning, StartTime: &start},
		api.TaskStatus{JobID: bad.ID, Attempt: 1, State: api.StateRunning, StartTime: &start})
	ship := fmt.Sprintf("http://rota-up/api/v1/agents/n1/logs/%d/1?offset=0", ok.ID)
	req, _ := http.NewRequest("POST", ship, bytes.NewBufferString("epoch 1\n"))
	req.Header.Set("Content-Type", "application/octet-stream")
	if resp, err := h.agent.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("ship a log: %v", err)
	}
	h.clock.Add(20 * time.Minute)
	h.end("n1", ok.ID, 1, api.StateSucceeded, 0)
	h.end("n1", bad.ID, 1, api.StateFailed, 1)
	var arr api.Job
	if code := h.do("POST", "/api/v1/jobs", api.JobSpec{User: "alice", Team: "vision", GPUs: 1, Command: []string{"sweep"}, Array: "0-2", Hold: true}, &arr); code != http.StatusCreated {
		t.Fatalf("submit an array: %d", code)
	}
	if code := h.do("POST", fmt.Sprintf("/api/v1/arrays/%d/cancel", arr.ArrayID), nil, nil); code != 200 {
		t.Fatalf("cancel the array: %d", code)
	}
	wait := h.submit(api.JobSpec{User: "bob", Team: "nlp", GPUs: 1, Command: []string{"big"}, Hold: true})
	h.cycle()

	before := map[string]api.JobDetail{}
	for name, id := range map[string]int64{"ok": ok.ID, "bad": bad.ID, "arr": arr.ID} {
		before[name] = h.job(id)
	}
	var arrBefore api.JobList
	h.do("GET", fmt.Sprintf("/api/v1/arrays/%d", arr.ArrayID), nil, &arrBefore)
	var histBefore api.HistoryList
	h.do("GET", "/api/v1/history", nil, &histBefore)
	allBefore := h.pageThrough(h.token, url.Values{"state": {"all"}}, 2)

	// Two hours on, the next cycle lets the ended jobs go; usage is the same either way.
	h.clock.Add(2 * time.Hour)
	at := h.clock.Now()
	usage := h.teamUsage(at)
	// The accounting over a window that covers the evicted jobs reads the same too.
	report := "/api/v1/usage?since=2026-10-31&until=" + url.QueryEscape(at.Format(time.RFC3339))
	var reportBefore map[string]any
	if code := h.do("GET", report, nil, &reportBefore); code != 200 {
		t.Fatalf("usage report: %d", code)
	}
	h.cycle()
	for _, id := range []int64{ok.ID, bad.ID, arr.ID, arr.ID + 2} {
		if held, evicted := h.inMemory(id); held || !evicted {
			t.Fatalf("job %d after the window: in memory %v, evicted %v", id, held, evicted)
		}
	}
	if held, evicted := h.inMemory(wait.ID); !held || evicted {
		t.Fatalf("the pending job: in memory %v, evicted %v", held, evicted)
	}
	sameUsage(t, "after eviction", h.teamUsage(at), usage)

	// A job ended within the window stays: the list crosses memory and store.
	recent := h.submit(api.JobSpec{User: "bob", Team: "nlp", GPUs: 1, Command: []string{"x"}, Hold: true})
	h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", recent.ID), nil, nil)

	check := func(when string) {
		t.Helper()
		for name, id := range map[string]int64{"ok": ok.ID, "bad": bad.ID, "arr": arr.ID} {
			got := h.job(id)
			want := before[name]
			if got.State != want.State || len(got.AttemptList) != len(want.AttemptList) || len(got.Events) != len(want.Events) ||
				!got.SubmitTime.Equal(want.SubmitTime) || got.EndTime == nil || !got.EndTime.Equal(*want.EndTime) {
				t.Errorf("%s: job %s reads %s with %d attempts, %d events; was %s with %d, %d", when, name,
					got.State, len(got.AttemptList), len(got.Events), want.State, len(want.AttemptList), len(want.Events))
			}
		}
		if d := h.job(ok.ID); len(d.AttemptList) != 1 || d.AttemptList[0].State != api.StateSucceeded || !reflect.DeepEqual(d.Usage, before["ok"].Usage) {
			t.Errorf("%s: ok's attempts %+v, usage %+v; was %+v", when, d.AttemptList, d.Usage, before["ok"].Usage)
		}
		// Logs: its owner reads them, a member of another team may not.
		for _, tc := range []struct {
			token string
			want  int
		}{{alice, 200}, {bob, 403}} {
			req, _ := http.NewRequest("GET", fmt.Sprintf("%s/api/v1/jobs/%d/logs", h.http.URL, ok.ID), nil)
			req.Header.Set("Authorization", "Bearer "+tc.token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want || (tc.want == 200 && string(body) != "epoch 1\n") {
				t.Errorf("%s: logs: %d %q; want %d", when, resp.StatusCode, body, tc.want)
			}
		}
		var why api.Why
		if code := h.do("GET", fmt.Sprintf("/api/v1/jobs/%d/why", bad.ID), nil, &why); code != 200 || why.State != api.StateFailed {
			t.Errorf("%s: why: %d %+v", when, code, why)
		}
		if code := h.doAs(bob, "GET", fmt.Sprintf("/api/v1/jobs/%d/why", bad.ID), nil, nil); code != 403 {
			t.Errorf("%s: why as another team's member: %d; want 403", when, code)
		}
		if code := h.do("GET", fmt.Sprintf("/api/v1/jobs/%d/telemetry", ok.ID), nil, nil); code != 200 {
			t.Errorf("%s: telemetry: %d", when, code)
		}
		var e api.Error
		if code := h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", ok.ID), nil, &e); code != 409 || e.Code != api.CodeConflict {
			t.Errorf("%s: cancel an evicted job: %d %+v; want 409", when, code, e)
		}
		if code := h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/hold", ok.ID), nil, nil); code != 409 {
			t.Errorf("%s: hold an evicted job: %d; want 409", when, code)
		}
		if code := h.do("GET", "/api/v1/jobs/999999", nil, nil); code != 404 {
			t.Errorf("%s: an unknown job: %d; want 404", when, code)
		}
		var arrNow api.JobList
		if code := h.do("GET", fmt.Sprintf("/api/v1/arrays/%d", arr.ArrayID), nil, &arrNow); code != 200 || len(arrNow.Jobs) != 3 ||
			fmt.Sprint(jobIDs(arrNow.Jobs)) != fmt.Sprint(jobIDs(arrBefore.Jobs)) {
			t.Errorf("%s: the array: %d %v; was %v", when, code, jobIDs(arrNow.Jobs), jobIDs(arrBefore.Jobs))
		}
		if code := h.doAs(bob, "GET", fmt.Sprintf("/api/v1/arrays/%d", arr.ArrayID), nil, nil); code != 403 {
			t.Errorf("%s: the array as another team's member: %d; want 403", when, code)
		}
		// The list, page by page, across memory and store: every job once, in order.
		want := append(slices.Clone(allBefore), recent.ID)
		want = slices.Compact(slices.Sorted(slices.Values(want)))
		slices.Sort(want)
		for _, limit := range []int{1, 2, 3, 100} {
			if got := h.pageThrough(h.token, url.Values{"state": {"all"}}, limit); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: state=all by %d: %v; want %v", when, limit, got, want)
			}
		}
		// Jobs submitted by an earlier check follow these.
		if got := h.pageThrough(h.token, url.Values{"state": {"succeeded,failed,held"}}, 1); len(got) < 3 || fmt.Sprint(got[:3]) != fmt.Sprint([]int64{ok.ID, bad.ID, wait.ID}) {
			t.Errorf("%s: by state: %v", when, got)
		}
		if got := h.pageThrough(bob, url.Values{"state": {"all"}}, 2); fmt.Sprint(got) != fmt.Sprint([]int64{wait.ID, recent.ID}) {
			t.Errorf("%s: bob's list: %v", when, got)
		}
		if got := h.pageThrough(h.token, url.Values{"state": {"all"}, "user": {"alice"}}, 2); len(got) < 5 || fmt.Sprint(got[:5]) != fmt.Sprint(allBefore[:5]) {
			t.Errorf("%s: alice's jobs: %v; want %v first", when, got, allBefore[:5])
		}
		var reportNow map[string]any
		if code := h.do("GET", report, nil, &reportNow); code != 200 || !reflect.DeepEqual(reportNow, reportBefore) {
			t.Errorf("%s: usage report %d:\n%v\nwas\n%v", when, code, reportNow, reportBefore)
		}
		var hist api.HistoryList
		h.do("GET", "/api/v1/history", nil, &hist)
		if len(hist.Records) < len(histBefore.Records)+1 {
			t.Errorf("%s: history has %d records; want at least %d", when, len(hist.Records), len(histBefore.Records)+1)
		}
		for i, r := range histBefore.Records {
			if i < len(hist.Records) && (hist.Records[i].ID != r.ID || hist.Records[i].RunSeconds != r.RunSeconds || hist.Records[i].State != r.State) {
				t.Errorf("%s: history record %d: %+v; was %+v", when, i, hist.Records[i], r)
			}
		}
		// The history, page by page, across memory and store: every record once, in order.
		var histIDs []int64
		for _, r := range hist.Records {
			histIDs = append(histIDs, r.ID)
		}
		for _, limit := range []int{1, 2, 3} {
			if got := h.historyPages(h.token, nil, limit); fmt.Sprint(got) != fmt.Sprint(histIDs) {
				t.Errorf("%s: history by %d: %v; want %v", when, limit, got, histIDs)
			}
		}
		if got := h.historyPages(bob, nil, 1); len(got) == 0 || got[0] != recent.ID {
			t.Errorf("%s: bob's history: %v; want it to start with %d", when, got, recent.ID)
		}
		// Dependencies see the final states; a retried submit gets its job back.
		after := h.submit(api.JobSpec{User: "alice", Team: "vision", GPUs: 1, Command: []string{"next"}, AfterOK: []int64{ok.ID}})
		never := h.submit(api.JobSpec{User: "alice", Team: "vision", GPUs: 1, Command: []string{"next"}, AfterOK: []int64{bad.ID}})
		if after.State != api.StatePending || never.State != api.StateFailed {
			t.Errorf("%s: after-ok an evicted success: %s; after-ok an evicted failure: %s", when, after.State, never.State)
		}
		for _, id := range []int64{after.ID, never.ID} {
			h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", id), nil, nil)
		}
		code, replay, hdr := h.postSubmit(spec, "key-ok")
		if code != 200 || replay.ID != ok.ID || replay.State != api.StateSucceeded || hdr.Get("Idempotent-Replayed") != "true" {
			t.Errorf("%s: retried submit: %d job %d %s", when, code, replay.ID, replay.State)
		}
	}
	check("evicted")

	// After a restart the evicted jobs are not loaded, and read the same; so does usage.
	h.restart()
	for _, id := range []int64{ok.ID, bad.ID, arr.ID} {
		if held, evicted := h.inMemory(id); held || !evicted {
			t.Fatalf("job %d after a restart: in memory %v, evicted %v", id, held, evicted)
		}
	}
	sameUsage(t, "after a restart", h.teamUsage(at), usage)
	allBefore = h.pageThrough(h.token, url.Values{"state": {"all"}}, 100)
	if len(allBefore) < 5 || allBefore[0] != ok.ID {
		t.Fatalf("the list after a restart: %v", allBefore)
	}
	check("after a restart")
}

func jobIDs(jobs []api.Job) []int64 {
	out := []int64{}
	for _, j := range jobs {
		out = append(out, j.ID)
	}
	return out
}
