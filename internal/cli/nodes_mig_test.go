package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// migNode has GPU 0 whole, GPU 1 in MIG mode with a 3g.40gb and two 1g.10gb devices (the
// last sent first, as a server may order them), one running job 7, and GPU 2 in MIG mode
// without instances.
func migNode() api.Node {
	numa := 0
	one := 1
	const model = "NVIDIA A100-SXM4-80GB"
	mig := func(index int, profile string, mem int64) api.GPU {
		return api.GPU{Index: index, UUID: "MIG-" + profile, Model: model + " MIG " + profile, MemoryMB: mem, Healthy: true,
			PCIBusID: "00000000:1B:00.0", NUMANode: &numa, MIGMode: "enabled", MIGParent: &one, MIGProfile: profile}
	}
	return api.Node{
		Name: "node-m", State: api.NodeReady,
		Inventory: api.Inventory{GPUs: []api.GPU{
			{Index: 0, UUID: "GPU-0", Model: model, MemoryMB: 80 << 10, Healthy: true, PCIBusID: "00000000:18:00.0", NUMANode: &numa, MIGMode: "disabled"},
			mig(112, "1g.10gb", 10<<10), mig(110, "3g.40gb", 40<<10), mig(111, "1g.10gb", 10<<10),
			{Index: 2, UUID: "GPU-2", Model: model, MemoryMB: 80 << 10, Health: "in MIG mode without MIG instances", PCIBusID: "00000000:1E:00.0", NUMANode: &numa, MIGMode: "enabled"},
		}},
		Telemetry: &api.Telemetry{GPUs: []api.GPUSample{
			{Index: 0, UtilizationPct: 40, MemoryUsedMB: 1 << 10, PowerW: 200, TemperatureC: 50},
			{Index: 110, UtilizationUnknown: true, MemoryUsedMB: 30 << 10, TemperatureC: 60},
			{Index: 111, UtilizationUnknown: true, TemperatureC: 60},
			{Index: 112, UtilizationUnknown: true, TemperatureC: 60},
		}, Processes: []api.GPUProcess{{GPU: 110, PID: 4242, MemoryMB: 30 << 10, Command: "python", JobID: 7, Attempt: 1}}},
	}
}

func TestNodeShowMIG(t *testing.T) {
	var out bytes.Buffer
	if err := printGPUs(&out, migNode(), time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), time.UTC); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "node_show_mig.golden", out.String())
	lines := strings.Split(out.String(), "\n")
	// GPU 1's line comes before its devices, which follow in index order, and GPU 2 last.
	order := []string{"  0 ", "  1 ", "    110 ", "    111 ", "    112 ", "  2 "}
	for i, prefix := range order {
		if !strings.HasPrefix(lines[i+1], prefix) {
			t.Errorf("line %d = %q; want it to start %q", i+1, lines[i+1], prefix)
		}
	}
	if !strings.Contains(lines[2], "3 MIG devices") || !strings.Contains(lines[3], "n/a") || strings.Contains(lines[3], "0W") {
		t.Errorf("GPU 1 and its first device:\n%s\n%s\nwant the device count, and no utilisation or power for the device", lines[2], lines[3])
	}
}

func TestNodeUseMIG(t *testing.T) {
	n := migNode()
	// Only GPU 0 tells its utilisation: the mean is its 40 %, not diluted by the MIG
	// devices' unknown readings.
	if util, _ := nodeUse(n); util != "40%" {
		t.Errorf("UTIL = %q; want 40%%", util)
	}
	n.Telemetry.GPUs = n.Telemetry.GPUs[1:]
	if util, _ := nodeUse(n); util != "n/a" {
		t.Errorf("UTIL of MIG devices only = %q; want n/a", util)
	}
	if util := loadUtil(api.NodeLoad(&n)); util != "n/a" {
		t.Errorf("rota top UTIL of MIG devices only = %q; want n/a", util)
	}
}

// A pool whose node has MIG devices of the same GPU model as another node's whole GPUs
// does not mix models; one with another model does.
func TestPoolWarningsMIG(t *testing.T) {
	whole := api.Node{Name: "w", Inventory: api.Inventory{GPUs: []api.GPU{{Index: 0, Model: "NVIDIA A100-SXM4-80GB"}}}}
	if w := poolWarnings([]api.Node{migNode(), whole}); len(w) != 0 {
		t.Errorf("warnings %q; want none", w)
	}
	whole.GPUs[0].Model = "NVIDIA H100"
	if w := poolWarnings([]api.Node{migNode(), whole}); len(w) != 1 || !strings.Contains(w[0], "mixes GPU models") {
		t.Errorf("warnings %q; want the mix of A100 and H100", w)
	}
}
