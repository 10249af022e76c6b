package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/rotahq/rota/internal/api"
)

// Bounds of a fake GPU config, so that a typo cannot make a GPU of negative memory or a
// fault that never parses.
const (
	maxFakeXID         = 999
	maxFakeECC         = 1_000_000
	maxFakePowerW      = 10_000
	maxFakeTemperature = 200
	maxFakeTextLen     = 128
	maxFakeMemoryMB    = 1 << 30
	maxFakeConfigBytes = 1 << 20
)

// fakeConfigFile is a fake GPU config, as in examples/fake-gpus.yaml. Unknown fields are
// errors, so that a typo cannot silently change the set.
type fakeConfigFile struct {
	// Either count (with model and memory_mb) or devices, one entry per GPU; model and
	// memory_mb are then the defaults of entries that leave them out.
	Count         int              `yaml:"count"`
	Model         string           `yaml:"model"`
	MemoryMB      int64            `yaml:"memory_mb"`
	Devices       []fakeDeviceSpec `yaml:"devices"`
	DriverVersion string           `yaml:"driver_version"`
	CUDAVersion   string           `yaml:"cuda_version"`
	NVLink        *fakeNVLinkSpec  `yaml:"nvlink"`
	Metrics       fakeMetricsSpec  `yaml:"metrics"`
	Faults        []fakeFaultSpec  `yaml:"faults"`
}

type fakeDeviceSpec struct {
	Model    string `yaml:"model"`
	MemoryMB int64  `yaml:"memory_mb"`
	// MIG, when present (even empty), puts the GPU in MIG mode with these instances.
	MIG *[]fakeMIGSpec `yaml:"mig"`
}

// fakeMIGSpec is one MIG instance of a fake GPU: its profile as NVIDIA names it, and its
// memory (left out, the "<n>gb" of the profile).
type fakeMIGSpec struct {
	Profile  string `yaml:"profile"`
	MemoryMB int64  `yaml:"memory_mb"`
}

// fakeMIGProfile is the form of a MIG profile: an optional compute share ("1c."), GPU
// slices, memory, and extensions such as "+me": "3g.40gb", "1c.7g.80gb", "1g.10gb+me".
var fakeMIGProfile = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^([1-9]c\.)?[1-9]g\.[1-9][0-9]{0,3}gb([+-][a-z]{1,8})*$`)
})

// maxFakeMIGInstances is as many MIG devices as NVIDIA's GPUs can hold.
const maxFakeMIGInstances = 7

// fakeNVLinkSpec is the NVLink topology: fully connected islands of a size, or pairs.
type fakeNVLinkSpec struct {
	Islands int     `yaml:"islands"`
	Pairs   [][]int `yaml:"pairs"`
}

// fakeMetricsSpec holds the curves of every GPU, and those of single GPUs by index, which
// replace the defaults kind by kind.
type fakeMetricsSpec struct {
	fakeCurveSpec `yaml:",inline"`
	GPUs          map[int]fakeCurveSpec `yaml:"gpus"`
}

type fakeCurveSpec struct {
	Utilization *fakeWaveSpec  `yaml:"utilization"`
	Power       *fakeRangeSpec `yaml:"power"`
	Temperature *fakeRangeSpec `yaml:"temperature"`
}

// fakeWaveSpec is utilisation without load: base plus a sine wave of amplitude and period.
type fakeWaveSpec struct {
	Base      float64 `yaml:"base"`
	Amplitude float64 `yaml:"amplitude"`
	Period    string  `yaml:"period"`
}

// fakeRangeSpec is a metric at 0 % and at 100 % utilisation; it moves linearly between.
type fakeRangeSpec struct {
	Idle float64 `yaml:"idle"`
	Max  float64 `yaml:"max"`
}

// fakeFaultSpec is a fault that fires once after has passed since the agent started:
// exactly one of xid, ecc and vanish.
type fakeFaultSpec struct {
	GPU    *int   `yaml:"gpu"`
	After  string `yaml:"after"`
	XID    int64  `yaml:"xid"`
	ECC    int64  `yaml:"ecc"`
	Vanish bool   `yaml:"vanish"`
}

// LoadFakeGPUs reads a fake GPU config (YAML; see examples/fake-gpus.yaml) for node.
func LoadFakeGPUs(path, node string) (*FakeDevices, error) {
	data, err := readConfigFile(path)
	if err != nil {
		return nil, fmt.Errorf("fake GPU config: %w", err)
	}
	f, err := parseFakeGPUs(data, node)
	if err != nil {
		return nil, fmt.Errorf("fake GPU config %s: %w", path, err)
	}
	return f, nil
}

// readConfigFile reads a file of at most maxFakeConfigBytes.
func readConfigFile(path string) ([]byte, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	data, err := io.ReadAll(io.LimitReader(file, maxFakeConfigBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFakeConfigBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxFakeConfigBytes)
	}
	return data, nil
}

// parseFakeGPUs decodes and checks a config; errors name the field and what it allows.
func parseFakeGPUs(data []byte, node string) (*FakeDevices, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c fakeConfigFile
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty; want at least count or devices")
		}
		return nil, err
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document; want one")
	}
	gpus, mig, err := c.gpus(node)
	if err != nil {
		return nil, err
	}
	if err := c.NVLink.apply(gpus); err != nil {
		return nil, err
	}
	// NVLink is off on a GPU in MIG mode, as on real ones.
	for i := range gpus {
		if _, on := mig[i]; on {
			gpus[i].NVLinkPeers = nil
		}
		gpus[i].NVLinkPeers = slices.DeleteFunc(gpus[i].NVLinkPeers, func(p int) bool { _, on := mig[p]; return on })
		if len(gpus[i].NVLinkPeers) == 0 {
			gpus[i].NVLinkPeers = nil
		}
	}
	curves, err := c.Metrics.curves(len(gpus))
	if err != nil {
		return nil, err
	}
	faults, err := fakeFaults(c.Faults, len(gpus))
	if err != nil {
		return nil, err
	}
	driver, err := fakeText("driver_version", c.DriverVersion, defaultFakeVersion)
	if err != nil {
		return nil, err
	}
	cuda, err := fakeText("cuda_version", c.CUDAVersion, defaultFakeVersion)
	if err != nil {
		return nil, err
	}
	f := newFakeDevices(gpus, curves, faults, driver, cuda)
	f.mig = mig
	return f, nil
}

// gpus lists the GPUs the config describes, and the MIG instances of those in MIG mode by
// GPU index.
func (c *fakeConfigFile) gpus(node string) ([]api.GPU, map[int][]migInstance, error) {
	switch {
	case c.Count != 0 && len(c.Devices) > 0:
		return nil, nil, errors.New("count and devices are both set; want one of them")
	case c.Count < 0 || c.Count > maxFakeGPUs:
		return nil, nil, fmt.Errorf("count: %d is out of range; want 1 to %d", c.Count, maxFakeGPUs)
	case len(c.Devices) > maxFakeGPUs:
		return nil, nil, fmt.Errorf("devices: %d entries; want 1 to %d", len(c.Devices), maxFakeGPUs)
	case c.Count == 0 && len(c.Devices) == 0:
		return nil, nil, fmt.Errorf("no GPUs; want count (1 to %d) or a list of devices", maxFakeGPUs)
	}
	if err := checkMemory("memory_mb", c.MemoryMB); err != nil {
		return nil, nil, err
	}
	specs := c.Devices
	if c.Count > 0 {
		specs = make([]fakeDeviceSpec, c.Count)
	}
	n := len(specs)
	gpus := make([]api.GPU, n)
	mig := map[int][]migInstance{}
	for i, s := range specs {
		field := fmt.Sprintf("devices[%d].", i)
		if c.Count > 0 {
			field = ""
		}
		model, modelField := s.Model, field+"model"
		if strings.TrimSpace(model) == "" {
			model, modelField = c.Model, "model"
		}
		model, err := fakeText(modelField, model, defaultFakeModel)
		if err != nil {
			return nil, nil, err
		}
		if err := checkMemory(field+"memory_mb", s.MemoryMB); err != nil {
			return nil, nil, err
		}
		mem := s.MemoryMB
		if mem == 0 {
			mem = c.MemoryMB
		}
		if mem == 0 {
			mem = modelMemoryMB(model)
		}
		gpus[i] = fakeGPU(node, i, n, model, mem)
		if s.MIG != nil {
			instances, err := fakeMIG(field+"mig", node, i, mem, *s.MIG)
			if err != nil {
				return nil, nil, err
			}
			gpus[i].MIGMode = "enabled"
			mig[i] = instances
		}
	}
	return gpus, mig, nil
}

// fakeMIG checks the MIG instances of fake GPU i, of memMB: known profiles, memory that
// fits the GPU, at most as many as a real GPU holds.
func fakeMIG(field, node string, i int, memMB int64, specs []fakeMIGSpec) ([]migInstance, error) {
	if len(specs) > maxFakeMIGInstances {
		return nil, fmt.Errorf("%s: %d instances; want at most %d, as NVIDIA's GPUs hold", field, len(specs), maxFakeMIGInstances)
	}
	out := make([]migInstance, len(specs))
	var total int64
	for j, m := range specs {
		f := fmt.Sprintf("%s[%d]", field, j)
		profile := strings.TrimSpace(m.Profile)
		if !fakeMIGProfile().MatchString(profile) {
			return nil, fmt.Errorf("%s.profile: %q; want a MIG profile as NVIDIA names them, such as 1g.10gb, 3g.40gb or 1c.7g.80gb", f, m.Profile)
		}
		if err := checkMemory(f+".memory_mb", m.MemoryMB); err != nil {
			return nil, err
		}
		mem := m.MemoryMB
		if mem == 0 {
			mem = modelMemoryMB(profile)
		}
		total += mem
		if total > memMB {
			return nil, fmt.Errorf("%s: the instances take %d MiB up to here, more than the GPU's %d MiB; want instances that fit the GPU", f, total, memMB)
		}
		out[j] = migInstance{n: j, uuid: fakeMIGUUID(node, i, j), profile: profile, memoryMB: mem}
	}
	return out, nil
}

// checkMemory checks a GPU's memory in MiB; 0 means unset.
func checkMemory(field string, mb int64) error {
	if mb < 0 || mb > maxFakeMemoryMB {
		return fmt.Errorf("%s: %d is out of range; want 1 to %d, or leave it out for the model's", field, mb, maxFakeMemoryMB)
	}
	return nil
}

// fakeText checks a name or version: printable and short; empty takes the default.
func fakeText(field, s, def string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return def, nil
	}
	if len(s) > maxFakeTextLen {
		return "", fmt.Errorf("%s: %d characters; want at most %d", field, len(s), maxFakeTextLen)
	}
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return "", fmt.Errorf("%s: %q has a control character; want printable text", field, s)
	}
	return s, nil
}

// apply fills the GPUs' NVLinkPeers; a nil spec means no NVLink.
func (l *fakeNVLinkSpec) apply(gpus []api.GPU) error {
	if l == nil {
		return nil
	}
	n := len(gpus)
	link := func(a, b int) {
		if !slices.Contains(gpus[a].NVLinkPeers, b) {
			gpus[a].NVLinkPeers = append(gpus[a].NVLinkPeers, b)
			gpus[b].NVLinkPeers = append(gpus[b].NVLinkPeers, a)
		}
	}
	switch {
	case l.Islands != 0 && len(l.Pairs) > 0:
		return errors.New("nvlink: islands and pairs are both set; want one of them")
	case l.Islands < 0 || l.Islands > n:
		return fmt.Errorf("nvlink.islands: %d is out of range; want 1 to %d (the GPU count)", l.Islands, n)
	case l.Islands > 0 && n%l.Islands != 0:
		return fmt.Errorf("nvlink.islands: %d GPUs do not split into islands of %d; want a divisor of %d", n, l.Islands, n)
	}
	for start := 0; l.Islands > 0 && start < n; start += l.Islands {
		for a := start; a < start+l.Islands; a++ {
			for b := a + 1; b < start+l.Islands; b++ {
				link(a, b)
			}
		}
	}
	for i, p := range l.Pairs {
		switch {
		case len(p) != 2:
			return fmt.Errorf("nvlink.pairs[%d]: %d indices; want two, as in [0, 1]", i, len(p))
		case p[0] < 0 || p[0] >= n || p[1] < 0 || p[1] >= n:
			return fmt.Errorf("nvlink.pairs[%d]: %v names a GPU out of range; want indices from 0 to %d", i, p, n-1)
		case p[0] == p[1]:
			return fmt.Errorf("nvlink.pairs[%d]: %v links GPU %d to itself; want two different GPUs", i, p, p[0])
		}
		link(p[0], p[1])
	}
	for i := range gpus {
		slices.Sort(gpus[i].NVLinkPeers)
	}
	return nil
}

// curves resolves each GPU's curves: its own where given, else the defaults of the file,
// else those of an idle H100.
func (m *fakeMetricsSpec) curves(n int) ([]fakeCurve, error) {
	for i := range m.GPUs {
		if i < 0 || i >= n {
			return nil, fmt.Errorf("metrics.gpus: GPU %d is out of range; want 0 to %d", i, n-1)
		}
	}
	def, err := m.fakeCurveSpec.resolve("metrics.", defaultFakeCurve)
	if err != nil {
		return nil, err
	}
	curves := make([]fakeCurve, n)
	for i := range curves {
		curves[i] = def
		if own, ok := m.GPUs[i]; ok {
			if curves[i], err = own.resolve(fmt.Sprintf("metrics.gpus.%d.", i), def); err != nil {
				return nil, err
			}
		}
	}
	return curves, nil
}

// resolve applies the curves given over base.
func (s fakeCurveSpec) resolve(field string, base fakeCurve) (fakeCurve, error) {
	c := base
	if u := s.Utilization; u != nil {
		f := field + "utilization"
		if err := checkRange(f+".base", u.Base, 0, 100); err != nil {
			return c, err
		}
		if err := checkRange(f+".amplitude", u.Amplitude, 0, 100); err != nil {
			return c, err
		}
		c.utilBase, c.utilAmplitude, c.utilPeriod = u.Base, u.Amplitude, 0
		if u.Period != "" || u.Amplitude != 0 {
			p, err := time.ParseDuration(u.Period)
			if err != nil || p <= 0 {
				return c, fmt.Errorf("%s.period: %q; want a positive duration such as 60s or 5m (required with an amplitude)", f, u.Period)
			}
			c.utilPeriod = p
		}
	}
	if p := s.Power; p != nil {
		if err := checkIdleMax(field+"power", *p, maxFakePowerW); err != nil {
			return c, err
		}
		c.powerIdle, c.powerMax = p.Idle, p.Max
	}
	if t := s.Temperature; t != nil {
		if err := checkIdleMax(field+"temperature", *t, maxFakeTemperature); err != nil {
			return c, err
		}
		c.tempIdle, c.tempMax = t.Idle, t.Max
	}
	return c, nil
}

// checkRange checks that v is a number from lo to hi.
func checkRange(field string, v, lo, hi float64) error {
	if math.IsNaN(v) || v < lo || v > hi {
		return fmt.Errorf("%s: %v is out of range; want %v to %v", field, v, lo, hi)
	}
	return nil
}

// checkIdleMax checks a metric's range: 0 <= idle <= max <= hi.
func checkIdleMax(field string, r fakeRangeSpec, hi float64) error {
	if err := checkRange(field+".idle", r.Idle, 0, hi); err != nil {
		return err
	}
	if err := checkRange(field+".max", r.Max, r.Idle, hi); err != nil {
		return fmt.Errorf("%w (max must not be below idle)", err)
	}
	return nil
}

// fakeFaults checks the scheduled faults of a set of n GPUs.
func fakeFaults(specs []fakeFaultSpec, n int) ([]fakeFault, error) {
	faults := make([]fakeFault, 0, len(specs))
	for i, s := range specs {
		field := fmt.Sprintf("faults[%d]", i)
		if s.GPU == nil {
			return nil, fmt.Errorf("%s.gpu: missing; want a GPU index from 0 to %d", field, n-1)
		}
		if *s.GPU < 0 || *s.GPU >= n {
			return nil, fmt.Errorf("%s.gpu: %d is out of range; want 0 to %d", field, *s.GPU, n-1)
		}
		var after time.Duration
		if s.After != "" {
			var err error
			if after, err = time.ParseDuration(s.After); err != nil || after < 0 {
				return nil, fmt.Errorf("%s.after: %q; want a duration such as 30s or 10m, 0 or more", field, s.After)
			}
		}
		ev, err := faultEvent(field, *s.GPU, s.XID, s.ECC, s.Vanish)
		if err != nil {
			return nil, err
		}
		faults = append(faults, fakeFault{after: after, event: ev})
	}
	return faults, nil
}

// faultEvent is the health event of a fault given in a config or a fault file: exactly one
// of an XID, a count of ECC errors and a vanish.
func faultEvent(field string, gpu int, xid, ecc int64, vanish bool) (HealthEvent, error) {
	set := 0
	for _, on := range []bool{xid != 0, ecc != 0, vanish} {
		if on {
			set++
		}
	}
	switch {
	case set != 1:
		return HealthEvent{}, fmt.Errorf("%s: want exactly one of xid, ecc and vanish", field)
	case xid < 0 || xid > maxFakeXID:
		return HealthEvent{}, fmt.Errorf("%s.xid: %d is out of range; want 1 to %d", field, xid, maxFakeXID)
	case ecc < 0 || ecc > maxFakeECC:
		return HealthEvent{}, fmt.Errorf("%s.ecc: %d is out of range; want an error count from 1 to %d", field, ecc, maxFakeECC)
	case xid > 0:
		return xidEvent(gpu, uint64(xid)), nil
	case ecc > 0:
		return eccEvent(gpu, uint64(ecc)), nil
	default:
		return vanishEvent(gpu), nil
	}
}
