package server

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/rotahq/rota/internal/api"
)

// maxBudgetGPUHours bounds a budget: a typo, not a real cluster's use in a month.
const maxBudgetGPUHours = 1e9

// validateTeamParts checks what a team holds beyond its GPU quotas: its CPU and memory
// quotas, its budget and its projects, each project against the team. validateTeam has
// normalised the team's GPU quotas. Nothing is stored when it fails.
func validateTeamParts(t *api.Team) *api.Error {
	if e := validateCompute(t.Name, "", "cpu_quota", t.CPUQuota, maxCPUs*maxNodes); e != nil {
		return e
	}
	if e := validateCompute(t.Name, "", "memory_quota_mb", t.MemoryQuotaMB, maxMemoryMB*maxNodes); e != nil {
		return e
	}
	if e := validateBudget("budget", "team "+t.Name, t.Budget); e != nil {
		return e
	}
	seen := map[string]bool{}
	for i := range t.Projects {
		p := &t.Projects[i]
		field := fmt.Sprintf("projects[%d]", i)
		switch {
		case p.Name == "" || len(p.Name) > maxNameLen || !nameRE().MatchString(p.Name):
			return invalid(field+".name", "team %s: project name %q: use letters, digits and ._@+-", t.Name, truncateName(p.Name))
		case seen[p.Name]:
			return invalid(field+".name", "team %s: project %s is defined twice", t.Name, p.Name)
		}
		seen[p.Name] = true
		who := "team " + t.Name + ", project " + p.Name
		for model, q := range p.Quotas {
			switch {
			case model == "":
				return invalid(field+".quotas", "%s: a quota needs a GPU model, or * for any", who)
			case q.Guaranteed < 0 || q.Guaranteed > maxGPUs || q.Limit < 0 || q.Limit > maxGPUs:
				return invalid(field+".quotas", "%s, model %s: guaranteed and limit must be between 0 and %d GPUs", who, model, maxGPUs)
			case q.Limit == 0:
				q.Limit = q.Guaranteed
			case q.Limit < q.Guaranteed:
				return invalid(field+".quotas", "%s, model %s: limit %d is below guaranteed %d", who, model, q.Limit, q.Guaranteed)
			}
			p.Quotas[model] = q
			tq, key, ok := teamQuota(t.Quotas, model)
			if !ok {
				if q.Guaranteed > 0 {
					return invalid(field+".quotas", "%s, model %s: a guarantee of %d GPUs needs a team quota for %s (or *) to draw from; team %s has none",
						who, model, q.Guaranteed, model, t.Name)
				}
				continue
			}
			if e := within(field+".quotas", who, "GPUs "+model, q, tq, "team's "+key); e != nil {
				return e
			}
		}
		if e := validateCompute(t.Name, p.Name, field+".cpu_quota", p.CPUQuota, maxCPUs*maxNodes); e != nil {
			return e
		}
		if e := validateCompute(t.Name, p.Name, field+".memory_quota_mb", p.MemoryQuotaMB, maxMemoryMB*maxNodes); e != nil {
			return e
		}
		if e := projectWithin(field+".cpu_quota", who, "CPUs", p.CPUQuota, t.CPUQuota, t.Name); e != nil {
			return e
		}
		if e := projectWithin(field+".memory_quota_mb", who, "memory MB", p.MemoryQuotaMB, t.MemoryQuotaMB, t.Name); e != nil {
			return e
		}
		if e := validateBudget(field+".budget", who, p.Budget); e != nil {
			return e
		}
	}
	return guaranteesFit(t)
}

// teamQuota is the team's quota entry that a project's entry for model draws from: the
// model's own, else the team's "*".
func teamQuota(quotas map[string]api.Quota, model string) (api.Quota, string, bool) {
	if q, ok := quotas[model]; ok {
		return q, model, true
	}
	q, ok := quotas["*"]
	return q, "*", ok
}

// within refuses a project quota above the team's for the same resource, naming both.
func within(field, who, resource string, q, team api.Quota, of string) *api.Error {
	switch {
	case q.Guaranteed > team.Guaranteed:
		return invalid(field, "%s: guaranteed %d %s is above the %s guaranteed %d", who, q.Guaranteed, resource, of, team.Guaranteed)
	case q.Limit > max(team.Limit, team.Guaranteed):
		return invalid(field, "%s: limit %d %s is above the %s limit %d", who, q.Limit, resource, of, max(team.Limit, team.Guaranteed))
	}
	return nil
}

// projectWithin holds a project's CPU or memory quota to the team's; a team without one
// leaves the project free to set its own cap, but not a guarantee.
func projectWithin(field, who, resource string, q, team *api.Quota, teamName string) *api.Error {
	if q == nil {
		return nil
	}
	if team == nil {
		if q.Guaranteed > 0 {
			return invalid(field, "%s: a guarantee of %d %s needs a team quota for it to draw from; team %s has none", who, q.Guaranteed, resource, teamName)
		}
		return nil
	}
	return within(field, who, resource, *q, *team, "team's")
}

// validateCompute checks a CPU or memory quota and fills in its limit.
func validateCompute(team, project, field string, q *api.Quota, most int) *api.Error {
	if q == nil {
		return nil
	}
	who := "team " + team
	if project != "" {
		who += ", project " + project
	}
	switch {
	case q.Guaranteed < 0 || q.Limit < 0 || q.Guaranteed > most || q.Limit > most:
		return invalid(field, "%s: guaranteed and limit must be between 0 and %d", who, most)
	case q.Limit == 0 && q.Guaranteed == 0:
		return invalid(field, "%s: a quota needs a limit above 0 (leave it out for none)", who)
	case q.Limit == 0:
		q.Limit = q.Guaranteed
	case q.Limit < q.Guaranteed:
		return invalid(field, "%s: limit %d is below guaranteed %d", who, q.Limit, q.Guaranteed)
	}
	return nil
}

// validateBudget checks a GPU-hour budget.
func validateBudget(field, who string, b *api.Budget) *api.Error {
	if b == nil {
		return nil
	}
	bad := func(v float64) bool { return math.IsNaN(v) || v < 0 || v > maxBudgetGPUHours }
	switch {
	case !slices.Contains(api.BudgetPeriods, b.Period):
		return invalid(field+".period", "%s: budget period %q: want one of %s", who, truncateName(b.Period), strings.Join(api.BudgetPeriods, ", "))
	case bad(b.Soft) || bad(b.Hard):
		return invalid(field, "%s: soft and hard GPU-hours must be between 0 and %g", who, float64(maxBudgetGPUHours))
	case b.Soft == 0 && b.Hard == 0:
		return invalid(field, "%s: a budget needs a soft or a hard limit above 0 GPU-hours (leave it out for none)", who)
	case b.Hard > 0 && b.Soft > b.Hard:
		return invalid(field+".soft_gpu_hours", "%s: soft limit %g GPU-hours is above the hard limit %g", who, b.Soft, b.Hard)
	}
	return nil
}

// guaranteesFit refuses projects whose guarantees together exceed the team's, resource by
// resource: each GPU model key the projects name, CPUs and memory.
func guaranteesFit(t *api.Team) *api.Error {
	sums := map[string]int{}
	var keys []string
	for _, p := range t.Projects {
		for model, q := range p.Quotas {
			if _, ok := sums[model]; !ok {
				keys = append(keys, model)
			}
			sums[model] += q.Guaranteed
		}
	}
	slices.Sort(keys)
	for _, model := range keys {
		tq, key, ok := teamQuota(t.Quotas, model)
		if ok && sums[model] > tq.Guaranteed {
			return invalid("projects", "team %s: the projects' guarantees of GPUs %s add up to %d, above the team's %s guaranteed %d",
				t.Name, model, sums[model], key, tq.Guaranteed)
		}
	}
	compute := func(resource string, team *api.Quota, of func(p api.Project) *api.Quota) *api.Error {
		sum := 0
		for _, p := range t.Projects {
			if q := of(p); q != nil {
				sum += q.Guaranteed
			}
		}
		if team != nil && sum > team.Guaranteed {
			return invalid("projects", "team %s: the projects' guarantees of %s add up to %d, above the team's guaranteed %d", t.Name, resource, sum, team.Guaranteed)
		}
		return nil
	}
	if e := compute("CPUs", t.CPUQuota, func(p api.Project) *api.Quota { return p.CPUQuota }); e != nil {
		return e
	}
	return compute("memory MB", t.MemoryQuotaMB, func(p api.Project) *api.Quota { return p.MemoryQuotaMB })
}

// projectNames lists a team's projects for messages: "det, seg", or "none".
func projectNames(t api.Team) string {
	if len(t.Projects) == 0 {
		return "none"
	}
	names := make([]string, len(t.Projects))
	for i, p := range t.Projects {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// project returns the team's project of that name.
func project(t api.Team, name string) (api.Project, bool) {
	for _, p := range t.Projects {
		if p.Name == name {
			return p, true
		}
	}
	return api.Project{}, false
}
