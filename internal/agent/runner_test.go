package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

func newTestRunner(t *testing.T) *runner {
	return &runner{
		dataDir:  t.TempDir(),
		baseEnv:  append(os.Environ(), "ROTA_TEST_AGENT_VAR=from-agent"),
		logger:   testLogger(t),
		onChange: func() {},
	}
}

// startTask starts t and makes sure its process group dies with the test.
func startTask(t *testing.T, r *runner, task api.Task) *proc {
	t.Helper()
	p := r.start(task)
	t.Cleanup(func() {
		if st, ended := p.snapshot(); !ended && st.PID > 0 {
			killGroup(st.PID)
		}
	})
	return p
}

func waitEnd(t *testing.T, p *proc) api.TaskStatus {
	t.Helper()
	var st api.TaskStatus
	eventually(t, 20*time.Second, "task "+p.key.String()+" to end", func() bool {
		var ended bool
		st, ended = p.snapshot()
		return ended
	})
	return st
}

func shTask(job int64, script string, args ...string) api.Task {
	return api.Task{JobID: job, Attempt: 1, Command: append([]string{"sh", "-c", script, "job"}, args...)}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// waitLog waits until the task's output.log contains s.
func waitLog(t *testing.T, p *proc, s string) {
	t.Helper()
	eventually(t, 10*time.Second, "log line "+s, func() bool {
		data, _ := os.ReadFile(p.logPath)
		return strings.Contains(string(data), s)
	})
}

func TestRunnerEnvironment(t *testing.T) {
	r := newTestRunner(t)
	script := `echo "GPUS=${CUDA_VISIBLE_DEVICES-unset}"; env | grep -E '^(ROTA_|AGENT_)' ; echo "PWD=$(pwd)"`
	workDir := t.TempDir()
	tests := []struct {
		name    string
		task    api.Task
		want    []string
		wantDir string
	}{{
		name: "gpu job",
		task: api.Task{
			JobID: 7, Attempt: 2, Command: []string{"sh", "-c", script}, GPUIndices: []int{1, 3},
			Env: map[string]string{
				api.EnvQueue: "train", api.EnvJobID: "7", api.EnvAttempt: "2",
				// Node-local values the agent must overrule.
				api.EnvCUDAVisibleDevices: "0,1,2,3", api.EnvCheckpointDir: "/elsewhere",
			},
		},
		want: []string{"GPUS=1,3", "ROTA_QUEUE=train", "ROTA_JOB_ID=7", "ROTA_ATTEMPT=2", "ROTA_TEST_AGENT_VAR=from-agent"},
	}, {
		name:    "cpu job in its own workdir",
		task:    api.Task{JobID: 8, Attempt: 1, Command: []string{"sh", "-c", script}, WorkDir: workDir},
		want:    []string{"GPUS=\n", "ROTA_JOB_ID=8", "ROTA_ATTEMPT=1"},
		wantDir: workDir,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startTask(t, r, tt.task)
			if st := waitEnd(t, p); st.State != api.StateSucceeded {
				t.Fatalf("state %s (%s), want SUCCEEDED", st.State, st.Message)
			}
			out := readFile(t, p.logPath)
			attemptDir := r.attemptDir(p.key)
			checkpoints := filepath.Join(r.dataDir, "checkpoints", strconv.FormatInt(p.key.job, 10))
			want := append(tt.want,
				"ROTA_CHECKPOINT_DIR="+checkpoints+"\n",
				"ROTA_EVENTS_FILE="+filepath.Join(attemptDir, "events.jsonl"),
				"ROTA_NOTICE_FILE="+filepath.Join(attemptDir, "notice.json"),
			)
			dir := tt.wantDir
			if dir == "" {
				dir = attemptDir
			}
			want = append(want, "PWD="+dir+"\n")
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("job output lacks %q:\n%s", w, out)
				}
			}
			if fi, err := os.Stat(checkpoints); err != nil || !fi.IsDir() {
				t.Errorf("checkpoint directory %s: %v", checkpoints, err)
			}
		})
	}
}

func TestRunnerExitCodes(t *testing.T) {
	r := newTestRunner(t)
	tests := []struct {
		script string
		state  api.JobState
		reason string
		code   int
	}{
		{"exit 0", api.StateSucceeded, "", 0},
		{"exit 3", api.StateFailed, api.ReasonExitCode, 3},
		{"kill -KILL $$", api.StateFailed, api.ReasonExitCode, 128 + 9},
		{"kill -SEGV $$", api.StateFailed, api.ReasonExitCode, 128 + 11},
	}
	for i, tt := range tests {
		t.Run(tt.script, func(t *testing.T) {
			st := waitEnd(t, startTask(t, r, shTask(int64(i+1), tt.script)))
			if st.State != tt.state || st.Reason != tt.reason || st.ExitCode == nil || *st.ExitCode != tt.code {
				t.Errorf("got %s reason %q exit %v, want %s reason %q exit %d", st.State, st.Reason, st.ExitCode, tt.state, tt.reason, tt.code)
			}
			if st.StartTime == nil || st.EndTime == nil || st.PID == 0 {
				t.Errorf("status lacks start, end or PID: %+v", st)
			}
		})
	}
}

func TestRunnerStartError(t *testing.T) {
	r := newTestRunner(t)
	tests := []struct {
		name string
		task api.Task
		want string
	}{
		{"missing command", api.Task{JobID: 1, Attempt: 1, Command: []string{"rota-no-such-command", "x"}}, "rota-no-such-command"},
		{"missing workdir", api.Task{JobID: 2, Attempt: 1, Command: []string{"true"}, WorkDir: "/no/such/dir"}, "/no/such/dir"},
		{"empty command", api.Task{JobID: 3, Attempt: 1}, "empty command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startTask(t, r, tt.task)
			st := waitEnd(t, p)
			if st.State != api.StateFailed || st.Reason != api.ReasonStartError {
				t.Fatalf("got %s reason %q, want FAILED start_error", st.State, st.Reason)
			}
			if !strings.Contains(st.Message, tt.want) {
				t.Errorf("message %q does not name %q", st.Message, tt.want)
			}
			if log := readFile(t, p.logPath); !strings.Contains(log, tt.want) {
				t.Errorf("log %q does not say why the task did not start", log)
			}
		})
	}
}

func TestRunnerLogHasStdoutAndStderr(t *testing.T) {
	r := newTestRunner(t)
	p := startTask(t, r, shTask(1, "echo to-stdout; echo to-stderr >&2; echo again"))
	waitEnd(t, p)
	if got, want := readFile(t, p.logPath), "to-stdout\nto-stderr\nagain\n"; got != want {
		t.Errorf("log = %q, want %q", got, want)
	}
}

func TestRunnerStopWithGrace(t *testing.T) {
	// The job saves the notice it sees on SIGTERM, then exits on its own within the grace.
	script := `trap 'cat "$ROTA_NOTICE_FILE" > "$1"; exit 0' TERM; echo ready; while :; do sleep 0.05; done`
	tests := []struct {
		reason string
		state  api.JobState
	}{
		{api.ReasonCancelled, api.StateCancelled},
		{api.ReasonPreempted, api.StateFailed},
	}
	r := newTestRunner(t)
	for i, tt := range tests {
		t.Run(tt.reason, func(t *testing.T) {
			seen := filepath.Join(t.TempDir(), "notice-seen")
			task := shTask(int64(i+1), script, seen)
			task.GraceSeconds = 30
			p := startTask(t, r, task)
			waitLog(t, p, "ready")
			p.stop(tt.reason)
			st := waitEnd(t, p)
			if st.State != tt.state || st.Reason != tt.reason {
				t.Errorf("got %s reason %q, want %s reason %q", st.State, st.Reason, tt.state, tt.reason)
			}
			if st.ExitCode == nil || *st.ExitCode != 0 {
				t.Errorf("exit code %v, want 0: the job exited on its own", st.ExitCode)
			}
			var n notice
			if err := json.Unmarshal([]byte(readFile(t, seen)), &n); err != nil {
				t.Fatalf("notice the job saw: %v", err)
			}
			if n.Reason != tt.reason || n.Deadline.Before(time.Now().Add(10*time.Second)) {
				t.Errorf("notice = %+v, want reason %q and a deadline about 30s out", n, tt.reason)
			}
		})
	}
}

func TestRunnerStopKillsAfterGrace(t *testing.T) {
	r := newTestRunner(t)
	task := shTask(1, `trap '' TERM; echo ready; while :; do sleep 0.05; done`)
	task.GraceSeconds = 1
	task.Signal = "SIGTERM"
	p := startTask(t, r, task)
	waitLog(t, p, "ready")
	p.stop(api.ReasonCancelled)
	st := waitEnd(t, p)
	if st.State != api.StateCancelled || st.ExitCode == nil || *st.ExitCode != 128+int(syscall.SIGKILL) {
		t.Errorf("got %s exit %v, want CANCELLED by SIGKILL", st.State, st.ExitCode)
	}
}

func TestRunnerLeavesNoProcessBehind(t *testing.T) {
	tests := []struct {
		name   string
		script string
		stop   bool
		state  api.JobState
	}{
		{"stopped", `sleep 1000 & echo $! > "$1"; sleep 1000`, true, api.StateCancelled},
		{"leader exits", `sleep 1000 & echo $! > "$1"; exit 0`, false, api.StateSucceeded},
	}
	r := newTestRunner(t)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "grandchild.pid")
			task := shTask(int64(i+1), tt.script, pidFile)
			task.GraceSeconds = 5
			p := startTask(t, r, task)
			grandchild := readPID(t, pidFile)
			t.Cleanup(func() { syscall.Kill(grandchild, syscall.SIGKILL) })
			if tt.stop {
				p.stop(api.ReasonCancelled)
			}
			if st := waitEnd(t, p); st.State != tt.state {
				t.Errorf("state %s, want %s", st.State, tt.state)
			}
			eventually(t, 5*time.Second, "the grandchild to die", func() bool { return !processAlive(grandchild) })
		})
	}
}

func TestRunnerTimeLimit(t *testing.T) {
	r := newTestRunner(t)
	task := shTask(1, "sleep 1000")
	task.TimeLimitEnd = time.Now().Add(300 * time.Millisecond)
	task.GraceSeconds = 5
	p := startTask(t, r, task)
	st := waitEnd(t, p)
	if st.State != api.StateTimeout || st.Reason != api.ReasonTimeout {
		t.Errorf("got %s reason %q, want TIMEOUT timeout", st.State, st.Reason)
	}
	var n notice
	if err := json.Unmarshal([]byte(readFile(t, p.noticePath)), &n); err != nil || n.Reason != api.ReasonTimeout {
		t.Errorf("notice = %+v, %v; want reason timeout", n, err)
	}
}

func TestRunnerNeverStartsAnAttemptTwice(t *testing.T) {
	r := newTestRunner(t)
	marker := filepath.Join(t.TempDir(), "runs")
	task := shTask(1, `echo run >> "$1"`, marker)
	if st := waitEnd(t, startTask(t, r, task)); st.State != api.StateSucceeded {
		t.Fatalf("first start: %s %s", st.State, st.Message)
	}
	// A new agent process on the same data directory must not run it again.
	again := &runner{dataDir: r.dataDir, logger: r.logger, onChange: func() {}}
	st := waitEnd(t, startTask(t, again, task))
	if st.State != api.StateFailed || st.Reason != api.ReasonNodeLost {
		t.Errorf("second start: %s reason %q, want FAILED node_lost", st.State, st.Reason)
	}
	if got := readFile(t, marker); got != "run\n" {
		t.Errorf("the job ran %d times", strings.Count(got, "run"))
	}
}

func TestRunnerEvents(t *testing.T) {
	r := newTestRunner(t)
	script := `
echo '{"progress": {"step": 1, "total": 10}}' >> "$ROTA_EVENTS_FILE"
echo 'not json' >> "$ROTA_EVENTS_FILE"
echo '[1, 2]' >> "$ROTA_EVENTS_FILE"
echo '{"checkpoint": {"step": 2, "path": "/ckpt/2"}}' >> "$ROTA_EVENTS_FILE"
printf '{"partial": ' >> "$ROTA_EVENTS_FILE"`
	p := startTask(t, r, shTask(1, script))
	waitEnd(t, p)
	got := p.events.peek()
	if len(got) != 2 || got[0]["progress"] == nil || got[1]["checkpoint"] == nil {
		t.Fatalf("events = %v, want progress then checkpoint", got)
	}
	if again := p.events.peek(); len(again) != 2 {
		t.Fatalf("undelivered events were lost: %v", again)
	}
	p.events.drop(2)
	if rest := p.events.peek(); len(rest) != 0 {
		t.Errorf("delivered events came back: %v", rest)
	}

	// The unfinished line is taken once the job completes it.
	f, err := os.OpenFile(p.events.path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("true}\n")
	for range maxEventsPerBeat + 20 {
		f.WriteString(`{"progress": {"step": 3}}` + "\n")
	}
	f.Close()
	first := p.events.peek()
	if len(first) != maxEventsPerBeat || first[0]["partial"] != true {
		t.Fatalf("got %d events starting %v, want %d starting with the completed line", len(first), first[0], maxEventsPerBeat)
	}
	p.events.drop(len(first))
	if rest := p.events.peek(); len(rest) != 21 {
		t.Errorf("next heartbeat got %d events, want 21", len(rest))
	}
}

func TestEventsLineTooLong(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	long := `{"x": "` + strings.Repeat("a", 2*maxEventLine) + `"}`
	os.WriteFile(path, []byte(long+"\n"+`{"ok": 1}`+"\n"), 0o644)
	e := &eventsReader{path: path, logger: testLogger(t)}
	got := e.peek()
	if len(got) != 1 || got[0]["ok"] != float64(1) {
		t.Errorf("events = %v, want only the short line", got)
	}
}
