package sim

import (
	"io"
	"math"
	"strconv"
	"time"
)

// philly reads the Philly job extract (philly/philly.csv of the shared traces): columns
// timestamp (submit, "2006-01-02 15:04:05", UTC), duration (seconds, may have a fraction),
// num_gpus, gpu_time (ignored: it is duration × num_gpus) and cluster (a hashed virtual
// cluster, which becomes the team). The trace names no user, queue, GPU model, CPUs or memory.
func readPhilly(r io.Reader, strict bool) (*Trace, error) {
	t := &Trace{}
	rr, err := newRowReader(r, t, strict, "timestamp", "duration", "num_gpus", "cluster")
	if err != nil {
		return nil, err
	}
	err = readRows(rr, func(rec []string) (Job, error) {
		submit, err := time.Parse(time.DateTime, rr.field(rec, "timestamp"))
		if err != nil {
			return Job{}, rowErrorf("bad timestamp %q: want YYYY-MM-DD HH:MM:SS", rr.field(rec, "timestamp"))
		}
		dur, err := parseSeconds(rr.field(rec, "duration"))
		if err != nil {
			return Job{}, rowErrorf("bad duration: %v", err)
		}
		gpus, err := strconv.Atoi(rr.field(rec, "num_gpus"))
		if err != nil || gpus < 1 || gpus > maxTraceGPUs {
			return Job{}, rowErrorf("bad num_gpus %q: want a whole number from 1 to %d", rr.field(rec, "num_gpus"), maxTraceGPUs)
		}
		vc := rr.field(rec, "cluster")
		if vc == "" {
			return Job{}, rowErrorf("empty cluster (virtual cluster)")
		}
		return Job{Submit: submit, Duration: dur, GPUs: gpus, Team: vc}, nil
	})
	return t, err
}

// parseSeconds reads a non-negative number of seconds, rounding fractions to the nearest
// millisecond so that equal text always gives an equal duration.
func parseSeconds(s string) (time.Duration, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, rowErrorf("%q is not a number of seconds", s)
	}
	if v < 0 {
		return 0, rowErrorf("negative duration %s s", s)
	}
	if v > maxTraceSeconds {
		return 0, rowErrorf("duration %s s is longer than 10 years", s)
	}
	return time.Duration(math.Round(v*1000)) * time.Millisecond, nil
}

// Bounds on what a trace row may ask: durations and offsets, so that arithmetic on them
// cannot overflow; GPUs, nodes and CPUs of one job, as the server bounds a request.
const (
	maxTraceSeconds = 10 * 365 * 24 * 3600
	maxTraceGPUs    = 4096
	maxTraceNodes   = 512
	maxTraceCPUs    = 1 << 20
)
