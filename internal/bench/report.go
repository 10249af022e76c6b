package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Header says where and on what the results were measured, so that two runs can be told
// apart and compared only when they should be.
type Header struct {
	GoVersion  string `json:"go_version"`
	GOOS       string `json:"goos"`
	GOARCH     string `json:"goarch"`
	NumCPU     int    `json:"num_cpu"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	// Commit is the VCS revision the binary was built from, where known; Modified says the
	// tree had uncommitted changes.
	Commit   string    `json:"commit,omitempty"`
	Modified bool      `json:"modified,omitempty"`
	Quick    bool      `json:"quick"`
	Time     time.Time `json:"time"`
}

// Report is a run's header and results: what `rota bench -o json` writes.
type Report struct {
	Header  Header   `json:"header"`
	Results []Result `json:"results"`
}

// NewHeader describes this process and machine at now. The commit comes from the build
// information where the binary was stamped with it (go build in a checkout), else from
// `git rev-parse HEAD` in the working directory (go run, go test), else it is left out.
func NewHeader(ctx context.Context, quick bool, now time.Time) Header {
	h := Header{
		GoVersion: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH,
		NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Quick: quick, Time: now.UTC(),
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				h.Commit = s.Value
			case "vcs.modified":
				h.Modified = s.Value == "true"
			}
		}
	}
	if h.Commit == "" {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output(); err == nil {
			h.Commit = strings.TrimSpace(string(out))
			// --no-optional-locks: reading the status must not rewrite the index under a
			// concurrent git command.
			status, err := exec.CommandContext(ctx, "git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no").Output()
			h.Modified = err == nil && len(strings.TrimSpace(string(status))) > 0
		}
	}
	return h
}

// WriteJSON writes the report as one indented JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes a line about the header, then one row per result: SUITE NAME N
// TIME/OP and the metrics, the benchmark's own by unit name and then allocs/op and B/op.
func (r *Report) WriteTable(w io.Writer) error {
	h := r.Header
	sizes := "full sizes"
	if h.Quick {
		sizes = "quick sizes"
	}
	commit := "commit unknown"
	if h.Commit != "" {
		commit = "commit " + h.Commit[:min(12, len(h.Commit))]
		if h.Modified {
			commit += " (modified)"
		}
	}
	if _, err := fmt.Fprintf(w, "%s %s/%s, %d CPUs (GOMAXPROCS %d), %s, %s\n\n",
		h.GoVersion, h.GOOS, h.GOARCH, h.NumCPU, h.GOMAXPROCS, commit, sizes); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SUITE\tNAME\tN\tTIME/OP\tMETRICS")
	for _, res := range r.Results {
		m := formatMetrics(res.Metrics)
		// The scale suite measures a server in another process: it has no allocations of
		// its own to show, and some of its figures (memory, CPU) no time per operation.
		if res.AllocsPerOp != 0 || res.BytesPerOp != 0 || res.Suite != "scale" {
			m += "  " + strconv.FormatInt(res.AllocsPerOp, 10) + " allocs/op  " + strconv.FormatInt(res.BytesPerOp, 10) + " B/op"
		}
		perOp := "-"
		if res.NsPerOp > 0 || res.Suite != "scale" {
			perOp = formatNs(res.NsPerOp)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", res.Suite, res.Name, res.N, perOp, strings.TrimSpace(m))
	}
	return tw.Flush()
}

// formatMetrics writes metrics as VALUE UNIT pairs in the order of their units.
func formatMetrics(metrics map[string]float64) string {
	units := make([]string, 0, len(metrics))
	for u := range metrics {
		units = append(units, u)
	}
	slices.Sort(units)
	var m []string
	for _, u := range units {
		m = append(m, formatFloat(metrics[u])+" "+u)
	}
	return strings.Join(m, "  ")
}

// formatFloat writes a metric to four significant digits, or as a whole number from 1000
// up: as much precision as a benchmark has, without exponents.
func formatFloat(v float64) string {
	if math.Abs(v) >= 1000 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 4, 64), 64)
	return strconv.FormatFloat(r, 'f', -1, 64)
}
