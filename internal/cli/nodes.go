package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
)

const nodesUsage = `rota nodes [--state S,S...] [--pool P] [--name TEXT] [--drifting] [--problems] [--free N] [NAME]

Lists nodes (with the flags, those that match each one given): state, GPUs in use of the total, what the GPUs really do by the node's
latest telemetry (UTIL: mean utilisation over its GPUs; GMEM: GPU memory used of the
total; "-" without telemetry or for a lost node), GPU models, CPUs in use of the total,
memory, labels and when the node's agent last reported. STATE says "degraded" when a GPU
vanished or the node's health check fails, and "drift" when its driver or CUDA version is
outside the range its pool wants (the pool's driver: and cuda:). Below the table, one
line per problem: a drain's reason and maintenance window (planned or open, see rota
admin drain), why a node is degraded, each version that drifts (and whether the node
drains on its own for it, drain_on_drift), unhealthy GPUs, GPUs held from new work by leftover processes (GPU
processes of no live job) and failed health checks; then a warning for each pool (the
nodes of one "pool" label; nodes without one form the default pool) that mixes GPU
models or driver versions, of the nodes listed.

With NAME, shows that node in full: its inventory, container runtime and limits, and
each GPU with its bus ID, NUMA node, NVLink peers, MIG mode, health, latest utilisation,
memory, power and temperature, and the processes on it with their jobs. A GPU in MIG mode
is a line of its own with its MIG devices, the schedulable ones, indented under it (their
utilisation is n/a: NVIDIA gives none per instance).

-o json prints an api.NodeList, or with NAME the api.Node.`

// Widths of table cells whose text comes from the nodes: enough for any real value,
// short enough that a runaway one cannot push the table off the screen.
const (
	modelWidth   = 40
	healthWidth  = 60
	commandWidth = 40
	problemWidth = 200
)

func runNodes(ctx context.Context, cfg Config, args []string) int {
	fs, g := newFlagSet(cfg, "nodes", nodesUsage)
	states := fs.String("state", "", "only nodes in these `states`, comma-separated: READY, DRAINING, DRAINED, NOT_READY, LOST")
	var f NodeFilter
	fs.StringVar(&f.Pool, "pool", "", "only nodes of this `pool` (their pool label)")
	fs.StringVar(&f.Name, "name", "", "only nodes whose name holds this `text`")
	fs.BoolVar(&f.Drifting, "drifting", false, "only nodes whose driver or CUDA version is outside their pool's wanted range")
	fs.BoolVar(&f.Problems, "problems", false, "only nodes with a problem: not ready, lost, draining or drained, or with a line below the table")
	fs.IntVar(&f.Free, "free", 0, "only nodes with at least `N` GPUs free (healthy, held by no job, on a node that takes work): where an N-GPU job could start now")
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code
	}
	switch {
	case len(pos) > 1:
		return cfg.usageError("nodes", "unexpected argument %q: give one node name at most", pos[1])
	case len(pos) == 1 && strings.TrimSpace(pos[0]) == "":
		return cfg.usageError("nodes", "the node name is empty")
	case len(pos) == 1 && (*states != "" || f.Pool != "" || f.Name != "" || f.Drifting || f.Problems || f.Free != 0):
		return cfg.usageError("nodes", "a node NAME shows that node: give it without --state, --pool, --name, --drifting, --problems or --free")
	case f.Free < 0 || f.Free > 1024:
		return cfg.usageError("nodes", "--free: %d is not a number of GPUs from 1 to 1024", f.Free)
	}
	if *states != "" {
		for _, s := range strings.Split(*states, ",") {
			st := api.NodeState(strings.ToUpper(strings.TrimSpace(s)))
			if !st.Valid() {
				return cfg.usageError("nodes", "--state: unknown state %q: want READY, DRAINING, DRAINED, NOT_READY or LOST", s)
			}
			f.States = append(f.States, string(st))
		}
	}
	if len(pos) == 1 {
		// The server lists the nodes whose names hold NAME; the one named so is shown.
		f.Name = pos[0]
	}
	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	list, err := c.NodesWhere(ctx, f)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	if list.Nodes == nil {
		list.Nodes = []api.Node{}
	}
	if len(pos) == 1 {
		return cfg.showNode(ctx, list.Nodes, pos[0], g.output)
	}
	if g.output == "json" {
		return cfg.printJSON(list)
	}
	if len(list.Nodes) == 0 {
		// Said on stderr, as kubectl does: stdout stays a table, if an empty one.
		if len(f.States) > 0 || f.Pool != "" || f.Name != "" || f.Drifting || f.Problems || f.Free > 0 {
			fmt.Fprintln(cfg.Stderr, "rota nodes: no node matches")
		} else {
			fmt.Fprintln(cfg.Stderr, "rota nodes: no node has joined yet; start one with rota agent --join TOKEN (a token from rota admin join-token), or rota up")
		}
	}
	if err := cfg.printNodes(list.Nodes); err != nil {
		return cfg.fail(ctx, err)
	}
	return ExitOK
}

// printNodes writes the nodes table, then the problems and the pools' warnings.
func (cfg Config) printNodes(nodes []api.Node) error {
	now, loc := cfg.Now(), cfg.location()
	tw := newTable(cfg.Stdout)
	fmt.Fprintln(tw, "NAME\tSTATE\tGPUS\tUTIL\tGMEM\tMODEL\tCPUS\tMEMORY\tLABELS\tLAST SEEN")
	for _, n := range nodes {
		lastSeen := "never"
		if !n.LastHeartbeat.IsZero() {
			lastSeen = relative(n.LastHeartbeat, now)
		}
		util, gmem := nodeUse(n)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n",
			clean(n.Name), nodeState(n), nodeGPUs(n), util, gmem, gpuModels(n.GPUs), n.CPUsUsed, n.CPUs,
			formatMB(n.MemoryMB), clean(formatLabels(n.Labels)), lastSeen)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var notes []string
	for _, n := range nodes {
		notes = append(notes, nodeProblems(n, now, loc)...)
	}
	notes = append(notes, poolWarnings(nodes)...)
	if len(notes) > 0 {
		fmt.Fprintln(cfg.Stdout)
	}
	for _, line := range notes {
		if _, err := fmt.Fprintln(cfg.Stdout, line); err != nil {
			return err
		}
	}
	return nil
}

// nodeGPUs is used/total, with the count of unhealthy devices when there are any.
func nodeGPUs(n api.Node) string {
	s := fmt.Sprintf("%d/%d", n.GPUsUsed, len(n.GPUs))
	bad := 0
	for _, g := range n.GPUs {
		if !g.Healthy {
			bad++
		}
	}
	if bad > 0 {
		s += fmt.Sprintf(" (%d unhealthy)", bad)
	}
	if k := len(n.SharedGPUs); k > 0 {
		s += fmt.Sprintf(" (%d shared)", k)
	}
	return s
}

// describeTenants says who shares a GPU: "0.75 by 12 (0.5, 40 GB), 13 (0.25, 20 GB)";
// "" for a GPU nobody shares.
func describeTenants(n api.Node, index int) string {
	for _, g := range n.SharedGPUs {
		if g.Index != index {
			continue
		}
		parts := make([]string, len(g.Tenants))
		for i, t := range g.Tenants {
			parts[i] = fmt.Sprintf("%d (%s, %s)", t.JobID, strconv.FormatFloat(t.Share, 'f', -1, 64), formatMB(t.MemoryMB))
		}
		return strconv.FormatFloat(g.Share, 'f', -1, 64) + " by " + strings.Join(parts, ", ")
	}
	return ""
}

// nodeUse is the UTIL and GMEM cells: the mean utilisation over the GPUs of the node's
// latest reading, and the memory they use of what they have. Both are "-" without a
// reading, and for a lost node, whose last reading no longer says what its GPUs do.
func nodeUse(n api.Node) (util, gmem string) {
	l := api.NodeLoad(&n)
	return loadUtil(l), loadMemory(l)
}

// gpuModels lists the distinct models on a node, sorted.
func gpuModels(gpus []api.GPU) string {
	return orDash(strings.Join(distinctModels(gpus), ","))
}

// distinctModels are the models of gpus, cleaned, each once, sorted.
func distinctModels(gpus []api.GPU) []string {
	var models []string
	for _, g := range gpus {
		if m := cleanCell(g.Model, modelWidth); m != "" && !slices.Contains(models, m) {
			models = append(models, m)
		}
	}
	sort.Strings(models)
	return models
}

// nodeState is the node's state, marked while it syncs (its agent changed or it came back
// after it was lost, and it takes no new work until its agent has stopped what the server
// no longer lists) and while it is degraded.
func nodeState(n api.Node) string {
	var marks []string
	if n.Syncing {
		marks = append(marks, "syncing")
	}
	if len(n.Degraded) > 0 {
		marks = append(marks, "degraded")
	}
	if len(n.Drift) > 0 {
		marks = append(marks, "drift")
	}
	if len(marks) == 0 {
		return string(n.State)
	}
	return string(n.State) + " (" + strings.Join(marks, ", ") + ")"
}

// describeClock says how far a node's clock is off the server's, or "" where it is not.
func describeClock(offsetS int64) string {
	if offsetS == 0 {
		return ""
	}
	where := "behind"
	if offsetS < 0 {
		where, offsetS = "ahead of", -offsetS
	}
	return fmt.Sprintf("its clock is %s %s the server's (rota converts the times it reports and the time limits it keeps; set it right with NTP)",
		time.Duration(offsetS)*time.Second, where)
}

// describeMaintenance is a node's drain in words: its reason and window, and who asked.
func describeMaintenance(m *api.Maintenance, now time.Time, loc *time.Location) string {
	if m == nil {
		return ""
	}
	s := maintenanceText(m, now, loc)
	if m.By != "" {
		s += " (by " + clean(m.By) + ")"
	}
	return s
}

// nodeProblems says what is wrong with a node, one line a problem: its maintenance (a
// drain with its reason and window, planned or open), why it is degraded,
// then each GPU held from new work by leftover processes. The server writes a sentence
// into Degraded for each missing or unhealthy GPU and a failing health check; only when
// it gave none are those problems told from the GPUs and the check themselves, so that
// none is listed twice.
func nodeProblems(n api.Node, now time.Time, loc *time.Location) []string {
	name := clean(n.Name)
	var lines []string
	if m := n.Maintenance; m != nil {
		lines = append(lines, name+": maintenance: "+describeMaintenance(m, now, loc))
	}
	for _, reason := range n.Degraded {
		lines = append(lines, fmt.Sprintf("%s: %s", name, cleanCell(reason, problemWidth)))
	}
	if d := describeDrift(n); d != "" {
		lines = append(lines, name+": "+d)
	}
	if c := describeClock(n.ClockOffsetS); c != "" {
		lines = append(lines, name+": "+c)
	}
	if len(n.Degraded) == 0 {
		for _, g := range n.GPUs {
			if !g.Healthy {
				lines = append(lines, fmt.Sprintf("%s GPU %d: %s", name, g.Index, gpuHealth(g, problemWidth)))
			}
		}
		if hc := n.HealthCheck; hc != nil && !hc.OK {
			lines = append(lines, fmt.Sprintf("%s: health check failed: %s", name, describeHealthCheck(*hc, now, loc)))
		}
	}
	return append(lines, leftoverProblems(n, now, loc)...)
}

// leftoverProblems is a line for each leftover process, saying whether it keeps its GPU
// from new work, and one for each held GPU whose processes the server did not list.
func leftoverProblems(n api.Node, now time.Time, loc *time.Location) []string {
	name := clean(n.Name)
	var lines []string
	for _, p := range sortedProcesses(n.Leftovers) {
		held := ""
		if slices.Contains(n.HeldGPUs, p.GPU) {
			held = "held from new work: "
		}
		lines = append(lines, fmt.Sprintf("%s GPU %d: %sleftover %s", name, p.GPU, held, describeProcess(p, now, loc)))
	}
	for _, gpu := range slices.Sorted(slices.Values(n.HeldGPUs)) {
		if !slices.ContainsFunc(n.Leftovers, func(p api.GPUProcess) bool { return p.GPU == gpu }) {
			lines = append(lines, fmt.Sprintf("%s GPU %d: held from new work: processes of an ended job still hold its memory", name, gpu))
		}
	}
	return lines
}

// sortedProcesses is procs ordered by GPU, then PID.
func sortedProcesses(procs []api.GPUProcess) []api.GPUProcess {
	out := slices.Clone(procs)
	slices.SortFunc(out, func(a, b api.GPUProcess) int {
		return cmp.Or(cmp.Compare(a.GPU, b.GPU), cmp.Compare(a.PID, b.PID))
	})
	return out
}

// describeProcess is a GPU process in words: "process 4242 (python) holds 12.5G since
// 11:40:00 (20m00s ago)".
func describeProcess(p api.GPUProcess, now time.Time, loc *time.Location) string {
	d := "process " + strconv.Itoa(p.PID)
	if cmd := cleanCell(p.Command, commandWidth); cmd != "" {
		d += " (" + cmd + ")"
	}
	d += " holds " + formatMB(p.MemoryMB)
	if p.Since != nil {
		d += " since " + clock(*p.Since, now, loc)
	}
	return d
}

// clock is a recent time as a person reads it on a node: "11:40:00 (20m00s ago)".
func clock(t, now time.Time, loc *time.Location) string {
	return t.In(loc).Format("15:04:05") + " (" + relative(t, now) + ")"
}

// gpuHealth is what is wrong with a GPU, cut to width: "unhealthy: XID 79 ...", or
// "missing: ..." for one that fell off the bus.
func gpuHealth(g api.GPU, width int) string {
	state := "unhealthy"
	if g.Missing {
		state = "missing"
	}
	if h := cleanCell(g.Health, width); h != "" {
		return state + ": " + h
	}
	return state
}

// describeHealthCheck is a health-check run in words: "exit 1 at 11:59:00 (1m00s ago):
// ECC errors found".
func describeHealthCheck(hc api.HealthCheck, now time.Time, loc *time.Location) string {
	d := "exit " + strconv.Itoa(hc.ExitCode)
	if hc.OK {
		d = "ok"
	}
	d += " at " + clock(hc.Time, now, loc)
	if out := cleanCell(hc.Output, problemWidth); out != "" {
		d += ": " + out
	}
	return d
}

// defaultPool names the nodes without a "pool" label in warnings.
const defaultPool = ""

// poolWarnings warns of each pool whose nodes mix GPU models or driver versions: a job
// that names no model may land on either model, and code built against one driver may
// fail on another, so a mixed pool is usually a mistake in the inventory or the labels.
func poolWarnings(nodes []api.Node) []string {
	pools := map[string][]api.Node{}
	for _, n := range nodes {
		pool := n.Labels["pool"]
		pools[pool] = append(pools[pool], n)
	}
	var warnings []string
	for _, pool := range slices.Sorted(maps.Keys(pools)) {
		name := "pool " + clean(pool)
		if pool == defaultPool {
			name = "the default pool"
		}
		for _, check := range []struct {
			what string
			of   func(api.Node) []string
		}{
			// A GPU split into MIG devices is still its model: an admin's choice, no mix.
			{"GPU models", func(n api.Node) []string { return distinctModels(wholeGPUs(n.GPUs)) }},
			{"driver versions", func(n api.Node) []string {
				if v := cleanCell(n.DriverVersion, modelWidth); v != "" {
					return []string{v}
				}
				return nil
			}},
		} {
			if mix := countByNode(pools[pool], check.of); len(mix) > 1 {
				warnings = append(warnings, fmt.Sprintf("warning: %s mixes %s: %s", name, check.what, strings.Join(mix, ", ")))
			}
		}
	}
	return warnings
}

// countByNode counts the nodes that have each value of, most common first:
// ["H100 (4 nodes)", "A100 (1 node)"].
func countByNode(nodes []api.Node, of func(api.Node) []string) []string {
	count := map[string]int{}
	for _, n := range nodes {
		for _, v := range of(n) {
			count[v]++
		}
	}
	values := slices.Collect(maps.Keys(count))
	slices.SortFunc(values, func(a, b string) int {
		return cmp.Or(cmp.Compare(count[b], count[a]), strings.Compare(a, b))
	})
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = v + " (" + plural(count[v], "node", "nodes") + ")"
	}
	return out
}

// showNode prints the node called name in full, or as JSON.
func (cfg Config) showNode(ctx context.Context, nodes []api.Node, name, output string) int {
	i := slices.IndexFunc(nodes, func(n api.Node) bool { return n.Name == name })
	if i < 0 {
		return cfg.fail(ctx, fmt.Errorf("no node %q (rota nodes lists them)", name))
	}
	if output == "json" {
		return cfg.printJSON(nodes[i])
	}
	if err := cfg.printNode(nodes[i]); err != nil {
		return cfg.fail(ctx, err)
	}
	return ExitOK
}

// printNode writes one node in full: its inventory as lines, then a table of its GPUs.
func (cfg Config) printNode(n api.Node) error {
	now, loc := cfg.Now(), cfg.location()
	tw := newTable(cfg.Stdout)
	// Lines with an empty value are left out: they are the ones that apply to few nodes.
	for _, kv := range [][2]string{
		{"Name", clean(n.Name)},
		{"State", nodeState(n)},
		{"Degraded", describeDegraded(n.Degraded)},
		{"Drift", describeDrift(n)},
		{"Clock", describeClock(n.ClockOffsetS)},
		{"Maintenance", describeMaintenance(n.Maintenance, now, loc)},
		{"Hostname", clean(n.Hostname)},
		{"Labels", clean(formatLabels(n.Labels))},
		{"GPUs", nodeGPUs(n) + " in use, " + gpuModels(n.GPUs)},
		{"Held GPUs", describeHeld(n.HeldGPUs)},
		{"CPUs", fmt.Sprintf("%d/%d in use", n.CPUsUsed, n.CPUs)},
		{"Memory", formatMB(n.MemoryMB)},
		{"Driver", describeDriver(n.Inventory)},
		{"Devices", orDash(clean(n.DeviceSource))},
		{"Containers", describeRuntime(n.ContainerRuntime)},
		{"Limits", describeLimits(n.Limits)},
		{"Jobs", joinIDs(n.Jobs)},
		{"Last seen", describeLastSeen(n.LastHeartbeat, now, loc)},
		{"Telemetry", describeReading(n.Telemetry, now, loc)},
		{"Health check", healthCheckLine(n.HealthCheck, now, loc)},
	} {
		if kv[1] != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(n.GPUs) == 0 {
		return nil
	}
	fmt.Fprintln(cfg.Stdout, "\nGPUs:")
	return printGPUs(cfg.Stdout, n, now, loc)
}

// printGPUs is the table of a node's GPUs: what each is, how it is, and what it does by
// the latest reading. The MIG devices of a GPU in MIG mode are listed under a line for
// the GPU, which is no device of its own.
func printGPUs(out io.Writer, n api.Node, now time.Time, loc *time.Location) error {
	procs := processesByGPU(n)
	tw := newTable(out)
	fmt.Fprintln(tw, "  GPU\tMODEL\tMEMORY\tBUS ID\tNUMA\tNVLINK\tMIG\tHEALTH\tUTIL\tMEM USED\tPOWER\tTEMP\tSHARED\tPROCESSES")
	for _, row := range gpuRows(n.GPUs) {
		g := row.gpu
		if row.migParent {
			fmt.Fprintf(tw, "  %d\t%s\t-\t%s\t%s\t-\tenabled\t%d MIG devices\t-\t-\t-\t-\t-\t-\n",
				*g.MIGParent, orDash(cleanCell(migParentModel(g), modelWidth)), orDash(cleanCell(g.PCIBusID, modelWidth)),
				formatNUMA(g.NUMANode), row.devices)
			continue
		}
		health := "ok"
		if !g.Healthy {
			health = gpuHealth(g, healthWidth)
		}
		if slices.Contains(n.HeldGPUs, g.Index) {
			health += ", held"
		}
		util, mem, power, temp := "-", "-", "-", "-"
		if s, ok := latestSample(n.Telemetry, g.Index); ok {
			util, mem = formatPct(s.UtilizationPct), formatMBOf(s.MemoryUsedMB, g.MemoryMB)
			power = strconv.FormatFloat(s.PowerW, 'f', 0, 64) + "W"
			temp = strconv.FormatFloat(s.TemperatureC, 'f', 0, 64) + "C"
			if s.UtilizationUnknown {
				// A MIG device: NVML gives neither per instance.
				util, power = "n/a", "-"
			}
		}
		var ps []string
		for _, p := range procs[g.Index] {
			ps = append(ps, describeGPUProcess(p, now, loc))
		}
		index, mig := strconv.Itoa(g.Index), cleanCell(g.MIGMode, modelWidth)
		if g.MIGParent != nil {
			index, mig = "  "+index, cleanCell(g.MIGProfile, modelWidth)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			index, orDash(cleanCell(g.Model, modelWidth)), formatMB(g.MemoryMB), orDash(cleanCell(g.PCIBusID, modelWidth)),
			formatNUMA(g.NUMANode), orDash(formatIndices(slices.Sorted(slices.Values(g.NVLinkPeers)))),
			orDash(mig), health, util, mem, power, temp, orDash(describeTenants(n, g.Index)), orDash(strings.Join(ps, "; ")))
	}
	return tw.Flush()
}

// gpuRow is a line of the GPU table: a device, or the GPU in MIG mode its MIG devices
// are of (gpu is then its first device, devices how many it has).
type gpuRow struct {
	gpu       api.GPU
	migParent bool
	devices   int
}

// gpuRows orders a node's devices for the table: GPUs by index, each GPU in MIG mode as a
// line of its own followed by its MIG devices.
func gpuRows(gpus []api.GPU) []gpuRow {
	position := func(g api.GPU) int {
		if g.MIGParent != nil {
			return *g.MIGParent
		}
		return g.Index
	}
	sorted := slices.Clone(gpus)
	slices.SortStableFunc(sorted, func(a, b api.GPU) int {
		if c := position(a) - position(b); c != 0 {
			return c
		}
		return a.Index - b.Index
	})
	var rows []gpuRow
	for i, g := range sorted {
		if g.MIGParent != nil && (i == 0 || sorted[i-1].MIGParent == nil || *sorted[i-1].MIGParent != *g.MIGParent) {
			n := 0
			for _, o := range sorted[i:] {
				if o.MIGParent != nil && *o.MIGParent == *g.MIGParent {
					n++
				}
			}
			rows = append(rows, gpuRow{gpu: g, migParent: true, devices: n})
		}
		rows = append(rows, gpuRow{gpu: g})
	}
	return rows
}

// wholeGPUs names each MIG device by the model of its GPU.
func wholeGPUs(gpus []api.GPU) []api.GPU {
	out := slices.Clone(gpus)
	for i := range out {
		out[i].Model = migParentModel(out[i])
	}
	return out
}

// migParentModel is the model of the GPU a MIG device is of: its own less " MIG
// <profile>", as the agent names it.
func migParentModel(g api.GPU) string {
	if m, ok := strings.CutSuffix(g.Model, " MIG "+g.MIGProfile); ok && g.MIGProfile != "" {
		return m
	}
	return g.Model
}

// processesByGPU gathers the processes of the node's latest reading and its leftovers
// by GPU. A leftover the reading also lists is taken once, from the leftovers, which
// say since when it has been there.
func processesByGPU(n api.Node) map[int][]api.GPUProcess {
	all := slices.Clone(n.Leftovers)
	if n.Telemetry != nil {
		for _, p := range n.Telemetry.Processes {
			if !slices.ContainsFunc(all, func(q api.GPUProcess) bool { return q.GPU == p.GPU && q.PID == p.PID }) {
				all = append(all, p)
			}
		}
	}
	by := map[int][]api.GPUProcess{}
	for _, p := range sortedProcesses(all) {
		by[p.GPU] = append(by[p.GPU], p)
	}
	return by
}

// describeGPUProcess is one process in the PROCESSES cell: "job 42: 4242 python 60G", or
// "leftover: 4242 python 12G since 11:40:00 (20m00s ago)".
func describeGPUProcess(p api.GPUProcess, now time.Time, loc *time.Location) string {
	owner := "leftover"
	if p.JobID != 0 {
		owner = "job " + strconv.FormatInt(p.JobID, 10)
	}
	d := owner + ": " + strconv.Itoa(p.PID)
	if cmd := cleanCell(p.Command, commandWidth); cmd != "" {
		d += " " + cmd
	}
	d += " " + formatMB(p.MemoryMB)
	if p.JobID == 0 && p.Since != nil {
		d += " since " + clock(*p.Since, now, loc)
	}
	return d
}

func latestSample(t *api.Telemetry, index int) (api.GPUSample, bool) {
	if t == nil {
		return api.GPUSample{}, false
	}
	i := slices.IndexFunc(t.GPUs, func(s api.GPUSample) bool { return s.Index == index })
	if i < 0 {
		return api.GPUSample{}, false
	}
	return t.GPUs[i], true
}

func formatNUMA(numa *int) string {
	if numa == nil {
		return "-"
	}
	return strconv.Itoa(*numa)
}

// describeDegraded is the Degraded line: why the node is degraded, each reason cleaned
// and cut on its own.
func describeDegraded(reasons []string) string {
	out := make([]string, len(reasons))
	for i, r := range reasons {
		out[i] = cleanCell(r, problemWidth)
	}
	return strings.Join(out, "; ")
}

// describeHeld is the Held GPUs line: the GPUs leftover processes keep from new work.
func describeHeld(held []int) string {
	if len(held) == 0 {
		return ""
	}
	return formatIndices(slices.Sorted(slices.Values(held))) + " (leftover processes hold their memory)"
}

// describeDrift is the node's versions outside its pool's wanted ranges, and whether it
// drains on its own for them: "driver 535.54 outside wanted >=550 for pool train
// (draining on its own until back in range)"; "" when it does not drift.
func describeDrift(n api.Node) string {
	if len(n.Drift) == 0 {
		return ""
	}
	parts := make([]string, len(n.Drift))
	for i, d := range n.Drift {
		parts[i] = cleanCell(d.String(), problemWidth)
	}
	s := strings.Join(parts, "; ")
	if n.DriftDrain && (n.State == api.NodeDraining || n.State == api.NodeDrained) {
		s += " (" + strings.ToLower(string(n.State)) + " on its own until back in range)"
	}
	return s
}

// describeDriver is the Driver line: "550.54.15, CUDA 12.4".
func describeDriver(inv api.Inventory) string {
	d := orDash(cleanCell(inv.DriverVersion, modelWidth))
	if cuda := cleanCell(inv.CUDAVersion, modelWidth); cuda != "" {
		d += ", CUDA " + cuda
	}
	return d
}

// describeRuntime is the Containers line: the runtime image jobs run through.
func describeRuntime(runtime string) string {
	if r := cleanCell(runtime, modelWidth); r != "" {
		return r
	}
	return "none: jobs with an image are not placed here"
}

// describeLimits is the Limits line: how the node enforces CPU and memory limits.
func describeLimits(limits string) string {
	switch l := cleanCell(limits, modelWidth); l {
	case "":
		return "-"
	case "none":
		return "none: CPU and memory limits are not enforced"
	default:
		return l
	}
}

func describeLastSeen(t, now time.Time, loc *time.Location) string {
	if t.IsZero() {
		return "never"
	}
	return formatTimeRel(&t, now, loc)
}

// describeReading is the Telemetry line: when the latest reading was taken.
func describeReading(t *api.Telemetry, now time.Time, loc *time.Location) string {
	if t == nil {
		return "none yet"
	}
	return formatTimeRel(&t.Time, now, loc)
}

// healthCheckLine is the Health check line, left out for a node without a health check.
func healthCheckLine(hc *api.HealthCheck, now time.Time, loc *time.Location) string {
	if hc == nil {
		return ""
	}
	if hc.OK {
		return describeHealthCheck(*hc, now, loc)
	}
	return "failed: " + describeHealthCheck(*hc, now, loc)
}

// joinIDs prints job IDs as 42,43; "" for none.
func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, ",")
}
