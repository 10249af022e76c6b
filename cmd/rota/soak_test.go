package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cli"
	"github.com/rotahq/rota/internal/store/storetest"
)

// The soak test injects faults into a real cluster while a client submits a stream of
// short jobs: at random points it kills the server or an agent with kill -9 and starts it
// again after a short random pause, now and then long enough for the node to be declared
// lost. Every job records its start and end in a markers file. When everything has
// settled it checks what must hold whatever the faults:
//
//   - every acknowledged job exists and reaches a terminal state, and the server holds no
//     job nobody was told about (idempotent submits);
//   - no attempt of a job started twice;
//   - no job that SUCCEEDED started again after its successful end;
//   - no GPU of a node was held by two live processes at once;
//   - the attempts the server records agree with what the markers say ran where;
//   - the log of each job's attempt that succeeded is on the server whole: every line it
//     printed, once.
//
// The default run is short: a few rounds on SQLite. ROTA_SOAK=1 runs ROTA_SOAK_ROUNDS
// rounds (default 100) on SQLite and then on PostgreSQL. The randomness is seeded; the
// seed is logged, and ROTA_SOAK_SEED replays it (the faults land at the same points of
// the schedule, not of the processes' own timing).

func TestSoak(t *testing.T) {
	skipShort(t)
	rounds := 4
	long := os.Getenv("ROTA_SOAK") == "1"
	if long {
		rounds = 100
		if s := os.Getenv("ROTA_SOAK_ROUNDS"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				t.Fatalf("ROTA_SOAK_ROUNDS=%q: want a positive number", s)
			}
			rounds = n
		}
	} else {
		// The short run shares the machine with the other end-to-end tests.
		t.Parallel()
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ROTA_SOAK_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("ROTA_SOAK_SEED=%q: want a number", s)
		}
		seed = n
	}
	t.Logf("soak seed %d (replay with ROTA_SOAK_SEED=%d)", seed, seed)
	t.Run("sqlite", func(t *testing.T) { runSoak(t, soakConfig{backend: "sqlite", rounds: rounds, seed: seed}) })
	if long {
		t.Run("postgres", func(t *testing.T) {
			runSoak(t, soakConfig{backend: "postgres", store: storetest.StartPostgres(t), rounds: rounds, seed: seed})
		})
	}
}

type soakConfig struct {
	backend string
	store   string // --store; empty for SQLite in the data dir
	rounds  int
	seed    uint64
}

// soakNodes are the cluster's nodes, four fake GPUs each.
var soakNodes = []string{"soak-a", "soak-b", "soak-c"}

const (
	soakGPUsPerNode = "4"
	// soakLostAfter is the server's --node-lost-after; a long agent pause exceeds it.
	soakLostAfter = 3 * time.Second
	soakGrace     = 5
)

// soakJob is a job the submitter was told the server accepted.
type soakJob struct {
	id   int64
	gpus int
}

// submitter sends a steady stream of short jobs, each with its own Idempotency-Key, and
// retries each submit with the same key until the server answers it, through server
// restarts.
type submitter struct {
	url, token, markers string
	http                *http.Client
	rng                 *rand.Rand

	mu      sync.Mutex // guards the fields below
	acked   []soakJob
	retries int
	gaveUp  int
	errs    []string
}

func (s *submitter) run(ctx context.Context) {
	for ctx.Err() == nil {
		gpus := 1 + s.rng.IntN(2)
		secs := 0.2 + 1.8*s.rng.Float64()
		pause := time.Duration(150+s.rng.IntN(300)) * time.Millisecond
		key := make([]byte, 12)
		for i := range key {
			key[i] = byte(s.rng.UintN(256))
		}
		spec := api.JobSpec{GPUs: gpus, Grace: soakGrace, Command: shell(markerPrelude(s.markers) + fmt.Sprintf(`
trap 'mark end code=term; exit 143' TERM
mark start
echo "log $ROTA_JOB_ID.$ROTA_ATTEMPT begin"
sleep %.2f & wait $!
echo "log $ROTA_JOB_ID.$ROTA_ATTEMPT end"
mark end code=0`, secs))}
		s.submit(ctx, spec, hex.EncodeToString(key))
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
	}
}

// submit posts one job until the server acknowledges it: connection failures, lost
// answers and 5xx are retried with the same key; anything else is an error.
func (s *submitter) submit(ctx context.Context, spec api.JobSpec, key string) {
	body := jsonBytes(spec)
	deadline := time.Now().Add(60 * time.Second)
	for try := 0; ; try++ {
		if try > 0 {
			s.mu.Lock()
			s.retries++
			s.mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
		if time.Now().After(deadline) || (ctx.Err() != nil && try > 0) {
			s.mu.Lock()
			s.gaveUp++
			s.mu.Unlock()
			return
		}
		req, _ := http.NewRequest(http.MethodPost, s.url+"/api/v1/jobs", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+s.token)
		req.Header.Set("Idempotency-Key", key)
		resp, err := s.http.Do(req)
		if err != nil {
			continue
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode >= 500 {
			continue
		}
		var job api.Job
		if resp.StatusCode/100 != 2 || json.Unmarshal(data, &job) != nil || job.ID == 0 {
			s.mu.Lock()
			s.errs = append(s.errs, fmt.Sprintf("submit (key %s) answered %d: %s", key, resp.StatusCode, data))
			s.mu.Unlock()
			return
		}
		s.mu.Lock()
		s.acked = append(s.acked, soakJob{id: job.ID, gpus: spec.GPUs})
		s.mu.Unlock()
		return
	}
}

func runSoak(t *testing.T, cfg soakConfig) {
	began := time.Now()
	nodes := map[string]string{}
	for _, n := range soakNodes {
		nodes[n] = soakGPUsPerNode
	}
	c := newTestCluster(t, nodes, clusterOpts{notReady: "1s", lost: soakLostAfter.String(), assignTimeout: "20s", store: cfg.store})
	// One client for the submitter alone: the cluster's own is replaced when the server
	// restarts, and the two goroutines must not share it.
	own, err := cli.NewClient(cli.Endpoint{Server: "https://" + c.addr, Token: c.token, CAFingerprint: c.fingerprint})
	if err != nil {
		t.Fatal(err)
	}
	own.HTTP.Timeout = 20 * time.Second
	sub := &submitter{url: "https://" + c.addr, token: c.token, markers: c.markers, http: own.HTTP, rng: rand.New(rand.NewPCG(cfg.seed, 1))}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { sub.run(ctx) })
	defer func() {
		stop()
		wg.Wait()
	}()

	faults := rand.New(rand.NewPCG(cfg.seed, 2))
	kills := map[string]int{}
	for round := 1; round <= cfg.rounds; round++ {
		time.Sleep(time.Duration(500+faults.IntN(2000)) * time.Millisecond)
		if faults.IntN(3) == 0 {
			kills["server"]++
			c.server.kill()
			time.Sleep(time.Duration(100+faults.IntN(1400)) * time.Millisecond)
			c.startServer()
			continue
		}
		node := soakNodes[faults.IntN(len(soakNodes))]
		pause := time.Duration(100+faults.IntN(1900)) * time.Millisecond
		if faults.IntN(4) == 0 {
			// Long enough for the server to declare the node lost and requeue its jobs.
			pause = soakLostAfter + time.Duration(500+faults.IntN(2000))*time.Millisecond
			kills["agent (past lost-after)"]++
		} else {
			kills["agent"]++
		}
		c.agents[node].kill()
		time.Sleep(pause)
		c.restartAgent(node)
	}
	stop()
	wg.Wait()
	faultEnd := time.Now()

	sub.mu.Lock()
	acked, retries, gaveUp, submitErrs := slices.Clone(sub.acked), sub.retries, sub.gaveUp, slices.Clone(sub.errs)
	sub.mu.Unlock()
	for _, e := range submitErrs {
		t.Error(e)
	}
	if len(acked) == 0 {
		t.Fatal("no job was acknowledged")
	}

	// Settle: every acknowledged job reaches a terminal state.
	c.waitNodesReady(soakNodes...)
	ackedIDs := map[int64]bool{}
	for _, j := range acked {
		ackedIDs[j.id] = true
	}
	var jobs map[int64]api.Job
	settle := 2*time.Minute + time.Duration(len(acked))*100*time.Millisecond
	waitForf(t, settle, func() string {
		var open []string
		for _, id := range sortedIDs(ackedIDs) {
			if j, ok := jobs[id]; !ok {
				open = append(open, fmt.Sprintf("%d missing", id))
			} else if !j.State.Terminal() {
				open = append(open, fmt.Sprintf("%d %s (%s)", id, j.State, j.Message))
			}
		}
		return fmt.Sprintf("every acknowledged job to end; not yet: %v", open)
	}, func() bool {
		list, err := c.client.AllJobs(context.Background(), cli.ListOptions{States: []string{"all"}})
		if err != nil {
			return false
		}
		jobs = map[int64]api.Job{}
		for _, j := range list {
			jobs[j.ID] = j
		}
		for id := range ackedIDs {
			if j, ok := jobs[id]; !ok || !j.State.Terminal() {
				return false
			}
		}
		return true
	})
	for _, id := range sortedIDs(jobs) {
		if !ackedIDs[id] && gaveUp == 0 {
			t.Errorf("job %d exists but no submit was acknowledged with it: a retried submit created a second job", id)
		}
	}

	details := map[int64]api.JobDetail{}
	for id := range ackedIDs {
		details[id] = c.job(id)
	}
	ms := readMarkers(t, c.markers)
	problems := checkSoak(details, ms)
	for _, p := range problems {
		t.Error(p)
	}
	// Every job's log reached the server whole, through the kills: each piece once, none
	// lost. A log whose last bytes were not shipped when the end was reported (its agent
	// killed meanwhile) still arrives, so the check waits a while for it.
	for _, id := range sortedIDs(details) {
		d := details[id]
		if d.State != api.StateSucceeded {
			continue
		}
		want := fmt.Sprintf("log %d.%d begin\nlog %d.%d end\n", id, d.Attempts, id, d.Attempts)
		var got strings.Builder
		waitForf(t, 30*time.Second, func() string {
			return fmt.Sprintf("job %d's log on the server to be %q; it is %q", id, want, got.String())
		}, func() bool {
			got.Reset()
			_, err := c.client.Logs(context.Background(), id, cli.LogOptions{Attempt: d.Attempts}, &got)
			return err == nil && got.String() == want
		})
	}
	// Nothing of any job still runs.
	for _, p := range listProcesses() {
		if p.env[api.EnvJobID] != "" && p.mentions(c.root) {
			t.Errorf("a job process outlived every job's end: %v", p)
		}
	}

	ended := map[api.JobState]int{}
	attempts, requeued := 0, 0
	for _, d := range details {
		ended[d.State]++
		attempts += len(d.AttemptList)
		if len(d.AttemptList) > 1 {
			requeued++
		}
		if d.State != api.StateSucceeded {
			t.Errorf("job %d ended %s (%s: %s) after %d attempts; the soak's jobs all succeed when left alone", d.ID, d.State, d.Reason, d.Message, d.Attempts)
		}
	}
	lost := 0
	for _, e := range c.events(api.EventNode) {
		if strings.Contains(e.Message, "-> "+string(api.NodeLost)) {
			lost++
		}
	}
	// The store the server says it opened, so the summary shows which backend was soaked.
	opened := "?"
	if m := regexp.MustCompile(`msg="store opened" backend=(\S+)`).FindStringSubmatch(c.server.output()); m != nil {
		opened = m[1]
	}
	var byState []string
	for _, s := range []api.JobState{api.StateSucceeded, api.StateFailed, api.StateCancelled, api.StateTimeout} {
		byState = append(byState, fmt.Sprintf("%s %d", s, ended[s]))
	}
	t.Logf("soak %s (server store: %s): seed %d, %d rounds: %d server kills, %d agent kills, %d agent kills past lost-after (%d node losses declared); "+
		"%d jobs acknowledged (%d submit retries, %d given up); ended: %s; %d attempts, %d jobs with more than one; "+
		"%d markers, %d problems; faults %s, settle %s, total %s",
		cfg.backend, opened, cfg.seed, cfg.rounds, kills["server"], kills["agent"], kills["agent (past lost-after)"], lost,
		len(acked), retries, gaveUp, strings.Join(byState, ", "), attempts, requeued,
		len(ms), len(problems), faultEnd.Sub(began).Round(time.Second), time.Since(faultEnd).Round(time.Second), time.Since(began).Round(time.Second))
}

// checkSoak checks the invariants the markers and the server's records must satisfy.
func checkSoak(details map[int64]api.JobDetail, ms []marker) []string {
	var problems []string
	type key struct {
		job     int64
		attempt int
	}
	starts := map[key][]marker{}
	ends := map[key][]marker{}
	for _, m := range ms {
		k := key{m.job, m.attempt}
		switch m.kind {
		case "start":
			starts[k] = append(starts[k], m)
		case "end":
			ends[k] = append(ends[k], m)
		}
		if _, ok := details[m.job]; !ok {
			problems = append(problems, fmt.Sprintf("a job the client was never told of ran: %s", m.line))
		}
	}
	for k, list := range starts {
		if len(list) > 1 {
			problems = append(problems, fmt.Sprintf("job %d attempt %d started %d times: %v", k.job, k.attempt, len(list), lines(list)))
		}
	}
	for _, id := range sortedIDs(details) {
		d := details[id]
		if len(d.AttemptList) != d.Attempts {
			problems = append(problems, fmt.Sprintf("job %d counts %d attempts but records %d", id, d.Attempts, len(d.AttemptList)))
		}
		for _, m := range markersOf(ms, id) {
			if m.attempt < 1 || m.attempt > len(d.AttemptList) {
				problems = append(problems, fmt.Sprintf("job %d has %d attempts recorded, but attempt %d ran: %s", id, len(d.AttemptList), m.attempt, m.line))
				continue
			}
			p := d.AttemptList[m.attempt-1].Placements
			if len(p) != 1 || p[0].Node != m.node || !slices.Equal(indices(p[0].GPUIndices), m.gpus) {
				problems = append(problems, fmt.Sprintf("job %d attempt %d was placed on %+v but ran on %s GPUs %v: %s", id, m.attempt, p, m.node, m.gpus, m.line))
			}
		}
		if d.State != api.StateSucceeded {
			continue
		}
		last := d.AttemptList[len(d.AttemptList)-1]
		k := key{id, last.N}
		if last.State != api.StateSucceeded || len(starts[k]) == 0 || !slices.ContainsFunc(ends[k], func(m marker) bool { return m.fields["code"] == "0" }) {
			problems = append(problems, fmt.Sprintf("job %d SUCCEEDED with attempt %d (%s), but its markers do not show it run to its end: starts %v, ends %v",
				id, last.N, last.State, lines(starts[k]), lines(ends[k])))
		}
		var successEnd time.Time
		for _, m := range ends[k] {
			if m.fields["code"] == "0" {
				successEnd = m.time
			}
		}
		for _, m := range markersOf(ms, id) {
			if m.kind == "start" && (m.attempt > last.N || (!successEnd.IsZero() && m.time.After(successEnd))) {
				problems = append(problems, fmt.Sprintf("job %d SUCCEEDED (attempt %d ended %s) but started again: %s", id, last.N, successEnd.Format(time.StampMicro), m.line))
			}
		}
	}
	ivs := gpuIntervals(ms)
	for _, iv := range ivs {
		if !iv.ended {
			problems = append(problems, fmt.Sprintf("job %d attempt %d on %s GPU %s never recorded its end (killed without its stop signal?): %s", iv.job, iv.attempt, iv.node, iv.gpu, iv.startLn))
		}
	}
	problems = append(problems, gpuOverlaps(ivs)...)
	return problems
}

func indices(gpus []int) []string {
	out := make([]string, len(gpus))
	for i, g := range gpus {
		out[i] = strconv.Itoa(g)
	}
	return out
}

func lines(ms []marker) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.line
	}
	return out
}

func sortedIDs[V any](m map[int64]V) []int64 {
	out := make([]int64, 0, len(m))
	for id := range m {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func jsonBytes(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// The soak's checks find what they look for: each broken history below is caught.
func TestSoakChecksCatchViolations(t *testing.T) {
	at := func(s float64) string { return fmt.Sprintf("t=%.3f", 1_700_000_000+s) }
	mark := func(kind string, job, attempt int, node, gpus string, pid int, sec float64, extra string) string {
		return fmt.Sprintf("%s job=%d attempt=%d rank=0 node=%s gpus=%s pid=%d %s %s", kind, job, attempt, node, gpus, pid, at(sec), extra)
	}
	succeeded := func(id int64, attempts ...api.Attempt) api.JobDetail {
		return api.JobDetail{Job: api.Job{ID: id, State: api.StateSucceeded, Attempts: len(attempts)}, AttemptList: attempts}
	}
	attempt := func(n int, node string, gpus []int, state api.JobState) api.Attempt {
		return api.Attempt{N: n, State: state, Placements: []api.Placement{{Node: node, GPUIndices: gpus}}}
	}
	good := map[int64]api.JobDetail{
		1: succeeded(1, attempt(1, "a", []int{0}, api.StateSucceeded)),
		2: succeeded(2, attempt(1, "a", []int{0}, api.StateFailed), attempt(2, "a", []int{0}, api.StateSucceeded)),
	}
	goodLines := []string{
		mark("start", 1, 1, "a", "0", 10, 1, ""), mark("end", 1, 1, "a", "0", 10, 2, "code=0"),
		mark("start", 2, 1, "a", "0", 11, 3, ""), mark("end", 2, 1, "a", "0", 11, 4, "code=term"),
		mark("start", 2, 2, "a", "0", 12, 5, ""), mark("end", 2, 2, "a", "0", 12, 6, "code=0"),
	}
	cases := []struct {
		name  string
		lines []string
		want  string
	}{
		{"clean", goodLines, ""},
		{"attempt started twice", append(slices.Clone(goodLines), mark("start", 1, 1, "b", "0", 13, 7, ""), mark("end", 1, 1, "b", "0", 13, 8, "code=0")), "started 2 times"},
		{"started after success", append(slices.Clone(goodLines), mark("start", 1, 2, "a", "1", 14, 9, ""), mark("end", 1, 2, "a", "1", 14, 10, "code=0")), "started again"},
		{"GPU shared", append(slices.Clone(goodLines[:4]), mark("start", 2, 2, "a", "0", 12, 3.5, ""), mark("end", 2, 2, "a", "0", 12, 6, "code=0")), "GPU a/0 held by"},
		{"no end", goodLines[:5], "never recorded its end"},
		{"elsewhere than placed", append(slices.Clone(goodLines[:4]), mark("start", 2, 2, "b", "0", 12, 5, ""), mark("end", 2, 2, "b", "0", 12, 6, "code=0")), "was placed on"},
		{"unknown job", append(slices.Clone(goodLines), mark("start", 9, 1, "c", "0", 15, 1, ""), mark("end", 9, 1, "c", "0", 15, 2, "code=0")), "never told of"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "markers")
			if err := os.WriteFile(path, []byte(strings.Join(tc.lines, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			problems := checkSoak(good, readMarkers(t, path))
			joined := strings.Join(problems, "\n")
			switch {
			case tc.want == "" && len(problems) > 0:
				t.Errorf("a clean history has problems:\n%s", joined)
			case tc.want != "" && !strings.Contains(joined, tc.want):
				t.Errorf("want a problem saying %q, got:\n%s", tc.want, joined)
			}
		})
	}
}
