package agent

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/rotahq/rota/internal/api"
)

// fakeMIGBoard is three A100 80GB: GPU 0 in MIG mode with three instances, GPU 1 in MIG
// mode with none, GPU 2 whole; NVLink between all three, which MIG mode turns off.
const fakeMIGBoard = `devices:
  - model: NVIDIA A100-SXM4-80GB
    mig:
      - {profile: 3g.40gb}
      - {profile: 2g.20gb, memory_mb: 19968}
      - {profile: 1g.10gb}
  - {model: NVIDIA A100-SXM4-80GB, mig: []}
  - {model: NVIDIA A100-SXM4-80GB}
nvlink: {islands: 3}
metrics: {temperature: {idle: 30, max: 80}}
`

func TestMIGIndexScheme(t *testing.T) {
	seen := map[int]string{}
	for p := range migMaxGPUs {
		seen[p] = fmt.Sprintf("GPU %d", p)
	}
	for p := range migMaxGPUs {
		for j := range migMaxDevices {
			i := migIndex(p, j)
			if other, dup := seen[i]; dup || i < 0 || i > 1023 {
				t.Fatalf("MIG device %d of GPU %d is numbered %d, taken by %s or out of the server's 0 to 1023", j, p, i, other)
			}
			seen[i] = fmt.Sprintf("MIG device %d of GPU %d", j, p)
			if got, ok := migParentOf(i); !ok || got != p {
				t.Fatalf("migParentOf(%d) = %d, %v; want %d", i, got, ok, p)
			}
		}
	}
	for _, i := range []int{0, 1, 89, 99, 1000, 1023, -1} {
		if p, ok := migParentOf(i); ok {
			t.Errorf("migParentOf(%d) = %d; want no MIG device", i, p)
		}
	}
}

func TestFakeMIGDiscover(t *testing.T) {
	f := mustParseFake(t, fakeMIGBoard)
	d := discover(t, f)
	numa0, numa1 := 0, 1
	zero := 0
	const model = "NVIDIA A100-SXM4-80GB"
	inst := func(j int, profile string, mem int64) api.GPU {
		return api.GPU{Index: 100 + j, UUID: fakeMIGUUID("node-a", 0, j), Model: model + " MIG " + profile, MemoryMB: mem,
			Healthy: true, PCIBusID: "00000000:18:00.0", NUMANode: &numa0, MIGMode: "enabled", MIGParent: &zero, MIGProfile: profile}
	}
	want := []api.GPU{
		inst(0, "3g.40gb", 40960), inst(1, "2g.20gb", 19968), inst(2, "1g.10gb", 10240),
		{Index: 1, UUID: fakeUUID("node-a", 1), Model: model, MemoryMB: 81920, Health: migNoInstances,
			PCIBusID: "00000000:1B:00.0", NUMANode: &numa0, MIGMode: "enabled"},
		{Index: 2, UUID: fakeUUID("node-a", 2), Model: model, MemoryMB: 81920, Healthy: true,
			PCIBusID: "00000000:1E:00.0", NUMANode: &numa1, MIGMode: "disabled"},
	}
	if !reflect.DeepEqual(d.GPUs, want) {
		t.Fatalf("Discover =\n%+v\nwant\n%+v", d.GPUs, want)
	}
	for _, g := range d.GPUs {
		if g.Index == 0 || strings.HasPrefix(g.UUID, "GPU-") && g.MIGParent != nil {
			t.Errorf("GPU 0, in MIG mode with instances, is reported as a device: %+v", g)
		}
	}
	if !isMIGUUID(d.GPUs[0].UUID) || d.GPUs[0].UUID == d.GPUs[1].UUID {
		t.Errorf("MIG UUIDs %q, %q; want distinct MIG-… UUIDs", d.GPUs[0].UUID, d.GPUs[1].UUID)
	}
	// Another node's fake MIG devices never share a UUID with these.
	other := mustParseFake(t, fakeMIGBoard)
	if u := fakeMIGUUID("node-b", 0, 0); u == d.GPUs[0].UUID || other.mig[0][0].uuid != d.GPUs[0].UUID {
		t.Errorf("MIG UUIDs are not stable per node and distinct across nodes")
	}
}

func TestFakeMIGSampleAndRegistration(t *testing.T) {
	f := mustParseFake(t, fakeMIGBoard)
	f.Dir = filepath.Join(t.TempDir(), "fake-gpus")
	procs := filepath.Join(f.JobEnv()[EnvFakeGPUDir], "procs")
	withFakeClock(f)
	uuid := f.mig[0][1].uuid
	sleeper := startSleeper(t)
	pid := sleeper.Process.Pid
	// A job on MIG device 101, named by its UUID, and one on 100 by number.
	writeFile(t, filepath.Join(procs, fmt.Sprint(pid)),
		fmt.Sprintf(`[{"gpu": %q, "memory_mb": 5000, "utilization_pct": 50}, {"gpu": 100, "memory_mb": 700}]`, uuid))
	s := sample(t, f)
	byIndex := map[int]api.GPUSample{}
	for _, g := range s.GPUs {
		byIndex[g.Index] = g
	}
	if len(s.GPUs) != 5 || !slices.Equal(slices.Sorted(maps.Keys(byIndex)), []int{1, 2, 100, 101, 102}) {
		t.Fatalf("sampled %+v; want the three MIG devices, GPU 1 and GPU 2", s.GPUs)
	}
	// The GPU's load (50 % from one instance) sets the temperature all its instances read.
	for i, mem := range map[int]int64{100: 700, 101: 5000, 102: 0} {
		want := api.GPUSample{Index: i, UtilizationUnknown: true, MemoryUsedMB: mem, TemperatureC: 55}
		if byIndex[i] != want {
			t.Errorf("MIG device %d = %+v; want %+v", i, byIndex[i], want)
		}
	}
	if g := byIndex[2]; g.UtilizationUnknown || g.PowerW == 0 {
		t.Errorf("whole GPU 2 = %+v; want a utilisation and power of its own", g)
	}
	wantProcs := []api.GPUProcess{{GPU: 101, PID: pid, MemoryMB: 5000, Command: "sleep"}, {GPU: 100, PID: pid, MemoryMB: 700, Command: "sleep"}}
	if !reflect.DeepEqual(s.Processes, wantProcs) {
		t.Errorf("processes = %+v; want %+v", s.Processes, wantProcs)
	}

	// Registrations that name the GPU in MIG mode, more memory than the instance has, or
	// a MIG device number that does not exist are refused, one count each.
	for k, bad := range []string{`{"gpu": 0, "memory_mb": 1}`, `{"gpu": 102, "memory_mb": 10241}`, `{"gpu": 103}`, `{"gpu": 99}`} {
		path := filepath.Join(procs, fmt.Sprint(pid))
		writeFile(t, path, bad)
		before := f.Malformed()
		s := sample(t, f)
		if f.Malformed() != before+1 || len(s.Processes) != 0 {
			t.Errorf("registration %d %s: malformed %d → %d, processes %+v; want it refused", k, bad, before, f.Malformed(), s.Processes)
		}
	}
}

func TestFakeMIGFaults(t *testing.T) {
	f := mustParseFake(t, fakeMIGBoard)
	f.Dir = t.TempDir()
	f.JobEnv()
	// A fault of the GPU reaches each of its instances; one of an instance, only it.
	writeFault(t, f, "1", `{"gpu": 0, "xid": 48}`)
	writeFault(t, f, "2", fmt.Sprintf(`{"gpu": %q, "ecc": 2}`, f.mig[0][2].uuid))
	writeFault(t, f, "3", `{"gpu": 1, "xid": 79}`) // MIG mode without instances: the GPU itself
	var got []string
	for _, ev := range healthEvents(t, f) {
		got = append(got, fmt.Sprintf("%d %s %d %v", ev.GPU, ev.Kind, ev.Code, ev.Fatal))
		if ev.GPU >= 100 && ev.Kind == HealthXID && !strings.Contains(ev.Message, "on its GPU 0") {
			t.Errorf("event %+v does not say it came from GPU 0", ev)
		}
	}
	want := []string{"100 xid 48 true", "101 xid 48 true", "102 xid 48 true", "102 ecc 2 true", "1 xid 79 true"}
	if !slices.Equal(got, want) {
		t.Errorf("events = %v; want %v", got, want)
	}

	// One instance vanishing leaves the others; the GPU vanishing takes them all, once.
	if err := f.Inject(HealthEvent{GPU: 101, Kind: HealthVanished}); err != nil {
		t.Fatal(err)
	}
	if ev := healthEvents(t, f); len(ev) != 1 || ev[0].GPU != 101 {
		t.Fatalf("events = %+v; want 101 vanished", ev)
	}
	if n := len(discover(t, f).GPUs); n != 4 {
		t.Errorf("%d devices after MIG device 101 vanished; want 4", n)
	}
	if err := f.Inject(HealthEvent{GPU: 0, Kind: HealthVanished}); err != nil {
		t.Fatal(err)
	}
	ev := healthEvents(t, f)
	if len(ev) != 2 || ev[0].GPU != 100 || ev[1].GPU != 102 {
		t.Fatalf("events = %+v; want 100 and 102 vanished (101 already had)", ev)
	}
	var left []int
	for _, g := range discover(t, f).GPUs {
		left = append(left, g.Index)
	}
	if !slices.Equal(left, []int{1, 2}) {
		t.Errorf("devices after GPU 0 vanished: %v; want [1 2]", left)
	}
	if s := sample(t, f); len(s.GPUs) != 2 {
		t.Errorf("sampled %+v after GPU 0 vanished; want GPUs 1 and 2", s.GPUs)
	}
	for _, bad := range []int{103, 99, 200} {
		if err := f.Inject(HealthEvent{GPU: bad, Kind: HealthXID, Code: 79}); err == nil {
			t.Errorf("Inject on %d, no device of the set: no error", bad)
		}
	}
}

func TestVisibleDevices(t *testing.T) {
	tests := []struct {
		indices []int
		uuids   []string
		want    []string
	}{
		{nil, nil, []string{}},
		{[]int{0, 3}, []string{"GPU-a", "GPU-b"}, []string{"0", "3"}},
		{[]int{101}, []string{"MIG-1d89abd8-d10a-5361-bd06-77a807048472"}, []string{"MIG-1d89abd8-d10a-5361-bd06-77a807048472"}},
		{[]int{2, 130}, []string{"GPU-x", "MIG-y"}, []string{"2", "MIG-y"}},
		{[]int{4}, nil, []string{"4"}}, // an old server sends no UUIDs
	}
	for _, tt := range tests {
		if got := visibleDevices(tt.indices, tt.uuids); !slices.Equal(got, tt.want) {
			t.Errorf("visibleDevices(%v, %v) = %q; want %q", tt.indices, tt.uuids, got, tt.want)
		}
	}
}

func TestFindGPUDevicesMIG(t *testing.T) {
	dev := t.TempDir()
	for _, n := range []string{"nvidia0", "nvidia1", "nvidia2", "nvidiactl"} {
		writeFile(t, filepath.Join(dev, n), "")
	}
	// A MIG device of GPU 1 is reached through /dev/nvidia1, whatever its number.
	g := findGPUDevices(dev, t.TempDir(), []int{112, 2}, []string{"MIG-abc", "GPU-2"})
	if !slices.Equal(g.job, []int{1, 2}) {
		t.Errorf("minors = %v; want [1 2]", g.job)
	}
	rules := deviceRules(g, true)
	if len(rules) != 1 || rules[0][1] != "c 195:0 rwm" {
		t.Errorf("rules = %v; want only GPU 0 denied", rules)
	}
}

func TestExampleFakeConfigHasMIG(t *testing.T) {
	data, err := os.ReadFile("../../examples/fake-gpus-mig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := parseFakeGPUs(data, "demo")
	if err != nil {
		t.Fatalf("examples/fake-gpus-mig.yaml: %v", err)
	}
	var mig int
	for _, g := range discover(t, f).GPUs {
		if g.MIGParent != nil {
			mig++
		}
	}
	if mig == 0 {
		t.Error("examples/fake-gpus-mig.yaml gives no MIG device")
	}
}

func TestMIGDevicesOfUnhealthyGPU(t *testing.T) {
	sick := api.GPU{Index: 4, UUID: "GPU-4", Model: "X", Health: "XID 79"}
	if got := migDevices(sick, nil); len(got) != 1 || got[0].Health != "XID 79" || got[0].Healthy || got[0].MIGMode != "enabled" {
		t.Errorf("migDevices of a sick GPU without instances = %+v; want it, with its own reason", got)
	}
	got := migDevices(sick, []migInstance{{n: 1, uuid: "MIG-x", profile: "1g.10gb", memoryMB: 10240}})
	if len(got) != 1 || got[0].Index != 141 || got[0].Healthy || got[0].Health != "XID 79" || got[0].Model != "X MIG 1g.10gb" {
		t.Errorf("migDevices of a sick GPU = %+v; want device 141, unhealthy with the GPU's reason", got)
	}
}
