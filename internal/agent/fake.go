package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// Fake GPUs stand in for real ones in tests and demos, so a laptop can play a GPU cluster.
const (
	defaultFakeModel    = "NVIDIA H100 80GB HBM3"
	defaultFakeMemoryMB = 81559
	defaultFakeVersion  = "fake"
	maxFakeGPUs         = 64
	// A fake GPU node offers at least this much per GPU, like a real one would, so that
	// jobs sized for real GPU servers fit on a small machine playing one.
	fakeCPUsPerGPU     = 8
	fakeMemoryMBPerGPU = 64 * 1024
)

// EnvFakeGPUDir names the variable that tells a job where to register its use of fake
// GPUs (see FakeDevices).
const EnvFakeGPUDir = "ROTA_FAKE_GPU_DIR"

// FakeDevices is a set of GPUs that do not exist, with the behaviour of real ones: load
// from the jobs that "use" them, metric curves, and faults injected on a schedule, from
// files or from a test.
//
// Jobs take part through the state directory Dir, whose path the agent passes to them as
// $ROTA_FAKE_GPU_DIR (JobEnv). A process says it uses fake GPUs by writing a file
// procs/<its pid> holding one JSON object or a list of them, each {"gpu": 0, "memory_mb":
// 300, "utilization_pct": 90} ("gpu" is an index or a UUID; the other two default to 0).
// From a shell:
//
//	echo '{"gpu":0,"memory_mb":300,"utilization_pct":90}' > $ROTA_FAKE_GPU_DIR/procs/$$
//
// Sample then lists the process on that GPU and adds its memory and utilisation to the
// GPU's reading, until the process exits; the file of a dead process is removed. An empty
// file (one being written) is passed over; one that is not valid is skipped and counted
// (Malformed), never fatal. A process in another PID namespace (a container) must write
// the PID the host sees.
//
// A test injects a fault by dropping a file in faults/ holding {"gpu": 3, "xid": 79},
// {"gpu": 3, "ecc": 1} or {"gpu": 3, "vanish": true}. The next HealthEvents reads it,
// removes it and reports the fault. Write such a file under a name starting with "." and
// rename it into place: dot files are left alone, so a half-written one is never read.
//
// Dir is created on first use, with mode 01777 so that jobs running as any user can write
// there (each can remove only its own files). Without a Dir there are no processes and no
// fault files; faults come only from the config's schedule and Inject.
//
// All methods may be called from different goroutines.
type FakeDevices struct {
	// GPUs is the set as configured. It does not change after loading: a GPU that
	// vanished is left out of what Discover returns, not removed here. A GPU in MIG
	// mode is listed here; Discover reports its MIG devices instead.
	GPUs []api.GPU
	// Dir is the state directory; set it before the first call.
	Dir string
	// Logger receives a line for each registration or fault file skipped; nil discards.
	Logger *slog.Logger

	driverVersion string
	cudaVersion   string
	curves        []fakeCurve // per GPU
	// mig holds the MIG devices of the GPUs in MIG mode, by GPU index; a GPU in MIG mode
	// without any has an empty entry.
	mig map[int][]migInstance
	// now is the clock, injectable so tests need not sleep; start is when the set was
	// made, from which scheduled faults and metric curves count.
	now   func() time.Time
	start time.Time

	mu        sync.Mutex // guards the fields below
	dirReady  bool
	scheduled []fakeFault   // faults of the config not yet fired
	pending   []HealthEvent // injected, not yet reported
	vanished  map[int]bool  // by device number: a whole GPU's or a MIG device's
	malformed int
	// badFiles remembers the registration files already counted as malformed, by name,
	// size and modification time, so that one bad file is counted once, not at every
	// Sample, and counted again when it is rewritten.
	badFiles map[string]bool
}

// fakeCurve is how one GPU's metrics move when nothing uses it and how they scale with
// utilisation.
type fakeCurve struct {
	utilBase, utilAmplitude float64
	utilPeriod              time.Duration
	powerIdle, powerMax     float64
	tempIdle, tempMax       float64
}

// defaultFakeCurve is an idle H100 SXM: 0 % busy, 70 to 700 W, 30 to 80 °C.
var defaultFakeCurve = fakeCurve{powerIdle: 70, powerMax: 700, tempIdle: 30, tempMax: 80}

// fakeFault is a fault the config schedules.
type fakeFault struct {
	after time.Duration
	event HealthEvent
}

// newFakeDevices assembles a fake set; gpus must be indexed 0 to len-1.
func newFakeDevices(gpus []api.GPU, curves []fakeCurve, faults []fakeFault, driver, cuda string) *FakeDevices {
	f := &FakeDevices{
		GPUs:          gpus,
		driverVersion: driver,
		cudaVersion:   cuda,
		curves:        curves,
		now:           time.Now,
		scheduled:     faults,
		vanished:      map[int]bool{},
		badFiles:      map[string]bool{},
	}
	f.start = f.now()
	return f
}

// fakeGPU describes fake GPU i of n on node: well-formed PCI bus ids, the first half of the
// GPUs on NUMA node 0 and the second on node 1, as on a two-socket server, and MIG off.
func fakeGPU(node string, i, n int, model string, memMB int64) api.GPU {
	numa := 0
	if i >= (n+1)/2 && n > 1 {
		numa = 1
	}
	return api.GPU{
		Index:    i,
		UUID:     fakeUUID(node, i),
		Model:    model,
		MemoryMB: memMB,
		Healthy:  true,
		// Buses 0x18, 0x1B, ... like the spread of an HGX board, all in domain 0.
		PCIBusID: fmt.Sprintf("00000000:%02X:00.0", 0x18+3*i),
		NUMANode: &numa,
		MIGMode:  "disabled",
	}
}

// Discover returns the fake set less the GPUs that vanished.
func (f *FakeDevices) Discover() (Discovery, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	gpus := make([]api.GPU, 0, len(f.GPUs))
	for _, g := range f.GPUs {
		if f.vanished[g.Index] {
			continue
		}
		// Copy what the caller could otherwise change under us.
		if g.NUMANode != nil {
			numa := *g.NUMANode
			g.NUMANode = &numa
		}
		g.NVLinkPeers = slices.DeleteFunc(slices.Clone(g.NVLinkPeers), func(p int) bool { return f.vanished[p] })
		if len(g.NVLinkPeers) == 0 {
			g.NVLinkPeers = nil
		}
		if instances, on := f.mig[g.Index]; on {
			for _, d := range migDevices(g, instances) {
				if !f.vanished[d.Index] {
					gpus = append(gpus, d)
				}
			}
			continue
		}
		gpus = append(gpus, g)
	}
	return Discovery{
		GPUs:          gpus,
		DriverVersion: f.driverVersion,
		CUDAVersion:   f.cudaVersion,
		Source:        SourceFake,
	}, nil
}

// Sample reads the fake GPUs: each one's curve plus the load of the processes registered
// on it, and those processes.
func (f *FakeDevices) Sample() (Sample, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	s := Sample{Time: now}
	uses := f.readRegistrations()
	memory := map[int]int64{}
	util := map[int]float64{}
	for _, u := range uses {
		memory[u.gpu] += u.memoryMB
		util[u.gpu] += u.utilPct
		s.Processes = append(s.Processes, api.GPUProcess{GPU: u.gpu, PID: u.pid, MemoryMB: u.memoryMB, Command: u.command})
	}
	elapsed := now.Sub(f.start)
	for _, g := range f.GPUs {
		if f.vanished[g.Index] {
			continue
		}
		c := f.curves[g.Index]
		if instances, on := f.mig[g.Index]; on && len(instances) > 0 {
			s.GPUs = append(s.GPUs, f.sampleMIG(g, instances, c.idleUtilization(elapsed), memory, util)...)
			continue
		}
		pct := min(100, c.idleUtilization(elapsed)+util[g.Index])
		s.GPUs = append(s.GPUs, api.GPUSample{
			Index:          g.Index,
			UtilizationPct: pct,
			MemoryUsedMB:   min(g.MemoryMB, memory[g.Index]),
			PowerW:         c.powerIdle + (c.powerMax-c.powerIdle)*pct/100,
			TemperatureC:   c.tempIdle + (c.tempMax-c.tempIdle)*pct/100,
		})
	}
	return s, nil
}

// sampleMIG reads the MIG devices of GPU g as NVML does: each one's memory, no
// utilisation (NVML gives none per MIG device) and no power of its own, and the GPU's
// temperature, which its load from every instance sets. The caller holds f.mu.
func (f *FakeDevices) sampleMIG(g api.GPU, instances []migInstance, idle float64, memory map[int]int64, util map[int]float64) []api.GPUSample {
	c := f.curves[g.Index]
	pct := idle
	for _, m := range instances {
		pct += util[migIndex(g.Index, m.n)]
	}
	pct = min(100, pct)
	var out []api.GPUSample
	for _, m := range instances {
		i := migIndex(g.Index, m.n)
		if f.vanished[i] {
			continue
		}
		out = append(out, api.GPUSample{
			Index:              i,
			UtilizationUnknown: true,
			MemoryUsedMB:       min(m.memoryMB, memory[i]),
			TemperatureC:       c.tempIdle + (c.tempMax-c.tempIdle)*pct/100,
		})
	}
	return out
}

// idleUtilization is the curve's utilisation at elapsed: base plus a sine wave, within
// 0 to 100.
func (c fakeCurve) idleUtilization(elapsed time.Duration) float64 {
	u := c.utilBase
	if c.utilAmplitude != 0 && c.utilPeriod > 0 {
		phase := float64(elapsed%c.utilPeriod) / float64(c.utilPeriod)
		u += c.utilAmplitude * math.Sin(2*math.Pi*phase)
	}
	return min(100, max(0, u))
}

// HealthEvents reports the faults injected since the last call, those of the schedule
// whose time has come, and those of fault files, in that order. A vanish takes the GPU
// out of Discover and Sample; faults of a GPU that already vanished are dropped.
func (f *FakeDevices) HealthEvents() ([]HealthEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	events := f.pending
	f.pending = nil
	elapsed := f.now().Sub(f.start)
	f.scheduled = slices.DeleteFunc(f.scheduled, func(s fakeFault) bool {
		if s.after > elapsed {
			return false
		}
		events = append(events, s.event)
		return true
	})
	events = append(events, f.readFaultFiles()...)
	var out []HealthEvent
	for _, ev := range events {
		for _, e := range migFanOut(ev, f.migDeviceIndices(ev.GPU)) {
			if f.vanished[e.GPU] {
				continue
			}
			if e.Kind == HealthVanished {
				f.vanished[e.GPU] = true
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// migDeviceIndices lists the device numbers of GPU gpu's MIG devices; nil for a GPU not
// in MIG mode, for one without instances, and for a number that is no GPU's.
func (f *FakeDevices) migDeviceIndices(gpu int) []int {
	var out []int
	for _, m := range f.mig[gpu] {
		out = append(out, migIndex(gpu, m.n))
	}
	return out
}

// Inject queues a fault for the next HealthEvents, for tests in this process. The GPU must
// be one of the set and the kind one of HealthXID, HealthECC or HealthVanished. An event
// without a Message is completed as a fault file's would be, Fatal included.
func (f *FakeDevices) Inject(ev HealthEvent) error {
	if !f.known(ev.GPU) {
		return fmt.Errorf("inject: gpu %d is out of range; want 0 to %d, or a MIG device's number", ev.GPU, len(f.GPUs)-1)
	}
	switch {
	case ev.Kind != HealthXID && ev.Kind != HealthECC && ev.Kind != HealthVanished:
		return fmt.Errorf("inject: kind %q; want %q, %q or %q", ev.Kind, HealthXID, HealthECC, HealthVanished)
	case ev.Message != "":
	case ev.Kind == HealthXID:
		ev = xidEvent(ev.GPU, ev.Code)
	case ev.Kind == HealthECC:
		ev = eccEvent(ev.GPU, ev.Code)
	default:
		ev = vanishEvent(ev.GPU)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending = append(f.pending, ev)
	return nil
}

// eccEvent describes count uncorrectable ECC errors on GPU gpu: fatal, as on real GPUs,
// where the page must be retired before the memory can be trusted again.
func eccEvent(gpu int, count uint64) HealthEvent {
	return HealthEvent{GPU: gpu, Kind: HealthECC, Code: count, Fatal: true,
		Message: fmt.Sprintf("%d uncorrectable ECC error(s)", count)}
}

// vanishEvent describes GPU gpu falling off the bus.
func vanishEvent(gpu int) HealthEvent {
	return HealthEvent{GPU: gpu, Kind: HealthVanished, Fatal: true, Message: "GPU is lost (fallen off the bus)"}
}

// Malformed counts the registration and fault files skipped because they were not valid
// (each file once, again if rewritten).
func (f *FakeDevices) Malformed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.malformed
}

// JobEnv returns the variables that tell a job where to register its use of the fake GPUs,
// creating the directory if need be. It is empty when the set has no Dir.
func (f *FakeDevices) JobEnv() map[string]string {
	if f.Dir == "" {
		return nil
	}
	f.mu.Lock()
	f.ensureDir()
	f.mu.Unlock()
	return map[string]string{EnvFakeGPUDir: f.Dir}
}

func (f *FakeDevices) logger() *slog.Logger {
	if f.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return f.Logger
}

// gbInModel finds a size like "40GB" in a model name, so "4xA100-40GB" gets 40 GiB cards.
var gbInModel = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?i)(\d+)\s*GB`) })

// modelMemoryMB is the memory of a model: the "<n>GB" in its name, else that of an H100.
func modelMemoryMB(model string) int64 {
	if m := gbInModel().FindStringSubmatch(model); m != nil {
		gb, err := strconv.ParseInt(m[1], 10, 64)
		if err == nil && gb > 0 && gb <= 1<<20 {
			return gb * 1024
		}
	}
	return defaultFakeMemoryMB
}

// ParseFakeGPUs parses the --fake-gpus spec: "N" or "NxMODEL" with N from 1 to 64. The
// memory of a named model comes from a "<n>GB" in its name, else that of an H100 80GB. UUIDs
// derive from the node name and index, so they are stable across restarts and two fake
// nodes never share one.
//
// The GPUs have no NVLink: the spec names no board, a PCIe card has none, and a link between
// every pair would leave the NVLink-aware placement nothing to choose. A config file
// (LoadFakeGPUs) describes a topology.
func ParseFakeGPUs(spec, node string) (*FakeDevices, error) {
	bad := func(why string) error {
		return fmt.Errorf("--fake-gpus %q: %s; want N or NxMODEL with N from 1 to %d (e.g. \"8\" or \"4xH100-SXM-80GB\")",
			spec, why, maxFakeGPUs)
	}
	spec = strings.TrimSpace(spec)
	countText, model, named := spec, "", false
	if i := strings.IndexAny(spec, "xX"); i >= 0 {
		countText, model, named = spec[:i], spec[i+1:], true
	}
	n, err := strconv.Atoi(countText)
	if err != nil {
		return nil, bad("the GPU count is not a number")
	}
	if n < 1 || n > maxFakeGPUs {
		return nil, bad(fmt.Sprintf("%d GPUs is out of range", n))
	}
	model = strings.TrimSpace(model)
	memMB := int64(defaultFakeMemoryMB)
	switch {
	case !named:
		model = defaultFakeModel
	case model == "":
		return nil, bad("the model after 'x' is empty")
	default:
		memMB = modelMemoryMB(model)
	}
	gpus := make([]api.GPU, n)
	curves := make([]fakeCurve, n)
	for i := range gpus {
		gpus[i] = fakeGPU(node, i, n, model, memMB)
		curves[i] = defaultFakeCurve
	}
	return newFakeDevices(gpus, curves, nil, defaultFakeVersion, defaultFakeVersion), nil
}

// fakeMIGUUID formats a hash of node, GPU and instance the way NVIDIA prints MIG device
// UUIDs.
func fakeMIGUUID(node string, gpu, j int) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("rota-fake-mig\x00%s\x00%d\x00%d", node, gpu, j)))
	h := hex.EncodeToString(sum[:16])
	return "MIG-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// known says whether index numbers a GPU of the set or one of its MIG devices.
func (f *FakeDevices) known(index int) bool {
	if index >= 0 && index < len(f.GPUs) {
		return true
	}
	p, ok := migParentOf(index)
	return ok && slices.Contains(f.migDeviceIndices(p), index)
}

// fakeUUID formats a hash of node and index the way NVIDIA prints GPU UUIDs.
func fakeUUID(node string, index int) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("rota-fake-gpu\x00%s\x00%d", node, index)))
	h := hex.EncodeToString(sum[:16])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
