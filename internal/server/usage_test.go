package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
	"github.com/rotahq/rota/internal/report"
	"github.com/rotahq/rota/internal/store"
)

// usage asks for a report as the admin and fails the test unless it comes.
func (h *harness) usage(query string) api.UsageReport {
	h.t.Helper()
	var rep api.UsageReport
	var e api.Error
	if code := h.do("GET", "/api/v1/usage?"+query, nil, &rep); code != http.StatusOK {
		h.do("GET", "/api/v1/usage?"+query, nil, &e)
		h.t.Fatalf("usage?%s: status %d: %s", query, code, e.Message)
	}
	return rep
}

// Two one-GPU jobs run an hour on n1's H100s, priced at 2.50 USD: a succeeds with
// telemetry at 80%, b exits 3 without any. The report, through the API, before and after
// a restart: 2 GPU-hours, 1 of them measured at 80% (0.8 effective), 5.00 USD, one
// success of two ends, capacity 2 GPUs × the 10 hours from midnight to now (10:00).
func TestUsageThroughTheAPI(t *testing.T) {
	h := newHarness(t) // the clock starts at 2026-11-01 09:00
	h.beat("n1", 2)
	if code := h.do("PUT", "/api/v1/prices/H100", api.Price{PerGPUHour: 2.5, Currency: "USD"}, nil); code != http.StatusOK {
		t.Fatalf("put price: %d", code)
	}
	a := h.startJob("n1", 2, api.JobSpec{GPUs: 1, Command: []string{"a"}})
	b := h.startJob("n1", 2, api.JobSpec{GPUs: 1, Command: []string{"b"}})
	h.clock.Add(30 * time.Minute)
	gpu := h.job(a.ID).AttemptList[0].Placements[0].GPUIndices
	h.beatFull("n1", 2, withReading(h.clock.Now(), 80, 500, gpu, a.ID, 1))
	h.clock.Add(30 * time.Minute)
	ok, fail := 0, 3
	h.beat("n1", 2, api.TaskStatus{JobID: a.ID, Attempt: 1, State: api.StateSucceeded, ExitCode: &ok},
		api.TaskStatus{JobID: b.ID, Attempt: 1, State: api.StateFailed, ExitCode: &fail})

	check := func(when string) {
		t.Helper()
		rep := h.usage("by=user&since=2026-11-01&until=2026-11-02")
		tot := rep.Total
		if rep.By != api.ByUser || len(rep.Rows) != 1 || rep.Rows[0].Key != "admin" || rep.Currency != "USD" {
			t.Fatalf("%s: rows %+v, currency %q; want one row, the admin's, in USD", when, rep.Rows, rep.Currency)
		}
		if !near(tot.GPUHours, 2, 1e-6) || !near(tot.MeasuredGPUHours, 1, 1e-6) || !near(tot.EffectiveGPUHours, 0.8, 1e-6) ||
			tot.Cost == nil || !near(*tot.Cost, 5, 1e-6) || tot.Succeeded != 1 || tot.Failed != 1 || tot.Failures[api.ReasonExitCode] != 1 ||
			tot.Jobs != 2 || !near(tot.CapacityGPUHours, 20, 1e-6) || !near(tot.IdleCapacityGPUHours, 18, 1e-6) {
			t.Errorf("%s: total %+v", when, tot)
		}
	}
	check("before a restart")
	h.restart()
	check("after a restart")

	// A requeue-free day later, a window without them is empty but still has capacity.
	h.clock.Add(24 * time.Hour)
	if rep := h.usage("by=hour-of-week&since=2026-11-02&until=2026-11-03"); rep.Total.GPUHours != 0 || len(rep.Rows) != 168 {
		t.Errorf("a quiet day: %+v, %d rows", rep.Total, len(rep.Rows))
	}
}

// Reports run while jobs start, report telemetry and end: under -race this shows that
// what a report reads outside the lock is its own.
func TestUsageWhileTheClusterWorks(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 2)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 20 {
			var rep api.UsageReport
			h.do("GET", "/api/v1/usage?by=hour-of-week&since=2026-11-01", nil, &rep)
		}
	}()
	for range 5 {
		j := h.startJob("n1", 2, api.JobSpec{GPUs: 1, Command: []string{"a"}})
		h.clock.Add(time.Minute)
		gpu := h.job(j.ID).AttemptList[0].Placements[0].GPUIndices
		h.beatFull("n1", 2, withReading(h.clock.Now(), 50, 500, gpu, j.ID, 1))
		ok := 0
		h.beat("n1", 2, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateSucceeded, ExitCode: &ok})
	}
	<-done
	h.clock.Add(time.Minute) // the window is [since, until): the last end must be before now
	if rep := h.usage("since=2026-11-01"); rep.Total.Jobs != 5 || rep.Total.Succeeded != 5 {
		t.Errorf("total %+v; want the 5 jobs, all succeeded", rep.Total)
	}
}

// Without since and until the window is the last 30 days up to now.
func TestUsageDefaults(t *testing.T) {
	h := newHarness(t)
	rep := h.usage("")
	now := h.clock.Now()
	if rep.By != api.ByTeam || !rep.Until.Equal(now) || !rep.Since.Equal(now.Add(-30*24*time.Hour)) {
		t.Errorf("defaults: by %s from %s to %s; want team over the 30 days to %s", rep.By, rep.Since, rep.Until, now)
	}
}

func TestUsageBadQueries(t *testing.T) {
	h := newHarness(t)
	for _, c := range []struct{ query, field, says string }{
		{"by=cluster", "by", "team, project, user, queue, gpu-model, node, day, hour-of-week"},
		{"since=yesterday", "since", "RFC 3339"},
		{"until=2026-11-31", "until", "RFC 3339"},
		{"since=2026-11-02&until=2026-11-01", "until", "after since"},
		{"since=2026-11-01&until=2026-11-01", "until", "after since"},
		{"since=2025-01-01&until=2026-11-01", "since", "at most 400 days"},
	} {
		var e api.Error
		if code := h.do("GET", "/api/v1/usage?"+c.query, nil, &e); code != http.StatusBadRequest || e.Field != c.field || !strings.Contains(e.Message, c.says) {
			t.Errorf("%s: %d, field %q: %s; want 400 naming %s and saying %q", c.query, code, e.Field, e.Message, c.field, c.says)
		}
	}
}

// A member's report covers only what a member may read, and says so.
func TestUsageForAMember(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 2)
	h.startJob("n1", 2, api.JobSpec{GPUs: 1, Command: []string{"a"}})
	h.clock.Add(time.Hour)
	tok := h.addUser("mia", "member")
	var rep api.UsageReport
	if code := h.doAs(tok, "GET", "/api/v1/usage?since=2026-11-01", nil, &rep); code != http.StatusOK {
		t.Fatalf("member: %d", code)
	}
	if rep.Total.Jobs != 0 || !strings.Contains(strings.Join(rep.Notes, "\n"), "only your own jobs") {
		t.Errorf("member sees %d jobs; notes %q", rep.Total.Jobs, rep.Notes)
	}
	if rep := h.usage("since=2026-11-01"); rep.Total.Jobs != 1 {
		t.Errorf("admin sees %d jobs; want 1", rep.Total.Jobs)
	}
}

// A preempted attempt's waste runs from its last checkpoint, which the report reads from
// the store's events.
func TestUsagePreemptionWaste(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 2)
	j := h.startJob("n1", 2, api.JobSpec{GPUs: 2, Command: []string{"train"}})
	h.clock.Add(20 * time.Minute)
	h.beat("n1", 2, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateRunning, Events: []map[string]any{{"checkpoint": map[string]any{"step": 100}}}})
	h.clock.Add(30 * time.Minute)
	// The scheduler chose it as a victim; the agent stopped it.
	h.srv.mu.Lock()
	job, _ := h.srv.state.Job(j.ID)
	job.PreemptRequested = true
	err := h.srv.commit(context.Background(), &store.Batch{Jobs: []api.Job{job}, Events: []api.Event{{Time: h.clock.Now(), Actor: "scheduler",
		Kind: api.EventPreempt, JobID: j.ID, Attempt: 1, Reason: api.ReasonPreempted}}})
	h.srv.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	code := 143
	h.beat("n1", 2, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateFailed, ExitCode: &code})
	rep := h.usage("since=2026-11-01&until=2026-11-02")
	// 2 GPUs × the 30 minutes since the checkpoint: 1 GPU-hour lost.
	if tot := rep.Total; tot.Preemptions != 1 || !near(tot.PreemptionWasteGPUHours, 1, 1e-6) || tot.Failures[api.ReasonPreempted] != 1 {
		t.Errorf("total %+v; want one preemption wasting 1 GPU-hour", tot)
	}
}

func TestPrices(t *testing.T) {
	h := newHarness(t)
	var p api.Price
	if code := h.do("PUT", "/api/v1/prices/H100", api.Price{Model: "H100", PerGPUHour: 3.2, Currency: "EUR"}, &p); code != http.StatusOK || p.Model != "H100" {
		t.Fatalf("put: %d %+v", code, p)
	}
	if code := h.do("PUT", "/api/v1/prices/*", api.Price{PerGPUHour: 1, Currency: "EUR"}, nil); code != http.StatusOK {
		t.Fatalf("put *: %d", code)
	}
	h.restart()
	var list api.PriceList
	h.do("GET", "/api/v1/prices", nil, &list)
	if fmt.Sprint(list.Prices) != "[{* 1 EUR} {H100 3.2 EUR}]" {
		t.Fatalf("after a restart: %v", list.Prices)
	}
	// Every change is in the audit trail with its value before and after.
	evs := h.events(api.EventConfig)
	last := evs[len(evs)-1]
	if last.Actor != "admin" || string(last.After) != `{"model":"*","per_gpu_hour":1,"currency":"EUR"}` {
		t.Errorf("audit event %+v", last)
	}

	for _, c := range []struct {
		path  string
		body  any
		field string
	}{
		{"/api/v1/prices/H100", api.Price{Model: "A100", PerGPUHour: 1, Currency: "EUR"}, "model"},
		{"/api/v1/prices/H100", api.Price{PerGPUHour: -1, Currency: "EUR"}, "per_gpu_hour"},
		{"/api/v1/prices/H100", api.Price{PerGPUHour: 2e6, Currency: "EUR"}, "per_gpu_hour"},
		{"/api/v1/prices/H100", api.Price{PerGPUHour: 1, Currency: "US$"}, "currency"},
		{"/api/v1/prices/H100", api.Price{PerGPUHour: 1, Currency: "DOLLARSSS"}, "currency"},
		{"/api/v1/prices/A100", api.Price{PerGPUHour: 1, Currency: "USD"}, "currency"}, // the others are in EUR
		{"/api/v1/prices/" + strings.Repeat("x", 129), api.Price{PerGPUHour: 1, Currency: "EUR"}, "model"},
		{"/api/v1/prices/H100", map[string]any{"per_gpu_hour": "cheap"}, "per_gpu_hour"},
		{"/api/v1/prices/H100", map[string]any{"per_gpu_hour": 1, "vat": 0.2}, "vat"},
	} {
		var e api.Error
		if code := h.do("PUT", c.path, c.body, &e); code != http.StatusBadRequest || e.Field != c.field {
			t.Errorf("PUT %.30s %v: %d, field %q (%s); want 400 naming %s", c.path, c.body, code, e.Field, e.Message, c.field)
		}
	}

	member := h.addUser("mia", "member")
	if code := h.doAs(member, "PUT", "/api/v1/prices/H100", api.Price{PerGPUHour: 0}, nil); code != http.StatusForbidden {
		t.Errorf("a member sets a price: %d; want 403", code)
	}
	if code := h.doAs(member, "GET", "/api/v1/prices", nil, nil); code != http.StatusOK {
		t.Errorf("a member reads the prices: %d; want 200", code)
	}
	var e api.Error
	if code := h.do("DELETE", "/api/v1/prices/A100", nil, &e); code != http.StatusNotFound || e.Field != "model" {
		t.Errorf("delete an unset price: %d %+v; want 404", code, e)
	}
	if code := h.do("DELETE", "/api/v1/prices/H100", nil, nil); code != http.StatusNoContent {
		t.Errorf("delete: %d", code)
	}
	h.do("GET", "/api/v1/prices", nil, &list)
	if len(list.Prices) != 1 || list.Prices[0].Model != "*" {
		t.Errorf("after the delete: %v", list.Prices)
	}
}

// BenchmarkUsageReport measures a 30-day report over 10,000 jobs on 100 nodes: the part
// under the server's lock (copying jobs, attempts, nodes and prices) against the part
// computed with the lock free. Only the first delays scheduling.
func BenchmarkUsageReport(b *testing.B) {
	env := benchServer(b)
	s := env.srv
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	batch := &store.Batch{}
	for n := range 100 {
		node := api.Node{Name: fmt.Sprintf("gpu-%03d", n), State: api.NodeReady}
		for i := range 8 {
			node.GPUs = append(node.GPUs, api.GPU{Index: i, Model: []string{"H100", "A100"}[n%2]})
		}
		batch.Nodes = append(batch.Nodes, node)
	}
	for id := int64(1); id <= 10_000; id++ {
		submit := now.Add(-time.Duration(id*259) * time.Second) // spread over 30 days
		j := api.Job{ID: id, Spec: api.JobSpec{User: fmt.Sprintf("u%d", id%50), Team: fmt.Sprintf("t%d", id%8), Queue: "train", GPUs: 2},
			State: api.StateSucceeded, SubmitTime: submit, Attempts: 1}
		assign := submit.Add(time.Duration(id%600) * time.Second)
		end := assign.Add(time.Duration(id%7+1) * time.Hour)
		a := api.Attempt{JobID: id, N: 1, State: api.StateSucceeded, AssignTime: assign, StartTime: &assign,
			Placements: []api.Placement{{Node: fmt.Sprintf("gpu-%03d", id%100), GPUIndices: []int{int(id % 4), int(id%4) + 4},
				Usage: &api.Usage{Samples: 100, GPUUtilPct: api.Stat{Mean: float64(id % 100)}}}}}
		if end.Before(now) {
			a.EndTime = &end
			j.EndTime = &end
		} else {
			j.State, a.State = api.StateRunning, api.StateRunning
		}
		batch.Jobs = append(batch.Jobs, j)
		batch.Attempts = append(batch.Attempts, a)
	}
	s.mu.Lock()
	s.state.Apply(batch)
	s.mu.Unlock()
	q := report.Query{By: api.ByTeam, Since: now.Add(-30 * 24 * time.Hour), Until: now}
	admin := auth.Identity{User: "admin", Role: auth.RoleAdmin}
	b.Run("under-lock", func(b *testing.B) {
		for b.Loop() {
			s.usageInput(admin, q)
		}
	})
	for _, by := range []string{api.ByTeam, api.ByDay, api.ByHourOfWeek} {
		b.Run("compute-"+by, func(b *testing.B) {
			in := s.usageInput(admin, q)
			q.By = by
			for b.Loop() {
				if _, err := report.Compute(in, q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
