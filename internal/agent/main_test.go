package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the test binary play `rota supervise`: the agent under test starts it as
// the supervisor of each attempt, so the tests run real supervisor processes.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "supervise" {
		os.Exit(SuperviseMain(os.Args[2:], os.Stderr))
	}
	os.Exit(m.Run())
}

// testCluster is the cluster the fake server serves, an ID as the server makes them. It
// is this process's own: the attempts' containers and cgroups are named after it, and two
// test processes at once must not meet each other's (with one ID for all, one process's
// check that its container was removed saw the other's).
var testCluster = func() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}()

func testSupervisor(t *testing.T) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{exe, "supervise"}
}

// taskKey names an attempt of the test cluster.
type taskKey struct {
	job     int64
	attempt int
}

func (k taskKey) in(cluster string) attemptKey {
	return attemptKey{cluster: cluster, job: k.job, attempt: k.attempt}
}

// killLeftovers kills every process of every attempt under dataDir, supervisors first,
// and shows the supervisors' diagnostics of a failed test.
func killLeftovers(t *testing.T, dataDir string) {
	found, _ := scanAttempts(dataDir)
	logger := slog.New(slog.DiscardHandler)
	for _, f := range found {
		if pid, ok := readInt(filepath.Join(f.dir, fileSupervisorPID)); ok && isSupervisorOf(pid, f.dir) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		var job jobRecord
		readJSON(filepath.Join(f.dir, fileJob), &job)
		killRemains(&attempt{key: f.key, dir: f.dir, logger: logger}, job)
		if t.Failed() {
			if data, err := os.ReadFile(filepath.Join(f.dir, fileSupervisorLog)); err == nil && len(data) > 0 {
				t.Logf("supervisor of %s:\n%s", f.key, strings.TrimSpace(string(data)))
			}
		}
	}
}

// testRunner is a runner on its own data directory, its supervisors the test binary.
func newTestRunner(t *testing.T) *runner {
	ctx, cancel := context.WithCancel(context.Background())
	r := &runner{
		dataDir:        t.TempDir(),
		supervisor:     testSupervisor(t),
		supervisorPath: selfExe, // as rota agent starts its own supervisors
		supervisorEnv:  append(os.Environ(), "ROTA_TEST_AGENT_VAR=from-agent"),
		logger:         testLogger(t),
		poll:           20 * time.Millisecond,
		onChange:       func() {},
		ctx:            ctx,
	}
	t.Cleanup(func() {
		cancel()
		r.wg.Wait()
		killLeftovers(t, r.dataDir)
	})
	return r
}

// agentConfig is an agent of node-1 against s, on dataDir, whose supervisors are the test
// binary.
func agentConfig(t *testing.T, s *fakeServer, dataDir string) Config {
	return Config{
		ServerURL:         s.srv.URL,
		Name:              "node-1",
		Labels:            map[string]string{"pool": "train"},
		FakeGPUs:          "2",
		DataDir:           dataDir,
		HeartbeatInterval: 50 * time.Millisecond,
		SupervisorCommand: testSupervisor(t),
	}
}

// runningAgent is an agent whose Run goes on until stop.
type runningAgent struct {
	*Agent
	cancel context.CancelFunc
	done   chan error
}

// launch makes an agent from cfg and runs it. Each tweak adjusts it before it runs. The
// agent is stopped at the end of the test, and what it left running killed.
func launch(t *testing.T, cfg Config, logger *slog.Logger, tweaks ...func(*Agent)) *runningAgent {
	t.Helper()
	a, err := New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	for _, tweak := range tweaks {
		tweak(a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ra := &runningAgent{Agent: a, cancel: cancel, done: make(chan error, 1)}
	go func() { ra.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		ra.stop(t)
		killLeftovers(t, a.dataDir)
	})
	return ra
}

// stop ends Run, as an agent process going away does, and releases the data directory.
// Jobs keep running.
func (ra *runningAgent) stop(t *testing.T) {
	t.Helper()
	if ra.cancel == nil {
		return
	}
	ra.cancel()
	ra.cancel = nil
	select {
	case err := <-ra.done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("Run did not return after its context ended")
	}
	ra.Close()
}

// attemptOf returns the agent's attempt k of its cluster, once it has one.
func (ra *runningAgent) attemptOf(t *testing.T, k taskKey) *attempt {
	t.Helper()
	var att *attempt
	eventually(t, 10*time.Second, "the agent to have attempt "+k.in(testCluster).String(), func() bool {
		ra.mu.Lock()
		defer ra.mu.Unlock()
		att = ra.attempts[k.in(testCluster)]
		return att != nil
	})
	return att
}
