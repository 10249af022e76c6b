package agent

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// An agent that stops (an upgrade, a crash) stops no job: the next agent on the data
// directory takes the attempt up where it is, and the server hears of one attempt, run
// once, whose end it gets once, with its log and events neither lost nor repeated.
func TestAgentRestartKeepsJobRunning(t *testing.T) {
	s := newFakeServer(t)
	dir, tmp := t.TempDir(), t.TempDir()
	runs, pidFile, release := filepath.Join(tmp, "runs"), filepath.Join(tmp, "pid"), filepath.Join(tmp, "release")
	k := taskKey{3, 1}
	s.setDesired(api.Task{JobID: 3, Attempt: 1, GraceSeconds: 5, Command: []string{"sh", "-c", `
echo run >> "$1"; echo $$ > "$2"; echo before
echo '{"progress": {"step": 1}}' >> "$ROTA_EVENTS_FILE"
while [ ! -e "$3" ]; do sleep 0.05; done
echo '{"progress": {"step": 2}}' >> "$ROTA_EVENTS_FILE"
echo after; exit 7`, "job", runs, pidFile, release}})

	first := launch(t, agentConfig(t, s, dir), testLogger(t))
	pid := readPID(t, pidFile)
	eventually(t, 10*time.Second, "the first output and event to reach the server", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return string(s.logs[k]) == "before\n" && len(s.events[k]) == 1
	})
	first.stop(t)
	time.Sleep(300 * time.Millisecond)
	if !processAlive(pid) {
		t.Fatal("the job died with the agent")
	}

	second := launch(t, agentConfig(t, s, dir), testLogger(t))
	eventually(t, 10*time.Second, "the new agent to report the job running", func() bool {
		hb, _ := s.lastBeat()
		st, ok := s.lastReported(k)
		return hb.Instance == second.instance && ok && st.State == api.StateRunning && st.PID == pid
	})
	if hb, _ := s.lastBeat(); hb.PreviousInstance != first.instance {
		t.Errorf("previous instance %q, want the first agent's %q", hb.PreviousInstance, first.instance)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var st api.TaskStatus
	eventually(t, 20*time.Second, "the end report", func() bool {
		var ok bool
		st, ok = s.finalOf(k)
		return ok
	})
	n := s.beatCount()
	eventually(t, 10*time.Second, "a few more heartbeats", func() bool { return s.beatCount() > n+5 })

	if st.State != api.StateFailed || st.Reason != api.ReasonExitCode || st.ExitCode == nil || *st.ExitCode != 7 || st.PID != pid {
		t.Errorf("final status %+v, want FAILED exit_code 7 of pid %d", st, pid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.endReports[k] != 1 {
		t.Errorf("end reported %d times, want once", s.endReports[k])
	}
	if got := readFile(t, runs); got != "run\n" {
		t.Errorf("the job ran %d times, want once", strings.Count(got, "run"))
	}
	if got := string(s.logs[k]); got != "before\nafter\n" || s.logSent[k] != len(got) {
		t.Errorf("server log = %q from %d bytes sent, want each line once, sent once", got, s.logSent[k])
	}
	if ev := s.events[k]; len(ev) != 2 {
		t.Errorf("events = %v, want steps 1 and 2 once each", ev)
	}
	for _, hb := range s.beats {
		for _, ts := range hb.Tasks {
			if ts.JobID == k.job && ts.Attempt != k.attempt {
				t.Errorf("heartbeat reported attempt %d of job %d", ts.Attempt, ts.JobID)
			}
		}
	}
}

// A job that ends while no agent runs is reported with its real exit code by the next
// agent, once; an agent started after the server acknowledged it does not report it again.
func TestAgentReportsEndThatHappenedWhileAway(t *testing.T) {
	s := newFakeServer(t)
	dir, release := t.TempDir(), filepath.Join(t.TempDir(), "release")
	k := taskKey{2, 1}
	s.setDesired(api.Task{JobID: 2, Attempt: 1, Command: []string{"sh", "-c",
		`echo start; while [ ! -e "$1" ]; do sleep 0.05; done; echo bye; exit 3`, "job", release}})
	first := launch(t, agentConfig(t, s, dir), testLogger(t))
	eventually(t, 10*time.Second, "the job to run", func() bool { return s.logOf(k) == "start\n" })
	first.stop(t)
	os.WriteFile(release, nil, 0o644)
	adir := attemptDir(dir, k.in(testCluster))
	eventually(t, 10*time.Second, "the supervisor to record the end", func() bool { return exists(filepath.Join(adir, fileStatus)) })

	second := launch(t, agentConfig(t, s, dir), testLogger(t))
	var st api.TaskStatus
	eventually(t, 10*time.Second, "the end report", func() bool {
		var ok bool
		st, ok = s.finalOf(k)
		return ok
	})
	if st.State != api.StateFailed || st.ExitCode == nil || *st.ExitCode != 3 || st.Reason != api.ReasonExitCode {
		t.Errorf("final status %+v, want FAILED with exit code 3", st)
	}
	eventually(t, 10*time.Second, "the whole log and the ack recorded", func() bool {
		return s.logOf(k) == "start\nbye\n" && exists(filepath.Join(adir, fileAcked))
	})
	second.stop(t)

	launch(t, agentConfig(t, s, dir), testLogger(t))
	n := s.beatCount()
	eventually(t, 10*time.Second, "a few heartbeats of a third agent", func() bool { return s.beatCount() > n+5 })
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.endReports[k] != 1 {
		t.Errorf("end reported %d times, want once", s.endReports[k])
	}
}

// A supervisor killed with SIGKILL leaves its job without anyone to record its end. The
// next agent kills whatever of the job still runs and reports the attempt lost, saying
// its outcome is unknown.
func TestAgentCleansUpAfterKilledSupervisor(t *testing.T) {
	for _, cgroup := range []bool{true, false} {
		t.Run(map[bool]string{true: trackCgroup, false: trackProcessGroup}[cgroup], func(t *testing.T) {
			if _, err := ownCgroup2(); cgroup && (err != nil || os.Geteuid() != 0) {
				t.Skipf("no cgroup v2 this test can use (%v, euid %d)", err, os.Geteuid())
			}
			s := newFakeServer(t)
			dir, pids := t.TempDir(), filepath.Join(t.TempDir(), "pids")
			k := taskKey{6, 1}
			s.setDesired(api.Task{JobID: 6, Attempt: 1, GraceSeconds: 30, Command: []string{"sh", "-c",
				`setsid sleep 600 & echo $! >> "$1"; sleep 600 & echo $! >> "$1"; echo $$ >> "$1"; wait`, "job", pids}})
			first := launch(t, agentConfig(t, s, dir), testLogger(t), func(a *Agent) { a.runner.noCgroup = !cgroup })
			eventually(t, 10*time.Second, "the job's three processes", func() bool {
				data, _ := os.ReadFile(pids)
				return strings.Count(string(data), "\n") == 3
			})
			first.stop(t)
			var procs []int
			for _, f := range strings.Fields(readFile(t, pids)) {
				pid, _ := strconv.Atoi(f)
				procs = append(procs, pid)
				t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
			}
			adir := attemptDir(dir, k.in(testCluster))
			sup, ok := readInt(filepath.Join(adir, fileSupervisorPID))
			if !ok {
				t.Fatal("no supervisor pid")
			}
			syscall.Kill(sup, syscall.SIGKILL)
			eventually(t, 5*time.Second, "the supervisor to die", func() bool { return !processAlive(sup) })
			for _, pid := range procs {
				if !processAlive(pid) {
					t.Fatalf("process %d died with its supervisor; the test needs it orphaned", pid)
				}
			}

			launch(t, agentConfig(t, s, dir), testLogger(t))
			var st api.TaskStatus
			eventually(t, 10*time.Second, "the end report", func() bool {
				var ok bool
				st, ok = s.finalOf(k)
				return ok
			})
			if st.State != api.StateFailed || st.Reason != api.ReasonNodeLost || !strings.Contains(st.Message, "supervisor died") || !strings.Contains(st.Message, "outcome is unknown") {
				t.Errorf("got %s reason %q (%s), want FAILED node_lost saying the supervisor died and the outcome is unknown", st.State, st.Reason, st.Message)
			}
			for _, pid := range procs {
				if processAlive(pid) {
					t.Errorf("process %d of the lost attempt still runs", pid)
				}
			}
		})
	}
}

// One data directory, one agent: a second one would take the first one's attempts for
// its own.
func TestSecondAgentOnDataDirFails(t *testing.T) {
	s := newFakeServer(t)
	cfg := agentConfig(t, s, t.TempDir())
	a, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(cfg, testLogger(t))
	want := "in use by another agent (pid " + strconv.Itoa(os.Getpid()) + "); give each agent its own --data-dir"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("second New: %v, want an error saying %q", err, want)
	}
	a.Close()
	b, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatalf("New after the first agent released the directory: %v", err)
	}
	b.Close()
}

// Attempts of another cluster are stopped once the node knows which cluster it serves,
// reported in Stopped until acknowledged, and never reported or shipped as the new
// cluster's: a server on a fresh data directory reuses job IDs. So is what an agent from
// before clusters left running.
func TestAgentStopsOtherClusters(t *testing.T) {
	const oldCluster = "aaaaaaaaaaaaaaaa"
	old := newFakeServer(t)
	old.clusterID = oldCluster
	dir := t.TempDir()
	k := taskKey{1, 1}
	old.setDesired(api.Task{JobID: 1, Attempt: 1, GraceSeconds: 30, Command: []string{"sh", "-c",
		`trap 'echo got-term; exit 0' TERM; echo old-cluster-output; while :; do sleep 0.05; done`}})
	first := launch(t, agentConfig(t, old, dir), testLogger(t))
	eventually(t, 10*time.Second, "the old cluster's job to run", func() bool {
		return strings.Contains(old.logOf(k), "old-cluster-output")
	})
	first.stop(t)

	// What an agent before clusters left: a process group in <data>/jobs/77/1.
	legacyDir := filepath.Join(dir, "jobs", "77", "1")
	os.MkdirAll(legacyDir, 0o755)
	legacy := exec.Command("sleep", "600")
	legacy.Env = append(os.Environ(), "ROTA_JOB_ID=77", "ROTA_ATTEMPT=1", "ROTA_EVENTS_FILE="+filepath.Join(legacyDir, "events.jsonl"))
	legacy.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := legacy.Start(); err != nil {
		t.Fatal(err)
	}
	// One Wait only: the agent kills it, and the clean-up waits for that Wait to return.
	waited := make(chan struct{})
	go func() { legacy.Wait(); close(waited) }()
	t.Cleanup(func() { legacy.Process.Kill(); <-waited })
	os.WriteFile(filepath.Join(legacyDir, legacyPIDFile), []byte(strconv.Itoa(legacy.Process.Pid)), 0o644)

	s := newFakeServer(t) // a fresh server: another cluster, the same job IDs
	second := launch(t, agentConfig(t, s, dir), testLogger(t))
	eventually(t, 20*time.Second, "both stops to be reported and acknowledged", func() bool {
		_, n1 := s.stopOf(oldCluster, k)
		_, n2 := s.stopOf("", taskKey{77, 1})
		adir := attemptDir(dir, k.in(oldCluster))
		return n1 > 0 && n2 > 0 && exists(filepath.Join(adir, fileStoppedAcked)) && exists(filepath.Join(legacyDir, fileStoppedAcked))
	})
	eventually(t, 10*time.Second, "the node to be in step", func() bool {
		hb, _ := s.lastBeat()
		return hb.Synced && len(hb.Stopped) == 0
	})
	n := s.beatCount()
	eventually(t, 10*time.Second, "a few more heartbeats", func() bool { return s.beatCount() > n+3 })

	stop, n1 := s.stopOf(oldCluster, k)
	if stop.Reason != api.StoppedOtherCluster || n1 != 1 {
		t.Errorf("stop of the old cluster's attempt: %+v reported %d times, want other_cluster once", stop, n1)
	}
	if stop, n2 := s.stopOf("", taskKey{77, 1}); stop.Reason != api.StoppedOtherCluster || n2 != 1 {
		t.Errorf("stop of the legacy attempt: %+v reported %d times, want other_cluster once", stop, n2)
	}
	if processAlive(legacy.Process.Pid) {
		t.Error("the legacy attempt's process still runs")
	}
	adir := attemptDir(dir, k.in(oldCluster))
	if rec, ok := readStatus(adir); !ok || rec.Reason != api.StoppedOtherCluster || !strings.Contains(readFile(t, filepath.Join(adir, fileOutput)), "got-term") {
		t.Errorf("old attempt ended %+v (recorded %v); want stopped with other_cluster after its stop signal", rec, ok)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, hb := range s.beats {
		for _, ts := range hb.Tasks {
			if hb.ClusterID == testCluster {
				t.Errorf("heartbeat of cluster %s reported task %d/%d", hb.ClusterID, ts.JobID, ts.Attempt)
			}
		}
	}
	if got := string(s.logs[k]); got != "" {
		t.Errorf("the new cluster got the old cluster's log: %q", got)
	}
	if hb := s.beats[len(s.beats)-1]; hb.Instance != second.instance || hb.ClusterID != testCluster {
		t.Errorf("last heartbeat from instance %q of cluster %q", hb.Instance, hb.ClusterID)
	}
}

// An attempt the server does not list (it gave the node up as lost meanwhile) is stopped
// and reported not_listed; the node says it is not in step until the attempt is gone.
func TestAgentStopsUnlistedAttempt(t *testing.T) {
	s := newFakeServer(t)
	dir := t.TempDir()
	k := taskKey{8, 1}
	s.setDesired(api.Task{JobID: 8, Attempt: 1, GraceSeconds: 30, Command: []string{"sh", "-c",
		`trap 'sleep 0.5; echo got-term; exit 0' TERM; echo ready; while :; do sleep 0.05; done`}})
	first := launch(t, agentConfig(t, s, dir), testLogger(t))
	eventually(t, 10*time.Second, "the job to run", func() bool { return strings.Contains(s.logOf(k), "ready") })
	first.stop(t)
	s.setDesired()

	second := launch(t, agentConfig(t, s, dir), testLogger(t))
	var st api.TaskStatus
	eventually(t, 20*time.Second, "the end report", func() bool {
		var ok bool
		st, ok = s.finalOf(k)
		return ok
	})
	eventually(t, 10*time.Second, "the node to say it is in step", func() bool {
		hb, _ := s.lastBeat()
		return hb.Synced
	})
	if st.State != api.StateCancelled {
		t.Errorf("got %s (%s), want CANCELLED", st.State, st.Message)
	}
	if stop, n := s.stopOf(testCluster, k); stop.Reason != api.StoppedNotListed || n != 1 {
		t.Errorf("Stopped report %+v sent %d times, want not_listed once", stop, n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sawLive := false
	for _, hb := range s.beats {
		if hb.Instance != second.instance {
			continue
		}
		live := false
		for _, ts := range hb.Tasks {
			live = live || ts.JobID == k.job && ts.State == api.StateRunning
		}
		sawLive = sawLive || live
		if live && hb.Synced {
			t.Error("a heartbeat said the node is in step while the unlisted attempt ran")
		}
	}
	if !sawLive {
		t.Error("the new agent never reported the attempt running")
	}
}

// A refusal of the first heartbeat (another agent serves this node name) ends Run with the
// server's words; a later refusal only delays heartbeats, and jobs keep running.
func TestAgentRefused(t *testing.T) {
	t.Run("first heartbeat", func(t *testing.T) {
		s := newFakeServer(t)
		s.refuse, s.refuseMsg = 409, "node node-1 is served by another agent (instance 1234, pid 99 at 10.1.2.3)"
		a, err := New(agentConfig(t, s, t.TempDir()), testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = a.Run(ctx)
		if err == nil || !strings.Contains(err.Error(), s.refuseMsg) {
			t.Errorf("Run = %v, want an error with the server's message", err)
		}
	})
	t.Run("later", func(t *testing.T) {
		s := newFakeServer(t)
		logs := &lockedBuffer{}
		k := taskKey{1, 1}
		release := filepath.Join(t.TempDir(), "release")
		s.setDesired(api.Task{JobID: 1, Attempt: 1, Command: []string{"sh", "-c",
			`while [ ! -e "$1" ]; do sleep 0.05; done; exit 0`, "job", release}})
		a := launch(t, agentConfig(t, s, t.TempDir()), testLoggerTo(t, logs))
		eventually(t, 10*time.Second, "the job to run", func() bool {
			st, ok := s.lastReported(k)
			return ok && st.State == api.StateRunning && st.PID != 0
		})
		s.mu.Lock()
		s.refuse, s.refuseMsg = 401, "certificate superseded"
		s.mu.Unlock()
		eventually(t, 10*time.Second, "refused heartbeats", func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.refused >= 3
		})
		if _, ended := a.attemptOf(t, k).snapshot(); ended {
			t.Fatal("the job ended while the agent was refused")
		}
		if n := strings.Count(logs.String(), "certificate superseded"); n != 1 {
			t.Errorf("the refusal was logged %d times, want once (rate-limited):\n%s", n, logs)
		}
		s.mu.Lock()
		s.refuse = 0
		s.mu.Unlock()
		os.WriteFile(release, nil, 0o644)
		eventually(t, 20*time.Second, "the end report", func() bool {
			st, ok := s.finalOf(k)
			return ok && st.State == api.StateSucceeded
		})
	})
}
