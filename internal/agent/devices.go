package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// Devices finds the GPUs of this machine, reads their metrics and reports their faults.
// The agent owns the interface so that NVML and the fake set used by tests and demos are
// interchangeable.
type Devices interface {
	// Discover enumerates the GPUs with their topology (NVLink peers, NUMA node, PCI bus
	// id, MIG mode as it is). A GPU reported vanished by HealthEvents is left out of
	// later Discover and Sample results; indices of the others do not change.
	Discover() (Discovery, error)
	// Sample reads every GPU's utilisation, memory, power and temperature and lists the
	// processes holding memory on them (GPU, PID, memory; the agent maps them to jobs).
	Sample() (Sample, error)
	// HealthEvents returns what went wrong with GPUs since the last call: XIDs,
	// uncorrectable ECC errors, devices that vanished. It does not block.
	HealthEvents() ([]HealthEvent, error)
}

// Sample is one reading of the GPUs.
type Sample struct {
	Time      time.Time
	GPUs      []api.GPUSample
	Processes []api.GPUProcess
}

// HealthEvent is one fault of one GPU.
type HealthEvent struct {
	GPU int
	// Kind is HealthXID, HealthECC or HealthVanished.
	Kind string
	// Code is the XID number for HealthXID, the error count for HealthECC.
	Code uint64
	// Fatal is set when the GPU can no longer be trusted with work; an XID that reports
	// an application's own fault (13, 31, 43, 45, 68, ...) is not fatal.
	Fatal   bool
	Message string
}

// Health event kinds.
const (
	HealthXID      = "xid"
	HealthECC      = "ecc"
	HealthVanished = "vanished"
)

// applicationXIDs are the XIDs NVIDIA documents as faults of the application (a bad
// memory access, an illegal instruction, a watchdog on its kernel, a preemptive clean-up
// after one): the GPU itself is fine and can take the next job. Every other XID leaves it
// suspect until someone looks.
var applicationXIDs = map[uint64]bool{13: true, 31: true, 43: true, 45: true, 68: true, 69: true, 109: true}

// xidFatal says whether an XID makes the GPU unfit for new work.
func xidFatal(xid uint64) bool { return !applicationXIDs[xid] }

// xidEvent describes XID xid on GPU gpu.
func xidEvent(gpu int, xid uint64) HealthEvent {
	what := "application fault"
	if xidFatal(xid) {
		what = "GPU fault"
	}
	return HealthEvent{GPU: gpu, Kind: HealthXID, Code: xid, Fatal: xidFatal(xid),
		Message: fmt.Sprintf("XID %d (%s)", xid, what)}
}

// Discovery is what a Devices found.
type Discovery struct {
	GPUs          []api.GPU
	DriverVersion string
	CUDAVersion   string
	// Source is "nvml", "fake" or "none", as in api.Inventory.DeviceSource.
	Source string
	// Reason says, for Source "none", why no GPUs were found; the caller logs it.
	Reason string
}

// Device sources, as reported in api.Inventory.DeviceSource.
const (
	SourceNVML = "nvml"
	SourceFake = "fake"
	SourceNone = "none"
)

// machineMemoryMB reads MemTotal from /proc/meminfo. The file is a parameter so tests can
// feed it a fixture.
func machineMemoryMB(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read machine memory: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "MemTotal:" {
			continue
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse MemTotal in %s: %w", path, err)
		}
		return kb / 1024, nil
	}
	return 0, fmt.Errorf("no MemTotal line in %s", path)
}

// inventory assembles what the agent reports about its machine.
func inventory(d Discovery, labels map[string]string) (api.Inventory, error) {
	mem, err := machineMemoryMB("/proc/meminfo")
	if err != nil {
		return api.Inventory{}, err
	}
	host, err := os.Hostname()
	if err != nil {
		return api.Inventory{}, fmt.Errorf("hostname: %w", err)
	}
	gpus := d.GPUs
	if gpus == nil {
		// The server reads a missing list and an empty one alike, but an explicit []
		// reads better in the JSON a person inspects.
		gpus = []api.GPU{}
	}
	return api.Inventory{
		CPUs:          runtime.NumCPU(),
		MemoryMB:      mem,
		GPUs:          gpus,
		Labels:        labels,
		DriverVersion: d.DriverVersion,
		CUDAVersion:   d.CUDAVersion,
		DeviceSource:  d.Source,
		Hostname:      host,
	}, nil
}
