package sim

import (
	"encoding/csv"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// rotaColumns is the header of a rota trace, in the order WriteRotaTrace writes it. doc.go
// describes each column.
var rotaColumns = []string{
	"id", "submit", "start", "end", "duration_s", "time_limit_s", "gpus", "nodes", "gpu_model",
	"cpus", "memory_mb", "queue", "team", "user", "state",
}

// RotaRecord is one job of a rota trace: what was asked for and what happened to it.
type RotaRecord struct {
	ID     int64
	Submit time.Time
	// Start and End of the job's last attempt; zero when it never started or has not ended.
	Start, End time.Time
	// Duration is how long the job ran (all attempts); zero with Start and End set means
	// End − Start.
	Duration  time.Duration
	TimeLimit time.Duration
	GPUs      int
	// Nodes is the number of nodes of a gang; 0 or 1 is one node.
	Nodes    int
	GPUModel string
	CPUs     int
	MemoryMB int64
	Queue    string
	Team     string
	User     string
	State    api.JobState
}

// WriteRotaTrace writes records as a rota trace (CSV with a header; see doc.go). Times are
// RFC 3339 in UTC; durations are seconds.
func WriteRotaTrace(w io.Writer, recs []RotaRecord) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(rotaColumns); err != nil {
		return err
	}
	row := make([]string, len(rotaColumns))
	for _, r := range recs {
		row = append(row[:0],
			strconv.FormatInt(r.ID, 10), formatTime(r.Submit), formatTime(r.Start), formatTime(r.End),
			formatSeconds(r.Duration), formatSeconds(r.TimeLimit), strconv.Itoa(r.GPUs), strconv.Itoa(r.Nodes),
			r.GPUModel, strconv.Itoa(r.CPUs), strconv.FormatInt(r.MemoryMB, 10),
			r.Queue, r.Team, r.User, string(r.State))
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func formatSeconds(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
}

// readRota reads a rota trace. A job is replayed for its recorded duration (duration_s, or
// end − start); jobs that never ran have nothing to replay and are skipped with the reason.
func readRota(r io.Reader, strict bool) (*Trace, error) {
	t := &Trace{}
	rr, err := newRowReader(r, t, strict, "submit", "gpus")
	if err != nil {
		return nil, err
	}
	err = readRows(rr, func(rec []string) (Job, error) {
		j := Job{
			Name: rr.field(rec, "id"), GPUModel: rr.field(rec, "gpu_model"),
			Queue: rr.field(rec, "queue"), Team: rr.field(rec, "team"), User: rr.field(rec, "user"),
		}
		if strings.Contains(j.GPUModel, ",") {
			// "A100,H100": any of them, as rota submit --gpu-model takes it.
			for _, m := range strings.Split(j.GPUModel, ",") {
				if m = strings.TrimSpace(m); m == "" || slices.Contains(j.GPUModels, m) {
					return Job{}, rowErrorf("gpu_model %q: list distinct models as A100,H100", j.GPUModel)
				}
				j.GPUModels = append(j.GPUModels, strings.TrimSpace(m))
			}
			j.GPUModel = ""
		}
		state := api.JobState(rr.field(rec, "state"))
		if state != "" && !state.Valid() {
			return Job{}, rowErrorf("unknown state %q", state)
		}
		var err error
		if j.Submit, err = parseTime(rr.field(rec, "submit"), "submit"); err != nil {
			return Job{}, err
		}
		start, err := parseTime(rr.field(rec, "start"), "start")
		if err != nil {
			return Job{}, err
		}
		end, err := parseTime(rr.field(rec, "end"), "end")
		if err != nil {
			return Job{}, err
		}
		switch d := rr.field(rec, "duration_s"); {
		case d != "":
			if j.Duration, err = parseSeconds(d); err != nil {
				return Job{}, err
			}
		case !start.IsZero() && !end.IsZero():
			if end.Before(start) {
				return Job{}, rowErrorf("end %s is before start %s", rr.field(rec, "end"), rr.field(rec, "start"))
			}
			if j.Duration = end.Sub(start); j.Duration > maxTraceSeconds*time.Second {
				return Job{}, rowErrorf("ran from %s to %s: longer than 10 years", rr.field(rec, "start"), rr.field(rec, "end"))
			}
		case start.IsZero():
			return Job{}, rowErrorf("never started (state %s): nothing to replay", orDash(string(state)))
		default:
			return Job{}, rowErrorf("no duration_s and no end: the run time is unknown")
		}
		if !start.IsZero() && start.Before(j.Submit) {
			return Job{}, rowErrorf("start %s is before submit %s", rr.field(rec, "start"), rr.field(rec, "submit"))
		}
		if v := rr.field(rec, "time_limit_s"); v != "" {
			if j.TimeLimit, err = parseSeconds(v); err != nil {
				return Job{}, rowErrorf("bad time_limit_s: %v", err)
			}
		}
		g, err := parseCount(rr, rec, "gpus")
		if err != nil {
			return Job{}, err
		}
		if g > maxTraceGPUs {
			return Job{}, rowErrorf("gpus %d: at most %d", g, maxTraceGPUs)
		}
		j.GPUs = int(g)
		for _, f := range []struct {
			col string
			dst *int
			max int64
		}{{"nodes", &j.Nodes, maxTraceNodes}, {"cpus", &j.CPUs, maxTraceCPUs}} {
			if rr.field(rec, f.col) == "" {
				continue
			}
			v, err := parseCount(rr, rec, f.col)
			if err != nil {
				return Job{}, err
			}
			if v > f.max {
				return Job{}, rowErrorf("%s %d: at most %d", f.col, v, f.max)
			}
			*f.dst = int(v)
		}
		if j.Nodes > 1 && j.GPUs%j.Nodes != 0 {
			return Job{}, rowErrorf("%d GPUs do not divide evenly over %d nodes", j.GPUs, j.Nodes)
		}
		if rr.field(rec, "memory_mb") != "" {
			if j.MemoryMB, err = parseCount(rr, rec, "memory_mb"); err != nil {
				return Job{}, err
			}
		}
		if v := rr.field(rec, "speeds"); v != "" {
			if j.Speeds, err = parseSpeeds(v); err != nil {
				return Job{}, err
			}
		}
		return j, nil
	})
	return t, err
}

// maxJobSpeeds bounds the models one speeds field may name.
const maxJobSpeeds = 64

// parseSpeeds reads a speeds field: MODEL=SPEED pairs separated by semicolons, e.g.
// "H100=1;T4=0.3", each speed as the cluster file's speeds.
func parseSpeeds(s string) (map[string]float64, error) {
	out := map[string]float64{}
	for part := range strings.SplitSeq(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		i := strings.LastIndexByte(part, '=')
		if i < 0 {
			return nil, rowErrorf("bad speeds %q: %q is not MODEL=SPEED", s, part)
		}
		model, num := strings.TrimSpace(part[:i]), strings.TrimSpace(part[i+1:])
		if model == "" {
			return nil, rowErrorf("bad speeds %q: %q names no model", s, part)
		}
		if _, dup := out[model]; dup {
			return nil, rowErrorf("bad speeds %q: model %s given twice", s, model)
		}
		v, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return nil, rowErrorf("bad speeds %q: %s: %q is not a number", s, model, num)
		}
		if err := checkSpeed(v); err != nil {
			return nil, rowErrorf("bad speeds %q: %s: %v", s, model, err)
		}
		if len(out) == maxJobSpeeds {
			return nil, rowErrorf("bad speeds %q: more than %d models", s, maxJobSpeeds)
		}
		out[model] = v
	}
	if len(out) == 0 {
		return nil, rowErrorf("bad speeds %q: want MODEL=SPEED;…, e.g. H100=1;T4=0.3", s)
	}
	return out, nil
}

// parseTime reads an RFC 3339 time; "" is the zero time.
func parseTime(s, col string) (time.Time, error) {
	if s == "" {
		if col == "submit" {
			return time.Time{}, rowErrorf("empty submit time")
		}
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, rowErrorf("bad %s time %q: want RFC 3339, e.g. 2025-01-02T15:04:05Z", col, s)
	}
	return t.UTC(), nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
