package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rotahq/rota/internal/api"
)

// table aligns tab-separated columns and writes them to out on Flush, without the
// trailing blanks tabwriter leaves after an empty last cell.
type table struct {
	out io.Writer
	buf bytes.Buffer
	tw  *tabwriter.Writer
}

func newTable(out io.Writer) *table {
	t := &table{out: out}
	t.tw = tabwriter.NewWriter(&t.buf, 0, 0, tablePadding, ' ', 0)
	return t
}

func (t *table) Write(p []byte) (int, error) { return t.tw.Write(p) }

func (t *table) Flush() error {
	if err := t.tw.Flush(); err != nil {
		return err
	}
	var out bytes.Buffer
	for _, line := range strings.SplitAfter(t.buf.String(), "\n") {
		if trimmed := strings.TrimRight(line, " \n"); trimmed != line {
			if strings.HasSuffix(line, "\n") {
				trimmed += "\n"
			}
			line = trimmed
		}
		out.WriteString(line)
	}
	t.buf.Reset()
	_, err := t.out.Write(out.Bytes())
	return err
}

// pagedTable aligns columns as table does, for a listing written a chunk at a time as it
// is read: each chunk is aligned on its own, with every column kept at least as wide as
// in the chunks before, so that a listing shown in one chunk reads as table would write
// it, and a longer one stays aligned unless a later chunk holds a wider cell.
type pagedTable struct {
	out    io.Writer
	widths []int // of every column but the last, in runes, as tabwriter counts them
	rows   [][]string
}

func (t *pagedTable) row(cells ...string) { t.rows = append(t.rows, cells) }

// flush writes the rows gathered so far.
func (t *pagedTable) flush() error {
	for _, r := range t.rows {
		for i, c := range r[:max(len(r)-1, 0)] {
			if i == len(t.widths) {
				t.widths = append(t.widths, 0)
			}
			t.widths[i] = max(t.widths[i], utf8.RuneCountInString(c))
		}
	}
	var out, line []byte
	for _, r := range t.rows {
		line = line[:0]
		for i, c := range r {
			line = append(line, c...)
			if i < len(r)-1 {
				for range t.widths[i] - utf8.RuneCountInString(c) + tablePadding {
					line = append(line, ' ')
				}
			}
		}
		// No trailing blanks after an empty last cell, as in table.
		out = append(out, bytes.TrimRight(line, " ")...)
		out = append(out, '\n')
	}
	t.rows = t.rows[:0]
	_, err := t.out.Write(out)
	return err
}

// tablePadding is the blanks between two columns of table and pagedTable.
const tablePadding = 2

// secondsDuration turns a count of seconds from the API into a Duration.
func secondsDuration(s int64) time.Duration { return time.Duration(s) * time.Second }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// describeGPUs says what a spec asks for in GPUs: "2 GPUs", "8 GPUs on 2 nodes", "no GPUs",
// "0.5 of a GPU", "20G of a GPU".
func describeGPUs(s api.JobSpec) string {
	switch {
	case s.GPUShare > 0:
		return strconv.FormatFloat(s.GPUShare, 'f', -1, 64) + " of a GPU"
	case s.GPUMemoryMB > 0:
		return formatMB(s.GPUMemoryMB) + " of a GPU"
	case s.GPUs == 0:
		return "no GPUs"
	}
	d := plural(s.GPUs, "GPU", "GPUs")
	if s.Nodes > 1 {
		d += " on " + plural(s.Nodes, "node", "nodes")
	}
	return d
}

// describeRequest is the whole request in one line, as `rota show` prints it.
func describeRequest(s api.JobSpec) string {
	var parts []string
	g := describeGPUs(s)
	if s.GPUModel != "" && s.GPUs > 0 {
		g += " (" + s.GPUModel + ")"
	}
	if s.GPUsPerNode > 0 && s.Nodes > 1 {
		g += fmt.Sprintf(", %d per node", s.GPUsPerNode)
	}
	parts = append(parts, g)
	if s.CPUs > 0 {
		parts = append(parts, plural(s.CPUs, "CPU", "CPUs"))
	}
	if s.MemoryMB > 0 {
		parts = append(parts, formatMB(s.MemoryMB)+" memory")
	}
	return strings.Join(parts, ", ")
}

// unitOf is the largest unit that mb fills at least once: its size in megabytes and its
// letter.
func unitOf(mb int64) (int64, string) {
	switch {
	case mb >= 1<<20:
		return 1 << 20, "T"
	case mb >= 1<<10:
		return 1 << 10, "G"
	}
	return 1, "M"
}

// formatMB prints megabytes in the largest unit that keeps one decimal: 512M, 1.5G, 2T.
func formatMB(mb int64) string {
	unit, name := unitOf(mb)
	return inUnit(mb, unit) + name
}

// formatMBOf prints a part and its whole in the whole's unit, "410/640G", so the two
// read together.
func formatMBOf(part, whole int64) string {
	unit, name := unitOf(whole)
	return inUnit(part, unit) + "/" + inUnit(whole, unit) + name
}

// inUnit prints mb in units of unit megabytes, to one decimal at most.
func inUnit(mb, unit int64) string {
	v := float64(mb) / float64(unit)
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}

// formatPct prints a percentage rounded to a whole number: 71%.
func formatPct(p float64) string { return strconv.FormatFloat(math.Round(p), 'f', 0, 64) + "%" }

// clean makes text from an agent, a job or a node (model names, health messages,
// command lines) safe to print in a table or on one line: runs of whitespace, newlines
// and tabs included, become one space, and control and format characters are shown
// escaped (\x1b, \u202e), so that no text relayed by the server can break a table,
// start a line of its own, colour the terminal or reorder what a person reads.
func clean(s string) string {
	var b strings.Builder
	pendingSpace := false
	for _, r := range strings.TrimSpace(s) {
		switch {
		case unicode.IsSpace(r):
			pendingSpace = true
			continue
		case pendingSpace:
			b.WriteByte(' ')
			pendingSpace = false
		}
		switch {
		case r < 0x80 && unicode.IsControl(r):
			fmt.Fprintf(&b, "\\x%02x", r)
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// cleanCell is clean cut to at most n runes, for a table cell of text from elsewhere.
func cleanCell(s string, n int) string { return truncate(clean(s), n) }

// formatDuration prints a duration compactly with two units at most: 42s, 12m05s, 3h04m,
// 2d03h. Negative durations (clock skew) print as 0s.
func formatDuration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	s := int64(d / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
	default:
		return fmt.Sprintf("%dd%02dh", s/86400, s%86400/3600)
	}
}

// formatTime prints t in loc to the second, "-" when unset.
func formatTime(t *time.Time, loc *time.Location) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.In(loc).Format("2006-01-02 15:04:05 MST")
}

// relative says how far t is from now: "3m12s ago" or "in 2h00m".
func relative(t, now time.Time) string {
	if t.After(now) {
		return "in " + formatDuration(t.Sub(now))
	}
	return formatDuration(now.Sub(t)) + " ago"
}

// formatTimeRel prints t with its distance from now, "-" when unset.
func formatTimeRel(t *time.Time, now time.Time, loc *time.Location) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return formatTime(t, loc) + " (" + relative(*t, now) + ")"
}

// shellQuote joins a command so that a shell would split it back the same way.
func shellQuote(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, needsQuote) < 0 {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

func needsQuote(r rune) bool {
	switch {
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return false
	}
	return !strings.ContainsRune("-_./=:,+@%", r)
}

// formatLabels prints labels sorted by key as k=v,k=v.
func formatLabels(labels map[string]string) string {
	if len(labels) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + labels[k]
	}
	return strings.Join(keys, ",")
}

func formatExitCode(c *int) string {
	if c == nil {
		return "-"
	}
	return strconv.Itoa(*c)
}

// formatIndices prints GPU indices with runs of three or more as ranges: 0-7, 0,1, 2-4,6.
func formatIndices(idx []int) string {
	var parts []string
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		if j-i >= 2 {
			parts = append(parts, strconv.Itoa(idx[i])+"-"+strconv.Itoa(idx[j]))
		} else {
			for k := i; k <= j; k++ {
				parts = append(parts, strconv.Itoa(idx[k]))
			}
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func joinOrDash(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}

// Error codes of the CLI's own errors under -o json; errors from the server keep its
// codes (api.CodeNotFound, ...).
const (
	codeUsage       = "usage"       // bad flags or arguments; nothing was sent
	codeUnreachable = "unreachable" // no connection to the server could be made
	codeInterrupted = "interrupted"
	codeError       = "error" // anything else
)

// jsonError is an error as -o json prints it on stderr: the API's error shape, so a
// script reads the server's refusals and the CLI's own complaints alike, and the exit code.
type jsonError struct {
	api.Error
	ExitCode int `json:"exit_code"`
}

// wantsJSON reports whether args ask for -o json. It reads them before the verb parses
// them, so that a complaint about the flags themselves is JSON too. As with the flag
// package, the last -o wins and a "--" ends the flags.
func wantsJSON(args []string) bool {
	want := false
	for i, a := range args {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "o" && name != "output" {
			continue
		}
		if !hasValue && i+1 < len(args) {
			value = args[i+1]
		}
		want = value == "json"
	}
	return want
}

// jsonStderr is a verb's stderr under -o json. fail and usageError print through it
// at once, as JSON. Anything else a verb writes there (the flag package's complaints, a
// verb's own "unknown command", notes) is held until the verb returns: written as it
// is after a success, and after a failure folded into one JSON error unless one has been
// printed already. So no error reaches a script as plain text.
type jsonStderr struct {
	out io.Writer

	mu      sync.Mutex // guards the fields below
	held    bytes.Buffer
	printed bool
}

func (w *jsonStderr) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.held.Write(p)
}

// print writes e as one line of JSON.
func (w *jsonStderr) print(e api.Error, exitCode int) {
	b, err := json.Marshal(jsonError{Error: e, ExitCode: exitCode})
	if err != nil {
		// Only strings go into it; this cannot happen.
		panic(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.printed = true
	w.out.Write(append(b, '\n'))
}

// finish deals with the text held while the verb ran, once it has returned exitCode.
func (w *jsonStderr) finish(exitCode int) {
	w.mu.Lock()
	text := w.held.String()
	w.held.Reset()
	printed := w.printed
	w.mu.Unlock()
	switch {
	case exitCode == ExitOK:
		io.WriteString(w.out, text)
	case printed:
		// The held text is what came with the error: the flags' usage, say.
	default:
		// Its first line is the complaint; what follows is usage.
		msg, _, _ := strings.Cut(strings.TrimSpace(text), "\n")
		if msg == "" {
			return // the verb failed without a word, as a verb returning a job's exit code may
		}
		code := codeError
		if exitCode == ExitUsage {
			code = codeUsage
		}
		w.print(api.Error{Code: code, Message: msg}, exitCode)
	}
}

// errorFor puts err in the API's error shape: the server's own for a refusal, a code of
// the CLI's for the rest.
func errorFor(ctx context.Context, err error) api.Error {
	var apiErr *APIError
	var unreachable *UnreachableError
	switch {
	case errors.As(err, &apiErr):
		e := apiErr.Detail
		if e.Code == "" {
			e.Code = "http_" + strconv.Itoa(apiErr.StatusCode)
		}
		if err != error(apiErr) {
			e.Message = err.Error() // the verb added what it was doing
		}
		return e
	case errors.As(err, &unreachable):
		return api.Error{Code: codeUnreachable, Message: err.Error()}
	case ctx.Err() != nil:
		return api.Error{Code: codeInterrupted, Message: "interrupted"}
	}
	return api.Error{Code: codeError, Message: err.Error()}
}
