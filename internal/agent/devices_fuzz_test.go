package agent

import (
	"math"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/fuzztest"
)

// fakeConfigSeeds are configs good and bad, besides the files in testdata and examples.
var fakeConfigSeeds = []string{
	"count: 8\n",
	"count: 64\nnvlink: {islands: 8}\n",
	"count: 4\nmodel: A100-40GB\nnvlink: {pairs: [[0, 1], [2, 3], [1, 2]]}\n",
	"devices: [{model: L4, memory_mb: 23034}, {model: A100-80GB}]\ndriver_version: \"535\"\ncuda_version: \"12.2\"\n",
	"count: 2\nmetrics:\n  utilization: {base: 10, amplitude: 5, period: 60s}\n  power: {idle: 70, max: 700}\n  temperature: {idle: 30, max: 80}\n  gpus:\n    1: {utilization: {base: 99, amplitude: 100, period: 1ns}}\n",
	"count: 3\nfaults:\n  - {gpu: 0, after: 1s, xid: 79}\n  - {gpu: 1, ecc: 2}\n  - {gpu: 2, after: 1h, vanish: true}\n  - {gpu: 2, xid: 13}\n",
	"count: 2\ncolour: red\n",
	"count: 8\nnvlink: {islands: 3}\n",
	"count: 2\nnvlink: {pairs: [[0, 2]]}\n",
	"count: 4\nfaults: [{gpu: 4, xid: 79}]\n",
	"count: 4\nfaults: [{gpu: 1, xid: -3}]\n",
	"count: 2\nmemory_mb: -5\n",
	"count: 1\nmetrics: {utilization: {base: .nan}}\n",
	"count: 1\n---\ncount: 2\n",
	"devices:\n  - {model: A100-80GB, mig: [{profile: 3g.40gb}, {profile: 2g.20gb}, {profile: 1g.10gb, memory_mb: 9984}]}\n  - {model: A100-80GB, mig: []}\n  - {model: A100-80GB}\nnvlink: {islands: 3}\nfaults: [{gpu: 0, after: 1s, vanish: true}, {gpu: 1, xid: 79}]\n",
	"devices: [{model: H100-80GB, mig: [{profile: 7g.80gb}, {profile: 1g.10gb}]}]\n",
	"devices: [{model: H100, mig: [{profile: 3G.40GB}]}]\n",
	"[1, 2]\n",
	"",
}

var fakeConfigTokens = []string{
	"count: ", "devices: [{}]", "model: ", "memory_mb: ", "nvlink: ", "{islands: 2}", "pairs: [[0, 1]]",
	"metrics: ", "gpus: {0: {}}", "utilization: {amplitude: 1, period: 1ns}", "power: {idle: 1, max: 2}",
	"faults: [{gpu: 0, xid: 79}]", "after: 1s", "vanish: true", "ecc: 1",
	"mig: []", "mig: [{profile: 1g.10gb}]", "{profile: 7g.80gb, memory_mb: 81920}", "profile: ", "1c.3g.40gb", "1g.10gb+me",
	"64", "65", "-1", "0", "999", "1000", ".nan", ".inf", "1e308", "9223372036854775807", "&a", "*a", "<<: ",
}

// FuzzFakeGPUConfig parses a fuzzed fake GPU config. Oracle (checkFakeConfig): it is
// refused with a message or gives 1 to 64 consistent GPUs (indices, UUIDs, memory, NVLink
// peers symmetric and in range, MIG devices that fit their GPU) whose Sample and
// HealthEvents stay within range at any time.
func FuzzFakeGPUConfig(f *testing.F) {
	for _, path := range []string{"testdata/fake-hgx.yaml", "testdata/fake-mixed.yaml", "../../examples/fake-gpus.yaml", "../../examples/fake-gpus-mig.yaml"} {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range fakeConfigSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkFakeConfig(t, data) })
}

// TestFakeGPUConfigMutations is the bounded fuzz run of the default tests; scripts/fuzz
// runs the engine on FuzzFakeGPUConfig for longer.
func TestFakeGPUConfigMutations(t *testing.T) {
	for _, in := range fuzztest.Mutations(fakeConfigSeeds, fakeConfigTokens, 1500) {
		checkFakeConfig(t, []byte(in))
	}
}

func checkFakeConfig(t *testing.T, data []byte) {
	t.Helper()
	f, err := parseFakeGPUs(data, "fuzz")
	if err != nil {
		if err.Error() == "" {
			t.Fatalf("%q: an empty error", data)
		}
		return
	}
	n := len(f.GPUs)
	if n < 1 || n > maxFakeGPUs || len(f.curves) != n {
		t.Fatalf("%q: %d GPUs, %d curves", data, n, len(f.curves))
	}
	for i, g := range f.GPUs {
		if g.Index != i || g.UUID != fakeUUID("fuzz", i) || g.MemoryMB < 1 || g.MemoryMB > maxFakeMemoryMB || g.Model == "" || !g.Healthy {
			t.Fatalf("%q: GPU %d = %+v", data, i, g)
		}
		if !slices.IsSorted(g.NVLinkPeers) || len(slices.Compact(slices.Clone(g.NVLinkPeers))) != len(g.NVLinkPeers) {
			t.Fatalf("%q: GPU %d peers %v not sorted and unique", data, i, g.NVLinkPeers)
		}
		for _, p := range g.NVLinkPeers {
			if p < 0 || p >= n || p == i || !slices.Contains(f.GPUs[p].NVLinkPeers, i) {
				t.Fatalf("%q: GPU %d has peer %d, out of range or one-way", data, i, p)
			}
		}
		c := f.curves[i]
		for _, v := range []float64{c.utilBase, c.utilAmplitude, c.powerIdle, c.powerMax, c.tempIdle, c.tempMax} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				t.Fatalf("%q: GPU %d curve %+v", data, i, c)
			}
		}
	}
	d, err := f.Discover()
	if err != nil {
		t.Fatal(err)
	}
	devices := map[int]bool{}
	migMemory := map[int]int64{}
	for _, g := range d.GPUs {
		devices[g.Index] = true
		if g.MIGParent == nil {
			continue
		}
		p := *g.MIGParent
		migMemory[p] += g.MemoryMB
		if p < 0 || p >= n || f.GPUs[p].MIGMode != "enabled" || g.Index/10 != 10+p || !isMIGUUID(g.UUID) ||
			g.MemoryMB < 1 || migMemory[p] > f.GPUs[p].MemoryMB || g.NVLinkPeers != nil {
			t.Fatalf("%q: MIG device %+v of GPU %+v", data, g, f.GPUs[p])
		}
	}
	// Run it through centuries: every scheduled fault fires, readings stay in range.
	clock := withFakeClock(f)
	vanished := map[int]bool{}
	for _, step := range []time.Duration{0, time.Second, time.Hour, 1000 * time.Hour, math.MaxInt64} {
		clock.advance(step)
		events, err := f.HealthEvents()
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range events {
			if !devices[ev.GPU] || vanished[ev.GPU] || ev.Message == "" {
				t.Fatalf("%q: event %+v", data, ev)
			}
			if ev.Kind == HealthVanished {
				vanished[ev.GPU] = true
			}
		}
		s, err := f.Sample()
		if err != nil {
			t.Fatal(err)
		}
		if len(s.GPUs) != len(devices)-len(vanished) {
			t.Fatalf("%q: %d devices sampled with %d of %d vanished", data, len(s.GPUs), len(vanished), len(devices))
		}
		for _, g := range s.GPUs {
			if p, mig := migParentOf(g.Index); mig {
				c := f.curves[p]
				if !g.UtilizationUnknown || g.UtilizationPct != 0 || g.PowerW != 0 || g.TemperatureC < c.tempIdle || g.TemperatureC > c.tempMax {
					t.Fatalf("%q: MIG sample %+v; want no utilisation or power, and a temperature on its GPU's curve %+v", data, g, c)
				}
				continue
			}
			c := f.curves[g.Index]
			if math.IsNaN(g.UtilizationPct) || g.UtilizationPct < 0 || g.UtilizationPct > 100 ||
				g.PowerW < c.powerIdle || g.PowerW > c.powerMax || g.TemperatureC < c.tempIdle || g.TemperatureC > c.tempMax {
				t.Fatalf("%q: sample %+v out of its curve %+v", data, g, c)
			}
		}
	}
	if len(f.scheduled) != 0 {
		t.Fatalf("%q: %d scheduled faults never fired", data, len(f.scheduled))
	}
}
