package cli

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/api/apitest"
)

// topFixture is the fake's cluster with every kind of GPU cell: on node-a job 42 busy on
// GPUs 4-5 (known from its processes) and job 62 idle on GPU 0 (known from its GPU IDs);
// on node-b job 61 half busy on GPU 0, GPU 2 held by a leftover, GPU 3 unhealthy and GPU 7
// missing; on the lost node gpu-9 job 70 on GPU 0, whose use is no longer measured.
func topFixture() (api.NodeList, []api.Job) {
	nodes := fixtureNodes()
	a, b := &nodes.Nodes[0], &nodes.Nodes[1]
	a.GPUsUsed, a.Jobs, a.UsedGPUs = 3, []int64{42, 62}, []int{0, 4, 5}
	a.Telemetry.GPUs[0] = api.GPUSample{Index: 0, UtilizationPct: 1, MemoryUsedMB: 2 << 10, PowerW: 80, TemperatureC: 35}
	b.GPUsUsed, b.Jobs, b.UsedGPUs = 1, []int64{61}, []int{0}
	b.Telemetry.GPUs[0] = api.GPUSample{Index: 0, UtilizationPct: 30, MemoryUsedMB: 20 << 10, PowerW: 250, TemperatureC: 50}
	b.GPUs[3].Healthy, b.GPUs[3].Health = false, "2 uncorrectable ECC errors"
	nodes.Nodes = append(nodes.Nodes, api.Node{Name: "gpu-9", State: api.NodeLost, GPUsUsed: 1, Jobs: []int64{70}, UsedGPUs: []int{0},
		Inventory: api.Inventory{CPUs: 32, MemoryMB: 256 << 10, GPUs: []api.GPU{
			{Index: 0, UUID: "GPU-L4-0", Model: "L4", MemoryMB: 24 << 10, Healthy: true},
			{Index: 1, UUID: "GPU-L4-1", Model: "L4", MemoryMB: 24 << 10, Healthy: true}}},
		Telemetry: &api.Telemetry{Time: *at(-10 * time.Minute), GPUs: []api.GPUSample{{Index: 0, UtilizationPct: 99}}}})

	var jobs []api.Job
	for _, j := range fixtureJobs() {
		switch j.ID {
		case 45, 60:
			continue // ended: the server lists only what has not
		case 61:
			j.GPUIDs = []string{"GPU-H100-0"}
			j.Usage = &api.Usage{Samples: 10, GPUUtilPct: api.Stat{Mean: 28, Last: 30}, GPUMemoryMB: api.Stat{Last: 20 << 10}}
		case 62:
			j.GPUIDs = []string{"GPU-A100-0"}
			j.Usage = &api.Usage{Samples: 10, GPUUtilPct: api.Stat{Mean: 2, Last: 1}, GPUMemoryMB: api.Stat{Last: 2 << 10}}
		}
		jobs = append(jobs, j)
	}
	jobs = append(jobs, api.Job{ID: 70, Spec: api.JobSpec{User: "frank", Queue: "batch", GPUs: 1}, State: api.StateRunning,
		SubmitTime: *at(-time.Hour), StartTime: at(-50 * time.Minute), Nodes: []string{"gpu-9"}, GPUIDs: []string{"GPU-L4-0"}})
	return nodes, jobs
}

// newTopServer answers GET /api/v1/top from nodes and jobs, as fakeTop does.
func newTopServer(t *testing.T, nodes api.NodeList, jobs []api.Job) string {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/top", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, fakeTop(r.URL.Query(), nodes.Nodes, jobs))
	})
	return newHTTPServer(t, mux)
}

// fakeTop is what the server answers to GET /api/v1/top with these nodes and jobs, read
// at testNow. The query's nodes and jobs say how many to list, as the server's do.
func fakeTop(q url.Values, nodes []api.Node, jobs []api.Job) api.Top {
	nodeRows, err := strconv.Atoi(q.Get("nodes"))
	if err != nil {
		nodeRows = len(nodes) // all
	}
	rows, _ := strconv.Atoi(cmp.Or(q.Get("jobs"), "10"))
	var open []api.Job
	for _, j := range jobs {
		if !j.State.Terminal() {
			open = append(open, j)
		}
	}
	return apitest.Top(testNow, nodes, open, nodeRows, rows)
}

func TestTopGolden(t *testing.T) {
	nodes, jobs := topFixture()
	for _, tc := range []struct {
		golden, url string
	}{
		{"top.golden", newFakeServer(t).URL},
		{"top_cells.golden", newTopServer(t, nodes, jobs)},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			code, out, errOut := run(t, tc.url, "top", "--once")
			if code != ExitOK || errOut != "" {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			if strings.Contains(out, "\x1b") {
				t.Errorf("a frame that is not on a terminal carries escape sequences: %q", out)
			}
			checkGolden(t, tc.golden, out)
		})
	}
}

func TestTopNotTerminalPrintsOneFrame(t *testing.T) {
	// Without --once too: standard output here is a buffer, not a terminal.
	srv := newFakeServer(t)
	code, out, _ := run(t, srv.URL, "top", "--interval", "1h")
	if code != ExitOK || strings.Count(out, "rota top ") != 1 {
		t.Errorf("exit %d, want one frame:\n%s", code, out)
	}
}

func TestTopJSON(t *testing.T) {
	srv := newFakeServer(t)
	code, out, errOut := run(t, srv.URL, "top", "-o", "json")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{`"nodes": [`, `"running_jobs": [`, `"name": "node-a"`, `"id": 64`, `"pending": 3`} {
		if !strings.Contains(out, want) {
			t.Errorf("JSON lacks %s:\n%s", want, out)
		}
	}
}

// rota top reads one glance a frame, of every node for one frame and of a screen's worth
// of nodes for the live view; a server too old to answer it is named as the cause.
func TestTopAsksForWhatItShows(t *testing.T) {
	srv := newFakeServer(t)
	if code, _, errOut := run(t, srv.URL, "top", "--once"); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if want := []string{"/api/v1/top?jobs=10&nodes=all"}; !slices.Equal(srv.queries, want) {
		t.Errorf("requests %q, want %q", srv.queries, want)
	}
	for _, tc := range []struct {
		lines string
		live  bool
		want  int
	}{{"40", true, 40}, {"", true, -1}, {"40", false, -1}} {
		cfg := Config{Getenv: func(k string) string { return map[string]string{"LINES": tc.lines}[k] }}
		if got := cfg.topNodes(tc.live); got != tc.want {
			t.Errorf("LINES=%q live %v: %d nodes, want %d", tc.lines, tc.live, got, tc.want)
		}
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, api.Error{Code: api.CodeNotFound, Message: "no such API route: GET " + r.URL.Path})
	})
	code, out, errOut := run(t, newHTTPServer(t, mux), "top", "--once")
	if code != ExitError || out != "" || !strings.Contains(errOut, "runs an older rota than this one") || !strings.Contains(errOut, "no such API route") {
		t.Errorf("against an older server: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestTopCutsToWidth(t *testing.T) {
	srv := newFakeServer(t)
	for _, width := range []int{40, 80} {
		tr := testRun{env: map[string]string{"ROTA_SERVER": srv.URL, "ROTA_TOKEN": adminToken, "COLUMNS": strconv.Itoa(width)}}
		code, out, errOut := tr.run(t, "top", "--once")
		if code != ExitOK {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		cut := 0
		for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			if n := utf8.RuneCountInString(line); n > width {
				t.Errorf("COLUMNS=%d: line of %d runes: %q", width, n, line)
			}
			if strings.HasSuffix(line, "…") {
				cut++
			}
		}
		if cut == 0 {
			t.Errorf("COLUMNS=%d: no line was cut:\n%s", width, out)
		}
	}
	// The reason is the last column: at 80 columns job 43's is cut, not dropped.
	tr := testRun{env: map[string]string{"ROTA_SERVER": srv.URL, "ROTA_TOKEN": adminToken, "COLUMNS": "80"}}
	_, out, _ := tr.run(t, "top", "--once")
	if !strings.Contains(out, "needs 4 free") || strings.Contains(out, "best node node-b has 2") {
		t.Errorf("job 43's reason is not cut at 80 columns:\n%s", out)
	}
}

func TestTopCleansServerText(t *testing.T) {
	nodes, jobs := topFixture()
	nodes.Nodes[0].Name = "node-a\x1b[2J\nrogue"
	jobs[1].Spec.User = "bob\x07"
	jobs[1].Message = "waits\r\n\x1b]0;pwned\x07 \u202eever"
	srv := newTopServer(t, nodes, jobs)
	code, out, errOut := run(t, srv, "top", "--once")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if strings.ContainsAny(out, "\x1b\x07\r\u202e") {
		t.Errorf("control characters reached the frame:\n%q", out)
	}
	for _, want := range []string{`node-a\x1b[2J rogue`, `bob\x07`, `waits \x1b]0;pwned\x07 \u202eever`} {
		if !strings.Contains(out, want) {
			t.Errorf("frame lacks %q:\n%s", want, out)
		}
	}
	nodes, jobs = topFixture()
	_, clean, _ := run(t, newTopServer(t, nodes, jobs), "top", "--once")
	if got, want := strings.Count(out, "\n"), strings.Count(clean, "\n"); got != want {
		t.Errorf("server text changed the frame's line count: %d, want %d", got, want)
	}
}

func TestTopFlagErrors(t *testing.T) {
	srv := newFakeServer(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--interval", "soon"}, ExitUsage, `invalid value "soon" for flag -interval`},
		{[]string{"--interval", "0s"}, ExitUsage, "rota top: --interval 0s: want 100ms or more"},
		{[]string{"--interval", "-2s"}, ExitUsage, "rota top: --interval -2s: want 100ms or more"},
		{[]string{"--once=maybe"}, ExitUsage, `invalid boolean value "maybe" for -once`},
		{[]string{"-o", "yaml"}, ExitUsage, `-o: unknown format "yaml"`},
		{[]string{"node-a"}, ExitUsage, `rota top: unexpected argument "node-a"`},
		{[]string{"--color"}, ExitUsage, "flag provided but not defined: -color"},
		{[]string{"-h"}, ExitOK, "h  held from new work by leftover processes"},
	} {
		code, _, errOut := run(t, srv.URL, "top", tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("top %v: exit %d, stderr %q; want exit %d and %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}

func TestTopOnceUnreachable(t *testing.T) {
	code, out, errOut := run(t, "", "top", "--once", "--server", "unix:///nonexistent/rota.sock")
	if code != ExitError || out != "" || !strings.Contains(errOut, "cannot reach the rota server") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// The job lists show the jobs the server sent, in its order, and count those it did not.
func TestTopMoreRowsThanFit(t *testing.T) {
	var jobs []api.Job
	for i := range topRows {
		jobs = append(jobs, api.Job{ID: int64(100 + i), Spec: api.JobSpec{User: "u", GPUs: 1}, State: api.StatePending,
			SubmitTime: testNow, EstimatedStart: at(time.Duration(topRows-i) * time.Minute)})
	}
	for _, tc := range []struct {
		write func(io.Writer, topSnapshot)
		snap  topSnapshot
		more  string
	}{
		{writeTopWaiting, topSnapshot{WaitingJobs: jobs, Pending: 40, Held: 3}, "… and 33 more waiting (rota queue lists them all)"},
		{writeTopRunning, topSnapshot{RunningJobs: jobs, Running: 11}, "… and 1 more running (rota queue lists them all)"},
	} {
		var b strings.Builder
		tc.snap.Time = testNow
		tc.write(&b, tc.snap)
		lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		if len(lines) != topRows+2 || lines[len(lines)-1] != tc.more || !strings.HasPrefix(lines[1], "100 ") || !strings.HasPrefix(lines[topRows], "109 ") {
			t.Errorf("want a header, the %d jobs in the order sent and %q:\n%s", topRows, tc.more, b.String())
		}
	}
}

// TestTopWatch runs the live loop on a fake clock: the first read fails, so the frame
// says so and keeps trying; the next succeeds; a failure after that keeps the last data
// on screen; Ctrl-C ends it with the cursor shown again.
func TestTopWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes, jobs := topFixture()
		results := []error{errors.New("cannot reach the rota server at http://x: connection refused\x1b[31m"), nil, errors.New("server answered 502")}
		reads := 0
		fetch := func(ctx context.Context) (topSnapshot, error) {
			err := results[min(reads, len(results)-1)]
			reads++
			if err != nil {
				return topSnapshot{}, err
			}
			snap := fakeTop(url.Values{}, nodes.Nodes, jobs)
			snap.Time = time.Now()
			return snap, nil
		}
		var out bytes.Buffer
		cfg := Config{Stdout: &out, Now: time.Now, Location: time.UTC, Getenv: func(string) string { return "" }}
		ctx, cancel := context.WithCancel(t.Context())
		ticks := time.NewTicker(2 * time.Second)
		done := make(chan int)
		go func() { done <- cfg.watchTop(ctx, ticks.C, 2*time.Second, fetch) }()
		time.Sleep(5 * time.Second) // reads at 0s, 2s and 4s
		synctest.Wait()
		cancel()
		if code := <-done; code != ExitOK {
			t.Errorf("exit %d after Ctrl-C", code)
		}
		ticks.Stop()

		s := out.String()
		if reads != 3 {
			t.Errorf("%d reads in 5s at a 2s interval, want 3", reads)
		}
		if !strings.HasPrefix(s, hideCursor+clearHome) || !strings.HasSuffix(s, showCursor) {
			t.Errorf("want the cursor hidden, then shown again at the end: %q", s)
		}
		frames := strings.Split(strings.TrimPrefix(strings.TrimSuffix(s, showCursor), hideCursor), clearHome)[1:]
		if len(frames) != 3 {
			t.Fatalf("%d frames, want 3", len(frames))
		}
		if want := `error: cannot reach the rota server at http://x: connection refused\x1b[31m; retrying every 2s`; !strings.Contains(frames[0], want) ||
			strings.Contains(frames[0], "NODE") {
			t.Errorf("first frame should say only the error %q:\n%s", want, frames[0])
		}
		if strings.Contains(frames[1], "error") || !strings.Contains(frames[1], "node-a") {
			t.Errorf("second frame should show the cluster:\n%s", frames[1])
		}
		// The fake clock starts at 2000-01-01 00:00:00 UTC; the data shown was read at 2s.
		if want := "error: server answered 502; retrying every 2s, showing what was read at 00:00:02"; !strings.Contains(frames[2], want) ||
			!strings.Contains(frames[2], "node-a") {
			t.Errorf("third frame should keep the last data under %q:\n%s", want, frames[2])
		}
	})
}

func TestTopWidth(t *testing.T) {
	for value, want := range map[string]int{"": 0, "abc": 0, "-5": 0, " 33 ": 33} {
		cfg := Config{Getenv: func(k string) string { return map[string]string{"COLUMNS": value, "LINES": value}[k] }}
		if got := cfg.termWidth(); got != cmp.Or(want, defaultWidth) {
			t.Errorf("COLUMNS=%q: width %d, want %d", value, got, cmp.Or(want, defaultWidth))
		}
		// Standard output is no terminal here: without $LINES the height is not known.
		if got := cfg.termHeight(); got != want {
			t.Errorf("LINES=%q: height %d, want %d", value, got, want)
		}
	}
}

// The live view fits the terminal: with 50 nodes on 30 lines the node list gives way, to
// as many nodes as leave room for the job lists and a count of the rest, and no redraw
// scrolls. --once prints every node; a terminal too short for the job lists shows the
// frame's top.
func TestTopFitsTheScreen(t *testing.T) {
	nodes, jobs := topFixture()
	var many []api.Node
	for i := range 50 {
		n := nodes.Nodes[i%len(nodes.Nodes)]
		n.Name = "node-" + strconv.Itoa(100+i)
		many = append(many, n)
	}
	snap := fakeTop(url.Values{}, many, jobs)
	frame := func(lines string, fit bool, readErr error) []string {
		cfg := Config{Now: func() time.Time { return testNow }, Location: time.UTC,
			Getenv: func(k string) string { return map[string]string{"LINES": lines, "COLUMNS": "100"}[k] }}
		return strings.Split(strings.TrimSuffix(cfg.topFrame(&snap, readErr, 2*time.Second, fit), "\n"), "\n")
	}
	count := func(lines []string, prefix string) int {
		n := 0
		for _, l := range lines {
			if strings.HasPrefix(l, prefix) {
				n++
			}
		}
		return n
	}
	for _, readErr := range []error{nil, errors.New("server answered 502")} {
		got := frame("30", true, readErr)
		shown := count(got, "node-")
		if len(got) > 29 || shown == 0 || !strings.HasPrefix(got[0], "rota top") {
			t.Fatalf("error %v: %d lines with %d nodes on a screen of 30; want at most 29, the header first:\n%s", readErr, len(got), shown, strings.Join(got, "\n"))
		}
		if want := "… and " + strconv.Itoa(50-shown) + " more nodes (rota nodes lists them all)"; !strings.Contains(strings.Join(got, "\n"), want) {
			t.Errorf("error %v: no %q under %d nodes:\n%s", readErr, want, shown, strings.Join(got, "\n"))
		}
		if count(got, "RUNNING") != 1 || count(got, "WAITING") != 1 || len(got) < 28 {
			t.Errorf("error %v: the job lists are cut, or the nodes left lines unused (%d of 29):\n%s", readErr, len(got), strings.Join(got, "\n"))
		}
	}
	if got := frame("30", false, nil); count(got, "node-") != 50 || strings.Contains(strings.Join(got, "\n"), "more nodes") {
		t.Errorf("--once does not list every node:\n%s", strings.Join(got, "\n"))
	}
	if got := frame("", true, nil); count(got, "node-") != 50 {
		t.Errorf("with no height known, the view cut the nodes: %d shown", count(got, "node-"))
	}
	if got := frame("5", true, nil); len(got) != 4 || !strings.HasPrefix(got[0], "rota top") {
		t.Errorf("on 5 lines: %d lines, want the frame's first 4:\n%s", len(got), strings.Join(got, "\n"))
	}
}
