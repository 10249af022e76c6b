//go:build cgo

package agent

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/rotahq/rota/internal/api"
)

// Bounds on what one call asks of NVML, so that a driver in a bad state cannot keep the
// agent in a loop.
const (
	maxNVMLDevices      = 256
	maxNVMLEventsPerRun = 1024
)

// nvmlValueNotAvailable is NVML_VALUE_NOT_AVAILABLE as an unsigned figure.
const nvmlValueNotAvailable = ^uint64(0)

// nvmlHealthEvents are the events HealthEvents asks each GPU for, those it supports.
const nvmlHealthEvents = nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError

// NVMLDevices reads the real GPUs through NVML. The library is loaded at run time, so the
// agent builds and runs on machines without a driver and then reports no GPUs. Open it with
// OpenNVML, use it as a Devices (a pointer) and Close it; its methods may be called from
// different goroutines.
type NVMLDevices struct {
	lib   nvml.Interface
	sysfs string // root of sysfs, where the NUMA node of a GPU NVML cannot tell is read
	log   *slog.Logger

	mu sync.Mutex // guards the fields below
	// reason says why NVML cannot be used (not installed, driver mismatch, closed); ""
	// when it is open.
	reason  string
	devices []nvmlDevice
	// events is the set the GPUs report faults to; nil until the first HealthEvents
	// registered it, and when no GPU supports events.
	events      nvml.EventSet
	eventsTried bool
	lastWaitErr nvml.Return
	// pending holds the vanishes Sample found, for the next HealthEvents.
	pending []HealthEvent
}

// nvmlDevice is one GPU as NVML enumerated it at open.
type nvmlDevice struct {
	handle  nvml.Device // nil when NVML gave none
	openErr string      // why there is no handle
	uuid    string
	lost    bool // reported vanished: left out of Discover and Sample since
	// migOn is set for a GPU in MIG mode whose MIG devices were all read; they are
	// then the devices reported, migs (possibly none) in NVML's order.
	migOn bool
	migs  []nvmlMIG
}

// nvmlMIG is one MIG device of a GPU.
type nvmlMIG struct {
	migInstance
	handle nvml.Device
}

// OpenNVML initialises NVML and finds the GPUs. It does not fail: where NVML cannot be used
// (no driver, a library that does not match the driver, no permission) the result reports
// source "none" with the reason, and reads nothing. logger may be nil.
func OpenNVML(logger *slog.Logger) *NVMLDevices {
	return openNVML(nvml.New(), "/sys", logger)
}

// openNVML opens NVML through lib; tests pass a mock.
func openNVML(lib nvml.Interface, sysfs string, logger *slog.Logger) (n *NVMLDevices) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	n = &NVMLDevices{lib: lib, sysfs: sysfs, log: logger}
	defer func() {
		// A library that is not the one go-nvml expects can panic in the binding; the
		// node must still come up, without GPUs.
		if r := recover(); r != nil {
			n.reason = fmt.Sprintf("NVML not available: %v", r)
			n.devices = nil
		}
	}()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		n.reason = "NVML not available: " + nvmlInitError(ret)
		return n
	}
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS || count < 0 || count > maxNVMLDevices {
		n.reason = fmt.Sprintf("NVML cannot count the GPUs: %d, %s", count, nvmlError(ret))
		lib.Shutdown()
		return n
	}
	n.devices = make([]nvmlDevice, count)
	for i := range n.devices {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			n.devices[i].openErr = nvmlError(ret)
			continue
		}
		n.devices[i].handle = h
		// A GPU whose UUID cannot be read now is listed unhealthy by Discover.
		n.devices[i].uuid, _ = h.GetUUID()
		n.devices[i].migOn, n.devices[i].migs = n.openMIG(i, count, h)
	}
	return n
}

// openMIG reads the MIG devices of GPU i of count when it is in MIG mode. It reports
// false, and the GPU is reported whole, when the GPU is not in MIG mode, and with a log
// line when its MIG devices cannot all be read or numbered.
func (n *NVMLDevices) openMIG(i, count int, h nvml.Device) (on bool, migs []nvmlMIG) {
	if mode, _, ret := h.GetMigMode(); ret != nvml.SUCCESS || mode != nvml.DEVICE_MIG_ENABLE {
		return false, nil
	}
	degrade := func(why string, args ...any) (bool, []nvmlMIG) {
		n.log.Warn("GPU is in MIG mode but its MIG devices cannot be used; reporting the whole GPU",
			"gpu", i, "why", fmt.Sprintf(why, args...))
		return false, nil
	}
	defer func() {
		// As at open, a library that does not match the binding can panic.
		if r := recover(); r != nil {
			on, migs = degrade("NVML panicked: %v", r)
		}
	}()
	if count > migMaxGPUs {
		return degrade("rota numbers MIG devices on nodes of at most %d GPUs; this one has %d", migMaxGPUs, count)
	}
	slots, ret := h.GetMaxMigDeviceCount()
	switch {
	case ret != nvml.SUCCESS:
		return degrade("cannot count its MIG devices: %s", nvmlError(ret))
	case slots < 0 || slots > migMaxDevices:
		return degrade("%d possible MIG devices; rota numbers at most %d", slots, migMaxDevices)
	}
	for j := range slots {
		m, ret := h.GetMigDeviceHandleByIndex(j)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // no MIG device in this slot
		}
		if ret != nvml.SUCCESS {
			return degrade("cannot open MIG device %d: %s", j, nvmlError(ret))
		}
		inst, err := readMIG(j, m)
		if err != nil {
			return degrade("MIG device %d: %v", j, err)
		}
		migs = append(migs, nvmlMIG{migInstance: inst, handle: m})
	}
	return true, migs
}

// readMIG reads MIG device j: UUID, memory and profile. The profile is what follows "MIG"
// in the name NVML gives the device ("NVIDIA A100-SXM4-40GB MIG 1g.5gb"), else made up
// from its slices and memory as NVIDIA forms them.
func readMIG(j int, m nvml.Device) (migInstance, error) {
	uuid, ret := m.GetUUID()
	if ret != nvml.SUCCESS || uuid == "" {
		return migInstance{}, fmt.Errorf("cannot read its UUID: %s", nvmlError(ret))
	}
	inst := migInstance{n: j, uuid: uuid}
	if name, ret := m.GetName(); ret == nvml.SUCCESS {
		if k := strings.LastIndex(name, "MIG "); k >= 0 {
			inst.profile = strings.TrimSpace(name[k+len("MIG "):])
		}
	}
	attrs, attrRet := m.GetAttributes()
	if inst.profile == "" && attrRet == nvml.SUCCESS {
		inst.profile = fmt.Sprintf("%dg.%dgb", attrs.GpuInstanceSliceCount, (attrs.MemorySizeMB+512)/1024)
		if attrs.ComputeInstanceSliceCount < attrs.GpuInstanceSliceCount {
			inst.profile = fmt.Sprintf("%dc.%s", attrs.ComputeInstanceSliceCount, inst.profile)
		}
	}
	if inst.profile == "" {
		return migInstance{}, fmt.Errorf("cannot read its name or attributes: %s", nvmlError(attrRet))
	}
	if mem, ret := m.GetMemoryInfo(); ret == nvml.SUCCESS {
		inst.memoryMB = int64(mem.Total / (1024 * 1024))
	} else if attrRet == nvml.SUCCESS {
		inst.memoryMB = int64(attrs.MemorySizeMB)
	} else {
		return migInstance{}, fmt.Errorf("cannot read its memory: %s", nvmlError(ret))
	}
	return inst, nil
}

// Close releases the event set and shuts NVML down; the set then reads nothing.
func (n *NVMLDevices) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.reason != "" {
		return nil
	}
	n.reason = "NVML closed"
	if n.events != nil {
		n.events.Free()
		n.events = nil
	}
	n.devices = nil
	if ret := n.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvml shutdown: %s", nvmlError(ret))
	}
	return nil
}

// Discover enumerates the GPUs. Without NVML (no driver, no GPU) it returns source "none"
// and a Reason, not an error: such a node still runs CPU-only jobs.
func (n *NVMLDevices) Discover() (Discovery, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.reason != "" {
		return Discovery{Source: SourceNone, Reason: n.reason}, nil
	}
	d := Discovery{Source: SourceNVML}
	if v, ret := n.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		d.DriverVersion = v
	}
	if v, ret := n.lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		d.CUDAVersion = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	d.GPUs = make([]api.GPU, 0, len(n.devices))
	busIDs := map[int]string{}
	for i, dev := range n.devices {
		if dev.lost {
			continue
		}
		g, busID := n.describe(i, dev)
		if dev.migOn {
			// NVLink is off in MIG mode: the GPU is nobody's peer. A GPU NVML
			// cannot read now makes its instances unhealthy with it.
			d.GPUs = append(d.GPUs, migDevices(g, migInstances(dev.migs))...)
			continue
		}
		d.GPUs = append(d.GPUs, g)
		if busID != "" {
			busIDs[i] = busID
		}
	}
	n.linkPeers(d.GPUs, busIDs)
	return d, nil
}

// describe reads GPU i. A device NVML cannot fully query (fallen off the bus, say) is still
// listed, as unhealthy with the reason, so the node's GPU count stays true and nothing
// lands on it. It returns the PCI bus id normalised for matching NVLink ends.
func (n *NVMLDevices) describe(i int, dev nvmlDevice) (api.GPU, string) {
	g := api.GPU{Index: i, Model: "unknown", UUID: dev.uuid}
	h := dev.handle
	if h == nil {
		g.Health = "NVML cannot open it: " + dev.openErr
		return g, ""
	}
	uuid, ret := h.GetUUID()
	if ret != nvml.SUCCESS {
		g.Health = "NVML cannot read its UUID: " + nvmlError(ret)
		return g, ""
	}
	g.UUID = uuid
	if name, ret := h.GetName(); ret == nvml.SUCCESS {
		g.Model = name
	}
	mem, ret := h.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		g.Health = "NVML cannot read its memory: " + nvmlError(ret)
		return g, ""
	}
	g.MemoryMB = int64(mem.Total / (1024 * 1024))
	g.Healthy = true
	busID := ""
	if pci, ret := h.GetPciInfo(); ret == nvml.SUCCESS {
		busID = normalizeBusID(pciBusID(pci))
		g.PCIBusID = busID
	}
	g.NUMANode = n.numaNode(h, busID)
	if current, _, ret := h.GetMigMode(); ret == nvml.SUCCESS {
		g.MIGMode = "disabled"
		if current == nvml.DEVICE_MIG_ENABLE {
			g.MIGMode = "enabled"
		}
	}
	return g, busID
}

// numaNode asks NVML for the GPU's NUMA node, and older drivers' sysfs where NVML cannot
// tell; nil when neither knows (a one-socket machine reports -1).
func (n *NVMLDevices) numaNode(h nvml.Device, busID string) *int {
	if node, ret := h.GetNumaNodeId(); ret == nvml.SUCCESS && node >= 0 {
		return &node
	}
	if busID == "" {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(n.sysfs, "bus", "pci", "devices", sysfsBusID(busID), "numa_node"))
	if err != nil {
		return nil
	}
	node, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || node < 0 {
		return nil
	}
	return &node
}

// linkPeers fills the GPUs' NVLinkPeers. A link whose far end is another GPU of this node
// makes the two peers; GPUs whose links reach the same NVSwitch are all peers of each
// other, as on an HGX board.
func (n *NVMLDevices) linkPeers(gpus []api.GPU, busIDs map[int]string) {
	byBus := map[string]int{}
	for i, bus := range busIDs {
		byBus[bus] = i
	}
	peers := map[int]map[int]bool{}
	link := func(a, b int) {
		if a == b {
			return
		}
		for _, p := range [][2]int{{a, b}, {b, a}} {
			if peers[p[0]] == nil {
				peers[p[0]] = map[int]bool{}
			}
			peers[p[0]][p[1]] = true
		}
	}
	switches := map[string][]int{}
	for i := range busIDs {
		h := n.devices[i].handle
		for l := range nvml.NVLINK_MAX_LINKS {
			if state, ret := h.GetNvLinkState(l); ret != nvml.SUCCESS || state != nvml.FEATURE_ENABLED {
				continue
			}
			pci, ret := h.GetNvLinkRemotePciInfo(l)
			if ret != nvml.SUCCESS {
				continue
			}
			remote := normalizeBusID(pciBusID(pci))
			kind, ret := h.GetNvLinkRemoteDeviceType(l)
			switch j, local := byBus[remote]; {
			case ret == nvml.SUCCESS && kind == nvml.NVLINK_DEVICE_TYPE_SWITCH:
				if !slices.Contains(switches[remote], i) {
					switches[remote] = append(switches[remote], i)
				}
			case local:
				link(i, j)
			}
		}
	}
	for _, members := range switches {
		for _, a := range members {
			for _, b := range members {
				link(a, b)
			}
		}
	}
	for k := range gpus {
		if gpus[k].MIGParent != nil {
			continue
		}
		for p := range peers[gpus[k].Index] {
			gpus[k].NVLinkPeers = append(gpus[k].NVLinkPeers, p)
		}
		slices.Sort(gpus[k].NVLinkPeers)
	}
}

// Sample reads every GPU's utilisation, memory, power and temperature and the processes
// holding memory on it. A value NVML does not support on a GPU reads 0; a GPU found lost
// is left out and reported vanished by the next HealthEvents.
func (n *NVMLDevices) Sample() (Sample, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s := Sample{Time: time.Now()}
	if n.reason != "" {
		return s, nil
	}
	for i := range n.devices {
		dev := &n.devices[i]
		if dev.lost || dev.handle == nil {
			continue
		}
		if dev.migOn && len(dev.migs) > 0 {
			gs, procs, ret := sampleMIG(i, dev)
			if ret == nvml.ERROR_GPU_IS_LOST {
				n.markLost(i, ret)
				continue
			}
			s.GPUs = append(s.GPUs, gs...)
			s.Processes = append(s.Processes, procs...)
			continue
		}
		g, procs, ret := sampleGPU(i, dev.handle)
		if ret == nvml.ERROR_GPU_IS_LOST {
			n.markLost(i, ret)
			continue
		}
		s.GPUs = append(s.GPUs, g)
		s.Processes = append(s.Processes, procs...)
	}
	return s, nil
}

// sampleGPU reads GPU i; it returns ERROR_GPU_IS_LOST as soon as a query does.
func sampleGPU(i int, h nvml.Device) (api.GPUSample, []api.GPUProcess, nvml.Return) {
	g := api.GPUSample{Index: i}
	util, ret := h.GetUtilizationRates()
	if ret == nvml.ERROR_GPU_IS_LOST {
		return g, nil, ret
	}
	if ret == nvml.SUCCESS {
		g.UtilizationPct = float64(util.Gpu)
	}
	if mem, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
		g.MemoryUsedMB = int64(mem.Used / (1024 * 1024))
	}
	if mw, ret := h.GetPowerUsage(); ret == nvml.SUCCESS {
		g.PowerW = float64(mw) / 1000
	}
	if c, ret := h.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
		g.TemperatureC = float64(c)
	}
	// A process using the GPU for both compute and graphics appears in both lists;
	// it is listed once, with the larger figure.
	memory := map[int]int64{}
	for _, list := range []func() ([]nvml.ProcessInfo, nvml.Return){h.GetComputeRunningProcesses, h.GetGraphicsRunningProcesses} {
		infos, ret := list()
		if ret != nvml.SUCCESS {
			continue
		}
		for _, p := range infos {
			mb := int64(0)
			// NVML reports "not available" (all ones) where it may not see the
			// figure, in a container without the host's PID namespace for one.
			if p.UsedGpuMemory != nvmlValueNotAvailable {
				mb = int64(p.UsedGpuMemory / (1024 * 1024))
			}
			memory[int(p.Pid)] = max(memory[int(p.Pid)], mb)
		}
	}
	procs := make([]api.GPUProcess, 0, len(memory))
	for pid, mb := range memory {
		procs = append(procs, api.GPUProcess{GPU: i, PID: pid, MemoryMB: mb, Command: processCommand(pid)})
	}
	slices.SortFunc(procs, func(a, b api.GPUProcess) int { return a.PID - b.PID })
	return g, procs, nvml.SUCCESS
}

// sampleMIG reads the MIG devices of GPU i: each one's memory and processes, the GPU's
// temperature (the instances share its die) and no utilisation, which NVML does not give
// per MIG device, nor power, which it gives only for the whole GPU.
func sampleMIG(i int, dev *nvmlDevice) ([]api.GPUSample, []api.GPUProcess, nvml.Return) {
	temp := 0.0
	c, ret := dev.handle.GetTemperature(nvml.TEMPERATURE_GPU)
	switch ret {
	case nvml.ERROR_GPU_IS_LOST:
		return nil, nil, ret
	case nvml.SUCCESS:
		temp = float64(c)
	}
	var gpus []api.GPUSample
	var procs []api.GPUProcess
	for _, m := range dev.migs {
		g, ps, ret := sampleGPU(migIndex(i, m.n), m.handle)
		if ret == nvml.ERROR_GPU_IS_LOST {
			return nil, nil, ret
		}
		gpus = append(gpus, api.GPUSample{Index: g.Index, UtilizationUnknown: true, MemoryUsedMB: g.MemoryUsedMB, TemperatureC: temp})
		procs = append(procs, ps...)
	}
	return gpus, procs, nvml.SUCCESS
}

// migInstances is what the MIG devices of a GPU are, less their handles.
func migInstances(migs []nvmlMIG) []migInstance {
	out := make([]migInstance, len(migs))
	for k, m := range migs {
		out[k] = m.migInstance
	}
	return out
}

// deviceIndices lists the numbers GPU i is reported under: its MIG devices' where they
// are what is reported, else its own.
func (n *NVMLDevices) deviceIndices(i int) []int {
	dev := n.devices[i]
	if !dev.migOn || len(dev.migs) == 0 {
		return nil
	}
	out := make([]int, len(dev.migs))
	for k, m := range dev.migs {
		out[k] = migIndex(i, m.n)
	}
	return out
}

// markLost records that GPU i vanished and queues the event, for each of its MIG devices
// where those are what is reported. The caller holds n.mu.
func (n *NVMLDevices) markLost(i int, ret nvml.Return) {
	n.devices[i].lost = true
	ev := HealthEvent{GPU: i, Kind: HealthVanished, Fatal: true,
		Message: "GPU is lost (fallen off the bus?): " + nvmlError(ret)}
	n.pending = append(n.pending, migFanOut(ev, n.deviceIndices(i))...)
}

// HealthEvents reports the XIDs and ECC errors NVML recorded since the last call and the
// GPUs that can no longer be read. It does not block: it drains NVML's event set with a
// zero wait.
func (n *NVMLDevices) HealthEvents() ([]HealthEvent, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.reason != "" {
		return nil, nil
	}
	if !n.eventsTried {
		n.eventsTried = true
		n.registerEvents()
	}
	events := n.drainEvents()
	for i := range n.devices {
		dev := &n.devices[i]
		if dev.lost || dev.handle == nil {
			continue
		}
		if _, ret := dev.handle.GetUUID(); ret != nvml.SUCCESS {
			n.markLost(i, ret)
		}
	}
	events = append(events, n.pending...)
	n.pending = nil
	return events, nil
}

// registerEvents creates the event set and registers each GPU for the health events it
// supports; a GPU that supports none is logged once and watched only for vanishing.
func (n *NVMLDevices) registerEvents() {
	set, ret := n.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		n.log.Warn("NVML cannot create an event set; XIDs and ECC errors will go unnoticed", "err", nvmlError(ret))
		return
	}
	registered := 0
	for i, dev := range n.devices {
		if dev.handle == nil || dev.lost {
			continue
		}
		supported, ret := dev.handle.GetSupportedEventTypes()
		mask := supported & nvmlHealthEvents
		if ret != nvml.SUCCESS || mask == 0 {
			n.log.Warn("GPU reports no XID or ECC events; only its vanishing will be noticed", "gpu", i, "err", nvmlError(ret))
			continue
		}
		if ret := dev.handle.RegisterEvents(mask, set); ret != nvml.SUCCESS {
			n.log.Warn("GPU refused registering for XID and ECC events; its faults will go unnoticed", "gpu", i, "err", nvmlError(ret))
			continue
		}
		registered++
	}
	if registered == 0 {
		set.Free()
		return
	}
	n.events = set
}

// drainEvents reads the events waiting in the set without waiting for more.
func (n *NVMLDevices) drainEvents() []HealthEvent {
	if n.events == nil {
		return nil
	}
	var events []HealthEvent
	for range maxNVMLEventsPerRun {
		data, ret := n.events.Wait(0)
		if ret == nvml.ERROR_TIMEOUT {
			break
		}
		if ret != nvml.SUCCESS {
			// A lost GPU also fails the wait; the UUID check that follows finds it.
			if ret != n.lastWaitErr {
				n.log.Warn("NVML event wait failed", "err", nvmlError(ret))
			}
			n.lastWaitErr = ret
			break
		}
		n.lastWaitErr = nvml.SUCCESS
		i := n.indexOf(data.Device)
		if i < 0 || n.devices[i].lost {
			continue
		}
		var ev HealthEvent
		switch {
		case data.EventType&nvml.EventTypeXidCriticalError != 0:
			ev = xidEvent(i, data.EventData)
		case data.EventType&nvml.EventTypeDoubleBitEccError != 0:
			ev = eccEvent(i, 1)
		case data.EventType&nvml.EventTypeSingleBitEccError != 0:
			ev = HealthEvent{GPU: i, Kind: HealthECC, Code: 1, Message: "1 corrected (single-bit) ECC error"}
		default:
			continue
		}
		// A fault of a GPU in MIG mode is a fault of each of its MIG devices: rota
		// does not try to tell which instance an XID came from.
		events = append(events, migFanOut(ev, n.deviceIndices(i))...)
	}
	return events
}

// indexOf finds the GPU an event came from, by UUID, else by NVML's index; -1 if neither.
func (n *NVMLDevices) indexOf(d nvml.Device) int {
	if d == nil {
		return -1
	}
	if uuid, ret := d.GetUUID(); ret == nvml.SUCCESS {
		for i, dev := range n.devices {
			if dev.uuid == uuid || slices.ContainsFunc(dev.migs, func(m nvmlMIG) bool { return m.uuid == uuid }) {
				return i
			}
		}
	}
	if i, ret := d.GetIndex(); ret == nvml.SUCCESS && i >= 0 && i < len(n.devices) {
		return i
	}
	return -1
}

// pciBusID is the bus id NVML reports, up to its NUL.
func pciBusID(pci nvml.PciInfo) string {
	b := make([]byte, 0, len(pci.BusId))
	for _, c := range pci.BusId {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

// normalizeBusID writes a PCI bus id as NVML does today, "00000000:1B:00.0": older
// drivers and sysfs use a 4-digit domain, and case varies.
func normalizeBusID(id string) string {
	id = strings.ToUpper(strings.TrimSpace(id))
	domain, rest, ok := strings.Cut(id, ":")
	if !ok || len(domain) >= 8 || strings.Count(rest, ":") != 1 {
		return id
	}
	return strings.Repeat("0", 8-len(domain)) + domain + ":" + rest
}

// sysfsBusID writes a bus id as /sys/bus/pci/devices names it, "0000:1b:00.0".
func sysfsBusID(id string) string {
	id = strings.ToLower(id)
	if domain, rest, ok := strings.Cut(id, ":"); ok && len(domain) > 4 {
		id = domain[len(domain)-4:] + ":" + rest
	}
	return id
}

// nvmlInitError says in one line why NVML did not start.
func nvmlInitError(ret nvml.Return) string {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "libnvidia-ml.so.1 not found (no NVIDIA driver installed)"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "the NVIDIA kernel driver is not loaded"
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "the NVML library does not match the loaded kernel driver (reboot, or reload the driver, after an upgrade)"
	case nvml.ERROR_NO_PERMISSION:
		return "no permission to open the NVIDIA devices (/dev/nvidia*)"
	}
	return nvmlError(ret)
}

// nvmlError names an NVML return code; it works with the library not loaded.
func nvmlError(ret nvml.Return) string {
	return ret.Error()
}
