package cli

import (
	"context"
	"fmt"

	"github.com/rotahq/rota/internal/api"
)

const whyUsage = `rota why JOB

Says why a job has not started, one reason a line, and when it is estimated to start
where that can be computed. -o json prints the server's answer as it is.`

func runWhy(ctx context.Context, cfg Config, args []string) int {
	fs, g := newFlagSet(cfg, "why", whyUsage)
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return cfg.usageError("why", "want exactly one job ID, got %d arguments", len(pos))
	}
	ref, err := parseJobRef(pos[0])
	if err != nil {
		return cfg.usageError("why", "%v", err)
	}
	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	id, err := c.jobID(ctx, ref)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	why, err := c.Why(ctx, id)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	if g.output == "json" {
		return cfg.printJSON(why)
	}
	printWhy(cfg, why)
	return ExitOK
}

func printWhy(cfg Config, why api.Why) {
	now := cfg.Now()
	for _, r := range why.Reasons {
		fmt.Fprintln(cfg.Stdout, r)
	}
	if len(why.Reasons) == 0 {
		fmt.Fprintf(cfg.Stdout, "Job %d is %s.\n", why.JobID, stateWord(why.State))
	}
	// As in rota queue, an estimate already past says nothing a person can use.
	if why.EstimatedStart != nil && why.EstimatedStart.After(now) {
		fmt.Fprintf(cfg.Stdout, "Estimated start: %s\n", formatTimeRel(why.EstimatedStart, now, cfg.location()))
	}
}
