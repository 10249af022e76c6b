package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// End-to-end tests of execution: supervisors that outlive their agent, fencing of nodes
// that come back, gangs, preemption, retries and arrays, all with real processes.

// waitAttemptDir waits until the agent of node has started the supervisor of job's attempt
// and returns the attempt's directory.
func (c *testCluster) waitAttemptDir(node string, job int64, attempt int) string {
	c.t.Helper()
	var dir string
	waitFor(c.t, 20*time.Second, fmt.Sprintf("the supervisor of job %d attempt %d on %s", job, attempt, node), func() bool {
		for _, d := range attemptDirs(c.agentDir(node), job, attempt) {
			if readPID(filepath.Join(d, "supervisor.pid")) > 0 {
				dir = d
				return true
			}
		}
		return false
	})
	return dir
}

func terminalTransitions(d api.JobDetail) int {
	n := 0
	for _, e := range d.Events {
		if e.Kind == api.EventTransition && e.To.Terminal() {
			n++
		}
	}
	return n
}

func countMarkers(ms []marker, kind string, job int64, attempt int) int {
	n := 0
	for _, m := range ms {
		if m.kind == kind && m.job == job && (attempt == 0 || m.attempt == attempt) {
			n++
		}
	}
	return n
}

// kill -9 of the agent while its job runs stops nothing: the job's supervisor keeps it,
// the restarted agent adopts the same supervisor, and the job's end is recorded once.
func TestAgentKilledWhileJobRuns(t *testing.T) {
	skipShort(t)
	t.Parallel()
	c := newCluster(t, map[string]string{"node-a": "2"})
	j := c.submit(api.JobSpec{GPUs: 1, Command: c.markerScript(`sleep 4 & wait $!; mark end code=0; exit 0`)})
	c.waitState(j.ID, 20*time.Second, api.StateRunning)
	c.waitMarker("start", j.ID, 1, 0)
	dir := c.waitAttemptDir("node-a", j.ID, 1)
	supervisor := readPID(filepath.Join(dir, "supervisor.pid"))
	born, ok := processStart(supervisor)
	if !ok {
		t.Fatalf("supervisor %d of job %d is not running", supervisor, j.ID)
	}

	c.agents["node-a"].kill()
	time.Sleep(500 * time.Millisecond)
	if b, ok := processStart(supervisor); !ok || b != born {
		t.Fatalf("the supervisor (pid %d) died with its agent", supervisor)
	}
	if len(jobProcesses(c.root, j.ID, 1)) == 0 {
		t.Fatalf("job %d stopped running when its agent was killed", j.ID)
	}
	c.restartAgent("node-a")
	c.waitNodesReady("node-a")
	if d := c.job(j.ID); d.State != api.StateRunning || d.Attempts != 1 {
		t.Fatalf("after the agent restarted, job %d is %s at attempt %d; want RUNNING at 1", j.ID, d.State, d.Attempts)
	}
	if got := readPID(filepath.Join(dir, "supervisor.pid")); got != supervisor {
		t.Errorf("supervisor pid %d after the agent restarted; want the same %d", got, supervisor)
	}
	if b, ok := processStart(supervisor); !ok || b != born {
		t.Errorf("supervisor %d is not the one that ran before the agent restarted", supervisor)
	}

	d := c.waitEnded(j.ID, 30*time.Second)
	if d.State != api.StateSucceeded || d.ExitCode == nil || *d.ExitCode != 0 || d.Attempts != 1 || len(d.AttemptList) != 1 {
		t.Fatalf("job %d ended %s, exit code %v, %d attempts (%d recorded); want SUCCEEDED, 0, 1 attempt", j.ID, d.State, d.ExitCode, d.Attempts, len(d.AttemptList))
	}
	if n := terminalTransitions(d); n != 1 {
		t.Errorf("job %d's end was recorded %d times; want once: %+v", j.ID, n, d.Events)
	}
	ms := readMarkers(t, c.markers)
	if s, e := countMarkers(ms, "start", j.ID, 0), countMarkers(ms, "end", j.ID, 0); s != 1 || e != 1 {
		t.Errorf("job %d started %d times and ended %d times; want once each", j.ID, s, e)
	}
}

// A job that ends while its agent is down has its end recorded by its supervisor; the
// restarted agent reports it as it was: FAILED with the job's exit code, in one attempt.
func TestJobEndsWhileAgentDown(t *testing.T) {
	skipShort(t)
	t.Parallel()
	c := newCluster(t, map[string]string{"node-a": "1"})
	j := c.submit(api.JobSpec{GPUs: 1, Command: shell(`sleep 1.5; exit 3`)})
	c.waitState(j.ID, 20*time.Second, api.StateRunning)
	dir := c.waitAttemptDir("node-a", j.ID, 1)
	c.agents["node-a"].kill()
	waitFor(t, 15*time.Second, "the supervisor to record the job's end", func() bool {
		_, err := os.Stat(filepath.Join(dir, "status.json"))
		return err == nil
	})
	if d := c.job(j.ID); d.State != api.StateRunning {
		t.Fatalf("job %d is %s while its agent is down; want RUNNING until the agent reports", j.ID, d.State)
	}
	c.restartAgent("node-a")
	d := c.waitEnded(j.ID, 30*time.Second)
	if d.State != api.StateFailed || d.ExitCode == nil || *d.ExitCode != 3 || d.Attempts != 1 || d.Reason != api.ReasonExitCode {
		t.Fatalf("job %d ended %s (%s), exit code %v, %d attempts; want FAILED (exit_code), 3, 1 attempt", j.ID, d.State, d.Reason, d.ExitCode, d.Attempts)
	}
	if n := terminalTransitions(d); n != 1 {
		t.Errorf("job %d's end was recorded %d times; want once", j.ID, n)
	}
}

// A node declared lost whose agent returns runs nothing old beside anything new: the old
// attempt's processes are stopped, and the node is syncing, before a new attempt is placed
// there. The agent is frozen (SIGSTOP), so its job runs on unaware, as on a partitioned node.
func TestLostNodeReturns(t *testing.T) {
	skipShort(t)
	t.Parallel()
	c := newTestCluster(t, map[string]string{"node-a": "1"}, clusterOpts{notReady: "1s", lost: "3s"})
	j := c.submit(api.JobSpec{GPUs: 1, Grace: 5, Command: c.markerScriptRaw(`
trap 'sleep 1; mark end code=term; exit 143' TERM
mark start
if [ "$ROTA_ATTEMPT" -ge 2 ]; then sleep 1; mark end code=0; exit 0; fi
while :; do sleep 0.2 & wait $!; done`)})
	c.waitState(j.ID, 20*time.Second, api.StateRunning)
	c.waitMarker("start", j.ID, 1, 0)

	agent := c.agents["node-a"]
	agent.signal(syscall.SIGSTOP)
	waitFor(t, 20*time.Second, "node-a LOST and the job requeued", func() bool {
		d := c.job(j.ID)
		return c.node("node-a").State == api.NodeLost && d.State == api.StatePending &&
			len(d.AttemptList) == 1 && d.AttemptList[0].Reason == api.ReasonNodeLost
	})
	if len(jobProcesses(c.root, j.ID, 1)) == 0 {
		t.Fatal("the old attempt stopped while its agent was frozen; the test needs it running")
	}

	agent.signal(syscall.SIGCONT)
	sawSyncing := false
	var problems []string
	deadline := time.Now().Add(40 * time.Second)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("job %d did not succeed after its node returned: %+v", j.ID, c.job(j.ID).Job)
		}
		// The job is read before the processes and the node after them, so that each
		// problem below is one the server made: a placement seen before a process that
		// still ran after it, a process that ran before a node still syncing after it.
		// Read the other way round, a process that ended between the two reads would be
		// taken for one that overlapped.
		d := c.job(j.ID)
		ps := listProcesses()
		old, cur := jobProcessesIn(ps, c.root, j.ID, 1), jobProcessesIn(ps, c.root, j.ID, 2)
		n := c.node("node-a")
		sawSyncing = sawSyncing || n.Syncing
		if len(old) > 0 && len(cur) > 0 {
			problems = append(problems, fmt.Sprintf("attempts 1 and 2 run at once: %v and %v", old, cur))
		}
		if len(cur) > 0 && n.Syncing {
			problems = append(problems, fmt.Sprintf("attempt 2 runs while node-a is syncing: %v", cur))
		}
		if d.Attempts >= 2 && len(old) > 0 {
			problems = append(problems, fmt.Sprintf("attempt %d placed on node-a while attempt 1 still runs there: %v", d.Attempts, old))
		}
		if d.State.Terminal() {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, p := range problems {
		t.Error(p)
	}
	if !sawSyncing {
		t.Error("node-a was never seen syncing after its agent returned from LOST")
	}
	d := c.job(j.ID)
	if d.State != api.StateSucceeded || d.Attempts != 2 {
		t.Fatalf("job %d ended %s after %d attempts; want SUCCEEDED in 2", j.ID, d.State, d.Attempts)
	}
	ms := readMarkers(t, c.markers)
	oldEnd, ok1 := findMarker(ms, "end", j.ID, 1, 0)
	newStart, ok2 := findMarker(ms, "start", j.ID, 2, 0)
	switch {
	case !ok1:
		t.Errorf("attempt 1 never got its stop signal (no end marker): %v", markersOf(ms, j.ID))
	case !ok2:
		t.Errorf("attempt 2 left no start marker: %v", markersOf(ms, j.ID))
	case !oldEnd.time.Before(newStart.time):
		t.Errorf("attempt 2 started at %s, before attempt 1 ended at %s", newStart.time.Format(time.StampMicro), oldEnd.time.Format(time.StampMicro))
	}
	for _, o := range gpuOverlaps(gpuIntervals(ms)) {
		t.Error(o)
	}
	found := false
	for _, e := range c.events(api.EventNode) {
		if e.JobID == j.ID && e.Attempt == 1 && e.Reason == api.StoppedNotListed {
			found = true
		}
	}
	if !found {
		t.Errorf("no event records that node-a's agent stopped attempt 1 of job %d (reason %s)", j.ID, api.StoppedNotListed)
	}
}

// A job whose leader exits while its children run leaves nothing behind: not a child in
// its process group, not one that moved to a session of its own.
func TestLeaderExitsChildrenStopped(t *testing.T) {
	skipShort(t)
	t.Parallel()
	c := newCluster(t, map[string]string{"node-a": "2"})
	check := func(t *testing.T, id int64, when string) {
		t.Helper()
		if ps := jobProcesses(c.root, id, 0); len(ps) > 0 {
			t.Errorf("%s, job %d still has processes:\n%v", when, id, ps)
		}
	}

	t.Run("agent running", func(t *testing.T) {
		c.t = t
		j := c.submit(api.JobSpec{GPUs: 1, Command: shell(`sleep 600 & setsid sleep 600 & exit 0`)})
		d := c.waitEnded(j.ID, 20*time.Second)
		if d.State != api.StateSucceeded {
			t.Fatalf("job %d ended %s (%s: %s); want SUCCEEDED", j.ID, d.State, d.Reason, d.Message)
		}
		check(t, j.ID, "once it SUCCEEDED")
	})

	t.Run("agent restarted", func(t *testing.T) {
		c.t = t
		j := c.submit(api.JobSpec{GPUs: 1, Command: shell(`sleep 600 & setsid sleep 600 & sleep 2; exit 0`)})
		c.waitState(j.ID, 20*time.Second, api.StateRunning)
		dir := c.waitAttemptDir("node-a", j.ID, 1)
		waitFor(t, 10*time.Second, "the job's three processes", func() bool { return len(jobProcesses(c.root, j.ID, 1)) >= 3 })
		c.agents["node-a"].kill()
		waitFor(t, 15*time.Second, "the supervisor to record the job's end", func() bool {
			_, err := os.Stat(filepath.Join(dir, "status.json"))
			return err == nil
		})
		check(t, j.ID, "once its supervisor recorded its end with the agent down")
		c.restartAgent("node-a")
		d := c.waitEnded(j.ID, 20*time.Second)
		if d.State != api.StateSucceeded {
			t.Fatalf("job %d ended %s (%s: %s); want SUCCEEDED", j.ID, d.State, d.Reason, d.Message)
		}
		check(t, j.ID, "once it SUCCEEDED")
	})
}

// copyIdentity copies a joined agent's identity (the link and the directory it names) to
// another data dir, as a second machine set up from a copy of the first would have.
func copyIdentity(t *testing.T, from, to string) {
	t.Helper()
	target, err := os.Readlink(filepath.Join(from, "identity"))
	if err != nil {
		t.Fatalf("identity link: %v", err)
	}
	src := target
	if !filepath.IsAbs(src) {
		src = filepath.Join(from, target)
	}
	dst := filepath.Join(to, filepath.Base(src))
	if err := os.MkdirAll(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		info, _ := e.Info()
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(src), filepath.Join(to, "identity")); err != nil {
		t.Fatal(err)
	}
}

// One node name, one live agent; one data dir, one agent process. A second agent is
// refused with a message naming the first, and the first's job runs on untouched.
func TestTwoAgentsOneName(t *testing.T) {
	skipShort(t)
	t.Parallel()
	c := newCluster(t, map[string]string{"node-a": "1"})
	j := c.submit(api.JobSpec{GPUs: 1, Command: c.markerScript(`sleep 8 & wait $!; mark end code=0`)})
	c.waitState(j.ID, 20*time.Second, api.StateRunning)
	first := c.agents["node-a"]
	before := c.node("node-a")
	firstPID := strconv.Itoa(first.pid())

	second := func(name string, args ...string) (int, string) {
		t.Helper()
		p := startProc(t, c.logDir, name, nil, args...)
		code, ok := p.waitExit(30 * time.Second)
		if !ok {
			t.Fatalf("%s still runs beside the first agent; want it refused\n%s", name, p.output())
		}
		return code, p.output()
	}

	// A second machine joining under the same name, with a join token of its own.
	dir2 := filepath.Join(c.root, "second-join")
	code, out := second("agent-node-a-join", append(c.agentArgs("node-a", "1", dir2), "--join", c.joinToken("node-a"))...)
	if code == 0 || !strings.Contains(out, "pid "+firstPID) || !strings.Contains(out, "node-a") {
		t.Errorf("second agent joining as node-a exited %d; want non-zero with a message naming the first (pid %s):\n%s", code, firstPID, out)
	}

	// A second machine set up from a copy of the first's identity.
	dir3 := filepath.Join(c.root, "second-copy")
	if err := os.MkdirAll(dir3, 0o755); err != nil {
		t.Fatal(err)
	}
	copyIdentity(t, c.agentDir("node-a"), dir3)
	code, out = second("agent-node-a-copy", c.agentArgs("node-a", "1", dir3)...)
	if code == 0 || !strings.Contains(out, "pid "+firstPID) {
		t.Errorf("second agent on a copy of node-a's identity exited %d; want non-zero with a message naming the first (pid %s):\n%s", code, firstPID, out)
	}

	// A second process on the first's own data dir.
	code, out = second("agent-node-a-samedir", c.agentArgs("node-a", "1", c.agentDir("node-a"))...)
	if code == 0 || !strings.Contains(out, "pid "+firstPID) {
		t.Errorf("second agent on node-a's data dir exited %d; want non-zero naming the first's pid %s:\n%s", code, firstPID, out)
	}

	if first.exited() {
		t.Fatalf("the first agent exited:\n%s", first.output())
	}
	after := c.node("node-a")
	if after.Agent == nil || before.Agent == nil || after.Agent.Instance != before.Agent.Instance || after.State != api.NodeReady {
		t.Errorf("node-a after the second agents: %s, agent %+v; want READY with the first agent %+v", after.State, after.Agent, before.Agent)
	}
	if d := c.job(j.ID); d.State != api.StateRunning || d.Attempts != 1 {
		t.Errorf("the first agent's job is %s at attempt %d; want RUNNING at 1", d.State, d.Attempts)
	}
	d := c.waitEnded(j.ID, 30*time.Second)
	if d.State != api.StateSucceeded || d.Attempts != 1 {
		t.Errorf("the first agent's job ended %s after %d attempts; want SUCCEEDED in 1", d.State, d.Attempts)
	}
	if n := countMarkers(readMarkers(t, c.markers), "start", j.ID, 0); n != 1 {
		t.Errorf("job %d started %d times; want once", j.ID, n)
	}
}

// A server started on a fresh data dir is another cluster: the old agents refuse it (its
// CA is not the one they pinned) and say so; joined to it, they stop the old cluster's
// attempts and report them, and new jobs that reuse the old IDs start with empty
// checkpoint directories of their own.
func TestFreshServerOldAgents(t *testing.T) {
	skipShort(t)
	t.Parallel()
	nodes := []string{"node-a", "node-b"}
	c := newCluster(t, map[string]string{"node-a": "1", "node-b": "1"})
	var old []int64
	for range 2 {
		old = append(old, c.submit(api.JobSpec{GPUs: 1, Grace: 5, Command: c.markerScriptRaw(`
trap 'mark end code=term; exit 143' TERM
mark start
touch "$ROTA_CHECKPOINT_DIR/old-job-$ROTA_JOB_ID"
while :; do sleep 0.2 & wait $!; done`)}).ID)
	}
	oldCkpt := map[int64]string{}
	for _, id := range old {
		c.waitState(id, 20*time.Second, api.StateRunning)
		waitFor(t, 10*time.Second, fmt.Sprintf("job %d's checkpoint file", id), func() bool {
			for _, n := range nodes {
				files, _ := filepath.Glob(filepath.Join(c.agentDir(n), "clusters", "*", "checkpoints", strconv.FormatInt(id, 10), "old-job-*"))
				if len(files) == 1 {
					oldCkpt[id] = filepath.Dir(files[0])
					return true
				}
			}
			return false
		})
	}
	oldCluster := filepath.Base(filepath.Dir(filepath.Dir(oldCkpt[old[0]])))
	oldProcs := func() []osProcess {
		var out []osProcess
		for _, p := range listProcesses() {
			if p.env[api.EnvJobID] != "" && p.mentions(filepath.Join("clusters", oldCluster)+"/") && p.mentions(c.root) {
				out = append(out, p)
			}
		}
		return out
	}

	c.server.kill()
	// A while without a server, as when one machine's server is replaced by another: the
	// agents' first failures are refused connections, not the new server's CA.
	time.Sleep(time.Second)
	c.dataDir = filepath.Join(c.root, "server-fresh")
	c.startServer()
	c.mapAdminToTestAccount()
	for _, n := range nodes {
		agent := c.agents[n]
		eventually(t, 10*time.Second, "agent "+n+"'s log to say that the server's CA is not the one it pinned", func() bool {
			return strings.Contains(agent.output(), "differs from the pinned")
		})
		if agent.exited() {
			t.Errorf("agent %s exited on meeting another cluster's server; jobs must keep running", n)
		}
	}
	if ps := oldProcs(); len(ps) < 2 {
		t.Fatalf("the old jobs stopped before their agents joined the new server: %v", ps)
	}

	for _, n := range nodes {
		c.agents[n].kill()
		c.joinAgent(n)
	}
	c.waitNodesReady(nodes...)
	waitFor(t, 20*time.Second, "the old cluster's attempts to stop", func() bool { return len(oldProcs()) == 0 })
	ms := readMarkers(t, c.markers)
	for _, id := range old {
		if _, ok := findMarker(ms, "end", id, 1, 0); !ok {
			t.Errorf("old job %d was not sent its stop signal (no end marker)", id)
		}
	}
	reported := map[int64]bool{}
	for _, e := range c.events(api.EventNode) {
		if e.Reason == api.StoppedOtherCluster && strings.Contains(e.Message, oldCluster) {
			reported[e.JobID] = true
		}
	}
	for _, id := range old {
		if !reported[id] {
			t.Errorf("no event reports that old job %d (cluster %s) was stopped", id, oldCluster)
		}
	}

	for i, id := range old {
		j := c.submit(api.JobSpec{GPUs: 1, Command: shell(`echo "ckpt=$ROTA_CHECKPOINT_DIR"; ls -A "$ROTA_CHECKPOINT_DIR" | sed 's/^/file: /'; echo listed`)})
		if j.ID != id {
			t.Fatalf("new job %d got ID %d; the test needs the fresh server to reuse the old IDs", i, j.ID)
		}
		d := c.waitEnded(j.ID, 20*time.Second)
		if d.State != api.StateSucceeded {
			t.Fatalf("new job %d ended %s: %s", j.ID, d.State, d.Message)
		}
		log := c.logs(j.ID)
		if !strings.Contains(log, "listed") || strings.Contains(log, "file: ") || strings.Contains(log, "ckpt="+oldCkpt[id]+"\n") {
			t.Errorf("new job %d's checkpoint dir is not a fresh one (old job's was %s):\n%s", j.ID, oldCkpt[id], log)
		}
	}
}

// A multi-node attempt ends when its last rank does, and when one rank fails the others
// get their stop signal and the job fails naming the rank.
func TestGang(t *testing.T) {
	skipShort(t)
	t.Parallel()
	c := newCluster(t, map[string]string{"node-a": "1", "node-b": "1"})
	gang := func(cmd []string) api.JobSpec {
		return api.JobSpec{Nodes: 2, GPUsPerNode: 1, GPUs: 2, Grace: 5, Command: cmd}
	}
	logsHaveBothRanks := func(t *testing.T, d api.JobDetail) {
		t.Helper()
		r := c.rota("logs", strconv.FormatInt(d.ID, 10))
		if r.code != 0 {
			t.Fatalf("rota logs: %s", r)
		}
		for rank, p := range d.AttemptList[len(d.AttemptList)-1].Placements {
			want := fmt.Sprintf("[rank %d %s] hello from rank %d", rank, p.Node, rank)
			if !strings.Contains(r.stdout, want) {
				t.Errorf("rota logs %d lacks %q:\n%s", d.ID, want, r.stdout)
			}
		}
	}

	t.Run("ranks end at different times", func(t *testing.T) {
		c.t = t
		j := c.submit(gang(c.markerScript(`echo "hello from rank $NODE_RANK"
if [ "$NODE_RANK" = 0 ]; then sleep 1; else sleep 4; fi
mark end code=0`)))
		c.waitState(j.ID, 20*time.Second, api.StateRunning)
		waitFor(t, 20*time.Second, "rank 0 to end", func() bool {
			_, ok := findMarker(readMarkers(t, c.markers), "end", j.ID, 1, 0)
			return ok
		})
		time.Sleep(time.Second) // enough for rank 0's end to be reported
		if d := c.job(j.ID); d.State != api.StateRunning {
			t.Errorf("job %d is %s once rank 0 ended while rank 1 still runs; want RUNNING", j.ID, d.State)
		}
		d := c.waitEnded(j.ID, 20*time.Second)
		if d.State != api.StateSucceeded || d.Attempts != 1 {
			t.Fatalf("job %d ended %s after %d attempts (%s); want SUCCEEDED in 1", j.ID, d.State, d.Attempts, d.Message)
		}
		last, ok := findMarker(readMarkers(t, c.markers), "end", j.ID, 1, 1)
		if !ok {
			t.Fatal("rank 1 left no end marker")
		}
		if d.EndTime == nil || d.EndTime.Before(last.time.Add(-10*time.Millisecond)) {
			t.Errorf("job %d ended at %v, before its rank 1 did at %s", j.ID, d.EndTime, last.time.Format(time.StampMicro))
		}
		logsHaveBothRanks(t, d)
	})

	t.Run("one rank fails", func(t *testing.T) {
		c.t = t
		j := c.submit(gang(c.markerScriptRaw(`trap 'mark stopped-by-signal; exit 0' TERM
mark start
echo "hello from rank $NODE_RANK"
if [ "$NODE_RANK" = 1 ]; then sleep 1; mark end code=3; exit 3; fi
while :; do sleep 0.2 & wait $!; done`)))
		d := c.waitEnded(j.ID, 30*time.Second)
		if d.State != api.StateFailed || d.ExitCode == nil || *d.ExitCode != 3 || d.Attempts != 1 {
			t.Fatalf("job %d ended %s, exit code %v, %d attempts; want FAILED with 3 in 1 attempt", j.ID, d.State, d.ExitCode, d.Attempts)
		}
		a := d.AttemptList[0]
		failed := a.Placements[1].Node
		for _, want := range []string{"rank 1", failed, "code 3"} {
			if !strings.Contains(d.Message, want) {
				t.Errorf("job %d's message %q does not name %q", j.ID, d.Message, want)
			}
		}
		if _, ok := findMarker(readMarkers(t, c.markers), "stopped-by-signal", j.ID, 1, 0); !ok {
			t.Errorf("rank 0 of job %d never got its stop signal", j.ID)
		}
		if ps := jobProcesses(c.root, j.ID, 0); len(ps) > 0 {
			t.Errorf("job %d ended with processes left: %v", j.ID, ps)
		}
		logsHaveBothRanks(t, d)
	})

	// examples/torchrun.sh on the same two nodes: rota's torchrun variables reach every
	// rank, the two workers all-reduce over MASTER_ADDR:MASTER_PORT and get the same sums;
	// workers that cannot run fail the job instead of leaving it hanging.
	t.Run("examples/torchrun.sh", func(t *testing.T) {
		c.t = t
		script, err := filepath.Abs("../../examples/torchrun.sh")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := exec.LookPath("python3"); err != nil {
			t.Fatal("examples/torchrun.sh's all-reduce needs python3 (.ci/run installs it)")
		}
		torchrun := func(steps string) api.JobSpec {
			spec := gang([]string{script})
			spec.Env = map[string]string{"STEPS": steps}
			return spec
		}
		j := c.submit(torchrun("3"))
		d := c.waitEnded(j.ID, 60*time.Second)
		r := c.rota("logs", strconv.FormatInt(j.ID, 10))
		if d.State != api.StateSucceeded || r.code != 0 {
			t.Fatalf("job %d ended %s: %s\n%s", j.ID, d.State, d.Message, r)
		}
		for nodeRank, p := range d.AttemptList[0].Placements {
			prefix := fmt.Sprintf("[rank %d %s] ", nodeRank, p.Node)
			wants := []string{
				prefix + fmt.Sprintf("node %d of 2 (%s,%s): 1 workers on GPUs 0, world size 2, master ", nodeRank,
					d.AttemptList[0].Placements[0].Node, d.AttemptList[0].Placements[1].Node),
				prefix + fmt.Sprintf("node %d: all workers done", nodeRank),
			}
			for step := 1; step <= 3; step++ {
				// Every worker adds rank+1 times the step: 3 times the step in all.
				wants = append(wants, prefix+fmt.Sprintf("rank %d/2 (local 0): step %d/3, all-reduce sum %d", nodeRank, step, 3*step))
			}
			for _, want := range wants {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("the log lacks %q:\n%s", want, r.stdout)
				}
			}
		}
		bad := c.submit(torchrun("three"))
		if d := c.waitEnded(bad.ID, 60*time.Second); d.State != api.StateFailed {
			t.Errorf("a job whose workers cannot run ended %s; want FAILED", d.State)
		}
	})
}

// An urgent 2-node job takes two nodes full of batch work: every victim gets its signal at
// once, the urgent job starts within one grace period, and no batch job is preempted twice
// in the episode, however eager the queued batch work is for the GPUs freed meanwhile.
func TestUrgentGangPreemptsBatch(t *testing.T) {
	skipShort(t)
	t.Parallel()
	c := newCluster(t, map[string]string{"node-a": "4", "node-b": "4"})
	const grace = 3
	// Batch work runs until the hold file goes, or until it is told to stop: then it
	// takes 1 s of its 3 s grace to save its work.
	hold := filepath.Join(c.root, "hold")
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	batch := c.markerScriptRaw(fmt.Sprintf(`
trap 'mark term; sleep 1; mark end code=term; exit 0' TERM
mark start
if [ "$ROTA_ATTEMPT" -ge 2 ]; then sleep 1; mark end code=0; exit 0; fi
while [ -e %q ]; do sleep 0.2 & wait $!; done
mark end code=0`, hold))
	var running []int64
	for _, gpus := range []int{2, 2, 1, 1, 1, 1} {
		running = append(running, c.submit(api.JobSpec{Queue: "batch", GPUs: gpus, Grace: grace, Command: batch}).ID)
	}
	for _, id := range running {
		c.waitState(id, 20*time.Second, api.StateRunning)
		c.waitMarker("start", id, 1, 0) // its trap is set
	}
	waiting := c.submit(api.JobSpec{Queue: "batch", GPUs: 1, Grace: grace, Command: batch}).ID
	urgent := c.submit(api.JobSpec{Queue: "urgent", Nodes: 2, GPUsPerNode: 4, GPUs: 8, Command: c.markerScript(`sleep 2; mark end code=0`)})
	d := c.waitState(urgent.ID, 40*time.Second, api.StateSucceeded)
	if d.StartTime == nil {
		t.Fatalf("urgent job %d has no start time", urgent.ID)
	}
	if wait := d.StartTime.Sub(urgent.SubmitTime); wait > (grace+3)*time.Second {
		t.Errorf("urgent job started %s after its submit; want within one grace period (%ds) and a little", wait.Round(time.Millisecond), grace)
	} else {
		t.Logf("urgent job started %s after its submit (grace %ds)", wait.Round(time.Millisecond), grace)
	}
	os.Remove(hold)
	released := time.Now()
	defer func() {
		t.Logf("the batch jobs took %s to finish after the urgent job", time.Since(released).Round(time.Millisecond))
	}()
	for _, id := range append(running, waiting) {
		d := c.waitEnded(id, 60*time.Second)
		preempted := 0
		for _, a := range d.AttemptList {
			if a.Reason == api.ReasonPreempted {
				preempted++
			}
		}
		if d.State != api.StateSucceeded || preempted > 1 || d.Attempts > 2 {
			t.Errorf("batch job %d ended %s after %d attempts, %d preempted; want SUCCEEDED, preempted at most once", id, d.State, d.Attempts, preempted)
		}
		if n := countMarkers(readMarkers(t, c.markers), "term", id, 0); n > 1 {
			t.Errorf("batch job %d got its stop signal %d times", id, n)
		}
	}
	for _, id := range running {
		if n := countMarkers(readMarkers(t, c.markers), "term", id, 1); n != 1 {
			d := c.job(id)
			t.Errorf("batch job %d was not signalled before it was stopped for the urgent job: attempts %+v, markers %v", id, d.AttemptList, markersOf(readMarkers(t, c.markers), id))
		}
	}
	for _, o := range gpuOverlaps(gpuIntervalsEnding(readMarkers(t, c.markers), c.recordedEnds())) {
		t.Error(o)
	}
}

// --retries 2 on a command that fails twice and then succeeds: three attempts, with a
// backoff between them that `rota show` shows while the job waits it out.
func TestRetriesWithBackoff(t *testing.T) {
	skipShort(t)
	t.Parallel()
	c := newCluster(t, map[string]string{"node-a": "1"})
	counter := filepath.Join(c.root, "tries")
	r := c.rota("submit", "--retries", "2", "--gpus", "1", "--", "sh", "-c",
		fmt.Sprintf(`n=$(cat %[1]s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]s; echo "attempt $ROTA_ATTEMPT try $n"; [ $n -ge 3 ] || exit 1`, counter))
	if r.code != 0 {
		t.Fatalf("rota submit: %s", r)
	}
	id := lastLineID(t, r.stdout)
	waitFor(t, 20*time.Second, "the job to wait out a backoff", func() bool {
		d := c.job(id)
		return d.State == api.StatePending && d.NotBefore != nil
	})
	if r := c.rota("show", strconv.FormatInt(id, 10)); r.code != 0 || !strings.Contains(r.stdout, "backoff") {
		t.Errorf("rota show of a job waiting out its backoff does not say so:\n%s", r)
	}
	d := c.waitEnded(id, 90*time.Second)
	if d.State != api.StateSucceeded || d.Attempts != 3 || len(d.AttemptList) != 3 || d.Failures != 2 {
		t.Fatalf("job %d ended %s after %d attempts (%d recorded), %d failures; want SUCCEEDED after 3, 2 failures", id, d.State, d.Attempts, len(d.AttemptList), d.Failures)
	}
	for i, a := range d.AttemptList[:2] {
		if a.State != api.StateFailed || a.ExitCode == nil || *a.ExitCode != 1 {
			t.Errorf("attempt %d: %s exit %v; want FAILED with 1", i+1, a.State, a.ExitCode)
		}
	}
	gap := func(i int) time.Duration { return d.AttemptList[i+1].AssignTime.Sub(*d.AttemptList[i].EndTime) }
	if g1, g2 := gap(0), gap(1); g1 < time.Second || g2 <= g1 {
		t.Errorf("waits before attempts 2 and 3 were %s and %s; want a backoff that grows", g1, g2)
	}
	if log := c.logs(id); !strings.Contains(log, "attempt 3 try 3") {
		t.Errorf("last attempt's log %q", log)
	}
}

// An array's jobs see their index, and cancelling the array's ID cancels every element
// that has not ended.
func TestArray(t *testing.T) {
	skipShort(t)
	t.Parallel()
	c := newCluster(t, map[string]string{"node-a": "4"})
	out := filepath.Join(c.root, "array-out")
	if err := os.MkdirAll(out, 0o777); err != nil {
		t.Fatal(err)
	}
	r := c.rota("submit", "--array", "0-3", "--", "sh", "-c",
		fmt.Sprintf(`echo "$ROTA_ARRAY_INDEX" > %s/$ROTA_JOB_ID; echo "array $ROTA_ARRAY_JOB_ID index $ROTA_ARRAY_INDEX"`, out))
	if r.code != 0 {
		t.Fatalf("rota submit --array: %s", r)
	}
	first := lastLineID(t, r.stdout)
	for i := range 4 {
		id := first + int64(i)
		d := c.waitEnded(id, 20*time.Second)
		if d.State != api.StateSucceeded || d.ArrayID != first || d.ArrayIndex == nil || *d.ArrayIndex != i {
			t.Errorf("array element %d: %s, array %d index %v; want SUCCEEDED, array %d index %d", id, d.State, d.ArrayID, d.ArrayIndex, first, i)
			continue
		}
		data, err := os.ReadFile(filepath.Join(out, strconv.FormatInt(id, 10)))
		if err != nil || strings.TrimSpace(string(data)) != strconv.Itoa(i) {
			t.Errorf("array element %d wrote %q (%v); want %d", id, data, err, i)
		}
		if log := c.logs(id); !strings.Contains(log, fmt.Sprintf("array %d index %d", first, i)) {
			t.Errorf("array element %d's log %q lacks ROTA_ARRAY_JOB_ID %d and index %d", id, log, first, i)
		}
	}

	r = c.rota("submit", "--array", "0-5%2", "--grace", "1s", "--", "sleep", "600")
	if r.code != 0 {
		t.Fatalf("rota submit --array: %s", r)
	}
	arr := lastLineID(t, r.stdout)
	waitFor(t, 20*time.Second, "two elements of the array running", func() bool {
		n := 0
		for i := range 6 {
			if c.job(arr+int64(i)).State == api.StateRunning {
				n++
			}
		}
		return n == 2
	})
	if r := c.rota("cancel", strconv.FormatInt(arr, 10)); r.code != 0 {
		t.Fatalf("rota cancel %d: %s", arr, r)
	}
	for i := range 6 {
		id := arr + int64(i)
		if d := c.waitEnded(id, 20*time.Second); d.State != api.StateCancelled {
			t.Errorf("array element %d ended %s; want CANCELLED", id, d.State)
		}
		if ps := jobProcesses(c.root, id, 0); len(ps) > 0 {
			t.Errorf("cancelled array element %d still runs: %v", id, ps)
		}
	}
	if n := countJobs(t, c.client); n != 10 {
		t.Errorf("%d jobs on the server; want the 10 array elements", n)
	}
}

// A job is RUNNING once its process runs: the server records the start with the job's pid,
// and a job seen RUNNING has a process to signal. (A stop that lands between an attempt
// being reported RUNNING and its process starting finds nothing to signal: the job never
// gets its grace to checkpoint.)
func TestRunningMeansStarted(t *testing.T) {
	skipShort(t)
	t.Parallel()
	c := newCluster(t, map[string]string{"node-a": "1"})
	for range 3 {
		j := c.submit(api.JobSpec{GPUs: 1, Command: shell(`sleep 1`)})
		c.waitState(j.ID, 20*time.Second, api.StateRunning)
		procs := jobProcesses(c.root, j.ID, 1)
		d := c.job(j.ID)
		var started string
		for _, e := range d.Events {
			if e.Kind == api.EventTransition && e.To == api.StateRunning {
				started = e.Message
			}
		}
		pid := 0
		if m := regexp.MustCompile(`\(pid (\d+)\)`).FindStringSubmatch(started); m != nil {
			pid, _ = strconv.Atoi(m[1])
		}
		if pid <= 0 {
			t.Errorf("job %d's start was recorded as %q: no pid of a started process", j.ID, started)
		}
		if len(procs) == 0 {
			t.Errorf("job %d was RUNNING with no process of it running yet", j.ID)
		}
		c.waitEnded(j.ID, 20*time.Second)
	}
}

// A node goes on starting jobs when the rota binary it runs from is removed or replaced
// under it (a package removed, or upgraded before the agent is restarted): supervisors
// come from the agent's own executable, not from the file at its path.
func TestJobsStartOnceTheBinaryIsGone(t *testing.T) {
	skipShort(t)
	bin := filepath.Join(t.TempDir(), "rota")
	data, err := os.ReadFile(rotaBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	u := startUpFrom(t, bin, 1, "--fake-gpus", "1")
	id := u.submit("--", "true")
	u.waitJob(id, 30*time.Second, api.StateSucceeded)

	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	id = u.submit("--", "sh", "-c", "echo started after the binary went")
	if d := u.waitJob(id, 30*time.Second, api.StateSucceeded); d.Attempts != 1 {
		t.Fatalf("job %d after the binary was removed took %d attempts; want 1", id, d.Attempts)
	}
	// A file that cannot be run where the binary was, as an upgrade half written.
	if err := os.WriteFile(bin, []byte("not a program"), 0o755); err != nil {
		t.Fatal(err)
	}
	id = u.submit("--", "true")
	if d := u.waitJob(id, 30*time.Second, api.StateSucceeded); d.Attempts != 1 {
		t.Fatalf("job %d with a broken binary at the path took %d attempts; want 1", id, d.Attempts)
	}
}
