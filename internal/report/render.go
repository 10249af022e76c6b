package report

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/rotahq/rota/internal/api"
)

// Writers of a UsageReport: a table for people, CSV for spreadsheets, JSON for programs.
// `rota usage` prints with them and the review pack is made of them.

// keyTitles head the first column, by grouping.
var keyTitles = map[string]string{
	api.ByTeam: "TEAM", api.ByProject: "TEAM/PROJECT", api.ByUser: "USER", api.ByQueue: "QUEUE", api.ByGPUModel: "GPU MODEL",
	api.ByNode: "NODE", api.ByDay: "DAY (UTC)", api.ByHourOfWeek: "HOUR (UTC)",
}

// hasCapacity reports whether the report's rows carry capacity.
func hasCapacity(by string) bool {
	switch by {
	case api.ByGPUModel, api.ByNode, api.ByDay, api.ByHourOfWeek:
		return true
	}
	return false
}

// groupNames name the groupings in a sentence.
var groupNames = map[string]string{
	api.ByTeam: "team", api.ByProject: "project", api.ByUser: "user", api.ByQueue: "queue", api.ByGPUModel: "GPU model",
	api.ByNode: "node", api.ByDay: "day (UTC)", api.ByHourOfWeek: "hour of the week (UTC)",
}

// Title says what a report covers in one line.
func Title(rep api.UsageReport) string {
	by := groupNames[rep.By]
	unit := "GPU-hours"
	if rep.Currency != "" {
		unit += "; cost in " + printable(rep.Currency)
	}
	return fmt.Sprintf("GPU use by %s, %s to %s UTC (%s)", by, rep.Since.UTC().Format("2006-01-02 15:04"), rep.Until.UTC().Format("2006-01-02 15:04"), unit)
}

// Cells are the report as a person reads it: the head and one line per row, the total
// last. The table and the HTML page show these.
func Cells(rep api.UsageReport) (head []string, rows [][]string) {
	head = []string{keyTitles[rep.By], "GPU-HOURS", "EFFECTIVE", "UTIL", "JOBS", "SUCCESS", "WAIT P50/P95", "FAILURES", "PREEMPT", "IDLE", "COST"}
	capacity := hasCapacity(rep.By)
	if capacity {
		head = append(head, "CAPACITY", "FREE")
	}
	// Only reports that count deadlines show them: most clusters use none.
	deadlines := rep.Total.DeadlinesMet+rep.Total.DeadlinesMissed > 0
	if deadlines {
		head = append(head, "DEADLINES MET/MISSED")
	}
	for _, r := range append(slices.Clone(rep.Rows), rep.Total) {
		line := []string{printable(r.Key), hours(r.GPUHours), effective(r), percent(r.UtilizationPct), strconv.Itoa(r.Jobs),
			rate(r.SuccessRate), waits(r), failures(r.Failures), preemptions(r), hours(r.IdleGPUHours), money(r.Cost)}
		if capacity {
			line = append(line, hours(r.CapacityGPUHours), hours(r.IdleCapacityGPUHours))
		}
		if deadlines {
			line = append(line, fmt.Sprintf("%d/%d", r.DeadlinesMet, r.DeadlinesMissed))
		}
		rows = append(rows, line)
	}
	return head, rows
}

// WriteTable prints the report as an aligned table with its total and notes.
func WriteTable(w io.Writer, rep api.UsageReport) error {
	fmt.Fprintln(w, Title(rep))
	head, rows := Cells(rep)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, line := range rows {
		fmt.Fprintln(tw, strings.Join(line, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range rep.Notes {
		fmt.Fprintln(w, "note: "+printable(n))
	}
	return nil
}

// csvHead are the CSV columns: the JSON names of api.UsageRow, in its order, with the
// failures as "category=count;..." and the currency of the cost.
var csvHead = []string{"key", "jobs", "attempts", "gpu_hours", "effective_gpu_hours", "measured_gpu_hours", "utilization_pct",
	"idle_gpu_hours", "succeeded", "failed", "success_rate", "failures", "assigned", "wait_p50_s", "wait_p95_s", "preemptions",
	"preemption_waste_gpu_hours", "capacity_gpu_hours", "idle_capacity_gpu_hours", "cost", "currency", "deadlines_met", "deadlines_missed"}

// WriteCSV writes the report's rows, then its total, under a head line. A figure that is
// unknown (utilisation without telemetry, cost without a price) is empty.
func WriteCSV(w io.Writer, rep api.UsageReport) error {
	cw := csv.NewWriter(w)
	cw.Write(csvHead)
	for _, r := range append(slices.Clone(rep.Rows), rep.Total) {
		currency := ""
		if r.Cost != nil {
			currency = rep.Currency
		}
		cw.Write([]string{csvSafe(r.Key), strconv.Itoa(r.Jobs), strconv.Itoa(r.Attempts), num(r.GPUHours), num(r.EffectiveGPUHours),
			num(r.MeasuredGPUHours), optNum(r.UtilizationPct), num(r.IdleGPUHours), strconv.Itoa(r.Succeeded), strconv.Itoa(r.Failed),
			optNum(r.SuccessRate), failureList(r.Failures), strconv.Itoa(r.Assigned), num(r.WaitP50Seconds), num(r.WaitP95Seconds), strconv.Itoa(r.Preemptions),
			num(r.PreemptionWasteGPUHours), num(r.CapacityGPUHours), num(r.IdleCapacityGPUHours), optNum(r.Cost), csvSafe(currency),
			strconv.Itoa(r.DeadlinesMet), strconv.Itoa(r.DeadlinesMissed)})
	}
	cw.Flush()
	return cw.Error()
}

// WriteJSON writes the report as the API answers it.
func WriteJSON(w io.Writer, rep api.UsageReport) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

func hours(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func optNum(v *float64) string {
	if v == nil {
		return ""
	}
	return num(*v)
}

// effective is "-" where nothing of the row was measured: unknown, not zero.
func effective(r api.UsageRow) string {
	if r.MeasuredGPUHours == 0 {
		return "-"
	}
	return hours(r.EffectiveGPUHours)
}

func percent(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', 0, 64) + "%"
}

func rate(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v*100, 'f', 0, 64) + "%"
}

func money(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', 2, 64)
}

// waits is "p50/p95"; "-" for a row without an attempt assigned in the window.
func waits(r api.UsageRow) string {
	if r.Assigned == 0 {
		return "-"
	}
	return shortDuration(r.WaitP50Seconds) + "/" + shortDuration(r.WaitP95Seconds)
}

// shortDuration prints seconds in the two largest units: 45s, 12m, 1h05m, 2d03h.
func shortDuration(sec float64) string {
	d := time.Duration(sec) * time.Second
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// failures names the two most frequent categories: "oom 3, exit_code 1, +2 more".
func failures(f map[string]int) string {
	if len(f) == 0 {
		return "-"
	}
	cats := slices.Sorted(maps.Keys(f))
	slices.SortStableFunc(cats, func(a, b string) int { return f[b] - f[a] })
	var parts []string
	for i, c := range cats {
		if i == 2 {
			parts = append(parts, fmt.Sprintf("+%d more", len(cats)-2))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %d", printable(c), f[c]))
	}
	return strings.Join(parts, ", ")
}

// failureList is every category in CSV: "exit_code=1;oom=3".
func failureList(f map[string]int) string {
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(f)) {
		parts = append(parts, fmt.Sprintf("%s=%d", c, f[c]))
	}
	return csvSafe(strings.Join(parts, ";"))
}

// preemptions is "count/waste GPU-hours".
func preemptions(r api.UsageRow) string {
	if r.Preemptions == 0 {
		return "-"
	}
	return strconv.Itoa(r.Preemptions) + "/" + hours(r.PreemptionWasteGPUHours) + "h"
}

// printable replaces what would break a table line or a terminal (tabs, newlines,
// escape sequences) in names that come from agents and users.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return '?'
	}, s)
}

// csvSafe keeps a spreadsheet from running a cell as a formula (CSV injection): a cell
// that starts with = + - @ gets a leading quote. Names are the only free text here.
func csvSafe(s string) string {
	s = printable(s)
	if s != "" && strings.ContainsRune("=+-@", rune(s[0])) {
		return "'" + s
	}
	return s
}
