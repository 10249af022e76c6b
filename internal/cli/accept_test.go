package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/rotahq/rota/internal/api"
)

// acceptFake is a server for `rota accept`: it places every job at once on the nodes in
// order, ends it in the state end gives, and serves each rank's log with a result line per
// GPU, whose step time step gives.
type acceptFake struct {
	t      *testing.T
	nodes  []api.Node
	queues []api.Queue
	end    func(spec api.JobSpec) api.JobState
	step   func(node string, stage int) float64
	// onGet, when set, runs on every GET of a job.
	onGet func(d api.JobDetail)
	// pack puts every one-node job on the first node.
	pack bool

	mu        sync.Mutex // guards the fields below
	jobs      map[int64]*api.JobDetail
	next      int64
	rr        int
	submitted []api.JobSpec
	cancelled []int64
}

func newAcceptFake(t *testing.T) (*acceptFake, string) {
	f := &acceptFake{t: t, jobs: map[int64]*api.JobDetail{}, next: 100,
		nodes: []api.Node{
			acceptNode("gpu-01", "train", 4, api.NodeReady),
			acceptNode("gpu-02", "train", 4, api.NodeReady),
			acceptNode("dev-01", "dev", 2, api.NodeReady),
		},
		queues: []api.Queue{{Name: "train"}, {Name: "train-only", Pools: []string{"train"}, MaxTimeLimit: 3600}},
		end:    func(api.JobSpec) api.JobState { return api.StateSucceeded },
		step:   func(string, int) float64 { return 10 },
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/nodes", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, api.NodeList{Nodes: f.nodes})
	})
	mux.HandleFunc("GET /api/v1/queues", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, api.QueueList{Queues: f.queues})
	})
	mux.HandleFunc("POST /api/v1/jobs", f.submit)
	mux.HandleFunc("GET /api/v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		d := f.job(r)
		if f.onGet != nil {
			f.onGet(d)
		}
		writeJSON(w, 200, d)
	})
	mux.HandleFunc("GET /api/v1/jobs/{id}/why", func(w http.ResponseWriter, r *http.Request) {
		d := f.job(r)
		writeJSON(w, 200, api.Why{JobID: d.ID, State: d.State, Reasons: []string{"needs 4 free GPUs on 2 nodes; best node gpu-01 has 1"}})
	})
	mux.HandleFunc("POST /api/v1/jobs/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		d := f.job(r)
		f.mu.Lock()
		f.cancelled = append(f.cancelled, d.ID)
		f.mu.Unlock()
		writeJSON(w, 200, d.Job)
	})
	mux.HandleFunc("GET /api/v1/jobs/{id}/logs", f.logs)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func acceptNode(name, pool string, gpus int, state api.NodeState) api.Node {
	n := api.Node{Name: name, State: state}
	n.Labels = map[string]string{"pool": pool}
	for i := range gpus {
		n.GPUs = append(n.GPUs, api.GPU{Index: i})
	}
	return n
}

func (f *acceptFake) job(r *http.Request) api.JobDetail {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.jobs[id]
	if !ok {
		f.t.Errorf("no job %d", id)
		return api.JobDetail{}
	}
	return *d
}

func (f *acceptFake) submit(w http.ResponseWriter, r *http.Request) {
	var spec api.JobSpec
	if err := json.NewDecoder(r.Body).Decode(&spec); err != nil {
		f.t.Errorf("submit: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.submitted = append(f.submitted, spec)
	f.next++
	d := &api.JobDetail{Job: api.Job{ID: f.next, Spec: spec, State: f.end(spec)}}
	if d.State == api.StateFailed {
		d.Message = "rank 1 on gpu-02: exited with code 3; the other ranks were stopped"
	}
	if d.State != api.StatePending {
		ranks := max(spec.Nodes, 1)
		perNode := spec.GPUs / ranks
		at := api.Attempt{JobID: d.ID, N: 1, State: d.State}
		for r := range ranks {
			node := f.nodes[(f.rr+r)%2] // the pool's two nodes, in turn for one-node jobs
			p := api.Placement{Node: node.Name}
			for g := range perNode {
				p.GPUIndices = append(p.GPUIndices, g)
			}
			at.Placements = append(at.Placements, p)
		}
		if ranks == 1 && !f.pack {
			f.rr++
		}
		d.AttemptList = []api.Attempt{at}
	}
	f.jobs[d.ID] = d
	writeJSON(w, 201, d.Job)
}

func (f *acceptFake) logs(w http.ResponseWriter, r *http.Request) {
	d := f.job(r)
	rank, _ := strconv.Atoi(r.URL.Query().Get("rank"))
	p := d.AttemptList[0].Placements[rank]
	stage, _ := strconv.Atoi(d.Spec.Env["ACCEPT_STAGE"])
	w.Header().Set("X-Rota-Log-Done", "true")
	w.Header().Set("X-Rota-Log-Attempt", "1")
	if r.URL.Query().Get("offset") != "" {
		return
	}
	fmt.Fprintf(w, "some output of the job\n")
	for _, g := range p.GPUIndices {
		res := map[string]any{"stage": stage, "rank": rank*len(p.GPUIndices) + g, "gpu": strconv.Itoa(g), "backend": "numpy",
			"step_ms": f.step(p.Node, stage), "read_mb_s": 900.0, "ckpt_ms": 40.0}
		if d.Spec.Env["ACCEPT_COMM"] == "1" {
			res["comm_ms"] = 2.5
		}
		b, _ := json.Marshal(res)
		fmt.Fprintf(w, "ROTA_ACCEPT %s\n", b)
	}
}

func acceptEnv(t *testing.T, url string) testRun {
	return testRun{env: map[string]string{"ROTA_SERVER": url, "ROTA_TOKEN": adminToken, "HOME": t.TempDir()}}
}

func TestAcceptReportsStagesAndKeepsResults(t *testing.T) {
	f, url := newAcceptFake(t)
	tr := acceptEnv(t, url)
	code, out, errOut := tr.run(t, "accept", "--pool", "train", "-o", "json")
	if code != ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	var rep AcceptReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Queue != "train-only" || strings.Join(rep.Nodes, ",") != "gpu-01,gpu-02" || rep.Tested != 2 || rep.Status != acceptPassed {
		t.Errorf("queue %q, nodes %v, status %s; want train-only, the train pool's two nodes, passed", rep.Queue, rep.Nodes, rep.Status)
	}
	// Stage 1: one rank of one GPU on each node; 2: one job per node on its 4 GPUs; 3: a
	// two-node gang of 4 GPUs each.
	want := []struct {
		jobs, results int
		spec          api.JobSpec
	}{
		{1, 2, api.JobSpec{GPUs: 2, Nodes: 2, GPUsPerNode: 1}},
		{2, 8, api.JobSpec{GPUs: 4}},
		{1, 8, api.JobSpec{GPUs: 8, Nodes: 2, GPUsPerNode: 4}},
	}
	for i, s := range rep.Stages {
		if len(s.Jobs) != want[i].jobs || len(s.Results) != want[i].results || len(s.Nodes) != 2 || s.Median.StepMS != 10 {
			t.Errorf("stage %d: %d jobs, %d results, %d nodes, median step %v", s.Stage, len(s.Jobs), len(s.Results), len(s.Nodes), s.Median.StepMS)
		}
	}
	for _, spec := range f.submitted {
		if spec.Queue != "train-only" || spec.TimeLimit != 600 || spec.Retries == nil || *spec.Retries != 0 || spec.Command[0] != "python3" {
			t.Errorf("submitted %+v", spec)
		}
	}
	if f.submitted[0].GPUs != want[0].spec.GPUs || f.submitted[0].Nodes != 2 || f.submitted[3].GPUsPerNode != 4 {
		t.Errorf("specs %+v", f.submitted)
	}
	dir := filepath.Join(tr.env["HOME"], ".local", "state", "rota", "accept")
	if filepath.Dir(rep.File) != dir {
		t.Errorf("saved in %s, want %s", rep.File, dir)
	}

	// A second run, with gpu-02 slow in stage 2, flags it, and compares with the first.
	f.step = func(node string, stage int) float64 {
		if node == "gpu-02" && stage == 2 {
			return 20
		}
		return 11
	}
	code, out, errOut = tr.run(t, "accept", "--pool", "train")
	if code != ExitAcceptOutlier {
		t.Fatalf("exit %d, want %d\n%s\n%s", code, ExitAcceptOutlier, out, errOut)
	}
	for _, w := range []string{
		"stage 2: each node on 4 GPUs: OUTLIERS",
		"gpu-02  4        20.0     2.50     900        40.0     OUTLIER: step time 1.8x the other nodes' median",
		"compared with " + rep.File,
		"stage 1 step_ms   10.0 -> 11.0 (+10.0%)",
		"result: OUTLIERS",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("the report lacks %q:\n%s", w, out)
		}
	}
}

func TestAcceptFailedJobFailsStage(t *testing.T) {
	f, url := newAcceptFake(t)
	f.end = func(spec api.JobSpec) api.JobState {
		if spec.Nodes == 2 && spec.GPUsPerNode == 4 {
			return api.StateFailed
		}
		return api.StateSucceeded
	}
	code, out, errOut := acceptEnv(t, url).run(t, "accept", "--pool", "train", "--results", t.TempDir())
	if code != ExitAcceptFailed {
		t.Fatalf("exit %d, want %d\n%s\n%s", code, ExitAcceptFailed, out, errOut)
	}
	for _, w := range []string{"stage 3: two nodes on 4 GPUs each: FAILED", "job 104 failed: rank 1 on gpu-02: exited with code 3", "result: FAILED"} {
		if !strings.Contains(out, w) {
			t.Errorf("the report lacks %q:\n%s", w, out)
		}
	}
}

// Two jobs of stage 2 on one node leave the other untested: the stage fails.
func TestAcceptStageOnTooFewNodesFails(t *testing.T) {
	f, url := newAcceptFake(t)
	f.pack = true
	code, out, errOut := acceptEnv(t, url).run(t, "accept", "--pool", "train", "--results", t.TempDir())
	if code != ExitAcceptFailed {
		t.Fatalf("exit %d, want %d\n%s\n%s", code, ExitAcceptFailed, out, errOut)
	}
	for _, w := range []string{"stage 2: each node on 4 GPUs: FAILED", "the jobs ran on 1 node(s), gpu-01, not on 2"} {
		if !strings.Contains(out, w) {
			t.Errorf("the report lacks %q:\n%s", w, out)
		}
	}
}

// One node: stage 1 is a one-GPU job, stage 3 is skipped, and the run passes.
func TestAcceptOneNode(t *testing.T) {
	f, url := newAcceptFake(t)
	code, out, errOut := acceptEnv(t, url).run(t, "accept", "--pool", "train", "--nodes", "1", "--results", t.TempDir(), "-o", "json")
	var rep AcceptReport
	if code != ExitOK || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if rep.Tested != 1 || len(rep.Nodes) != 2 || rep.Stages[2].Status != acceptSkipped || len(f.submitted) != 2 ||
		f.submitted[0].GPUs != 1 || f.submitted[0].Nodes != 0 || f.submitted[1].GPUs != 4 {
		t.Errorf("report %+v, submitted %+v", rep, f.submitted)
	}
}

func TestAcceptBadInput(t *testing.T) {
	f, url := newAcceptFake(t)
	f.nodes = append(f.nodes, acceptNode("old-01", "old", 8, api.NodeDrained), acceptNode("old-02", "old", 8, api.NodeLost))
	tr := acceptEnv(t, url)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--pool", "nope"}, ExitUsage, "rota accept: --pool: no node is labelled pool=nope; the pools are: dev, old, train"},
		{[]string{"--pool", "old"}, ExitError, "rota: pool old has no ready node with GPUs (1 DRAINED, 1 LOST)"},
		{[]string{"--nodes", "0"}, ExitUsage, "rota accept: --nodes must be 1 or more, got 0"},
		{[]string{"--pool", "train", "--nodes", "3"}, ExitUsage, "rota accept: --nodes 3, but pool train has 2 ready node(s) with GPUs"},
		{[]string{"--pool", "dev"}, ExitUsage, "rota accept: --pool dev: no queue places jobs on that pool alone; name one that reaches it with --queue"},
		{[]string{"--pool", "dev", "--queue", "train-only"}, ExitUsage, "rota accept: --queue train-only places jobs on pools train, not on dev"},
		{[]string{"--queue", "nope"}, ExitUsage, `rota accept: --queue: no queue "nope"; the queues are: train, train-only`},
		{[]string{"--timeout", "0s"}, ExitUsage, "rota accept: --timeout must be above zero, got 0s"},
		{[]string{"--slow", "1"}, ExitUsage, "rota accept: --slow must be above 1, got 1"},
		{[]string{"extra"}, ExitUsage, `rota accept: unexpected argument "extra"`},
		{[]string{"--results", filepath.Join(file, "sub")}, ExitUsage, "rota accept: --results: mkdir " + file + ": not a directory"},
	} {
		code, out, errOut := tr.run(t, "accept", c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("accept %v: exit %d, stderr %q; want %d, %q", c.args, code, errOut, c.code, c.want)
		}
		if out != "" {
			t.Errorf("accept %v printed %q", c.args, out)
		}
	}
	if len(f.submitted) != 0 {
		t.Errorf("bad input submitted %d jobs", len(f.submitted))
	}

	// A pool that is every node needs no queue of its own: the server's default will do.
	f.nodes, f.queues = f.nodes[:2], f.queues[:1]
	code, out, errOut := tr.run(t, "accept", "--pool", "train", "--results", t.TempDir(), "-o", "json")
	var rep AcceptReport
	if code != ExitOK || json.Unmarshal([]byte(out), &rep) != nil || rep.Queue != "" || f.submitted[0].Queue != "" {
		t.Errorf("exit %d, queue %q: %s %s", code, rep.Queue, out, errOut)
	}
}

// A stage that cannot be placed in --timeout says why, and its jobs are cancelled.
func TestAcceptUnplacedStageIsCancelled(t *testing.T) {
	f, url := newAcceptFake(t)
	f.end = func(spec api.JobSpec) api.JobState {
		if spec.Nodes == 2 && spec.GPUsPerNode == 4 {
			return api.StatePending
		}
		return api.StateSucceeded
	}
	results := t.TempDir()
	code, out, errOut := acceptEnv(t, url).run(t, "accept", "--pool", "train", "--timeout", "1s", "--results", results)
	if code != ExitError {
		t.Fatalf("exit %d, want %d\n%s\n%s", code, ExitError, out, errOut)
	}
	want := "rota: stage 3 could not be placed within 1s: job 104 is PENDING: needs 4 free GPUs on 2 nodes; best node gpu-01 has 1 (its jobs were cancelled)"
	if !strings.Contains(errOut, want) {
		t.Errorf("stderr %q lacks %q", errOut, want)
	}
	if fmt.Sprint(f.cancelled) != "[104]" {
		t.Errorf("cancelled %v, want [104]", f.cancelled)
	}
	if entries, _ := os.ReadDir(results); len(entries) != 0 {
		t.Errorf("a run that could not finish saved %d files", len(entries))
	}
}

// Ctrl-C while a stage runs cancels its jobs.
func TestAcceptInterruptCancels(t *testing.T) {
	f, url := newAcceptFake(t)
	f.end = func(api.JobSpec) api.JobState { return api.StateRunning }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.onGet = func(api.JobDetail) { cancel() }
	code, _, errOut := acceptEnv(t, url).runCtx(t, ctx, "accept", "--results", t.TempDir())
	if code != ExitError || !strings.Contains(errOut, "interrupted") {
		t.Errorf("exit %d, stderr %q; want %d, interrupted", code, errOut, ExitError)
	}
	if fmt.Sprint(f.cancelled) != "[101]" {
		t.Errorf("cancelled %v, want [101]", f.cancelled)
	}
}

func TestParseAcceptLog(t *testing.T) {
	log := `hello
ROTA_ACCEPT {"stage":1,"rank":0,"gpu":"0","backend":"python","step_ms":3.5,"read_mb_s":100,"ckpt_ms":7}
ROTA_ACCEPT {"stage":1,"rank":1,"gpu":"1","step_ms":-1,"read_mb_s":100,"ckpt_ms":7}
ROTA_ACCEPT not json
`
	res, bad := parseAcceptLog(strings.NewReader(log), 7, "gpu-01")
	if len(res) != 1 || res[0].Node != "gpu-01" || res[0].Job != 7 || res[0].StepMS != 3.5 {
		t.Errorf("results %+v", res)
	}
	if !strings.Contains(bad, "a timing is not a positive number") {
		t.Errorf("bad %q", bad)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.xs); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}
