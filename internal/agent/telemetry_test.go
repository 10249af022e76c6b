package agent

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// fakeDir is the state directory of the agent's fake GPUs.
func fakeDir(t *testing.T, a *Agent) string {
	t.Helper()
	f, ok := a.devices.(*FakeDevices)
	if !ok || f.Dir == "" {
		t.Fatalf("the agent's devices are %T, want fake ones with a directory", a.devices)
	}
	return f.Dir
}

// registerGPUProcess tells the fake GPUs that pid uses one of them, as NVML would list it.
func registerGPUProcess(t *testing.T, dir string, pid, gpu int, memoryMB int64, utilPct float64) {
	t.Helper()
	data, err := json.Marshal(map[string]any{"gpu": gpu, "memory_mb": memoryMB, "utilization_pct": utilPct})
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "procs", "."+strconv.Itoa(pid))
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "procs", strconv.Itoa(pid))); err != nil {
		t.Fatal(err)
	}
}

// gpuJob is a task on gpus whose child registers itself on the first of them (as a CUDA
// process shows in NVML: not the job's leader) and writes its PID to pidFile.
func gpuJob(job int64, gpus []int, memoryMB int64, utilPct float64, pidFile string) api.Task {
	reg := `{"gpu":` + strconv.Itoa(gpus[0]) + `,"memory_mb":` + strconv.FormatInt(memoryMB, 10) +
		`,"utilization_pct":` + strconv.FormatFloat(utilPct, 'f', -1, 64) + `}`
	child := `printf '%s' "$2" > "$ROTA_FAKE_GPU_DIR/procs/.$$" && mv "$ROTA_FAKE_GPU_DIR/procs/.$$" "$ROTA_FAKE_GPU_DIR/procs/$$"; ` +
		`echo $$ > "$1"; exec sleep 60`
	return api.Task{JobID: job, Attempt: 1, GPUIndices: gpus, GraceSeconds: 1, Command: []string{"sh", "-c",
		`trap 'kill $! 2>/dev/null; exit 0' TERM; sh -c "$1" child "$2" "$3" & wait`, "job", child, pidFile, reg}}
}

// findTelemetry returns the first heartbeat reading for which ok holds.
func findTelemetry(s *fakeServer, ok func(*api.Telemetry) bool) *api.Telemetry {
	for _, hb := range s.heartbeats() {
		if hb.Telemetry != nil && ok(hb.Telemetry) {
			return hb.Telemetry
		}
	}
	return nil
}

func processOf(tel *api.Telemetry, pid int) (api.GPUProcess, bool) {
	i := slices.IndexFunc(tel.Processes, func(p api.GPUProcess) bool { return p.PID == pid })
	if i < 0 {
		return api.GPUProcess{}, false
	}
	return tel.Processes[i], true
}

func usageOf(tel *api.Telemetry, job int64) (api.TaskUsage, bool) {
	i := slices.IndexFunc(tel.Tasks, func(u api.TaskUsage) bool { return u.JobID == job })
	if i < 0 {
		return api.TaskUsage{}, false
	}
	return tel.Tasks[i], true
}

func TestTelemetryReachesHeartbeat(t *testing.T) {
	s := newFakeServer(t)
	cfg := agentConfig(t, s, t.TempDir())
	// Readings come slower than heartbeats, so some heartbeats have none to carry.
	cfg.TelemetryInterval = 150 * time.Millisecond
	pidFile := filepath.Join(t.TempDir(), "gpu-pid")
	s.setDesired(gpuJob(1, []int{0}, 300, 80, pidFile))
	launch(t, cfg, testLogger(t))
	child := readPID(t, pidFile)

	var tel *api.Telemetry
	eventually(t, 10*time.Second, "a reading with the job's GPU process and use", func() bool {
		tel = findTelemetry(s, func(tel *api.Telemetry) bool {
			p, ok := processOf(tel, child)
			_, used := usageOf(tel, 1)
			return ok && p.JobID == 1 && used
		})
		return tel != nil
	})
	p, _ := processOf(tel, child)
	if p.GPU != 0 || p.MemoryMB != 300 || p.Attempt != 1 || p.Since != nil || p.Command == "" {
		t.Errorf("GPU process %+v, want job 1 attempt 1 on GPU 0 with 300 MB, its command, no leftover time", p)
	}
	u, _ := usageOf(tel, 1)
	if u.Attempt != 1 || u.GPUUtilPct != 80 || u.GPUMemoryMB != 300 {
		t.Errorf("task usage %+v, want 80%% of its one GPU and 300 MB on it", u)
	}
	if u.MemoryMB <= 0 || u.CPUPct < 0 || u.CPUPct > float64(100*runtime.NumCPU()) {
		t.Errorf("task usage %+v, want its resident memory and a CPU share between 0 and all CPUs", u)
	}
	if len(tel.GPUs) != 2 || tel.GPUs[0].UtilizationPct != 80 || tel.GPUs[0].MemoryUsedMB != 300 || tel.GPUs[1].UtilizationPct != 0 {
		t.Errorf("GPU readings %+v, want GPU 0 busy with the job and GPU 1 idle", tel.GPUs)
	}

	// Each reading goes with one heartbeat; those between readings carry none.
	n := s.beatCount()
	eventually(t, 10*time.Second, "more heartbeats", func() bool { return s.beatCount() > n+10 })
	seen := map[time.Time]bool{}
	without := 0
	for _, hb := range s.heartbeats() {
		if hb.Telemetry == nil {
			without++
			continue
		}
		if seen[hb.Telemetry.Time] {
			t.Errorf("the reading of %v was sent twice", hb.Telemetry.Time)
		}
		seen[hb.Telemetry.Time] = true
	}
	if without == 0 || len(seen) < 2 {
		t.Errorf("%d heartbeats without a reading and %d readings, want some of each", without, len(seen))
	}
}

// failingDevices reads nothing but errors, to see that they are logged once.
type failingDevices struct{ err error }

func (f failingDevices) Discover() (Discovery, error)         { return Discovery{Source: SourceNone}, nil }
func (f failingDevices) Sample() (Sample, error)              { return Sample{}, f.err }
func (f failingDevices) HealthEvents() ([]HealthEvent, error) { return nil, f.err }

func TestTelemetryErrorsLoggedOnce(t *testing.T) {
	logs := &lockedBuffer{}
	a := &Agent{logger: testLoggerTo(t, logs), devices: failingDevices{errors.New("GPU is lost")}, mon: newMonitor(0, false),
		attempts: map[attemptKey]*attempt{}}
	for range 5 {
		a.tick(time.Now())
	}
	a.devices = failingDevices{errors.New("driver/library version mismatch")}
	for range 5 {
		a.tick(time.Now())
	}
	out := logs.String()
	if c := strings.Count(out, "cannot read the GPUs"); c != 2 {
		t.Errorf("sampling errors logged %d times, want once per distinct error (2):\n%s", c, out)
	}
	if c := strings.Count(out, "cannot read GPU faults"); c != 2 {
		t.Errorf("fault errors logged %d times, want 2", c)
	}
	if a.telemetry != nil {
		t.Errorf("a failed reading was kept: %+v", a.telemetry)
	}
}

// manyDevices lists more processes than a reading may carry.
type manyDevices struct{ procs int }

func (m manyDevices) Discover() (Discovery, error)         { return Discovery{Source: SourceFake}, nil }
func (m manyDevices) HealthEvents() ([]HealthEvent, error) { return nil, nil }
func (m manyDevices) Sample() (Sample, error) {
	s := Sample{GPUs: []api.GPUSample{{Index: 0}}}
	for i := range m.procs {
		// PIDs no process has, from the top down, so the bound keeps the lowest.
		s.Processes = append(s.Processes, api.GPUProcess{GPU: 0, PID: 1<<30 - i, MemoryMB: 1})
	}
	return s, nil
}

func TestTelemetryIsBounded(t *testing.T) {
	logs := &lockedBuffer{}
	a := &Agent{logger: testLoggerTo(t, logs), devices: manyDevices{procs: maxTelemetryProcesses + 500}, mon: newMonitor(0, false),
		attempts: map[attemptKey]*attempt{}}
	a.tick(time.Now())
	a.tick(time.Now())
	tel := a.telemetry
	if tel == nil || len(tel.Processes) != maxTelemetryProcesses {
		t.Fatalf("reading has %d processes, want the first %d", len(tel.Processes), maxTelemetryProcesses)
	}
	if tel.Processes[0].PID != 1<<30-(maxTelemetryProcesses+499) || tel.Time.IsZero() {
		t.Errorf("first process %+v at %v, want the lowest PID and a time", tel.Processes[0], tel.Time)
	}
	if c := strings.Count(logs.String(), "GPU reading too large"); c != 1 {
		t.Errorf("the cut was logged %d times, want once", c)
	}
}

func TestCPUPct(t *testing.T) {
	a := &Agent{mon: newMonitor(0, false)}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lt := &liveTask{key: taskKey{1, 1}.in(testCluster), status: api.TaskStatus{StartTime: &start}}
	steps := []struct {
		at      time.Duration
		seconds float64
		want    float64
	}{
		{10 * time.Second, 5, 50},   // first reading: over the task's life
		{20 * time.Second, 25, 200}, // two CPUs busy since
		{30 * time.Second, 20, 0},   // a counter that went back says nothing
		{40 * time.Second, 21, 10},
		{40 * time.Second, 22, 0}, // no time passed
	}
	for _, st := range steps {
		if got := a.cpuPct(lt, start.Add(st.at), st.seconds); got != st.want {
			t.Errorf("at %v with %v s: %v%%, want %v%%", st.at, st.seconds, got, st.want)
		}
	}
}
