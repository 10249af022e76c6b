package agent

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

func TestCgroup1MountLine(t *testing.T) {
	tests := []struct {
		line, controller  string
		wantMount, wantRt string
		ok                bool
	}{
		{"34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory", "memory", "/sys/fs/cgroup/memory", "/", true},
		{"31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct", "cpuacct", "/sys/fs/cgroup/cpu,cpuacct", "/", true},
		{"31 30 0:28 /kubepods /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu", "cpu", "/sys/fs/cgroup/cpu", "/kubepods", true},
		// cpuset is not cpu; cgroup2 is not v1; a tmpfs is no cgroup.
		{"33 30 0:30 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset", "cpu", "", "", false},
		{"40 30 0:37 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw", "memory", "", "", false},
		{"30 22 0:27 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755", "memory", "", "", false},
		{"garbage", "memory", "", "", false},
	}
	for _, tt := range tests {
		m, r, ok := cgroup1MountLine(tt.line, tt.controller)
		if ok != tt.ok || m != tt.wantMount || r != tt.wantRt {
			t.Errorf("%q for %s: got %q %q %v, want %q %q %v", tt.line, tt.controller, m, r, ok, tt.wantMount, tt.wantRt, tt.ok)
		}
	}
}

func TestOwnCgroup1From(t *testing.T) {
	proc := "9:name=systemd:/\n4:memory:/process_api/abc\n2:cpu,cpuacct:/jobs\n0::/\n"
	tests := []struct {
		controller, mount, root, want, err string
	}{
		{"memory", "/sys/fs/cgroup/memory", "/", "/sys/fs/cgroup/memory/process_api/abc", ""},
		{"cpuacct", "/sys/fs/cgroup/cpu,cpuacct", "/", "/sys/fs/cgroup/cpu,cpuacct/jobs", ""},
		// A namespaced mount shows part of the hierarchy.
		{"memory", "/sys/fs/cgroup/memory", "/process_api", "/sys/fs/cgroup/memory/abc", ""},
		{"memory", "/sys/fs/cgroup/memory", "/other", "", "outside the mounted part"},
		{"devices", "/sys/fs/cgroup/devices", "/", "", "no devices entry"},
	}
	for _, tt := range tests {
		got, err := ownCgroup1From(proc, tt.controller, tt.mount, tt.root)
		if got != tt.want || (err == nil) != (tt.err == "") || err != nil && !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s under %s: got %q, %v; want %q, error %q", tt.controller, tt.root, got, err, tt.want, tt.err)
		}
	}
}

func TestLimitFiles(t *testing.T) {
	p := planLimits(64, 2)
	v2 := cgroup2LimitFiles(p)
	want2 := [][2]string{{"memory.max", "67108864"}, {"memory.swap.max", "0"}, {"memory.oom.group", "1"}, {"cpu.max", "200000 100000"}}
	if !slices.Equal(v2, want2) {
		t.Errorf("v2 files = %v, want %v", v2, want2)
	}
	v1 := cgroup1LimitFiles(p)
	if got, want := v1["memory"], [][2]string{{"memory.limit_in_bytes", "67108864"}, {"memory.memsw.limit_in_bytes", "67108864"}}; !slices.Equal(got, want) {
		t.Errorf("v1 memory = %v, want %v (memsw after the memory limit)", got, want)
	}
	if got, want := v1["cpu"], [][2]string{{"cpu.cfs_period_us", "100000"}, {"cpu.cfs_quota_us", "200000"}}; !slices.Equal(got, want) {
		t.Errorf("v1 cpu = %v, want %v", got, want)
	}
	// Zero (or nonsense) asks for no limit at all.
	for _, p := range []limitPlan{planLimits(0, 0), planLimits(-5, -1)} {
		if len(cgroup2LimitFiles(p)) != 0 || len(cgroup1LimitFiles(p)) != 0 {
			t.Errorf("plan %+v writes limits", p)
		}
	}
}

func TestWriteLimitFilesSkipsMissingOptional(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "memory.max"), nil, 0o644)
	files := [][2]string{{"memory.max", "1"}, {"memory.swap.max", "0"}}
	if err := writeLimitFiles(dir, files, "memory.swap.max"); err != nil {
		t.Fatal(err)
	}
	if exists(filepath.Join(dir, "memory.swap.max")) {
		t.Error("an optional file the cgroup lacks was created")
	}
	if got := readFile(t, filepath.Join(dir, "memory.max")); got != "1" {
		t.Errorf("memory.max = %q", got)
	}
	// A required one that is missing is an error naming it.
	if err := writeLimitFiles(filepath.Join(dir, "nope"), files[:1]); err == nil || !strings.Contains(err.Error(), "memory.max") {
		t.Errorf("err = %v, want one naming memory.max", err)
	}
}

func TestReadMemoryEnd(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) { os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644) }
	write("memory.max_usage_in_bytes", "33554432\n")
	write("memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
	write("memory.failcnt", "17\n")
	if m := readMemoryEnd(dir, true); !m.known || m.peakBytes != 32<<20 || m.oomKills != 2 || m.failcnt != 17 {
		t.Errorf("v1 = %+v", m)
	}
	write("memory.peak", "1048577\n")
	write("memory.events", "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n")
	if m := readMemoryEnd(dir, false); !m.known || m.peakBytes != 1048577 || m.oomKills != 1 || mb(m.peakBytes) != 2 {
		t.Errorf("v2 = %+v", m)
	}
	// An old kernel counts no OOM kills: unknown, not zero.
	if m := readMemoryEnd(t.TempDir(), true); m.known || m.oomKills != -1 {
		t.Errorf("empty = %+v", m)
	}
}

// fakeNvidia lays out /dev and /proc as a node with GPUs whose minors are not their
// indices.
func fakeNvidia(t *testing.T, minors map[string]int) (devDir, procDir string) {
	root := t.TempDir()
	devDir, procDir = filepath.Join(root, "dev"), filepath.Join(root, "proc")
	os.MkdirAll(devDir, 0o755)
	for _, name := range []string{"nvidiactl", "nvidia-uvm", "nvidia-modeset", "null"} {
		os.WriteFile(filepath.Join(devDir, name), nil, 0o644)
	}
	i := 0
	for uuid, minor := range minors {
		os.WriteFile(filepath.Join(devDir, "nvidia"+strconv.Itoa(minor)), nil, 0o644)
		info := filepath.Join(procDir, "driver", "nvidia", "gpus", "0000:0"+strconv.Itoa(i)+":00.0")
		os.MkdirAll(info, 0o755)
		os.WriteFile(filepath.Join(info, "information"), []byte("Model: \t\t NVIDIA H100\nGPU UUID: \t "+uuid+"\nBus Location: \t 0000:0"+strconv.Itoa(i)+":00.0\nDevice Minor: \t "+strconv.Itoa(minor)+"\n"), 0o644)
		i++
	}
	os.WriteFile(filepath.Join(procDir, "devices"), []byte("Character devices:\n  1 mem\n195 nvidia-frontend\n 508 nvidia-uvm\n\nBlock devices:\n  7 loop\n"), 0o644)
	return devDir, procDir
}

func TestFindGPUDevices(t *testing.T) {
	devDir, procDir := fakeNvidia(t, map[string]int{"GPU-a": 0, "GPU-b": 2, "GPU-c": 1, "GPU-d": 3})
	// GPU index 1 is GPU-b, whose minor is 2; index 3 has no UUID and is taken as minor 3.
	g := findGPUDevices(devDir, procDir, []int{1, 3}, []string{"GPU-b"})
	if !slices.Equal(g.present, []int{0, 1, 2, 3}) || !slices.Equal(g.job, []int{2, 3}) || g.uvmMajor != 508 {
		t.Errorf("got %+v", g)
	}
	// No /dev/nvidiaN: nothing to restrict.
	if g := findGPUDevices(t.TempDir(), procDir, []int{0}, nil); len(g.present) != 0 {
		t.Errorf("without device nodes: %+v", g)
	}
}

func TestDeviceRules(t *testing.T) {
	g := gpuDevices{present: []int{0, 1, 2, 3}, job: []int{2}, uvmMajor: 508}
	allow := deviceRules(g, true)
	wantAllow := [][2]string{{"devices.deny", "c 195:0 rwm"}, {"devices.deny", "c 195:1 rwm"}, {"devices.deny", "c 195:3 rwm"}}
	if !slices.Equal(allow, wantAllow) {
		t.Errorf("default-allow leaf: %v, want %v", allow, wantAllow)
	}
	deny := deviceRules(g, false)
	wantDeny := [][2]string{
		{"devices.deny", "c 195:* rwm"},
		{"devices.deny", "c 195:0 rwm"}, {"devices.deny", "c 195:1 rwm"}, {"devices.deny", "c 195:3 rwm"},
		{"devices.allow", "c 195:2 rwm"}, {"devices.allow", "c 195:255 rwm"}, {"devices.allow", "c 195:254 rwm"},
		{"devices.allow", "c 508:* rwm"},
	}
	if !slices.Equal(deny, wantDeny) {
		t.Errorf("default-deny leaf: %v, want %v", deny, wantDeny)
	}
	// A CPU job of a GPU node gets none of the GPUs.
	if got := deviceRules(gpuDevices{present: []int{0, 1}}, true); len(got) != 2 {
		t.Errorf("CPU job: %v, want both GPUs denied", got)
	}
}

func TestStopOutcome(t *testing.T) {
	tests := []struct {
		reason string
		state  api.JobState
		want   string
	}{
		{"", api.StateCancelled, api.ReasonCancelled},
		{api.ReasonCancelled, api.StateCancelled, api.ReasonCancelled},
		{api.ReasonIdle, api.StateCancelled, "idle_reclaimed"},
		{api.ReasonGPUError, api.StateFailed, "gpu_error"},
		{api.ReasonTimeout, api.StateTimeout, api.ReasonTimeout},
		{api.ReasonPreempted, api.StateFailed, api.ReasonPreempted},
	}
	for _, tt := range tests {
		if state, reason := stopOutcome(tt.reason); state != tt.state || reason != tt.want {
			t.Errorf("stopOutcome(%q) = %s %q, want %s %q", tt.reason, state, reason, tt.state, tt.want)
		}
	}
}

// needLimits skips a test where this node cannot limit memory through any cgroup.
func needLimits(t *testing.T) string {
	t.Helper()
	mode := limitsMode()
	if mode == limitsNone {
		t.Skipf("no cgroup memory controller this test can use (v2 at %v has none enabled, no writable v1 memory hierarchy; euid %d)", cgroup2Where(), os.Geteuid())
	}
	return mode
}

func cgroup2Where() string {
	p, err := attemptCgroup2Parent()
	if err != nil {
		return err.Error()
	}
	return p
}

// The kernel's OOM kill inside the attempt's memory cgroup ends it FAILED with reason oom,
// the limit and the peak in the message, even where the job's first process carries on
// and exits 0 (as Slurm's OUT_OF_MEMORY); the cgroups are gone afterwards.
func TestRunnerMemoryLimitOOM(t *testing.T) {
	mode := needLimits(t)
	r := newTestRunner(t)
	task := shTask(1, `echo start; head -c 300000000 /dev/zero | tail; echo survived`)
	task.MemoryMB = 32
	a := startTask(t, r, task)
	st := waitEnd(t, a)
	if st.State != api.StateFailed || st.Reason != api.ReasonOOM {
		t.Fatalf("got %s reason %q (%s), want FAILED oom", st.State, st.Reason, st.Message)
	}
	if !strings.Contains(st.Message, "killed by the kernel: out of memory (limit 32 MB, peak ") {
		t.Errorf("message %q does not name the limit and the peak", st.Message)
	}
	if st.PeakMemoryMB < 16 || st.PeakMemoryMB > 33 {
		t.Errorf("peak %d MB, want about the 32 MB limit", st.PeakMemoryMB)
	}
	rec := statusOf(t, a)
	if rec.PeakMemoryMB != st.PeakMemoryMB || !strings.Contains(rec.Limits, "memory limit of 32 MB enforced ("+mode+")") {
		t.Errorf("status.json peak %d, limits %q", rec.PeakMemoryMB, rec.Limits)
	}
	for _, leaf := range readCgroups1(a.dir) {
		if exists(leaf) {
			t.Errorf("cgroup %s left behind", leaf)
		}
	}
}

// A job is put into its limit cgroups before it runs (its very first process is in them,
// the supervisor is not), with the CPU quota and memory limit asked, and every job gets
// its peak memory recorded.
func TestRunnerLimitsApplied(t *testing.T) {
	if needLimits(t) != limitsCgroup1 {
		t.Skip("checks the cgroup v1 files; this node limits through cgroup v2")
	}
	r := newTestRunner(t)
	// The job reports its own cgroups from its first instruction on.
	task := shTask(1, `cat /proc/$$/cgroup > "$1"; x=$(head -c 10000000 /dev/zero | tr '\0' a); echo ready; sleep 600`, filepath.Join(t.TempDir(), "cg"))
	pidFile := task.Command[len(task.Command)-1]
	task.MemoryMB, task.CPUs = 100, 2
	a := startTask(t, r, task)
	waitLog(t, a, "ready")
	var job jobRecord
	eventually(t, 10*time.Second, "job.json", func() bool { ok, _ := readJSON(filepath.Join(a.dir, fileJob), &job); return ok })
	byCtrl := map[string]string{}
	for _, leaf := range job.Cgroups1 {
		switch {
		case exists(filepath.Join(leaf, "memory.limit_in_bytes")):
			byCtrl["memory"] = leaf
		case exists(filepath.Join(leaf, "cpu.cfs_quota_us")):
			byCtrl["cpu"] = leaf
		}
	}
	if got := strings.TrimSpace(readFile(t, filepath.Join(byCtrl["memory"], "memory.limit_in_bytes"))); got != strconv.Itoa(100<<20) {
		t.Errorf("memory.limit_in_bytes = %q", got)
	}
	if got := strings.TrimSpace(readFile(t, filepath.Join(byCtrl["cpu"], "cpu.cfs_quota_us"))); got != "200000" {
		t.Errorf("cpu.cfs_quota_us = %q", got)
	}
	seen := readFile(t, pidFile)
	for ctrl, leaf := range byCtrl {
		if !strings.Contains(seen, ":"+ctrl+":") || !strings.Contains(seen, filepath.Base(leaf)+"\n") {
			t.Errorf("the job's first process was not in its %s cgroup %s:\n%s", ctrl, leaf, seen)
		}
		procs, _ := cgroupProcs(leaf)
		sup, _ := readInt(filepath.Join(a.dir, fileSupervisorPID))
		if !slices.Contains(procs, job.PID) || slices.Contains(procs, sup) {
			t.Errorf("%s holds %v; want the job %d and not the supervisor %d", leaf, procs, job.PID, sup)
		}
	}
	a.stop(api.ReasonCancelled)
	st := waitEnd(t, a)
	if st.State != api.StateCancelled || st.PeakMemoryMB < 10 {
		t.Errorf("got %s with peak %d MB, want CANCELLED with a peak of 10 MB or more", st.State, st.PeakMemoryMB)
	}
	for _, leaf := range job.Cgroups1 {
		if exists(leaf) {
			t.Errorf("cgroup %s left behind", leaf)
		}
	}
}

// A supervisor killed outright leaves its cgroup v1 leaves; the agent that finds it dead
// kills what runs in them and removes them.
func TestRunnerOrphanRemovesCgroups1(t *testing.T) {
	needLimits(t)
	r := newTestRunner(t)
	task := shTask(1, `echo $$ > "$1"; sleep 600`, filepath.Join(t.TempDir(), "pid"))
	task.MemoryMB = 50
	a := startTask(t, r, task)
	job := readPID(t, task.Command[len(task.Command)-1])
	leaves := readCgroups1(a.dir)
	if len(leaves) == 0 {
		t.Skip("this node limits through cgroup v2: no v1 leaves")
	}
	sup, _ := readInt(filepath.Join(a.dir, fileSupervisorPID))
	syscall.Kill(sup, syscall.SIGKILL)
	st := waitEnd(t, a)
	if st.Reason != api.ReasonNodeLost {
		t.Errorf("got reason %q, want node_lost", st.Reason)
	}
	if processAlive(job) {
		t.Errorf("job %d survived its supervisor", job)
	}
	for _, leaf := range leaves {
		if exists(leaf) {
			t.Errorf("cgroup %s left behind", leaf)
		}
	}
}

// No memory limit asked means none set, and the note says nothing of memory.
func TestLimitsNote(t *testing.T) {
	tests := []struct {
		mem         int64
		cpus        int
		memBy, cpBy string
		spec        jobSpec
		want        string
	}{
		{0, 0, limitsCgroup1, "", jobSpec{}, ""},
		{64, 0, "", "", jobSpec{}, "no cgroup memory controller: memory limit of 64 MB not enforced"},
		{64, 2, limitsCgroup2, limitsCgroup2, jobSpec{}, "memory limit of 64 MB enforced (cgroup2); limit of 2 CPUs enforced (cgroup2)"},
		{64, 1, "", "", jobSpec{container: "c", runtime: containerRuntime{Name: "podman"}}, "memory limit of 64 MB enforced by podman; limit of 1 CPUs enforced by podman"},
	}
	for _, tt := range tests {
		if got := limitsNote(tt.mem, tt.cpus, tt.memBy, tt.cpBy, tt.spec, ""); got != tt.want {
			t.Errorf("limitsNote(%d, %d, %q, %q) = %q, want %q", tt.mem, tt.cpus, tt.memBy, tt.cpBy, got, tt.want)
		}
	}
}

// An idle reclaim ends CANCELLED idle_reclaimed, as the job was warned it would.
func TestRunnerIdleReclaim(t *testing.T) {
	r := newTestRunner(t)
	a := startTask(t, r, shTask(1, `echo ready; sleep 600`))
	waitLog(t, a, "ready")
	a.stop(api.ReasonIdle)
	if st := waitEnd(t, a); st.State != api.StateCancelled || st.Reason != "idle_reclaimed" {
		t.Errorf("got %s reason %q, want CANCELLED idle_reclaimed", st.State, st.Reason)
	}
}

// The node's job variables reach every task, but never override the server's.
func TestRunnerJobEnv(t *testing.T) {
	r := newTestRunner(t)
	r.jobEnv = map[string]string{"ROTA_FAKE_GPU_DIR": "/fake/gpus", "ROTA_TEST_SET_BY_SERVER": "node"}
	task := shTask(1, `echo "fake=$ROTA_FAKE_GPU_DIR server=$ROTA_TEST_SET_BY_SERVER order=$CUDA_DEVICE_ORDER"`)
	task.Env = map[string]string{"ROTA_TEST_SET_BY_SERVER": "server"}
	a := startTask(t, r, task)
	waitEnd(t, a)
	if got, want := readFile(t, a.logPath), "fake=/fake/gpus server=server order=PCI_BUS_ID\n"; got != want {
		t.Errorf("log = %q, want %q", got, want)
	}
	if len(task.Env) != 1 {
		t.Errorf("the task's own map was changed: %v", task.Env)
	}
}
