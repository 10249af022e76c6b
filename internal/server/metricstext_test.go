package server

import (
	"compress/gzip"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/proto"

	"github.com/rotahq/rota/internal/api"
)

// The text answer, whose per-node series the server writes itself, says what the
// registry says in protobuf, series for series: after the metrics scenario, with a second
// node whose GPU model needs escaping, a MIG device that has no utilisation, and
// a node whose driver drifts. With gzip asked for, the same, compressed.
func TestMetricsTextMatchesRegistry(t *testing.T) {
	h, _, _ := metricsScenario(t)
	h.setPools(api.Pool{Name: "big", Driver: ">=550"}, api.Pool{Name: "odd", Driver: ">=560", CUDA: ">=12.6"})
	h.beatFull("n2", 2, func(hb *api.Heartbeat) {
		hb.Inventory.Labels = map[string]string{"pool": "odd"}
		hb.Inventory.DriverVersion, hb.Inventory.CUDAVersion = "550.54.15", "12.4"
		for i := range hb.Inventory.GPUs {
			hb.Inventory.GPUs[i].Model = `A100 "SXM4" \ 40GB`
		}
		hb.Telemetry = &api.Telemetry{Time: h.clock.Now(), GPUs: []api.GPUSample{
			{Index: 0, UtilizationPct: 12.5, MemoryUsedMB: 3, PowerW: 1e-3, TemperatureC: 41},
			{Index: 1, UtilizationUnknown: true, MemoryUsedMB: 700, TemperatureC: 50},
		}}
	})
	h.clock.Add(time.Second)

	text := h.scrapeAs(t, "", false)
	zipped := h.scrapeAs(t, "", true)
	proto := h.scrapeAs(t, `application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited`, false)
	for _, name := range []string{"rota_gpu_utilization_ratio", "rota_gpu_memory_used_bytes", "rota_gpu_power_watts",
		"rota_gpu_temperature_celsius", "rota_node_version_drift", "rota_gpus", "rota_jobs"} {
		if len(proto[name].GetMetric()) == 0 {
			t.Errorf("the registry reports no %s: the scenario should have some", name)
		}
	}
	if n := len(proto["rota_gpu_utilization_ratio"].GetMetric()); n != 3 {
		t.Errorf("%d utilisation series; want 3 (two GPUs on n1, one on n2: the MIG device has none)", n)
	}
	if _, ok := text.value("rota_gpu_utilization_ratio", labels{"node": "n2", "model": `A100 "SXM4" \ 40GB`}); !ok {
		t.Errorf("no utilisation series for n2's GPU with its model as reported")
	}
	for _, got := range []families{text, zipped} {
		if !slices.Equal(familyNames(got), familyNames(proto)) {
			t.Fatalf("families %v in text; %v in protobuf", familyNames(got), familyNames(proto))
		}
		for name, want := range proto {
			// The parser gives each series of a text family the family's order of
			// labels; compare the series as sets.
			if g, w := seriesOf(got[name]), seriesOf(want); !slices.Equal(g, w) {
				t.Errorf("%s:\n text     %q\n protobuf %q", name, g, w)
			}
			if got[name].GetHelp() != want.GetHelp() || got[name].GetType() != want.GetType() {
				t.Errorf("%s: help %q, type %v in text; %q, %v in protobuf", name, got[name].GetHelp(), got[name].GetType(), want.GetHelp(), want.GetType())
			}
		}
	}
}

// scrapeAs scrapes /metrics asking for format (the text format when empty), gzip when
// zipped, and parses the answer.
func (h *harness) scrapeAs(t *testing.T, format string, zipped bool) families {
	t.Helper()
	req, _ := http.NewRequest("GET", h.http.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+h.token)
	if format != "" {
		req.Header.Set("Accept", format)
	}
	if zipped {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d", resp.StatusCode)
	}
	body := io.Reader(resp.Body)
	if zipped {
		if resp.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("asked for gzip; got Content-Encoding %q", resp.Header.Get("Content-Encoding"))
		}
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		body = zr
	}
	ctype := resp.Header.Get("Content-Type")
	if format == "" {
		if !strings.HasPrefix(ctype, "text/plain") {
			t.Fatalf("Content-Type %q; want text/plain", ctype)
		}
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(body)
		if err != nil {
			t.Fatalf("parse /metrics: %v", err)
		}
		return fams
	}
	fams := families{}
	dec := expfmt.NewDecoder(body, expfmt.Format(ctype))
	for {
		var f dto.MetricFamily
		if err := dec.Decode(&f); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode /metrics as %s: %v", ctype, err)
		}
		fams[f.GetName()] = proto.Clone(&f).(*dto.MetricFamily)
	}
	return fams
}

func familyNames(f families) []string {
	var names []string
	for name := range f {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// seriesOf renders each series of f as its labels, sorted by name, and its value,
// sorted.
func seriesOf(f *dto.MetricFamily) []string {
	var out []string
	for _, m := range f.GetMetric() {
		var b strings.Builder
		ls := slices.Clone(m.GetLabel())
		slices.SortFunc(ls, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
		for _, l := range ls {
			b.WriteString(l.GetName() + "=" + l.GetValue() + " ")
		}
		switch {
		case m.GetGauge() != nil:
			b.WriteString(model.SampleValue(m.GetGauge().GetValue()).String())
		case m.GetCounter() != nil:
			b.WriteString(model.SampleValue(m.GetCounter().GetValue()).String())
		case m.GetHistogram() != nil:
			b.WriteString(model.SampleValue(m.GetHistogram().GetSampleSum()).String())
		}
		out = append(out, b.String())
	}
	slices.Sort(out)
	return out
}

func TestAcceptsGzip(t *testing.T) {
	for header, want := range map[string]bool{
		"": false, "identity": false, "gzip": true, "GZIP": true, "br, gzip;q=0.5": true,
		"gzip;q=0": false, "gzip; q=0.0": false, "gzip;q=0.001": true, "deflate, br": false,
	} {
		r, _ := http.NewRequest("GET", "/metrics", nil)
		r.Header.Set("Accept-Encoding", header)
		if got := acceptsGzip(r); got != want {
			t.Errorf("Accept-Encoding %q: gzip %v; want %v", header, got, want)
		}
	}
}
