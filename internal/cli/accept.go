package cli

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
)

const acceptUsage = `rota accept [--pool P] [--nodes N] [--queue Q] [--timeout D] [--results DIR]

Runs an acceptance suite of small built-in jobs on a pool, through the API as you, stage by
stage: 1, one GPU on each of N nodes (one rank per node); 2, one job per node on all its
GPUs, with an all-reduce among them; 3, a two-node gang on all their GPUs, with an
all-reduce across the nodes. Each job times a matrix multiply (PyTorch on the GPU where it
imports and sees CUDA, else numpy, else pure Python), the all-reduce (NCCL, else TCP), a
read of a file it wrote, and a checkpoint written to ROTA_CHECKPOINT_DIR. The report flags
failed jobs and nodes whose step time is over --slow times the other nodes' median.

Every run's report is saved as JSON under --results, and compared with the previous run of
the same pool. Ctrl-C or a stage that cannot be placed in --timeout cancels what was
submitted.

Exit codes: 0 every stage passed; 1 the server failed or could not be reached, or a stage
could not be placed or finished in --timeout; 2 bad flags, or an unknown pool; 3 a job of
a stage failed or its results are missing; 4 every job ran, but a node is an outlier.`

// Exit codes of rota accept beyond the common ones.
const (
	ExitAcceptFailed  = 3 // a stage's job failed or reported no results
	ExitAcceptOutlier = 4 // every stage ran, but a node was flagged an outlier
)

//go:embed accept_job.py
var acceptJob string

// acceptPoll is how often `rota accept` asks after a stage's jobs.
const acceptPoll = 500 * time.Millisecond

// acceptResultPrefix starts the result lines the built-in job prints.
const acceptResultPrefix = "ROTA_ACCEPT "

// AcceptMetrics are one worker's timings, or a median of several.
type AcceptMetrics struct {
	StepMS  float64 `json:"step_ms"`
	CommMS  float64 `json:"comm_ms,omitempty"`
	ReadMBs float64 `json:"read_mb_s"`
	CkptMS  float64 `json:"ckpt_ms"`
}

// AcceptResult is one worker's result line, with the node its rank ran on.
type AcceptResult struct {
	Job     int64  `json:"job"`
	Node    string `json:"node"`
	Rank    int    `json:"rank"`
	GPU     string `json:"gpu"`
	Backend string `json:"backend"`
	AcceptMetrics
}

// AcceptNode is one node's part of a stage.
type AcceptNode struct {
	Node    string        `json:"node"`
	Results int           `json:"results"`
	Median  AcceptMetrics `json:"median"`
	// Problem says why the node is flagged; empty when it is not.
	Problem string `json:"problem,omitempty"`
}

// AcceptStage is one stage of the report.
type AcceptStage struct {
	Stage int    `json:"stage"`
	Name  string `json:"name"`
	// Status is passed, failed, outliers or skipped.
	Status   string         `json:"status"`
	Jobs     []int64        `json:"jobs,omitempty"`
	Problems []string       `json:"problems,omitempty"`
	Median   AcceptMetrics  `json:"median"`
	Nodes    []AcceptNode   `json:"nodes,omitempty"`
	Results  []AcceptResult `json:"results,omitempty"`
}

// AcceptReport is what `rota accept -o json` prints and what it keeps in --results.
type AcceptReport struct {
	Time  time.Time `json:"time"`
	Pool  string    `json:"pool,omitempty"`
	Queue string    `json:"queue,omitempty"`
	// Nodes are the pool's ready nodes; Tested how many of them the stages use, placed
	// by the scheduler.
	Nodes  []string      `json:"nodes"`
	Tested int           `json:"tested"`
	Status string        `json:"status"`
	Stages []AcceptStage `json:"stages"`
	// File is where the report was saved; Previous the saved run it is compared with.
	File       string             `json:"file,omitempty"`
	Previous   string             `json:"previous,omitempty"`
	Comparison []AcceptComparison `json:"comparison,omitempty"`
}

// AcceptComparison is one metric of one stage's median against the previous run's.
type AcceptComparison struct {
	Stage     int     `json:"stage"`
	Metric    string  `json:"metric"`
	Previous  float64 `json:"previous"`
	Now       float64 `json:"now"`
	ChangePct float64 `json:"change_pct"`
}

// Stage statuses.
const (
	acceptPassed   = "passed"
	acceptFailed   = "failed"
	acceptOutliers = "outliers"
	acceptSkipped  = "skipped"
)

type acceptFlags struct {
	pool, queue, results string
	nodes, steps, mb     int
	timeout              time.Duration
	slow                 float64
}

func runAccept(ctx context.Context, cfg Config, args []string) int {
	fs, g := newFlagSet(cfg, "accept", acceptUsage)
	var f acceptFlags
	fs.StringVar(&f.pool, "pool", "", "the `pool` to test: nodes labelled pool=P (default: every ready node)")
	fs.StringVar(&f.queue, "queue", "", "submit to this `queue` (default: one limited to --pool, else the server's default)")
	fs.IntVar(&f.nodes, "nodes", 0, "test `N` of the pool's ready nodes (default: all of them)")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "how long each stage may take to be placed and finish")
	fs.StringVar(&f.results, "results", "", "keep reports in `DIR` (default $XDG_STATE_HOME/rota/accept, else ~/.local/state/rota/accept)")
	fs.IntVar(&f.steps, "steps", 10, "matrix-multiply `steps` per worker")
	fs.IntVar(&f.mb, "size-mb", 64, "`MB` each worker writes, reads back and checkpoints")
	fs.Float64Var(&f.slow, "slow", 1.5, "flag a node whose median step time is over `X` times the other nodes' median")
	if code, ok := cfg.parseNoArgs("accept", fs, g, args); !ok {
		return code
	}
	switch {
	case isSet(fs, "nodes") && f.nodes < 1:
		return cfg.usageError("accept", "--nodes must be 1 or more, got %d", f.nodes)
	case f.timeout <= 0:
		return cfg.usageError("accept", "--timeout must be above zero, got %s", f.timeout)
	case f.steps < 1 || f.steps > 10000:
		return cfg.usageError("accept", "--steps must be 1 to 10000, got %d", f.steps)
	case f.mb < 1 || f.mb > 65536:
		return cfg.usageError("accept", "--size-mb must be 1 to 65536, got %d", f.mb)
	case !(f.slow > 1):
		return cfg.usageError("accept", "--slow must be above 1, got %g", f.slow)
	}
	if f.results == "" {
		dir, err := cfg.stateDir()
		if err != nil {
			return cfg.usageError("accept", "no --results DIR, and %v", err)
		}
		f.results = filepath.Join(dir, "accept")
	}
	// Found out now, not after the stages have run.
	if err := os.MkdirAll(f.results, 0o755); err != nil {
		return cfg.usageError("accept", "--results: %v", err)
	}

	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	a := &acceptRun{cfg: cfg, c: c, f: f}
	nodes, tested, queue, err := a.plan(ctx)
	var bad *acceptInputError
	if errors.As(err, &bad) {
		return cfg.usageError("accept", "%v", bad.msg)
	}
	if err != nil {
		return cfg.fail(ctx, err)
	}
	rep := AcceptReport{Time: cfg.Now().UTC(), Pool: f.pool, Queue: queue, Tested: tested, Status: acceptPassed}
	for _, n := range nodes {
		rep.Nodes = append(rep.Nodes, n.Name)
	}
	if g.output != "json" {
		fmt.Fprintf(cfg.Stderr, "rota accept: %d of the %d ready node(s) of %s: %s\n", tested, len(nodes), poolName(f.pool), strings.Join(rep.Nodes, ", "))
	}
	for _, st := range acceptStages(nodes, tested) {
		if g.output != "json" && st.skip == "" {
			fmt.Fprintf(cfg.Stderr, "rota accept: stage %d, %s ...\n", st.n, st.name)
		}
		s, err := a.runStage(ctx, st, queue)
		if err != nil {
			return cfg.fail(ctx, err)
		}
		rep.Stages = append(rep.Stages, s)
		switch {
		case s.Status == acceptFailed:
			rep.Status = acceptFailed
		case s.Status == acceptOutliers && rep.Status == acceptPassed:
			rep.Status = acceptOutliers
		}
	}
	if err := a.keep(&rep); err != nil {
		fmt.Fprintf(cfg.Stderr, "rota accept: the report was not saved: %v\n", err)
	}
	if g.output == "json" {
		if code := cfg.printJSON(rep); code != ExitOK {
			return code
		}
	} else {
		printAcceptReport(cfg.Stdout, rep)
	}
	switch rep.Status {
	case acceptFailed:
		return ExitAcceptFailed
	case acceptOutliers:
		return ExitAcceptOutlier
	}
	return ExitOK
}

func poolName(pool string) string {
	if pool == "" {
		return "the cluster"
	}
	return "pool " + pool
}

// stateDir is where rota keeps what it learns over time: $XDG_STATE_HOME/rota, else
// $HOME/.local/state/rota.
func (cfg Config) stateDir() (string, error) {
	if d := cfg.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "rota"), nil
	}
	if h := cfg.Getenv("HOME"); h != "" {
		return filepath.Join(h, ".local", "state", "rota"), nil
	}
	return "", errors.New("neither XDG_STATE_HOME nor HOME is set")
}

// acceptInputError is bad input that only the server could show to be bad (an unknown
// pool): a usage error, not a failure.
type acceptInputError struct{ msg string }

func (e *acceptInputError) Error() string { return e.msg }

type acceptRun struct {
	cfg Config
	c   *Client
	f   acceptFlags
	// maxLimit is the chosen queue's maximum time limit in seconds (0: none).
	maxLimit int64
}

// plan returns the pool's ready nodes, how many of them to test, and the queue to submit to.
func (a *acceptRun) plan(ctx context.Context) ([]api.Node, int, string, error) {
	list, err := a.c.Nodes(ctx)
	if err != nil {
		return nil, 0, "", err
	}
	pools := map[string]bool{}
	var inPool []api.Node
	others := false // whether a node outside the pool exists
	for _, n := range list.Nodes {
		p := n.Labels["pool"]
		if p != "" {
			pools[p] = true
		}
		if a.f.pool == "" || p == a.f.pool {
			inPool = append(inPool, n)
		} else {
			others = true
		}
	}
	if a.f.pool != "" && len(inPool) == 0 {
		names := slices.Sorted(maps.Keys(pools))
		if len(names) == 0 {
			return nil, 0, "", &acceptInputError{fmt.Sprintf("--pool: no node is labelled pool=%s; no node has a pool label, so leave --pool out", a.f.pool)}
		}
		return nil, 0, "", &acceptInputError{fmt.Sprintf("--pool: no node is labelled pool=%s; the pools are: %s", a.f.pool, strings.Join(names, ", "))}
	}
	var ready []api.Node
	states := map[string]int{}
	for _, n := range inPool {
		switch {
		case n.State == api.NodeReady && !n.Syncing && len(n.GPUs) > 0:
			ready = append(ready, n)
		case n.State == api.NodeReady && len(n.GPUs) == 0:
			states["without GPUs"]++
		case n.Syncing:
			states["syncing"]++
		default:
			states[string(n.State)]++
		}
	}
	if len(ready) == 0 {
		var parts []string
		for _, s := range slices.Sorted(maps.Keys(states)) {
			parts = append(parts, fmt.Sprintf("%d %s", states[s], s))
		}
		what := "no nodes"
		if len(parts) > 0 {
			what = strings.Join(parts, ", ")
		}
		return nil, 0, "", fmt.Errorf("%s has no ready node with GPUs (%s)", poolName(a.f.pool), what)
	}
	sort.Slice(ready, func(i, j int) bool { return ready[i].Name < ready[j].Name })
	if a.f.nodes > len(ready) {
		return nil, 0, "", &acceptInputError{fmt.Sprintf("--nodes %d, but %s has %d ready node(s) with GPUs", a.f.nodes, poolName(a.f.pool), len(ready))}
	}
	tested := len(ready)
	if a.f.nodes > 0 {
		tested = a.f.nodes
	}
	queue, err := a.pickQueue(ctx, others)
	return ready, tested, queue, err
}

// pickQueue returns the queue to submit to: --queue, which must reach the pool; else with
// --pool the first queue limited to it alone, or the server's default ("") when the pool
// is every node; else the server's default.
func (a *acceptRun) pickQueue(ctx context.Context, others bool) (string, error) {
	if a.f.queue == "" && a.f.pool == "" {
		return "", nil
	}
	queues, err := a.c.Queues(ctx)
	if err != nil {
		return "", err
	}
	if a.f.queue != "" {
		for _, q := range queues {
			if q.Name != a.f.queue {
				continue
			}
			a.maxLimit = q.MaxTimeLimit
			if a.f.pool != "" && len(q.Pools) > 0 && !slices.Contains(q.Pools, a.f.pool) {
				return "", &acceptInputError{fmt.Sprintf("--queue %s places jobs on pools %s, not on %s", q.Name, strings.Join(q.Pools, ", "), a.f.pool)}
			}
			return q.Name, nil
		}
		var names []string
		for _, q := range queues {
			names = append(names, q.Name)
		}
		return "", &acceptInputError{fmt.Sprintf("--queue: no queue %q; the queues are: %s", a.f.queue, strings.Join(names, ", "))}
	}
	for _, q := range queues {
		if len(q.Pools) == 1 && q.Pools[0] == a.f.pool {
			a.maxLimit = q.MaxTimeLimit
			return q.Name, nil
		}
	}
	// Any queue reaches only the pool when every node is in it.
	if !others {
		return "", nil
	}
	return "", &acceptInputError{fmt.Sprintf("--pool %s: no queue places jobs on that pool alone; name one that reaches it with --queue", a.f.pool)}
}

// acceptStage is a stage as planned: what to submit.
type acceptStage struct {
	n    int
	name string
	// specs are the jobs; want is how many result lines each must print.
	specs []api.JobSpec
	want  []int
	// nodes is how many distinct nodes the jobs must run on.
	nodes int
	comm  bool
	skip  string
}

// acceptStages plans the three stages on n of the ready nodes. Stage 1 is one job with a
// rank on each node: separate one-GPU jobs would be packed onto as few nodes as the
// scheduler can. Stages 2 and 3 ask for the GPUs of the smallest node, so that each job
// fits every node.
func acceptStages(ready []api.Node, n int) []acceptStage {
	g := len(ready[0].GPUs)
	for _, node := range ready {
		g = min(g, len(node.GPUs))
	}
	s1 := acceptStage{n: 1, name: "one GPU on each node", specs: []api.JobSpec{gang(n, 1)}, want: []int{n}, nodes: n}
	s2 := acceptStage{n: 2, name: fmt.Sprintf("each node on %d GPUs", g), comm: g > 1, nodes: n}
	for range n {
		s2.specs = append(s2.specs, gang(1, g))
		s2.want = append(s2.want, g)
	}
	s3 := acceptStage{n: 3, name: fmt.Sprintf("two nodes on %d GPUs each", g), comm: true}
	if n < 2 {
		s3.skip = "needs two nodes"
	} else {
		s3.specs, s3.want, s3.nodes = []api.JobSpec{gang(2, g)}, []int{2 * g}, 2
	}
	return []acceptStage{s1, s2, s3}
}

func gang(nodes, perNode int) api.JobSpec {
	s := api.JobSpec{GPUs: nodes * perNode}
	if nodes > 1 {
		s.Nodes, s.GPUsPerNode = nodes, perNode
	}
	return s
}

// runStage submits a stage's jobs, waits for them, reads their results and judges them.
// It returns an error only when the stage could not run: the jobs could not be submitted,
// placed or finished in time, or the run was interrupted; it cancels its jobs then.
func (a *acceptRun) runStage(ctx context.Context, st acceptStage, queue string) (AcceptStage, error) {
	out := AcceptStage{Stage: st.n, Name: st.name}
	if st.skip != "" {
		out.Status, out.Problems = acceptSkipped, []string{st.skip}
		return out, nil
	}
	limit := int64(a.f.timeout / time.Second)
	if limit < 60 {
		limit = 60
	}
	if a.maxLimit > 0 && limit > a.maxLimit {
		limit = a.maxLimit
	}
	retries := 0
	for i, spec := range st.specs {
		spec.Name = fmt.Sprintf("accept-stage%d", st.n)
		spec.Queue = queue
		spec.Command = []string{"python3", "-c", acceptJob}
		spec.WorkDir = "/tmp" // on every node; the submitter's directory may be on none
		spec.TimeLimit = limit
		spec.RestartPolicy, spec.Retries = api.RestartNever, &retries
		spec.Env = map[string]string{
			"ACCEPT_STAGE": strconv.Itoa(st.n),
			"ACCEPT_STEPS": strconv.Itoa(a.f.steps),
			"ACCEPT_MB":    strconv.Itoa(a.f.mb),
			"ACCEPT_COMM":  map[bool]string{true: "1", false: "0"}[st.comm],
		}
		job, err := a.c.Submit(ctx, spec)
		if err != nil {
			a.cancel(out.Jobs)
			return out, fmt.Errorf("stage %d: submitting job %d of %d: %w", st.n, i+1, len(st.specs), err)
		}
		out.Jobs = append(out.Jobs, job.ID)
	}
	details, err := a.wait(ctx, st.n, out.Jobs)
	if err != nil {
		a.cancel(out.Jobs)
		return out, err
	}
	ran := map[string]bool{}
	for _, d := range details {
		if n := len(d.AttemptList); n > 0 {
			for _, p := range d.AttemptList[n-1].Placements {
				ran[p.Node] = true
			}
		}
	}
	if len(ran) < st.nodes {
		// Nodes of more GPUs than the smallest took two jobs of stage 2.
		out.Problems = append(out.Problems, fmt.Sprintf("the jobs ran on %d node(s), %s, not on %d", len(ran),
			strings.Join(slices.Sorted(maps.Keys(ran)), ", "), st.nodes))
	}
	for i, d := range details {
		res, problem := a.results(ctx, d)
		out.Results = append(out.Results, res...)
		if problem != "" {
			out.Problems = append(out.Problems, problem)
		} else if len(res) < st.want[i] {
			out.Problems = append(out.Problems, fmt.Sprintf("job %d: %d of %d results", d.ID, len(res), st.want[i]))
		}
	}
	judgeStage(&out, a.f.slow)
	return out, nil
}

// cancel cancels jobs, also after ctx is done (Ctrl-C): what was submitted must not stay.
func (a *acceptRun) cancel(jobs []int64) {
	ctx, done := context.WithTimeout(context.Background(), 15*time.Second)
	defer done()
	for _, id := range jobs {
		if _, err := a.c.Cancel(ctx, id); err != nil {
			fmt.Fprintf(a.cfg.Stderr, "rota accept: cancelling job %d: %v\n", id, err)
		}
	}
}

// wait waits until every job has ended, within --timeout. A job still pending then is
// reported with why it was not placed.
func (a *acceptRun) wait(ctx context.Context, stage int, jobs []int64) ([]api.JobDetail, error) {
	deadline := time.NewTimer(a.f.timeout)
	defer deadline.Stop()
	details := make([]api.JobDetail, len(jobs))
	for {
		ended := 0
		for i, id := range jobs {
			d, err := a.c.GetJob(ctx, id)
			if err != nil {
				return nil, fmt.Errorf("stage %d: %w", stage, err)
			}
			details[i] = d
			if d.State.Terminal() {
				ended++
			}
		}
		if ended == len(jobs) {
			return details, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			return nil, a.timedOut(ctx, stage, details)
		case <-time.After(acceptPoll):
		}
	}
}

func (a *acceptRun) timedOut(ctx context.Context, stage int, details []api.JobDetail) error {
	for _, d := range details {
		if d.State.Terminal() {
			continue
		}
		if d.State == api.StatePending || d.State == api.StateHeld {
			why := d.Message
			if w, err := a.c.Why(ctx, d.ID); err == nil && len(w.Reasons) > 0 {
				why = strings.Join(w.Reasons, "; ")
			}
			if why == "" {
				why = d.Reason
			}
			return fmt.Errorf("stage %d could not be placed within %s: job %d is %s: %s (its jobs were cancelled)", stage, a.f.timeout, d.ID, d.State, why)
		}
		return fmt.Errorf("stage %d did not finish within %s: job %d is still %s (its jobs were cancelled)", stage, a.f.timeout, d.ID, d.State)
	}
	return fmt.Errorf("stage %d did not finish within %s", stage, a.f.timeout)
}

// maxAcceptLog bounds how much of a rank's log is read for result lines.
const maxAcceptLog = 4 << 20

// results reads every rank's log of a job's last attempt and parses its result lines; the
// problem says why the job failed, if it did.
func (a *acceptRun) results(ctx context.Context, d api.JobDetail) ([]AcceptResult, string) {
	var problem string
	if d.State != api.StateSucceeded {
		why := d.Message
		if why == "" {
			why = d.Reason
		}
		problem = fmt.Sprintf("job %d %s: %s", d.ID, strings.ToLower(string(d.State)), why)
	}
	if len(d.AttemptList) == 0 {
		return nil, problem
	}
	at := d.AttemptList[len(d.AttemptList)-1]
	var out []AcceptResult
	for r, p := range at.Placements {
		var buf bytes.Buffer
		lctx, done := context.WithTimeout(ctx, 30*time.Second)
		err := copyLog(lctx, a.c, d.ID, LogOptions{Attempt: at.N, Rank: r, Wait: 2 * time.Second}, &limitedBuffer{b: &buf, n: maxAcceptLog})
		done()
		if err != nil && problem == "" {
			problem = fmt.Sprintf("job %d: reading the log of rank %d on %s: %v", d.ID, r, p.Node, err)
		}
		res, bad := parseAcceptLog(&buf, d.ID, p.Node)
		if bad != "" && problem == "" {
			problem = fmt.Sprintf("job %d, rank %d on %s: %s", d.ID, r, p.Node, bad)
		}
		out = append(out, res...)
	}
	return out, problem
}

// limitedBuffer keeps the first n bytes written to it and drops the rest.
type limitedBuffer struct {
	b *bytes.Buffer
	n int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// parseAcceptLog returns the result lines of one rank's log; bad describes the first line
// that is not a valid result.
func parseAcceptLog(r io.Reader, job int64, node string) ([]AcceptResult, string) {
	var out []AcceptResult
	var bad string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), acceptResultPrefix)
		if !ok {
			continue
		}
		var res AcceptResult
		err := json.Unmarshal([]byte(line), &res)
		switch {
		case err != nil:
			err = fmt.Errorf("result line %.80q: %v", line, err)
		case !finitePositive(res.StepMS) || !finitePositive(res.ReadMBs) || !finitePositive(res.CkptMS) ||
			res.CommMS < 0 || math.IsNaN(res.CommMS) || math.IsInf(res.CommMS, 0):
			err = fmt.Errorf("result line %.80q: a timing is not a positive number", line)
		}
		if err != nil {
			if bad == "" {
				bad = err.Error()
			}
			continue
		}
		res.Job, res.Node = job, node
		out = append(out, res)
	}
	return out, bad
}

func finitePositive(f float64) bool { return f > 0 && !math.IsInf(f, 0) }

// judgeStage fills a stage's medians, its nodes, and its status: failed with problems,
// else outliers when a node's median step time is over slow times the median of the other
// nodes' medians. The others', not the stage's: of two nodes, the stage's median is their
// mean, which a node twice as slow as the other exceeds by a third only.
func judgeStage(s *AcceptStage, slow float64) {
	s.Median = medianMetrics(s.Results)
	byNode := map[string][]AcceptResult{}
	for _, r := range s.Results {
		byNode[r.Node] = append(byNode[r.Node], r)
	}
	for _, name := range slices.Sorted(maps.Keys(byNode)) {
		rs := byNode[name]
		s.Nodes = append(s.Nodes, AcceptNode{Node: name, Results: len(rs), Median: medianMetrics(rs)})
	}
	outliers := false
	for i := range s.Nodes {
		var others []float64
		for j, o := range s.Nodes {
			if j != i {
				others = append(others, o.Median.StepMS)
			}
		}
		ref := median(others)
		if n := &s.Nodes[i]; ref > 0 && n.Median.StepMS > slow*ref {
			n.Problem = fmt.Sprintf("step time %.1fx the other nodes' median", n.Median.StepMS/ref)
			outliers = true
		}
	}
	switch {
	case len(s.Problems) > 0:
		s.Status = acceptFailed
	case outliers:
		s.Status = acceptOutliers
	default:
		s.Status = acceptPassed
	}
}

func medianMetrics(rs []AcceptResult) AcceptMetrics {
	pick := func(f func(AcceptResult) float64) float64 {
		var xs []float64
		for _, r := range rs {
			if v := f(r); v > 0 {
				xs = append(xs, v)
			}
		}
		return median(xs)
	}
	return AcceptMetrics{
		StepMS:  pick(func(r AcceptResult) float64 { return r.StepMS }),
		CommMS:  pick(func(r AcceptResult) float64 { return r.CommMS }),
		ReadMBs: pick(func(r AcceptResult) float64 { return r.ReadMBs }),
		CkptMS:  pick(func(r AcceptResult) float64 { return r.CkptMS }),
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	if n := len(xs); n%2 == 1 {
		return xs[n/2]
	}
	n := len(xs)
	return (xs[n/2-1] + xs[n/2]) / 2
}

// keep saves rep in the results directory, after comparing it with the latest report
// there of the same pool.
func (a *acceptRun) keep(rep *AcceptReport) error {
	if prev, file, err := latestAcceptReport(a.f.results, rep.Pool); err != nil {
		fmt.Fprintf(a.cfg.Stderr, "rota accept: no comparison: %v\n", err)
	} else if file != "" {
		rep.Previous = file
		rep.Comparison = compareAccept(prev, *rep)
	}
	if err := os.MkdirAll(a.f.results, 0o755); err != nil {
		return err
	}
	pool := rep.Pool
	if pool == "" {
		pool = "all"
	}
	name := fmt.Sprintf("accept-%s-%s.json", safeFileName(pool), rep.Time.Format("20060102T150405.000Z"))
	path := filepath.Join(a.f.results, name)
	// Two runs in one millisecond (a fixed clock) keep both reports.
	for i := 2; ; i++ {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			break
		}
		path = filepath.Join(a.f.results, strings.TrimSuffix(name, ".json")+"-"+strconv.Itoa(i)+".json")
	}
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	// Written whole under another name first, so that no half report is ever compared with.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	rep.File = path
	return nil
}

// safeFileName keeps letters, digits, '-', '_' and '.' of a pool's name.
func safeFileName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, s)
}

// latestAcceptReport reads the newest report of pool in dir; no file and no error when
// there is none.
func latestAcceptReport(dir, pool string) (AcceptReport, string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return AcceptReport{}, "", nil
	}
	if err != nil {
		return AcceptReport{}, "", err
	}
	var best AcceptReport
	var bestFile string
	for _, e := range entries {
		if e.IsDir() || !strings.HasPrefix(e.Name(), "accept-") || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var r AcceptReport
		if json.Unmarshal(data, &r) != nil || r.Pool != pool {
			continue // someone else's file, or another pool's run
		}
		if bestFile == "" || r.Time.After(best.Time) {
			best, bestFile = r, path
		}
	}
	return best, bestFile, nil
}

// compareAccept lists each stage's medians now against prev's, for stages both ran.
func compareAccept(prev, now AcceptReport) []AcceptComparison {
	var out []AcceptComparison
	for _, s := range now.Stages {
		var p *AcceptStage
		for i := range prev.Stages {
			if prev.Stages[i].Stage == s.Stage {
				p = &prev.Stages[i]
			}
		}
		if p == nil {
			continue
		}
		for _, m := range []struct {
			name     string
			was, now float64
		}{
			{"step_ms", p.Median.StepMS, s.Median.StepMS},
			{"comm_ms", p.Median.CommMS, s.Median.CommMS},
			{"read_mb_s", p.Median.ReadMBs, s.Median.ReadMBs},
			{"ckpt_ms", p.Median.CkptMS, s.Median.CkptMS},
		} {
			if m.was <= 0 || m.now <= 0 {
				continue
			}
			out = append(out, AcceptComparison{Stage: s.Stage, Metric: m.name, Previous: m.was, Now: m.now,
				ChangePct: math.Round((m.now-m.was)/m.was*1000) / 10})
		}
	}
	return out
}

func printAcceptReport(w io.Writer, rep AcceptReport) {
	for _, s := range rep.Stages {
		fmt.Fprintf(w, "stage %d: %s: %s", s.Stage, s.Name, strings.ToUpper(s.Status))
		if len(s.Jobs) > 0 {
			ids := make([]string, len(s.Jobs))
			for i, id := range s.Jobs {
				ids[i] = strconv.FormatInt(id, 10)
			}
			fmt.Fprintf(w, " (job %s)", strings.Join(ids, ", "))
		}
		fmt.Fprintln(w)
		for _, p := range s.Problems {
			fmt.Fprintf(w, "  %s\n", clean(p))
		}
		if len(s.Nodes) == 0 {
			continue
		}
		tw := newTable(w)
		fmt.Fprintln(tw, "  NODE\tWORKERS\tSTEP ms\tCOMM ms\tREAD MB/s\tCKPT ms\t")
		for _, n := range s.Nodes {
			flag := ""
			if n.Problem != "" {
				flag = "OUTLIER: " + n.Problem
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\t%s\t%s\n", clean(n.Node), n.Results, num(n.Median.StepMS), num(n.Median.CommMS),
				num(n.Median.ReadMBs), num(n.Median.CkptMS), flag)
		}
		fmt.Fprintf(tw, "  median\t\t%s\t%s\t%s\t%s\t\n", num(s.Median.StepMS), num(s.Median.CommMS), num(s.Median.ReadMBs), num(s.Median.CkptMS))
		tw.Flush()
	}
	if rep.Previous != "" {
		fmt.Fprintf(w, "compared with %s:\n", rep.Previous)
		for _, c := range rep.Comparison {
			fmt.Fprintf(w, "  stage %d %-9s %s -> %s (%+.1f%%)\n", c.Stage, c.Metric, num(c.Previous), num(c.Now), c.ChangePct)
		}
	}
	if rep.File != "" {
		fmt.Fprintf(w, "saved: %s\n", rep.File)
	}
	fmt.Fprintf(w, "result: %s\n", strings.ToUpper(rep.Status))
}

// num prints a timing with three significant digits or so; "-" for none.
func num(f float64) string {
	switch {
	case f <= 0:
		return "-"
	case f >= 100:
		return strconv.FormatFloat(f, 'f', 0, 64)
	case f >= 10:
		return strconv.FormatFloat(f, 'f', 1, 64)
	}
	return strconv.FormatFloat(f, 'f', 2, 64)
}
