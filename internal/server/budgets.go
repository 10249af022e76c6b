package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/notify"
	"github.com/rotahq/rota/internal/store"
)

// GPU-hour budgets (api.Budget) of teams and projects, per calendar period in UTC.
//
// Each cycle sums the GPU-hours every budgeted team and project used in its current
// period, as `rota usage` counts them (GPUs allocated times run time, running attempts up
// to now), from the attempts in memory and, for the jobs already evicted from memory, from
// spans read once from the store (budgetLedger). Passing the soft limit records an event
// and tells the team's webhooks, once per period; at the hard limit the scope's pending
// jobs are held out of the snapshot with reasonBudget until the period ends or the budget
// is raised. Running jobs go on: a budget stops work from starting, never running work.

// reasonBudget holds a pending job whose team or project has used its hard budget.
const reasonBudget = "BudgetExhausted"

// settingBudgetMarks names the setting that records, per scope and limit, the last period
// whose crossing was announced, so that a restart does not announce it again.
const settingBudgetMarks = "budget_marks"

// budgetState is one budget as it stands in its current period.
type budgetState struct {
	team, project string
	budget        api.Budget
	period        string
	start, end    time.Time
	used          float64 // GPU-hours
}

// who names the budget's owner: "team vision" or "project det".
func (b *budgetState) who() string {
	if b.project != "" {
		return "project " + b.project
	}
	return "team " + b.team
}

func (b *budgetState) key() string { return b.team + "/" + b.project }

func (b *budgetState) soft() bool { return b.budget.Soft > 0 && b.used >= b.budget.Soft }
func (b *budgetState) hard() bool { return b.budget.Hard > 0 && b.used >= b.budget.Hard }

// holdMessage is the pending reason of a job held by an exhausted budget.
func (b *budgetState) holdMessage() string {
	return fmt.Sprintf("%s used %s of its %s GPU-hours budget for %s; new jobs start when the period ends or the budget is raised",
		b.who(), gpuHours(b.used), gpuHours(b.budget.Hard), b.period)
}

// warning is the line `rota show` and `rota why` give a job whose budget passed its soft limit.
func (b *budgetState) warning() string {
	msg := fmt.Sprintf("%s used %s of its %s GPU-hours soft budget for %s", b.who(), gpuHours(b.used), gpuHours(b.budget.Soft), b.period)
	if b.budget.Hard > 0 {
		msg += fmt.Sprintf("; at %s new jobs are held until the period ends", gpuHours(b.budget.Hard))
	}
	return msg
}

// gpuHours writes GPU-hours for people: "1,000", "12", "2.5".
func gpuHours(v float64) string {
	if v < 10 && v != math.Trunc(v) {
		return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
	}
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// budgetLedger holds the GPU use of jobs evicted from memory that counts in some current
// period: spans of attempts from from on, of jobs that ended before before. It grows as
// jobs leave memory, reading only the newly evicted ones, and starts afresh when the
// earliest period it serves moves.
type budgetLedger struct {
	// state is the state the ledger complements: a state read afresh (after a commit of
	// unknown outcome) holds other jobs in memory, so the ledger starts again with it.
	state        *cluster.State
	from, before time.Time
	spans        []cluster.Span
}

// earliestPeriod is the start of the earliest current period of any kind at now.
func earliestPeriod(now time.Time) time.Time {
	from := now
	for _, kind := range api.BudgetPeriods {
		if start, _, _ := api.PeriodOf(kind, now); start.Before(from) {
			from = start
		}
	}
	return from
}

// refreshBudgets brings the ledger up to date with the jobs evicted since it last read.
// It reads the store without s.mu; Cycle calls it under cycleMu, which keeps it to one
// caller at a time.
func (s *Server) refreshBudgets(ctx context.Context, now time.Time) error {
	s.mu.Lock()
	budgeted := slices.ContainsFunc(s.state.Teams(), hasBudget)
	before, state := s.state.EvictedBefore(), s.state
	s.mu.Unlock()
	l := &s.ledger
	if !budgeted || l.state != state {
		*l = budgetLedger{state: state}
	}
	if !budgeted {
		return nil
	}
	from := earliestPeriod(now)
	if !from.Equal(l.from) {
		// A new period: what ended before it no longer counts.
		l.from = from
		l.spans = slices.DeleteFunc(l.spans, func(sp cluster.Span) bool { return !sp.End.After(from) })
	}
	if !before.After(l.before) {
		return nil
	}
	since := l.before
	if since.Before(from) {
		since = from
	}
	jobs, err := s.store.JobsPage(ctx, store.JobFilter{States: endedOf(nil), EndedBefore: before, EndedSince: since})
	if err != nil {
		return fmt.Errorf("reading ended jobs for budgets: %w", err)
	}
	if len(jobs) > 0 {
		atts, err := s.store.AttemptsBetween(ctx, jobs[0].ID, jobs[len(jobs)-1].ID)
		if err != nil {
			return fmt.Errorf("reading ended attempts for budgets: %w", err)
		}
		byID := make(map[int64]*api.Job, len(jobs))
		for i := range jobs {
			byID[jobs[i].ID] = &jobs[i]
		}
		s.mu.Lock()
		if s.state != state {
			// Read afresh meanwhile: the next cycle starts the ledger again.
			s.mu.Unlock()
			return nil
		}
		for _, a := range atts {
			j, ok := byID[a.JobID]
			if !ok {
				continue
			}
			// Only jobs memory no longer holds: the others are counted from memory.
			if _, evicted := s.state.Evicted(j.ID); !evicted {
				continue
			}
			if sp, ok := cluster.SpanOf(j, a, now); ok && sp.End.After(from) {
				l.spans = append(l.spans, sp)
			}
		}
		s.mu.Unlock()
	}
	l.before = before
	return nil
}

func hasBudget(t api.Team) bool {
	return t.Budget != nil || slices.ContainsFunc(t.Projects, func(p api.Project) bool { return p.Budget != nil })
}

// budgetStates sums every budget's use in its current period at now. Callers hold s.mu
// and cycleMu (for the ledger).
func (s *Server) budgetStates(now time.Time) []budgetState {
	var out []budgetState
	for _, t := range s.state.Teams() {
		add := func(project string, b *api.Budget) {
			if b != nil {
				start, end, name := api.PeriodOf(b.Period, now)
				out = append(out, budgetState{team: t.Name, project: project, budget: *b, period: name, start: start, end: end})
			}
		}
		add("", t.Budget)
		for _, p := range t.Projects {
			add(p.Name, p.Budget)
		}
	}
	if len(out) == 0 {
		return nil
	}
	budgeted := map[string]bool{}
	for _, b := range out {
		budgeted[b.team] = true
	}
	from := earliestPeriod(now)
	spans := s.state.Spans(from, now, func(team string) bool { return budgeted[team] })
	if s.ledger.state == s.state {
		spans = append(spans, s.ledger.spans...)
	}
	// In team order, so that each budget reads only its own team's spans.
	slices.SortFunc(spans, func(a, b cluster.Span) int { return strings.Compare(a.Team, b.Team) })
	for i := range out {
		b := &out[i]
		lo, _ := slices.BinarySearchFunc(spans, b.team, func(sp cluster.Span, team string) int { return strings.Compare(sp.Team, team) })
		hi := lo
		for hi < len(spans) && spans[hi].Team == b.team {
			hi++
		}
		sec := 0.0
		for _, sp := range spans[lo:hi] {
			if b.project != "" && sp.Project != b.project {
				continue
			}
			start, end := maxTime(sp.Start, b.start), sp.End
			if end.After(start) {
				sec += sp.GPUs * end.Sub(start).Seconds()
			}
		}
		b.used = sec / 3600
	}
	return out
}

// maxTime is the later of a and b.
func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// budgetMarks reads which crossings were announced: scope and limit to period.
func budgetMarks(st *cluster.State) map[string]string {
	m := map[string]string{}
	if data, ok := st.Setting(settingBudgetMarks); ok {
		_ = json.Unmarshal(data, &m) // written by this file; unreadable means none
	}
	return m
}

// checkBudgets computes the budgets at now, keeps them for admission and for show and
// why, and records an event for each soft or hard limit passed for the first time in its
// period; it returns those events, for the webhooks once they are committed. Callers hold
// s.mu.
func (s *Server) checkBudgets(b *store.Batch, now time.Time) []budgetNotice {
	s.budgets = s.budgetStates(now)
	if len(s.budgets) == 0 {
		return nil
	}
	var crossed []budgetNotice
	marks := budgetMarks(s.state)
	changed := false
	for i := range s.budgets {
		bs := &s.budgets[i]
		for _, limit := range []struct {
			name   string
			passed bool
			msg    string
		}{
			{"soft", bs.soft() && !bs.hard(), bs.warning()},
			{"hard", bs.hard(), bs.holdMessage()},
		} {
			k := bs.key() + "/" + limit.name
			if !limit.passed || marks[k] == bs.period {
				continue
			}
			marks[k] = bs.period
			changed = true
			ev := api.Event{Time: now, Actor: "scheduler", Kind: api.EventBudget, Reason: limit.name, Message: limit.msg}
			if bs.project != "" {
				ev.Message = "team " + bs.team + ", " + ev.Message
			}
			b.Events = append(b.Events, ev)
			crossed = append(crossed, budgetNotice{team: bs.team, ev: ev})
		}
	}
	if changed {
		// Marks of periods that are over are dropped, so the setting stays small.
		for k, period := range marks {
			if !slices.ContainsFunc(s.budgets, func(bs budgetState) bool { return strings.HasPrefix(k, bs.key()+"/") && bs.period == period }) {
				delete(marks, k)
			}
		}
		data, _ := json.Marshal(marks) // a map of strings always marshals
		b.Settings = append(b.Settings, store.Setting{Name: settingBudgetMarks, Data: data})
	}
	return crossed
}

// budgetNotice is a budget limit passed, to tell the team's webhooks.
type budgetNotice struct {
	team string
	ev   api.Event
}

// notifyBudgets tells the webhooks of each team whose budget passed a limit, those that
// asked for "budget" or name no events. Callers hold s.mu.
func (s *Server) notifyBudgets(list []budgetNotice) {
	if s.notifier == nil || len(list) == 0 {
		return
	}
	settings := notifySettings(s.state)
	for _, n := range list {
		t, ok := s.state.Team(n.team)
		if !ok {
			continue
		}
		for _, h := range t.Notify {
			if len(h.Events) > 0 && !slices.Contains(h.Events, api.NotifyBudget) {
				continue
			}
			if !allowedURL(h.URL, settings.URLPrefixes) {
				s.log.Warn("webhook not sent: its URL is outside the cluster's url_prefixes", "team", n.team)
				continue
			}
			id := newNotificationID()
			body, _ := json.Marshal(api.Notification{ID: id, Time: n.ev.Time, Event: api.NotifyBudget,
				Cluster: s.clusterID, Message: n.ev.Message}) // plain data: it always marshals
			s.notifier.q.Enqueue(notify.Delivery{ID: id, Event: api.NotifyBudget, URL: h.URL, Body: body, Secret: settings.Secret})
		}
	}
}

// budgetHold returns the exhausted budget that holds a job of team and project, if any:
// the team's first, then the project's.
func (s *Server) budgetHold(spec *api.JobSpec) (*budgetState, bool) {
	for i := range s.budgets {
		bs := &s.budgets[i]
		if bs.team == spec.Team && (bs.project == "" || bs.project == spec.Project) && bs.hard() {
			return bs, true
		}
	}
	return nil, false
}

// budgetWarning is the soft-limit warning for a job of team and project, or "".
func (s *Server) budgetWarning(spec *api.JobSpec) string {
	if bs, ok := s.budgetHold(spec); ok {
		return bs.holdMessage()
	}
	var lines []string
	for i := range s.budgets {
		bs := &s.budgets[i]
		if bs.team == spec.Team && (bs.project == "" || bs.project == spec.Project) && bs.soft() {
			lines = append(lines, bs.warning())
		}
	}
	return strings.Join(lines, "; ")
}
