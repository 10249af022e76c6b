//go:build cgo

package agent

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/rotahq/rota/internal/api"
)

// NVMLDevices finds the real GPUs through NVML. The library is loaded at run time, so the
// agent builds and runs on machines without a driver and then reports no GPUs.
type NVMLDevices struct{}

// Discover enumerates the GPUs. Without NVML (no driver, no GPU) it returns source "none"
// and a Reason, not an error: such a node still runs CPU-only jobs.
func (NVMLDevices) Discover() (Discovery, error) {
	if ret := nvml.Init(); ret != nvml.SUCCESS {
		return Discovery{Source: SourceNone, Reason: "NVML not available: " + nvmlInitError(ret)}, nil
	}
	defer nvml.Shutdown()

	d := Discovery{Source: SourceNVML}
	if v, ret := nvml.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		d.DriverVersion = v
	}
	if v, ret := nvml.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		d.CUDAVersion = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	count, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return Discovery{}, fmt.Errorf("nvml: count devices: %s", nvml.ErrorString(ret))
	}
	d.GPUs = make([]api.GPU, 0, count)
	for i := range count {
		d.GPUs = append(d.GPUs, nvmlGPU(i))
	}
	return d, nil
}

// nvmlGPU describes device i. A device NVML cannot fully query (fallen off the bus, say) is
// still listed, as unhealthy, so the node's GPU count stays true and nothing lands on it.
func nvmlGPU(i int) api.GPU {
	g := api.GPU{Index: i, Model: "unknown"}
	dev, ret := nvml.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return g
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return g
	}
	g.UUID = uuid
	if name, ret := dev.GetName(); ret == nvml.SUCCESS {
		g.Model = name
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return g
	}
	g.MemoryMB = int64(mem.Total / (1024 * 1024))
	g.Healthy = true
	return g
}

func nvmlInitError(ret nvml.Return) string {
	if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
		return "libnvidia-ml.so.1 not found (no NVIDIA driver installed)"
	}
	return nvml.ErrorString(ret)
}

// Sample is not implemented yet.
func (NVMLDevices) Sample() (Sample, error) { return Sample{}, nil }

// HealthEvents is not implemented yet.
func (NVMLDevices) HealthEvents() ([]HealthEvent, error) { return nil, nil }
