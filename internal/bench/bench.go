package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Result is one benchmark's measurement.
type Result struct {
	Suite string `json:"suite"`
	Name  string `json:"name"`
	// N is how many operations the timing covers.
	N       int     `json:"n"`
	NsPerOp float64 `json:"ns_per_op"`
	// Metrics are the benchmark's own figures by unit, e.g. "placements/s" or "p99-ms".
	Metrics     map[string]float64 `json:"metrics"`
	AllocsPerOp int64              `json:"allocs_per_op"`
	BytesPerOp  int64              `json:"bytes_per_op"`
}

// Suites lists the suites Run runs when none is named, in the order it runs them.
func Suites() []string { return []string{"sched", "e2e", "sim"} }

// OptInSuites lists the suites Run runs only when they are named: they take minutes and
// need a rota binary (ScaleOptions.Binary).
func OptInSuites() []string { return []string{"scale"} }

func known() []string { return append(Suites(), OptInSuites()...) }

// Options say what Run runs.
type Options struct {
	// Suites to run, by name; empty means all.
	Suites []string
	// Quick runs smaller sizes for less time: seconds in all, for tests and a first look.
	Quick bool
	// Progress, if set, gets one line as each benchmark starts and ends.
	Progress io.Writer
	// Scale sizes the scale suite.
	Scale ScaleOptions
}

// benchmark is one entry of a suite.
type benchmark struct {
	suite, name string
	// benchtime is how long this benchmark runs, as go test's -benchtime says it: a
	// duration, or "Nx" for a fixed count where an operation is slow or a percentile needs
	// enough samples.
	benchtime string
	run       func(ctx context.Context, benchtime string) (runResult, error)
}

// Run runs the chosen suites one benchmark at a time and returns their results in order.
// It stops at the first benchmark that fails, returning the results so far with the error.
func Run(ctx context.Context, opts Options) ([]Result, error) {
	suites := opts.Suites
	if len(suites) == 0 {
		suites = Suites()
	}
	for _, s := range suites {
		if !slices.Contains(known(), s) {
			return nil, fmt.Errorf("unknown suite %q (known: %s)", s, strings.Join(known(), ", "))
		}
	}
	if slices.Contains(suites, "scale") {
		// Checked before anything runs, so that a bad size does not wait for the others.
		if _, err := opts.Scale.Sized(opts.Quick); err != nil {
			return nil, err
		}
	}
	var list []benchmark
	for _, s := range Suites() {
		if !slices.Contains(suites, s) {
			continue
		}
		switch s {
		case "sched":
			list = append(list, schedBenchmarks(opts.Quick)...)
		case "e2e":
			list = append(list, e2eBenchmarks(opts.Quick)...)
		case "sim":
			list = append(list, simBenchmarks(opts.Quick)...)
		}
	}
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	var results []Result
	for _, bm := range list {
		if err := ctx.Err(); err != nil {
			return results, err
		}
		fmt.Fprintf(progress, "bench: %s %s ...\n", bm.suite, bm.name)
		start := time.Now()
		r, err := bm.run(ctx, bm.benchtime)
		if err != nil {
			return results, fmt.Errorf("%s %s: %w", bm.suite, bm.name, err)
		}
		res := toResult(bm.suite, bm.name, r)
		fmt.Fprintf(progress, "bench: %s %s: %d ops, %s/op (%.1fs)\n", bm.suite, bm.name, res.N,
			formatNs(res.NsPerOp), time.Since(start).Seconds())
		results = append(results, res)
	}
	if slices.Contains(suites, "scale") {
		if err := ctx.Err(); err != nil {
			return results, err
		}
		// The scale suite is one long run that yields many results, not a benchmark
		// repeated until it takes long enough.
		start := time.Now()
		fmt.Fprintf(progress, "bench: scale ...\n")
		r, err := runScale(ctx, opts)
		results = append(results, r...)
		if err != nil {
			return results, fmt.Errorf("scale: %w", err)
		}
		fmt.Fprintf(progress, "bench: scale: %d results (%.1fs)\n", len(r), time.Since(start).Seconds())
	}
	return results, nil
}

// toResult converts what measure measured.
func toResult(suite, name string, r runResult) Result {
	res := Result{Suite: suite, Name: name, N: r.N, Metrics: map[string]float64{}}
	if r.N > 0 {
		res.NsPerOp = float64(r.T.Nanoseconds()) / float64(r.N)
		res.AllocsPerOp = int64(r.allocs / uint64(r.N))
		res.BytesPerOp = int64(r.bytes / uint64(r.N))
	}
	for unit, v := range r.extra {
		res.Metrics[unit] = v
	}
	return res
}

// formatNs writes a duration in nanoseconds with three significant digits.
func formatNs(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.3gs", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.3gms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.3gµs", ns/1e3)
	}
	return fmt.Sprintf("%.3gns", ns)
}
