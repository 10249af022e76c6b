package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
	"github.com/rotahq/rota/internal/report"
	"github.com/rotahq/rota/internal/store"
)

// Accounting: GET /api/v1/usage and the prices per GPU-hour that give it a cost.
//
// A report reads a month or a year of jobs. It must never hold the server's lock while it
// computes, or scheduling and heartbeats would wait on a manager's spreadsheet: so the
// handler copies what the report needs under the lock (usageInput: jobs, attempts, nodes,
// prices; copies, nothing shared that anyone changes in place), releases it, and then
// reads events from the store and computes with the lock free. BenchmarkUsageReport
// measures both parts.

// settingPrices names the setting that holds the prices, an api.PriceList.
const settingPrices = "prices"

// Bounds on reports and prices.
const (
	defaultUsageWindow = 30 * 24 * time.Hour
	maxPrice           = 1e6
	maxPriceModel      = 128
	maxCurrency        = 8
)

func (s *Server) handleUsage(w http.ResponseWriter, r *http.Request) {
	q, e := usageQuery(r.URL.Query(), s.cfg.Clock.Now())
	if e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	who := caller(r)
	in := s.usageInput(who, q)
	if err := s.evictedUsage(r.Context(), &in, who, q); err != nil {
		storeError(w, "reading ended jobs", err)
		return
	}
	// From here on the lock is free: the store and the telemetry have their own.
	if err := s.usageEvents(r.Context(), &in, q); err != nil {
		writeError(w, http.StatusInternalServerError, &api.Error{Code: api.CodeInternal, Message: "reading the checkpoint and preempt events: " + err.Error()})
		return
	}
	s.liveUsage(in.Attempts)
	rep, err := report.Compute(in, q)
	var qe *report.QueryError
	switch {
	case errors.As(err, &qe):
		writeError(w, http.StatusBadRequest, invalid(qe.Param, "%s", qe.Message))
		return
	case err != nil:
		writeError(w, http.StatusInternalServerError, &api.Error{Code: api.CodeInternal, Message: err.Error()})
		return
	}
	if who.Role == auth.RoleMember {
		rep.Notes = append(rep.Notes, "role member: the report covers only your own jobs and those of your teams")
	}
	writeJSON(w, http.StatusOK, rep)
}

// usageQuery reads by, since and until, with their defaults: by team, until now, since
// 30 days before until. The bounds are RFC 3339 or YYYY-MM-DD (midnight UTC).
func usageQuery(v url.Values, now time.Time) (report.Query, *api.Error) {
	q := report.Query{Until: now.UTC()}
	var e *api.Error
	if q.By, e = queryString(v, "by", maxQueryTime); e != nil {
		return q, e
	}
	if q.By == "" {
		q.By = api.ByTeam
	}
	for _, field := range []string{"since", "until"} {
		dst := map[string]*time.Time{"since": &q.Since, "until": &q.Until}[field]
		s, e := queryString(v, field, maxQueryTime)
		if e != nil {
			return q, e
		}
		if s != "" {
			t, err := report.ParseTime(s)
			if err != nil {
				return q, invalid(field, "%s", err.Error())
			}
			*dst = t
		}
	}
	if v.Get("since") == "" {
		q.Since = q.Until.Add(-defaultUsageWindow)
	}
	if err := q.Check(); err != nil {
		var qe *report.QueryError
		errors.As(err, &qe)
		return q, invalid(qe.Param, "%s", qe.Message)
	}
	return q, nil
}

// usageInput copies, under the lock and nothing more, what a report of q needs: the
// jobs whose attempts may meet the window and that who may read (only the fields the
// accounting reads), their attempts, the nodes and the prices. Now is the server's
// clock, read once.
func (s *Server) usageInput(who auth.Identity, q report.Query) report.Input {
	s.mu.Lock()
	defer s.mu.Unlock()
	reads := s.readFilter(who)
	in := report.Input{Now: s.cfg.Clock.Now(), Nodes: s.state.Nodes(), Prices: s.prices()}
	wanted := func(j *api.Job) bool {
		// A terminal job's end is its last attempt's: one that ended before the window
		// has nothing in it. A job submitted after the window has not started in it.
		return j.SubmitTime.Before(q.Until) && !(j.State.Terminal() && j.EndTime != nil && j.EndTime.Before(q.Since)) && reads(j)
	}
	// State.Jobs copies and sorts whole jobs; the report needs neither, so its filter
	// serves as a visitor that returns false. The first pass counts, so the second
	// copies into slices of the right size: at 10,000 jobs, growing them was most of the
	// time under the lock (BenchmarkUsageReport).
	jobs, attempts := 0, 0
	s.state.Jobs(func(j *api.Job) bool {
		if wanted(j) {
			jobs++
			attempts += j.Attempts
		}
		return false
	})
	in.Jobs, in.Attempts = make([]api.Job, 0, jobs), make([]api.Attempt, 0, attempts)
	s.state.Jobs(func(j *api.Job) bool {
		if wanted(j) {
			in.Jobs = append(in.Jobs, accountedJob(j))
			in.Attempts = append(in.Attempts, s.state.Attempts(j.ID)...)
		}
		return false
	})
	return in
}

// accountedJob is the part of a job the accounting reads.
func accountedJob(j *api.Job) api.Job {
	return api.Job{ID: j.ID, State: j.State, SubmitTime: j.SubmitTime, EndTime: j.EndTime, Attempts: j.Attempts,
		IdleSince: j.IdleSince, LastCheckpoint: j.LastCheckpoint,
		Spec: api.JobSpec{User: j.Spec.User, Team: j.Spec.Team, Project: j.Spec.Project, Queue: j.Spec.Queue, GPUModel: j.Spec.GPUModel}}
}

// usageEvents reads, from the store and without the lock, what the report needs of the
// events: which ended attempts the scheduler chose as preemption victims, and the
// checkpoints of the preempted attempts (their waste runs from the last one).
func (s *Server) usageEvents(ctx context.Context, in *report.Input, q report.Query) error {
	var from time.Time
	for _, a := range in.Attempts {
		if mayBePreempted(a, q) && (from.IsZero() || a.AssignTime.Before(from)) {
			from = a.AssignTime
		}
	}
	if from.IsZero() {
		return nil
	}
	pre, err := s.store.Events(ctx, store.EventFilter{Kind: api.EventPreempt, Since: from, Until: q.Until})
	if err != nil {
		return err
	}
	in.Events = append(in.Events, pre...)
	victims := map[[2]int64]bool{}
	for _, e := range pre {
		victims[[2]int64{e.JobID, int64(e.Attempt)}] = true
	}
	for _, a := range in.Attempts {
		if !mayBePreempted(a, q) || (a.Reason != api.ReasonPreempted && !victims[[2]int64{a.JobID, int64(a.N)}]) {
			continue
		}
		cps, err := s.store.Events(ctx, store.EventFilter{JobID: a.JobID, Kind: api.EventCheckpoint, Since: a.AssignTime, Until: a.EndTime.Add(time.Second)})
		if err != nil {
			return err
		}
		in.Events = append(in.Events, cps...)
	}
	return nil
}

// mayBePreempted reports whether an attempt ended in the window other than by success:
// only those can be preemptions the report counts.
func mayBePreempted(a api.Attempt, q report.Query) bool {
	return a.EndTime != nil && !a.EndTime.Before(q.Since) && a.EndTime.Before(q.Until) && a.State != api.StateSucceeded
}

// liveUsage gives the running ranks of attempts what their telemetry says so far (ended
// ranks carry their own summary). The placements of those attempts are cloned first:
// they are shared with the state.
func (s *Server) liveUsage(attempts []api.Attempt) {
	for i := range attempts {
		a := &attempts[i]
		if a.EndTime != nil {
			continue
		}
		a.Placements = slices.Clone(a.Placements)
		for rank := range a.Placements {
			p := &a.Placements[rank]
			if p.State.Terminal() {
				continue
			}
			if u, ok := s.tel.usage(rankKey{a.JobID, a.N, rank}); ok {
				p.Usage = &u
			}
		}
	}
}

// prices returns the prices in force, by model. Callers hold s.mu.
func (s *Server) prices() []api.Price {
	var list api.PriceList
	if data, ok := s.state.Setting(settingPrices); ok {
		// Prices are validated before they are stored; a setting that does not decode
		// prices nothing.
		_ = json.Unmarshal(data, &list)
	}
	return list.Prices
}

func (s *Server) handlePrices(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	list := api.PriceList{Prices: orNone(s.prices())}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, list)
}

func orNone(p []api.Price) []api.Price {
	if p == nil {
		return []api.Price{}
	}
	return p
}

func (s *Server) handlePutPrice(w http.ResponseWriter, r *http.Request) {
	var p api.Price
	if status, e := s.decodeJSON(w, r, &p); e != nil {
		writeError(w, status, e)
		return
	}
	model := r.PathValue("model")
	if p.Model != "" && p.Model != model {
		writeError(w, http.StatusBadRequest, invalid("model", "the body names model %q but the path %q; give one model", truncateName(p.Model), truncateName(model)))
		return
	}
	p.Model = model
	if e := validatePrice(p); e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.prices()
	var before any
	for i, old := range list {
		if old.Model == model {
			before = old
			list = slices.Delete(list, i, i+1)
			break
		}
	}
	// One currency for all prices, or the costs of two models could not be added.
	for _, other := range list {
		if other.Currency != p.Currency {
			writeError(w, http.StatusBadRequest, invalid("currency", "the other prices are in %q; give every price in one currency (delete the others first to change it)", other.Currency))
			return
		}
	}
	list = append(list, p)
	slices.SortFunc(list, func(a, b api.Price) int { return strings.Compare(a.Model, b.Model) })
	ev := withChange(audit(r, s.cfg.Clock.Now(), api.EventConfig, "set the price of a %s GPU-hour to %v %s", model, p.PerGPUHour, p.Currency), before, p)
	s.adminCommit(w, r, s.priceBatch(list, ev), http.StatusOK, p)
}

func (s *Server) handleDeletePrice(w http.ResponseWriter, r *http.Request) {
	model := r.PathValue("model")
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.prices()
	i := slices.IndexFunc(list, func(p api.Price) bool { return p.Model == model })
	if i < 0 {
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Field: "model", Message: fmt.Sprintf("no price is set for model %q", truncateName(model))})
		return
	}
	ev := withChange(audit(r, s.cfg.Clock.Now(), api.EventConfig, "removed the price of %s", model), list[i], nil)
	list = slices.Delete(list, i, i+1)
	s.adminCommit(w, r, s.priceBatch(list, ev), http.StatusNoContent, nil)
}

// priceBatch stores list as the prices, with its audit event.
func (s *Server) priceBatch(list []api.Price, ev api.Event) *store.Batch {
	data, _ := json.Marshal(api.PriceList{Prices: orNone(list)})
	return &store.Batch{Settings: []store.Setting{{Name: settingPrices, Data: data}}, Events: []api.Event{ev}}
}

// validatePrice checks a price, naming the field at fault.
func validatePrice(p api.Price) *api.Error {
	switch {
	case p.Model == "":
		return invalid("model", "is empty: give a GPU model as nodes report it (such as H100), or * for the models without a price of their own")
	case len(p.Model) > maxPriceModel || strings.ContainsFunc(p.Model, func(r rune) bool { return !unicode.IsPrint(r) }):
		return invalid("model", "%q is not a GPU model: at most %d printable characters", truncateName(p.Model), maxPriceModel)
	case math.IsNaN(p.PerGPUHour) || p.PerGPUHour < 0 || p.PerGPUHour > maxPrice:
		return invalid("per_gpu_hour", "must be a number from 0 to %.0f, got %v", float64(maxPrice), p.PerGPUHour)
	case len(p.Currency) > maxCurrency || strings.ContainsFunc(p.Currency, func(r rune) bool { return !('A' <= r && r <= 'Z' || 'a' <= r && r <= 'z') }):
		return invalid("currency", "%q is not a currency: at most %d letters, such as USD or EUR", truncateName(p.Currency), maxCurrency)
	}
	return nil
}

// evictedUsage adds to in the jobs that ended in or after the report's window but
// before the KeepEnded one, which only the store holds, and their attempts. The store is
// read without the lock; a job that left memory meanwhile is in in already and is
// skipped.
func (s *Server) evictedUsage(ctx context.Context, in *report.Input, who auth.Identity, q report.Query) error {
	s.mu.Lock()
	before, n := s.state.EvictedBefore(), s.state.EvictedCount()
	s.mu.Unlock()
	if n == 0 || !q.Since.Before(before) {
		return nil
	}
	jobs, err := s.store.JobsPage(ctx, store.JobFilter{States: endedOf(nil), EndedBefore: before, EndedSince: q.Since, SubmitUntil: q.Until})
	if err != nil || len(jobs) == 0 {
		return err
	}
	atts, err := s.store.AttemptsBetween(ctx, jobs[0].ID, jobs[len(jobs)-1].ID)
	if err != nil {
		return err
	}
	have := make(map[int64]bool, len(in.Jobs))
	for _, j := range in.Jobs {
		have[j.ID] = true
	}
	keep := map[int64]bool{}
	s.mu.Lock()
	reads := s.readFilter(who)
	for i := range jobs {
		j := &jobs[i]
		if _, ok := s.state.Evicted(j.ID); ok && !have[j.ID] && reads(j) {
			keep[j.ID] = true
			in.Jobs = append(in.Jobs, accountedJob(j))
		}
	}
	s.mu.Unlock()
	for _, a := range atts {
		if keep[a.JobID] {
			in.Attempts = append(in.Attempts, a)
		}
	}
	return nil
}
