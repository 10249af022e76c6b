package report

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// The monthly review pack: the evidence a manager takes to a review, as CSV files for
// spreadsheets and one HTML page with the same tables and charts. The page stands alone:
// inline CSS, inline SVG charts drawn here, no JavaScript, no link out, so it can be
// mailed or archived and still open.

// Pack is what WritePack writes.
type Pack struct {
	// Month names the pack ("2026-11"); Since and Until bound it.
	Month        string
	Since, Until time.Time
	Generated    time.Time
	// Reports are the month's usage reports by grouping; the pack uses every grouping.
	Reports map[string]api.UsageReport
	// Audit is the month's audit trail (changes made through the API) and Preemptions
	// its preempt events. AuditKnown is false when the caller could not read them
	// (only admins can); the governance part then has only what the reports say.
	AuditKnown  bool
	Audit       []api.Event
	Preemptions []api.Event
	// Notes are shown at the top of the page.
	Notes []string
}

// packReports are the reports of each CSV file of the pack.
var packReports = []struct{ file, by string }{
	{"resources-gpu-model.csv", api.ByGPUModel},
	{"resources-node.csv", api.ByNode},
	{"tasks-team.csv", api.ByTeam},
	{"tasks-user.csv", api.ByUser},
	{"tasks-queue.csv", api.ByQueue},
	{"capacity-hour-of-week.csv", api.ByHourOfWeek},
	{"capacity-day.csv", api.ByDay},
}

// Files lists the files WritePack writes for p, the page last.
func (p Pack) Files() []string {
	var files []string
	for _, r := range packReports {
		files = append(files, r.file)
	}
	files = append(files, "governance-preemptions.csv")
	if p.AuditKnown {
		files = append(files, "governance-quota-changes.csv", "governance-preempt-events.csv", "governance-audit-counts.csv")
	}
	return append(files, "report.html")
}

// WritePack writes p's files (see Files) into dir, which it creates if needed.
func WritePack(dir string, p Pack) error {
	for _, r := range packReports {
		if _, ok := p.Reports[r.by]; !ok {
			return fmt.Errorf("report pack: the %s report is missing", r.by)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report pack: %w", err)
	}
	for _, r := range packReports {
		rep := p.Reports[r.by]
		if err := writeFile(dir, r.file, func(w io.Writer) error { return WriteCSV(w, rep) }); err != nil {
			return err
		}
	}
	tables := governance(p)
	for _, t := range tables {
		if err := writeFile(dir, t.file, t.writeCSV); err != nil {
			return err
		}
	}
	return writeFile(dir, "report.html", func(w io.Writer) error { return writeHTML(w, p, tables) })
}

func writeFile(dir, name string, write func(io.Writer) error) error {
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		return fmt.Errorf("report pack: %s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("report pack: %w", err)
	}
	return nil
}

// table is a titled table of strings: a governance CSV and a table of the page.
type table struct {
	Title string
	file  string
	Head  []string
	Rows  [][]string
	// Empty says why a table has no rows.
	Empty string
}

func (t table) writeCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write(t.Head)
	for _, r := range t.Rows {
		safe := make([]string, len(r))
		for i, c := range r {
			safe[i] = csvSafe(c)
		}
		cw.Write(safe)
	}
	cw.Flush()
	return cw.Error()
}

// governance makes the governance tables: preemptions by team from the reports, and,
// from the audit trail where it is known, quota changes, preempt events and the count of
// changes by kind.
func governance(p Pack) []table {
	pre := table{Title: "Preemptions by team", file: "governance-preemptions.csv",
		Head: []string{"team", "preemptions", "waste_gpu_hours"}, Empty: "No attempt was preempted this month."}
	for _, r := range p.Reports[api.ByTeam].Rows {
		if r.Preemptions > 0 {
			pre.Rows = append(pre.Rows, []string{r.Key, strconv.Itoa(r.Preemptions), num(r.PreemptionWasteGPUHours)})
		}
	}
	if !p.AuditKnown {
		return []table{pre}
	}
	quota := table{Title: "Quota changes", file: "governance-quota-changes.csv",
		Head: []string{"time", "actor", "role", "source", "message", "before", "after"}, Empty: "No quota changed this month."}
	counts := map[string]int{}
	for _, e := range p.Audit {
		counts[e.Kind]++
		if e.Kind == api.EventQuota {
			quota.Rows = append(quota.Rows, []string{e.Time.UTC().Format(time.RFC3339), e.Actor, e.Role, e.Source, e.Message,
				compact(e.Before), compact(e.After)})
		}
	}
	events := table{Title: "Preempt events", file: "governance-preempt-events.csv",
		Head: []string{"time", "job", "attempt", "message"}, Empty: "The scheduler preempted nothing this month."}
	for _, e := range p.Preemptions {
		events.Rows = append(events.Rows, []string{e.Time.UTC().Format(time.RFC3339), strconv.FormatInt(e.JobID, 10),
			strconv.Itoa(e.Attempt), e.Message})
	}
	audit := table{Title: "Changes made through the API, by kind", file: "governance-audit-counts.csv",
		Head: []string{"kind", "count"}, Empty: "Nothing was changed through the API this month."}
	kinds := make([]string, 0, len(counts))
	for k := range counts {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		audit.Rows = append(audit.Rows, []string{k, strconv.Itoa(counts[k])})
	}
	return []table{pre, quota, events, audit}
}

// compact prints a JSON value on one line; "" when there is none.
func compact(v json.RawMessage) string {
	var buf bytes.Buffer
	if len(v) == 0 || json.Compact(&buf, v) != nil {
		return ""
	}
	return buf.String()
}

// page is what the HTML template shows.
type page struct {
	Pack       Pack
	Title      string
	Total      api.UsageRow
	Currency   string
	Summary    [][2]string
	Resources  []chart
	Tasks      []chart
	Capacity   []chart
	Usage      map[string]table
	Governance []table
}

func writeHTML(w io.Writer, p Pack, gov []table) error {
	team := p.Reports[api.ByTeam]
	pg := page{Pack: p, Title: "rota review pack, " + p.Month, Total: team.Total, Currency: team.Currency,
		Usage: map[string]table{}, Governance: gov}
	t := team.Total
	pg.Summary = [][2]string{
		{"GPU-hours allocated", hours(t.GPUHours)},
		{"GPU-hours effective (measured part)", effective(t) + " of " + hours(t.MeasuredGPUHours)},
		{"Utilisation where measured", percent(t.UtilizationPct)},
		{"Capacity, GPU-hours", hours(t.CapacityGPUHours)},
		{"Capacity nobody held", hours(t.IdleCapacityGPUHours)},
		{"Jobs", strconv.Itoa(t.Jobs)},
		{"Attempts that succeeded", rate(t.SuccessRate)},
		{"Wait p50 / p95", waits(t)},
		{"Preemptions / waste GPU-hours", strconv.Itoa(t.Preemptions) + " / " + hours(t.PreemptionWasteGPUHours)},
		{"Idle holding, GPU-hours", hours(t.IdleGPUHours)},
	}
	if t.Cost != nil {
		pg.Summary = append(pg.Summary, [2]string{"Cost (" + team.Currency + ")", money(t.Cost)})
	}
	for _, by := range api.PackGroupings() {
		rep := p.Reports[by]
		head, rows := Cells(rep)
		pg.Usage[by] = table{Title: Title(rep), Head: head, Rows: rows}
	}
	pg.Resources = []chart{usageBars("GPU-hours by GPU model", p.Reports[api.ByGPUModel])}
	pg.Tasks = []chart{usageBars("GPU-hours by team", p.Reports[api.ByTeam]), usageBars("GPU-hours by queue", p.Reports[api.ByQueue])}
	pg.Capacity = []chart{capacityLines("GPU-hours by day against capacity", p.Reports[api.ByDay]),
		capacityLines("GPU-hours by hour of the week (UTC) against capacity", p.Reports[api.ByHourOfWeek])}
	return pageTemplate().Execute(w, pg)
}

// chart is an SVG drawing made of rectangles, lines and texts, in a viewBox of
// Width × Height. The template writes it; every string in it is escaped there.
type chart struct {
	Title         string
	Width, Height int
	Rects         []rect
	Lines         []polyline
	Texts         []text
	Legend        []legendItem
}

type rect struct {
	X, Y, W, H float64
	Class      string
	Tip        string
}

type polyline struct {
	Points string
	Class  string
}

type text struct {
	X, Y   float64
	Anchor string
	Text   string
}

type legendItem struct{ Class, Label string }

// Chart geometry, in viewBox units.
const (
	chartW      = 760.0
	chartH      = 260.0
	plotLeft    = 56.0
	plotRight   = 12.0
	plotTop     = 12.0
	plotBottom  = 48.0
	maxBarLabel = 14
)

// usageBars draws allocated and effective GPU-hours per row, side by side.
func usageBars(title string, rep api.UsageReport) chart {
	c := chart{Title: title, Width: int(chartW), Height: int(chartH),
		Legend: []legendItem{{"alloc", "allocated"}, {"eff", "effective (measured)"}}}
	top := 0.0
	for _, r := range rep.Rows {
		top = max(top, r.GPUHours)
	}
	y := c.axis(top)
	slot := (chartW - plotLeft - plotRight) / float64(max(1, len(rep.Rows)))
	bw := slot * 0.38
	for i, r := range rep.Rows {
		x := plotLeft + float64(i)*slot + slot*0.1
		c.Rects = append(c.Rects,
			rect{X: x, Y: y(r.GPUHours), W: bw, H: y(0) - y(r.GPUHours), Class: "alloc", Tip: fmt.Sprintf("%s: %s GPU-hours allocated", r.Key, hours(r.GPUHours))},
			rect{X: x + bw, Y: y(r.EffectiveGPUHours), W: bw, H: y(0) - y(r.EffectiveGPUHours), Class: "eff", Tip: fmt.Sprintf("%s: %s GPU-hours effective", r.Key, effective(r))})
		c.Texts = append(c.Texts, text{X: x + bw, Y: chartH - plotBottom + 16, Anchor: "middle", Text: truncateLabel(r.Key)})
	}
	return c
}

// capacityLines draws the capacity and the GPU-hours used per row as two lines; with
// many rows only some are labelled.
func capacityLines(title string, rep api.UsageReport) chart {
	c := chart{Title: title, Width: int(chartW), Height: int(chartH),
		Legend: []legendItem{{"cap", "capacity"}, {"used", "allocated"}}}
	top := 0.0
	for _, r := range rep.Rows {
		top = max(top, r.CapacityGPUHours, r.GPUHours)
	}
	y := c.axis(top)
	n := len(rep.Rows)
	step := (chartW - plotLeft - plotRight) / float64(max(1, n-1))
	labelEvery := max(1, (n+7)/8) // at most 8 labels fit
	var capPts, usedPts bytes.Buffer
	for i, r := range rep.Rows {
		x := plotLeft + float64(i)*step
		fmt.Fprintf(&capPts, "%.1f,%.1f ", x, y(r.CapacityGPUHours))
		fmt.Fprintf(&usedPts, "%.1f,%.1f ", x, y(r.GPUHours))
		if i%labelEvery == 0 {
			label := r.Key
			if rep.By == api.ByDay {
				label = label[len("2006-"):] // the month and day
			}
			c.Texts = append(c.Texts, text{X: x, Y: chartH - plotBottom + 16, Anchor: "middle", Text: truncateLabel(label)})
		}
		c.Rects = append(c.Rects, rect{X: x - step/2, Y: plotTop, W: step, H: chartH - plotTop - plotBottom, Class: "hover",
			Tip: fmt.Sprintf("%s: %s of %s GPU-hours held", r.Key, hours(r.GPUHours), hours(r.CapacityGPUHours))})
	}
	c.Lines = []polyline{{Points: capPts.String(), Class: "cap"}, {Points: usedPts.String(), Class: "used"}}
	return c
}

// axis draws the value axis from 0 to top and returns the function that places a value.
func (c *chart) axis(top float64) func(float64) float64 {
	top = niceTop(top)
	plotH := chartH - plotTop - plotBottom
	y := func(v float64) float64 { return plotTop + plotH - v/top*plotH }
	for i := 0; i <= 4; i++ {
		v := top * float64(i) / 4
		c.Texts = append(c.Texts, text{X: plotLeft - 6, Y: y(v) + 4, Anchor: "end", Text: strconv.FormatFloat(v, 'f', -1, 64)})
		c.Lines = append(c.Lines, polyline{Points: fmt.Sprintf("%.1f,%.1f %.1f,%.1f", plotLeft, y(v), chartW-plotRight, y(v)), Class: "grid"})
	}
	return y
}

// niceTop rounds an axis' top up to four steps of 1, 2 or 5 × a power of ten, so its
// ticks read 0, 5, 10, 15, 20 rather than 0, 4, 7, 11, 14.
func niceTop(top float64) float64 {
	if top <= 0 {
		return 4
	}
	unit := math.Pow(10, math.Floor(math.Log10(top/4)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if 4*m*unit >= top {
			return 4 * m * unit
		}
	}
	return 40 * unit
}

func truncateLabel(s string) string {
	r := []rune(s)
	if len(r) > maxBarLabel {
		return string(r[:maxBarLabel-1]) + "…"
	}
	return s
}

// pageTemplate is parsed on first use: most runs of the binary never write a pack.
var pageTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("page").Funcs(template.FuncMap{
		"time": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") },
	}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{.Title}}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;padding:0 1em;color:#1d2330}
h1{font-size:1.6em}h2{margin-top:2em;border-bottom:2px solid #d8dce6;padding-bottom:.2em}
table{border-collapse:collapse;margin:.8em 0 1.6em;font-variant-numeric:tabular-nums}
th,td{padding:.25em .7em;border-bottom:1px solid #e4e7ee;text-align:right;white-space:nowrap}
th:first-child,td:first-child{text-align:left}th{background:#f3f5f9}
tr:last-child td{font-weight:600;border-top:2px solid #b9c0cf}
table.plain tr:last-child td{font-weight:normal;border-top:none}
.scroll{overflow-x:auto}.note{color:#555}.summary td{text-align:left}
svg{width:100%;max-width:760px;height:auto;display:block;margin:.5em 0}
svg text{font-size:11px;fill:#444}
.alloc{fill:#4c72b0}.eff{fill:#55a868}.grid{stroke:#e4e7ee;fill:none}
.cap{stroke:#c44e52;fill:none;stroke-width:2}.used{stroke:#4c72b0;fill:none;stroke-width:2}
.hover{fill:transparent}.hover:hover{fill:rgba(0,0,0,.05)}
.legend span{display:inline-block;margin-right:1.2em}.legend i{display:inline-block;width:.9em;height:.9em;margin-right:.3em;vertical-align:-.1em}
.legend .alloc,.legend .used{background:#4c72b0}.legend .eff{background:#55a868}.legend .cap{background:#c44e52}
</style>
</head>
<body>
<h1>{{.Title}}</h1>
<p>From {{time .Pack.Since}} to {{time .Pack.Until}}; made {{time .Pack.Generated}}.</p>
{{with .Pack.Notes}}<ul class="note">{{range .}}<li>{{.}}</li>{{end}}</ul>{{end}}
<table class="summary plain">{{range .Summary}}<tr><th>{{index . 0}}</th><td>{{index . 1}}</td></tr>{{end}}</table>

<h2>Resources</h2>
{{range .Resources}}{{template "chart" .}}{{end}}
{{template "table" index .Usage "gpu-model"}}
{{template "table" index .Usage "node"}}

<h2>Tasks</h2>
{{range .Tasks}}{{template "chart" .}}{{end}}
{{template "table" index .Usage "team"}}
{{template "table" index .Usage "user"}}
{{template "table" index .Usage "queue"}}

<h2>Governance</h2>
{{if not .Pack.AuditKnown}}<p class="note">The audit trail (quota changes, preempt events, changes by kind) is readable by admins only; this pack was made without it.</p>{{end}}
{{range .Governance}}<h3>{{.Title}}</h3>{{if .Rows}}<div class="scroll"><table class="plain"><tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table></div>{{else}}<p class="note">{{.Empty}}</p>{{end}}
{{end}}

<h2>Capacity</h2>
{{range .Capacity}}{{template "chart" .}}{{end}}
{{template "table" index .Usage "day"}}
{{template "table" index .Usage "hour-of-week"}}
{{with index .Pack.Reports "team"}}{{with .Notes}}<h2>Notes</h2><ul class="note">{{range .}}<li>{{.}}</li>{{end}}</ul>{{end}}{{end}}
</body>
</html>
{{define "table"}}<h3>{{.Title}}</h3><div class="scroll"><table><tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table></div>{{end}}
{{define "chart"}}<h3>{{.Title}}</h3>
<div class="legend">{{range .Legend}}<span><i class="{{.Class}}"></i>{{.Label}}</span>{{end}}</div>
<svg viewBox="0 0 {{.Width}} {{.Height}}" role="img" aria-label="{{.Title}}">
{{range .Lines}}<polyline points="{{.Points}}" class="{{.Class}}"/>
{{end}}{{range .Rects}}<rect x="{{printf "%.1f" .X}}" y="{{printf "%.1f" .Y}}" width="{{printf "%.1f" .W}}" height="{{printf "%.1f" .H}}" class="{{.Class}}"><title>{{.Tip}}</title></rect>
{{end}}{{range .Texts}}<text x="{{printf "%.1f" .X}}" y="{{printf "%.1f" .Y}}" text-anchor="{{.Anchor}}">{{.Text}}</text>
{{end}}</svg>{{end}}
`))
})
