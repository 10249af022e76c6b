package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/rotahq/rota/internal/api"
)

const showUsage = `rota show JOB

Shows one job: its request, state and reason, times, attempts and events.
-o json prints the job with attempt_list and events.`

func runShow(ctx context.Context, cfg Config, args []string) int {
	fs, g := newFlagSet(cfg, "show", showUsage)
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return cfg.usageError("show", "want exactly one job ID, got %d arguments", len(pos))
	}
	id, err := parseJobID(pos[0])
	if err != nil {
		return cfg.usageError("show", "%v", err)
	}
	d, err := cfg.client(g).GetJob(ctx, id)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	if g.output == "json" {
		return cfg.printJSON(d)
	}
	printJobDetail(cfg, d)
	return ExitOK
}

func parseJobID(s string) (int64, error) {
	id, err := strconv.ParseInt(strings.TrimPrefix(s, "#"), 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("invalid job ID %q: want a positive number", s)
	}
	return id, nil
}

func printJobDetail(cfg Config, d api.JobDetail) {
	now, loc := cfg.Now(), cfg.location()
	j := d.Job
	timeLimit := "queue default"
	if j.Spec.TimeLimit > 0 {
		timeLimit = formatDuration(secondsDuration(j.Spec.TimeLimit))
	}
	state := string(j.State)
	if j.CancelRequested && !j.State.Terminal() {
		state += " (cancel requested)"
	}
	tw := newTable(cfg.Stdout)
	for _, kv := range [][2]string{
		{"ID", strconv.FormatInt(j.ID, 10)},
		{"Name", orDash(j.Spec.Name)},
		{"User", orDash(j.Spec.User)},
		{"Team", orDash(j.Spec.Team)},
		{"Queue", orDash(j.Spec.Queue)},
		{"State", state},
		{"Reason", orDash(j.Reason)},
		{"Message", orDash(j.Message)},
		{"Command", shellQuote(j.Spec.Command)},
		{"Workdir", orDash(j.Spec.WorkDir)},
		{"Request", describeRequest(j.Spec)},
		{"Time limit", timeLimit},
		{"Submitted", formatTimeRel(&j.SubmitTime, now, loc)},
		{"Started", formatTimeRel(j.StartTime, now, loc)},
		{"Ended", formatTimeRel(j.EndTime, now, loc)},
		{"Est. start", formatTimeRel(j.EstimatedStart, now, loc)},
		{"Nodes", joinOrDash(j.Nodes)},
		{"GPUs", joinOrDash(j.GPUIDs)},
		{"Exit code", formatExitCode(j.ExitCode)},
		{"Attempts", strconv.Itoa(j.Attempts)},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
	}
	tw.Flush()

	if len(d.AttemptList) > 0 {
		fmt.Fprintln(cfg.Stdout, "\nAttempts:")
		tw = newTable(cfg.Stdout)
		fmt.Fprintln(tw, "  #\tSTATE\tNODES\tGPUS\tASSIGNED\tSTARTED\tENDED\tEXIT\tREASON")
		for _, a := range d.AttemptList {
			var nodes, gpus []string
			for _, p := range a.Placements {
				nodes = append(nodes, p.Node)
				for _, i := range p.GPUIndices {
					gpus = append(gpus, p.Node+":"+strconv.Itoa(i))
				}
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
				a.N, a.State, joinOrDash(nodes), joinOrDash(gpus), formatTime(&a.AssignTime, loc),
				formatTime(a.StartTime, loc), formatTime(a.EndTime, loc), formatExitCode(a.ExitCode), orDash(a.Reason))
		}
		tw.Flush()
	}

	if len(d.Events) > 0 {
		fmt.Fprintln(cfg.Stdout, "\nEvents:")
		tw = newTable(cfg.Stdout)
		for _, e := range d.Events {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", formatTime(&e.Time, loc), orDash(e.Actor), eventChange(e), eventNote(e))
		}
		tw.Flush()
	}
}

// eventChange is the event's kind, with its transition where it has one.
func eventChange(e api.Event) string {
	switch {
	case e.From != "" && e.To != "":
		return string(e.From) + " -> " + string(e.To)
	case e.To != "":
		return e.Kind + " -> " + string(e.To)
	}
	return e.Kind
}

// eventNote is the rest of an event in words: attempt, node, reason and message.
func eventNote(e api.Event) string {
	var parts []string
	if e.Attempt > 0 {
		parts = append(parts, "attempt "+strconv.Itoa(e.Attempt))
	}
	if e.Node != "" {
		parts = append(parts, "on "+e.Node)
	}
	if e.Reason != "" {
		parts = append(parts, e.Reason)
	}
	note := strings.Join(parts, ", ")
	if e.Message != "" {
		if note != "" {
			note += ": "
		}
		note += e.Message
	}
	return note
}
