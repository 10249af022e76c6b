package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// The README's tour and simulator examples, run as the README has them: the commands are
// read from README.md's ```sh blocks and run one line at a time by sh, in the repository's
// root, with the built binary first on PATH as `rota`, against `rota up --fake-gpus 8` in a
// fresh data dir, reached through its local socket. Each step names the command it expects,
// so a README that changes a command fails here until the test says what it should do.

// readmeSub is a change made to the README's lines before they run; each must be made
// exactly once, or the test fails.
type readmeSub struct{ old, new string }

// readmeStep is one line of a README block: the command it must be (without its comment),
// what a person would wait for before typing it, and what its result must show.
type readmeStep struct {
	cmd    string
	before func(t *testing.T)
	check  func(t *testing.T, r cliResult)
}

func TestReadme(t *testing.T) {
	skipShort(t)
	t.Parallel()
	bin := rotaBinary(t)
	began := time.Now()
	defer func() { t.Logf("the README's blocks ran in %.1fs", time.Since(began).Seconds()) }()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(text)

	start := readmeBlock(t, readme, "## Start it", 0)
	if want := []string{"go run ./cmd/rota up --fake-gpus 8"}; !slices.Equal(start, want) {
		t.Fatalf("README's Start it block is %q; want %q (update TestReadme with it)", start, want)
	}
	dir, err := os.MkdirTemp("", "rota-e2e-readme-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		killProcessesUnder(dir)
		os.RemoveAll(dir)
	})
	env := []string{"ROTA_DATA_DIR=" + dir, "HOME=" + filepath.Join(dir, "home"), "XDG_CONFIG_HOME=" + filepath.Join(dir, "home", ".config"),
		"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH")}
	// As the README starts it, on a free port (the default one may be taken) and with
	// quick heartbeats.
	up := startProc(t, dir, "up", env, "up", "--fake-gpus", "8", "--listen", freePort(t), "--heartbeat-interval", "200ms")
	// Job 1 holds two GPUs while the next commands show job 2 waiting for them: 30 s for a
	// person reading along. The test's commands may be slow on a loaded machine, so job 1
	// runs until the test lets it end instead, just before rota logs -f 1 follows it.
	release := filepath.Join(dir, "release-job-1")
	subs := []readmeSub{{"sleep 30'", fmt.Sprintf("until [ -e %s ]; do sleep 0.1; done'", release)}}
	used := map[string]int{}
	rota := func(args ...string) cliResult {
		t.Helper()
		return runCLI(t, env, args...)
	}
	job := func(id string) api.JobDetail {
		t.Helper()
		var d api.JobDetail
		if r := rota("show", id, "-o", "json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &d) != nil {
			t.Fatalf("rota show %s -o json: %s", id, r)
		}
		return d
	}
	waitState := func(t *testing.T, id string, state api.JobState) {
		t.Helper()
		waitForf(t, 30*time.Second, func() string { return fmt.Sprintf("job %s to be %s (it is %s)", id, state, job(id).State) },
			func() bool { return job(id).State == state })
	}
	want := func(patterns ...string) func(*testing.T, cliResult) {
		return func(t *testing.T, r cliResult) {
			t.Helper()
			for _, p := range patterns {
				if !regexp.MustCompile(p).MatchString(r.stdout) {
					t.Errorf("output lacks /%s/: %s", p, r)
				}
			}
		}
	}

	tour := []readmeStep{
		{cmd: "rota nodes",
			before: func(t *testing.T) {
				waitFor(t, 30*time.Second, "rota nodes to show the node of rota up with 8 GPUs", func() bool {
					if up.exited() {
						t.Fatalf("rota up exited:\n%s", up.output())
					}
					var list api.NodeList
					r := rota("nodes", "-o", "json")
					return r.code == 0 && json.Unmarshal([]byte(r.stdout), &list) == nil && len(list.Nodes) == 1 &&
						list.Nodes[0].State == api.NodeReady && !list.Nodes[0].Syncing && len(list.Nodes[0].GPUs) == 8
				})
			},
			check: want(`READY`, `\b8\b`)},
		{cmd: `rota submit --gpus 2 --time 10m -- sh -c 'echo "on GPUs $CUDA_VISIBLE_DEVICES"; sleep 30'`,
			check: want(`(?m)^1$`)},
		{cmd: "rota submit --gpus 8 -- examples/train.sh", check: want(`(?m)^2$`)},
		{cmd: "rota queue",
			before: func(t *testing.T) { waitState(t, "1", api.StateRunning) },
			check:  want(`(?m)^1 .*RUNNING`, `(?m)^2 .*PENDING`)},
		{cmd: "rota why 2", check: want(`GPU`)},
		{cmd: "rota show 2", check: want(`State:\s+PENDING`, `examples/train\.sh`)},
		{cmd: "rota logs -f 1",
			before: func(t *testing.T) {
				if err := os.WriteFile(release, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			check: func(t *testing.T, r cliResult) {
				want(`on GPUs \d,\d\n`)(t, r)
				if d := job("1"); d.State != api.StateSucceeded {
					t.Errorf("after rota logs -f 1 returned, job 1 is %s; want SUCCEEDED", d.State)
				}
			}},
		{cmd: "rota logs 2",
			before: func(t *testing.T) {
				waitFor(t, 30*time.Second, "job 2 to start and print", func() bool {
					return strings.Contains(rota("logs", "2").stdout, "training on GPUs")
				})
			},
			check: want(`training on GPUs 0,1,2,3,4,5,6,7\n`)},
		{cmd: "rota whoami", check: want(`admin`)},
		{cmd: "rota cancel 2",
			check: func(t *testing.T, r cliResult) {
				want(`Cancel requested for job 2 \(running on `)(t, r)
				waitState(t, "2", api.StateCancelled)
				// train.sh got SIGTERM, checkpointed and said so within its grace.
				if l := rota("logs", "2"); !regexp.MustCompile(`stopped at step \d+`).MatchString(l.stdout) {
					t.Errorf("job 2 did not checkpoint on its SIGTERM: %s", l)
				}
			}},
		{cmd: "rota show 1 -o json",
			check: func(t *testing.T, r cliResult) {
				var d api.JobDetail
				if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || d.ID != 1 || d.State != api.StateSucceeded ||
					d.ExitCode == nil || *d.ExitCode != 0 || len(d.AttemptList) != 1 {
					t.Errorf("want job 1 SUCCEEDED with exit code 0 after one attempt as JSON (%v): %s", err, r)
				}
			}},
	}
	runReadmeBlock(t, readme, "## A five-minute tour", root, env, tour, subs, used)

	// The simulator block, in a directory of its own so that the files it writes stay out of
	// the repository; its examples/ is the repository's.
	simDir := filepath.Join(dir, "sim")
	if err := os.MkdirAll(simDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "examples"), filepath.Join(simDir, "examples")); err != nil {
		t.Fatal(err)
	}
	policies := `(?m)^metric\s+default\s+fifo\s+sjf\s+las\s+worstfit$`
	sim := []readmeStep{
		{cmd: "rota sim --trace examples/traces/philly.csv --format philly --cluster examples/traces/cluster.yaml --policy default,fifo,sjf,las,worstfit",
			check: want(`24 jobs replayed, 0 skipped`, policies, `(?m)^succeeded\s+24\s+24\s+24\s+24\s+24$`)},
		{cmd: "rota sim --trace examples/traces/alibaba_pods.csv --format alibaba-gpu2023 --cluster examples/traces/alibaba_nodes.csv",
			check: want(`19 jobs replayed, 0 skipped`, `7 nodes, 30 GPUs`)},
		{cmd: "rota history export --since 720h --out month.csv --cluster-out cluster.yaml",
			check: func(t *testing.T, r cliResult) {
				f, err := os.Open(filepath.Join(simDir, "month.csv"))
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				rows, err := csv.NewReader(f).ReadAll()
				if err != nil || len(rows) != 3 { // the header, jobs 1 and 2
					t.Errorf("month.csv: %d rows (%v); want a header and the tour's 2 jobs", len(rows), err)
				}
				if _, err := os.Stat(filepath.Join(simDir, "cluster.yaml")); err != nil {
					t.Error(err)
				}
			}},
		{cmd: "rota sim --trace month.csv --format rota --cluster cluster.yaml --add-nodes 4xH100",
			check: want(`2 jobs replayed`, `5 nodes, 40 GPUs`)},
	}
	runReadmeBlock(t, readme, "### Test a policy or a purchase before making it", simDir, env, sim, subs, used)
	for _, sub := range subs {
		if used[sub.old] != 1 {
			t.Errorf("the README has %q %d times; the test replaces it once", sub.old, used[sub.old])
		}
	}
}

// runReadmeBlock runs the first ```sh block under heading in dir, line by line, as the
// steps say: the block's commands must be the steps' commands, and each must exit 0. subs
// are made in each line, and counted in used.
func runReadmeBlock(t *testing.T, readme, heading, dir string, env []string, steps []readmeStep, subs []readmeSub, used map[string]int) {
	t.Helper()
	lines := readmeBlock(t, readme, heading, 0)
	var cmds, want []string
	for _, l := range lines {
		cmds = append(cmds, withoutComment(l))
	}
	for _, s := range steps {
		want = append(want, s.cmd)
	}
	if !slices.Equal(cmds, want) {
		t.Fatalf("the README's block under %q changed: it has\n  %s\nthe test expects\n  %s\nSay in TestReadme what each command should do.",
			heading, strings.Join(cmds, "\n  "), strings.Join(want, "\n  "))
	}
	for i, line := range lines {
		for _, sub := range subs {
			used[sub.old] += strings.Count(line, sub.old)
			line = strings.ReplaceAll(line, sub.old, sub.new)
		}
		step := steps[i]
		if step.before != nil {
			step.before(t)
		}
		began := time.Now()
		r := runShell(t, dir, env, line)
		t.Logf("$ %s   (%.1fs)\n%s%s", line, time.Since(began).Seconds(), r.stdout, r.stderr)
		if r.code != 0 {
			t.Fatalf("README line %q: exit %d: %s", line, r.code, r)
		}
		if step.check != nil {
			step.check(t, r)
		}
		if t.Failed() {
			t.Fatalf("README line %q went wrong (above); stopping the tour", line)
		}
	}
}

// readmeBlock returns the lines of the nth ```sh block of the section under heading (up to
// the next heading), without blank lines, and with lines continued by a backslash joined.
func readmeBlock(t *testing.T, readme, heading string, n int) []string {
	t.Helper()
	lines := strings.Split(readme, "\n")
	at := slices.Index(lines, heading)
	if at < 0 {
		t.Fatalf("README.md has no heading %q", heading)
	}
	var blocks [][]string
	var cur []string
	in := false
	for _, l := range lines[at+1:] {
		switch {
		case !in && strings.HasPrefix(l, "#"):
			goto done
		case !in && l == "```sh":
			in, cur = true, nil
		case in && l == "```":
			in = false
			blocks = append(blocks, cur)
		case in && strings.TrimSpace(l) == "":
		case in && len(cur) > 0 && strings.HasSuffix(cur[len(cur)-1], "\\"):
			prev := strings.TrimSuffix(cur[len(cur)-1], "\\")
			cur[len(cur)-1] = strings.TrimRight(prev, " ") + " " + strings.TrimSpace(l)
		case in:
			cur = append(cur, l)
		}
	}
done:
	if n >= len(blocks) {
		t.Fatalf("README.md has %d sh blocks under %q; want block %d", len(blocks), heading, n)
	}
	return blocks[n]
}

// withoutComment is a README line without its trailing comment (two or more spaces, then #).
func withoutComment(line string) string {
	return strings.TrimSpace(regexp.MustCompile(`\s{2,}#.*$`).ReplaceAllString(line, ""))
}

func TestReadmeBlock(t *testing.T) {
	readme := "# x\n\n## Tour\n\ntext\n\n```sh\nrota a   # first\n\nrota b \\\n   --flag   # second\n```\n\n```sh\nrota c\n```\n\n## Next\n\n```sh\nrota d\n```\n"
	if got, want := readmeBlock(t, readme, "## Tour", 0), []string{"rota a   # first", "rota b --flag   # second"}; !slices.Equal(got, want) {
		t.Errorf("block 0: %q; want %q", got, want)
	}
	if got := readmeBlock(t, readme, "## Tour", 1); !slices.Equal(got, []string{"rota c"}) {
		t.Errorf("block 1: %q", got)
	}
	if got := withoutComment(`rota submit -- sh -c 'echo "#1"'   # a comment`); got != `rota submit -- sh -c 'echo "#1"'` {
		t.Errorf("withoutComment: %q", got)
	}
}

// runShell runs one README line with sh in dir.
func runShell(t *testing.T, dir string, env []string, line string) cliResult {
	t.Helper()
	return runCommand(t, dir, env, "sh", "-c", line)
}
