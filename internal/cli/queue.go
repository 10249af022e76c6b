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

const queueUsage = `rota queue [--all] [--expand] [--state S,S...] [--queue Q] [--user U]

Lists jobs that have not ended (--all: every job). TIME is how long a running job has
run, a pending job has waited, or an ended job ran. START is when a waiting job is
estimated to start, "-" when that is unknown. REASON says why a job waits. A running
job whose GPUs have all stayed below its queue's idle threshold shows for how long in
STATE, e.g. "RUNNING (idle 34m00s)"; rota show says whether it has been warned.
The jobs of an array share one line: its ID as ID_[FIRST-LAST] over the indices listed,
and in STATE how many of them are in each state; TIME is the longest of theirs, START
the soonest, REASON that of the first that waits. The server sums an array's jobs up
for its line, so a line of 100,000 jobs costs one entry to read. --expand lists them
one a line, each as ID_INDEX. A long queue is printed as it is read, 500 lines at a time,
so its first lines show at once; a column widens where a later part holds a wider cell.`

func runQueue(ctx context.Context, cfg Config, args []string) int {
	fs, g := newFlagSet(cfg, "queue", queueUsage)
	all := fs.Bool("all", false, "include ended jobs")
	states := fs.String("state", "", "only jobs in these `states`, comma-separated (e.g. PENDING,RUNNING)")
	queue := fs.String("queue", "", "only jobs in this `queue`")
	user := fs.String("user", "", "only jobs of this `user`")
	expand := fs.Bool("expand", false, "list the jobs of an array one a line")
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

	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	if g.output == "json" {
		jobs, err := c.AllJobs(ctx, opts)
		if err != nil {
			return cfg.fail(ctx, err)
		}
		return cfg.printJSON(api.JobList{Jobs: jobs})
	}
	// The jobs are shown page by page as they come, so that a queue of 100,000 jobs
	// shows its first ones after one page, not after every page is read and held. Jobs
	// not ended are read with each array summed up by the server, so that an array of
	// 10,000 jobs is one entry to read, not 20 pages.
	opts.CollapseArrays = !*expand && !slices.ContainsFunc(opts.States, func(s string) bool { return s == "all" || api.JobState(s).Terminal() })
	now := cfg.Now()
	t := &pagedTable{out: cfg.Stdout}
	t.row("ID", "NAME", "USER", "QUEUE", "STATE", "GPUS", "NODES", "TIME", "START", "REASON")
	var held []api.Job // the last array listed: more of its jobs may be on the next page
	shown, read := 0, 0
	err = c.EachJobsPage(ctx, opts, func(page []api.Job) error {
		read += len(page)
		rows := queueRows(append(held, page...), *expand)
		held = nil
		if n := len(rows); n > 0 && !*expand && inArray(rows[n-1][0]) && rows[n-1][0].Array == nil {
			held, rows = rows[n-1], rows[:n-1]
		}
		for _, row := range rows {
			t.row(queueCells(row, now)...)
			shown += len(row)
		}
		if read < queueChunk {
			return nil
		}
		read = 0
		return t.flush()
	})
	if err != nil {
		// What was read stays on the screen, and the error says where it broke off.
		if shown > 0 {
			t.flush()
			err = fmt.Errorf("the listing stopped after %d jobs: %w", shown, err)
		}
		return cfg.fail(ctx, err)
	}
	if held != nil {
		t.row(queueCells(held, now)...)
	}
	if err := t.flush(); err != nil {
		return cfg.fail(ctx, err)
	}
	return ExitOK
}

// queueChunk is how many jobs rota queue reads before it writes the lines they make: a
// server's page, so that a short queue is aligned as one table and a long one starts at
// once. It counts jobs, not lines: the jobs of an array make one line, written once the
// last of them is read.
const queueChunk = 500

// inArray reports whether j is shown on its array's line.
func inArray(j api.Job) bool { return j.ArrayID != 0 && j.ArrayIndex != nil }

// queueCells is one line of rota queue: a job, or the jobs of an array listed together.
func queueCells(row []api.Job, now time.Time) []string {
	j := row[0]
	switch {
	case len(row) > 1:
		return arrayCells(row, now)
	case j.Array != nil && j.Array.Jobs > 1: // summed up by the server
		return arrayLine(j, j.Array, now)
	}
	return []string{displayID(j), orDash(truncate(j.Spec.Name, 32)), orDash(j.Spec.User), orDash(j.Spec.Queue), jobState(j, now),
		gpusCell(j.Spec), joinOrDash(j.Nodes), formatDuration(jobTime(j, now)), jobStart(j, now), jobReason(j)}
}

// gpusCell is the GPUS cell of rota queue: the whole GPUs, or a share of one ("0.5",
// "20G" for a memory slice).
func gpusCell(s api.JobSpec) string {
	switch {
	case s.GPUShare > 0:
		return strconv.FormatFloat(s.GPUShare, 'f', -1, 64)
	case s.GPUMemoryMB > 0:
		return formatMB(s.GPUMemoryMB)
	}
	return strconv.Itoa(s.GPUs)
}

// queueRows groups jobs into the lines of rota queue: one job a line, except that the
// jobs of an array share the line of the first of them listed, unless expand is set.
func queueRows(jobs []api.Job, expand bool) [][]api.Job {
	var rows [][]api.Job
	arrayRow := map[int64]int{} // array ID → its row
	for _, j := range jobs {
		if expand || j.ArrayID == 0 || j.ArrayIndex == nil || j.Array != nil {
			rows = append(rows, []api.Job{j})
			continue
		}
		if r, ok := arrayRow[j.ArrayID]; ok {
			rows[r] = append(rows[r], j)
			continue
		}
		arrayRow[j.ArrayID] = len(rows)
		rows = append(rows, []api.Job{j})
	}
	return rows
}

// displayID is a job's ID as rota queue shows it: ARRAY_INDEX for a job of an array.
func displayID(j api.Job) string {
	if j.ArrayID != 0 && j.ArrayIndex != nil {
		return fmt.Sprintf("%d_%d", j.ArrayID, *j.ArrayIndex)
	}
	return strconv.FormatInt(j.ID, 10)
}

// arrayCells is the one line of the listed jobs of an array.
func arrayCells(jobs []api.Job, now time.Time) []string {
	var sum api.ArraySummary
	for i := range jobs {
		sum.Add(&jobs[i], now)
	}
	return arrayLine(jobs[0], &sum, now)
}

// arrayLine is the one line of an array from its first listed job and the summary of its
// listed jobs, which the server gives with arrays=collapse.
func arrayLine(first api.Job, sum *api.ArraySummary, now time.Time) []string {
	start := "-"
	if sum.EstimatedStart != nil && sum.EstimatedStart.After(now) {
		start = relative(*sum.EstimatedStart, now)
	}
	return []string{fmt.Sprintf("%d_[%d-%d]", first.ArrayID, sum.FirstIndex, sum.LastIndex), orDash(truncate(first.Spec.Name, 32)), orDash(first.Spec.User), orDash(first.Spec.Queue),
		countStates(sum.States, sum.Idle), strconv.Itoa(first.Spec.GPUs), orDash(truncate(strings.Join(sum.Nodes, ","), 32)),
		formatDuration(sum.Longest(now)), start, orDash(clean(sum.Reason))}
}

// stateOrder is the order in which countStates names states: what runs, what waits, what
// has ended.
var stateOrder = []api.JobState{api.StateRunning, api.StateAssigned, api.StatePending, api.StateHeld,
	api.StateSucceeded, api.StateFailed, api.StateCancelled, api.StateTimeout}

// jobStates says how many of jobs are in each state, as countStates does.
func jobStates(jobs []api.Job) string {
	n, idle := map[api.JobState]int{}, 0
	for _, j := range jobs {
		n[j.State]++
		if isIdle(j) {
			idle++
		}
	}
	return countStates(n, idle)
}

// countStates says how many jobs are in each state, of counts n with idle running jobs
// flagged idle: "3 running (1 idle), 5 pending, 92 succeeded".
func countStates(n map[api.JobState]int, idle int) string {
	var parts []string
	for _, s := range stateOrder {
		if n[s] == 0 {
			continue
		}
		part := fmt.Sprintf("%d %s", n[s], strings.ToLower(stateWord(s)))
		if s == api.StateRunning && idle > 0 {
			part += fmt.Sprintf(" (%d idle)", idle)
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

// jobState is the STATE column: the state, with how long a running job has held its GPUs
// without using them.
func jobState(j api.Job, now time.Time) string {
	if !isIdle(j) {
		return string(j.State)
	}
	return fmt.Sprintf("%s (idle %s)", j.State, formatDuration(now.Sub(*j.IdleSince)))
}

// isIdle reports whether j runs with GPUs its queue's idle policy counts as unused.
func isIdle(j api.Job) bool { return j.IdleSince != nil && j.State == api.StateRunning }

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
func jobReason(j api.Job) string { return orDash(clean(api.ReasonText(&j))) }

// truncate shortens s to n runes, marking the cut.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
