package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/rotahq/rota/internal/api"
)

func TestClean(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"},
		{"  XID 79\n", "XID 79"},
		{"line one\nline two\r\n\tthree", "line one line two three"},
		{"\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`},
		{"bell\x07 nul\x00 del\x7f", `bell\x07 nul\x00 del\x7f`},
		{"c1\u009bcsi", `c1\u009bcsi`},
		{"evil\u202egnp.exe", `evil\u202egnp.exe`},
		{"zero\u200bwidth", `zero\u200bwidth`},
		{"para\u2029graph", "para graph"},
		{"bad \xff utf-8", "bad \ufffd utf-8"},
		{"Ünïcödé ok", "Ünïcödé ok"},
		{"", ""},
	} {
		if got := clean(tc.in); got != tc.want {
			t.Errorf("clean(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := cleanCell("a\tlong\tmodel name", 8); got != "a long …" {
		t.Errorf("cleanCell cut to 8: %q", got)
	}
}

func TestFormatMBOf(t *testing.T) {
	for _, tc := range []struct {
		part, whole int64
		want        string
	}{
		{410 << 10, 640 << 10, "410/640G"},
		{12800, 80 << 10, "12.5/80G"},
		{0, 80 << 10, "0/80G"},
		{300, 512, "300/512M"},
		{1 << 20, 2 << 20, "1/2T"},
		{100, 80 << 10, "0.1/80G"},
	} {
		if got := formatMBOf(tc.part, tc.whole); got != tc.want {
			t.Errorf("formatMBOf(%d, %d) = %q, want %q", tc.part, tc.whole, got, tc.want)
		}
	}
}

func TestNodeUse(t *testing.T) {
	gpus := []api.GPU{{Index: 0, MemoryMB: 80 << 10}, {Index: 1, MemoryMB: 80 << 10}}
	reading := &api.Telemetry{Time: testNow, GPUs: []api.GPUSample{
		{Index: 0, UtilizationPct: 90, MemoryUsedMB: 40 << 10},
		{Index: 1, UtilizationPct: 51, MemoryUsedMB: 20 << 10},
	}}
	for _, tc := range []struct {
		name       string
		node       api.Node
		util, gmem string
	}{
		{"no telemetry", api.Node{Inventory: api.Inventory{GPUs: gpus}, State: api.NodeReady}, "-", "-"},
		{"a reading without GPUs", api.Node{State: api.NodeReady, Telemetry: &api.Telemetry{Time: testNow}}, "-", "-"},
		{"lost: the reading is stale", api.Node{Inventory: api.Inventory{GPUs: gpus}, State: api.NodeLost, Telemetry: reading}, "-", "-"},
		{"mean and sum", api.Node{Inventory: api.Inventory{GPUs: gpus}, State: api.NodeReady, Telemetry: reading}, "71%", "60/160G"},
		// A sample of a GPU the inventory does not list adds to the use, not the total.
		{"unknown GPU", api.Node{Inventory: api.Inventory{GPUs: gpus[:1]}, State: api.NodeReady, Telemetry: reading}, "71%", "60/80G"},
		{"no inventory", api.Node{State: api.NodeReady, Telemetry: reading}, "71%", "60G"},
	} {
		util, gmem := nodeUse(tc.node)
		if util != tc.util || gmem != tc.gmem {
			t.Errorf("%s: nodeUse = %q, %q; want %q, %q", tc.name, util, gmem, tc.util, tc.gmem)
		}
	}
}

func TestPoolWarnings(t *testing.T) {
	node := func(pool, driver string, models ...string) api.Node {
		n := api.Node{Inventory: api.Inventory{DriverVersion: driver}}
		if pool != "" {
			n.Labels = map[string]string{"pool": pool}
		}
		for i, m := range models {
			n.GPUs = append(n.GPUs, api.GPU{Index: i, Model: m})
		}
		return n
	}
	for _, tc := range []struct {
		name  string
		nodes []api.Node
		want  []string
	}{
		{"uniform pools", []api.Node{node("a", "550", "H100"), node("a", "550", "H100"), node("", "535", "A100")}, nil},
		{"nodes without GPUs or driver do not mix", []api.Node{node("a", "550", "H100"), node("a", ""), node("a", "550")}, nil},
		{"the most common first, ties by name",
			[]api.Node{node("train", "550", "H100"), node("train", "550", "H100"), node("train", "550", "A100"),
				node("train", "550", "L40S"), node("train", "550", "H100", "H100")},
			[]string{"warning: pool train mixes GPU models: H100 (3 nodes), A100 (1 node), L40S (1 node)"}},
		{"the default pool, models and drivers",
			[]api.Node{node("", "550.54", "H100"), node("", "535.1", "A100"), node("x", "1", "H100")},
			[]string{"warning: the default pool mixes GPU models: A100 (1 node), H100 (1 node)",
				"warning: the default pool mixes driver versions: 535.1 (1 node), 550.54 (1 node)"}},
		{"a node that mixes models itself", []api.Node{node("p", "1", "A100", "H100")},
			[]string{"warning: pool p mixes GPU models: A100 (1 node), H100 (1 node)"}},
		{"hostile names are cleaned", []api.Node{node("p\n", "1\x1b", "H100"), node("p\n", "2", "H100")},
			[]string{`warning: pool p mixes driver versions: 1\x1b (1 node), 2 (1 node)`}},
	} {
		if got := poolWarnings(tc.nodes); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\ngot  %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

// TestNodesSanitises serves nodes whose agent reports text built to break the table:
// newlines, tabs, terminal escapes, a bidi override, and a very long model name. The
// table must keep one line per node, aligned, with nothing a terminal would act on.
func TestNodesSanitises(t *testing.T) {
	evil := "H100\n\x1b[2J\x1b[31mfake-node  READY\tyes\u202e"
	nodes := api.NodeList{Nodes: []api.Node{
		{Name: "gpu-01", Inventory: api.Inventory{CPUs: 8, MemoryMB: 1024,
			GPUs: []api.GPU{{Index: 0, Model: evil, MemoryMB: 80 << 10, Health: "XID 79\n\x1b[0m", PCIBusID: "0000:07\t00.0"},
				{Index: 1, Model: strings.Repeat("A100-", 30), MemoryMB: 80 << 10, Healthy: true}},
			Labels:        map[string]string{"pool": "p\tq", "rack\n": "r1"},
			DriverVersion: "550\r\n"},
			State: api.NodeReady, LastHeartbeat: testNow,
			Leftovers: []api.GPUProcess{{GPU: 1, PID: 7, MemoryMB: 100, Command: "rm -rf /\n\x1b]0;title\x07"}}, HeldGPUs: []int{1},
			HealthCheck: &api.HealthCheck{Time: testNow, ExitCode: 2, Output: strings.Repeat("x", 5000)},
			Telemetry: &api.Telemetry{Time: testNow, GPUs: []api.GPUSample{{Index: 0, UtilizationPct: 50}},
				Processes: []api.GPUProcess{{GPU: 0, PID: 9, JobID: 3, Command: "python\ttrain.py\n"}}}},
		{Name: "gpu-02", Inventory: api.Inventory{CPUs: 8, MemoryMB: 1024}, State: api.NodeReady, LastHeartbeat: testNow},
	}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/nodes", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, nodes) })
	url := newHTTPServer(t, mux)

	for _, args := range [][]string{nil, {"gpu-01"}} {
		code, out, errOut := run(t, url, "nodes", args...)
		if code != ExitOK {
			t.Fatalf("nodes %q: exit %d, stderr %q", args, code, errOut)
		}
		for _, r := range out {
			if r != '\n' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r)) {
				t.Fatalf("nodes %q printed control or format character %U:\n%s", args, r, out)
			}
		}
		for _, line := range strings.Split(out, "\n") {
			if n := len([]rune(line)); n > 400 {
				t.Errorf("nodes %q: a line of %d characters: %.80q...", args, n, line)
			}
		}
	}

	_, out, _ := run(t, url, "nodes")
	lines := strings.Split(out, "\n")
	// The header, two nodes, a blank line, then the problems: GPU 0 unhealthy, the
	// health check, the leftover; then the pool's warning (the node mixes models), and
	// nothing else.
	if len(lines) != 9 || lines[8] != "" || !strings.HasPrefix(lines[7], "warning: pool p q mixes GPU models: ") {
		t.Fatalf("want 8 lines, the last a warning; got %d:\n%s", len(lines)-1, out)
	}
	col := strings.Index(lines[0], "LAST SEEN")
	for _, l := range lines[1:3] {
		// tabwriter aligns by runes, and the cut cells end in a three-byte "…".
		if r := []rune(l); len(r) < col || string(r[col:]) != "0s ago" {
			t.Errorf("LAST SEEN is not at column %d in %q", col, l)
		}
	}
	for i, prefix := range []string{"gpu-01 GPU 0: unhealthy: XID 79 \\x1b[0m", "gpu-01: health check failed: exit 2",
		`gpu-01 GPU 1: held from new work: leftover process 7 (rm -rf / \x1b]0;title\x07) holds 100M`} {
		if !strings.HasPrefix(lines[4+i], prefix) {
			t.Errorf("problem line %d: %q, want it to start %q", i, lines[4+i], prefix)
		}
	}
}

func TestNodeShowJSON(t *testing.T) {
	srv := newFakeServer(t)
	code, out, errOut := run(t, srv.URL, "nodes", "node-b", "-o", "json")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var n api.Node
	if err := json.Unmarshal([]byte(out), &n); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if want := fixtureNodes().Nodes[1]; !reflect.DeepEqual(n, want) {
		t.Errorf("nodes node-b -o json lost something:\n%s", out)
	}
}

func TestNodeProblems(t *testing.T) {
	gpus := []api.GPU{{Index: 0, Healthy: true}, {Index: 1, Health: "XID 48: double-bit ECC error"}, {Index: 2, Missing: true}}
	failed := &api.HealthCheck{Time: testNow.Add(-time.Minute), ExitCode: 3, Output: "disk full\n"}
	for _, tc := range []struct {
		name string
		n    api.Node
		want []string
	}{
		{"healthy", api.Node{Name: "n", Inventory: api.Inventory{GPUs: gpus[:1]}, HealthCheck: &api.HealthCheck{OK: true}}, nil},
		{"the server's sentences, each once",
			api.Node{Name: "n", Inventory: api.Inventory{GPUs: gpus}, HealthCheck: failed,
				Degraded: []string{"GPU 1 (GPU-1) is unhealthy: XID 48", "GPU 2 (GPU-2) is missing", "the health check failed with exit code 3: disk full"}},
			[]string{"n: GPU 1 (GPU-1) is unhealthy: XID 48", "n: GPU 2 (GPU-2) is missing", "n: the health check failed with exit code 3: disk full"}},
		{"without them, from the GPUs and the check",
			api.Node{Name: "n", Inventory: api.Inventory{GPUs: gpus}, HealthCheck: failed},
			[]string{"n GPU 1: unhealthy: XID 48: double-bit ECC error", "n GPU 2: missing",
				"n: health check failed: exit 3 at 11:59:00 (1m00s ago): disk full"}},
		{"a clock behind", api.Node{Name: "n", ClockOffsetS: 3725},
			[]string{"n: its clock is 1h2m5s behind the server's (rota converts the times it reports and the time limits it keeps; set it right with NTP)"}},
		{"a clock ahead", api.Node{Name: "n", ClockOffsetS: -90},
			[]string{"n: its clock is 1m30s ahead of the server's (rota converts the times it reports and the time limits it keeps; set it right with NTP)"}},
	} {
		if got := nodeProblems(tc.n, testNow, time.UTC); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\ngot  %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

func TestNodeProblemsHeldWithoutLeftover(t *testing.T) {
	since := testNow.Add(-time.Hour)
	n := api.Node{Name: "n", HeldGPUs: []int{3, 1},
		Leftovers: []api.GPUProcess{{GPU: 1, PID: 5, MemoryMB: 10, Since: &since}, {GPU: 0, PID: 4, MemoryMB: 10}}}
	got := nodeProblems(n, testNow, time.UTC)
	want := []string{
		"n GPU 0: leftover process 4 holds 10M",
		"n GPU 1: held from new work: leftover process 5 holds 10M since 11:00:00 (1h00m ago)",
		"n GPU 3: held from new work: processes of an ended job still hold its memory",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

// rota nodes passes its filters to the server, which lists what matches; NAME asks for
// the nodes whose names hold it and shows the one named so. Bad flags are refused first.
func TestNodesFilters(t *testing.T) {
	for _, c := range []struct {
		args  []string
		query string
	}{
		{nil, "/api/v1/nodes?"},
		{[]string{"--state", "ready, lost", "--pool", "train", "--name", "gpu", "--drifting"}, "/api/v1/nodes?drifting=true&name=gpu&pool=train&state=READY%2CLOST"},
		{[]string{"--problems"}, "/api/v1/nodes?problems=true"},
		{[]string{"--free", "8", "--pool", "train"}, "/api/v1/nodes?free=8&pool=train"},
		{[]string{"node-a"}, "/api/v1/nodes?name=node-a"},
	} {
		srv := newFakeServer(t)
		if code, _, errOut := run(t, srv.URL, "nodes", c.args...); code != ExitOK {
			t.Fatalf("rota nodes %v: exit %d: %s", c.args, code, errOut)
		}
		if len(srv.queries) != 1 || srv.queries[0] != c.query {
			t.Errorf("rota nodes %v asked %q; want %q", c.args, srv.queries, c.query)
		}
	}
	// A cluster with no node says how to add one.
	empty := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, api.NodeList{Nodes: []api.Node{}})
	}))
	defer empty.Close()
	if code, _, errOut := run(t, empty.URL, "nodes"); code != ExitOK || !strings.Contains(errOut, "no node has joined yet") {
		t.Errorf("rota nodes with no node: exit %d, stderr %q; want 0 and how to add one", code, errOut)
	}
	// Nothing matches: said on stderr, the table's header on stdout.
	for _, c := range []struct {
		args []string
		says string
	}{{[]string{"--name", "nosuch"}, "rota nodes: no node matches\n"}} {
		srv := newFakeServer(t)
		code, out, errOut := run(t, srv.URL, "nodes", c.args...)
		if code != ExitOK || errOut != c.says || !strings.HasPrefix(out, "NAME") || strings.Count(out, "\n") != 1 {
			t.Errorf("rota nodes %v: exit %d, stdout %q, stderr %q; want 0, the header, and %q", c.args, code, out, errOut, c.says)
		}
	}
	srv := newFakeServer(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--state", "READY,BUSY"}, `--state: unknown state "BUSY"`},
		{[]string{"--pool", "train", "node-a"}, "a node NAME shows that node"},
		{[]string{"--free", "2", "node-a"}, "a node NAME shows that node"},
		{[]string{"--free", "-1"}, "--free: -1 is not a number of GPUs"},
		{[]string{"--free", "2000"}, "--free: 2000 is not a number of GPUs"},
		{[]string{"--free", "many"}, "--free"},
	} {
		code, _, errOut := run(t, srv.URL, "nodes", c.args...)
		if code != ExitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("rota nodes %v: exit %d %q; want %d saying %q", c.args, code, errOut, ExitUsage, c.want)
		}
	}
	if len(srv.queries) != 0 {
		t.Errorf("refused flags still asked the server: %q", srv.queries)
	}
}

// The server's filter for nodes with a problem (api.Node.HasProblem) holds every node
// rota nodes writes a line about under its table, and every node not ready.
func TestHasProblemMatchesTheProblemLines(t *testing.T) {
	nodes := fixtureNodes().Nodes
	some := 0
	for _, n := range nodes {
		lines := nodeProblems(n, testNow, time.UTC)
		if (len(lines) > 0 || n.State != api.NodeReady) != n.HasProblem() {
			t.Errorf("node %s (%s): HasProblem %v, with problem lines %q", n.Name, n.State, n.HasProblem(), lines)
		}
		if len(lines) > 0 {
			some++
		}
	}
	if some == 0 || some == len(nodes) {
		t.Fatalf("%d of %d fixture nodes have problems; the test needs some with and some without", some, len(nodes))
	}
}
