package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/rotahq/rota/internal/api"
)

const nodesUsage = `rota nodes

Lists nodes: state, GPUs and CPUs in use of the total, GPU models, memory, labels and
when the node's agent last reported.`

func runNodes(ctx context.Context, cfg Config, args []string) int {
	fs, g := newFlagSet(cfg, "nodes", nodesUsage)
	if code, ok := cfg.parseNoArgs("nodes", fs, g, args); !ok {
		return code
	}
	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	list, err := c.Nodes(ctx)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	if list.Nodes == nil {
		list.Nodes = []api.Node{}
	}
	if g.output == "json" {
		return cfg.printJSON(list)
	}
	now := cfg.Now()
	tw := newTable(cfg.Stdout)
	fmt.Fprintln(tw, "NAME\tSTATE\tGPUS\tMODEL\tCPUS\tMEMORY\tLABELS\tLAST SEEN")
	for _, n := range list.Nodes {
		lastSeen := "never"
		if !n.LastHeartbeat.IsZero() {
			lastSeen = relative(n.LastHeartbeat, now)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n",
			n.Name, nodeState(n), nodeGPUs(n), gpuModels(n.GPUs), n.CPUsUsed, n.CPUs,
			formatMB(n.MemoryMB), formatLabels(n.Labels), lastSeen)
	}
	if err := tw.Flush(); err != nil {
		return cfg.fail(ctx, err)
	}
	return ExitOK
}

// nodeGPUs is used/total, with the count of unhealthy devices when there are any.
func nodeGPUs(n api.Node) string {
	s := fmt.Sprintf("%d/%d", n.GPUsUsed, len(n.GPUs))
	bad := 0
	for _, g := range n.GPUs {
		if !g.Healthy {
			bad++
		}
	}
	if bad > 0 {
		s += fmt.Sprintf(" (%d unhealthy)", bad)
	}
	return s
}

// gpuModels lists the distinct models on a node, sorted.
func gpuModels(gpus []api.GPU) string {
	seen := map[string]bool{}
	var models []string
	for _, g := range gpus {
		if g.Model != "" && !seen[g.Model] {
			seen[g.Model] = true
			models = append(models, g.Model)
		}
	}
	sort.Strings(models)
	return orDash(strings.Join(models, ","))
}

// nodeState is the node's state, marked while it syncs: its agent changed or it came back
// after it was lost, and it takes no new work until its agent has stopped what the server
// no longer lists.
func nodeState(n api.Node) string {
	if n.Syncing {
		return string(n.State) + " (syncing)"
	}
	return string(n.State)
}
