package sched

import (
	"fmt"
	"strconv"
)

// quotas tracks each team's and each project's GPUs in use per model, and CPU cores and
// memory requested, from the running jobs and the placements of this cycle, against the
// quotas of the snapshot. It counts GPUs in milli-GPU, so that a share of a GPU is charged
// as a share.
type quotas struct {
	teams map[string]Team // nil when no team has a quota: admission admits everything
	// used maps a scope (a team's name, or scopeOf(team, project)) to what it holds by
	// resource: a GPU model's name, cpuKey or memKey.
	used map[string]map[string]int
	// compute is set when some team or project caps CPUs or memory: only then are they
	// counted.
	compute bool
}

// Resources other than GPUs, keyed apart from any model's name.
const (
	cpuKey = "\x00cpus"
	memKey = "\x00memory_mb"
)

// scopeOf names a project's line in quotas.used; team names cannot hold the separator.
func scopeOf(team, project string) string { return team + "/" + project }

// newQuotas counts what running jobs hold. It looks GPUs up on every node of the snapshot,
// schedulable or not, since a drained node's jobs still count against their team.
func newQuotas(s *Snapshot, st *state) *quotas {
	q := &quotas{used: map[string]map[string]int{}}
	if !anyQuota(s.Teams) {
		return q // nothing to count against
	}
	q.teams = s.Teams
	q.compute = anyCompute(s.Teams)
	for _, r := range s.Running {
		project := q.project(r.Team, r.Project)
		cpus, mem := 0, 0
		for _, a := range r.Allocs {
			cpus += a.CPUs
			mem += int(a.MemoryMB)
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
				q.add(r.Team, project, n.GPUs[0].Model, a.milli())
				continue
			}
			each := MilliGPU
			if a.GPUShare > 0 {
				each = a.GPUShare
			}
			for _, idx := range a.GPUIndices {
				for _, g := range n.GPUs {
					if g.Index == idx {
						q.add(r.Team, project, g.Model, each)
						break
					}
				}
			}
		}
		if q.compute {
			q.add(r.Team, project, cpuKey, cpus)
			q.add(r.Team, project, memKey, mem)
		}
	}
	return q
}

func anyCompute(teams map[string]Team) bool {
	for _, t := range teams {
		if t.CPU != nil || t.Memory != nil {
			return true
		}
		for _, p := range t.Projects {
			if p.CPU != nil || p.Memory != nil {
				return true
			}
		}
	}
	return false
}

func anyQuota(teams map[string]Team) bool {
	for _, t := range teams {
		if len(t.Quota) > 0 || t.CPU != nil || t.Memory != nil || len(t.Projects) > 0 {
			return true
		}
	}
	return false
}

// project returns the name of the team's project, or "" where the team has no such
// project (the job then counts against the team only).
func (q *quotas) project(team, project string) string {
	if project == "" {
		return ""
	}
	if _, ok := q.teams[team].Projects[project]; !ok {
		return ""
	}
	return project
}

// add charges n of resource key to the team and, if set, its project.
func (q *quotas) add(team, project, key string, n int) {
	if n == 0 {
		return
	}
	q.addTo(team, key, n)
	if project != "" {
		q.addTo(scopeOf(team, project), key, n)
	}
}

func (q *quotas) addTo(scope, key string, n int) {
	m := q.used[scope]
	if m == nil {
		m = map[string]int{}
		q.used[scope] = m
	}
	m[key] += n
}

// verdict is the outcome of admission for one model.
type verdict struct {
	limited   bool // the team or project has a quota for the model
	ok        bool // within the limits
	borrowing bool // beyond the team's guarantee: borrows across teams
	inTeam    bool // beyond the project's guarantee, within the team's
	// What refused, or what the job is counted against: project is set where the
	// project's quota refused; resource is cpuKey or memKey for CPU or memory.
	project  string
	resource string
	key      string
	used     int // milli-GPU, CPU cores or memory MB
	limit    int // likewise
}

// inQuota reports whether the job runs within a guarantee, which gives it the right to
// reclaim what others borrow.
func (v verdict) inQuota() bool { return v.limited && !v.borrowing && !v.inTeam }

// rank orders admitting verdicts from the most favourable: in quota, not limited,
// borrowing inside the team, borrowing across teams.
func (v verdict) rank() int {
	switch {
	case v.inQuota():
		return 0
	case !v.limited:
		return 1
	case v.inTeam:
		return 2
	default:
		return 3
	}
}

// level checks milli more of model against one quota map, whose used counts are in
// used: the entry for the model, else the "" entry for models the map does not name.
func level(quota map[string]Quota, used map[string]int, model string, milli int) verdict {
	key := model
	qt, ok := quota[model]
	if !ok {
		key = ""
		if qt, ok = quota[""]; !ok {
			return verdict{ok: true}
		}
	}
	n := 0
	for m, u := range used {
		if m == cpuKey || m == memKey {
			continue
		}
		if m == key || (key == "" && !named(quota, m)) {
			n += u
		}
	}
	limit := max(qt.Limit, qt.Guaranteed) * MilliGPU
	return verdict{limited: true, ok: n+milli <= limit, borrowing: n+milli > qt.Guaranteed*MilliGPU, key: key, used: n, limit: limit}
}

// admit checks a job of the team (and project, "" for none) asking for milli-GPUs of
// model against the team's quota and then the project's. Teams without a matching entry,
// and CPU-only jobs, are not limited. A project job within its project's guarantee runs
// in quota; beyond it, it borrows inside the team while the team is within its own
// guarantee, and across teams beyond that.
func (q *quotas) admit(team, project, model string, milli int) verdict {
	t, ok := q.teams[team]
	if !ok || milli == 0 {
		return verdict{ok: true}
	}
	v := level(t.Quota, q.used[team], model, milli)
	if !v.ok {
		return v
	}
	p, ok := t.Projects[project]
	if project == "" || !ok {
		return v
	}
	pv := level(p.Quota, q.used[scopeOf(team, project)], model, milli)
	if !pv.ok {
		pv.project = project
		return pv
	}
	if !pv.limited {
		return v
	}
	// The project's guarantee is part of the team's, so work within it is the team's by
	// right whatever the team's other work holds.
	if !pv.borrowing {
		return pv
	}
	if !v.limited {
		return v // the team gives no guarantee to borrow from, nor takes any back
	}
	pv.inTeam, pv.borrowing = !v.borrowing, v.borrowing
	return pv
}

// admitCompute checks the job's CPU cores and memory, over all its nodes, against the
// caps of its team and project; it returns the refusal, if any.
func (q *quotas) admitCompute(team, project string, cpus, mem int) (verdict, bool) {
	t, ok := q.teams[team]
	if !ok || !q.compute {
		return verdict{}, false
	}
	check := func(scope, project string, cq *Quota, key string, n int) (verdict, bool) {
		if cq == nil || n == 0 {
			return verdict{}, false
		}
		used := q.used[scope][key]
		limit := max(cq.Limit, cq.Guaranteed)
		if used+n <= limit {
			return verdict{}, false
		}
		return verdict{limited: true, project: project, resource: key, used: used, limit: limit}, true
	}
	if v, over := check(team, "", t.CPU, cpuKey, cpus); over {
		return v, true
	}
	if v, over := check(team, "", t.Memory, memKey, mem); over {
		return v, true
	}
	if p, ok := t.Projects[project]; ok && project != "" {
		scope := scopeOf(team, project)
		if v, over := check(scope, project, p.CPU, cpuKey, cpus); over {
			return v, true
		}
		if v, over := check(scope, project, p.Memory, memKey, mem); over {
			return v, true
		}
	}
	return verdict{}, false
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
	if c.quotas.teams == nil {
		return verdict{ok: true}, true
	}
	if v, over := c.quotas.admitCompute(d.team, d.project, d.cpus*d.nodes, int(d.mem)*d.nodes); over {
		return v, false
	}
	if d.gpus == 0 {
		return verdict{ok: true}, true
	}
	total := c.milliOf(d)
	if d.model != anyModel && d.models == nil {
		v := c.quotas.admit(d.team, d.project, d.modelName, total)
		return v, v.ok
	}
	var refused, admitted verdict
	allowed, denied := 0, 0
	try := func(m int, name string) {
		v := c.quotas.admit(d.team, d.project, name, total)
		if v.ok {
			// The verdict returned is the most favourable admitting one: in quota where
			// some model allows it, so the job keeps its right to reclaim borrowed GPUs.
			if allowed == 0 || v.rank() < admitted.rank() {
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
// needs 4", or "project detection of team vision uses 6 of its 8-GPU A100 limit; this
// job needs 4". need is in milli-GPU; CPU and memory refusals name their own need.
func (c *cycle) quotaReason(team string, v verdict, d *demand) Reason {
	r := Reason{Code: ReasonQuotaExceeded, Team: team, Project: v.project}
	if c.opts.Terse && v.resource == "" {
		r.Used, r.Limit = ceilGPUs(v.used), v.limit/MilliGPU
		return r
	}
	// Built only for the rarer refusals: a team's GPU limit, the common one, formats
	// in one call.
	who := func() string {
		if v.project != "" {
			return "project " + v.project + " of team " + team
		}
		return "team " + team
	}
	switch v.resource {
	case cpuKey, memKey:
		need := d.cpus * d.nodes
		unit, what := "CPU", "cpus"
		if v.resource == memKey {
			need, unit, what = int(d.mem)*d.nodes, "MB memory", "memory_mb"
		}
		r.Resource, r.Used, r.Limit = what, v.used, v.limit
		if !c.opts.Terse {
			r.Message = fmt.Sprintf("%s requests %d of its %d-%s limit; this job needs %d", who(), v.used, v.limit, unit, need)
		}
		return r
	}
	need := c.milliOf(d)
	r.Used, r.Limit = ceilGPUs(v.used), v.limit/MilliGPU
	if !c.opts.Terse {
		what := "GPU limit"
		if v.key != "" {
			what = "GPU " + v.key + " limit"
		}
		if v.project == "" {
			r.Message = fmt.Sprintf("team %s uses %s of its %d-%s; this job needs %s", team, fmtGPUs(v.used), v.limit/MilliGPU, what, fmtGPUs(need))
		} else {
			r.Message = fmt.Sprintf("%s uses %s of its %d-%s; this job needs %s", who(), fmtGPUs(v.used), v.limit/MilliGPU, what, fmtGPUs(need))
		}
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

// Guarantees tells, from a snapshot's running jobs, how much of its GPU guarantee each
// team and project leaves unused. Only a job that fits in what is left runs within a
// guarantee, the right a job needs to reclaim GPUs another team borrows, or, inside its
// team, another project borrows.
type Guarantees struct{ q *quotas }

// NewGuarantees counts what the snapshot's running jobs hold against its teams' quotas.
func NewGuarantees(s *Snapshot) Guarantees {
	st := &state{allNodes: make(map[string]int, len(s.Nodes))}
	for i := range s.Nodes {
		st.allNodes[s.Nodes[i].Name] = i
	}
	return Guarantees{newQuotas(s, st)}
}

// MayRunInQuota reports whether a job of team and project ("" for none) that needs gpus
// GPUs might run within a guarantee: its project's, or its team's, leaves that many
// unused for some model. It errs towards yes: it does not weigh the job's model, and a
// gang's GPUs on one node stand for all of them.
func (g Guarantees) MayRunInQuota(team, project string, gpus int) bool {
	if g.q == nil {
		return false
	}
	t, ok := g.q.teams[team]
	if !ok {
		return false // a team without quotas is never in quota
	}
	milli := max(gpus*MilliGPU, 1)
	if p, ok := t.Projects[project]; ok && project != "" && unusedGuarantee(p.Quota, g.q.used[scopeOf(team, project)], milli) {
		return true
	}
	return unusedGuarantee(t.Quota, g.q.used[team], milli)
}

// unusedGuarantee reports whether some entry of quota guarantees milli more than used
// holds of it, by the rule admission applies (level).
func unusedGuarantee(quota map[string]Quota, used map[string]int, milli int) bool {
	for key, qt := range quota {
		if qt.Guaranteed <= 0 {
			continue
		}
		if v := level(quota, used, key, milli); v.limited && !v.borrowing {
			return true
		}
	}
	return false
}
