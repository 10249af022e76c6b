package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// Fake GPUs stand in for real ones in tests and demos, so a laptop can play a GPU cluster.
const (
	defaultFakeModel    = "NVIDIA H100 80GB HBM3"
	defaultFakeMemoryMB = 81559
	maxFakeGPUs         = 64
	// A fake GPU node offers at least this much per GPU, like a real one would, so that
	// jobs sized for real GPU servers fit on a small machine playing one.
	fakeCPUsPerGPU     = 8
	fakeMemoryMBPerGPU = 64 * 1024
)

// FakeDevices is a fixed set of GPUs that do not exist.
type FakeDevices struct {
	GPUs []api.GPU
}

// Discover returns the fake set.
func (f *FakeDevices) Discover() (Discovery, error) {
	gpus := make([]api.GPU, len(f.GPUs))
	copy(gpus, f.GPUs)
	return Discovery{
		GPUs:          gpus,
		DriverVersion: "fake",
		CUDAVersion:   "fake",
		Source:        SourceFake,
	}, nil
}

// gbInModel finds a size like "40GB" in a model name, so "4xA100-40GB" gets 40 GiB cards.
var gbInModel = regexp.MustCompile(`(?i)(\d+)\s*GB`)

// ParseFakeGPUs parses the --fake-gpus spec: "N" or "NxMODEL" with N from 1 to 64. The
// memory of a named model comes from a "<n>GB" in its name, else that of an H100 80GB. UUIDs
// derive from the node name and index, so they are stable across restarts and two fake
// nodes never share one.
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
		if m := gbInModel.FindStringSubmatch(model); m != nil {
			gb, err := strconv.ParseInt(m[1], 10, 64)
			if err == nil && gb > 0 {
				memMB = gb * 1024
			}
		}
	}
	gpus := make([]api.GPU, n)
	for i := range gpus {
		gpus[i] = api.GPU{
			Index:    i,
			UUID:     fakeUUID(node, i),
			Model:    model,
			MemoryMB: memMB,
			Healthy:  true,
		}
	}
	return &FakeDevices{GPUs: gpus}, nil
}

// fakeUUID formats a hash of node and index the way NVIDIA prints GPU UUIDs.
func fakeUUID(node string, index int) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("rota-fake-gpu\x00%s\x00%d", node, index)))
	h := hex.EncodeToString(sum[:16])
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// Sample reads the fake GPUs: idle, cool, no processes.
func (f *FakeDevices) Sample() (Sample, error) {
	s := Sample{Time: time.Now()}
	for _, g := range f.GPUs {
		s.GPUs = append(s.GPUs, api.GPUSample{Index: g.Index})
	}
	return s, nil
}

// HealthEvents reports no faults.
func (f *FakeDevices) HealthEvents() ([]HealthEvent, error) { return nil, nil }
