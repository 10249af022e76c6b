package sim

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Report is everything rota sim prints: what was replayed, on what, and each policy's result.
type Report struct {
	TraceFile string
	Workload  *Workload
	Config    Config
	Results   []*Result
}

// unit says how a metric's value prints.
type unit int

const (
	unitCount unit = iota
	unitDuration
	unitRatio // printed as a percentage in tables
	unitGPUHours
	unitFactor // a dimensionless number such as a slowdown
)

// metric is one row of the report: a key for JSON and CSV, a label for the table.
type metric struct {
	key, label string
	unit       unit
	value      func(*Result) float64
}

func dur(d time.Duration) float64 { return d.Seconds() }

// stat is d in seconds, or NaN when the distribution it comes from is empty.
func stat(s Stats, d time.Duration) float64 {
	if s.N == 0 {
		return math.NaN()
	}
	return d.Seconds()
}

// metrics lists the report's rows in order; METRICS.md defines each.
var metrics = []metric{
	{"jobs", "jobs replayed", unitCount, func(r *Result) float64 { return float64(r.Jobs) }},
	{"succeeded", "succeeded", unitCount, func(r *Result) float64 { return float64(r.Succeeded) }},
	{"timed_out", "timed out", unitCount, func(r *Result) float64 { return float64(r.TimedOut) }},
	{"failed", "failed (node lost, no retries left)", unitCount, func(r *Result) float64 { return float64(r.Failed) }},
	{"never_started", "never started", unitCount, func(r *Result) float64 { return float64(r.NeverStarted) }},
	{"unfinished", "started, not finished", unitCount, func(r *Result) float64 { return float64(r.Unfinished) }},
	{"jct_mean_s", "JCT mean", unitDuration, func(r *Result) float64 { return stat(r.JCT, r.JCT.Mean) }},
	{"jct_p50_s", "JCT p50", unitDuration, func(r *Result) float64 { return stat(r.JCT, r.JCT.P50) }},
	{"jct_p95_s", "JCT p95", unitDuration, func(r *Result) float64 { return stat(r.JCT, r.JCT.P95) }},
	{"jct_p99_s", "JCT p99", unitDuration, func(r *Result) float64 { return stat(r.JCT, r.JCT.P99) }},
	{"wait_mean_s", "queueing delay mean", unitDuration, func(r *Result) float64 { return stat(r.Wait, r.Wait.Mean) }},
	{"wait_p50_s", "queueing delay p50", unitDuration, func(r *Result) float64 { return stat(r.Wait, r.Wait.P50) }},
	{"wait_p95_s", "queueing delay p95", unitDuration, func(r *Result) float64 { return stat(r.Wait, r.Wait.P95) }},
	{"wait_p99_s", "queueing delay p99", unitDuration, func(r *Result) float64 { return stat(r.Wait, r.Wait.P99) }},
	{"slowdown_mean", "slowdown mean", unitFactor, func(r *Result) float64 { return r.Slowdown }},
	{"makespan_s", "makespan", unitDuration, func(r *Result) float64 { return stat(r.JCT, r.Makespan) }},
	{"gpu_utilisation", "GPU utilisation", unitRatio, func(r *Result) float64 { return r.Utilisation }},
	{"gpu_alloc_ratio_saturated", "GPU allocation while jobs wait", unitRatio, func(r *Result) float64 { return r.AllocRatio }},
	{"saturated_s", "time with jobs waiting", unitDuration, func(r *Result) float64 { return dur(r.Saturated) }},
	{"fill_alloc_100", "GPU allocation at 100% arrived", unitRatio, func(r *Result) float64 { return r.FillAlloc100 }},
	{"fill_alloc_end", "GPU allocation when all arrived", unitRatio, func(r *Result) float64 { return r.FillAllocEnd }},
	{"preemptions", "preemptions", unitCount, func(r *Result) float64 { return float64(r.Preemptions) }},
	{"preemption_gpu_hours_lost", "GPU-hours lost to preemption", unitGPUHours, func(r *Result) float64 { return r.PreemptionGPUHours }},
	{"node_failures", "node failures", unitCount, func(r *Result) float64 { return float64(r.NodeFailures) }},
	{"jobs_lost_to_failures", "jobs hit by node failures", unitCount, func(r *Result) float64 { return float64(r.JobsLostToFailures) }},
	{"failure_gpu_hours_lost", "GPU-hours lost to node failures", unitGPUHours, func(r *Result) float64 { return r.FailureGPUHours }},
}

// teamMetrics are the per-team rows, one pair per team.
var teamMetrics = []struct {
	key, label string
	unit       unit
	value      func(TeamResult) float64
}{
	{"gpu_hours_share", "GPU-hours share", unitRatio, func(t TeamResult) float64 { return t.Share }},
	{"slowdown_mean", "slowdown", unitFactor, func(t TeamResult) float64 { return t.Slowdown }},
}

// row is one line of the report with a value per policy.
type row struct {
	key, label string
	unit       unit
	values     []float64
}

// fillMetrics are the rows of a --fill report, whose columns are placements: its jobs
// arrive, are placed at once or never, and never end.
// The value is the row's label there where it differs.
var fillMetrics = map[string]string{"jobs": "jobs arrived", "never_started": "jobs that found no room", "unfinished": "jobs placed",
	"fill_alloc_100": "", "fill_alloc_end": ""}

func (rep *Report) rows() []row {
	var out []row
	fill := rep.Workload.fill > 0
	for _, m := range metrics {
		r := row{key: m.key, label: m.label, unit: m.unit}
		if label, ok := fillMetrics[m.key]; fill && !ok {
			continue
		} else if fill && label != "" {
			r.label = label
		}
		for _, res := range rep.Results {
			r.values = append(r.values, m.value(res))
		}
		out = append(out, r)
	}
	if fill {
		return out
	}
	for _, team := range rep.teams() {
		for _, m := range teamMetrics {
			r := row{key: "team." + team + "." + m.key, label: "team " + team + " " + m.label, unit: m.unit}
			for _, res := range rep.Results {
				v := math.NaN()
				for _, t := range res.Teams {
					if t.Team == team {
						v = m.value(t)
					}
				}
				r.values = append(r.values, v)
			}
			out = append(out, r)
		}
	}
	return out
}

// teams returns the team names of the results, sorted (every result has the same teams).
func (rep *Report) teams() []string {
	if len(rep.Results) == 0 {
		return nil
	}
	var names []string
	for _, t := range rep.Results[0].Teams {
		names = append(names, t.Team)
	}
	return names
}

// header returns the lines that say what was replayed, for the table's top.
func (rep *Report) header() []string {
	w := rep.Workload
	t := w.Trace
	c := w.Cluster
	lines := []string{
		fmt.Sprintf("trace:   %s (%s): %d rows, %d jobs replayed, %d skipped", rep.TraceFile, t.Format, t.Rows, len(w.Jobs), len(w.Skipped)),
		fmt.Sprintf("cluster: %s: %d nodes, %d GPUs", c.Source, len(c.Nodes), c.GPUs()),
		fmt.Sprintf("config:  scale %s, time limit %s, checkpoint every %s, seed %d%s", strconv.FormatFloat(rep.Config.Scale, 'g', -1, 64),
			orDefault(rep.Config.TimeLimit, "hour"), rep.Config.Checkpoint, rep.Config.Seed, failureText(rep.Config)),
	}
	if l := speedsText(w); l != "" {
		lines = append(lines, "speeds:  "+l)
	}
	if w.fill > 0 {
		lines = append(lines, fmt.Sprintf("fill:    %d jobs in a random order (seed %d) until their GPU requests reached %s× the cluster's GPUs; they never end; columns are placements",
			len(w.Jobs), rep.Config.Seed, strconv.FormatFloat(w.fill, 'g', -1, 64)))
	}
	for _, n := range t.Notes {
		lines = append(lines, "note:    "+n)
	}
	return lines
}

// speedsText is the header's speed table: the cluster's relative speeds by model, and how
// many jobs bring their own; "" when every job runs at speed 1 everywhere.
func speedsText(w *Workload) string {
	var parts []string
	for _, m := range slices.Sorted(maps.Keys(w.Cluster.Speeds)) {
		parts = append(parts, fmt.Sprintf("%s %s", m, strconv.FormatFloat(w.Cluster.Speeds[m], 'g', -1, 64)))
	}
	own := 0
	for _, j := range w.Jobs {
		if len(j.Speeds) > 0 {
			own++
		}
	}
	if len(parts) == 0 && own == 0 {
		return ""
	}
	text := "every model 1"
	if len(parts) > 0 {
		text = strings.Join(parts, ", ") + " (relative; other models 1)"
	}
	if own > 0 {
		text += fmt.Sprintf("; %d jobs give their own per model (trace column speeds)", own)
	}
	return text
}

func failureText(c Config) string {
	if c.NodeMTBF <= 0 {
		return ""
	}
	return fmt.Sprintf(", node MTBF %s, repair %s, %d retries", c.NodeMTBF, c.NodeRepair, c.Retries)
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// WriteTable writes the human table: one row per metric, one column per policy, labels
// flush left and values flush right.
func (rep *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	for _, l := range rep.header() {
		b.WriteString(l + "\n")
	}
	b.WriteString("\n")
	rows := rep.rows()
	cells := make([][]string, 0, len(rows)+1)
	head := []string{"metric"}
	for _, res := range rep.Results {
		head = append(head, res.Policy)
	}
	cells = append(cells, head)
	for _, r := range rows {
		line := []string{r.label}
		for _, v := range r.values {
			line = append(line, human(v, r.unit))
		}
		cells = append(cells, line)
	}
	width := make([]int, len(head))
	for _, line := range cells {
		for k, c := range line {
			width[k] = max(width[k], utf8.RuneCountInString(c))
		}
	}
	for _, line := range cells {
		for k, c := range line {
			pad := strings.Repeat(" ", width[k]-utf8.RuneCountInString(c))
			if k == 0 {
				b.WriteString(c + pad)
				continue
			}
			b.WriteString("  " + pad + c)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// human formats a value for the table.
func human(v float64, u unit) string {
	if math.IsNaN(v) {
		return "-"
	}
	switch u {
	case unitDuration:
		return humanDuration(time.Duration(math.Round(v * 1e9)))
	case unitRatio:
		return strconv.FormatFloat(100*v, 'f', 1, 64) + "%"
	case unitGPUHours:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case unitFactor:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// humanDuration prints a duration with two units at most: 45s, 12m05s, 3h07m, 2d04h.
func humanDuration(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
}

// WriteCSV writes the rows as CSV: metric key, then one column per policy. Durations are in
// seconds, ratios in [0, 1]; an undefined value is empty.
func (rep *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	head := []string{"metric"}
	for _, res := range rep.Results {
		head = append(head, res.Policy)
	}
	if err := cw.Write(head); err != nil {
		return err
	}
	for _, r := range rep.rows() {
		rec := []string{r.key}
		for _, v := range r.values {
			rec = append(rec, plain(v))
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// plain prints a value for machines: integers as integers, other values rounded to six
// significant digits, never in exponent form.
func plain(v float64) string {
	switch {
	case math.IsNaN(v):
		return ""
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 6, 64), 64)
	return strconv.FormatFloat(r, 'f', -1, 64)
}

// jsonNumber is a metric value in JSON: null when undefined.
type jsonNumber float64

func (n jsonNumber) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(n)) || math.IsInf(float64(n), 0) {
		return []byte("null"), nil
	}
	return []byte(plain(float64(n))), nil
}

// WriteJSON writes the report as one JSON document. Metric keys are those of the CSV;
// durations are in seconds, ratios in [0, 1], undefined values null.
func (rep *Report) WriteJSON(w io.Writer) error {
	type policyOut struct {
		Policy  string          `json:"policy"`
		Metrics json.RawMessage `json:"metrics"`
	}
	type skippedOut struct {
		Line   int    `json:"line"`
		Reason string `json:"reason"`
	}
	out := struct {
		Trace struct {
			File    string       `json:"file"`
			Format  string       `json:"format"`
			Rows    int          `json:"rows"`
			Jobs    int          `json:"jobs"`
			Skipped []skippedOut `json:"skipped"`
			Notes   []string     `json:"notes"`
		} `json:"trace"`
		Cluster struct {
			Source string `json:"source"`
			Nodes  int    `json:"nodes"`
			GPUs   int    `json:"gpus"`
			// Speeds is the cluster file's speed table; absent when it has none.
			Speeds map[string]float64 `json:"speeds,omitempty"`
		} `json:"cluster"`
		Config struct {
			Scale       float64 `json:"scale"`
			Fill        float64 `json:"fill,omitempty"`
			TimeLimit   string  `json:"time_limit"`
			CheckpointS float64 `json:"checkpoint_s"`
			Seed        uint64  `json:"seed"`
			NodeMTBFS   float64 `json:"node_mtbf_s,omitempty"`
			NodeRepairS float64 `json:"node_repair_s,omitempty"`
			Retries     int     `json:"retries"`
			HalfLifeS   float64 `json:"fair_share_half_life_s"`
		} `json:"config"`
		Policies []policyOut `json:"policies"`
	}{}
	wl := rep.Workload
	out.Trace.File, out.Trace.Format, out.Trace.Rows, out.Trace.Jobs = rep.TraceFile, wl.Trace.Format, wl.Trace.Rows, len(wl.Jobs)
	out.Trace.Skipped = []skippedOut{}
	for _, b := range wl.Skipped {
		out.Trace.Skipped = append(out.Trace.Skipped, skippedOut(b))
	}
	out.Trace.Notes = append([]string{}, wl.Trace.Notes...)
	out.Cluster.Source, out.Cluster.Nodes, out.Cluster.GPUs = wl.Cluster.Source, len(wl.Cluster.Nodes), wl.Cluster.GPUs()
	out.Cluster.Speeds = wl.Cluster.Speeds
	c := rep.Config
	out.Config.Fill = wl.fill
	out.Config.Scale, out.Config.TimeLimit, out.Config.CheckpointS, out.Config.Seed = c.Scale, orDefault(c.TimeLimit, "hour"), c.Checkpoint.Seconds(), c.Seed
	if c.NodeMTBF > 0 {
		out.Config.NodeMTBFS, out.Config.NodeRepairS = c.NodeMTBF.Seconds(), c.NodeRepair.Seconds()
	}
	out.Config.Retries, out.Config.HalfLifeS = c.Retries, c.HalfLife.Seconds()
	rows := rep.rows()
	for i, res := range rep.Results {
		var b bytes.Buffer
		b.WriteByte('{')
		for k, r := range rows {
			if k > 0 {
				b.WriteByte(',')
			}
			key, _ := json.Marshal(r.key)
			val, _ := jsonNumber(r.values[i]).MarshalJSON()
			b.Write(key)
			b.WriteByte(':')
			b.Write(val)
		}
		b.WriteByte('}')
		out.Policies = append(out.Policies, policyOut{Policy: res.Policy, Metrics: b.Bytes()})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
