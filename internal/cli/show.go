package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
)

const showUsage = `rota show JOB

Shows one job (an ID, or ARRAY_INDEX for a job of an array): its request, state and
reason, times, attempts and events. Lines for a user hold, dependencies, the job's
array, its restart policy and failures, a retry's backoff, its priority while it waits,
borrowing, its checkpoints, who submitted it for its user, its container image and the
digest that ran, and since when its GPUs have sat idle appear only when they apply.
Usage is what the current or last attempt used by its nodes' telemetry: GPU utilisation
(mean over its GPUs), GPU memory, CPUs busy and memory, each as mean, 95th percentile and
last or peak; for a multi-node attempt also rank by rank. An attempt that ended with a
message (out of memory, a GPU error) shows it under the attempts. A multi-node attempt's
ranks are listed with how each ended. -o json prints the job with attempt_list and
events.

An array's ID (the ID of its first job) shows the whole array: what its jobs ask for,
how many are in each state and which indices those are, when the first started and the
last ended; -o json prints its jobs as an api.JobList. ARRAY_INDEX shows one of them.`

func runShow(ctx context.Context, cfg Config, args []string) int {
	fs, g := newFlagSet(cfg, "show", showUsage)
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return cfg.usageError("show", "want exactly one job ID, got %d arguments", len(pos))
	}
	ref, err := parseJobRef(pos[0])
	if err != nil {
		return cfg.usageError("show", "%v", err)
	}
	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	id, err := c.jobID(ctx, ref)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	d, err := c.GetJob(ctx, id)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	if !ref.element && isArrayHead(d.Job) {
		jobs, err := c.GetArray(ctx, id)
		if err != nil {
			return cfg.fail(ctx, err)
		}
		if g.output == "json" {
			return cfg.printJSON(api.JobList{Jobs: jobs})
		}
		printArrayDetail(cfg, d.Job, jobs)
		return ExitOK
	}
	if g.output == "json" {
		return cfg.printJSON(d)
	}
	printJobDetail(cfg, d)
	return ExitOK
}

// printArrayDetail shows array head.ArrayID as one job: what its jobs ask for (head's
// spec, which they share), how many are in each state with their indices, and its span
// from the first start to the last end.
func printArrayDetail(cfg Config, head api.Job, jobs []api.Job) {
	now, loc := cfg.Now(), cfg.location()
	indices := map[api.JobState][]int{}
	var started, ended *time.Time
	allEnded := true
	for _, j := range jobs {
		if j.ArrayIndex != nil {
			indices[j.State] = append(indices[j.State], *j.ArrayIndex)
		}
		if j.StartTime != nil && (started == nil || j.StartTime.Before(*started)) {
			started = j.StartTime
		}
		if !j.State.Terminal() {
			allEnded = false
		} else if j.EndTime != nil && (ended == nil || j.EndTime.After(*ended)) {
			ended = j.EndTime
		}
	}
	endedLine := "" // left out until every job has ended
	if allEnded {
		endedLine = formatTimeRel(ended, now, loc)
	}
	timeLimit := "queue default"
	if head.Spec.TimeLimit > 0 {
		timeLimit = formatDuration(secondsDuration(head.Spec.TimeLimit)) + " per job"
	}
	spec := head.Spec.Array
	if spec == "" {
		spec = "-"
	}
	tw := newTable(cfg.Stdout)
	for _, kv := range [][2]string{
		{"Array", fmt.Sprintf("%d (%s, %s)", head.ArrayID, spec, plural(len(jobs), "job", "jobs"))},
		{"Name", orDash(head.Spec.Name)},
		{"User", orDash(head.Spec.User)},
		{"Team", orDash(head.Spec.Team)},
		{"Queue", orDash(head.Spec.Queue)},
		{"States", jobStates(jobs)},
		{"Command", shellQuote(head.Spec.Command)},
		{"Request", describeRequest(head.Spec) + " per job"},
		{"Time limit", timeLimit},
		{"At once", atOnce(head.ArrayLimit)},
		{"Depends on", describeDependencies(head.Spec)},
		{"Submitted", formatTimeRel(&head.SubmitTime, now, loc)},
		{"Started", formatTimeRel(started, now, loc)},
		{"Ended", endedLine},
	} {
		if kv[1] != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
		}
	}
	tw.Flush()

	fmt.Fprintln(cfg.Stdout, "\nJobs by state:")
	tw = newTable(cfg.Stdout)
	fmt.Fprintln(tw, "  STATE\tJOBS\tINDICES")
	for _, s := range stateOrder {
		if idx := indices[s]; len(idx) > 0 {
			slices.Sort(idx)
			fmt.Fprintf(tw, "  %s\t%d\t%s\n", s, len(idx), formatIndices(idx))
		}
	}
	tw.Flush()
	fmt.Fprintf(cfg.Stdout, "\nrota show %d_N shows the job of index N; rota queue --expand lists them one a line.\n", head.ArrayID)
}

// atOnce is the At once line of an array: how many of its jobs may run at the same time.
func atOnce(limit int) string {
	if limit <= 0 {
		return "no limit"
	}
	return strconv.Itoa(limit)
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
	stopping := ""
	if j.Stopping != "" && !j.State.Terminal() {
		stopping = "the other ranks are being stopped: " + j.Stopping
	}
	// Lines with an empty value are left out: they are the ones that apply to few jobs.
	tw := newTable(cfg.Stdout)
	for _, kv := range [][2]string{
		{"ID", strconv.FormatInt(j.ID, 10)},
		{"Name", orDash(j.Spec.Name)},
		{"User", orDash(j.Spec.User)},
		{"Submitted by", j.SubmittedBy},
		{"Team", orDash(j.Spec.Team)},
		{"Project", j.Spec.Project},
		{"Queue", orDash(j.Spec.Queue)},
		{"State", state},
		{"Stopping", stopping},
		{"Idle", describeIdle(j, now, loc)},
		{"Hold", describeHold(j)},
		{"Reason", orDash(j.Reason)},
		{"Message", orDash(clean(j.Message))},
		{"Budget", budgetLine(j)},
		{"Command", shellQuote(j.Spec.Command)},
		{"Workdir", orDash(j.Spec.WorkDir)},
		{"Request", describeRequest(j.Spec)},
		{"Versions", describeVersions(j.Spec)},
		{"Image", clean(j.Spec.Image)},
		{"Image digest", imageDigests(d.AttemptList)},
		{"Time limit", timeLimit},
		{"Deadline", describeDeadline(j, now, loc)},
		{"Depends on", describeDependencies(j.Spec)},
		{"Array", describeArray(j)},
		{"Restart", describeRestart(j)},
		{"Retry", describeRetry(j, loc)},
		{"Submitted", formatTimeRel(&j.SubmitTime, now, loc)},
		{"Started", formatTimeRel(j.StartTime, now, loc)},
		{"Ended", formatTimeRel(j.EndTime, now, loc)},
		{"Est. start", formatTimeRel(j.EstimatedStart, now, loc)},
		{"Priority", describePriority(j.Priority)},
		{"Nodes", joinOrDash(j.Nodes)},
		{"GPUs", joinOrDash(j.GPUIDs)},
		{"Borrowing", describeBorrowing(j)},
		{"Checkpoint", checkpoint(j, now, loc)},
		{"Checkpoints", j.Checkpoints},
		{"Exit code", formatExitCode(j.ExitCode)},
		{"Attempts", strconv.Itoa(j.Attempts)},
	} {
		if kv[1] != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
		}
	}
	tw.Flush()
	printUsage(cfg, j)

	if len(d.AttemptList) > 0 {
		fmt.Fprintln(cfg.Stdout, "\nAttempts:")
		tw = newTable(cfg.Stdout)
		fmt.Fprintln(tw, "  #\tSTATE\tNODES\tGPUS\tASSIGNED\tSTARTED\tENDED\tEXIT\tREASON")
		for _, a := range d.AttemptList {
			var nodes, gpus []string
			for _, p := range a.Placements {
				nodes = append(nodes, p.Node)
				if len(p.GPUIndices) > 0 {
					gpus = append(gpus, p.Node+":"+formatIndices(p.GPUIndices))
				}
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
				a.N, a.State, joinOrDash(nodes), orDash(strings.Join(gpus, " ")), formatTime(&a.AssignTime, loc),
				formatTime(a.StartTime, loc), formatTime(a.EndTime, loc), formatExitCode(a.ExitCode), orDash(a.Reason))
		}
		tw.Flush()
		printAttemptMessages(cfg, d.AttemptList)
		last := d.AttemptList[len(d.AttemptList)-1]
		printRanks(cfg, last)
		printRankUsage(cfg, j.Spec, last)
	}

	if len(d.Events) > 0 {
		fmt.Fprintln(cfg.Stdout, "\nEvents:")
		tw = newTable(cfg.Stdout)
		for _, e := range d.Events {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", formatTime(&e.Time, loc), eventActor(e), eventChange(e), eventNote(e))
		}
		tw.Flush()
	}
}

// printRanks lists the ranks of a multi-node attempt and how each ended.
func printRanks(cfg Config, a api.Attempt) {
	if len(a.Placements) < 2 {
		return
	}
	fmt.Fprintf(cfg.Stdout, "\nRanks of attempt %d:\n", a.N)
	tw := newTable(cfg.Stdout)
	fmt.Fprintln(tw, "  RANK\tNODE\tGPUS\tSTATE\tEXIT\tMESSAGE")
	for r, p := range a.Placements {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n",
			r, p.Node, orDash(formatIndices(p.GPUIndices)), rankState(a, p), formatExitCode(p.ExitCode), rankMessage(p))
	}
	tw.Flush()
}

// rankState is a rank's state: its own once it has ended, the attempt's while it runs.
func rankState(a api.Attempt, p api.Placement) string {
	switch {
	case p.State != "":
		return string(p.State)
	case a.State.Active():
		return string(a.State)
	}
	return "-"
}

// rankMessage says how a rank ended: the sentence, else the reason code.
func rankMessage(p api.Placement) string {
	if p.Message != "" {
		return clean(p.Message)
	}
	return orDash(p.Reason)
}

// printAttemptMessages says how each attempt that ended with a message ended, under
// the attempts table, whose REASON column has room for the code only: "attempt 1, oom:
// killed: out of memory, peak 70G of its 64G".
func printAttemptMessages(cfg Config, attempts []api.Attempt) {
	for _, a := range attempts {
		msg := a.Message
		if msg == "" && len(a.Placements) == 1 {
			msg = a.Placements[0].Message
		}
		if msg == "" {
			continue
		}
		note := "  attempt " + strconv.Itoa(a.N)
		if a.Reason != "" {
			note += ", " + a.Reason
		}
		fmt.Fprintf(cfg.Stdout, "%s: %s\n", note, cleanCell(msg, problemWidth))
	}
}

// describeRestart is the Restart line: the restart policy and the failures charged to
// the job's retries. It is left out while nothing about restarts was asked for or
// happened.
func describeRestart(j api.Job) string {
	if j.Spec.RestartPolicy == "" && j.Spec.Retries == nil && j.Failures == 0 {
		return ""
	}
	policy := j.Spec.RestartPolicy
	if policy == "" {
		policy = "the queue's default policy"
	}
	if j.Spec.Retries == nil {
		return fmt.Sprintf("%s; %s so far, retries: the default", policy, plural(j.Failures, "failure", "failures"))
	}
	return fmt.Sprintf("%s; %s of %s used", policy, plural(j.Failures, "failure", "failures"),
		plural(*j.Spec.Retries, "retry", "retries"))
}

// describeRetry is the Retry line of a job that waits out its backoff before a retry.
func describeRetry(j api.Job, loc *time.Location) string {
	if j.NotBefore == nil || j.State.Terminal() || j.State.Active() {
		return ""
	}
	return "retrying after " + j.NotBefore.In(loc).Format("15:04:05") + " (backoff)"
}

// eventActor is who made an event, with the role they made it in.
func eventActor(e api.Event) string {
	if e.Role == "" {
		return orDash(e.Actor)
	}
	return orDash(e.Actor) + " (" + e.Role + ")"
}

// describeHold is the Hold line: set while the user's hold keeps the job from starting.
func describeHold(j api.Job) string {
	if !j.UserHold || j.State.Terminal() {
		return ""
	}
	return fmt.Sprintf("held by its user; rota release %d lets it start", j.ID)
}

// describeDependencies is the Depends on line: "after 40,41; after-ok 39".
func describeDependencies(s api.JobSpec) string {
	var parts []string
	for _, d := range []struct {
		name string
		ids  []int64
	}{{"after", s.After}, {"after-ok", s.AfterOK}} {
		if len(d.ids) == 0 {
			continue
		}
		ids := make([]string, len(d.ids))
		for i, id := range d.ids {
			ids[i] = strconv.FormatInt(id, 10)
		}
		parts = append(parts, d.name+" "+strings.Join(ids, ","))
	}
	return strings.Join(parts, "; ")
}

// describeArray is the Array line: "index 3 of array 12 (0-99%8)".
func describeArray(j api.Job) string {
	if j.ArrayID == 0 {
		return ""
	}
	d := "array " + strconv.FormatInt(j.ArrayID, 10)
	if j.ArrayIndex != nil {
		d = "index " + strconv.Itoa(*j.ArrayIndex) + " of " + d
	}
	if j.Spec.Array != "" {
		d += " (" + j.Spec.Array + ")"
	} else if j.ArrayLimit > 0 {
		d += fmt.Sprintf(" (at most %d at once)", j.ArrayLimit)
	}
	return d
}

// describePriority is the Priority line of a waiting job, like Slurm's sprio: the tier
// orders first, then the score, whose factors add up to it.
func describePriority(p *api.Priority) string {
	if p == nil {
		return ""
	}
	d := fmt.Sprintf("tier %d, score %.2f = fair share %.2f + age %.2f + size %.2f", p.Tier, p.Score, p.FairShare, p.Age, p.Size)
	if p.Deadline != 0 {
		d += fmt.Sprintf(" + deadline %.2f", p.Deadline)
	}
	// A negative nice raises the score; "- nice -0.50" would read badly.
	if p.Nice < 0 {
		return d + fmt.Sprintf(" + nice %.2f", -p.Nice)
	}
	return d + fmt.Sprintf(" - nice %.2f", p.Nice)
}

// describeVersions is the Versions line: the CUDA and driver ranges the job's nodes must
// report, "CUDA >=12.4, driver >=550"; "" for a job without them.
func describeVersions(spec api.JobSpec) string {
	var parts []string
	if spec.CUDA != "" {
		parts = append(parts, "CUDA "+clean(spec.CUDA))
	}
	if spec.Driver != "" {
		parts = append(parts, "driver "+clean(spec.Driver))
	}
	return strings.Join(parts, ", ")
}

// describeDeadline is the Deadline line: the kind and time, then the result once
// decided ("missed by 2h0m0s"), or the server's warning while it looks unreachable.
func describeDeadline(j api.Job, now time.Time, loc *time.Location) string {
	if j.Spec.Deadline == nil {
		return ""
	}
	kind := "finish"
	if j.Spec.DeadlineKind == api.DeadlineStart {
		kind = "start"
	}
	d := kind + " by " + formatTimeRel(j.Spec.Deadline, now, loc)
	switch {
	case j.DeadlineResult == api.DeadlineMet:
		return d + ": met"
	case j.DeadlineResult == api.DeadlineMissed && j.DeadlineMissedBy > 0:
		return d + ": missed by " + formatDuration(time.Duration(j.DeadlineMissedBy)*time.Second)
	case j.DeadlineResult == api.DeadlineMissed && !j.State.Terminal():
		return d + ": missed, by " + formatDuration(now.Sub(*j.Spec.Deadline)) + " so far"
	case j.DeadlineResult == api.DeadlineMissed:
		return d + ": missed (the job did not succeed)"
	case j.DeadlineWarning != "":
		return d + "; WARNING: " + clean(j.DeadlineWarning)
	}
	return d
}

// describeBorrowing is the Borrowing line: set while the job runs beyond its team's
// guaranteed quota, where an in-quota job may reclaim its GPUs.
func describeBorrowing(j api.Job) string {
	if j.BorrowingInTeam && !j.Borrowing {
		return "yes, beyond the guaranteed quota of project " + clean(j.Spec.Project) + ", inside team " + j.Spec.Team
	}
	if !j.Borrowing {
		return ""
	}
	team := "its team"
	if j.Spec.Team != "" {
		team = "team " + j.Spec.Team
	}
	return "yes, beyond the guaranteed quota of " + team
}

// budgetLine is the Budget line: a warning while the job's team or project is past the
// soft limit of its GPU-hour budget.
func budgetLine(j api.Job) string {
	if j.BudgetWarning == "" {
		return ""
	}
	return "WARNING: " + clean(j.BudgetWarning)
}

// checkpoint is the Checkpoint line: when the job last reported one.
func checkpoint(j api.Job, now time.Time, loc *time.Location) string {
	if j.LastCheckpoint == nil {
		return ""
	}
	return formatTimeRel(j.LastCheckpoint, now, loc)
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
		note += clean(e.Message)
	}
	if e.Source != "" {
		if note != "" {
			note += " "
		}
		note += "(from " + e.Source + ")"
	}
	return note
}
