package cli

import (
	"context"
	"fmt"

	"github.com/rotahq/rota/internal/api"
)

const holdUsage = `rota hold JOB...

Keeps jobs that have not started from starting, until rota release. -o json prints the
job, or an array when several are given.`

const releaseUsage = `rota release JOB...

Lets held jobs start again. A job whose dependencies or begin time are still unmet stays
HELD for that reason. -o json prints the job, or an array when several are given.`

func runHold(ctx context.Context, cfg Config, args []string) int {
	return runJobAction(ctx, cfg, args, jobAction{verb: "hold", usage: holdUsage, do: (*Client).Hold, outcome: holdOutcome})
}

func runRelease(ctx context.Context, cfg Config, args []string) int {
	return runJobAction(ctx, cfg, args, jobAction{verb: "release", usage: releaseUsage, do: (*Client).Release, outcome: releaseOutcome})
}

func holdOutcome(job api.Job) string {
	if job.UserHold {
		return fmt.Sprintf("Held job %d", job.ID)
	}
	return fmt.Sprintf("Job %d is not held: %s", job.ID, stateWord(job.State))
}

func releaseOutcome(job api.Job) string {
	switch {
	case job.UserHold:
		return fmt.Sprintf("Job %d is still held by its user", job.ID)
	case job.State == api.StateHeld:
		why := job.Message
		if why == "" {
			why = orDash(job.Reason)
		}
		return fmt.Sprintf("Released job %d; it stays held: %s", job.ID, why)
	}
	return fmt.Sprintf("Released job %d (%s)", job.ID, stateWord(job.State))
}
