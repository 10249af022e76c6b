package agent

import (
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

// startProcess runs argv as a process of the test's own, not of any attempt; exited
// closes once it has been reaped, with its wait status in *ws.
func startProcess(t *testing.T, argv ...string) (pid int, ws *syscall.WaitStatus, exited chan struct{}) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ws, exited = new(syscall.WaitStatus), make(chan struct{})
	go func() {
		_ = cmd.Wait()
		*ws = cmd.ProcessState.Sys().(syscall.WaitStatus)
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	return cmd.Process.Pid, ws, exited
}

func TestLeftoverReportedAndKilled(t *testing.T) {
	s := newFakeServer(t)
	logs := &lockedBuffer{}
	cfg := agentConfig(t, s, t.TempDir())
	cfg.FakeGPUs, cfg.TelemetryInterval, cfg.KillLeftoversAfter = "4", 20*time.Millisecond, 300*time.Millisecond
	// A live job on GPU 0 holds memory too: it is not a leftover, and is never killed.
	pidFile := filepath.Join(t.TempDir(), "job-gpu-pid")
	s.setDesired(gpuJob(1, []int{0}, 500, 10, pidFile))
	a := launch(t, cfg, testLoggerTo(t, logs))
	jobChild := readPID(t, pidFile)

	pid, ws, exited := startProcess(t, "sleep", "60")
	registerGPUProcess(t, fakeDir(t, a.Agent), pid, 3, 700, 0)
	var tel *api.Telemetry
	eventually(t, 10*time.Second, "the leftover in a reading", func() bool {
		tel = findTelemetry(s, func(tel *api.Telemetry) bool {
			_, ok := processOf(tel, pid)
			return ok
		})
		return tel != nil
	})
	p, _ := processOf(tel, pid)
	if p.GPU != 3 || p.MemoryMB != 700 || p.JobID != 0 || p.Attempt != 0 || p.Since == nil || p.Since.After(tel.Time) || !strings.HasPrefix(p.Command, "sleep") {
		t.Errorf("leftover %+v, want on GPU 3 with 700 MB, of no job, since a time before the reading %v, command sleep", p, tel.Time)
	}

	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the leftover was not killed")
	}
	if !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("leftover ended with %v, want SIGTERM", *ws)
	}
	// The log line follows the kill.
	eventually(t, 10*time.Second, "the kill to be logged", func() bool {
		out := logs.String()
		return strings.Contains(out, "killed a leftover GPU process") && strings.Contains(out, "pid="+strconv.Itoa(pid))
	})
	// The job's own GPU process was in every reading, under its job, and lives on.
	if !processAlive(jobChild) {
		t.Error("the live job's GPU process was killed")
	}
	eventually(t, 10*time.Second, "a reading without the leftover", func() bool {
		hb, _ := s.lastBeat()
		if hb.Telemetry == nil {
			return false
		}
		_, left := processOf(hb.Telemetry, pid)
		job, ok := processOf(hb.Telemetry, jobChild)
		return !left && ok && job.JobID == 1
	})
	if st, ok := s.lastReported(taskKey{1, 1}); !ok || st.State != api.StateRunning {
		t.Errorf("the job is %+v, want it running", st)
	}
}

// track is driven by a clock of the test's own, so grace periods need no waiting.
func TestLeftoverKillSequence(t *testing.T) {
	logs := &lockedBuffer{}
	logger := testLoggerTo(t, logs)
	// Ignores SIGTERM, so only SIGKILL ends it.
	ready := filepath.Join(t.TempDir(), "ready")
	stubborn, ws, exited := startProcess(t, "sh", "-c", `trap '' TERM; echo $$ > "$1"; while :; do sleep 0.05; done`, "sh", ready)
	readPID(t, ready)
	spared, _, _ := startProcess(t, "sleep", "60")
	procs := func() []api.GPUProcess {
		return []api.GPUProcess{{GPU: 2, PID: stubborn, MemoryMB: 10}, {GPU: 3, PID: stubborn, MemoryMB: 10}, {GPU: 1, PID: spared, MemoryMB: 10},
			{GPU: 0, PID: 1 << 30, MemoryMB: 10}} // not a process of this machine
	}
	protected := map[int]bool{spared: true}
	l := &leftovers{killAfter: time.Minute, termWait: 10 * time.Second, seen: map[int]*leftover{}}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	ps := procs()
	l.track(t0, ps, protected, logger)
	for _, p := range ps {
		if p.Since == nil || !p.Since.Equal(t0) {
			t.Errorf("process %+v: want since %v", p, t0)
		}
	}
	l.track(t0.Add(time.Minute-time.Nanosecond), procs(), protected, logger)
	if !l.seen[stubborn].termAt.IsZero() {
		t.Fatal("signalled before its grace")
	}
	ps = procs()
	l.track(t0.Add(time.Minute), ps, protected, logger)
	if got := l.seen[stubborn].termAt; !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("SIGTERM sent at %v, want %v", got, t0.Add(time.Minute))
	}
	if !ps[0].Since.Equal(t0) {
		t.Errorf("since moved to %v, want %v", ps[0].Since, t0)
	}
	l.track(t0.Add(time.Minute+10*time.Second-time.Nanosecond), procs(), protected, logger)
	if l.seen[stubborn].killed || !processAlive(stubborn) {
		t.Fatal("SIGKILL before the wait after SIGTERM")
	}
	l.track(t0.Add(time.Minute+10*time.Second), procs(), protected, logger)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the leftover survived SIGKILL")
	}
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("leftover ended with %v, want SIGKILL", *ws)
	}
	if !processAlive(spared) || !l.seen[spared].termAt.IsZero() {
		t.Error("a protected process was signalled")
	}
	out := logs.String()
	if c := strings.Count(out, "killed a leftover GPU process"); c != 2 {
		t.Errorf("%d kills logged, want SIGTERM and SIGKILL:\n%s", c, out)
	}
	if c := strings.Count(out, "not killing a leftover GPU process"); c != 1 {
		t.Errorf("the PID of no process here was reported %d times, want once:\n%s", c, out)
	}

	// Gone from the reading: forgotten.
	l.track(t0.Add(2*time.Minute), nil, protected, logger)
	if len(l.seen) != 0 {
		t.Errorf("still tracking %d processes after they left the reading", len(l.seen))
	}
}

func TestLeftoverNeverKilledWithoutGrace(t *testing.T) {
	pid, _, _ := startProcess(t, "sleep", "60")
	l := &leftovers{termWait: 10 * time.Second, seen: map[int]*leftover{}}
	t0 := time.Now()
	for _, d := range []time.Duration{0, time.Hour, 24 * time.Hour} {
		ps := []api.GPUProcess{{GPU: 0, PID: pid}}
		l.track(t0.Add(d), ps, nil, testLogger(t))
		if ps[0].Since == nil || !ps[0].Since.Equal(t0) {
			t.Errorf("since %v, want %v", ps[0].Since, t0)
		}
	}
	if !processAlive(pid) || !l.seen[pid].termAt.IsZero() {
		t.Error("a leftover was signalled with kill-leftovers-after 0")
	}
}

// A process of a live attempt is never a leftover, and a recycled PID starts afresh.
func TestLeftoverTracking(t *testing.T) {
	pid, _, _ := startProcess(t, "sleep", "60")
	l := &leftovers{killAfter: time.Minute, termWait: time.Second, seen: map[int]*leftover{}}
	t0 := time.Now()
	ps := []api.GPUProcess{{GPU: 0, PID: pid, JobID: 4, Attempt: 1}}
	l.track(t0, ps, nil, testLogger(t))
	if ps[0].Since != nil || len(l.seen) != 0 {
		t.Errorf("a job's process was taken for a leftover: %+v", ps[0])
	}
	ps = []api.GPUProcess{{GPU: 0, PID: pid}}
	l.track(t0, ps, nil, testLogger(t))
	l.seen[pid].start++ // as if the PID had been recycled since
	l.track(t0.Add(2*time.Minute), ps, nil, testLogger(t))
	if got := l.seen[pid]; !got.since.Equal(t0.Add(2*time.Minute)) || !got.termAt.IsZero() {
		t.Errorf("recycled PID: since %v term %v, want seen afresh and not signalled", got.since, got.termAt)
	}
}

func TestHoldsNVIDIADevice(t *testing.T) {
	if holdsNVIDIADevice(os.Getpid()) {
		t.Skip("this test process holds an NVIDIA device")
	}
	l := &leftovers{killAfter: time.Second, termWait: time.Second, seen: map[int]*leftover{}, checkDevice: true}
	pid, _, _ := startProcess(t, "sleep", "60")
	logs := &lockedBuffer{}
	t0 := time.Now()
	l.track(t0, []api.GPUProcess{{PID: pid}}, nil, testLoggerTo(t, logs))
	l.track(t0.Add(time.Minute), []api.GPUProcess{{PID: pid}}, nil, testLoggerTo(t, logs))
	if !processAlive(pid) || !l.seen[pid].termAt.IsZero() || !strings.Contains(logs.String(), "holds no NVIDIA device") {
		t.Errorf("a process holding no GPU was killed on a real-GPU node's say-so:\n%s", logs)
	}
}
