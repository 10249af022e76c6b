package agent

import (
	"fmt"
	"strings"

	"github.com/rotahq/rota/internal/api"
)

// MIG: where an admin put a GPU in MIG mode and created instances, each MIG device (a
// compute instance) is a schedulable device of its own and the GPU itself is not. rota never
// changes MIG mode and never creates or destroys instances.
//
// Devices are numbered by one integer per node, which the scheduler and the task contract
// use. Whole GPUs keep NVML's index (0 to 89); MIG device j of GPU p (j being NVML's MIG
// device index on p, 0 to 9) is numbered migIndexBase + migIndexStride*p + j: GPU 0's are
// 100 to 109, GPU 3's 130 to 139, GPU 12's 220 to 229. The two ranges cannot meet, and every
// number stays below the 1024 the server accepts. On a node of more than migMaxGPUs GPUs the
// numbers would not fit, so there a GPU in MIG mode is reported whole, with a log line.
const (
	migIndexBase   = 100
	migIndexStride = 10
	migMaxGPUs     = 90
	migMaxDevices  = migIndexStride // per GPU; NVIDIA's GPUs have at most 7
)

// migIndex numbers MIG device j of GPU parent.
func migIndex(parent, j int) int { return migIndexBase + migIndexStride*parent + j }

// migParentOf says which GPU a device number belongs to when it is a MIG device's.
func migParentOf(index int) (int, bool) {
	if index < migIndexBase || index >= migIndex(migMaxGPUs, 0) {
		return 0, false
	}
	return (index - migIndexBase) / migIndexStride, true
}

// migModel is the model name of a MIG device: its GPU's model, "MIG" and the profile, as
// NVIDIA itself names them ("NVIDIA H100 80GB HBM3 MIG 3g.40gb"), so that --gpu-model
// takes the full name or a unique part such as "3g.40gb".
func migModel(parentModel, profile string) string { return parentModel + " MIG " + profile }

// migNoInstances is the health of a GPU in MIG mode without a MIG device: nothing can run
// on it, and listing it says so rather than letting the GPU drop out of the count.
const migNoInstances = "in MIG mode without MIG instances: nothing can run on it until an admin creates some (nvidia-smi mig -cgi ... -C)"

// migInstance is one MIG device as the device layer read it.
type migInstance struct {
	n        int // NVML's MIG device index on its GPU, 0 to migMaxDevices-1
	uuid     string
	profile  string
	memoryMB int64
}

// migDevices turns a GPU in MIG mode into the devices it offers: one per instance, with
// the GPU's NUMA node, bus and health (NVLink is off in MIG mode), or the GPU itself,
// unhealthy, when it has none.
func migDevices(parent api.GPU, instances []migInstance) []api.GPU {
	parent.MIGMode = "enabled"
	if len(instances) == 0 {
		if parent.Healthy {
			parent.Healthy, parent.Health = false, migNoInstances
		}
		parent.NVLinkPeers = nil
		return []api.GPU{parent}
	}
	out := make([]api.GPU, 0, len(instances))
	for _, m := range instances {
		p := parent.Index
		g := api.GPU{
			Index:      migIndex(parent.Index, m.n),
			UUID:       m.uuid,
			Model:      migModel(parent.Model, m.profile),
			MemoryMB:   m.memoryMB,
			Healthy:    parent.Healthy,
			Health:     parent.Health,
			PCIBusID:   parent.PCIBusID,
			MIGMode:    "enabled",
			MIGParent:  &p,
			MIGProfile: m.profile,
		}
		if parent.NUMANode != nil {
			numa := *parent.NUMANode
			g.NUMANode = &numa
		}
		out = append(out, g)
	}
	return out
}

// migFanOut turns a fault of a GPU in MIG mode into the same fault of each of its devices,
// which are what the node reports: NVML reports faults of the GPU, and one that makes the
// GPU unfit makes every instance on it unfit.
func migFanOut(ev HealthEvent, devices []int) []HealthEvent {
	if len(devices) == 0 {
		return []HealthEvent{ev}
	}
	out := make([]HealthEvent, 0, len(devices))
	for _, d := range devices {
		e := ev
		e.GPU = d
		e.Message = fmt.Sprintf("%s (on its GPU %d)", ev.Message, ev.GPU)
		out = append(out, e)
	}
	return out
}

// isMIGUUID says whether a device UUID is a MIG device's, which CUDA_VISIBLE_DEVICES must
// name by UUID: a MIG device has no index of CUDA's own.
func isMIGUUID(uuid string) bool { return strings.HasPrefix(uuid, "MIG-") }
