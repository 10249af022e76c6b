package cli

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
)

const drainUsage = `rota admin drain NODE... [--reason TEXT] [--at TIME] [--until TIME]

Starts no new jobs on the nodes; the jobs running there run to their end, and the node
is DRAINED once they have. --reason says why; rota nodes, rota nodes NAME and the audit
log show it (default "no reason given").
--at plans a maintenance window ahead: until then the node keeps working but takes only
jobs whose time limit ends them by --at (none without a time limit), and it drains itself
at --at. --until ends the window: the node returns to service by itself then; without
it, at rota admin resume. rota admin resume also cancels a window planned ahead.
  TIME is RFC 3339 (2026-12-01T09:00:00Z), a local time "2026-12-01 09:00", now, or
  +DURATION from now (+2h, +1d); --until may also be a DURATION after --at (4h, 1d12h).
-o json prints the node, or an array when several are given.`

const resumeUsage = `rota admin resume NODE...

Lets jobs start again on drained or draining nodes. -o json prints the node, or an array
when several are given.`

func runDrain(ctx context.Context, cfg Config, args []string) int {
	const cmd = "admin drain"
	fs, g := newFlagSet(cfg, cmd, drainUsage)
	reason := fs.String("reason", "", "why the node is drained, one line of `TEXT`")
	at := fs.String("at", "", "when the maintenance window opens, a `TIME` (default now)")
	until := fs.String("until", "", "when it ends and the node returns to service, a `TIME` or a DURATION after --at")
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		return cfg.usageError(cmd, "no node given")
	}
	req, err := buildDrain(*reason, *at, *until, cfg.Now(), cfg.location())
	if err != nil {
		return cfg.usageError(cmd, "%v", err)
	}
	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	nodes, exit := forEach(ctx, cfg, g, pos,
		func(name string) string { return "node " + name },
		func(name string) (api.Node, error) { return c.Drain(ctx, name, req) },
		func(n api.Node) string { return drainOutcome(n, cfg.Now(), cfg.location()) })
	return printEachJSON(cfg, g, len(pos), nodes, exit)
}

// buildDrain turns drain's flags into the request. Times go as given; the server, whose
// clock decides, refuses a window in the past or one that ends before it starts.
func buildDrain(reason, at, until string, now time.Time, loc *time.Location) (api.DrainRequest, error) {
	req := api.DrainRequest{Reason: reason}
	start := now
	if at != "" {
		t, err := parseWhen(at, now, loc)
		if err != nil {
			return req, fmt.Errorf("--at: %w", err)
		}
		req.At, start = &t, t
	}
	if until != "" {
		t, err := parseEnd(until, start, now, loc)
		if err != nil {
			return req, fmt.Errorf("--until: %w", err)
		}
		if !t.After(start) {
			return req, fmt.Errorf("--until %s is not after the window's start %s", formatTime(&t, loc), formatTime(&start, loc))
		}
		req.Until = &t
	}
	return req, nil
}

func runResume(ctx context.Context, cfg Config, args []string) int {
	return runNodeAction(ctx, cfg, args, "admin resume", resumeUsage, (*Client).Resume, func(n api.Node) string {
		return fmt.Sprintf("Resumed %s (%s)", n.Name, n.State)
	})
}

// runNodeAction applies do to each node named in args, as runJobAction does to jobs.
func runNodeAction(ctx context.Context, cfg Config, args []string, cmd, usage string,
	do func(c *Client, ctx context.Context, name string) (api.Node, error), outcome func(api.Node) string) int {
	fs, g := newFlagSet(cfg, cmd, usage)
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		return cfg.usageError(cmd, "no node given")
	}
	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	nodes, exit := forEach(ctx, cfg, g, pos,
		func(name string) string { return "node " + name },
		func(name string) (api.Node, error) { return do(c, ctx, name) },
		outcome)
	return printEachJSON(cfg, g, len(pos), nodes, exit)
}

func drainOutcome(n api.Node, now time.Time, loc *time.Location) string {
	window := ""
	if m := n.Maintenance; m != nil {
		window = " (" + maintenanceText(m, now, loc) + ")"
	}
	switch {
	case n.State == api.NodeDrained:
		return "Drained " + n.Name + window
	case n.State != api.NodeDraining && n.Maintenance != nil && n.Maintenance.Start.After(now):
		return fmt.Sprintf("Planned maintenance of %s%s: until then only jobs that end by its start start there", n.Name, window)
	case n.State != api.NodeDraining:
		return fmt.Sprintf("Drain requested for %s (%s)", n.Name, n.State)
	case len(n.Jobs) == 0:
		return "Draining " + n.Name + window + ": no new jobs start there"
	}
	ids := make([]string, len(n.Jobs))
	for i, id := range n.Jobs {
		ids[i] = strconv.FormatInt(id, 10)
	}
	return fmt.Sprintf("Draining %s%s: no new jobs start there; %s still running (%s)",
		n.Name, window, plural(len(n.Jobs), "job", "jobs"), strings.Join(ids, ","))
}

// maintenanceText says what a node's maintenance is, in one phrase: "BIOS update, from
// 2026-12-01 09:00, until 2026-12-01 13:00" (times in loc; a start already past is not
// given).
func maintenanceText(m *api.Maintenance, now time.Time, loc *time.Location) string {
	s := cleanCell(m.Reason, problemWidth)
	if m.Start.After(now) {
		s += ", from " + formatTime(&m.Start, loc)
	}
	if m.End != nil {
		return s + ", until " + formatTime(m.End, loc)
	}
	return s + ", until resumed"
}

const nodeRemoveUsage = `rota admin node remove NAME [--force]

Forgets a node (its record, inventory and telemetry) and revokes its certificate: its
agent can no longer connect, and must join again with a new join token to come back.
A node that runs or is assigned jobs is refused: drain it first and wait for its jobs
to end. With --force it is removed at once, and those jobs end as on a lost node
(reason node_lost): requeued, or failed if they have been lost too often.`

func runNodeRemove(ctx context.Context, cfg Config, args []string) int {
	var force bool
	return runDelete(ctx, cfg, args, deleteCommand{cmd: "admin node remove", usage: nodeRemoveUsage,
		arg: "name", done: "Removed node",
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&force, "force", false, "remove it even while jobs run or are assigned there; they are requeued as on a lost node")
		},
		del: func(c *Client, ctx context.Context, name string) error { return c.RemoveNode(ctx, name, force) }})
}
