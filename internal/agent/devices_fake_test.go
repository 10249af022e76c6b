package agent

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// fakeGPUClock is a clock tests move by hand, so scheduled faults and curves need no sleep.
type fakeGPUClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeGPUClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeGPUClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// withFakeClock puts f on a hand-moved clock that starts where f was created.
func withFakeClock(f *FakeDevices) *fakeGPUClock {
	c := &fakeGPUClock{t: time.Date(2025, 1, 6, 9, 0, 0, 0, time.UTC)}
	f.now = c.now
	f.start = c.t
	return c
}

func mustParseFake(t *testing.T, yaml string) *FakeDevices {
	t.Helper()
	f, err := parseFakeGPUs([]byte(yaml), "node-a")
	if err != nil {
		t.Fatalf("parse %q: %v", yaml, err)
	}
	return f
}

func discover(t *testing.T, d Devices) Discovery {
	t.Helper()
	disc, err := d.Discover()
	if err != nil {
		t.Fatal(err)
	}
	return disc
}

func sample(t *testing.T, d Devices) Sample {
	t.Helper()
	s, err := d.Sample()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func healthEvents(t *testing.T, d Devices) []HealthEvent {
	t.Helper()
	ev, err := d.HealthEvents()
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func peersOf(d Discovery) map[int][]int {
	peers := map[int][]int{}
	for _, g := range d.GPUs {
		peers[g.Index] = g.NVLinkPeers
	}
	return peers
}

func TestLoadFakeGPUsFiles(t *testing.T) {
	hgx, err := LoadFakeGPUs("testdata/fake-hgx.yaml", "gpu-01")
	if err != nil {
		t.Fatal(err)
	}
	d := discover(t, hgx)
	if len(d.GPUs) != 8 || d.DriverVersion != "560.35.03" || d.CUDAVersion != "12.6" || d.Source != SourceFake {
		t.Fatalf("hgx: %d GPUs, driver %q, CUDA %q, source %q", len(d.GPUs), d.DriverVersion, d.CUDAVersion, d.Source)
	}
	for _, g := range d.GPUs {
		if g.Model != "NVIDIA H200" || g.MemoryMB != 143771 || g.UUID != fakeUUID("gpu-01", g.Index) {
			t.Errorf("hgx GPU %d = %+v", g.Index, g)
		}
		if len(g.NVLinkPeers) != 7 {
			t.Errorf("hgx GPU %d peers %v; want the seven others", g.Index, g.NVLinkPeers)
		}
	}

	mixed, err := LoadFakeGPUs("testdata/fake-mixed.yaml", "ws")
	if err != nil {
		t.Fatal(err)
	}
	d = discover(t, mixed)
	wantModels := []string{"NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", "NVIDIA L4"}
	wantMem := []int64{40 * 1024, 40 * 1024, 23034}
	for i, g := range d.GPUs {
		if g.Model != wantModels[i] || g.MemoryMB != wantMem[i] {
			t.Errorf("mixed GPU %d: %s with %d MiB; want %s with %d", i, g.Model, g.MemoryMB, wantModels[i], wantMem[i])
		}
	}
	if got, want := peersOf(d), map[int][]int{0: {1}, 1: {0}, 2: nil}; !reflect.DeepEqual(got, want) {
		t.Errorf("mixed peers = %v, want %v", got, want)
	}
	if got := mixed.curves[2]; got.utilBase != 20 || got.utilAmplitude != 10 || got.utilPeriod != time.Minute ||
		got.powerIdle != 16 || got.powerMax != 72 || got.tempMax != defaultFakeCurve.tempMax {
		t.Errorf("GPU 2 curve = %+v; want its own utilisation and power, the default temperature", got)
	}
	if got := mixed.curves[0]; got.powerIdle != 50 || got.powerMax != 400 || got.utilBase != 0 {
		t.Errorf("GPU 0 curve = %+v; want the file's power, idle utilisation", got)
	}

	if _, err := LoadFakeGPUs("../../examples/fake-gpus.yaml", "demo"); err != nil {
		t.Errorf("the example config: %v", err)
	}
	if _, err := LoadFakeGPUs("testdata/no-such.yaml", "n"); err == nil || !strings.Contains(err.Error(), "no-such.yaml") {
		t.Errorf("missing file: error %v does not name it", err)
	}
}

func TestFakeGPUConfigRejects(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"empty", "", "empty"},
		{"no GPUs", "driver_version: x\n", "want count"},
		{"unknown field", "count: 2\ncolour: red\n", "colour"},
		{"unknown nested field", "count: 2\nnvlink: {island: 2}\n", "island"},
		{"count and devices", "count: 2\ndevices: [{model: A}]\n", "count and devices"},
		{"count too big", "count: 65\n", "count: 65 is out of range; want 1 to 64"},
		{"negative count", "count: -1\n", "count: -1"},
		{"negative memory", "count: 2\nmemory_mb: -5\n", "memory_mb: -5 is out of range"},
		{"negative device memory", "devices: [{model: A}, {memory_mb: -1}]\n", "devices[1].memory_mb: -1"},
		{"control character in model", "count: 1\nmodel: \"A\\x07\"\n", "model"},
		{"long version", "count: 1\ndriver_version: " + strings.Repeat("9", 200) + "\n", "driver_version: 200 characters"},
		{"islands not a divisor", "count: 8\nnvlink: {islands: 3}\n", "nvlink.islands: 8 GPUs do not split into islands of 3"},
		{"islands too big", "count: 2\nnvlink: {islands: 4}\n", "nvlink.islands: 4 is out of range"},
		{"islands and pairs", "count: 2\nnvlink: {islands: 2, pairs: [[0, 1]]}\n", "both set"},
		{"pair out of range", "count: 2\nnvlink: {pairs: [[0, 2]]}\n", "nvlink.pairs[0]: [0 2] names a GPU out of range; want indices from 0 to 1"},
		{"pair to itself", "count: 2\nnvlink: {pairs: [[1, 1]]}\n", "nvlink.pairs[0]"},
		{"pair of three", "count: 4\nnvlink: {pairs: [[0, 1], [1, 2, 3]]}\n", "nvlink.pairs[1]: 3 indices"},
		{"fault GPU out of range", "count: 4\nfaults: [{gpu: 4, xid: 79}]\n", "faults[0].gpu: 4 is out of range; want 0 to 3"},
		{"fault GPU missing", "count: 4\nfaults: [{xid: 79}]\n", "faults[0].gpu: missing"},
		{"bad xid", "count: 4\nfaults: [{gpu: 1, xid: -3}]\n", "faults[0].xid: -3 is out of range; want 1 to 999"},
		{"huge xid", "count: 4\nfaults: [{gpu: 1, xid: 100000}]\n", "faults[0].xid: 100000"},
		{"xid not a number", "count: 4\nfaults: [{gpu: 1, xid: seventy-nine}]\n", "line 2: cannot unmarshal"},
		{"two kinds", "count: 4\nfaults: [{gpu: 1, xid: 79}, {gpu: 1, xid: 79, vanish: true}]\n", "faults[1]: want exactly one of xid, ecc and vanish"},
		{"no kind", "count: 4\nfaults: [{gpu: 1}]\n", "faults[0]: want exactly one"},
		{"negative ecc", "count: 4\nfaults: [{gpu: 1, ecc: -1}]\n", "faults[0].ecc: -1"},
		{"bad after", "count: 4\nfaults: [{gpu: 1, after: soon, xid: 79}]\n", "faults[0].after: \"soon\""},
		{"negative after", "count: 4\nfaults: [{gpu: 1, after: -5s, xid: 79}]\n", "faults[0].after"},
		{"utilisation over 100", "count: 1\nmetrics: {utilization: {base: 120}}\n", "metrics.utilization.base: 120 is out of range; want 0 to 100"},
		{"NaN utilisation", "count: 1\nmetrics: {utilization: {base: .nan}}\n", "metrics.utilization.base: NaN"},
		{"amplitude without period", "count: 1\nmetrics: {utilization: {amplitude: 5}}\n", "metrics.utilization.period"},
		{"max power below idle", "count: 1\nmetrics: {power: {idle: 100, max: 50}}\n", "metrics.power.max: 50 is out of range; want 100 to 10000"},
		{"per-GPU metrics out of range", "count: 2\nmetrics: {gpus: {2: {power: {idle: 1, max: 2}}}}\n", "metrics.gpus: GPU 2 is out of range; want 0 to 1"},
		{"per-GPU bad temperature", "count: 2\nmetrics: {gpus: {1: {temperature: {idle: -1, max: 2}}}}\n", "metrics.gpus.1.temperature.idle: -1"},
		{"two documents", "count: 1\n---\ncount: 2\n", "more than one YAML document"},
		{"duplicate key", "count: 1\ncount: 2\n", "already defined"},
		{"not a mapping", "[1, 2]\n", "cannot unmarshal"},
		{"MIG profile unknown", "devices: [{model: A100-80GB, mig: [{profile: half}]}]\n", "devices[0].mig[0].profile: \"half\"; want a MIG profile"},
		{"MIG profile upper case", "devices: [{model: A100-80GB, mig: [{profile: 1g.10gb}, {profile: 3G.40GB}]}]\n", "devices[0].mig[1].profile"},
		{"MIG profile missing", "devices: [{model: A100-80GB, mig: [{memory_mb: 10000}]}]\n", "devices[0].mig[0].profile: \"\""},
		{"MIG instances overfill the GPU", "devices: [{model: A}, {model: A100-40GB, mig: [{profile: 3g.20gb}, {profile: 4g.20gb, memory_mb: 20481}]}]\n",
			"devices[1].mig[1]: the instances take 40961 MiB up to here, more than the GPU's 40960 MiB"},
		{"MIG instance larger than the GPU", "devices: [{model: A100-40GB, mig: [{profile: 7g.80gb}]}]\n", "more than the GPU's 40960 MiB"},
		{"MIG instance negative memory", "devices: [{model: A100-40GB, mig: [{profile: 1g.5gb, memory_mb: -1}]}]\n", "devices[0].mig[0].memory_mb: -1 is out of range"},
		{"too many MIG instances", "devices: [{model: A100-80GB, mig: [" + strings.Repeat("{profile: 1g.5gb}, ", 8) + "]}]\n", "devices[0].mig: 8 instances; want at most 7"},
		{"MIG unknown field", "devices: [{model: A100-80GB, mig: [{profile: 1g.10gb, slices: 1}]}]\n", "slices"},
		{"MIG not a list", "devices: [{model: A100-80GB, mig: 3g.40gb}]\n", "cannot unmarshal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := parseFakeGPUs([]byte(tt.yaml), "n")
			if err == nil {
				t.Fatalf("parsed %q into %d GPUs, want an error", tt.yaml, len(f.GPUs))
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestFakeGPUTopology(t *testing.T) {
	busID := regexp.MustCompile(`^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$`)
	for _, n := range []int{1, 2, 7, 8, 64} {
		f, err := ParseFakeGPUs(fmt.Sprint(n), "node-a")
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, g := range discover(t, f).GPUs {
			if !busID.MatchString(g.PCIBusID) || seen[g.PCIBusID] {
				t.Errorf("%d GPUs: GPU %d bus id %q is malformed or repeated", n, g.Index, g.PCIBusID)
			}
			seen[g.PCIBusID] = true
			wantNUMA := 0
			if n > 1 && g.Index >= (n+1)/2 {
				wantNUMA = 1
			}
			if g.NUMANode == nil || *g.NUMANode != wantNUMA {
				t.Errorf("%d GPUs: GPU %d NUMA node %v, want %d", n, g.Index, g.NUMANode, wantNUMA)
			}
			if g.MIGMode != "disabled" || g.NVLinkPeers != nil {
				t.Errorf("%d GPUs: GPU %d MIG %q peers %v; want disabled and no NVLink", n, g.Index, g.MIGMode, g.NVLinkPeers)
			}
		}
	}
}

func TestFakeNVLink(t *testing.T) {
	tests := []struct {
		yaml string
		want map[int][]int
	}{
		{"count: 8\nnvlink: {islands: 4}\n", map[int][]int{
			0: {1, 2, 3}, 1: {0, 2, 3}, 2: {0, 1, 3}, 3: {0, 1, 2},
			4: {5, 6, 7}, 5: {4, 6, 7}, 6: {4, 5, 7}, 7: {4, 5, 6},
		}},
		{"count: 4\nnvlink: {islands: 2}\n", map[int][]int{0: {1}, 1: {0}, 2: {3}, 3: {2}}},
		{"count: 3\nnvlink: {islands: 1}\n", map[int][]int{0: nil, 1: nil, 2: nil}},
		// A ring, with a pair given twice in both orders.
		{"count: 4\nnvlink: {pairs: [[0, 1], [1, 2], [2, 3], [3, 0], [1, 0]]}\n", map[int][]int{
			0: {1, 3}, 1: {0, 2}, 2: {1, 3}, 3: {0, 2},
		}},
	}
	for _, tt := range tests {
		got := peersOf(discover(t, mustParseFake(t, tt.yaml)))
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%q: peers %v, want %v", tt.yaml, got, tt.want)
		}
	}
}

func TestFakeDiscoverReturnsCopies(t *testing.T) {
	f := mustParseFake(t, "count: 2\nnvlink: {islands: 2}\n")
	d := discover(t, f)
	d.GPUs[0].NVLinkPeers[0] = 99
	*d.GPUs[0].NUMANode = 7
	again := discover(t, f)
	if again.GPUs[0].NVLinkPeers[0] != 1 || *again.GPUs[0].NUMANode != 0 {
		t.Errorf("a caller's change leaked into the set: %+v", again.GPUs[0])
	}
}

func TestFakeCurves(t *testing.T) {
	f := mustParseFake(t, `count: 2
metrics:
  utilization: {base: 10, amplitude: 5, period: 60s}
  power: {idle: 100, max: 500}
  temperature: {idle: 30, max: 80}
  gpus:
    1: {utilization: {base: 50}}
`)
	clock := withFakeClock(f)
	clock.advance(15 * time.Second) // a quarter period: the sine at its top
	s := sample(t, f)
	if got := s.GPUs[0]; got.UtilizationPct != 15 || got.PowerW != 160 || got.TemperatureC != 37.5 {
		t.Errorf("GPU 0 at a quarter period = %+v; want 15 %%, 160 W, 37.5 °C", got)
	}
	if got := s.GPUs[1]; got.UtilizationPct != 50 || got.PowerW != 300 {
		t.Errorf("GPU 1 = %+v; want a flat 50 %% and 300 W", got)
	}
	clock.advance(30 * time.Second) // three quarters: the bottom
	if got := sample(t, f).GPUs[0].UtilizationPct; got != 5 {
		t.Errorf("GPU 0 at three quarters = %v %%, want 5", got)
	}
	if !s.Time.Equal(clock.now().Add(-30 * time.Second)) {
		t.Errorf("sample time %v does not come from the clock", s.Time)
	}
}

// startSleeper runs a child process that lives until the test kills it.
func startSleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFakeProcessRegistration(t *testing.T) {
	f := mustParseFake(t, "count: 4\nmemory_mb: 1000\nmetrics: {utilization: {base: 30}}\n")
	f.Dir = filepath.Join(t.TempDir(), "fake-gpus")
	env := f.JobEnv()
	if env[EnvFakeGPUDir] != f.Dir || len(env) != 1 {
		t.Fatalf("JobEnv = %v", env)
	}
	procs := filepath.Join(env[EnvFakeGPUDir], "procs")

	sleeper := startSleeper(t)
	pid := sleeper.Process.Pid
	// One process on two GPUs, one by index and one by UUID; the second process is this
	// test itself, on GPU 1 too.
	writeFile(t, filepath.Join(procs, fmt.Sprint(pid)),
		fmt.Sprintf(`[{"gpu": 1, "memory_mb": 300, "utilization_pct": 80}, {"gpu": %q, "memory_mb": 50}]`, f.GPUs[3].UUID))
	writeFile(t, filepath.Join(procs, fmt.Sprint(os.Getpid())), `{"gpu": 1, "memory_mb": 900, "utilization_pct": 40}`+"\n")

	s := sample(t, f)
	self := processCommand(os.Getpid())
	want := []api.GPUProcess{
		{GPU: 1, PID: pid, MemoryMB: 300, Command: "sleep"},
		{GPU: 3, PID: pid, MemoryMB: 50, Command: "sleep"},
		{GPU: 1, PID: os.Getpid(), MemoryMB: 900, Command: self},
	}
	if pid > os.Getpid() {
		want = append(want[2:], want[:2]...)
	}
	if !reflect.DeepEqual(s.Processes, want) {
		t.Errorf("processes = %+v\nwant %+v", s.Processes, want)
	}
	// GPU 1: 30 % of its own plus 120 % of the jobs, capped; memory capped at its size.
	if g := s.GPUs[1]; g.UtilizationPct != 100 || g.MemoryUsedMB != 1000 {
		t.Errorf("GPU 1 = %+v; want 100 %% and 1000 MiB", g)
	}
	if g := s.GPUs[3]; g.UtilizationPct != 30 || g.MemoryUsedMB != 50 {
		t.Errorf("GPU 3 = %+v; want 30 %% and 50 MiB", g)
	}
	if g := s.GPUs[0]; g.UtilizationPct != 30 || g.MemoryUsedMB != 0 {
		t.Errorf("GPU 0 = %+v; want idle", g)
	}

	sleeper.Process.Kill()
	sleeper.Wait()
	s = sample(t, f)
	if len(s.Processes) != 1 || s.Processes[0].PID != os.Getpid() {
		t.Errorf("after the sleeper died: processes %+v; want only this test's", s.Processes)
	}
	if _, err := os.Stat(filepath.Join(procs, fmt.Sprint(pid))); !os.IsNotExist(err) {
		t.Errorf("the dead process's registration is still there: %v", err)
	}
	if g := s.GPUs[3]; g.MemoryUsedMB != 0 {
		t.Errorf("GPU 3 still uses %d MiB of the dead process", g.MemoryUsedMB)
	}
	if f.Malformed() != 0 {
		t.Errorf("%d malformed registrations, want none", f.Malformed())
	}
}

// A zombie (exited, not yet reaped) holds no GPU.
func TestFakeZombieIsDead(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for pidAlive(cmd.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatal("an exited child still reads as alive")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !pidAlive(os.Getpid()) {
		t.Error("this process reads as dead")
	}
}

func TestFakeMalformedRegistrations(t *testing.T) {
	f := mustParseFake(t, "count: 2\nmemory_mb: 1000\n")
	f.Dir = t.TempDir()
	f.JobEnv()
	procs := filepath.Join(f.Dir, "procs")
	// Files named for live processes, so that only their content is at fault.
	sleepers := make([]int, 8)
	for i := range sleepers {
		sleepers[i] = startSleeper(t).Process.Pid
	}
	bad := []string{
		`{"gpu": 0, "memory_mb": 100`,       // truncated
		`{"gpu": 0, "mem_mb": 100}`,         // unknown field
		`{"gpu": 2}`,                        // no such GPU
		`{"gpu": "GPU-nope"}`,               // no such UUID
		`{"gpu": 0, "memory_mb": 5000}`,     // more than the GPU has
		`{"gpu": 0, "utilization_pct": -1}`, // negative
		`[]`,                                // nothing
		`{"gpu": 0} {"gpu": 1}`,             // two values
	}
	for i, content := range bad {
		writeFile(t, filepath.Join(procs, fmt.Sprint(sleepers[i])), content)
	}
	writeFile(t, filepath.Join(procs, "not-a-pid"), `{"gpu": 0}`)
	writeFile(t, filepath.Join(procs, "0042"), `{"gpu": 0}`)
	// Being written: passed over without counting.
	writeFile(t, filepath.Join(procs, fmt.Sprint(os.Getpid())), "")
	writeFile(t, filepath.Join(procs, ".123.tmp"), `{"gpu": 0}`)
	// A link must not be followed (it could point at a secret), nor a FIFO block the read.
	secret := filepath.Join(t.TempDir(), "secret")
	writeFile(t, secret, `{"gpu": 0, "memory_mb": 1}`)
	self := startSleeper(t).Process.Pid
	if err := os.Symlink(secret, filepath.Join(procs, fmt.Sprint(self))); err != nil {
		t.Fatal(err)
	}
	fifo := startSleeper(t).Process.Pid
	if err := syscall.Mkfifo(filepath.Join(procs, fmt.Sprint(fifo)), 0o644); err != nil {
		t.Fatal(err)
	}
	wantBad := len(bad) + 4

	s := sample(t, f)
	if len(s.Processes) != 0 {
		t.Errorf("malformed registrations gave processes %+v", s.Processes)
	}
	if got := f.Malformed(); got != wantBad {
		t.Errorf("Malformed = %d, want %d", got, wantBad)
	}
	// The same files again are not counted again; a rewritten one is, and a fixed one
	// counts as a use.
	sample(t, f)
	if got := f.Malformed(); got != wantBad {
		t.Errorf("after a second Sample, Malformed = %d, want still %d", got, wantBad)
	}
	writeFile(t, filepath.Join(procs, fmt.Sprint(sleepers[0])), `{"gpu": 9}`)
	writeFile(t, filepath.Join(procs, fmt.Sprint(sleepers[1])), `{"gpu": 1, "memory_mb": 10}`)
	s = sample(t, f)
	if got := f.Malformed(); got != wantBad+1 {
		t.Errorf("after a rewrite, Malformed = %d, want %d", got, wantBad+1)
	}
	if len(s.Processes) != 1 || s.Processes[0].PID != sleepers[1] || s.Processes[0].MemoryMB != 10 {
		t.Errorf("processes = %+v; want the fixed registration", s.Processes)
	}
}

func TestFakeStateDirMode(t *testing.T) {
	f, err := ParseFakeGPUs("1", "n")
	if err != nil {
		t.Fatal(err)
	}
	if f.JobEnv() != nil {
		t.Error("JobEnv without a Dir is not empty")
	}
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	f.Dir = filepath.Join(t.TempDir(), "a", "fake-gpus")
	f.JobEnv()
	for _, dir := range []string{f.Dir, filepath.Join(f.Dir, "procs"), filepath.Join(f.Dir, "faults")} {
		info, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got := info.Mode() & (fs.ModePerm | fs.ModeSticky); got != 0o777|fs.ModeSticky {
			t.Errorf("%s has mode %v, want drwxrwxrwt", dir, got)
		}
	}
}

// writeFault drops a fault file the way the doc asks: written under a dot name, renamed.
func writeFault(t *testing.T, f *FakeDevices, name, content string) {
	t.Helper()
	tmp := filepath.Join(f.Dir, "faults", "."+name)
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, filepath.Join(f.Dir, "faults", name)); err != nil {
		t.Fatal(err)
	}
}

func TestFakeFaultFiles(t *testing.T) {
	f := mustParseFake(t, "count: 4\n")
	f.Dir = t.TempDir()
	f.JobEnv()
	writeFault(t, f, "1", `{"gpu": 3, "xid": 79}`)
	writeFault(t, f, "2", `{"gpu": 2, "xid": 13}`)
	writeFault(t, f, "3", fmt.Sprintf(`{"gpu": %q, "ecc": 2}`, f.GPUs[1].UUID))
	writeFault(t, f, "4", `{"gpu": 3, "xid": 79, "ecc": 1}`) // two kinds: malformed
	writeFault(t, f, "5", `{"gpu": 7, "xid": 79}`)           // no such GPU
	writeFault(t, f, "6", `not json`)
	writeFile(t, filepath.Join(f.Dir, "faults", ".7"), `{"gpu": 0, "xid": 79}`) // still being written

	got := healthEvents(t, f)
	want := []HealthEvent{
		{GPU: 3, Kind: HealthXID, Code: 79, Fatal: true, Message: "XID 79 (GPU fault)"},
		{GPU: 2, Kind: HealthXID, Code: 13, Fatal: false, Message: "XID 13 (application fault)"},
		{GPU: 1, Kind: HealthECC, Code: 2, Fatal: true, Message: "2 uncorrectable ECC error(s)"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events = %+v\nwant %+v", got, want)
	}
	if f.Malformed() != 3 {
		t.Errorf("Malformed = %d, want 3", f.Malformed())
	}
	left, _ := os.ReadDir(filepath.Join(f.Dir, "faults"))
	if len(left) != 1 || left[0].Name() != ".7" {
		t.Errorf("fault files left: %v; want only the one being written", left)
	}
	if again := healthEvents(t, f); len(again) != 0 {
		t.Errorf("a fault was reported twice: %+v", again)
	}
	// XIDs do not change the inventory: the agent keeps the health state.
	if d := discover(t, f); len(d.GPUs) != 4 || !d.GPUs[3].Healthy {
		t.Errorf("after an XID, Discover = %+v", d.GPUs)
	}
}

func TestFakeVanish(t *testing.T) {
	f := mustParseFake(t, "count: 4\nnvlink: {islands: 4}\n")
	f.Dir = t.TempDir()
	f.JobEnv()
	writeFault(t, f, "gone", `{"gpu": 2, "vanish": true}`)
	got := healthEvents(t, f)
	if len(got) != 1 || got[0].GPU != 2 || got[0].Kind != HealthVanished || !got[0].Fatal {
		t.Fatalf("events = %+v; want GPU 2 vanished, fatal", got)
	}
	d := discover(t, f)
	if got, want := peersOf(d), map[int][]int{0: {1, 3}, 1: {0, 3}, 3: {0, 1}}; !reflect.DeepEqual(got, want) {
		t.Errorf("after the vanish, GPUs and peers = %v; want %v", got, want)
	}
	for _, g := range sample(t, f).GPUs {
		if g.Index == 2 {
			t.Error("Sample still reads the vanished GPU")
		}
	}
	// Its later faults, and registrations on it, are dropped.
	writeFault(t, f, "late", `{"gpu": 2, "xid": 79}`)
	if err := f.Inject(HealthEvent{GPU: 2, Kind: HealthVanished}); err != nil {
		t.Fatal(err)
	}
	if got := healthEvents(t, f); len(got) != 0 {
		t.Errorf("faults of a vanished GPU were reported: %+v", got)
	}
	writeFile(t, filepath.Join(f.Dir, "procs", fmt.Sprint(os.Getpid())), `{"gpu": 2, "memory_mb": 1}`)
	if s := sample(t, f); len(s.Processes) != 0 {
		t.Errorf("a registration on the vanished GPU counted: %+v", s.Processes)
	}
}

func TestFakeScheduledFaults(t *testing.T) {
	f, err := LoadFakeGPUs("testdata/fake-mixed.yaml", "ws")
	if err != nil {
		t.Fatal(err)
	}
	clock := withFakeClock(f)
	steps := []struct {
		advance time.Duration
		want    []HealthEvent
	}{
		{0, nil},
		{29 * time.Second, nil},
		{time.Second, []HealthEvent{xidEvent(1, 79)}},
		{time.Second, nil},
		// Two due at once come in the order of the file.
		{3 * time.Minute, []HealthEvent{xidEvent(0, 13), eccEvent(2, 3), vanishEvent(2)}},
		{time.Hour, nil},
	}
	for i, s := range steps {
		clock.advance(s.advance)
		if got := healthEvents(t, f); !reflect.DeepEqual(got, s.want) {
			t.Errorf("step %d: events %+v, want %+v", i, got, s.want)
		}
	}
	if d := discover(t, f); len(d.GPUs) != 2 {
		t.Errorf("after the scheduled vanish, %d GPUs; want 2", len(d.GPUs))
	}
}

func TestFakeInject(t *testing.T) {
	f := mustParseFake(t, "count: 2\n")
	for _, ev := range []HealthEvent{{GPU: 2, Kind: HealthXID}, {GPU: -1, Kind: HealthXID}, {GPU: 0, Kind: "melted"}} {
		if err := f.Inject(ev); err == nil {
			t.Errorf("Inject(%+v) succeeded", ev)
		}
	}
	custom := HealthEvent{GPU: 0, Kind: HealthXID, Code: 48, Fatal: true, Message: "DBE (test)"}
	for _, ev := range []HealthEvent{{GPU: 1, Kind: HealthXID, Code: 31}, custom} {
		if err := f.Inject(ev); err != nil {
			t.Fatal(err)
		}
	}
	want := []HealthEvent{xidEvent(1, 31), custom}
	if got := healthEvents(t, f); !reflect.DeepEqual(got, want) || got[0].Fatal {
		t.Errorf("events = %+v, want %+v (XID 31 not fatal)", got, want)
	}
}

// The methods run from different goroutines (the agent's telemetry and health loops);
// the race detector checks the locking.
func TestFakeConcurrentUse(t *testing.T) {
	f := mustParseFake(t, "count: 4\nnvlink: {islands: 2}\n")
	f.Dir = t.TempDir()
	writeFile(t, filepath.Join(f.JobEnv()[EnvFakeGPUDir], "procs", fmt.Sprint(os.Getpid())), `{"gpu": 0, "memory_mb": 1}`)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				switch (g + i) % 4 {
				case 0:
					f.Sample()
				case 1:
					f.HealthEvents()
				case 2:
					f.Discover()
				default:
					f.Inject(HealthEvent{GPU: i % 4, Kind: HealthXID, Code: 13})
					f.Malformed()
				}
			}
		})
	}
	wg.Wait()
}
