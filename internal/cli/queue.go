package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
)

const queueUsage = `rota queue [--all] [--state S,S...] [--queue Q] [--user U]

Lists jobs that have not ended (--all: every job). TIME is how long a running job has
run, a pending job has waited, or an ended job ran. START is when a waiting job is
estimated to start, "-" when that is unknown. REASON says why a job waits.`

func runQueue(ctx context.Context, cfg Config, args []string) int {
	fs, g := newFlagSet(cfg, "queue", queueUsage)
	all := fs.Bool("all", false, "include ended jobs")
	states := fs.String("state", "", "only jobs in these `states`, comma-separated (e.g. PENDING,RUNNING)")
	queue := fs.String("queue", "", "only jobs in this `queue`")
	user := fs.String("user", "", "only jobs of this `user`")
	if code, ok := cfg.parseNoArgs("queue", fs, g, args); !ok {
		return code
	}
	opts := ListOptions{Queue: *queue, User: *user}
	if *states != "" {
		if *all {
			return cfg.usageError("queue", "--all and --state exclude each other")
		}
		for _, s := range strings.Split(*states, ",") {
			st := api.JobState(strings.ToUpper(strings.TrimSpace(s)))
			if !st.Valid() {
				return cfg.usageError("queue", "--state: unknown state %q: want PENDING, HELD, ASSIGNED, RUNNING, SUCCEEDED, FAILED, CANCELLED or TIMEOUT", s)
			}
			opts.States = append(opts.States, string(st))
		}
	}
	if *all {
		opts.States = []string{"all"}
	}

	jobs, err := cfg.client(g).AllJobs(ctx, opts)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	if g.output == "json" {
		return cfg.printJSON(api.JobList{Jobs: jobs})
	}
	now := cfg.Now()
	tw := newTable(cfg.Stdout)
	fmt.Fprintln(tw, "ID\tNAME\tUSER\tQUEUE\tSTATE\tGPUS\tNODES\tTIME\tSTART\tREASON")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n",
			j.ID, orDash(truncate(j.Spec.Name, 32)), orDash(j.Spec.User), orDash(j.Spec.Queue), j.State,
			j.Spec.GPUs, joinOrDash(j.Nodes), formatDuration(jobTime(j, now)), jobStart(j, now), jobReason(j))
	}
	if err := tw.Flush(); err != nil {
		return cfg.fail(ctx, err)
	}
	return ExitOK
}

// jobTime is what the TIME column shows: run time for a job that started, waiting time
// for one that has not; an ended job's clock stops at its end.
func jobTime(j api.Job, now time.Time) time.Duration {
	end := now
	if j.EndTime != nil {
		end = *j.EndTime
	}
	if j.StartTime != nil {
		return end.Sub(*j.StartTime)
	}
	return end.Sub(j.SubmitTime)
}

// jobStart is the START column: how soon a job that waits is estimated to start.
func jobStart(j api.Job, now time.Time) string {
	// An estimate already past says nothing a person can use.
	if j.EstimatedStart == nil || !j.EstimatedStart.After(now) || j.State.Terminal() || j.State.Active() {
		return "-"
	}
	return relative(*j.EstimatedStart, now)
}

// jobReason is the REASON column: the plain sentence where there is one, else the code.
func jobReason(j api.Job) string {
	r := j.Message
	if r == "" {
		r = j.Reason
	}
	if j.CancelRequested && !j.State.Terminal() {
		r = "cancel requested"
	}
	return orDash(r)
}

// truncate shortens s to n runes, marking the cut.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
