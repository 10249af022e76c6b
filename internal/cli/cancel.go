package cli

import (
	"context"
	"fmt"

	"github.com/rotahq/rota/internal/api"
)

const cancelUsage = `rota cancel JOB...

Cancels jobs. A pending job is cancelled at once; a running one is signalled and stopped
after its grace period. -o json prints the job, or an array when several are given.`

func runCancel(ctx context.Context, cfg Config, args []string) int {
	return runJobAction(ctx, cfg, args, jobAction{
		verb:    "cancel",
		usage:   cancelUsage,
		do:      (*Client).Cancel,
		outcome: cancelOutcome,
	})
}

// jobAction is a verb that does one thing to each of several jobs: cancel, hold, release.
type jobAction struct {
	verb, usage string
	do          func(c *Client, ctx context.Context, id int64) (api.Job, error)
	// outcome says in words what the action did to the job.
	outcome func(api.Job) string
}

// runJobAction parses job IDs and applies a.do to each in turn.
func runJobAction(ctx context.Context, cfg Config, args []string, a jobAction) int {
	fs, g := newFlagSet(cfg, a.verb, a.usage)
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		return cfg.usageError(a.verb, "no job ID given")
	}
	ids := make([]int64, len(pos))
	for i, p := range pos {
		id, err := parseJobID(p)
		if err != nil {
			return cfg.usageError(a.verb, "%v", err)
		}
		ids[i] = id
	}

	c := cfg.client(g)
	jobs, exit := forEach(ctx, cfg, g, ids,
		func(id int64) string { return fmt.Sprintf("job %d", id) },
		func(id int64) (api.Job, error) { return a.do(c, ctx, id) },
		a.outcome)
	return printEachJSON(cfg, g, len(ids), jobs, exit)
}

// forEach applies do to each key in turn, printing the outcome of each in table output.
// One that fails does not stop the others, but makes the exit code ExitError; an
// interrupt stops them all. It returns the results of those that succeeded.
func forEach[K, V any](ctx context.Context, cfg Config, g *globalFlags, keys []K, name func(K) string,
	do func(K) (V, error), outcome func(V) string) ([]V, int) {
	out := []V{}
	exit := ExitOK
	for _, k := range keys {
		v, err := do(k)
		if err != nil {
			exit = cfg.fail(ctx, fmt.Errorf("%s: %w", name(k), err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		out = append(out, v)
		if g.output == "table" {
			fmt.Fprintln(cfg.Stdout, outcome(v))
		}
	}
	return out, exit
}

// printEachJSON prints forEach's results under -o json: the one object when one key was
// given, else an array of those that succeeded. It returns exit unless printing fails.
func printEachJSON[V any](cfg Config, g *globalFlags, keys int, vs []V, exit int) int {
	if g.output != "json" {
		return exit
	}
	code := ExitOK
	switch {
	case keys != 1:
		code = cfg.printJSON(vs)
	case len(vs) == 1:
		code = cfg.printJSON(vs[0])
	}
	if code != ExitOK {
		return code
	}
	return exit
}

// cancelOutcome says in words what the cancel did to job.
func cancelOutcome(job api.Job) string {
	switch {
	case job.State == api.StateCancelled:
		return fmt.Sprintf("Cancelled job %d", job.ID)
	case job.State.Terminal():
		return fmt.Sprintf("Job %d had already ended: %s", job.ID, job.State)
	case len(job.Nodes) > 0:
		return fmt.Sprintf("Cancel requested for job %d (%s on %s)", job.ID, stateWord(job.State), joinOrDash(job.Nodes))
	default:
		return fmt.Sprintf("Cancel requested for job %d (%s)", job.ID, stateWord(job.State))
	}
}

// stateWord is a state in lower case, for sentences.
func stateWord(s api.JobState) string {
	switch s {
	case api.StateRunning:
		return "running"
	case api.StateAssigned:
		return "starting"
	case api.StatePending:
		return "pending"
	case api.StateHeld:
		return "held"
	}
	return string(s)
}
