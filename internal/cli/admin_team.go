package cli

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/rotahq/rota/internal/api"
)

const teamListUsage = `rota admin team list

Lists the teams. QUOTAS gives guaranteed/limit GPUs per model, "*" for any model not
named: work up to the guarantee is in quota, beyond it up to the limit the team borrows
idle GPUs and that work may be preempted. USAGE is the team's decayed GPU-hours, which
fair share weighs against WEIGHT. IN-USE counts the GPUs its jobs hold now, by model.
A team with projects, CPU or memory quotas or a GPU-hour budget is followed by one line
for each: "  cpus 32/64", "  budget month soft 800 hard 1000 GPU-hours",
"  project det: * 4/8, cpus 0/16". -o json prints an api.TeamList.`

const teamSetUsage = `rota admin team set NAME [--project P] [--quota MODEL=G:L]... [--cpus G:L] [--memory G:L]
    [--budget PERIOD:SOFT:HARD] [--weight W] [--members u1,u2] [--notify URL[#EVENTS]]...
rota admin team set NAME --delete-project P

Creates team NAME from the flags (weight 1 unless given), or changes only the flags
given of an existing one. --quota sets one model's guaranteed and limit GPUs and leaves
the other models as they are; MODEL "*" means any model not named, and MODEL=none
removes that model's quota. --cpus and --memory (MB) set the guaranteed and limit CPU
cores and memory the jobs request ("none" removes them). --budget sets the GPU-hours a
PERIOD (day, week or month, in UTC) may use: at SOFT the team is warned once per period,
at HARD its new jobs wait for the next period (0 for no such limit; "none" removes the
budget). --members "" clears the members. --notify replaces the team's webhooks, told of
the events of every job of the team (the events after #, as in rota submit --notify);
--notify "" clears them.

With --project P, --quota, --cpus, --memory and --budget set project P of the team
instead (created if new): its guarantees and limits stay within the team's, and its
projects' guarantees add up to at most the team's. --delete-project P removes one.
-o json prints the team as stored.`

const teamDeleteUsage = `rota admin team delete NAME

Deletes a team.`

func runTeamList(ctx context.Context, cfg Config, args []string) int {
	return runList(ctx, cfg, args, "admin team list", teamListUsage, nil,
		func(ctx context.Context, c *Client) (api.TeamList, error) {
			list, err := c.Teams(ctx)
			list.Teams = orEmpty(list.Teams)
			return list, err
		},
		func(ctx context.Context, l api.TeamList) int { return cfg.printTeams(ctx, l.Teams) })
}

func (cfg Config) printTeams(ctx context.Context, teams []api.Team) int {
	tw := newTable(cfg.Stdout)
	fmt.Fprintln(tw, "NAME\tWEIGHT\tQUOTAS\tUSAGE\tIN-USE\tMEMBERS")
	for _, t := range teams {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f\t%s\t%s\n",
			t.Name, strconv.FormatFloat(t.Weight, 'f', -1, 64), formatQuotas(t.Quotas),
			t.UsageGPUHours, formatInUse(t.GPUsInUse), joinOrDash(t.Members))
		for _, line := range teamDetails(t) {
			fmt.Fprintf(tw, "  %s\n", line) // no tab: the line does not widen the columns
		}
	}
	if err := tw.Flush(); err != nil {
		return cfg.fail(ctx, err)
	}
	return ExitOK
}

// teamDetails lists what a team holds beyond its GPU quotas, one line each: CPU and
// memory quotas, budget, projects.
func teamDetails(t api.Team) []string {
	var out []string
	limits := func(quotas map[string]api.Quota, cpus, mem *api.Quota, b *api.Budget) []string {
		var parts []string
		if len(quotas) > 0 {
			parts = append(parts, formatQuotas(quotas))
		}
		if cpus != nil {
			parts = append(parts, fmt.Sprintf("cpus %d/%d", cpus.Guaranteed, cpus.Limit))
		}
		if mem != nil {
			parts = append(parts, fmt.Sprintf("memory %d/%d MB", mem.Guaranteed, mem.Limit))
		}
		if b != nil {
			parts = append(parts, formatBudget(b))
		}
		return parts
	}
	out = append(out, limits(nil, t.CPUQuota, t.MemoryQuotaMB, t.Budget)...)
	for _, p := range t.Projects {
		parts := limits(p.Quotas, p.CPUQuota, p.MemoryQuotaMB, p.Budget)
		if len(parts) == 0 {
			parts = []string{"the team's quotas"}
		}
		out = append(out, "project "+p.Name+": "+strings.Join(parts, ", "))
	}
	return out
}

// formatBudget prints a budget as "budget month soft 800 hard 1000 GPU-hours".
func formatBudget(b *api.Budget) string {
	s := "budget " + b.Period
	if b.Soft > 0 {
		s += " soft " + strconv.FormatFloat(b.Soft, 'f', -1, 64)
	}
	if b.Hard > 0 {
		s += " hard " + strconv.FormatFloat(b.Hard, 'f', -1, 64)
	}
	return s + " GPU-hours"
}

// parseRange reads G:L for a CPU or memory quota, or none (nil).
func parseRange(flag, s string) (*api.Quota, error) {
	if strings.TrimSpace(s) == "none" {
		return nil, nil
	}
	gs, ls, ok := strings.Cut(s, ":")
	g, gerr := strconv.Atoi(strings.TrimSpace(gs))
	l, lerr := strconv.Atoi(strings.TrimSpace(ls))
	switch {
	case !ok || gerr != nil || lerr != nil:
		return nil, fmt.Errorf("--%s: want GUARANTEED:LIMIT, e.g. 32:64, or none, got %q", flag, s)
	case g < 0 || l < g:
		return nil, fmt.Errorf("--%s: %q: want 0 <= guaranteed <= limit", flag, s)
	}
	return &api.Quota{Guaranteed: g, Limit: l}, nil
}

// parseBudget reads PERIOD:SOFT:HARD, or none (nil).
func parseBudget(s string) (*api.Budget, error) {
	if strings.TrimSpace(s) == "none" {
		return nil, nil
	}
	parts := strings.Split(s, ":")
	if len(parts) != 3 || !slices.Contains(api.BudgetPeriods, parts[0]) {
		return nil, fmt.Errorf("--budget: want PERIOD:SOFT:HARD with PERIOD one of %s (e.g. month:800:1000), or none, got %q", strings.Join(api.BudgetPeriods, ", "), s)
	}
	soft, serr := strconv.ParseFloat(parts[1], 64)
	hard, herr := strconv.ParseFloat(parts[2], 64)
	switch {
	case serr != nil || herr != nil || math.IsNaN(soft) || math.IsNaN(hard):
		return nil, fmt.Errorf("--budget: %q: SOFT and HARD are GPU-hours", s)
	case soft < 0 || hard < 0:
		return nil, fmt.Errorf("--budget: %q: GPU-hours must be 0 or more", s)
	case hard > 0 && soft > hard:
		return nil, fmt.Errorf("--budget: %q: the soft limit %g is above the hard limit %g", s, soft, hard)
	}
	return &api.Budget{Period: parts[0], Soft: soft, Hard: hard}, nil
}

// formatQuotas prints quotas as "A100 4/8, H100 8/16, * 2/4": models sorted, "*" last.
func formatQuotas(quotas map[string]api.Quota) string {
	if len(quotas) == 0 {
		return "-"
	}
	var parts []string
	for _, m := range modelsAnyLast(quotas) {
		q := quotas[m]
		parts = append(parts, fmt.Sprintf("%s %d/%d", m, q.Guaranteed, q.Limit))
	}
	return strings.Join(parts, ", ")
}

// formatInUse prints GPUs in use by model as "A100 2, H100 4", "0" when none.
func formatInUse(inUse map[string]int) string {
	var parts []string
	for _, m := range modelsAnyLast(inUse) {
		if inUse[m] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", m, inUse[m]))
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, ", ")
}

// modelsAnyLast sorts a map's GPU models, with "*" (any model) after the named ones.
func modelsAnyLast[V any](m map[string]V) []string {
	return slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		if (a == "*") != (b == "*") {
			if a == "*" {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})
}

// quotaFlag collects repeated --quota MODEL=G:L; a nil quota removes the model's.
type quotaFlag map[string]*api.Quota

func (q quotaFlag) String() string {
	var parts []string
	for _, m := range modelsAnyLast(q) {
		if q[m] == nil {
			parts = append(parts, m+"=none")
		} else {
			parts = append(parts, fmt.Sprintf("%s=%d:%d", m, q[m].Guaranteed, q[m].Limit))
		}
	}
	return strings.Join(parts, ",")
}

func (q quotaFlag) Set(s string) error {
	model, quota, err := parseQuota(s)
	if err != nil {
		return err
	}
	q[model] = quota
	return nil
}

// parseQuota reads MODEL=GUARANTEED:LIMIT, or MODEL=none for no quota of that model.
func parseQuota(s string) (string, *api.Quota, error) {
	model, gl, ok := strings.Cut(s, "=")
	model = strings.TrimSpace(model)
	if !ok || model == "" {
		return "", nil, fmt.Errorf("want MODEL=GUARANTEED:LIMIT, e.g. H100=8:16 or *=2:4, got %q", s)
	}
	if strings.TrimSpace(gl) == "none" {
		return model, nil, nil
	}
	gs, ls, ok := strings.Cut(gl, ":")
	g, gerr := strconv.Atoi(strings.TrimSpace(gs))
	l, lerr := strconv.Atoi(strings.TrimSpace(ls))
	switch {
	case !ok || gerr != nil || lerr != nil:
		return "", nil, fmt.Errorf("want MODEL=GUARANTEED:LIMIT, e.g. H100=8:16 or *=2:4, got %q", s)
	case g < 0:
		return "", nil, fmt.Errorf("%q: the guaranteed GPUs must be 0 or more", s)
	case l < g:
		return "", nil, fmt.Errorf("%q: the limit must be at least the guaranteed GPUs", s)
	}
	return model, &api.Quota{Guaranteed: g, Limit: l}, nil
}

// teamFlags are team set's own flags, as typed.
type teamFlags struct {
	quotas  quotaFlag
	weight  float64
	members string
	notify  notifyFlag
	project string
	drop    string
	cpus    string
	memory  string
	budget  string
}

func runTeamSet(ctx context.Context, cfg Config, args []string) int {
	const cmd = "admin team set"
	fs, g := newFlagSet(cfg, cmd, teamSetUsage)
	f := teamFlags{quotas: quotaFlag{}}
	fs.Var(f.quotas, "quota", "`MODEL=G:L` guaranteed and limit GPUs of a model, * for any (repeatable)")
	fs.Float64Var(&f.weight, "weight", 1, "fair-share `weight`")
	fs.StringVar(&f.members, "members", "", "`users` whose jobs default to this team, comma-separated")
	fs.Var(&f.notify, "notify", "webhook `URL[#EVENTS]` told of the team's jobs' events (repeatable)")
	fs.StringVar(&f.project, "project", "", "set the quotas and budget of this `project` of the team")
	fs.StringVar(&f.drop, "delete-project", "", "remove this `project` from the team")
	fs.StringVar(&f.cpus, "cpus", "", "`G:L` guaranteed and limit CPU cores, or none")
	fs.StringVar(&f.memory, "memory", "", "`G:L` guaranteed and limit memory in MB, or none")
	fs.StringVar(&f.budget, "budget", "", "GPU-hour budget `PERIOD:SOFT:HARD` (day, week or month), or none")
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code
	}
	var cpus, memory *api.Quota
	var budget *api.Budget
	var perr error
	fs.Visit(func(fl *flag.Flag) {
		switch {
		case perr != nil:
		case fl.Name == "cpus":
			cpus, perr = parseRange("cpus", f.cpus)
		case fl.Name == "memory":
			memory, perr = parseRange("memory", f.memory)
		case fl.Name == "budget":
			budget, perr = parseBudget(f.budget)
		}
	})
	if perr != nil {
		return cfg.usageError(cmd, "%v", perr)
	}
	if f.project != "" && f.drop != "" {
		return cfg.usageError(cmd, "--project and --delete-project exclude each other")
	}
	name, ok := cfg.oneArg(cmd, "name", pos)
	if !ok {
		return ExitUsage
	}
	if !(f.weight > 0) || math.IsInf(f.weight, 0) {
		return cfg.usageError(cmd, "--weight must be more than 0, got %v", f.weight)
	}

	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	list, err := c.Teams(ctx)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	t, verb := api.Team{Name: name, Weight: 1}, "Created"
	for _, have := range list.Teams {
		if have.Name == name {
			t, verb = have, "Updated"
		}
	}
	// What the server reports about use is not part of the team's definition.
	t.UsageGPUHours, t.GPUsInUse = 0, nil
	if f.drop != "" {
		i := slices.IndexFunc(t.Projects, func(p api.Project) bool { return p.Name == f.drop })
		if i < 0 {
			return cfg.usageError(cmd, "team %s has no project %q", name, f.drop)
		}
		t.Projects = slices.Delete(t.Projects, i, i+1)
	}
	// The limits the flags set: the team's, or with --project the project's.
	quotas, cpuQ, memQ, budgetP := &t.Quotas, &t.CPUQuota, &t.MemoryQuotaMB, &t.Budget
	if f.project != "" {
		i := slices.IndexFunc(t.Projects, func(p api.Project) bool { return p.Name == f.project })
		if i < 0 {
			t.Projects = append(t.Projects, api.Project{Name: f.project})
			i = len(t.Projects) - 1
		}
		p := &t.Projects[i]
		quotas, cpuQ, memQ, budgetP = &p.Quotas, &p.CPUQuota, &p.MemoryQuotaMB, &p.Budget
	}
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "quota":
			if *quotas == nil {
				*quotas = map[string]api.Quota{}
			}
			for m, q := range f.quotas {
				if q == nil {
					delete(*quotas, m)
				} else {
					(*quotas)[m] = *q
				}
			}
		case "cpus":
			*cpuQ = cpus
		case "memory":
			*memQ = memory
		case "budget":
			*budgetP = budget
		case "weight":
			t.Weight = f.weight
		case "members":
			t.Members = splitList(f.members)
		case "notify":
			t.Notify = f.notify.list
		}
	})
	t, err = c.SetTeam(ctx, t)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	if g.output == "json" {
		return cfg.printJSON(t)
	}
	fmt.Fprintf(cfg.Stdout, "%s team %s\n", verb, t.Name)
	return cfg.printTeams(ctx, []api.Team{t})
}

func runTeamDelete(ctx context.Context, cfg Config, args []string) int {
	return runDelete(ctx, cfg, args, deleteCommand{cmd: "admin team delete", usage: teamDeleteUsage,
		arg: "name", done: "Deleted team", del: (*Client).DeleteTeam})
}
