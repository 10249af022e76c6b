package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// An agent that cannot start an attempt's supervisor ends the attempt node_error, says so
// in every heartbeat, and takes work again once a probe starts the supervisor command.
func TestAgentThatCannotStartSupervisorsTakesNoNewWork(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "bin", "rota")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	relink := func() {
		if err := os.Symlink(testSupervisor(t)[0], link); err != nil {
			t.Fatal(err)
		}
	}
	relink()
	s := newFakeServer(t)
	s.dataDirProblems = true
	cfg := agentConfig(t, s, filepath.Join(dir, "data"))
	cfg.SupervisorCommand = []string{link, "supervise"}
	launch(t, cfg, testLogger(t), func(a *Agent) { a.dataDirWatch.every = 50 * time.Millisecond })

	first := api.Task{JobID: 1, Attempt: 1, Command: []string{"true"}}
	s.setDesired(first)
	eventually(t, 10*time.Second, "the first attempt's end", func() bool { _, ok := s.finalOf(taskKey{1, 1}); return ok })
	if st, _ := s.finalOf(taskKey{1, 1}); st.State != api.StateSucceeded {
		t.Fatalf("the first attempt ended %s %s %q; want SUCCEEDED", st.State, st.Reason, st.Message)
	}

	// The supervisor command is gone, as a binary removed from under its agent.
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	s.setDesired(first, api.Task{JobID: 2, Attempt: 1, Command: []string{"true"}})
	eventually(t, 10*time.Second, "the second attempt's end", func() bool { _, ok := s.finalOf(taskKey{2, 1}); return ok })
	st, _ := s.finalOf(taskKey{2, 1})
	if st.State != api.StateFailed || st.Reason != api.ReasonNodeError || !strings.Contains(st.Message, "cannot start the supervisor") ||
		!strings.Contains(st.Message, "no such file or directory") {
		t.Errorf("the attempt whose supervisor could not start ended %s %s %q; want FAILED node_error saying why", st.State, st.Reason, st.Message)
	}
	eventually(t, 10*time.Second, "a heartbeat saying supervisors cannot be started", func() bool {
		hb, _ := s.lastBeat()
		return strings.HasPrefix(hb.DataDirProblem, "it cannot start the supervisor \""+link+"\"")
	})
	// The problem holds while the probe fails: several probes later it is still said.
	time.Sleep(300 * time.Millisecond)
	if hb, _ := s.lastBeat(); hb.DataDirProblem == "" {
		t.Fatal("the problem was cleared though the supervisor command is still gone")
	}

	relink()
	eventually(t, 10*time.Second, "heartbeats that say no problem", func() bool {
		hb, _ := s.lastBeat()
		return hb.DataDirProblem == ""
	})
	s.setDesired(first, api.Task{JobID: 2, Attempt: 1, Command: []string{"true"}}, api.Task{JobID: 2, Attempt: 2, Command: []string{"true"}})
	eventually(t, 10*time.Second, "the requeued attempt's end", func() bool { _, ok := s.finalOf(taskKey{2, 2}); return ok })
	if st, _ := s.finalOf(taskKey{2, 2}); st.State != api.StateSucceeded {
		t.Errorf("the attempt after the supervisor came back ended %s %s %q; want SUCCEEDED", st.State, st.Reason, st.Message)
	}
}

func TestAgentRefusesASupervisorCommandThatIsNotThere(t *testing.T) {
	s := newFakeServer(t)
	cfg := agentConfig(t, s, t.TempDir())
	cfg.SupervisorCommand = []string{filepath.Join(t.TempDir(), "no-such-rota"), "supervise"}
	if _, err := New(cfg, testLogger(t)); err == nil || !strings.Contains(err.Error(), "supervisor command") || !strings.Contains(err.Error(), "no-such-rota") {
		t.Fatalf("New with a supervisor command that is not there: %v; want an error naming it", err)
	}
}

// By default supervisors are started from the agent's own executable as the kernel holds
// it, so that removing or replacing the file at its path does not stop attempts starting;
// what ps shows is still the path.
func TestDefaultSupervisorIsThisExecutable(t *testing.T) {
	cmd, path, err := supervisorCommand(nil)
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Executable()
	if path != selfExe || len(cmd) != 2 || cmd[0] != exe || cmd[1] != "supervise" {
		t.Errorf("default supervisor: %q from %q; want [%s supervise] from %s", cmd, path, exe, selfExe)
	}
}
