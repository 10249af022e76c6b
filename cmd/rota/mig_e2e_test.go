package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// migConfig is a fake node of two A100 80GB: GPU 0 in MIG mode with a 3g.40gb and two
// 1g.10gb instances (devices 100, 101 and 102), GPU 1 whole.
const migConfig = `devices:
  - model: NVIDIA A100-SXM4-80GB
    mig: [{profile: 3g.40gb}, {profile: 1g.10gb}, {profile: 1g.10gb}]
  - {model: NVIDIA A100-SXM4-80GB}
`

// TestMIGThroughTheBinary runs `rota up` on a fake GPU in MIG mode: its instances are the
// node's devices, a job asking for a MIG profile lands on one and sees it by its MIG UUID,
// a whole-GPU job by model name gets the whole GPU, and a fault of the GPU fails every
// instance but not the other GPU.
func TestMIGThroughTheBinary(t *testing.T) {
	skipShort(t)
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "mig.yaml")
	if err := os.WriteFile(cfg, []byte(migConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	u := startUpWith(t, 4, "--fake-gpus-config", cfg)

	n, _ := u.node()
	const whole = "NVIDIA A100-SXM4-80GB"
	byIndex := map[int]api.GPU{}
	for _, g := range n.GPUs {
		byIndex[g.Index] = g
	}
	if _, listed := byIndex[0]; listed || len(byIndex) != 4 {
		t.Fatalf("devices %+v; want MIG devices 100, 101, 102 and GPU 1, not GPU 0", n.GPUs)
	}
	for i, profile := range map[int]string{100: "3g.40gb", 101: "1g.10gb", 102: "1g.10gb"} {
		g := byIndex[i]
		if g.Model != whole+" MIG "+profile || g.MIGProfile != profile || g.MIGParent == nil || *g.MIGParent != 0 ||
			!strings.HasPrefix(g.UUID, "MIG-") || !g.Healthy {
			t.Errorf("device %d = %+v; want a healthy MIG %s of GPU 0", i, g, profile)
		}
	}
	if g := byIndex[1]; g.Model != whole || g.MIGParent != nil || g.MemoryMB != 81920 {
		t.Errorf("GPU 1 = %+v; want the whole GPU", g)
	}

	// A short name picks the profile; the job sees its MIG device by UUID and uses it
	// through the fake layer by that UUID, which telemetry then shows on device 100.
	id := u.submit("--gpus", "1", "--gpu-model", "3g.40gb", "--", "sh", "-c",
		`echo "CVD=$CUDA_VISIBLE_DEVICES"; echo "{\"gpu\": \"$CUDA_VISIBLE_DEVICES\", \"memory_mb\": 4000}" > "$ROTA_FAKE_GPU_DIR/procs/$$"; sleep 2`)
	d := u.waitJob(id, 30*time.Second, api.StateSucceeded)
	mig := byIndex[100]
	if d.Spec.GPUModel != mig.Model || !slices.Equal(d.GPUIDs, []string{mig.UUID}) ||
		len(d.AttemptList) != 1 || !slices.Equal(d.AttemptList[0].Placements[0].GPUIndices, []int{100}) {
		t.Errorf("job %d: model %q, GPUs %v, attempts %+v; want %q on device 100 (%s)", id, d.Spec.GPUModel, d.GPUIDs, d.AttemptList, mig.Model, mig.UUID)
	}
	if r := u.rota("logs", strconv.FormatInt(id, 10)); !strings.Contains(r.stdout, "CVD="+mig.UUID+"\n") {
		t.Errorf("job %d's log does not show CUDA_VISIBLE_DEVICES=%s: %s", id, mig.UUID, r)
	}
	if d.Usage == nil || d.Usage.GPUMemoryMB.Max < 3990 || d.Usage.GPUMemoryMB.Max > 4010 {
		t.Errorf("job %d usage %+v; want 4000 MB of GPU memory seen on its MIG device", id, d.Usage)
	}

	// The full model name of the GPU is the whole GPU; a part of it that also names the
	// MIG devices is refused with the names to choose from, nothing stored.
	id = u.submit("--gpus", "1", "--gpu-model", whole, "--", "sh", "-c", `echo "CVD=$CUDA_VISIBLE_DEVICES"`)
	d = u.waitJob(id, 30*time.Second, api.StateSucceeded)
	if !slices.Equal(d.AttemptList[0].Placements[0].GPUIndices, []int{1}) {
		t.Errorf("job %d for the whole model ran on %v; want GPU 1", id, d.AttemptList[0].Placements[0].GPUIndices)
	}
	if r := u.rota("logs", strconv.FormatInt(id, 10)); !strings.Contains(r.stdout, "CVD=1\n") {
		t.Errorf("job %d's log does not show CUDA_VISIBLE_DEVICES=1: %s", id, r)
	}
	before := u.rota("queue", "--all")
	r := u.rota("submit", "--gpus", "1", "--gpu-model", "A100", "--", "true")
	if r.code == 0 || !strings.Contains(r.stderr, "matches several models") || !strings.Contains(r.stderr, whole+" MIG 1g.10gb") {
		t.Errorf("submit --gpu-model A100 on a node with MIG devices: %s; want a refusal naming the models", r)
	}
	if after := u.rota("queue", "--all"); before.code != 0 || strings.Count(after.stdout, "\n") != strings.Count(before.stdout, "\n") {
		t.Errorf("a refused submit changed the job list:\n%s\nthen\n%s", before, after)
	}

	// rota nodes NAME lists the MIG devices under their GPU.
	if r := u.rota("nodes", gpuUpNode); r.code != 0 || !strings.Contains(r.stdout, "3 MIG devices") ||
		!strings.Contains(r.stdout, "\n    100 ") || !strings.Contains(r.stdout, "3g.40gb") {
		t.Errorf("rota nodes %s does not show GPU 0's MIG devices: %s", gpuUpNode, r)
	}

	// An XID of GPU 0 fails each of its instances, and only them.
	u.dropFile(filepath.Join(u.fakeDir(), "faults"), "xid", map[string]any{"gpu": 0, "xid": 79})
	u.waitNode(15*time.Second, "GPU 0's MIG devices unhealthy, GPU 1 healthy", func(n api.Node) bool {
		sick := 0
		for _, g := range n.GPUs {
			if g.Healthy == (g.MIGParent != nil) {
				return false
			}
			if !g.Healthy && strings.Contains(g.Health, "XID 79") {
				sick++
			}
		}
		return sick == 3
	})
	// Nothing lands on them any more.
	u.staysPending(u.submit("--gpus", "1", "--gpu-model", "1g.10gb", "--", "true"), time.Second)
}
