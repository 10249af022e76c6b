package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/bench"
)

// runBench serves `rota bench`: the benchmark suite, as a table or as JSON to compare
// across commits. Progress goes to stderr so that stdout holds only the results.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("bench", stderr)
	suites := fs.String("suite", strings.Join(bench.Suites(), ","), "suites to run, comma-separated: "+strings.Join(bench.Suites(), ", "))
	quick := fs.Bool("quick", false, "small sizes and short runs: seconds instead of about a minute")
	format := fs.String("o", "table", "output: table or json")
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	if *format != "table" && *format != "json" {
		fmt.Fprintf(stderr, "rota bench: unknown format %q (want table or json)\n", *format)
		return 2
	}
	var names []string
	for s := range strings.SplitSeq(*suites, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !slices.Contains(bench.Suites(), s) {
			fmt.Fprintf(stderr, "rota bench: unknown suite %q (want %s)\n", s, strings.Join(bench.Suites(), ", "))
			return 2
		}
		names = append(names, s)
	}

	start := time.Now()
	rep := &bench.Report{Header: bench.NewHeader(ctx, *quick, start)}
	var runErr error
	rep.Results, runErr = bench.Run(ctx, bench.Options{Suites: names, Quick: *quick, Progress: stderr})
	if runErr != nil {
		// The results so far are still worth printing; the exit code says the run failed.
		fmt.Fprintf(stderr, "rota bench: %v\n", runErr)
		if len(rep.Results) == 0 {
			return 1
		}
	} else {
		fmt.Fprintf(stderr, "bench: done in %.1fs\n", time.Since(start).Seconds())
	}
	var err error
	if *format == "json" {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteTable(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rota bench: %v\n", err)
		return 1
	}
	if runErr != nil {
		return 1
	}
	return 0
}
