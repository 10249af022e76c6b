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
-o json prints an api.TeamList.`

const teamSetUsage = `rota admin team set NAME [--quota MODEL=G:L]... [--weight W] [--members u1,u2] [--notify URL[#EVENTS]]...

Creates team NAME from the flags (weight 1 unless given), or changes only the flags
given of an existing one. --quota sets one model's guaranteed and limit GPUs and leaves
the other models as they are; MODEL "*" means any model not named, and MODEL=none
removes that model's quota. --members "" clears the members. --notify replaces the
team's webhooks, told of the events of every job of the team (the events after #, as
in rota submit --notify); --notify "" clears them. -o json prints the team as stored.`

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
	}
	if err := tw.Flush(); err != nil {
		return cfg.fail(ctx, err)
	}
	return ExitOK
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
}

func runTeamSet(ctx context.Context, cfg Config, args []string) int {
	const cmd = "admin team set"
	fs, g := newFlagSet(cfg, cmd, teamSetUsage)
	f := teamFlags{quotas: quotaFlag{}}
	fs.Var(f.quotas, "quota", "`MODEL=G:L` guaranteed and limit GPUs of a model, * for any (repeatable)")
	fs.Float64Var(&f.weight, "weight", 1, "fair-share `weight`")
	fs.StringVar(&f.members, "members", "", "`users` whose jobs default to this team, comma-separated")
	fs.Var(&f.notify, "notify", "webhook `URL[#EVENTS]` told of the team's jobs' events (repeatable)")
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code
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
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "quota":
			if t.Quotas == nil {
				t.Quotas = map[string]api.Quota{}
			}
			for m, q := range f.quotas {
				if q == nil {
					delete(t.Quotas, m)
				} else {
					t.Quotas[m] = *q
				}
			}
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
