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
	fs, g := newFlagSet(cfg, "cancel", cancelUsage)
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		return cfg.usageError("cancel", "no job ID given")
	}
	ids := make([]int64, len(pos))
	for i, p := range pos {
		id, err := parseJobID(p)
		if err != nil {
			return cfg.usageError("cancel", "%v", err)
		}
		ids[i] = id
	}

	c := cfg.client(g)
	jobs := []api.Job{}
	exit := ExitOK
	// One job that cannot be cancelled does not stop the others.
	for _, id := range ids {
		job, err := c.Cancel(ctx, id)
		if err != nil {
			exit = cfg.fail(ctx, fmt.Errorf("job %d: %w", id, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		jobs = append(jobs, job)
		if g.output == "table" {
			fmt.Fprintln(cfg.Stdout, cancelOutcome(job))
		}
	}
	if g.output == "json" {
		var code int
		if len(ids) == 1 && len(jobs) == 1 {
			code = cfg.printJSON(jobs[0])
		} else if len(ids) > 1 {
			code = cfg.printJSON(jobs)
		}
		if code != ExitOK {
			return code
		}
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
