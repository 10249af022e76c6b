package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// visionTeam is a team of 8 guaranteed and 16 at most GPUs with two projects.
func visionTeam() api.Team {
	return api.Team{Name: "vision", Weight: 1,
		Quotas:   map[string]api.Quota{"*": {Guaranteed: 8, Limit: 16}},
		CPUQuota: &api.Quota{Guaranteed: 32, Limit: 64},
		Projects: []api.Project{
			{Name: "det", Quotas: map[string]api.Quota{"*": {Guaranteed: 4, Limit: 8}}, CPUQuota: &api.Quota{Limit: 16}},
			{Name: "seg", Quotas: map[string]api.Quota{"*": {Guaranteed: 4, Limit: 16}}},
		}}
}

func (h *harness) putTeam(t api.Team) (int, api.Error) {
	h.t.Helper()
	var e api.Error
	code := h.do("PUT", "/api/v1/teams/"+t.Name, t, &e)
	return code, e
}

func (h *harness) team(name string) (api.Team, bool) {
	h.t.Helper()
	var list api.TeamList
	h.do("GET", "/api/v1/teams", nil, &list)
	for _, t := range list.Teams {
		if t.Name == name {
			return t, true
		}
	}
	return api.Team{}, false
}

// Bad projects, quotas and budgets are refused with the field and both numbers, and
// nothing of the team changes.
func TestProjectValidationStoresNothing(t *testing.T) {
	h := newHarness(t)
	if code, e := h.putTeam(visionTeam()); code != http.StatusOK {
		t.Fatalf("put team: %d %s", code, e.Message)
	}
	before, _ := h.team("vision")
	for _, tc := range []struct {
		name  string
		edit  func(*api.Team)
		field string
		says  []string
	}{
		{"project guarantee above the team's", func(t *api.Team) { t.Projects[0].Quotas["*"] = api.Quota{Guaranteed: 9, Limit: 9} },
			"projects[0].quotas", []string{"project det", "guaranteed 9", "guaranteed 8"}},
		{"project limit above the team's", func(t *api.Team) { t.Projects[1].Quotas["*"] = api.Quota{Guaranteed: 4, Limit: 20} },
			"projects[1].quotas", []string{"project seg", "limit 20", "limit 16"}},
		{"guarantees add up above the team's", func(t *api.Team) { t.Projects[1].Quotas["*"] = api.Quota{Guaranteed: 5, Limit: 8} },
			"projects", []string{"add up to 9", "guaranteed 8"}},
		{"project CPUs above the team's", func(t *api.Team) { t.Projects[0].CPUQuota = &api.Quota{Limit: 65} },
			"projects[0].cpu_quota", []string{"project det", "limit 65 CPUs", "limit 64"}},
		{"project guarantee where the team has none", func(t *api.Team) { t.Projects[0].MemoryQuotaMB = &api.Quota{Guaranteed: 1024} },
			"projects[0].memory_quota_mb", []string{"needs a team quota"}},
		{"negative", func(t *api.Team) { t.Projects[0].Quotas["*"] = api.Quota{Guaranteed: -1} },
			"projects[0].quotas", []string{"between 0 and"}},
		{"unknown period", func(t *api.Team) { t.Budget = &api.Budget{Period: "fortnight", Hard: 10} },
			"budget.period", []string{`"fortnight"`, "day, week, month"}},
		{"soft above hard", func(t *api.Team) { t.Projects[0].Budget = &api.Budget{Period: "month", Soft: 20, Hard: 10} },
			"projects[0].budget.soft_gpu_hours", []string{"project det", "soft limit 20", "hard limit 10"}},
		{"negative budget", func(t *api.Team) { t.Budget = &api.Budget{Period: "day", Hard: -1} },
			"budget", []string{"between 0 and"}},
		{"project twice", func(t *api.Team) { t.Projects[1].Name = "det" },
			"projects[1].name", []string{"defined twice"}},
		{"team quota lowered under its projects'", func(t *api.Team) { t.Quotas["*"] = api.Quota{Guaranteed: 6, Limit: 16} },
			"projects", []string{"add up to 8", "guaranteed 6"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			team := visionTeam()
			tc.edit(&team)
			code, e := h.putTeam(team)
			if code != http.StatusBadRequest || e.Field != tc.field {
				t.Fatalf("status %d, field %q (%s); want 400 on %q", code, e.Field, e.Message, tc.field)
			}
			for _, s := range tc.says {
				if !strings.Contains(e.Message, s) {
					t.Errorf("message %q does not say %q", e.Message, s)
				}
			}
			if after, _ := h.team("vision"); !reflect.DeepEqual(after, before) {
				t.Errorf("team changed after a refused update:\n%+v\nwant\n%+v", after, before)
			}
		})
	}

	// A job names a project of its team, or none.
	var e api.Error
	code := h.do("POST", "/api/v1/jobs", api.JobSpec{Team: "vision", Project: "cls", Command: []string{"x"}}, &e)
	if code != http.StatusBadRequest || e.Field != "project" || !strings.Contains(e.Message, "det, seg") {
		t.Fatalf("unknown project: %d %q %s; want 400 on project listing det, seg", code, e.Field, e.Message)
	}
	if j := h.submit(api.JobSpec{Team: "vision", Project: "det", Command: []string{"x"}}); j.Spec.Project != "det" {
		t.Errorf("job's project %q; want det", j.Spec.Project)
	}
}

func (h *harness) budgetEvents() []api.Event {
	h.t.Helper()
	var list api.EventList
	if code := h.do("GET", "/api/v1/audit?kind=budget", nil, &list); code != http.StatusOK {
		h.t.Fatalf("audit: status %d", code)
	}
	return list.Events
}

// A project's day budget and its team's month budget, over the end of a day and of a
// month: the soft limit warns once per period (also across a restart), the hard limit
// holds new jobs but not running ones, and a new period starts them.
func TestBudgetsOverAPeriodBoundary(t *testing.T) {
	h := newHarness(t)
	h.clock.Add(time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC).Sub(h.clock.Now()))
	h.beat("n1", 8)
	team := visionTeam()
	team.Budget = &api.Budget{Period: api.BudgetMonth, Soft: 10, Hard: 12}
	team.Projects[0].Budget = &api.Budget{Period: api.BudgetDay, Hard: 4}
	if code, e := h.putTeam(team); code != http.StatusOK {
		t.Fatalf("put team: %d %s", code, e.Message)
	}
	spec := func(project string, gpus int) api.JobSpec {
		return api.JobSpec{Team: "vision", Project: project, GPUs: gpus, Command: []string{"train"}}
	}
	a := h.submit(spec("det", 2))
	h.cycle()
	if got := h.job(a.ID); got.State != api.StateAssigned {
		t.Fatalf("job a: %s %s", got.State, got.Message)
	}

	// 22:00: det used its 4 GPU-hours of the day.
	h.clock.Add(2 * time.Hour)
	b := h.submit(spec("det", 1))
	c := h.submit(spec("", 4))
	h.cycle()
	got := h.job(b.ID)
	want := "project det used 4 of its 4 GPU-hours budget for 2026-11-30; new jobs start when the period ends or the budget is raised"
	if got.State != api.StatePending || got.Reason != reasonBudget || got.Message != want {
		t.Fatalf("job b: %s %s %q; want pending, %s, %q", got.State, got.Reason, got.Message, reasonBudget, want)
	}
	if got := h.job(a.ID); got.State != api.StateAssigned {
		t.Errorf("job a: %s; a running job is not stopped by its budget", got.State)
	}
	if got := h.job(c.ID); got.State != api.StateAssigned {
		t.Errorf("job c (the team's, not det's): %s %s", got.State, got.Message)
	}
	var why api.Why
	h.do("GET", fmt.Sprintf("/api/v1/jobs/%d/why", b.ID), nil, &why)
	if len(why.Reasons) == 0 || !strings.Contains(why.Reasons[0], "project det used 4 of its 4 GPU-hours") {
		t.Errorf("why: %q", why.Reasons)
	}

	// 23:00: the team used 4 + 6 = 10 GPU-hours of the month: its soft limit.
	h.clock.Add(time.Hour)
	h.cycle()
	evs := h.budgetEvents()
	if len(evs) != 2 || evs[0].Reason != "hard" || evs[1].Reason != "soft" || !strings.Contains(evs[1].Message, "team vision used 10 of its 10 GPU-hours soft budget for 2026-11") {
		t.Fatalf("budget events: %+v; want det's hard limit, then the team's soft limit", evs)
	}
	if got := h.job(c.ID); !strings.Contains(got.BudgetWarning, "team vision used 10") {
		t.Errorf("job c's budget warning %q", got.BudgetWarning)
	}
	// Once per period, restart or not; projects and budgets come back from the file.
	h.restart()
	h.cycle()
	if evs := h.budgetEvents(); len(evs) != 2 {
		t.Fatalf("after a restart, budget events: %+v; want the same two", evs)
	}
	if back, _ := h.team("vision"); !reflect.DeepEqual(back.Projects, team.Projects) || !reflect.DeepEqual(back.Budget, team.Budget) {
		t.Fatalf("after a restart, team %+v; want projects %+v and budget %+v", back, team.Projects, team.Budget)
	}

	// 23:30: the team used 13: its hard limit holds its new jobs too.
	h.clock.Add(30 * time.Minute)
	d := h.submit(spec("seg", 1))
	h.cycle()
	if got := h.job(d.ID); got.Reason != reasonBudget || !strings.HasPrefix(got.Message, "team vision used 13 of its 12 GPU-hours budget for 2026-11;") {
		t.Fatalf("job d: %s %q", got.Reason, got.Message)
	}

	// Midnight: a new day and a new month; the held jobs start, and no warning remains.
	h.clock.Add(30 * time.Minute)
	h.cycle()
	for _, id := range []int64{b.ID, d.ID} {
		if got := h.job(id); got.State != api.StateAssigned {
			t.Errorf("job %d in the new period: %s %s %s", id, got.State, got.Reason, got.Message)
		}
	}
	if got := h.job(c.ID); got.BudgetWarning != "" {
		t.Errorf("job c's warning in the new period: %q", got.BudgetWarning)
	}
}

// rota admin apply takes projects and budgets in the team's YAML, and refuses the whole
// file, storing nothing, when one project does not fit its team.
func TestApplyProjects(t *testing.T) {
	h := newHarness(t)
	put := func(body string) (int, api.Error) {
		t.Helper()
		req, _ := http.NewRequest("PUT", h.http.URL+"/api/v1/config", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+h.token)
		req.Header.Set("Content-Type", "application/yaml")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e api.Error
		json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e
	}
	good := `teams:
  - name: vision
    quotas: {"*": {guaranteed: 8, limit: 16}}
    cpu_quota: {guaranteed: 32, limit: 64}
    budget: {period: month, soft_gpu_hours: 800, hard_gpu_hours: 1000}
    projects:
      - name: det
        quotas: {"*": {guaranteed: 4, limit: 8}}
        budget: {period: week, hard_gpu_hours: 200}
      - name: seg
        quotas: {"*": {guaranteed: 4, limit: 16}}
`
	if code, e := put(good); code != http.StatusOK {
		t.Fatalf("apply: %d %s", code, e.Message)
	}
	got, _ := h.team("vision")
	if len(got.Projects) != 2 || got.Projects[0].Budget == nil || got.Projects[0].Budget.Hard != 200 || got.Budget.Soft != 800 || got.CPUQuota.Limit != 64 {
		t.Fatalf("applied team: %+v", got)
	}
	bad := strings.Replace(good, `guaranteed: 4, limit: 16`, `guaranteed: 4, limit: 17`, 1) + `queues:
  - name: extra
    tier: 1
`
	code, e := put(bad)
	if code != http.StatusBadRequest || !strings.Contains(e.Message, "project seg") || !strings.Contains(e.Message, "limit 17") || !strings.Contains(e.Message, "limit 16") {
		t.Fatalf("bad apply: %d %q %s; want 400 naming project seg, 17 and 16", code, e.Field, e.Message)
	}
	if after, _ := h.team("vision"); !reflect.DeepEqual(after, got) {
		t.Errorf("team changed by a refused apply: %+v", after)
	}
	var queues api.QueueList
	h.do("GET", "/api/v1/queues", nil, &queues)
	for _, q := range queues.Queues {
		if q.Name == "extra" {
			t.Error("a refused apply stored its queue")
		}
	}
}

// Through the server: a project's job beyond its guarantee borrows inside its team, and
// `rota why` names the project's quota that holds the next one, with the numbers.
func TestProjectQuotaThroughTheServer(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 8)
	if code, e := h.putTeam(visionTeam()); code != http.StatusOK {
		t.Fatalf("put team: %d %s", code, e.Message)
	}
	a := h.submit(api.JobSpec{Team: "vision", Project: "det", GPUs: 6, Command: []string{"x"}})
	b := h.submit(api.JobSpec{Team: "vision", Project: "det", GPUs: 4, Command: []string{"x"}})
	h.cycle()
	if got := h.job(a.ID); got.State != api.StateAssigned || !got.BorrowingInTeam || got.Borrowing {
		t.Fatalf("job a: %s, borrowing %v, inside the team %v; want assigned, borrowing inside the team", got.State, got.Borrowing, got.BorrowingInTeam)
	}
	got := h.job(b.ID)
	want := "project det of team vision uses 6 of its 8-GPU limit; this job needs 4"
	if got.Reason != "QuotaExceeded" || got.Message != want {
		t.Fatalf("job b: %s %q; want QuotaExceeded %q", got.Reason, got.Message, want)
	}
	var why api.Why
	h.do("GET", fmt.Sprintf("/api/v1/jobs/%d/why", a.ID), nil, &why)
	if !strings.Contains(strings.Join(why.Reasons, " "), "beyond project det's guaranteed quota") {
		t.Errorf("why of the running job: %q", why.Reasons)
	}
	// The accounting records of ended jobs carry the project, for exports.
	h.finish("n1", 8, a.ID, 0)
	var hist api.HistoryList
	h.do("GET", "/api/v1/history", nil, &hist)
	found := false
	for _, r := range hist.Records {
		if r.ID == a.ID {
			found = true
			if r.Project != "det" {
				t.Errorf("history record of job a: project %q; want det", r.Project)
			}
		}
	}
	if !found {
		t.Errorf("no history record of job a in %+v", hist.Records)
	}
}

// A job that ended and left memory still counts in its team's budget for the period, read
// once from the store, and after a restart too.
func TestBudgetCountsEvictedJobs(t *testing.T) {
	h := &harness{t: t, clock: &fakeClock{t: time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC)}, dir: t.TempDir(),
		cfg: func(c *Config) { c.KeepEnded = time.Hour }}
	h.open()
	team := visionTeam()
	team.Budget = &api.Budget{Period: api.BudgetMonth, Hard: 10}
	if code, e := h.putTeam(team); code != http.StatusOK {
		t.Fatalf("put team: %d %s", code, e.Message)
	}
	h.beat("n1", 8)
	a := h.submit(api.JobSpec{Team: "vision", GPUs: 4, Command: []string{"x"}})
	h.cycle()
	h.clock.Add(3 * time.Hour) // 12 GPU-hours
	code := 0
	h.beat("n1", 8, api.TaskStatus{JobID: a.ID, Attempt: 1, State: api.StateSucceeded, ExitCode: &code})
	if got := h.job(a.ID); got.State != api.StateSucceeded {
		t.Fatalf("job a: %s", got.State)
	}
	h.clock.Add(2 * time.Hour) // past KeepEnded: the next cycle evicts job a
	h.cycle()
	h.srv.mu.Lock()
	_, evicted := h.srv.state.Evicted(a.ID)
	h.srv.mu.Unlock()
	if !evicted {
		t.Fatal("job a is still in memory; the test needs it evicted")
	}
	check := func(when string) {
		t.Helper()
		b := h.submit(api.JobSpec{Team: "vision", GPUs: 1, Command: []string{"x"}})
		h.cycle()
		if got := h.job(b.ID); got.Reason != reasonBudget || !strings.HasPrefix(got.Message, "team vision used 12 of its 10 GPU-hours budget for 2026-12;") {
			t.Fatalf("%s: job b %s %q; want held by the budget, 12 of 10", when, got.Reason, got.Message)
		}
	}
	check("evicted")
	h.restart()
	check("after a restart")
}

// Passing the soft limit tells the team's webhook, with the sentence of the event.
func TestBudgetWebhook(t *testing.T) {
	h := newHarness(t)
	rc := newReceiver(t, nil)
	team := visionTeam()
	team.Notify = []api.Notify{{URL: rc.URL}}
	team.Projects[0].Budget = &api.Budget{Period: api.BudgetDay, Soft: 1, Hard: 5}
	if code, e := h.putTeam(team); code != http.StatusOK {
		t.Fatalf("put team: %d %s", code, e.Message)
	}
	h.beat("n1", 8)
	h.submit(api.JobSpec{Team: "vision", Project: "det", GPUs: 1, Command: []string{"x"}})
	h.cycle()
	h.clock.Add(90 * time.Minute)
	h.cycle()
	got := rc.wait(t, 1)[0]
	want := "team vision, project det used 1.5 of its 1 GPU-hours soft budget for 2026-11-01; at 5 new jobs are held until the period ends"
	if got.n.Event != api.NotifyBudget || got.n.Message != want || got.n.Job != nil || got.header.Get("Rota-Event") != api.NotifyBudget {
		t.Errorf("notification %s; want event budget saying %q", got.raw, want)
	}
	_, f := h.scrapeMetrics(h.token)
	f.check(t, []series{
		{"rota_budget_used_gpu_hours", map[string]string{"team": "vision", "project": "det", "period": "2026-11-01"}, 1.5},
		{"rota_budget_limit_gpu_hours", map[string]string{"team": "vision", "project": "det", "period": "2026-11-01", "limit": "soft"}, 1},
		{"rota_budget_limit_gpu_hours", map[string]string{"team": "vision", "project": "det", "period": "2026-11-01", "limit": "hard"}, 5},
	})
}
