package agent

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

func TestTenantOverItsSliceIsStopped(t *testing.T) {
	s := newFakeServer(t)
	cfg := agentConfig(t, s, t.TempDir())
	cfg.TelemetryInterval = 20 * time.Millisecond
	cfg.GPUMemoryGrace = 200 * time.Millisecond
	dir := t.TempDir()
	// Two tenants of GPU 0 with 20 GB slices: one holds 30 GB, the other 10 GB.
	greedy := gpuJob(1, []int{0}, 30<<10, 50, filepath.Join(dir, "greedy.pid"))
	modest := gpuJob(2, []int{0}, 10<<10, 50, filepath.Join(dir, "modest.pid"))
	for _, tk := range []*api.Task{&greedy, &modest} {
		tk.GPUShare, tk.GPUMemoryLimitMB = 0.25, 20<<10
	}
	s.setDesired(greedy, modest)
	a := launch(t, cfg, testLogger(t))
	_ = a

	var st api.TaskStatus
	eventually(t, 20*time.Second, "the greedy tenant to be stopped", func() bool {
		var ok bool
		st, ok = s.finalOf(taskKey{1, 1})
		return ok
	})
	if st.State != api.StateFailed || st.Reason != api.ReasonGPUMemoryExceeded {
		t.Fatalf("greedy tenant ended %s (%s); want FAILED gpu_memory_exceeded", st.State, st.Reason)
	}
	eventually(t, 10*time.Second, "the log to say why", func() bool {
		l := s.logOf(taskKey{1, 1})
		return strings.Contains(l, "above its 20480 MiB slice; it is stopped if it still does") &&
			strings.Contains(l, "rota: stopping the job: it held 30720 MiB of GPU memory, above its 20480 MiB slice")
	})
	// The tenant within its slice runs on.
	n := s.beatCount()
	eventually(t, 10*time.Second, "later heartbeats", func() bool { return s.beatCount() > n+5 })
	if _, ended := s.finalOf(taskKey{2, 1}); ended {
		t.Fatal("the tenant within its slice was stopped")
	}
	if st, ok := s.lastReported(taskKey{2, 1}); !ok || st.State != api.StateRunning {
		t.Fatalf("modest tenant %+v", st)
	}
}

func TestTenantBackUnderItsSliceIsKept(t *testing.T) {
	// Over the slice for less than the grace, then under: nothing happens.
	a := &Agent{mon: newMonitor(0, false)}
	a.mon.memGrace = time.Minute
	att := &attempt{dir: t.TempDir(), logPath: filepath.Join(t.TempDir(), "log"), exited: make(chan struct{}), logger: testLogger(t)}
	lt := &liveTask{key: attemptKey{job: 1, attempt: 1}, att: att, current: true, gpuMemLimit: 1000,
		status: api.TaskStatus{State: api.StateRunning}}
	t0 := time.Now()
	a.enforceSlices(t0, []*liveTask{lt}, map[*liveTask]int64{lt: 1500})
	a.enforceSlices(t0.Add(30*time.Second), []*liveTask{lt}, map[*liveTask]int64{lt: 900})
	a.enforceSlices(t0.Add(70*time.Second), []*liveTask{lt}, map[*liveTask]int64{lt: 1500})
	if att.stopReason != "" {
		t.Fatalf("stopped (%s) though back under its slice before the grace ended", att.stopReason)
	}
	a.enforceSlices(t0.Add(131*time.Second), []*liveTask{lt}, map[*liveTask]int64{lt: 1500})
	if att.stopReason != api.ReasonGPUMemoryExceeded {
		t.Fatalf("stop reason %q after a full grace over the slice", att.stopReason)
	}
	// A whole-GPU task is never judged by a slice.
	whole := &liveTask{key: attemptKey{job: 2, attempt: 1}, att: &attempt{exited: make(chan struct{}), logger: testLogger(t)}, current: true,
		status: api.TaskStatus{State: api.StateRunning}}
	a.enforceSlices(t0, []*liveTask{whole}, map[*liveTask]int64{whole: 80 << 10})
	a.enforceSlices(t0.Add(time.Hour), []*liveTask{whole}, map[*liveTask]int64{whole: 80 << 10})
	if whole.att.stopReason != "" {
		t.Fatal("a whole-GPU task was stopped")
	}
}

func TestShareEnv(t *testing.T) {
	env := map[string]string{}
	shareEnv(api.Task{GPUShare: 0.25, GPUMemoryLimitMB: 20480}, false, env)
	if env[EnvGPUShare] != "0.25" || env[EnvGPUMemLimit] != "20480" || env[envMPSMemLimit] != "" || env[envMPSThreads] != "" {
		t.Fatalf("without MPS: %v", env)
	}
	env = map[string]string{}
	shareEnv(api.Task{GPUShare: 0.25, GPUMemoryLimitMB: 20480}, true, env)
	if env[envMPSMemLimit] != "0=20480M" || env[envMPSThreads] != "25" {
		t.Fatalf("with MPS: %v", env)
	}
	env = map[string]string{}
	shareEnv(api.Task{GPUMemoryLimitMB: 20480}, true, env)
	if _, ok := env[EnvGPUShare]; ok || env[envMPSThreads] != "" || env[envMPSMemLimit] != "0=20480M" {
		t.Fatalf("a memory slice: %v", env)
	}
	env = map[string]string{}
	shareEnv(api.Task{GPUIndices: []int{0}}, true, env)
	if len(env) != 0 {
		t.Fatalf("a whole GPU: %v", env)
	}
}

func TestMPSRunning(t *testing.T) {
	dir := t.TempDir()
	if mpsRunning(dir) {
		t.Fatal("MPS found in an empty directory")
	}
	if err := os.WriteFile(filepath.Join(dir, "control"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if mpsRunning(dir) {
		t.Fatal("a plain file taken for MPS's control pipe")
	}
	os.Remove(filepath.Join(dir, "control"))
	if err := syscall.Mkfifo(filepath.Join(dir, "control"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !mpsRunning(dir) {
		t.Fatal("MPS's control pipe not found")
	}
	t.Setenv(envMPSPipeDir, dir)
	if got := mpsPipeDir(""); got != dir {
		t.Fatalf("pipe dir %q; want %q from the environment", got, dir)
	}
	if got := mpsPipeDir("/etc/mps"); got != "/etc/mps" {
		t.Fatalf("pipe dir %q; want the configured one", got)
	}
}

func TestSharedTaskSeesItsShareAndMPSLimits(t *testing.T) {
	s := newFakeServer(t)
	cfg := agentConfig(t, s, t.TempDir())
	mps := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(mps, "control"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.MPSPipeDir = mps
	s.setDesired(api.Task{JobID: 1, Attempt: 1, GPUIndices: []int{0}, GPUShare: 0.5, GPUMemoryLimitMB: 40960,
		Command: []string{"sh", "-c", `echo "share=$ROTA_GPU_SHARE mem=$ROTA_GPU_MEM_LIMIT mps=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT threads=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"`}})
	launch(t, cfg, testLogger(t))
	eventually(t, 20*time.Second, "the task to end", func() bool { _, ok := s.finalOf(taskKey{1, 1}); return ok })
	eventually(t, 10*time.Second, "its output", func() bool {
		return strings.Contains(s.logOf(taskKey{1, 1}), "share=0.5 mem=40960 mps=0=40960M threads=50")
	})
}

// A node without GPUs reports "gpus": [], as the spec says, never null.
func TestCPUOnlyNodeReportsNoGPUsAsAList(t *testing.T) {
	s := newFakeServer(t)
	cfg := agentConfig(t, s, t.TempDir())
	cfg.FakeGPUs = "" // no NVML here either: a node without GPUs
	launch(t, cfg, testLogger(t))
	eventually(t, 10*time.Second, "a heartbeat", func() bool { return s.beatCount() > 0 })
	hb, _ := s.lastBeat()
	// Where NVML finds real GPUs the list has them; either way it is a list.
	if hb.Inventory.GPUs == nil || (hb.Inventory.DeviceSource == SourceNone && len(hb.Inventory.GPUs) != 0) {
		t.Fatalf("inventory gpus %#v from %s; want a list, empty without devices", hb.Inventory.GPUs, hb.Inventory.DeviceSource)
	}
}
