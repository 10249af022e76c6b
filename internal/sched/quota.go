package sched

import (
	"fmt"
	"strconv"
)

// quotas tracks each team's GPUs in use per model, from the running jobs and the
// placements of this cycle, against the quotas of the snapshot. It counts in milli-GPU,
// so that a share of a GPU is charged as a share.
type quotas struct {
	teams map[string]Team           // nil when no team has a quota: admission admits everything
	used  map[string]map[string]int // team -> model -> milli-GPU held
}

// newQuotas counts what running jobs hold. It looks GPUs up on every node of the snapshot,
// schedulable or not, since a drained node's jobs still count against their team.
func newQuotas(s *Snapshot, st *state) *quotas {
	q := &quotas{used: map[string]map[string]int{}}
	if !anyQuota(s.Teams) {
		return q // nothing to count against
	}
	q.teams = s.Teams
	for _, r := range s.Running {
		for _, a := range r.Allocs {
			ni, ok := st.allNodes[a.Node]
			if !ok || len(a.GPUIndices) == 0 {
				continue
			}
			n := &s.Nodes[ni]
			if len(n.GPUs) == 0 {
				// The node no longer reports the GPUs the job holds (its agent lost them, or
				// restarted without them): their model is unknown, and no new work can land
				// on them either.
				continue
			}
			if single(n.GPUs) {
				// The common case: one model on the node, so no per-GPU lookup.
				q.add(r.Team, n.GPUs[0].Model, a.milli())
				continue
			}
			each := MilliGPU
			if a.GPUShare > 0 {
				each = a.GPUShare
			}
			for _, idx := range a.GPUIndices {
				for _, g := range n.GPUs {
					if g.Index == idx {
						q.add(r.Team, g.Model, each)
						break
					}
				}
			}
		}
	}
	return q
}

func anyQuota(teams map[string]Team) bool {
	for _, t := range teams {
		if len(t.Quota) > 0 {
			return true
		}
	}
	return false
}

func (q *quotas) add(team, model string, milli int) {
	m := q.used[team]
	if m == nil {
		m = map[string]int{}
		q.used[team] = m
	}
	m[model] += milli
}

// verdict is the outcome of admission for one model.
type verdict struct {
	limited   bool // the team has a quota for the model
	ok        bool // within the limit
	borrowing bool // beyond guaranteed
	key       string
	used      int // milli-GPU
	limit     int // milli-GPU
}

// admit checks a job of the team asking for milli-GPUs of model against the team's
// quota: the entry for the model, else the "" entry for models the quota does not name.
// Teams without a matching entry, and CPU-only jobs, are not limited.
func (q *quotas) admit(team, model string, milli int) verdict {
	t, ok := q.teams[team]
	if !ok || milli == 0 {
		return verdict{ok: true}
	}
	key := model
	qt, ok := t.Quota[model]
	if !ok {
		key = ""
		if qt, ok = t.Quota[""]; !ok {
			return verdict{ok: true}
		}
	}
	used := 0
	for m, n := range q.used[team] {
		if m == key || (key == "" && !named(t.Quota, m)) {
			used += n
		}
	}
	limit := max(qt.Limit, qt.Guaranteed) * MilliGPU
	return verdict{limited: true, ok: used+milli <= limit, borrowing: used+milli > qt.Guaranteed*MilliGPU, key: key, used: used, limit: limit}
}

func named(quota map[string]Quota, model string) bool {
	_, ok := quota[model]
	return ok
}

// admitDemand runs admission for a job. A job that names its model is checked against
// that model's quota. A job that takes any model, or any of a list, may use only the
// models whose quota admits it, so it cannot slip past a per-model limit, and is refused
// only when none does; d.deny records the others. The verdict returned is the one that
// refused (for a list, its most preferred model's), when every model refuses.
func (c *cycle) admitDemand(d *demand) (verdict, bool) {
	if c.quotas.teams == nil || d.gpus == 0 {
		return verdict{ok: true}, true
	}
	total := c.milliOf(d)
	if d.model != anyModel && d.models == nil {
		v := c.quotas.admit(d.team, d.modelName, total)
		return v, v.ok
	}
	var refused, admitted verdict
	allowed, denied := 0, 0
	try := func(m int, name string) {
		v := c.quotas.admit(d.team, name, total)
		if v.ok {
			// The verdict returned is the most favourable admitting one: in quota where
			// some model allows it, so the job keeps its right to reclaim borrowed GPUs.
			if allowed == 0 || admitted.borrowing && !v.borrowing || !admitted.limited && v.limited && !v.borrowing {
				admitted = v
			}
			allowed++
			return
		}
		if denied == 0 {
			refused = v
		}
		denied++
		if m < 0 {
			return // a listed model no schedulable node has: nothing to deny
		}
		if d.deny == nil {
			d.deny = make([]bool, len(c.st.models))
		}
		d.deny[m] = true
	}
	if d.models != nil {
		for _, name := range d.models {
			m, ok := c.st.modelByName[name]
			if !ok {
				m = -1
			}
			try(m, name)
		}
	} else {
		for m := range c.st.models {
			try(m, c.st.models[m].name)
		}
	}
	if allowed == 0 && denied > 0 {
		return refused, false
	}
	admitted.ok = true
	return admitted, true
}

// quotaReason explains a refusal, e.g. "team vision uses 14 of its 16-GPU limit; this job
// needs 4". need is in milli-GPU.
func (c *cycle) quotaReason(team string, v verdict, need int) Reason {
	r := Reason{Code: ReasonQuotaExceeded, Team: team, Used: ceilGPUs(v.used), Limit: v.limit / MilliGPU}
	if !c.opts.Terse {
		what := "GPU limit"
		if v.key != "" {
			what = "GPU " + v.key + " limit"
		}
		r.Message = fmt.Sprintf("team %s uses %s of its %d-%s; this job needs %s", team, fmtGPUs(v.used), v.limit/MilliGPU, what, fmtGPUs(need))
	}
	return r
}

// ceilGPUs rounds milli-GPUs up to whole GPUs.
func ceilGPUs(milli int) int { return (milli + MilliGPU - 1) / MilliGPU }

// fmtGPUs writes milli-GPUs as GPUs: "4", "2.5", "0.25".
func fmtGPUs(milli int) string {
	if milli%MilliGPU == 0 {
		return fmt.Sprint(milli / MilliGPU)
	}
	return strconv.FormatFloat(float64(milli)/MilliGPU, 'f', -1, 64)
}

// userKey names one user's jobs in one queue.
type userKey struct{ queue, user string }

// userGPUs counts GPUs held per user and queue, for queues with a per-user cap; nil when
// no queue has one.
func userGPUs(s *Snapshot) map[userKey]int {
	capped := false
	for _, q := range s.Queues {
		capped = capped || q.UserGPULimit > 0
	}
	if !capped {
		return nil
	}
	out := map[userKey]int{}
	for _, r := range s.Running {
		if s.Queues[r.Queue].UserGPULimit > 0 {
			for _, a := range r.Allocs {
				out[userKey{r.Queue, r.User}] += a.milli()
			}
		}
	}
	return out
}

// userLimit returns the refusal for a job that would take its user beyond the queue's
// per-user cap, if it would; milli is what the job needs, in milli-GPU.
func (c *cycle) userLimit(j *Job, q *Queue, milli int) (Reason, bool) {
	if q.UserGPULimit <= 0 || milli == 0 {
		return Reason{}, false
	}
	used := c.users[userKey{q.Name, j.User}]
	if used+milli <= q.UserGPULimit*MilliGPU {
		return Reason{}, false
	}
	r := Reason{Code: ReasonUserLimit, User: j.User, Used: ceilGPUs(used), Limit: q.UserGPULimit}
	if !c.opts.Terse {
		r.Message = fmt.Sprintf("user %s holds %s of the %d GPUs one user may hold in queue %s; this job needs %s",
			j.User, fmtGPUs(used), q.UserGPULimit, q.Name, fmtGPUs(milli))
	}
	return r, true
}
