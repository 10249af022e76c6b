package sim

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Exit codes of Main.
const (
	exitOK    = 0
	exitError = 1 // the replay could not be done: unreadable input, a strict bad row, …
	exitUsage = 2 // the command line is wrong
)

// maxSkippedShown bounds the bad rows listed on stderr; the JSON output lists them all.
const maxSkippedShown = 20

// Main is `rota sim`: it parses args (without the command name), replays the trace under each
// policy and writes the report to stdout. Messages, the skipped-row list and the progress bar
// go to stderr. It returns the process exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rota sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := DefaultConfig()
	var (
		tracePath   = fs.String("trace", "", "trace `file` to replay (required)")
		format      = fs.String("format", "", "trace format: "+strings.Join(Formats(), ", ")+" (required)")
		clusterPath = fs.String("cluster", "", "cluster `file`: YAML, or an openb node list CSV (default: see rota sim docs)")
		addNodes    = fs.String("add-nodes", "", "add nodes to the cluster, `COUNTxMODEL[:GPUS]`, e.g. 4xH100")
		policies    = fs.String("policy", strings.Join(DefaultPolicies, ","), "policies to compare, comma-separated, from: "+strings.Join(PolicyNames(), ", ")+` (combine with "+")`)
		scale       = fs.Float64("scale", 1, "multiply the arrival rate by `X` (submit offsets are divided by X)")
		seed        = fs.Uint64("seed", 1, "seed of the replay's randomness (node failures)")
		output      = fs.String("o", "table", "output: table, json or csv")
		strict      = fs.Bool("strict", false, "fail on the first bad trace row instead of skipping it")
		timeLimit   = fs.String("time-limit", def.TimeLimit, "time limit of jobs whose trace has none: hour, exact, or a duration")
		checkpoint  = fs.Duration("checkpoint", def.Checkpoint, "interval at which jobs checkpoint (0: never)")
		mtbf        = fs.Duration("node-mtbf", 0, "mean time between failures of each node (0: nodes never fail)")
		repair      = fs.Duration("node-repair", def.NodeRepair, "mean time to repair a failed node")
		retries     = fs.Int("retries", def.Retries, "requeues of a job lost to a node failure before it fails")
		halfLife    = fs.Duration("half-life", def.HalfLife, "half-life of the GPU usage behind fair share")
		fill        = fs.Float64("fill", 0, "FGD paper's run: jobs in a random order until their GPU requests reach `X` times the cluster's GPUs, never ending, placed by --placement")
		placement   = fs.String("placement", "", "with --fill, placements to compare, comma-separated, from: "+strings.Join(PlacementNames(), ", ")+" (default all)")
		progress    = fs.Bool("progress", false, "show a progress bar on stderr even when it is not a terminal")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "rota sim: "+format+"\n", a...)
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		return usage("unexpected argument %q", fs.Arg(0))
	case *tracePath == "":
		return usage("--trace is required")
	case *format == "":
		return usage("--format is required (%s)", strings.Join(Formats(), ", "))
	case *output != "table" && *output != "json" && *output != "csv":
		return usage("-o %q: want table, json or csv", *output)
	case *scale <= 0:
		return usage("--scale %v: want a positive number", *scale)
	case *fill < 0 || *fill > 100:
		return usage("--fill %v: want a number above 0 and at most 100", *fill)
	case *checkpoint < 0 || *mtbf < 0 || *repair <= 0 || *retries < 0 || *halfLife <= 0:
		return usage("--checkpoint, --node-mtbf and --retries must not be negative; --node-repair and --half-life must be positive")
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case set["placement"] && *fill == 0:
		return usage("--placement needs --fill (a replay places as its --policy does)")
	case set["policy"] && *fill > 0:
		return usage("--fill compares placements (--placement), not policies: its jobs never wait")
	}
	var places []Placement
	if *fill > 0 {
		if *placement == "" {
			*placement = strings.Join(PlacementNames(), ",")
		}
		for p := range strings.SplitSeq(*placement, ",") {
			if p = strings.TrimSpace(p); p != "" {
				if _, err := placementFor(Placement(p), nil, &Cluster{}); err != nil {
					return usage("--placement: %v", err)
				}
				places = append(places, Placement(p))
			}
		}
		if len(places) == 0 {
			return usage("--placement names no placement")
		}
	}
	if _, err := timeLimitRule(*timeLimit); err != nil {
		return usage("--%v", err)
	}
	var names []string
	for p := range strings.SplitSeq(*policies, ",") {
		if p = strings.TrimSpace(p); p != "" {
			if _, err := plannerFor(p); err != nil {
				return usage("--policy: %v", err)
			}
			names = append(names, p)
		}
	}
	if len(names) == 0 {
		return usage("--policy names no policy")
	}
	if !validFormat(*format) {
		return usage("--format %q: want one of %s", *format, strings.Join(Formats(), ", "))
	}

	fail := func(err error) int {
		fmt.Fprintf(stderr, "rota sim: %v\n", err)
		return exitError
	}
	tr, err := LoadTrace(*tracePath, *format, *strict)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", *tracePath, err))
	}
	if tr.Untimed && *fill == 0 {
		return fail(fmt.Errorf("%s: no creation_time and deletion_time columns: only --fill, which reads no times, can use it", *tracePath))
	}
	c, err := clusterFor(*clusterPath, *tracePath, *format)
	if err != nil {
		return fail(err)
	}
	if *addNodes != "" {
		if err := c.AddNodes(*addNodes); err != nil {
			return fail(err)
		}
		c.Source += " + " + *addNodes
	}
	w, err := Prepare(tr, c, *strict)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", *tracePath, err))
	}
	reportSkipped(stderr, *tracePath, w)
	if len(w.Jobs) == 0 {
		return fail(errors.New("no job to replay"))
	}
	if *fill > 0 {
		if w, err = FillWorkload(w, *fill, *seed); err != nil {
			return fail(err)
		}
	}

	cfg := def
	cfg.Scale, cfg.TimeLimit, cfg.Checkpoint, cfg.Seed = *scale, *timeLimit, *checkpoint, *seed
	cfg.NodeMTBF, cfg.NodeRepair, cfg.Retries, cfg.HalfLife = *mtbf, *repair, *retries, *halfLife
	showBar := *progress || isTerminal(stderr)
	var (
		bar     *progressBar
		results []*Result
	)
	if *fill > 0 {
		// A fill run's jobs never end: progress is the GPU capacity requested so far.
		var requested int64
		for _, j := range w.Jobs {
			requested += gpuRequest(j)
		}
		var add func(int64)
		if showBar {
			bar = startProgress(stderr, int(requested/milliGPU)*len(places), "GPUs requested")
			var milli atomic.Int64
			add = func(m int64) {
				// Whole GPUs to the bar, the fractions carried.
				if n := milli.Add(m); n >= milliGPU {
					milli.Add(-n / milliGPU * milliGPU)
					bar.add(int(n / milliGPU))
				}
			}
		}
		results, err = RunFill(ctx, w, places, add)
	} else {
		if showBar {
			bar = startProgress(stderr, len(w.Jobs)*len(names), "jobs")
			cfg.Progress = bar.add
		}
		results, err = Run(ctx, w, cfg, names)
	}
	bar.stop()
	if err != nil {
		return fail(err)
	}
	rep := &Report{TraceFile: *tracePath, Workload: w, Config: cfg, Results: results}
	switch *output {
	case "json":
		err = rep.WriteJSON(stdout)
	case "csv":
		err = rep.WriteCSV(stdout)
	default:
		err = rep.WriteTable(stdout)
	}
	if err != nil {
		return fail(err)
	}
	return exitOK
}

func validFormat(f string) bool {
	for _, k := range Formats() {
		if k == f {
			return true
		}
	}
	return false
}

// clusterFor loads --cluster, or the default cluster of the format: a fixed cluster for
// Philly, the node list next to the trace for Alibaba. A rota trace needs --cluster.
func clusterFor(path, tracePath, format string) (*Cluster, error) {
	if path != "" {
		return LoadCluster(path)
	}
	switch format {
	case "philly":
		return PhillyCluster(), nil
	case "alibaba-gpu2023":
		nodes := filepath.Join(filepath.Dir(tracePath), "openb_node_list_all_node.csv")
		if _, err := os.Stat(nodes); err != nil {
			return nil, fmt.Errorf("no --cluster given and no %s next to the trace", nodes)
		}
		return LoadAlibabaNodes(nodes)
	}
	return nil, fmt.Errorf("a %s trace needs --cluster", format)
}

// reportSkipped tells stderr how many rows were loaded and which were skipped, and why.
func reportSkipped(stderr io.Writer, path string, w *Workload) {
	fmt.Fprintf(stderr, "rota sim: %s: %d rows, %d jobs loaded, %d skipped\n", path, w.Trace.Rows, len(w.Jobs), len(w.Skipped))
	for i, b := range w.Skipped {
		if i == maxSkippedShown {
			fmt.Fprintf(stderr, "  … and %d more (all are listed by -o json)\n", len(w.Skipped)-i)
			break
		}
		fmt.Fprintf(stderr, "  skipped %s\n", b)
	}
	for _, n := range w.Trace.Notes {
		fmt.Fprintf(stderr, "rota sim: note: %s\n", n)
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressBar draws the share of the work done (over all policies or placements) on one
// stderr line: jobs replayed, or GPUs requested in a --fill run.
type progressBar struct {
	w     io.Writer
	unit  string
	total int
	done  atomic.Int64
	quit  chan struct{}
	wg    sync.WaitGroup
	start time.Time
}

func startProgress(w io.Writer, total int, unit string) *progressBar {
	b := &progressBar{w: w, unit: unit, total: max(total, 1), quit: make(chan struct{}), start: time.Now()}
	b.wg.Go(func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-b.quit:
				b.draw()
				fmt.Fprintln(b.w)
				return
			case <-t.C:
				b.draw()
			}
		}
	})
	return b
}

func (b *progressBar) add(n int) { b.done.Add(int64(n)) }

func (b *progressBar) draw() {
	const width = 30
	d := min(int(b.done.Load()), b.total)
	fill := d * width / b.total
	fmt.Fprintf(b.w, "\r[%s%s] %3d%% %d/%d %s %-8s", strings.Repeat("#", fill), strings.Repeat(".", width-fill),
		d*100/b.total, d, b.total, b.unit, time.Since(b.start).Round(100*time.Millisecond))
}

// stop draws the final state and ends the line; a nil bar does nothing.
func (b *progressBar) stop() {
	if b == nil {
		return
	}
	close(b.quit)
	b.wg.Wait()
}
