package cli

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/rotahq/rota/internal/api"
)

const drainUsage = `rota admin drain NODE...

Starts no new jobs on the nodes; the jobs running there run to their end, and the node
is DRAINED once they have. -o json prints the node, or an array when several are given.`

const resumeUsage = `rota admin resume NODE...

Lets jobs start again on drained or draining nodes. -o json prints the node, or an array
when several are given.`

func runDrain(ctx context.Context, cfg Config, args []string) int {
	return runNodeAction(ctx, cfg, args, "admin drain", drainUsage, (*Client).Drain, drainOutcome)
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

func drainOutcome(n api.Node) string {
	switch {
	case n.State == api.NodeDrained:
		return "Drained " + n.Name
	case n.State != api.NodeDraining:
		return fmt.Sprintf("Drain requested for %s (%s)", n.Name, n.State)
	case len(n.Jobs) == 0:
		return "Draining " + n.Name + ": no new jobs start there"
	}
	ids := make([]string, len(n.Jobs))
	for i, id := range n.Jobs {
		ids[i] = strconv.FormatInt(id, 10)
	}
	return fmt.Sprintf("Draining %s: no new jobs start there; %s still running (%s)",
		n.Name, plural(len(n.Jobs), "job", "jobs"), strings.Join(ids, ","))
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
