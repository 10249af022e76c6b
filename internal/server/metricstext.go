package server

import (
	"bufio"
	"compress/gzip"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// The series that grow with the cluster, each GPU's readings and each node's version
// drift, are written as text here rather than by the Prometheus registry. The registry
// builds a message for every series, checks it, sorts each family's series by their
// labels and then writes them: at 10,000 nodes of 8 GPUs with readings and 104,000 jobs,
// a scrape took 3.0 s of CPU and allocated 413 MB for 32 MB of text, every 15 to 60 s
// under Prometheus; written here, 0.33 s and 87 MB (BenchmarkMetricsScrape at that size). Text is what Prometheus asks for
// unless told to scrape protobuf; a scrape that asks for protobuf, or for some families
// only (name[]), is answered by the registry alone, with the same series.

// Names and help of the per-node families, shared by their descriptions (metrics.go) and
// their text.
var (
	famUtil   = family{"rota_gpu_utilization_ratio", "A GPU's utilisation (0 to 1) in its node's latest reading."}
	famMemory = family{"rota_gpu_memory_used_bytes", "A GPU's memory in use in its node's latest reading."}
	famPower  = family{"rota_gpu_power_watts", "A GPU's power draw in its node's latest reading."}
	famTemp   = family{"rota_gpu_temperature_celsius", "A GPU's temperature in its node's latest reading."}
	famDrift  = family{"rota_node_version_drift", "1 while a node's driver or CUDA version (component) is outside the range its pool wants, else 0; " +
		"only for the components a node's pool wants a range for."}
)

type family struct{ name, help string }

// serveMetrics answers a scrape that may read metrics.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	format := expfmt.NegotiateAccept(r.Header, expfmt.DefaultAcceptedFormats()...)
	if format.FormatType() != expfmt.TypeTextPlain || r.URL.Query().Has("name[]") {
		s.metrics.handler.ServeHTTP(w, r)
		return
	}
	s.mu.Lock()
	st := s.stateMetrics()
	s.mu.Unlock()
	counts := prometheus.NewRegistry()
	counts.MustRegister(countsCollector{st})
	fams, err := prometheus.Gatherers{s.metrics.reg, counts}.Gather()
	if err != nil {
		s.log.Error("metrics: gathering", "err", err)
		if len(fams) == 0 {
			http.Error(w, "gathering metrics: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	h := w.Header()
	h.Add("Vary", "Accept")
	h.Add("Vary", "Accept-Encoding")
	h.Set("Content-Type", string(format))
	out := io.Writer(w)
	if acceptsGzip(r) {
		h.Set("Content-Encoding", "gzip")
		gz := gzip.NewWriter(w)
		defer gz.Close()
		out = gz
	}
	bw := bufio.NewWriterSize(out, 64<<10)
	defer bw.Flush()
	enc := expfmt.NewEncoder(bw, format)
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			s.log.Warn("metrics: writing the answer", "err", err)
			return
		}
	}
	st.writeNodeSeries(bw)
}

// acceptsGzip reports whether the request's Accept-Encoding takes gzip: named, with a
// weight that is not zero.
func acceptsGzip(r *http.Request) bool {
	for part := range strings.SplitSeq(r.Header.Get("Accept-Encoding"), ",") {
		coding, params, _ := strings.Cut(part, ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			continue
		}
		name, value, ok := strings.Cut(strings.TrimSpace(params), "=")
		if !ok || strings.TrimSpace(name) != "q" {
			return true
		}
		q, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		return err != nil || q > 0
	}
	return false
}

// countsCollector reports one scrape's counts: made for that scrape, it describes nothing
// beforehand.
type countsCollector struct{ st *stateCounts }

func (countsCollector) Describe(chan<- *prometheus.Desc) {}

func (c countsCollector) Collect(ch chan<- prometheus.Metric) { c.st.emitCounts(ch) }

// writeNodeSeries writes what emitNodes emits, in the text format, with the labels of
// each series in name order as the registry writes them. A family with no series is left
// out, as the registry leaves it.
func (c *stateCounts) writeNodeSeries(w *bufio.Writer) {
	var num []byte
	value := func(v float64) {
		num = strconv.AppendFloat(num[:0], v, 'g', -1, 64)
		w.Write(num)
		w.WriteByte('\n')
	}
	reading := func(f family, skipUnknown bool, v func(*gpuReading) float64) {
		header := false
		for i := range c.readings {
			r := &c.readings[i]
			if skipUnknown && r.utilUnknown {
				continue
			}
			if !header {
				writeFamilyHeader(w, f)
				header = true
			}
			w.WriteString(f.name)
			w.WriteString(`{gpu="`)
			w.Write(strconv.AppendInt(num[:0], int64(r.index), 10))
			writeLabel(w, `",model="`, r.model)
			writeLabel(w, `",node="`, r.node)
			writeLabel(w, `",pool="`, r.pool)
			writeLabel(w, `",uuid="`, r.uuid)
			w.WriteString(`"} `)
			value(v(r))
		}
	}
	reading(famUtil, true, func(r *gpuReading) float64 { return r.util })
	reading(famMemory, false, func(r *gpuReading) float64 { return r.memBytes })
	reading(famPower, false, func(r *gpuReading) float64 { return r.power })
	reading(famTemp, false, func(r *gpuReading) float64 { return r.tc })
	if len(c.drift) > 0 {
		writeFamilyHeader(w, famDrift)
	}
	for _, d := range c.drift {
		w.WriteString(famDrift.name)
		writeLabel(w, `{component="`, d.component)
		writeLabel(w, `",node="`, d.node)
		writeLabel(w, `",pool="`, d.pool)
		w.WriteString(`"} `)
		value(d.value())
	}
}

func writeFamilyHeader(w *bufio.Writer, f family) {
	w.WriteString("# HELP ")
	w.WriteString(f.name)
	w.WriteByte(' ')
	helpEscaper.WriteString(w, f.help)
	w.WriteString("\n# TYPE ")
	w.WriteString(f.name)
	w.WriteString(" gauge\n")
}

// writeLabel writes prefix, then v escaped as a label value.
func writeLabel(w *bufio.Writer, prefix, v string) {
	w.WriteString(prefix)
	labelEscaper.WriteString(w, v)
}

// The text format's escapes: in help, backslash and new line; in label values, the
// double quote too.
var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)
