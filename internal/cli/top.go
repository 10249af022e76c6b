package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rotahq/rota/internal/api"
)

const topUsage = `rota top [--interval 2s] [--once]

A live view of the pool and the queue, like nvtop for the cluster. Every interval it
reads the cluster at a glance from the server (GET /api/v1/top: what the screen shows,
however large the cluster) and redraws the screen:

  - a header: GPUs in use of the total, mean GPU utilisation and GPU memory used of the
    total by the nodes' latest telemetry, jobs running, pending and held; then, where
    nodes are in more than one pool, the same figures for each pool, and where jobs are
    in more than one queue, each queue's jobs waiting (with the GPUs they ask for) and
    running, on one line;
  - one line per node: its state (marked degraded or syncing), one cell per GPU, GPUs in
    use, mean utilisation, GPU memory used of the total, power drawn and its jobs;
  - the running jobs with their latest GPU utilisation and memory, run time and how long
    they have held their GPUs idle, then the jobs that wait, those soonest to start
    first, with their estimated start and why they wait.

The GPU cells:
  █  in use and busy (utilisation 50% or more)
  ▓  in use (utilisation between, or not measured)
  ░  in use but idle (utilisation below 5%)
  ·  free
  x  unhealthy or missing
  h  held from new work by leftover processes

A GPU counts as in use when a job holds it or a process of a live job runs on it. The
job counts and lists hold the jobs you may read. Every line is cut to the terminal's
width, and the live view to its height: the node list shows as many nodes as leave room
for the rest, and counts those left out (rota nodes lists them all). The size is
$COLUMNS and $LINES where set, else the terminal's own, else 120 columns. When the
server cannot be reached the view says so and keeps trying.

With --once, or when standard output is not a terminal, it prints one frame with every
node and exits: non-zero, with the error, when the server cannot be read. -o json prints
what it read, once, with every node. Ctrl-C ends it.`

// Limits of the view: a frame should fit a screen, so long lists are cut with a count
// of what is left out, and text from the server is cut before the line is.
const (
	topRows      = 10 // running jobs, and waiting jobs, shown at most
	topNameWidth = 32
	topUserWidth = 16
	defaultWidth = 120
	minInterval  = 100 * time.Millisecond
)

// ANSI sequences for redrawing a terminal in place.
const (
	clearHome  = "\x1b[H\x1b[2J"
	hideCursor = "\x1b[?25l"
	showCursor = "\x1b[?25h"
)

// topSnapshot is what one refresh reads from the server, and what -o json prints.
type topSnapshot = api.Top

func runTop(ctx context.Context, cfg Config, args []string) int {
	flags, g := newFlagSet(cfg, "top", topUsage)
	interval := flags.Duration("interval", 2*time.Second, "redraw every `duration`")
	once := flags.Bool("once", false, "print one frame and exit")
	if code, ok := cfg.parseNoArgs("top", flags, g, args); !ok {
		return code
	}
	if *interval < minInterval {
		return cfg.usageError("top", "--interval %s: want %s or more", *interval, minInterval)
	}
	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	live := !*once && g.output != "json" && isTerminal(cfg.Stdout)
	if live {
		// A read put off is waited out with the last frame on the screen: a line about it
		// would land in the middle of the frame.
		c.Waiting = nil
	}
	nodes := cfg.topNodes(live)
	fetch := func(ctx context.Context) (topSnapshot, error) {
		// A server that stops answering must not freeze the view: each read gets a while
		// longer than one interval.
		ctx, cancel := context.WithTimeout(ctx, *interval+10*time.Second)
		defer cancel()
		return c.Top(ctx, nodes, topRows)
	}
	if !live {
		snap, err := fetch(ctx)
		if err != nil {
			return cfg.fail(ctx, err)
		}
		if g.output == "json" {
			return cfg.printJSON(snap)
		}
		if _, err := io.WriteString(cfg.Stdout, cfg.topFrame(&snap, nil, *interval, false)); err != nil {
			return cfg.fail(ctx, err)
		}
		return ExitOK
	}
	ticks := time.NewTicker(*interval)
	defer ticks.Stop()
	return cfg.watchTop(ctx, ticks.C, *interval, fetch)
}

// watchTop redraws the frame at each tick until ctx ends, showing a failed read in the
// frame over the last data that was read, and leaves the cursor visible.
func (cfg Config) watchTop(ctx context.Context, ticks <-chan time.Time, interval time.Duration,
	fetch func(context.Context) (topSnapshot, error)) int {
	fmt.Fprint(cfg.Stdout, hideCursor)
	defer fmt.Fprint(cfg.Stdout, showCursor)
	var last *topSnapshot
	for {
		snap, err := fetch(ctx)
		if ctx.Err() != nil {
			return ExitOK
		}
		if err == nil {
			last = &snap
		}
		fmt.Fprint(cfg.Stdout, clearHome+cfg.topFrame(last, err, interval, true))
		select {
		case <-ctx.Done():
			return ExitOK
		case <-ticks:
		}
	}
}

// topNodes is how many nodes to read: the live view, as many as the screen has lines;
// one frame, or a screen of unknown height, every node (-1).
func (cfg Config) topNodes(live bool) int {
	if h := cfg.termHeight(); live && h > 0 {
		return h
	}
	return -1
}

// isTerminal reports whether w is a character device, where redrawing in place works.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&fs.ModeCharDevice != 0
}

// termWidth is $COLUMNS, else the width of the terminal on standard output, else
// defaultWidth.
func (cfg Config) termWidth() int {
	if n := cfg.envSize("COLUMNS"); n > 0 {
		return n
	}
	if cols, _ := terminalSize(cfg.Stdout); cols > 0 {
		return cols
	}
	return defaultWidth
}

// termHeight is $LINES, else the height of the terminal on standard output, else 0: no
// terminal, no limit.
func (cfg Config) termHeight() int {
	if n := cfg.envSize("LINES"); n > 0 {
		return n
	}
	_, rows := terminalSize(cfg.Stdout)
	return rows
}

// envSize is the positive number in the environment variable name, else 0.
func (cfg Config) envSize(name string) int {
	n, err := strconv.Atoi(strings.TrimSpace(cfg.Getenv(name)))
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

// terminalSize is the columns and rows of the terminal w writes to; zeros when w is not
// one.
func terminalSize(w io.Writer) (cols, rows int) {
	f, ok := w.(*os.File)
	if !ok {
		return 0, 0
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, 0
	}
	return int(ws.Col), int(ws.Row)
}

// topFrame is the whole screen: header, the error of the last read if it failed, nodes,
// legend, running and waiting jobs; each line cut to the terminal's width. snap is the
// last data read, nil when none has been yet. With fit, the frame is also held to the
// terminal's height, so that a redraw in place never scrolls: the node list gives way
// first, to as many nodes as leave room for the rest and a count of those left out.
func (cfg Config) topFrame(snap *topSnapshot, readErr error, interval time.Duration, fit bool) string {
	loc := cfg.location()
	var b strings.Builder
	if snap == nil {
		fmt.Fprintf(&b, "rota top  %s\n", cfg.Now().In(loc).Format("15:04:05"))
	} else {
		b.WriteString(topHeader(*snap, loc) + "\n")
	}
	if readErr != nil {
		msg := "error: " + clean(readErr.Error()) + "; retrying every " + interval.String()
		if snap != nil {
			msg += ", showing what was read at " + snap.Time.In(loc).Format("15:04:05")
		}
		b.WriteString(msg + "\n")
	}
	// The last line of a terminal is left empty: a newline written on it would scroll.
	room := 0
	if fit {
		room = cfg.termHeight() - 1
	}
	if snap != nil {
		var jobs strings.Builder
		writeTopRunning(&jobs, *snap)
		jobs.WriteString("\n")
		writeTopWaiting(&jobs, *snap)
		nodeRoom := 0 // every node
		if room > 0 {
			// Around the nodes: a blank line, their header and the legend, a blank line.
			nodeRoom = max(room-strings.Count(b.String(), "\n")-4-strings.Count(jobs.String(), "\n"), 1)
		}
		b.WriteString("\n")
		writeTopNodes(&b, *snap, nodeRoom)
		b.WriteString("\n")
		b.WriteString(jobs.String())
	}
	frame := cutLines(b.String(), cfg.termWidth())
	if room > 0 {
		// A terminal too short for even one node and the job lists shows the frame's top.
		lines := strings.SplitAfter(frame, "\n")
		frame = strings.Join(lines[:min(len(lines), room)], "")
	}
	return frame
}

// cutLines cuts every line of s to width runes, marking each cut.
func cutLines(s string, width int) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		body := strings.TrimSuffix(l, "\n")
		lines[i] = truncate(body, max(width, 2)) + l[len(body):]
	}
	return strings.Join(lines, "")
}

// topHeader is the cluster in one line: "rota top  12:00:00  GPUs 3/16 in use  util 24%
// GPU memory 164.5/1200G  2 running  3 pending  1 held"; when any node needs a look, a
// line that says how many; then, where the nodes are in
// more than one pool, one line per pool with its GPUs; and where jobs are in more than one
// queue, one line with each queue's: "  queues  batch 4 waiting (11 GPUs), 2 running  ·  …".
func topHeader(snap topSnapshot, loc *time.Location) string {
	l := snap.Total
	var b strings.Builder
	fmt.Fprintf(&b, "rota top  %s  GPUs %d/%d in use  util %s  GPU memory %s  %d running  %d pending  %d held",
		snap.Time.In(loc).Format("15:04:05"), l.GPUsUsed, l.GPUs, loadUtil(l), clusterMemory(l), snap.Running, snap.Pending, snap.Held)
	switch l.NodesWithProblems {
	case 0:
	case 1:
		b.WriteString("\n  1 node needs a look: rota nodes --problems")
	default:
		fmt.Fprintf(&b, "\n  %d nodes need a look: rota nodes --problems", l.NodesWithProblems)
	}
	if len(snap.Pools) > 1 {
		tw := newTable(&b)
		for _, p := range snap.Pools {
			name := "no pool"
			if p.Pool != "" {
				name = "pool " + cleanCell(p.Pool, topNameWidth)
			}
			fmt.Fprintf(tw, "\n  %s\t%d nodes\tGPUs %d/%d in use\tutil %s\tGPU memory %s",
				name, p.Nodes, p.GPUsUsed, p.GPUs, loadUtil(p), clusterMemory(p))
		}
		tw.Flush()
	}
	if len(snap.Queues) > 1 {
		queues := make([]string, len(snap.Queues))
		for i, q := range snap.Queues {
			queues[i] = fmt.Sprintf("%s %d waiting (%s), %d running",
				orDash(cleanCell(q.Queue, topUserWidth)), q.Pending+q.Held, plural(q.WaitingGPUs, "GPU", "GPUs"), q.Running)
		}
		b.WriteString("\n  queues  " + strings.Join(queues, "  ·  "))
	}
	return b.String()
}

// loadUtil is the mean GPU utilisation of l: "-" with no reading, "n/a" where no GPU
// measured reports one.
func loadUtil(l api.Load) string {
	switch {
	case l.GPUsMeasured == 0:
		return "-"
	case l.GPUUtilPct == nil:
		return "n/a"
	}
	return formatPct(*l.GPUUtilPct)
}

func loadMemory(l api.Load) string {
	switch {
	case l.GPUsMeasured == 0:
		return "-"
	case l.GPUMemoryMB == 0:
		return formatMB(l.GPUMemoryUsedMB)
	}
	return formatMBOf(l.GPUMemoryUsedMB, l.GPUMemoryMB)
}

// clusterMemory is loadMemory with each figure in its own unit: a cluster's terabytes
// would round its used gigabytes away.
func clusterMemory(l api.Load) string {
	if l.GPUsMeasured == 0 || l.GPUMemoryMB == 0 {
		return loadMemory(l)
	}
	return formatMB(l.GPUMemoryUsedMB) + "/" + formatMB(l.GPUMemoryMB)
}

func loadPower(l api.Load) string {
	if l.GPUsMeasured == 0 {
		return "-"
	}
	return strconv.FormatFloat(l.PowerW, 'f', 0, 64) + "W"
}

// topLegend explains the GPU cells, under the nodes.
const topLegend = "█ busy ≥50%  ▓ in use  ░ idle <5%  · free  x unhealthy/missing  h held by leftovers"

// writeTopNodes writes one line per node and the legend, in at most room lines for the
// nodes when room is above 0: as many nodes as fit with a line counting the rest, of
// those read and those the server did not send.
func writeTopNodes(w io.Writer, snap topSnapshot, room int) {
	if snap.Total.Nodes == 0 {
		fmt.Fprintln(w, "no nodes have joined")
		return
	}
	nodes := snap.Nodes
	if room > 0 && snap.Total.Nodes > room {
		nodes = nodes[:min(len(nodes), max(room-1, 1))]
	}
	more := snap.Total.Nodes - len(nodes)
	tw := newTable(w)
	fmt.Fprintln(tw, "NODE\tSTATE\tGPUS\tUSED\tUTIL\tGMEM\tPOWER\tJOBS")
	for _, n := range nodes {
		l := api.NodeLoad(&n)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\n",
			cleanCell(n.Name, topNameWidth), nodeState(n), gpuBar(n), n.GPUsUsed, len(n.GPUs),
			loadUtil(l), loadMemory(l), loadPower(l), nodeJobs(n.Jobs, snap.JobLabels))
	}
	tw.Flush()
	if more > 0 {
		fmt.Fprintf(w, "… and %d more nodes (rota nodes lists them all)\n", more)
	}
	fmt.Fprintln(w, topLegend)
}

// nodeJobs lists a node's jobs as the job lists below name them: ARRAY_INDEX for a job
// of an array, as labels names them.
func nodeJobs(jobs []int64, labels map[int64]string) string {
	out := make([]string, len(jobs))
	for i, id := range jobs {
		if out[i] = clean(labels[id]); out[i] == "" {
			out[i] = strconv.FormatInt(id, 10)
		}
	}
	return orDash(strings.Join(out, ","))
}

// gpuBar is one cell per GPU of the node, in index order; see topUsage for the cells.
func gpuBar(n api.Node) string {
	if len(n.GPUs) == 0 {
		return "-"
	}
	// A GPU is in use where a job holds it, or where a process of a live job runs on it
	// (one a job started on a GPU it does not hold).
	live := map[int]bool{}
	for _, g := range n.UsedGPUs {
		live[g] = true
	}
	if n.Telemetry != nil {
		for _, p := range n.Telemetry.Processes {
			if p.JobID != 0 {
				live[p.GPU] = true
			}
		}
	}
	gpus := slices.SortedFunc(slices.Values(n.GPUs), func(a, b api.GPU) int { return cmp.Compare(a.Index, b.Index) })
	var b strings.Builder
	for _, g := range gpus {
		b.WriteRune(gpuCell(n, g, live[g.Index]))
	}
	return b.String()
}

func gpuCell(n api.Node, g api.GPU, used bool) rune {
	s, measured := latestSample(n.Telemetry, g.Index)
	measured = measured && n.State != api.NodeLost
	switch {
	case !g.Healthy || g.Missing:
		return 'x'
	case slices.Contains(n.HeldGPUs, g.Index):
		return 'h'
	case !used:
		return '·'
	case !measured || s.UtilizationUnknown:
		return '▓'
	case s.UtilizationPct >= 50:
		return '█'
	case s.UtilizationPct < 5:
		return '░'
	}
	return '▓'
}

// writeTopRunning writes the running jobs: what their GPUs do by the latest reading of
// their attempt, how long they have run, and how long they have held their GPUs idle.
func writeTopRunning(w io.Writer, snap topSnapshot) {
	running := snap.RunningJobs
	if len(running) == 0 {
		fmt.Fprintln(w, "no running jobs")
		return
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "RUNNING\tUSER\tQUEUE\tGPUS\tUTIL\tGMEM\tTIME\tIDLE\tNODES")
	for _, j := range running[:min(len(running), topRows)] {
		util, gmem := "-", "-"
		if u := j.Usage; u != nil && u.Samples > 0 {
			util, gmem = formatPct(u.GPUUtilPct.Last), statMB(u.GPUMemoryMB.Last)
		}
		idle := "-"
		if isIdle(j) {
			idle = formatDuration(snap.Time.Sub(*j.IdleSince))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n",
			displayID(j), orDash(cleanCell(j.Spec.User, topUserWidth)), orDash(cleanCell(j.Spec.Queue, topUserWidth)),
			j.Spec.GPUs, util, gmem, formatDuration(jobTime(j, snap.Time)), idle, orDash(clean(strings.Join(j.Nodes, ","))))
	}
	tw.Flush()
	if more := snap.Running - min(len(running), topRows); more > 0 {
		fmt.Fprintf(w, "… and %d more running (rota queue lists them all)\n", more)
	}
}

// writeTopWaiting writes the jobs that wait in the server's order: pending before held,
// each soonest to start first; the reason last, where the line's cut falls.
func writeTopWaiting(w io.Writer, snap topSnapshot) {
	waiting := snap.WaitingJobs
	if len(waiting) == 0 {
		fmt.Fprintln(w, "no waiting jobs")
		return
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "WAITING\tUSER\tQUEUE\tGPUS\tWAITED\tSTART\tREASON")
	for _, j := range waiting[:min(len(waiting), topRows)] {
		reason := jobReason(j)
		if j.State == api.StateHeld {
			reason = "held: " + reason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n",
			displayID(j), orDash(cleanCell(j.Spec.User, topUserWidth)), orDash(cleanCell(j.Spec.Queue, topUserWidth)),
			j.Spec.GPUs, formatDuration(jobTime(j, snap.Time)), jobStart(j, snap.Time), reason)
	}
	tw.Flush()
	if more := snap.Pending + snap.Held - min(len(waiting), topRows); more > 0 {
		fmt.Fprintf(w, "… and %d more waiting (rota queue lists them all)\n", more)
	}
}
