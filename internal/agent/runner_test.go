package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// startTask starts t in the test cluster.
func startTask(t *testing.T, r *runner, task api.Task) *attempt {
	t.Helper()
	return r.start(taskKey{task.JobID, task.Attempt}.in(testCluster), task)
}

func waitEnd(t *testing.T, a *attempt) api.TaskStatus {
	t.Helper()
	var st api.TaskStatus
	eventually(t, 20*time.Second, "task "+a.key.String()+" to end", func() bool {
		var ended bool
		st, ended = a.snapshot()
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

// waitLog waits until the attempt's output.log contains s.
func waitLog(t *testing.T, a *attempt, s string) {
	t.Helper()
	eventually(t, 10*time.Second, "log line "+s, func() bool {
		data, _ := os.ReadFile(a.logPath)
		return strings.Contains(string(data), s)
	})
}

func statusOf(t *testing.T, a *attempt) endRecord {
	t.Helper()
	rec, ok := readStatus(a.dir)
	if !ok {
		t.Fatalf("%s has no status.json", a.dir)
	}
	return rec
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
			a := startTask(t, r, tt.task)
			if st := waitEnd(t, a); st.State != api.StateSucceeded {
				t.Fatalf("state %s (%s), want SUCCEEDED", st.State, st.Message)
			}
			out := readFile(t, a.logPath)
			checkpoints := filepath.Join(r.dataDir, "clusters", testCluster, "checkpoints", strconv.FormatInt(a.key.job, 10))
			jobDir := filepath.Join(a.dir, dirJob)
			want := append(tt.want,
				"ROTA_CHECKPOINT_DIR="+checkpoints+"\n",
				"ROTA_EVENTS_FILE="+filepath.Join(jobDir, "events.jsonl"),
				"ROTA_NOTICE_FILE="+filepath.Join(jobDir, "notice.json"),
			)
			dir := tt.wantDir
			if dir == "" {
				dir = jobDir
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
			a := startTask(t, r, shTask(int64(i+1), tt.script))
			st := waitEnd(t, a)
			if st.State != tt.state || st.Reason != tt.reason || st.ExitCode == nil || *st.ExitCode != tt.code {
				t.Errorf("got %s reason %q exit %v, want %s reason %q exit %d", st.State, st.Reason, st.ExitCode, tt.state, tt.reason, tt.code)
			}
			if st.StartTime == nil || st.EndTime == nil || st.PID == 0 {
				t.Errorf("status lacks start, end or PID: %+v", st)
			}
			// The end is on disk for an agent that was not there to see it.
			if rec := statusOf(t, a); rec.State != tt.state || rec.ExitCode == nil || *rec.ExitCode != tt.code || rec.RecordedBy != "supervisor" {
				t.Errorf("status.json = %+v", rec)
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
		{"unknown account", api.Task{JobID: 4, Attempt: 1, Command: []string{"true"}, RunAs: "rota-no-such-user"}, `run as "rota-no-such-user": no such account`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := startTask(t, r, tt.task)
			st := waitEnd(t, a)
			if st.State != api.StateFailed || st.Reason != api.ReasonStartError {
				t.Fatalf("got %s reason %q, want FAILED start_error", st.State, st.Reason)
			}
			if !strings.Contains(st.Message, tt.want) {
				t.Errorf("message %q does not name %q", st.Message, tt.want)
			}
			if log := readFile(t, a.logPath); !strings.Contains(log, "rota: ") || !strings.Contains(log, tt.want) {
				t.Errorf("log %q does not say why the task did not start", log)
			}
		})
	}
}

func TestRunnerSupervisorMissing(t *testing.T) {
	r := newTestRunner(t)
	r.supervisor, r.supervisorPath = []string{"/no/such/rota", "supervise"}, "/no/such/rota"
	st := waitEnd(t, startTask(t, r, shTask(1, "true")))
	if st.State != api.StateFailed || st.Reason != api.ReasonStartError || !strings.Contains(st.Message, "supervisor") {
		t.Errorf("got %s reason %q (%s), want FAILED start_error naming the supervisor", st.State, st.Reason, st.Message)
	}

	// The agent's runner takes it for the node's fault: the job is not to blame.
	var fault error
	r.onSupervisorFault = func(err error) (string, string) { fault = err; return api.ReasonNodeError, "the node's" }
	st = waitEnd(t, startTask(t, r, shTask(2, "true")))
	if st.State != api.StateFailed || st.Reason != api.ReasonNodeError || fault == nil || !strings.Contains(fault.Error(), `cannot start the supervisor "/no/such/rota"`) {
		t.Errorf("with the agent's handler: got %s reason %q (%s), fault %v; want FAILED node_error and the fault handed over", st.State, st.Reason, st.Message, fault)
	}
}

func TestRunnerLogHasStdoutAndStderr(t *testing.T) {
	r := newTestRunner(t)
	a := startTask(t, r, shTask(1, "echo to-stdout; echo to-stderr >&2; echo again"))
	waitEnd(t, a)
	if got, want := readFile(t, a.logPath), "to-stdout\nto-stderr\nagain\n"; got != want {
		t.Errorf("log = %q, want %q", got, want)
	}
}

// The node keeps at most the attempt's limit of its output: the first bytes, then one
// line that says the rest was dropped. The job runs on to its own end, never blocked on
// output nobody writes, and its last words after the limit are not in the log. Below the
// limit every byte is kept, in the order written, stdout and stderr alike.
func TestRunnerLogIsCapped(t *testing.T) {
	r := newTestRunner(t)
	r.maxLogSize = 1 << 20
	// 3 MiB of 'y' lines, on stdout and stderr, then a line after the limit and exit 7.
	a := startTask(t, r, shTask(1, `yes | head -c 2097152; yes | head -c 1048576 >&2; echo after-the-limit; exit 7`))
	st := waitEnd(t, a)
	if st.State != api.StateFailed || !strings.Contains(st.Message, "exited with code 7") {
		t.Errorf("got %s %q, want the job's own end, exit code 7", st.State, st.Message)
	}
	got := readFile(t, a.logPath)
	notice := "\nrota: this attempt's output passed 1 MiB, the most this node keeps of one attempt's log (rota agent --max-log-size); the rest was dropped, and the job runs on\n"
	head, ok := strings.CutSuffix(got, notice)
	if len(got) != 1<<20 || !ok || len(head) != 1<<20-len(notice) || strings.Trim(head, "y\n") != "" {
		t.Fatalf("log of %d bytes ends %q; want 1 MiB in all: the output's first bytes, then %q", len(got), got[max(0, len(got)-200):], notice)
	}

	r.maxLogSize = 0 // no limit
	b := startTask(t, r, shTask(2, `yes | head -c 3145728; echo after`))
	if st := waitEnd(t, b); st.State != api.StateSucceeded {
		t.Fatalf("job 2: %s %q", st.State, st.Message)
	}
	if got := readFile(t, b.logPath); len(got) != 3<<20+len("after\n") || !strings.HasSuffix(got, "y\nafter\n") {
		t.Errorf("without a limit the log holds %d bytes ending %q, want all %d", len(got), got[max(0, len(got)-20):], 3<<20+6)
	}
}

// A process outside the attempt that holds its output open does not hold the attempt's
// end: the log ends a moment after the job's processes are gone, with all the job wrote.
// The holder here is the test itself, which opens the job's stdout through /proc as any
// process of the same user could.
func TestRunnerEndsThoughTheOutputStaysOpen(t *testing.T) {
	r := newTestRunner(t)
	pidFile, goOn := filepath.Join(t.TempDir(), "job.pid"), filepath.Join(t.TempDir(), "go-on")
	// The job waits until the test holds its stdout.
	a := startTask(t, r, shTask(1, `echo $$ > "$1"; echo before; while [ ! -e "$2" ]; do sleep 0.05; done; echo end`, pidFile, goOn))
	var held *os.File
	eventually(t, 10*time.Second, "the job's stdout", func() bool {
		pid, err := strconv.Atoi(strings.TrimSpace(readFileOr(pidFile)))
		if err != nil {
			return false
		}
		held, err = os.OpenFile(fmt.Sprintf("/proc/%d/fd/1", pid), os.O_WRONLY, 0)
		return err == nil
	})
	defer held.Close()
	if _, err := held.WriteString("from-outside\n"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(goOn, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	st := waitEnd(t, a)
	if st.State != api.StateSucceeded {
		t.Errorf("got %s %q, want SUCCEEDED", st.State, st.Message)
	}
	if got := readFile(t, a.logPath); !strings.Contains(got, "before\n") || !strings.HasSuffix(got, "end\n") || !strings.Contains(got, "from-outside\n") {
		t.Errorf("log %q, want the job's lines and the one written from outside", got)
	}
	if _, err := held.WriteString("too-late\n"); err == nil {
		t.Error("the pipe was still read after the attempt ended")
	}
}

func readFileOr(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}

// An attempt whose job fills the disk of the node's data dir (here with its
// checkpoints) still has its own end recorded, in the space set aside when it began:
// not taken for an attempt whose supervisor died, which the server would run again.
func TestRunnerRecordsTheEndOnAFullDisk(t *testing.T) {
	dir := mountTmpfs(t, "size=4m")
	r := newTestRunner(t)
	r.dataDir = dir
	a := startTask(t, r, shTask(1, `echo filling; dd if=/dev/zero of="$ROTA_CHECKPOINT_DIR/fill" bs=64k 2>/dev/null; echo full; exit 3`))
	st := waitEnd(t, a)
	fill, err := os.Stat(filepath.Join(localCheckpointDir(dir, a.key), "fill"))
	if err != nil || fill.Size() < 3<<20 {
		t.Fatalf("the job filled %v of the 4 MiB disk (%v): the test did not fill it", fill, err)
	}
	if st.State != api.StateFailed || st.Reason != api.ReasonExitCode || !strings.Contains(st.Message, "exited with code 3") {
		t.Errorf("got %s %s %q, want the job's own end: FAILED, exit code 3", st.State, st.Reason, st.Message)
	}
	if rec := statusOf(t, a); rec.RecordedBy != "supervisor" {
		t.Errorf("the end was recorded by the %s, want the supervisor", rec.RecordedBy)
	}
	if exists(filepath.Join(a.dir, fileStatusReserve)) {
		t.Error("the space set aside is still there after the end was written into it")
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
			a := startTask(t, r, task)
			waitLog(t, a, "ready")
			a.stop(tt.reason)
			st := waitEnd(t, a)
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

// A stop asked before the supervisor could take signals is not lost: the supervisor finds
// stop.json when it comes up and never starts the job.
func TestRunnerStopRightAfterStart(t *testing.T) {
	r := newTestRunner(t)
	marker := filepath.Join(t.TempDir(), "ran")
	a := startTask(t, r, shTask(1, `touch "$1"; sleep 1000`, marker))
	a.stop(api.ReasonCancelled)
	st := waitEnd(t, a)
	if st.State != api.StateCancelled {
		t.Errorf("got %s (%s), want CANCELLED", st.State, st.Message)
	}
}

func TestRunnerStopKillsAfterGrace(t *testing.T) {
	r := newTestRunner(t)
	task := shTask(1, `trap '' TERM; echo ready; while :; do sleep 0.05; done`)
	task.GraceSeconds = 1
	task.Signal = "SIGTERM"
	a := startTask(t, r, task)
	waitLog(t, a, "ready")
	a.stop(api.ReasonCancelled)
	st := waitEnd(t, a)
	if st.State != api.StateCancelled || st.ExitCode == nil || *st.ExitCode != 128+int(syscall.SIGKILL) {
		t.Errorf("got %s exit %v, want CANCELLED by SIGKILL", st.State, st.ExitCode)
	}
}

// The leader gone means the attempt is over: nothing it started survives it, however it
// left its process group, and that holds with a cgroup and without one.
func TestRunnerLeavesNoProcessBehind(t *testing.T) {
	tests := []struct {
		name   string
		script string
		stop   bool
		state  api.JobState
		// message is what status.json must say of how the leader ended.
		message string
	}{
		{"stopped", `sleep 600 & echo $! > "$1"; sleep 600`, true, api.StateCancelled, "stopped (cancelled); killed by signal 15"},
		{"leader exits, child in its group", `sleep 600 & echo $! > "$1"; exit 0`, false, api.StateSucceeded, "exited with code 0; 1 process(es) it left running were killed"},
		{"leader exits, child in its own session", `setsid sleep 600 & echo $! > "$1"; sleep 0.2; exit 4`, false, api.StateFailed, "exited with code 4; 1 process(es) it left running were killed"},
		{"leader exits, grandchild double-forked away", `(setsid sh -c 'sleep 600 & echo $! > "$1"' job "$1" &); sleep 0.3; exit 0`, false, api.StateSucceeded, "it left running were killed"},
	}
	for _, cgroup := range []bool{true, false} {
		tracking := map[bool]string{true: trackCgroup, false: trackProcessGroup}[cgroup]
		t.Run(tracking, func(t *testing.T) {
			if _, err := ownCgroup2(); cgroup && (err != nil || os.Geteuid() != 0) {
				t.Skipf("no cgroup v2 this test can use (%v, euid %d)", err, os.Geteuid())
			}
			r := newTestRunner(t)
			r.noCgroup = !cgroup
			for i, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					pidFile := filepath.Join(t.TempDir(), "child.pid")
					task := shTask(int64(i+1), tt.script, pidFile)
					task.GraceSeconds = 5
					a := startTask(t, r, task)
					child := readPID(t, pidFile)
					t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
					if tt.stop {
						a.stop(api.ReasonCancelled)
					}
					st := waitEnd(t, a)
					// The end is recorded only once everything is gone.
					if processAlive(child) {
						t.Errorf("process %d still runs after the end was recorded", child)
					}
					if st.State != tt.state || !strings.Contains(st.Message, tt.message) {
						t.Errorf("got %s %q, want %s saying %q", st.State, st.Message, tt.state, tt.message)
					}
					if rec := statusOf(t, a); rec.Tracking != tracking {
						t.Errorf("tracked by %q, want %q", rec.Tracking, tracking)
					}
				})
			}
		})
	}
}

func TestRunnerTimeLimit(t *testing.T) {
	r := newTestRunner(t)
	task := shTask(1, "sleep 1000")
	task.TimeLimitEnd = time.Now().Add(300 * time.Millisecond)
	task.GraceSeconds = 5
	a := startTask(t, r, task)
	st := waitEnd(t, a)
	if st.State != api.StateTimeout || st.Reason != api.ReasonTimeout {
		t.Errorf("got %s reason %q, want TIMEOUT timeout", st.State, st.Reason)
	}
	var n notice
	if err := json.Unmarshal([]byte(readFile(t, noticePath(a.dir))), &n); err != nil || n.Reason != api.ReasonTimeout {
		t.Errorf("notice = %+v, %v; want reason timeout", n, err)
	}
}

// SIGTERM to a supervisor (the node shutting down) stops its job the way any stop does.
func TestSupervisorTermIsNodeShutdown(t *testing.T) {
	r := newTestRunner(t)
	task := shTask(1, `trap 'echo got-term; exit 0' TERM; echo ready; while :; do sleep 0.05; done`)
	task.GraceSeconds = 10
	a := startTask(t, r, task)
	waitLog(t, a, "ready")
	pid, ok := readInt(filepath.Join(a.dir, fileSupervisorPID))
	if !ok {
		t.Fatal("no supervisor pid file")
	}
	syscall.Kill(pid, syscall.SIGHUP) // ignored
	syscall.Kill(pid, syscall.SIGTERM)
	st := waitEnd(t, a)
	if st.State != api.StateFailed || st.Reason != reasonNodeShutdown || !strings.Contains(readFile(t, a.logPath), "got-term") {
		t.Errorf("got %s reason %q, want FAILED node_shutdown after the job's own SIGTERM", st.State, st.Reason)
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
	a := startTask(t, r, shTask(1, script))
	waitEnd(t, a)
	got := a.events.peek()
	if len(got) != 2 || got[0]["progress"] == nil || got[1]["checkpoint"] == nil {
		t.Fatalf("events = %v, want progress then checkpoint", got)
	}
	if again := a.events.peek(); len(again) != 2 {
		t.Fatalf("undelivered events were lost: %v", again)
	}
	a.events.drop(1)
	// A restarted agent reads on from what was delivered: the checkpoint, not the progress.
	again := newEventsReader(a.events.path, a.events.offsetPath, testLogger(t))
	if rest := again.peek(); len(rest) != 1 || rest[0]["checkpoint"] == nil {
		t.Fatalf("after a restart the events are %v, want the undelivered checkpoint only", rest)
	}
	a.events.drop(1)
	if rest := a.events.peek(); len(rest) != 0 {
		t.Errorf("delivered events came back: %v", rest)
	}

	// The unfinished line is taken once the job completes it.
	f, err := os.OpenFile(a.events.path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("true}\n")
	for range maxEventsPerBeat + 20 {
		f.WriteString(`{"progress": {"step": 3}}` + "\n")
	}
	f.Close()
	first := a.events.peek()
	if len(first) != maxEventsPerBeat || first[0]["partial"] != true {
		t.Fatalf("got %d events starting %v, want %d starting with the completed line", len(first), first[0], maxEventsPerBeat)
	}
	a.events.drop(len(first))
	if rest := a.events.peek(); len(rest) != 21 {
		t.Errorf("next heartbeat got %d events, want 21", len(rest))
	}
}

func TestEventsLineTooLong(t *testing.T) {
	path := filepath.Join(t.TempDir(), "events.jsonl")
	long := `{"x": "` + strings.Repeat("a", 2*maxEventLine) + `"}`
	os.WriteFile(path, []byte(long+"\n"+`{"ok": 1}`+"\n"), 0o644)
	e := newEventsReader(path, "", testLogger(t))
	got := e.peek()
	if len(got) != 1 || got[0]["ok"] != float64(1) {
		t.Errorf("events = %v, want only the short line", got)
	}
}

// A job may replace its events file with a link to a file it cannot read, or with a pipe
// that would block the agent: the agent reads neither.
func TestEventsFileMustBeRegular(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	os.WriteFile(secret, []byte(`{"secret": 1}`+"\n"), 0o600)
	link := filepath.Join(dir, "link.jsonl")
	os.Symlink(secret, link)
	hard := filepath.Join(dir, "hard.jsonl")
	if err := os.Link(secret, hard); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.jsonl")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{link, hard, fifo} {
		done := make(chan []map[string]any)
		go func() { done <- newEventsReader(path, "", testLogger(t)).peek() }()
		select {
		case got := <-done:
			if len(got) != 0 {
				t.Errorf("%s: read %v", filepath.Base(path), got)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: reading blocked", filepath.Base(path))
		}
	}
}
