package cli

import (
	"context"
	"fmt"

	"github.com/rotahq/rota/internal/api"
)

const holdUsage = `rota hold JOB...

Keeps jobs that have not started from starting, until rota release. An array's ID holds
every job of the array; ID_N names the job of index N alone. -o json prints the job (of
an array, an api.JobList), or an array of them when several are given.`

const releaseUsage = `rota release JOB...

Lets held jobs start again. A job whose dependencies or begin time are still unmet stays
HELD for that reason. An array's ID releases every job of the array; ID_N names the job
of index N alone. -o json prints the job (of an array, an api.JobList), or an array of
them when several are given.`

func runHold(ctx context.Context, cfg Config, args []string) int {
	return runJobAction(ctx, cfg, args, jobAction{verb: "hold", usage: holdUsage,
		do: (*Client).Hold, outcome: holdOutcome, doArray: (*Client).HoldArray, arrayOutcome: holdArrayOutcome})
}

func runRelease(ctx context.Context, cfg Config, args []string) int {
	return runJobAction(ctx, cfg, args, jobAction{verb: "release", usage: releaseUsage,
		do: (*Client).Release, outcome: releaseOutcome, doArray: (*Client).ReleaseArray, arrayOutcome: releaseArrayOutcome})
}

func holdOutcome(job api.Job) string {
	if job.UserHold {
		return fmt.Sprintf("Held job %d", job.ID)
	}
	return fmt.Sprintf("Job %d is not held: %s", job.ID, stateWord(job.State))
}

func holdArrayOutcome(id int64, jobs []api.Job) string {
	held := 0
	for _, j := range jobs {
		if j.UserHold {
			held++
		}
	}
	return arraySentence(id, jobs, []countedPart{
		{held, "held %s"},
		{len(jobs) - held, "%s had already started or ended"},
	})
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

func releaseArrayOutcome(id int64, jobs []api.Job) string {
	var free, waiting, userHeld, started int
	for _, j := range jobs {
		switch {
		case j.UserHold:
			userHeld++
		case j.State == api.StateHeld:
			waiting++
		case j.State == api.StatePending:
			free++
		default:
			started++
		}
	}
	return arraySentence(id, jobs, []countedPart{
		{free, "released %s"},
		{waiting, "%s still held by dependencies or a begin time"},
		{userHeld, "%s still held by their user"},
		{started, "%s had already started or ended"},
	})
}
