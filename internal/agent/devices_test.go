package agent

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestParseFakeGPUs(t *testing.T) {
	tests := []struct {
		spec  string
		n     int
		model string
		memMB int64
	}{
		{"8", 8, "NVIDIA H100 80GB HBM3", 81559},
		{" 1 ", 1, "NVIDIA H100 80GB HBM3", 81559},
		{"64", 64, "NVIDIA H100 80GB HBM3", 81559},
		{"4xH100-SXM-80GB", 4, "H100-SXM-80GB", 80 * 1024},
		{"2xA100-40GB", 2, "A100-40GB", 40 * 1024},
		{"2XL4", 2, "L4", 81559},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			d, err := ParseFakeGPUs(tt.spec, "node-a")
			if err != nil {
				t.Fatalf("ParseFakeGPUs(%q): %v", tt.spec, err)
			}
			disc, err := d.Discover()
			if err != nil {
				t.Fatal(err)
			}
			if disc.Source != SourceFake {
				t.Errorf("source = %q, want %q", disc.Source, SourceFake)
			}
			if len(disc.GPUs) != tt.n {
				t.Fatalf("got %d GPUs, want %d", len(disc.GPUs), tt.n)
			}
			for i, g := range disc.GPUs {
				if g.Index != i || g.Model != tt.model || g.MemoryMB != tt.memMB || !g.Healthy {
					t.Errorf("GPU %d = %+v, want index %d model %q memory %d healthy", i, g, i, tt.model, tt.memMB)
				}
			}
		})
	}
}

func TestParseFakeGPUsRejects(t *testing.T) {
	for _, spec := range []string{"0x", "0", "-1", "abc", "9999", "65", "4x", "x8", "", "4xH100x"} {
		t.Run(spec, func(t *testing.T) {
			if spec == "4xH100x" {
				// A model may itself contain an x; only the first one separates.
				if _, err := ParseFakeGPUs(spec, "n"); err != nil {
					t.Fatalf("ParseFakeGPUs(%q): %v", spec, err)
				}
				return
			}
			_, err := ParseFakeGPUs(spec, "n")
			if err == nil {
				t.Fatalf("ParseFakeGPUs(%q) succeeded, want an error", spec)
			}
			for _, want := range []string{"--fake-gpus", "1 to 64"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

func TestFakeGPUUUIDs(t *testing.T) {
	format := regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	seen := map[string]string{}
	for _, node := range []string{"gpu-01", "gpu-02", "gpu-1", "gpu-10"} {
		d, err := ParseFakeGPUs("64", node)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range d.GPUs {
			if !format.MatchString(g.UUID) {
				t.Errorf("UUID %q is not in NVIDIA's format", g.UUID)
			}
			where := node + "/" + g.Model
			if other, dup := seen[g.UUID]; dup {
				t.Errorf("UUID %s of %s GPU %d also belongs to %s", g.UUID, node, g.Index, other)
			}
			seen[g.UUID] = where
		}
	}
	again, err := ParseFakeGPUs("2", "gpu-01")
	if err != nil {
		t.Fatal(err)
	}
	first, _ := ParseFakeGPUs("2", "gpu-01")
	if again.GPUs[1].UUID != first.GPUs[1].UUID {
		t.Errorf("UUIDs differ between runs: %s and %s", again.GPUs[1].UUID, first.GPUs[1].UUID)
	}
}

// On a machine without the NVIDIA driver, discovery must report no GPUs and why, not fail.
func TestNVMLWithoutDriver(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("this machine has an NVIDIA driver")
	}
	n := OpenNVML(nil)
	defer n.Close()
	d, err := n.Discover()
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if d.Source != SourceNone || len(d.GPUs) != 0 {
		t.Errorf("got source %q with %d GPUs, want %q and none", d.Source, len(d.GPUs), SourceNone)
	}
	if !strings.Contains(d.Reason, "NVML not available") {
		t.Errorf("reason %q does not say NVML is not available", d.Reason)
	}
	// A layer without NVML reads nothing, and keeps reading nothing.
	for range 3 {
		s, err := n.Sample()
		if err != nil || len(s.GPUs) != 0 || len(s.Processes) != 0 {
			t.Errorf("Sample = %+v, %v; want nothing", s, err)
		}
		ev, err := n.HealthEvents()
		if err != nil || len(ev) != 0 {
			t.Errorf("HealthEvents = %v, %v; want nothing", ev, err)
		}
	}
}

func TestMachineMemory(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "meminfo")
	os.WriteFile(good, []byte("MemFree:  1000 kB\nMemTotal:       65536000 kB\n"), 0o644)
	mb, err := machineMemoryMB(good)
	if err != nil || mb != 64000 {
		t.Errorf("machineMemoryMB = %d, %v; want 64000", mb, err)
	}
	bad := filepath.Join(dir, "empty")
	os.WriteFile(bad, []byte("MemFree: 1 kB\n"), 0o644)
	if _, err := machineMemoryMB(bad); err == nil {
		t.Error("machineMemoryMB succeeded without a MemTotal line")
	}
	if mb, err := machineMemoryMB("/proc/meminfo"); err != nil || mb <= 0 {
		t.Errorf("this machine: %d MB, %v", mb, err)
	}
}

func TestParseLabels(t *testing.T) {
	tests := []struct {
		in      string
		want    map[string]string
		wantErr bool
	}{
		{"", map[string]string{}, false},
		{"pool=train", map[string]string{"pool": "train"}, false},
		{"pool=train, rack=r1 ,empty=", map[string]string{"pool": "train", "rack": "r1", "empty": ""}, false},
		{"pool", nil, true},
		{"=x", nil, true},
		{"a=1,a=2", nil, true},
		{"a=1,,b=2", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseLabels(tt.in)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "--labels") {
					t.Fatalf("ParseLabels(%q) error = %v, want one naming --labels", tt.in, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]string{
		"": "terminated", "SIGTERM": "terminated", "TERM": "terminated", "sigusr1": "user defined signal 1",
		"SIGINT": "interrupt", "2": "interrupt",
	} {
		sig, err := parseSignal(in)
		if err != nil || sig.String() != want {
			t.Errorf("parseSignal(%q) = %v, %v; want %s", in, sig, err, want)
		}
	}
	for _, in := range []string{"SIGFOO", "99", "TERMINATE"} {
		if _, err := parseSignal(in); err == nil {
			t.Errorf("parseSignal(%q) succeeded", in)
		}
	}
}
