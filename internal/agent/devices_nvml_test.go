//go:build cgo

package agent

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/rotahq/rota/internal/api"
)

// The NVML layer runs here against go-nvml's mocks: this machine has no GPU, and the
// logic worth testing (topology, events, lost devices, a broken library) is ours.

// mockLink is one NVLink of a mock GPU.
type mockLink struct {
	remoteBus string
	kind      nvml.IntNvLinkDeviceType
	down      bool
}

// mockGPU describes a mock GPU; its methods answer from these fields.
type mockGPU struct {
	mu    sync.Mutex // guards lost
	index int
	uuid  string
	bus   string
	numa  int // -1: NVML does not support the query
	mig   int // -1: no MIG
	links []mockLink
	// lost makes every query answer ERROR_GPU_IS_LOST.
	lost bool
	// events are the event types the GPU supports; ret is what GetSupportedEventTypes returns.
	events    uint64
	eventsRet nvml.Return
	procs     []nvml.ProcessInfo
	gfx       []nvml.ProcessInfo
	// migMax is what GetMaxMigDeviceCount answers (with migMaxRet); migs are the MIG
	// devices by NVML's MIG index, the others answering ERROR_NOT_FOUND.
	migMax    int
	migMaxRet nvml.Return
	migs      map[int]*mock.Device
}

// mockMIG is a MIG device named name (as NVML names them), of memMB with usedMB in use by
// procs, with slice counts and memory in its attributes.
func (g *mockGPU) mockMIG(uuid, name string, memMB, usedMB uint64, giSlices, ciSlices uint32, procs ...nvml.ProcessInfo) *mock.Device {
	return &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) { return uuid, g.ok() },
		GetNameFunc: func() (string, nvml.Return) { return name, g.ok() },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: memMB << 20, Used: usedMB << 20}, g.ok()
		},
		GetAttributesFunc: func() (nvml.DeviceAttributes, nvml.Return) {
			return nvml.DeviceAttributes{GpuInstanceSliceCount: giSlices, ComputeInstanceSliceCount: ciSlices, MemorySizeMB: memMB}, g.ok()
		},
		// As on real MIG devices: no utilisation, power or temperature of their own.
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED },
		GetPowerUsageFunc:       func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
		GetTemperatureFunc:      func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED },
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return procs, g.ok()
		},
		GetGraphicsRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED },
	}
}

func (g *mockGPU) isLost() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lost
}

func (g *mockGPU) lose() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lost = true
}

// ok is SUCCESS, or ERROR_GPU_IS_LOST once the GPU is lost.
func (g *mockGPU) ok() nvml.Return {
	if g.isLost() {
		return nvml.ERROR_GPU_IS_LOST
	}
	return nvml.SUCCESS
}

func pciInfo(bus string) nvml.PciInfo {
	var p nvml.PciInfo
	for i, c := range []byte(bus) {
		p.BusId[i] = int8(c)
	}
	return p
}

func (g *mockGPU) device() *mock.Device {
	return &mock.Device{
		GetUUIDFunc:  func() (string, nvml.Return) { return g.uuid, g.ok() },
		GetIndexFunc: func() (int, nvml.Return) { return g.index, g.ok() },
		GetNameFunc:  func() (string, nvml.Return) { return "NVIDIA H200", g.ok() },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: 143771 << 20, Used: 2048 << 20}, g.ok()
		},
		GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) { return pciInfo(g.bus), g.ok() },
		GetNumaNodeIdFunc: func() (int, nvml.Return) {
			if g.numa < 0 {
				return 0, nvml.ERROR_NOT_SUPPORTED
			}
			return g.numa, g.ok()
		},
		GetMigModeFunc: func() (int, int, nvml.Return) {
			if g.mig < 0 {
				return 0, 0, nvml.ERROR_NOT_SUPPORTED
			}
			return g.mig, g.mig, g.ok()
		},
		GetNvLinkStateFunc: func(l int) (nvml.EnableState, nvml.Return) {
			switch {
			case l >= len(g.links):
				return 0, nvml.ERROR_INVALID_ARGUMENT
			case g.links[l].down:
				return nvml.FEATURE_DISABLED, nvml.SUCCESS
			}
			return nvml.FEATURE_ENABLED, g.ok()
		},
		GetNvLinkRemotePciInfoFunc: func(l int) (nvml.PciInfo, nvml.Return) {
			return pciInfo(g.links[l].remoteBus), g.ok()
		},
		GetNvLinkRemoteDeviceTypeFunc: func(l int) (nvml.IntNvLinkDeviceType, nvml.Return) {
			if g.links[l].kind == nvml.NVLINK_DEVICE_TYPE_UNKNOWN {
				return 0, nvml.ERROR_NOT_SUPPORTED
			}
			return g.links[l].kind, g.ok()
		},
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			return nvml.Utilization{Gpu: uint32(10 * (g.index + 1))}, g.ok()
		},
		GetPowerUsageFunc:  func() (uint32, nvml.Return) { return 312_500, g.ok() },
		GetTemperatureFunc: func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 41, g.ok() },
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return g.procs, g.ok()
		},
		GetGraphicsRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			if g.gfx == nil {
				return nil, nvml.ERROR_NOT_SUPPORTED
			}
			return g.gfx, g.ok()
		},
		GetSupportedEventTypesFunc: func() (uint64, nvml.Return) { return g.events, g.eventsRet },
		RegisterEventsFunc:         func(uint64, nvml.EventSet) nvml.Return { return g.ok() },
		GetMaxMigDeviceCountFunc: func() (int, nvml.Return) {
			if g.migMaxRet != nvml.SUCCESS {
				return 0, g.migMaxRet
			}
			return g.migMax, g.ok()
		},
		GetMigDeviceHandleByIndexFunc: func(j int) (nvml.Device, nvml.Return) {
			if j < 0 || j >= g.migMax {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			if m, ok := g.migs[j]; ok {
				return m, g.ok()
			}
			return nil, nvml.ERROR_NOT_FOUND
		},
	}
}

// mockNVML is a mock library over gpus with an event queue.
type mockNVML struct {
	lib      *mock.Interface
	devices  []*mock.Device
	set      *mock.EventSet
	mu       sync.Mutex // guards queue
	queue    []nvml.EventData
	shutdown int
}

func newMockNVML(gpus ...*mockGPU) *mockNVML {
	m := &mockNVML{}
	for _, g := range gpus {
		m.devices = append(m.devices, g.device())
	}
	m.set = &mock.EventSet{
		WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
			m.mu.Lock()
			defer m.mu.Unlock()
			if len(m.queue) == 0 {
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
			ev := m.queue[0]
			m.queue = m.queue[1:]
			return ev, nvml.SUCCESS
		},
		FreeFunc: func() nvml.Return { return nvml.SUCCESS },
	}
	m.lib = &mock.Interface{
		InitFunc:                       func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:                   func() nvml.Return { m.shutdown++; return nvml.SUCCESS },
		DeviceGetCountFunc:             func() (int, nvml.Return) { return len(m.devices), nvml.SUCCESS },
		SystemGetDriverVersionFunc:     func() (string, nvml.Return) { return "560.35.03", nvml.SUCCESS },
		SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) { return 12060, nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			return m.devices[i], nvml.SUCCESS
		},
		EventSetCreateFunc: func() (nvml.EventSet, nvml.Return) { return m.set, nvml.SUCCESS },
	}
	return m
}

func (m *mockNVML) push(events ...nvml.EventData) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.queue = append(m.queue, events...)
}

// hgx is an HGX board: n GPUs, each with 18 links spread over 4 NVSwitches.
func hgx(n int) []*mockGPU {
	gpus := make([]*mockGPU, n)
	for i := range gpus {
		g := &mockGPU{index: i, uuid: fmt.Sprintf("GPU-%d", i), bus: fmt.Sprintf("00000000:%02X:00.0", 0x18+i*0x10),
			numa: i / 4, mig: nvml.DEVICE_MIG_DISABLE, events: nvmlHealthEvents}
		for l := range 18 {
			g.links = append(g.links, mockLink{remoteBus: fmt.Sprintf("00000000:%02X:00.0", 0x05+l%4), kind: nvml.NVLINK_DEVICE_TYPE_SWITCH})
		}
		gpus[i] = g
	}
	return gpus
}

func openMock(t *testing.T, m *mockNVML, sysfs string) (*NVMLDevices, *bytes.Buffer) {
	t.Helper()
	var log bytes.Buffer
	n := openNVML(m.lib, sysfs, slog.New(slog.NewTextHandler(&log, nil)))
	t.Cleanup(func() { n.Close() })
	return n, &log
}

func TestNVMLBroken(t *testing.T) {
	tests := []struct {
		name   string
		init   func() nvml.Return
		count  func() (int, nvml.Return)
		reason string
	}{
		{"no library", func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }, nil, "libnvidia-ml.so.1 not found"},
		{"no driver", func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }, nil, "kernel driver is not loaded"},
		{"mismatch", func() nvml.Return { return nvml.ERROR_LIB_RM_VERSION_MISMATCH }, nil, "does not match the loaded kernel driver"},
		{"panic", func() nvml.Return { panic("undefined symbol: nvmlInit_v2") }, nil, "undefined symbol"},
		{"count fails", nil, func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }, "cannot count the GPUs"},
		{"absurd count", nil, func() (int, nvml.Return) { return 1 << 20, nvml.SUCCESS }, "cannot count the GPUs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMockNVML(hgx(2)...)
			if tt.init != nil {
				m.lib.InitFunc = tt.init
			}
			if tt.count != nil {
				m.lib.DeviceGetCountFunc = tt.count
			}
			n, _ := openMock(t, m, t.TempDir())
			d := discover(t, n)
			if d.Source != SourceNone || len(d.GPUs) != 0 || !strings.Contains(d.Reason, tt.reason) || strings.Contains(d.Reason, "\n") {
				t.Errorf("Discover = %+v; want source none and one line saying %q", d, tt.reason)
			}
			if s := sample(t, n); len(s.GPUs)+len(s.Processes) != 0 {
				t.Errorf("Sample = %+v; want nothing", s)
			}
			if ev := healthEvents(t, n); len(ev) != 0 {
				t.Errorf("HealthEvents = %+v; want nothing", ev)
			}
			if tt.count != nil && m.shutdown != 1 {
				t.Errorf("NVML shut down %d times after a failed count, want once", m.shutdown)
			}
		})
	}
}

func TestNVMLDiscoverHGX(t *testing.T) {
	gpus := hgx(8)
	// GPU 5 is in MIG mode without instances: listed, unhealthy, and nobody's NVLink peer.
	gpus[5].mig, gpus[5].migMax = nvml.DEVICE_MIG_ENABLE, 7
	gpus[6].mig = -1
	n, _ := openMock(t, newMockNVML(gpus...), t.TempDir())
	d := discover(t, n)
	if d.Source != SourceNVML || d.DriverVersion != "560.35.03" || d.CUDAVersion != "12.6" || len(d.GPUs) != 8 {
		t.Fatalf("Discover = %s %q %q with %d GPUs", d.Source, d.DriverVersion, d.CUDAVersion, len(d.GPUs))
	}
	for i, g := range d.GPUs {
		var others []int
		for j := range 8 {
			if j != i && j != 5 && i != 5 {
				others = append(others, j)
			}
		}
		wantMIG := map[int]string{5: "enabled", 6: ""}[i]
		if i != 5 && i != 6 {
			wantMIG = "disabled"
		}
		want := api.GPU{Index: i, UUID: gpus[i].uuid, Model: "NVIDIA H200", MemoryMB: 143771, Healthy: i != 5,
			PCIBusID: gpus[i].bus, NUMANode: &[]int{i / 4}[0], NVLinkPeers: others, MIGMode: wantMIG}
		if i == 5 {
			want.Health = migNoInstances
		}
		if !reflect.DeepEqual(g, want) {
			t.Errorf("GPU %d = %+v\nwant %+v", i, g, want)
		}
	}
}

func TestNVMLDiscoverDirectLinks(t *testing.T) {
	// Four PCIe cards, bridged in pairs 0-1 and 2-3; GPU 3 reports the far end in the old
	// 4-digit lower-case form, and GPU 2 cannot tell the far end's type. NUMA comes from
	// sysfs, where NVML does not support it.
	buses := []string{"00000000:1B:00.0", "00000000:43:00.0", "00000000:52:00.0", "00000000:9D:00.0"}
	gpus := make([]*mockGPU, 4)
	for i := range gpus {
		gpus[i] = &mockGPU{index: i, uuid: fmt.Sprintf("GPU-%d", i), bus: buses[i], numa: -1, mig: -1}
	}
	gpus[0].links = []mockLink{{remoteBus: buses[1], kind: nvml.NVLINK_DEVICE_TYPE_GPU}, {remoteBus: buses[1], kind: nvml.NVLINK_DEVICE_TYPE_GPU}}
	gpus[1].links = []mockLink{{remoteBus: buses[0], kind: nvml.NVLINK_DEVICE_TYPE_GPU}, {remoteBus: buses[2], down: true}}
	gpus[2].links = []mockLink{{remoteBus: buses[3], kind: nvml.NVLINK_DEVICE_TYPE_UNKNOWN}}
	gpus[3].links = []mockLink{{remoteBus: "0000:52:00.0", kind: nvml.NVLINK_DEVICE_TYPE_GPU},
		{remoteBus: "00000000:FF:00.0", kind: nvml.NVLINK_DEVICE_TYPE_GPU}} // a GPU NVML does not list
	sysfs := t.TempDir()
	for i, numa := range []string{"0", "0", "1\n", "-1"} {
		dir := filepath.Join(sysfs, "bus", "pci", "devices", strings.ToLower(buses[i][4:]))
		os.MkdirAll(dir, 0o755)
		writeFile(t, filepath.Join(dir, "numa_node"), numa)
	}
	m := newMockNVML(gpus...)
	// A fifth device NVML counts but cannot open: listed, unhealthy, so the count stays true.
	m.lib.DeviceGetCountFunc = func() (int, nvml.Return) { return 5, nvml.SUCCESS }
	m.lib.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 4 {
			return nil, nvml.ERROR_UNKNOWN
		}
		return m.devices[i], nvml.SUCCESS
	}
	n, _ := openMock(t, m, sysfs)
	d := discover(t, n)
	if got, want := peersOf(d), map[int][]int{0: {1}, 1: {0}, 2: {3}, 3: {2}, 4: nil}; !reflect.DeepEqual(got, want) {
		t.Errorf("peers = %v, want %v", got, want)
	}
	wantNUMA := []any{0, 0, 1, nil}
	for i, want := range wantNUMA {
		var got any
		if p := d.GPUs[i].NUMANode; p != nil {
			got = *p
		}
		if got != want {
			t.Errorf("GPU %d NUMA node %v, want %v", i, got, want)
		}
	}
	if g := d.GPUs[4]; g.Healthy || !strings.Contains(g.Health, "NVML cannot open it") {
		t.Errorf("unopenable GPU = %+v; want unhealthy with the reason", g)
	}
}

func TestNVMLSample(t *testing.T) {
	gpus := hgx(3)
	gpus[0].procs = []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 300 << 20}, {Pid: uint32(os.Getpid()), UsedGpuMemory: nvmlValueNotAvailable}}
	// 4242 also draws: listed once, with the larger figure.
	gpus[0].gfx = []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 100 << 20}}
	n, _ := openMock(t, newMockNVML(gpus...), t.TempDir())
	s := sample(t, n)
	wantGPUs := []api.GPUSample{
		{Index: 0, UtilizationPct: 10, MemoryUsedMB: 2048, PowerW: 312.5, TemperatureC: 41},
		{Index: 1, UtilizationPct: 20, MemoryUsedMB: 2048, PowerW: 312.5, TemperatureC: 41},
		{Index: 2, UtilizationPct: 30, MemoryUsedMB: 2048, PowerW: 312.5, TemperatureC: 41},
	}
	if !reflect.DeepEqual(s.GPUs, wantGPUs) {
		t.Errorf("GPUs = %+v\nwant %+v", s.GPUs, wantGPUs)
	}
	wantProcs := []api.GPUProcess{{GPU: 0, PID: 4242, MemoryMB: 300, Command: processCommand(4242)},
		{GPU: 0, PID: os.Getpid(), MemoryMB: 0, Command: processCommand(os.Getpid())}}
	if os.Getpid() < 4242 {
		wantProcs[0], wantProcs[1] = wantProcs[1], wantProcs[0]
	}
	if !reflect.DeepEqual(s.Processes, wantProcs) {
		t.Errorf("processes = %+v\nwant %+v", s.Processes, wantProcs)
	}
	if s.Time.IsZero() {
		t.Error("the sample has no time")
	}
}

func TestNVMLHealthEvents(t *testing.T) {
	gpus := hgx(4)
	gpus[3].events, gpus[3].eventsRet = 0, nvml.ERROR_NOT_SUPPORTED
	m := newMockNVML(gpus...)
	n, log := openMock(t, m, t.TempDir())
	if ev := healthEvents(t, n); len(ev) != 0 {
		t.Fatalf("no faults yet, events %+v", ev)
	}
	m.push(
		nvml.EventData{Device: m.devices[1], EventType: nvml.EventTypeXidCriticalError, EventData: 79},
		nvml.EventData{Device: m.devices[0], EventType: nvml.EventTypeXidCriticalError, EventData: 13},
		nvml.EventData{Device: m.devices[2], EventType: nvml.EventTypeDoubleBitEccError},
		nvml.EventData{Device: m.devices[2], EventType: nvml.EventTypeSingleBitEccError},
		nvml.EventData{Device: nil, EventType: nvml.EventTypeXidCriticalError, EventData: 79},
	)
	got := healthEvents(t, n)
	want := []HealthEvent{
		xidEvent(1, 79), xidEvent(0, 13), eccEvent(2, 1),
		{GPU: 2, Kind: HealthECC, Code: 1, Message: "1 corrected (single-bit) ECC error"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events = %+v\nwant %+v", got, want)
	}
	for i, d := range m.devices {
		calls := len(d.RegisterEventsCalls())
		wantCalls := 1
		if i == 3 {
			wantCalls = 0
		}
		if calls != wantCalls {
			t.Errorf("GPU %d registered for events %d times, want %d", i, calls, wantCalls)
		}
		if i < 3 && d.RegisterEventsCalls()[0].V != nvmlHealthEvents {
			t.Errorf("GPU %d registered for %#x, want %#x", i, d.RegisterEventsCalls()[0].V, nvmlHealthEvents)
		}
	}
	if c := strings.Count(log.String(), "no XID or ECC events"); c != 1 {
		t.Errorf("the GPU without events was logged %d times, want once:\n%s", c, log)
	}

	// GPU 2 falls off the bus: Sample finds it, the next HealthEvents reports it once,
	// and it leaves Discover and Sample.
	gpus[2].lose()
	if s := sample(t, n); len(s.GPUs) != 3 {
		t.Errorf("Sample read %d GPUs with one lost, want 3", len(s.GPUs))
	}
	got = healthEvents(t, n)
	if len(got) != 1 || got[0].GPU != 2 || got[0].Kind != HealthVanished || !got[0].Fatal || !strings.Contains(got[0].Message, "ERROR_GPU_IS_LOST") {
		t.Errorf("events = %+v; want GPU 2 vanished", got)
	}
	// GPU 3 (no events) vanishes too, found by its UUID no longer reading.
	gpus[3].lose()
	got = healthEvents(t, n)
	if len(got) != 1 || got[0].GPU != 3 || got[0].Kind != HealthVanished {
		t.Errorf("events = %+v; want GPU 3 vanished", got)
	}
	if ev := healthEvents(t, n); len(ev) != 0 {
		t.Errorf("vanishes reported again: %+v", ev)
	}
	d := discover(t, n)
	if len(d.GPUs) != 2 || !reflect.DeepEqual(d.GPUs[0].NVLinkPeers, []int{1}) {
		t.Errorf("after two vanished, Discover = %+v; want GPUs 0 and 1, peers of each other", d.GPUs)
	}

	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if len(m.set.FreeCalls()) != 1 || m.shutdown != 1 {
		t.Errorf("Close freed the set %d times and shut NVML down %d times; want once each", len(m.set.FreeCalls()), m.shutdown)
	}
	if d := discover(t, n); d.Source != SourceNone {
		t.Errorf("after Close, source %q", d.Source)
	}
	n.Close()
	if m.shutdown != 1 {
		t.Error("a second Close shut NVML down again")
	}
}

// A driver that never stops answering the wait cannot hold HealthEvents in a loop.
func TestNVMLEventFlood(t *testing.T) {
	m := newMockNVML(hgx(1)...)
	m.set.WaitFunc = func(uint32) (nvml.EventData, nvml.Return) {
		return nvml.EventData{Device: m.devices[0], EventType: nvml.EventTypeXidCriticalError, EventData: 31}, nvml.SUCCESS
	}
	n, _ := openMock(t, m, t.TempDir())
	if got := healthEvents(t, n); len(got) != maxNVMLEventsPerRun {
		t.Errorf("%d events from a flood, want the bound %d", len(got), maxNVMLEventsPerRun)
	}
	// A wait that fails is logged once, not at every call.
	m.set.WaitFunc = func(uint32) (nvml.EventData, nvml.Return) { return nvml.EventData{}, nvml.ERROR_UNKNOWN }
	n2, log := openMock(t, m, t.TempDir())
	for range 3 {
		healthEvents(t, n2)
	}
	if c := strings.Count(log.String(), "NVML event wait failed"); c != 1 {
		t.Errorf("a failing wait was logged %d times, want once", c)
	}
}

func TestBusIDForms(t *testing.T) {
	for in, want := range map[string]string{
		"0000:1b:00.0":     "00000000:1B:00.0",
		"00000000:1B:00.0": "00000000:1B:00.0",
		" 0001:9d:00.0 ":   "00000001:9D:00.0",
		"garbage":          "GARBAGE",
	} {
		if got := normalizeBusID(in); got != want {
			t.Errorf("normalizeBusID(%q) = %q, want %q", in, got, want)
		}
	}
	if got := sysfsBusID("00000000:1B:00.0"); got != "0000:1b:00.0" {
		t.Errorf("sysfsBusID = %q", got)
	}
}

// On a machine with an NVIDIA driver this reads the real GPUs; `go test -v -run
// TestNVMLRealGPU ./internal/agent` prints what rota sees there.
func TestNVMLRealGPU(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err != nil {
		t.Skip("no NVIDIA driver on this machine")
	}
	n := OpenNVML(slog.New(slog.NewTextHandler(t.Output(), nil)))
	defer n.Close()
	d := discover(t, n)
	t.Logf("source %s, driver %s, CUDA %s, reason %q", d.Source, d.DriverVersion, d.CUDAVersion, d.Reason)
	if d.Source != SourceNVML || len(d.GPUs) == 0 {
		t.Fatalf("a machine with the driver gave source %q and %d GPUs: %s", d.Source, len(d.GPUs), d.Reason)
	}
	for _, g := range d.GPUs {
		numa := "?"
		if g.NUMANode != nil {
			numa = fmt.Sprint(*g.NUMANode)
		}
		t.Logf("GPU %d %s %s %d MiB bus %s NUMA %s NVLink %v MIG %q healthy %v %s",
			g.Index, g.UUID, g.Model, g.MemoryMB, g.PCIBusID, numa, g.NVLinkPeers, g.MIGMode, g.Healthy, g.Health)
		uuidPrefix := "GPU-"
		if g.MIGParent != nil {
			uuidPrefix = "MIG-"
			t.Logf("  MIG device of GPU %d, profile %s", *g.MIGParent, g.MIGProfile)
		}
		if !g.Healthy || !strings.HasPrefix(g.UUID, uuidPrefix) || g.MemoryMB <= 0 || normalizeBusID(g.PCIBusID) != g.PCIBusID {
			t.Errorf("GPU %d = %+v", g.Index, g)
		}
	}
	s := sample(t, n)
	if len(s.GPUs) != len(d.GPUs) {
		t.Errorf("sampled %d GPUs of %d", len(s.GPUs), len(d.GPUs))
	}
	for _, g := range s.GPUs {
		t.Logf("GPU %d: %.0f %% busy (unknown: %v), %d MiB used, %.1f W, %.0f °C", g.Index, g.UtilizationPct, g.UtilizationUnknown, g.MemoryUsedMB, g.PowerW, g.TemperatureC)
		if g.UtilizationPct < 0 || g.UtilizationPct > 100 || g.TemperatureC <= 0 || g.TemperatureC > 150 {
			t.Errorf("GPU %d reading out of range: %+v", g.Index, g)
		}
	}
	for _, p := range s.Processes {
		t.Logf("process %d (%s) holds %d MiB on GPU %d", p.PID, p.Command, p.MemoryMB, p.GPU)
	}
	for range 2 {
		ev, err := n.HealthEvents()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ev {
			t.Logf("health event: %+v", e)
			if e.Kind == HealthVanished {
				t.Errorf("GPU %d reads as vanished: %s", e.GPU, e.Message)
			}
		}
	}
}

func TestNVMLMIG(t *testing.T) {
	gpus := hgx(5)
	// GPU 0: MIG devices in slots 0 and 2, one named as NVML names them, one whose name
	// lacks the profile (made up from its attributes); slot 1 is empty.
	g0 := gpus[0]
	g0.mig, g0.migMax = nvml.DEVICE_MIG_ENABLE, 7
	g0.migs = map[int]*mock.Device{
		0: g0.mockMIG("MIG-a", "NVIDIA H200 MIG 3g.71gb", 71*1024, 5000, 3, 3, nvml.ProcessInfo{Pid: 4242, UsedGpuMemory: 4900 << 20}),
		2: g0.mockMIG("MIG-c", "NVIDIA H200", 16384, 0, 1, 1),
	}
	// GPU 1: MIG mode, but NVML cannot count its MIG devices; GPU 3: the binding panics;
	// GPU 4: a MIG device whose UUID cannot be read. Each is reported whole, with a log
	// line, as GPU 2 (MIG off) is.
	gpus[1].mig, gpus[1].migMaxRet = nvml.DEVICE_MIG_ENABLE, nvml.ERROR_UNKNOWN
	gpus[3].mig, gpus[3].migMax = nvml.DEVICE_MIG_ENABLE, 7
	gpus[4].mig, gpus[4].migMax = nvml.DEVICE_MIG_ENABLE, 7
	gpus[4].migs = map[int]*mock.Device{0: {GetUUIDFunc: func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }}}
	m := newMockNVML(gpus...)
	m.devices[3].GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { panic("undefined symbol: nvmlDeviceGetMaxMigDeviceCount") }
	n, log := openMock(t, m, t.TempDir())

	d := discover(t, n)
	var indices []int
	for _, g := range d.GPUs {
		indices = append(indices, g.Index)
	}
	if !reflect.DeepEqual(indices, []int{100, 102, 1, 2, 3, 4}) {
		t.Fatalf("devices %v; want GPU 0's MIG devices 100 and 102, then GPUs 1 to 4 whole", indices)
	}
	zero := 0
	want := []api.GPU{
		{Index: 100, UUID: "MIG-a", Model: "NVIDIA H200 MIG 3g.71gb", MemoryMB: 71 * 1024, Healthy: true, PCIBusID: gpus[0].bus,
			NUMANode: &zero, MIGMode: "enabled", MIGParent: &zero, MIGProfile: "3g.71gb"},
		{Index: 102, UUID: "MIG-c", Model: "NVIDIA H200 MIG 1g.16gb", MemoryMB: 16384, Healthy: true, PCIBusID: gpus[0].bus,
			NUMANode: &zero, MIGMode: "enabled", MIGParent: &zero, MIGProfile: "1g.16gb"},
	}
	if !reflect.DeepEqual(d.GPUs[:2], want) {
		t.Errorf("MIG devices = %+v\nwant %+v", d.GPUs[:2], want)
	}
	for _, g := range d.GPUs[2:] {
		if !g.Healthy || g.MIGParent != nil || slices.Contains(g.NVLinkPeers, 0) || (g.Index != 2) != (g.MIGMode == "enabled") {
			t.Errorf("GPU %d = %+v; want it whole and healthy, in its MIG mode, without GPU 0 as a peer", g.Index, g)
		}
	}
	for _, why := range []string{"gpu=1 why=\"cannot count its MIG devices", "gpu=3 why=\"NVML panicked", "gpu=4 why=\"MIG device 0: cannot read its UUID"} {
		if !strings.Contains(log.String(), why) {
			t.Errorf("no log line with %q:\n%s", why, log)
		}
	}

	// A MIG device reads its memory and processes, no utilisation, and its GPU's
	// temperature.
	s := sample(t, n)
	wantSamples := []api.GPUSample{
		{Index: 100, UtilizationUnknown: true, MemoryUsedMB: 5000, TemperatureC: 41},
		{Index: 102, UtilizationUnknown: true, MemoryUsedMB: 0, TemperatureC: 41},
	}
	if !reflect.DeepEqual(s.GPUs[:2], wantSamples) || len(s.GPUs) != 6 {
		t.Errorf("samples = %+v\nwant %+v then the four whole GPUs", s.GPUs, wantSamples)
	}
	if len(s.Processes) != 1 || s.Processes[0].GPU != 100 || s.Processes[0].PID != 4242 || s.Processes[0].MemoryMB != 4900 {
		t.Errorf("processes = %+v; want 4242 on MIG device 100", s.Processes)
	}

	// A fault of GPU 0, reported against the GPU or against one of its MIG devices, is a
	// fault of each MIG device.
	m.push(nvml.EventData{Device: m.devices[0], EventType: nvml.EventTypeXidCriticalError, EventData: 48},
		nvml.EventData{Device: g0.migs[2], EventType: nvml.EventTypeXidCriticalError, EventData: 43},
		nvml.EventData{Device: m.devices[2], EventType: nvml.EventTypeXidCriticalError, EventData: 79})
	var got []string
	for _, ev := range healthEvents(t, n) {
		got = append(got, fmt.Sprintf("%d %d %v", ev.GPU, ev.Code, ev.Fatal))
		if ev.GPU >= 100 && !strings.Contains(ev.Message, "on its GPU 0") {
			t.Errorf("event %+v does not name GPU 0", ev)
		}
	}
	if w := []string{"100 48 true", "102 48 true", "100 43 false", "102 43 false", "2 79 true"}; !reflect.DeepEqual(got, w) {
		t.Errorf("events %v; want %v", got, w)
	}

	// GPU 0 falls off the bus: each of its MIG devices vanishes, once.
	g0.lose()
	sample(t, n)
	got = nil
	for _, ev := range healthEvents(t, n) {
		got = append(got, fmt.Sprintf("%d %s", ev.GPU, ev.Kind))
	}
	if w := []string{"100 vanished", "102 vanished"}; !reflect.DeepEqual(got, w) {
		t.Errorf("events after GPU 0 was lost: %v; want %v", got, w)
	}
	if d := discover(t, n); len(d.GPUs) != 4 || d.GPUs[0].Index != 1 {
		t.Errorf("after GPU 0 was lost, Discover = %+v; want GPUs 1 to 4", d.GPUs)
	}
}

// MIG devices are numbered only where the numbers fit: on a node of more GPUs than
// migMaxGPUs, a GPU in MIG mode is reported whole.
func TestNVMLMIGTooManyGPUs(t *testing.T) {
	gpus := make([]*mockGPU, migMaxGPUs+1)
	for i := range gpus {
		gpus[i] = &mockGPU{index: i, uuid: fmt.Sprintf("GPU-%d", i), bus: fmt.Sprintf("00000000:%02X:00.0", i), numa: -1, mig: nvml.DEVICE_MIG_DISABLE}
	}
	gpus[0].mig, gpus[0].migMax = nvml.DEVICE_MIG_ENABLE, 7
	gpus[0].migs = map[int]*mock.Device{0: gpus[0].mockMIG("MIG-a", "NVIDIA H200 MIG 7g.141gb", 141*1024, 0, 7, 7)}
	n, log := openMock(t, newMockNVML(gpus...), t.TempDir())
	d := discover(t, n)
	if len(d.GPUs) != migMaxGPUs+1 || d.GPUs[0].Index != 0 || d.GPUs[0].MIGMode != "enabled" || !d.GPUs[0].Healthy {
		t.Errorf("GPU 0 = %+v of %d; want it whole", d.GPUs[0], len(d.GPUs))
	}
	if !strings.Contains(log.String(), "nodes of at most 90 GPUs") {
		t.Errorf("no log line says why:\n%s", log)
	}
}

// A GPU in MIG mode NVML cannot fully read now makes its MIG devices unhealthy, with the
// reason, rather than dropping them or reporting the GPU beside them.
func TestNVMLMIGUnreadableGPU(t *testing.T) {
	gpus := hgx(1)
	gpus[0].mig, gpus[0].migMax = nvml.DEVICE_MIG_ENABLE, 7
	gpus[0].migs = map[int]*mock.Device{3: gpus[0].mockMIG("MIG-d", "NVIDIA H200 MIG 7g.141gb", 141*1024, 0, 7, 7)}
	m := newMockNVML(gpus...)
	m.devices[0].GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_UNKNOWN }
	n, _ := openMock(t, m, t.TempDir())
	d := discover(t, n)
	if len(d.GPUs) != 1 || d.GPUs[0].Index != 103 || d.GPUs[0].Healthy || !strings.Contains(d.GPUs[0].Health, "NVML cannot read its memory") {
		t.Errorf("Discover = %+v; want MIG device 103, unhealthy with the GPU's reason", d.GPUs)
	}
}
