package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/rotahq/rota/"

// mayImport is DESIGN.md's "which way the imports run", edge by edge: for every package of
// the module, the module's packages it may import directly (test files aside). A package
// missing from the table fails the test, so a new package states its place here.
var mayImport = map[string][]string{
	// cmd/rota wires everything.
	"cmd/rota": {"internal/agent", "internal/auth", "internal/bench", "internal/cli", "internal/sched",
		"internal/server", "internal/sim", "internal/store"},
	"internal/api": nil,
	// apitest is what tests of several packages work out from the wire types.
	"internal/api/apitest": {"internal/api"},
	"internal/atomicfile":  nil,
	// auth: identities, tokens and the agents' CA; the CLI and the agent use its client side.
	"internal/auth": {"internal/api", "internal/atomicfile"},
	// The agent speaks to the server only through the wire types, never its insides or the
	// database.
	"internal/agent": {"internal/api", "internal/atomicfile", "internal/auth"},
	// The batch is where the store and the cluster state meet; it knows neither.
	"internal/batch": {"internal/api"},
	// bench speaks to the server it runs as a process as agents and clients do: wire types and
	// auth's client side.
	"internal/bench": {"internal/api", "internal/auth", "internal/sched", "internal/server", "internal/sim", "internal/store"},
	// The CLI is a client: wire types, auth's client side, and report's rendering.
	"internal/cli": {"internal/api", "internal/auth", "internal/report"},
	// cluster builds snapshots for sched and applies batches; it never touches the store.
	"internal/cluster":  {"internal/api", "internal/batch", "internal/sched"},
	"internal/fuzztest": nil,
	"internal/notify":   nil,
	// report is pure accounting and rendering over the wire types.
	"internal/report": {"internal/api"},
	// sched receives a snapshot, not the live state: none of rota's packages.
	"internal/sched": nil,
	// The server uses cluster, sched, store and report.
	"internal/server": {"internal/api", "internal/atomicfile", "internal/auth", "internal/batch",
		"internal/cluster", "internal/notify", "internal/report", "internal/sched", "internal/store", "web"},
	// The simulator uses sched and cluster with a virtual clock.
	"internal/sim": {"internal/api", "internal/cluster", "internal/sched"},
	// The store knows nothing of HTTP, the state machine or scheduling.
	"internal/store":           {"internal/api", "internal/batch"},
	"internal/store/storetest": nil,
	// The web UI reads through the API and imports none of rota's packages.
	"web": nil,
}

// mustNotLink names, per package, what may not appear anywhere among its dependencies;
// an entry ending in "/" forbids everything under it.
var mustNotLink = map[string][]string{
	// The production binary carries no test machinery.
	"cmd/rota": {"testing", "testing/", module + "internal/fuzztest", module + "internal/store/storetest", module + "internal/api/apitest"},
	// The simulator, and what it is built from, run in virtual time with no network or
	// database.
	"internal/sim":     noIO,
	"internal/cluster": noIO,
	"internal/sched":   noIO,
	"internal/batch":   noIO,
	"internal/report":  noIO,
	"internal/api":     noIO,
	// The store knows nothing of HTTP.
	"internal/store": {"net/http", "net/http/"},
}

// net/url and net/netip are parsing only; the network is net, net/http and the like.
var noIO = []string{"net", "net/http", "net/http/", "net/rpc", "net/smtp", "database/sql", "database/sql/", "os/exec",
	"modernc.org/sqlite", "modernc.org/sqlite/", "github.com/jackc/pgx/v5", "github.com/jackc/pgx/v5/"}

// mayImportDirectly limits the direct imports of a few packages beyond the module's own.
var mayImportDirectly = map[string]func(imp string, std bool) bool{
	// auth runs inside the agent and the CLI: the standard library and x/sys/unix only.
	"internal/auth": func(imp string, std bool) bool {
		return std || strings.HasPrefix(imp, module) || imp == "golang.org/x/sys/unix"
	},
	// report touches no process, system call or global randomness.
	"internal/report": func(imp string, std bool) bool {
		return !slices.Contains([]string{"syscall", "math/rand", "math/rand/v2", "os/exec"}, imp)
	},
}

type listed struct {
	std     bool
	imports []string
}

// goList lists every package of the module and all their dependencies for goos.
func goList(t *testing.T, goos string) (roots []string, pkgs map[string]listed) {
	t.Helper()
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	dir := strings.TrimSuffix(strings.TrimSpace(string(root)), "/go.mod")
	run := func(args ...string) []byte {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOOS="+goos)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("GOOS=%s go %s: %v\n%s", goos, strings.Join(args, " "), err, stderr.String())
		}
		return out
	}
	roots = strings.Fields(string(run("list", "-e", "-f", "{{.ImportPath}}", "./...")))
	pkgs = map[string]listed{}
	sc := bufio.NewScanner(bytes.NewReader(run("list", "-e", "-deps", "-f",
		"{{.ImportPath}} {{.Standard}} {{join .Imports \" \"}}", "./...")))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		pkgs[f[0]] = listed{std: f[1] == "true", imports: f[2:]}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(roots) == 0 || len(pkgs) == 0 {
		t.Fatalf("GOOS=%s: go list found no packages", goos)
	}
	return roots, pkgs
}

// chain returns the import path from 'from' to 'to' (shortest), or nil.
func chain(pkgs map[string]listed, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == to {
			var out []string
			for ; p != ""; p = prev[p] {
				out = append([]string{strings.TrimPrefix(p, module)}, out...)
			}
			return out
		}
		for _, imp := range pkgs[p].imports {
			if _, seen := prev[imp]; !seen {
				prev[imp] = p
				queue = append(queue, imp)
			}
		}
	}
	return nil
}

func forbidden(dep string, rules []string) bool {
	for _, r := range rules {
		if dep == r || (strings.HasSuffix(r, "/") && strings.HasPrefix(dep, r)) {
			return true
		}
	}
	return false
}

// TestImportDirections holds every package of the module to DESIGN.md's import directions,
// on Linux and macOS, over what `go list -deps` reports: the edges between rota's packages,
// what the simulator, the store and the production binary may link, and the outside
// packages auth and report may use.
func TestImportDirections(t *testing.T) {
	for _, goos := range []string{"linux", "darwin"} {
		roots, pkgs := goList(t, goos)
		for _, path := range roots {
			rel := strings.TrimPrefix(path, module)
			allowed, known := mayImport[rel]
			if !known {
				t.Errorf("GOOS=%s: package %s is not in mayImport; add it with the rota packages DESIGN.md lets it import", goos, rel)
				continue
			}
			for _, imp := range pkgs[path].imports {
				if strings.HasPrefix(imp, module) && !slices.Contains(allowed, strings.TrimPrefix(imp, module)) {
					t.Errorf("GOOS=%s: %s imports %s; it may import only %v of rota's packages",
						goos, rel, strings.TrimPrefix(imp, module), allowed)
				}
				if ok := mayImportDirectly[rel]; ok != nil && !ok(imp, pkgs[imp].std) {
					t.Errorf("GOOS=%s: %s imports %s, which it must not use directly", goos, rel, imp)
				}
			}
			rules := mustNotLink[rel]
			if len(rules) == 0 {
				continue
			}
			var found []string
		deps:
			for dep := range pkgs {
				if dep == path || !forbidden(dep, rules) {
					continue
				}
				c := chain(pkgs, path, dep)
				if c == nil {
					continue // a dependency of another package
				}
				// Name only the first forbidden package on a route, not everything it brings.
				for _, p := range c[1 : len(c)-1] {
					if forbidden(p, rules) || forbidden(module+p, rules) {
						continue deps
					}
				}
				found = append(found, fmt.Sprintf("GOOS=%s: %s links %s: %s", goos, rel, dep, strings.Join(c, " -> ")))
			}
			slices.Sort(found)
			for _, f := range found {
				t.Error(f)
			}
		}
		for rel := range mayImport {
			if !slices.Contains(roots, module+rel) {
				t.Errorf("GOOS=%s: mayImport names %s, which is not a package of the module; remove it", goos, rel)
			}
		}
		if t.Failed() {
			return // the other GOOS would say the same again
		}
	}
}

// The rules must be able to fail: a forbidden edge through a third package is named with
// its path.
func TestChainNamesTheRoute(t *testing.T) {
	pkgs := map[string]listed{
		module + "cmd/rota":       {imports: []string{module + "internal/bench", "fmt"}},
		module + "internal/bench": {imports: []string{"testing"}},
		"testing":                 {std: true},
		"fmt":                     {std: true},
	}
	got := fmt.Sprint(chain(pkgs, module+"cmd/rota", "testing"))
	if got != "[cmd/rota internal/bench testing]" {
		t.Fatalf("chain = %s", got)
	}
	if !forbidden("testing", mustNotLink["cmd/rota"]) || !forbidden("testing/fstest", mustNotLink["cmd/rota"]) ||
		forbidden("testingx", mustNotLink["cmd/rota"]) {
		t.Fatal("the binary's rule does not match testing and only testing")
	}
}

// A client verb pays for every package's initialisation, since the CLI, the server and
// the agent are one binary. So rota's own packages do nothing costly at start: regular
// expressions are compiled and templates parsed on first use (sync.OnceValue). This
// counts what each of them allocates before main runs, which GODEBUG=inittrace reports.
func TestPackagesStartLean(t *testing.T) {
	cmd := exec.Command(rotaBinary(t), "version")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("rota version: %v\n%s", err, out)
	}
	const most = 32 << 10 // bytes; a compiled regular expression alone is 10-60 KB
	seen := 0
	for line := range strings.Lines(string(out)) {
		// init github.com/rotahq/rota/internal/server @3.1 ms, 0.02 ms clock, 3024 bytes, 31 allocs
		f := strings.Fields(line)
		if len(f) < 10 || f[0] != "init" || !strings.HasPrefix(f[1], "github.com/rotahq/rota/") {
			continue
		}
		seen++
		bytes, err := strconv.Atoi(f[7])
		if err != nil {
			t.Fatalf("cannot read %q: %v", line, err)
		}
		if bytes > most {
			t.Errorf("%s allocates %d bytes at start (at most %d): make what it builds lazy", f[1], bytes, most)
		}
	}
	if seen < 5 {
		t.Fatalf("only %d of rota's packages in the init trace; the format changed?\n%s", seen, out)
	}
}
