package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/bench"
)

// runBench serves `rota bench`: the benchmark suite, as a table or as JSON to compare
// across commits. Progress goes to stderr so that stdout holds only the results.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("bench", stderr)
	suites := fs.String("suite", strings.Join(bench.Suites(), ","), "suites to run, comma-separated: "+strings.Join(bench.Suites(), ", ")+
		"; or "+strings.Join(bench.OptInSuites(), ", ")+", which runs only when named (minutes; see docs/scale.md)")
	quick := fs.Bool("quick", false, "small sizes and short runs: seconds instead of about a minute")
	format := fs.String("o", "table", "output: table or json")
	var scale bench.ScaleOptions
	fs.IntVar(&scale.Nodes, "nodes", 0, "scale suite: simulated nodes of 8 GPUs (default 10000; with --quick 200)")
	fs.IntVar(&scale.Jobs, "jobs", 0, "scale suite: jobs in the queue (default 104000; with --quick 2000)")
	fs.IntVar(&scale.Running, "running", 0, "scale suite: how many of the jobs run, filling every GPU (default 35000; with --quick 700)")
	fs.DurationVar(&scale.Heartbeat, "heartbeat", 0, "scale suite: the server's --heartbeat-interval (default 2s)")
	fs.DurationVar(&scale.Window, "window", 0, "scale suite: how long each steady measurement lasts (default 20s; with --quick 2s)")
	fs.StringVar(&scale.ServerCPUProfile, "server-cpu-profile", "", "scale suite: the server writes a CPU profile of the whole run to `FILE` (go tool pprof reads it)")
	fs.StringVar(&scale.ServerMemProfile, "server-mem-profile", "", "scale suite: the server writes a heap profile to `FILE` as it is stopped at the end")
	fs.StringVar(&scale.ServerMemoryLimit, "server-memory-limit", "", "scale suite: the server's --memory-limit, e.g. 900M (default: the server's own, auto)")
	fs.StringVar(&scale.ServerMaxHeartbeats, "server-max-heartbeats-per-second", "", "scale suite: the server's --max-heartbeats-per-second; 0 keeps every agent at --heartbeat however many there are (default: the server's own, 1000)")
	cpuProfile := fs.String("cpu-profile", "", "write a CPU profile (pprof format) of this process to `FILE`: the suites themselves, and in the scale suite the load generator, which shares the machine with the server")
	watch := fs.Bool("watch", true, "scale suite: each simulated agent holds a watch long-poll between its heartbeats, as rota agent does (false: new work reaches an agent with its next heartbeat)")
	if code := parseFlags(fs, args); code >= 0 {
		return code
	}
	known := append(bench.Suites(), bench.OptInSuites()...)
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
		if !slices.Contains(known, s) {
			fmt.Fprintf(stderr, "rota bench: unknown suite %q (want %s)\n", s, strings.Join(known, ", "))
			return 2
		}
		names = append(names, s)
	}
	if slices.Contains(names, "scale") {
		// The suite runs this very binary as the server, in a process of its own.
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintf(stderr, "rota bench: the scale suite runs this binary as the server, but cannot find it: %v\n", err)
			return 1
		}
		scale.Binary = exe
		scale.NoWatch = !*watch
		if _, err := scale.Sized(*quick); err != nil {
			fmt.Fprintf(stderr, "rota bench: %v\n", err)
			return 2
		}
	} else if scale != (bench.ScaleOptions{}) || !*watch {
		fmt.Fprintln(stderr, "rota bench: --nodes, --jobs, --running, --heartbeat, --window and --watch are the scale suite's: add --suite scale")
		return 2
	}

	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "rota bench: --cpu-profile: %v\n", err)
			return 2
		}
		defer stop()
	}
	start := time.Now()
	rep := &bench.Report{Header: bench.NewHeader(ctx, *quick, start)}
	var runErr error
	rep.Results, runErr = bench.Run(ctx, bench.Options{Suites: names, Quick: *quick, Progress: stderr, Scale: scale})
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
