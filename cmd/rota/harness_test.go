package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cli"
)

// The end-to-end harness runs the real binary the way a cluster is run: a server with TLS
// from its own CA, clients holding the admin token and pinning the CA's fingerprint, and
// agents that join with join tokens and then talk mutual TLS. Every server, agent and
// job is a real process; everything a cluster writes lives under one directory, and every
// process still running with that directory in its command line or environment is
// killed when the test ends.

// builds holds the binaries built for this test run, by build tags ("" for the release
// build).
var builds struct {
	sync.Mutex
	bins map[string]*builtBinary
}

type builtBinary struct {
	once sync.Once
	path string
	err  error
}

// rotaBinary builds the rota binary once per test run; every test shares it.
func rotaBinary(t testing.TB) string { return rotaBinaryWith(t, "") }

// rotaBinaryWith builds the rota binary with the given build tags once per test run.
func rotaBinaryWith(t testing.TB, tags string) string {
	t.Helper()
	builds.Lock()
	if builds.bins == nil {
		builds.bins = map[string]*builtBinary{}
	}
	b := builds.bins[tags]
	if b == nil {
		b = &builtBinary{}
		builds.bins[tags] = b
	}
	builds.Unlock()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "rota-e2e-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, "rota")
		out, err := exec.Command("go", "build", "-tags", tags, "-o", b.path, ".").CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build -tags %q: %v\n%s", tags, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test builds and runs the binary; skipped in -short mode")
	}
}

// processEnv is the test's environment without any ROTA_ setting of whoever runs the tests.
func processEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ROTA_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// proc is a rota process started by a test; its output goes to a file shown on failure.
type proc struct {
	t    testing.TB
	cmd  *exec.Cmd
	name string
	out  string
	done chan struct{}
}

// maxShownLog bounds how much of each process's output a failing test prints.
const maxShownLog = 24 << 10

func startProc(t testing.TB, logDir, name string, env []string, args ...string) *proc {
	t.Helper()
	return startBinary(t, rotaBinary(t), logDir, name, env, args...)
}

// startBinary is startProc with another build of rota (rotaBinaryWith).
func startBinary(t testing.TB, binary, logDir, name string, env []string, args ...string) *proc {
	t.Helper()
	f, err := os.CreateTemp(logDir, name+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = processEnv(env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	p := &proc{t: t, cmd: cmd, name: name, out: f.Name(), done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("--- %s (pid %d) output ---\n%s", name, p.pid(), tail(p.output(), maxShownLog))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) output() string {
	b, _ := os.ReadFile(p.out)
	return string(b)
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) signal(sig syscall.Signal) {
	if !p.exited() {
		p.cmd.Process.Signal(sig)
	}
}

// kill is kill -9: no shutdown, no flush.
func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
	<-p.done
}

// waitExit waits up to d for the process to end and returns its exit code.
func (p *proc) waitExit(d time.Duration) (int, bool) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), true
	case <-time.After(d):
		return 0, false
	}
}

// clusterOpts are the server's settings where a test needs other than the defaults.
type clusterOpts struct {
	heartbeat     string // --heartbeat-interval, default 200ms
	notReady      string // --node-not-ready-after
	lost          string // --node-lost-after
	assignTimeout string // --assign-timeout
	store         string // --store; default SQLite in the data dir
	attachGrace   string // --attach-grace
	maxHeartbeats string // --max-heartbeats-per-second
	maxLogSize    string // the server's --max-log-size
	keepFreeDisk  string // the server's --keep-free-disk
	// dataTmpfs, when set, mounts a tmpfs of this size (such as 64m) as the server's data
	// dir, for a disk a test can fill; the test is skipped where that cannot be done.
	dataTmpfs string
	// shared makes the cluster's directory traversable by every account, for jobs that
	// run as another user than the test's.
	shared bool
	// serverTags, when set, starts the server from a build with these tags (see
	// rotaBinaryWith), with serverEnv added to its environment.
	serverTags string
	serverEnv  []string
}

type testCluster struct {
	t    testing.TB
	opts clusterOpts
	// root holds everything of the cluster: the server's and agents' data dirs, process
	// logs, and the markers file jobs write.
	root    string
	logDir  string
	dataDir string // the server's
	addr    string
	server  *proc
	agents  map[string]*proc
	gpus    map[string]string

	// token is the first admin's, fingerprint the CA's; client uses both.
	token, fingerprint string
	client             *cli.Client
	// markers is the file marker jobs append their starts and ends to.
	markers string
}

func newCluster(t testing.TB, nodes map[string]string) *testCluster {
	return newTestCluster(t, nodes, clusterOpts{})
}

func newClusterWith(t testing.TB, nodes map[string]string, heartbeat string) *testCluster {
	return newTestCluster(t, nodes, clusterOpts{heartbeat: heartbeat})
}

// newTestCluster starts a server and one joined agent per node, and waits until every node
// is ready to take work.
func newTestCluster(t testing.TB, nodes map[string]string, opts clusterOpts) *testCluster {
	t.Helper()
	rotaBinary(t)
	// Not t.TempDir: a short path keeps the server's socket within its length limit, and
	// a job running as another account must be able to reach its directories.
	root, err := os.MkdirTemp("", "rota-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs last: after every rota process has been killed.
	t.Cleanup(func() {
		killProcessesUnder(root)
		os.RemoveAll(root)
	})
	if opts.shared {
		if err := os.Chmod(root, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c := &testCluster{t: t, opts: opts, root: root, logDir: filepath.Join(root, "logs"), dataDir: filepath.Join(root, "server"),
		addr: freePort(t), agents: map[string]*proc{}, gpus: map[string]string{}, markers: filepath.Join(root, "markers")}
	if err := os.MkdirAll(c.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.markers, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if opts.dataTmpfs != "" {
		c.mountDataTmpfs(opts.dataTmpfs)
	}
	c.startServer()
	c.mapAdminToTestAccount()
	for _, name := range sortedKeys(nodes) {
		c.startAgent(name, nodes[name])
	}
	c.waitNodesReady(sortedKeys(nodes)...)
	return c
}

func (c *testCluster) serverArgs() []string {
	hb := c.opts.heartbeat
	if hb == "" {
		hb = "200ms"
	}
	args := []string{"server", "--tls", "--data-dir", c.dataDir, "--listen", c.addr, "--heartbeat-interval", hb, "--min-runtime", "0s"}
	for _, f := range []struct{ flag, v string }{
		{"--node-not-ready-after", c.opts.notReady}, {"--node-lost-after", c.opts.lost},
		{"--assign-timeout", c.opts.assignTimeout}, {"--store", c.opts.store}, {"--attach-grace", c.opts.attachGrace},
		{"--max-heartbeats-per-second", c.opts.maxHeartbeats}, {"--max-log-size", c.opts.maxLogSize},
		{"--keep-free-disk", c.opts.keepFreeDisk},
	} {
		if f.v != "" {
			args = append(args, f.flag, f.v)
		}
	}
	return args
}

// mountDataTmpfs mounts a tmpfs of size as the server's data dir, or skips the test.
func (c *testCluster) mountDataTmpfs(size string) {
	c.t.Helper()
	if os.Geteuid() != 0 {
		c.t.Skip("needs root to mount a small tmpfs as the server's data dir")
	}
	if err := os.MkdirAll(c.dataDir, 0o700); err != nil {
		c.t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", c.dataDir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		c.t.Skipf("cannot mount a tmpfs as the server's data dir: %v", err)
	}
	// Registered after the cluster's directory's clean-up and before the server's, so it
	// runs once the server is killed and before the directory is removed.
	c.t.Cleanup(func() { syscall.Unmount(c.dataDir, syscall.MNT_DETACH) })
}

// startServer starts the server (again) and connects the client to it.
func (c *testCluster) startServer() {
	c.t.Helper()
	c.server = startBinary(c.t, rotaBinaryWith(c.t, c.opts.serverTags), c.logDir, "server", c.opts.serverEnv, c.serverArgs()...)
	c.connect()
}

// connect reads the admin token and the CA the server's first start wrote, and waits
// until the server answers over TLS.
func (c *testCluster) connect() {
	c.t.Helper()
	tokenFile, caFile := filepath.Join(c.dataDir, "admin-token"), filepath.Join(c.dataDir, "ca", "ca.crt")
	waitFor(c.t, 20*time.Second, "the server's admin token and CA", func() bool {
		c.checkServerRuns()
		tok, err1 := os.ReadFile(tokenFile)
		fp, err2 := caFingerprint(caFile)
		if err1 != nil || err2 != nil || strings.TrimSpace(string(tok)) == "" {
			return false
		}
		c.token, c.fingerprint = strings.TrimSpace(string(tok)), fp
		return true
	})
	client, err := cli.NewClient(cli.Endpoint{Server: "https://" + c.addr, Token: c.token, CAFingerprint: c.fingerprint})
	if err != nil {
		c.t.Fatal(err)
	}
	c.client = client
	waitFor(c.t, 20*time.Second, "server healthy over TLS", func() bool {
		c.checkServerRuns()
		return c.client.Health(context.Background()) == nil
	})
}

func (c *testCluster) checkServerRuns() {
	c.t.Helper()
	if c.server.exited() {
		c.t.Fatalf("the server exited: %v\n%s", c.server.cmd.ProcessState, tail(c.server.output(), maxShownLog))
	}
}

// caFingerprint is what clients pin: sha256 of the CA certificate's DER.
func caFingerprint(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return "", errors.New("no certificate yet")
	}
	sum := sha256.Sum256(block.Bytes)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// mapAdminToTestAccount makes the first admin's jobs run as the account running the
// tests (root may run them as root), as an admin of a real cluster maps users to accounts.
func (c *testCluster) mapAdminToTestAccount() {
	c.t.Helper()
	u, err := user.Current()
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.client.SetUser(context.Background(), api.User{Name: "admin", Role: "admin", UnixUser: u.Username, AllowRoot: os.Geteuid() == 0}); err != nil {
		c.t.Fatalf("map the admin to account %s: %v", u.Username, err)
	}
}

func (c *testCluster) agentDir(name string) string { return filepath.Join(c.root, "agent-"+name) }

// joinToken makes a one-use join token for node name.
func (c *testCluster) joinToken(name string) string {
	c.t.Helper()
	tok, err := c.client.CreateJoinToken(context.Background(), api.JoinTokenRequest{Node: name, Uses: 1})
	if err != nil {
		c.t.Fatalf("join token for %s: %v", name, err)
	}
	return tok.Token
}

func (c *testCluster) agentArgs(name, gpus, dataDir string) []string {
	return []string{"agent", "--server", "https://" + c.addr, "--name", name, "--fake-gpus", gpus,
		"--cpus", "64", "--memory", "256G", "--data-dir", dataDir}
}

// startAgent starts node name's agent: with a join token the first time, on its identity
// after that.
func (c *testCluster) startAgent(name, gpus string) *proc {
	c.t.Helper()
	args := c.agentArgs(name, gpus, c.agentDir(name))
	if _, err := os.Lstat(filepath.Join(c.agentDir(name), "identity")); err != nil {
		args = append(args, "--join", c.joinToken(name))
	}
	return c.runAgent(name, gpus, args)
}

// joinAgent starts node name's agent with a new join token, whatever its data dir holds.
func (c *testCluster) joinAgent(name string) *proc {
	c.t.Helper()
	args := append(c.agentArgs(name, c.gpus[name], c.agentDir(name)), "--join", c.joinToken(name))
	return c.runAgent(name, c.gpus[name], args)
}

func (c *testCluster) runAgent(name, gpus string, args []string) *proc {
	p := startProc(c.t, c.logDir, "agent-"+name, nil, args...)
	c.agents[name], c.gpus[name] = p, gpus
	return p
}

func (c *testCluster) restartAgent(name string) *proc {
	c.t.Helper()
	return c.startAgent(name, c.gpus[name])
}

// waitNodesReady waits until each named node is READY and not syncing: it takes work.
func (c *testCluster) waitNodesReady(names ...string) {
	c.t.Helper()
	var seen []string
	waitForf(c.t, 20*time.Second, func() string { return fmt.Sprintf("nodes %v READY and not syncing (last seen: %v)", names, seen) }, func() bool {
		for name, p := range c.agents {
			if slices.Contains(names, name) && p.exited() {
				c.t.Fatalf("agent %s exited: %v\n%s", name, p.cmd.ProcessState, tail(p.output(), maxShownLog))
			}
		}
		list, err := c.client.Nodes(context.Background())
		if err != nil {
			return false
		}
		ready := 0
		seen = seen[:0]
		for _, n := range list.Nodes {
			if slices.Contains(names, n.Name) {
				seen = append(seen, fmt.Sprintf("%s %s syncing=%v", n.Name, n.State, n.Syncing))
				if n.State == api.NodeReady && !n.Syncing {
					ready++
				}
			}
		}
		return ready == len(names)
	})
}

func (c *testCluster) node(name string) api.Node {
	c.t.Helper()
	list, err := c.client.Nodes(context.Background())
	if err != nil {
		c.t.Fatalf("nodes: %v", err)
	}
	for _, n := range list.Nodes {
		if n.Name == name {
			return n
		}
	}
	c.t.Fatalf("no node %s", name)
	return api.Node{}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func waitFor(t testing.TB, d time.Duration, what string, ok func() bool) {
	t.Helper()
	waitForf(t, d, func() string { return what }, ok)
}

// eventually is waitFor for a check whose failure should not stop the test: it reports
// the timeout as an error and returns whether ok came true.
func eventually(t testing.TB, d time.Duration, what string, ok func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if ok() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("timed out after %s waiting for %s", d, what)
	return false
}

// waitForf is waitFor with a description made when it times out, so it can say what it
// saw last.
func waitForf(t testing.TB, d time.Duration, what func() string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if ok() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s", d, what())
}

func (c *testCluster) submit(spec api.JobSpec) api.Job {
	c.t.Helper()
	j, err := c.client.Submit(context.Background(), spec)
	if err != nil {
		c.t.Fatalf("submit %v: %v", spec.Command, err)
	}
	return j
}

func (c *testCluster) job(id int64) api.JobDetail {
	c.t.Helper()
	d, err := c.client.GetJob(context.Background(), id)
	if err != nil {
		c.t.Fatalf("get job %d: %v", id, err)
	}
	return d
}

func (c *testCluster) waitState(id int64, d time.Duration, states ...api.JobState) api.JobDetail {
	c.t.Helper()
	var last api.JobDetail
	waitForf(c.t, d, func() string {
		return fmt.Sprintf("job %d in %v (last seen: %s attempt %d reason %q: %s)", id, states, last.State, last.Attempts, last.Reason, last.Message)
	}, func() bool {
		got, err := c.client.GetJob(context.Background(), id)
		if err != nil {
			return false
		}
		last = got
		return slices.Contains(states, got.State)
	})
	return last
}

// waitEnded waits for a job to reach any terminal state.
func (c *testCluster) waitEnded(id int64, d time.Duration) api.JobDetail {
	c.t.Helper()
	return c.waitState(id, d, api.StateSucceeded, api.StateFailed, api.StateCancelled, api.StateTimeout)
}

func (c *testCluster) logs(id int64) string {
	c.t.Helper()
	return c.attemptLog(id, 0)
}

func (c *testCluster) attemptLog(id int64, attempt int) string {
	c.t.Helper()
	var buf bytes.Buffer
	var offset int64
	for {
		chunk, err := c.client.Logs(context.Background(), id, cli.LogOptions{Attempt: attempt, Offset: offset, Wait: 5 * time.Second}, &buf)
		if err != nil {
			c.t.Fatalf("logs of job %d: %v", id, err)
		}
		offset += chunk.N
		if chunk.Done {
			return buf.String()
		}
	}
}

// cliResult is what one run of the rota CLI printed and how it exited.
type cliResult struct {
	stdout, stderr string
	code           int
}

func (r cliResult) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// rotaAs runs the rota CLI as a user of this cluster would: with ROTA_SERVER, ROTA_TOKEN
// and ROTA_CA_FINGERPRINT, and a home without any saved login.
func (c *testCluster) rotaAs(token string, args ...string) cliResult {
	c.t.Helper()
	return runCLI(c.t, []string{"ROTA_SERVER=https://" + c.addr, "ROTA_TOKEN=" + token, "ROTA_CA_FINGERPRINT=" + c.fingerprint,
		"HOME=" + filepath.Join(c.root, "home"), "XDG_CONFIG_HOME=" + filepath.Join(c.root, "home", ".config")}, args...)
}

// rota runs the CLI as the first admin.
func (c *testCluster) rota(args ...string) cliResult {
	c.t.Helper()
	return c.rotaAs(c.token, args...)
}

func runCLI(t testing.TB, env []string, args ...string) cliResult {
	t.Helper()
	return runCommand(t, "", env, rotaBinary(t), args...)
}

// runCommand runs a program in dir ("" for the test's own) with the environment env
// added to the test process's, bounded by a minute, and returns its output and exit code.
// A program that cannot be run at all fails the test.
func runCommand(t testing.TB, dir string, env []string, name string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = processEnv(env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := cliResult{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("%s %q: %v", filepath.Base(name), args, err)
	}
	return r
}

// lastLineID reads the job ID `rota submit` prints as its last line.
func lastLineID(t testing.TB, out string) int64 {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	id, err := strconv.ParseInt(strings.TrimSpace(lines[len(lines)-1]), 10, 64)
	if err != nil {
		t.Fatalf("last line of rota submit %q is not a job ID", out)
	}
	return id
}

// request sends one API request with token (none when empty) and returns the status and
// body.
func (c *testCluster) request(method, path, token string, body io.Reader) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, "https://"+c.addr+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.client.HTTP.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func shell(script string) []string { return []string{"sh", "-c", script} }

// markerScript wraps body in a script that can record its start and end in the cluster's
// markers file: `mark start`, `mark end code=0`. Each line names the job, attempt, rank,
// node, GPUs, pid and time (see readMarkers). The start is recorded before body runs.
func (c *testCluster) markerScript(body string) []string {
	return c.markerScriptRaw("mark start\n" + body)
}

// markerScriptRaw is markerScript for a body that marks its own start, e.g. after it has
// set its traps.
func (c *testCluster) markerScriptRaw(body string) []string {
	return shell(markerPrelude(c.markers) + body)
}

// waitMarker waits for a marker of kind of job's attempt and rank.
func (c *testCluster) waitMarker(kind string, job int64, attempt, rank int) marker {
	c.t.Helper()
	var m marker
	waitFor(c.t, 20*time.Second, fmt.Sprintf("marker %s of job %d attempt %d rank %d", kind, job, attempt, rank), func() bool {
		var ok bool
		m, ok = findMarker(readMarkers(c.t, c.markers), kind, job, attempt, rank)
		return ok
	})
	return m
}

func markerPrelude(file string) string {
	return fmt.Sprintf(`M=%q
rank=${NODE_RANK:-0}
node=$(echo "$ROTA_NODELIST" | cut -d, -f$((rank+1)))
mark() { echo "$1 job=$ROTA_JOB_ID attempt=$ROTA_ATTEMPT rank=$rank node=$node gpus=$CUDA_VISIBLE_DEVICES pid=$$ t=$(date +%%s.%%N) $2" >> "$M"; }
`, file)
}

// marker is one line of a markers file.
type marker struct {
	kind    string // start, end, or what the job chose
	job     int64
	attempt int
	rank    int
	node    string
	gpus    []string
	pid     int
	time    time.Time
	// fields holds every key=value of the line, the job's own ones too (code=…).
	fields map[string]string
	line   string
}

func readMarkers(t testing.TB, path string) []marker {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("markers: %v", err)
	}
	defer f.Close()
	var out []marker
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		parts := strings.Fields(line)
		if len(parts) == 0 {
			continue
		}
		m := marker{kind: parts[0], fields: map[string]string{}, line: line}
		for _, p := range parts[1:] {
			k, v, _ := strings.Cut(p, "=")
			m.fields[k] = v
		}
		m.job, _ = strconv.ParseInt(m.fields["job"], 10, 64)
		m.attempt, _ = strconv.Atoi(m.fields["attempt"])
		m.rank, _ = strconv.Atoi(m.fields["rank"])
		m.node = m.fields["node"]
		if g := m.fields["gpus"]; g != "" {
			m.gpus = strings.Split(g, ",")
		}
		m.pid, _ = strconv.Atoi(m.fields["pid"])
		if sec, err := strconv.ParseFloat(m.fields["t"], 64); err == nil {
			m.time = time.Unix(0, int64(sec*1e9))
		}
		out = append(out, m)
	}
	return out
}

func markersOf(ms []marker, job int64) []marker {
	var out []marker
	for _, m := range ms {
		if m.job == job {
			out = append(out, m)
		}
	}
	return out
}

func findMarker(ms []marker, kind string, job int64, attempt, rank int) (marker, bool) {
	for _, m := range ms {
		if m.kind == kind && m.job == job && m.attempt == attempt && m.rank == rank {
			return m, true
		}
	}
	return marker{}, false
}

// interval is one process's hold on one GPU of one node, from its markers.
type interval struct {
	node, gpu        string
	job              int64
	attempt, rank    int
	start, end       time.Time
	ended            bool
	startLn, endLine string
}

// gpuIntervals pairs each process's start marker with its end marker, one interval per GPU
// it was given. A start without an end is open: it holds its GPUs until now.
func gpuIntervals(ms []marker) []interval { return gpuIntervalsEnding(ms, nil) }

// gpuIntervalsEnding is gpuIntervals where a process that left no end marker (it was killed
// before it could write one) ends when the server recorded its rank's end, which its
// supervisor reports only once the process group is gone. recorded may be nil.
func gpuIntervalsEnding(ms []marker, recorded func(job int64, attempt, rank int) (time.Time, bool)) []interval {
	type key struct {
		job           int64
		attempt, rank int
		pid           int
	}
	ends := map[key]marker{}
	for _, m := range ms {
		if m.kind == "end" {
			ends[key{m.job, m.attempt, m.rank, m.pid}] = m
		}
	}
	var out []interval
	for _, m := range ms {
		if m.kind != "start" {
			continue
		}
		e, ok := ends[key{m.job, m.attempt, m.rank, m.pid}]
		for _, g := range m.gpus {
			iv := interval{node: m.node, gpu: g, job: m.job, attempt: m.attempt, rank: m.rank, start: m.time, ended: ok, startLn: m.line}
			switch {
			case ok:
				iv.end, iv.endLine = e.time, e.line
			case recorded != nil:
				if end, found := recorded(m.job, m.attempt, m.rank); found {
					iv.end, iv.ended, iv.endLine = end, true, "recorded end of the rank (no end marker)"
					break
				}
				fallthrough
			default:
				iv.end = time.Now().Add(time.Hour)
			}
			out = append(out, iv)
		}
	}
	return out
}

// gpuOverlaps lists every pair of processes that held one GPU of one node at once.
func gpuOverlaps(ivs []interval) []string {
	byGPU := map[string][]interval{}
	for _, iv := range ivs {
		k := iv.node + "/" + iv.gpu
		byGPU[k] = append(byGPU[k], iv)
	}
	var out []string
	for _, k := range sortedKeys(byGPU) {
		list := byGPU[k]
		slices.SortFunc(list, func(a, b interval) int { return a.start.Compare(b.start) })
		for i := range list {
			for j := i + 1; j < len(list) && list[j].start.Before(list[i].end); j++ {
				out = append(out, fmt.Sprintf("GPU %s held by job %d attempt %d rank %d (%s .. %s) and job %d attempt %d rank %d (from %s)",
					k, list[i].job, list[i].attempt, list[i].rank, list[i].start.Format("15:04:05.000"), endText(list[i]),
					list[j].job, list[j].attempt, list[j].rank, list[j].start.Format("15:04:05.000")))
			}
		}
	}
	return out
}

func endText(iv interval) string {
	switch {
	case !iv.ended:
		return "no end marker"
	case iv.endLine != "" && !strings.Contains(iv.endLine, " t="):
		return iv.end.Format("15:04:05.000") + ", " + iv.endLine
	}
	return iv.end.Format("15:04:05.000")
}

// recordedEnds looks up the end the server recorded for a rank of a job's attempt.
func (c *testCluster) recordedEnds() func(job int64, attempt, rank int) (time.Time, bool) {
	return func(job int64, attempt, rank int) (time.Time, bool) {
		d, err := c.client.GetJob(context.Background(), job)
		if err != nil || attempt < 1 || attempt > len(d.AttemptList) {
			return time.Time{}, false
		}
		p := d.AttemptList[attempt-1].Placements
		if rank >= len(p) || p[rank].EndTime == nil {
			return time.Time{}, false
		}
		return *p[rank].EndTime, true
	}
}

// osProcess is a live process as /proc shows it.
type osProcess struct {
	pid     int
	ppid    int
	pgid    int
	sid     int
	cmdline string
	env     map[string]string
}

// listProcesses reads every live (not zombie) process but this one.
func listProcesses() []osProcess {
	entries, _ := os.ReadDir("/proc")
	var out []osProcess
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// The command name may hold spaces; the fields after its closing paren do not.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 5 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		p := osProcess{pid: pid, env: map[string]string{}}
		p.ppid, _ = strconv.Atoi(f[1])
		p.pgid, _ = strconv.Atoi(f[2])
		p.sid, _ = strconv.Atoi(f[3])
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		p.cmdline = strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")
		environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		for _, kv := range strings.Split(string(environ), "\x00") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				p.env[k] = v
			}
		}
		out = append(out, p)
	}
	return out
}

func (p osProcess) mentions(dir string) bool {
	if strings.Contains(p.cmdline, dir) {
		return true
	}
	for _, v := range p.env {
		if strings.Contains(v, dir) {
			return true
		}
	}
	return false
}

func (p osProcess) String() string {
	return fmt.Sprintf("pid %d (ppid %d, pgid %d, sid %d, job %s attempt %s): %s", p.pid, p.ppid, p.pgid, p.sid,
		p.env[api.EnvJobID], p.env[api.EnvAttempt], p.cmdline)
}

// jobProcesses lists the live processes of a job of the cluster under root, of one
// attempt (or any, with attempt 0): every process whose environment is the job's, whatever
// group or session it moved to.
func jobProcesses(root string, job int64, attempt int) []osProcess {
	return jobProcessesIn(listProcesses(), root, job, attempt)
}

// jobProcessesIn is jobProcesses of a list already read.
func jobProcessesIn(ps []osProcess, root string, job int64, attempt int) []osProcess {
	var out []osProcess
	for _, p := range ps {
		if p.env[api.EnvJobID] != strconv.FormatInt(job, 10) || !p.mentions(root) {
			continue
		}
		if attempt == 0 || p.env[api.EnvAttempt] == strconv.Itoa(attempt) {
			out = append(out, p)
		}
	}
	return out
}

// killProcessesUnder kills every process that names dir in its command line or
// environment: servers, agents, supervisors and jobs a test left.
func killProcessesUnder(dir string) {
	for range 20 {
		var found []osProcess
		for _, p := range listProcesses() {
			if p.mentions(dir) {
				found = append(found, p)
			}
		}
		if len(found) == 0 {
			return
		}
		for _, p := range found {
			syscall.Kill(p.pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// processStart is a process's start time in clock ticks since boot: with the pid, it
// tells one process from a later one that reused its pid.
func processStart(pid int) (string, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 20 || f[0] == "Z" {
		return "", false
	}
	return f[19], true
}

// attemptDirs finds the directories of one attempt of job on an agent's data dir, of any
// cluster.
func attemptDirs(agentDir string, job int64, attempt int) []string {
	dirs, _ := filepath.Glob(filepath.Join(agentDir, "clusters", "*", "jobs", strconv.FormatInt(job, 10), strconv.Itoa(attempt)))
	return dirs
}

func readPID(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return pid
}

func (c *testCluster) events(kind string) []api.Event {
	c.t.Helper()
	var out []api.Event
	opts := cli.AuditOptions{Kind: kind}
	for {
		list, err := c.client.Audit(context.Background(), opts)
		if err != nil {
			c.t.Fatalf("audit: %v", err)
		}
		out = append(out, list.Events...)
		if list.Next == "" {
			return out
		}
		opts.After = list.Next
	}
}

func countJobs(t testing.TB, c *cli.Client) int {
	t.Helper()
	list, err := c.AllJobs(context.Background(), cli.ListOptions{States: []string{"all"}})
	if err != nil {
		t.Fatal(err)
	}
	return len(list)
}

func isAPIStatus(err error, status int) bool {
	var e *cli.APIError
	return errors.As(err, &e) && e.StatusCode == status
}

func jsonBody(t testing.TB, v any) io.Reader {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(b)
}
