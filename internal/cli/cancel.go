package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/rotahq/rota/internal/api"
)

const cancelUsage = `rota cancel JOB...

Cancels jobs. A pending job is cancelled at once; a running one is signalled and stopped
after its grace period. An array's ID cancels every job of the array; ID_N names the
job of index N alone. -o json prints the job (of an array, an api.JobList), or an array
of them when several are given.`

func runCancel(ctx context.Context, cfg Config, args []string) int {
	return runJobAction(ctx, cfg, args, jobAction{
		verb:         "cancel",
		usage:        cancelUsage,
		do:           (*Client).Cancel,
		outcome:      cancelOutcome,
		doArray:      (*Client).CancelArray,
		arrayOutcome: cancelArrayOutcome,
	})
}

// jobAction is a verb that does one thing to each of several jobs or arrays: cancel,
// hold, release.
type jobAction struct {
	verb, usage string
	do          func(c *Client, ctx context.Context, id int64) (api.Job, error)
	// outcome says in words what the action did to the job.
	outcome func(api.Job) string
	// doArray does it to every job of an array, arrayOutcome says what that did.
	doArray      func(c *Client, ctx context.Context, id int64) ([]api.Job, error)
	arrayOutcome func(id int64, jobs []api.Job) string
}

// actionResult is what a jobAction did to one of its arguments.
type actionResult struct {
	json any // the job, or the array's api.JobList
	text string
}

// runJobAction parses job references and applies a to each in turn. A job that is an
// array's first is taken as the whole array, as Slurm does.
func runJobAction(ctx context.Context, cfg Config, args []string, a jobAction) int {
	fs, g := newFlagSet(cfg, a.verb, a.usage)
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		return cfg.usageError(a.verb, "no job ID given")
	}
	refs := make([]jobRef, len(pos))
	for i, p := range pos {
		ref, err := parseJobRef(p)
		if err != nil {
			return cfg.usageError(a.verb, "%v", err)
		}
		refs[i] = ref
	}

	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	results, exit := forEach(ctx, cfg, g, refs,
		func(r jobRef) string { return "job " + r.String() },
		func(r jobRef) (actionResult, error) { return a.apply(ctx, c, r) },
		func(r actionResult) string { return r.text })
	out := make([]any, len(results))
	for i, r := range results {
		out[i] = r.json
	}
	return printEachJSON(cfg, g, len(refs), out, exit)
}

// apply does a to the job or array ref names.
func (a jobAction) apply(ctx context.Context, c *Client, ref jobRef) (actionResult, error) {
	id := ref.id
	if ref.element {
		var err error
		if id, err = c.arrayElement(ctx, ref.id, ref.index); err != nil {
			return actionResult{}, err
		}
	} else {
		d, err := c.GetJob(ctx, id)
		if err != nil {
			return actionResult{}, err
		}
		if isArrayHead(d.Job) {
			jobs, err := a.doArray(c, ctx, id)
			if err != nil {
				return actionResult{}, err
			}
			return actionResult{json: api.JobList{Jobs: jobs}, text: a.arrayOutcome(id, jobs)}, nil
		}
	}
	job, err := a.do(c, ctx, id)
	if err != nil {
		return actionResult{}, err
	}
	return actionResult{json: job, text: a.outcome(job)}, nil
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

// cancelArrayOutcome says what cancelling array id did to its jobs.
func cancelArrayOutcome(id int64, jobs []api.Job) string {
	var cancelled, stopping, ended int
	for _, j := range jobs {
		switch {
		case j.State == api.StateCancelled:
			cancelled++
		case j.State.Terminal():
			ended++
		default:
			stopping++
		}
	}
	return arraySentence(id, jobs, []countedPart{
		{cancelled, "cancelled %s"},
		{stopping, "cancel requested for %s still running"},
		{ended, "%s had already ended"},
	})
}

// countedPart is one clause of an array's outcome: format takes the count in jobs.
type countedPart struct {
	n      int
	format string
}

// arraySentence says what an action did to array id: "Array 60 (5 jobs): cancelled 2
// jobs, 3 had already ended". Clauses that count nothing are left out.
func arraySentence(id int64, jobs []api.Job, parts []countedPart) string {
	var clauses []string
	for _, p := range parts {
		if p.n > 0 {
			clauses = append(clauses, fmt.Sprintf(p.format, plural(p.n, "job", "jobs")))
		}
	}
	s := fmt.Sprintf("Array %d (%s)", id, plural(len(jobs), "job", "jobs"))
	if len(clauses) == 0 {
		return s + ": nothing to do"
	}
	return s + ": " + strings.Join(clauses, ", ")
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
