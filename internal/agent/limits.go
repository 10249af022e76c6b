package agent

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/rotahq/rota/internal/atomicfile"
)

// CPU and memory limits per attempt, and the cgroups that carry them.
//
// Under cgroup v2 the attempt's leaf (makeCgroup) carries the limits where the memory and
// cpu controllers can be enabled for it. Where they cannot (a hybrid host whose v2
// hierarchy has no controllers, or none at all), the attempt gets cgroup v1 leaves, one per
// controller, under the supervisor's own v1 cgroups. Where neither exists, nothing is
// limited and the supervisor says so once.

// Limit mechanisms, as Inventory.Limits reports them.
const (
	limitsCgroup2 = "cgroup2"
	limitsCgroup1 = "cgroup1"
	limitsNone    = "none"
)

// fileCgroups1 lists an attempt's cgroup v1 leaves, one per line, written before they are
// made so that whoever cleans up after the supervisor finds them.
const fileCgroups1 = "cgroups1"

// agentCgroupName is the leaf a v2 agent moves itself into (enterAgentCgroup2), so that
// its own cgroup holds no process and may hand the memory and cpu controllers down to the
// attempts' leaves, which are its siblings.
const agentCgroupName = "rota-agent"

// cpuPeriodUs is the CFS period CPU limits are expressed in: CPUs × period of run time
// per period.
const cpuPeriodUs = 100000

// limitsMode says how this node enforces memory limits, for the inventory: "cgroup2",
// "cgroup1" or "none". CPU limits go the same way where the node has the cpu controller.
func limitsMode() string {
	if parent, err := attemptCgroup2Parent(); err == nil && cgroup2Usable(parent, "memory") {
		return limitsCgroup2
	}
	if dir, err := ownCgroup1("memory"); err == nil && writable(dir) {
		return limitsCgroup1
	}
	return limitsNone
}

// attemptCgroup2Parent is the v2 cgroup attempts' leaves go in: the supervisor's own, or
// its parent where the agent moved itself into agentCgroupName.
func attemptCgroup2Parent() (string, error) {
	own, err := ownCgroup2()
	if err != nil {
		return "", err
	}
	if filepath.Base(own) == agentCgroupName {
		return filepath.Dir(own), nil
	}
	return own, nil
}

// enterAgentCgroup2 moves the calling process (the agent, at start) out of its v2 cgroup
// into a leaf of it named agentCgroupName, and enables the memory and cpu controllers for
// the cgroup's children: cgroup v2 hands controllers only to the children of a cgroup
// that holds no process itself. Under systemd the unit needs Delegate=yes. It does nothing
// in the root cgroup or where the node has no v2 memory controller, and is harmless to
// call again. Only the agent daemon calls it: every process of its cgroup moves.
func enterAgentCgroup2() error {
	own, err := ownCgroup2()
	if err != nil {
		return err
	}
	// The root cgroup may hold processes and hand controllers down all the same; and
	// moving every process of the machine is not the agent's to do.
	if mount, _, err := cgroup2Mount(); err != nil || filepath.Clean(own) == filepath.Clean(mount) {
		return err
	}
	if filepath.Base(own) == agentCgroupName {
		own = filepath.Dir(own)
	} else if !slices.Contains(cgroupControllers(own, "cgroup.controllers"), "memory") {
		return nil
	}
	leaf := filepath.Join(own, agentCgroupName)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create cgroup %s: %w", leaf, err)
	}
	// Every process of the cgroup moves: the agent, and the supervisors of an earlier one.
	for range 10 {
		pids, err := cgroupProcs(own)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("move process %d into %s: %w", pid, leaf, err)
			}
		}
	}
	_, err = enableControllers(own, "memory", "cpu")
	return err
}

// cgroup2Usable reports whether a leaf of parent can have controller: it is enabled for
// parent's children, or can be.
func cgroup2Usable(parent, controller string) bool {
	if slices.Contains(cgroupControllers(parent, "cgroup.subtree_control"), controller) {
		return true
	}
	enabled, _ := enableControllers(parent, controller)
	return slices.Contains(enabled, controller)
}

// enableControllers enables those of want that parent has for its children and says which
// are enabled. The kernel refuses (EBUSY) where parent holds processes itself.
func enableControllers(parent string, want ...string) ([]string, error) {
	have := cgroupControllers(parent, "cgroup.controllers")
	enabled := cgroupControllers(parent, "cgroup.subtree_control")
	var errs []error
	for _, c := range want {
		if slices.Contains(enabled, c) || !slices.Contains(have, c) {
			continue
		}
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+"+c), 0); err != nil {
			errs = append(errs, fmt.Errorf("enable the %s controller in %s: %w", c, parent, err))
			continue
		}
		enabled = append(enabled, c)
	}
	return enabled, errors.Join(errs...)
}

// cgroupControllers reads a space-separated controller list file of a v2 cgroup.
func cgroupControllers(dir, file string) []string {
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return nil
	}
	return strings.Fields(string(data))
}

// ownCgroup1 returns this process's cgroup directory in the v1 hierarchy of controller.
func ownCgroup1(controller string) (string, error) {
	mount, root, err := cgroup1Mount(controller)
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	return ownCgroup1From(string(data), controller, mount, root)
}

// ownCgroup1From finds controller's line in a /proc/PID/cgroup text and places it under
// the mount of that hierarchy.
func ownCgroup1From(procCgroup, controller, mount, root string) (string, error) {
	for line := range strings.SplitSeq(procCgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !slices.Contains(strings.Split(parts[1], ","), controller) {
			continue
		}
		rel := parts[2]
		if root != "/" {
			var ok bool
			if rel, ok = strings.CutPrefix(rel, root); !ok {
				return "", fmt.Errorf("cgroup %s is outside the mounted part %s of the %s hierarchy", parts[2], root, controller)
			}
		}
		return filepath.Join(mount, rel), nil
	}
	return "", fmt.Errorf("no %s entry in /proc/self/cgroup", controller)
}

// cgroup1Mount finds the v1 mount of controller in /proc/self/mountinfo.
func cgroup1Mount(controller string) (mount, root string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if m, r, ok := cgroup1MountLine(sc.Text(), controller); ok {
			return m, r, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", "", err
	}
	return "", "", fmt.Errorf("no cgroup v1 %s controller is mounted", controller)
}

// cgroup1MountLine parses one mountinfo line: a cgroup (v1) mount whose super options name
// controller.
func cgroup1MountLine(line, controller string) (mount, root string, ok bool) {
	fields := strings.Fields(line)
	sep := slices.Index(fields, "-")
	if sep < 5 || sep+3 >= len(fields) || fields[sep+1] != "cgroup" {
		return "", "", false
	}
	if !slices.Contains(strings.Split(fields[sep+3], ","), controller) {
		return "", "", false
	}
	return unescapeMountinfo(fields[4]), unescapeMountinfo(fields[3]), true
}

func writable(dir string) bool { return syscall.Access(dir, 2 /* W_OK */) == nil }

// limitPlan is what one attempt is limited to; zero means no limit.
type limitPlan struct {
	memoryBytes int64
	cpus        int
}

func planLimits(memoryMB int64, cpus int) limitPlan {
	p := limitPlan{cpus: max(cpus, 0)}
	if memoryMB > 0 {
		p.memoryBytes = memoryMB << 20
	}
	return p
}

// cgroup2LimitFiles is what a v2 leaf is written to limit it; only files the leaf has are
// written (memory.swap.max needs swap accounting, memory.oom.group a recent kernel).
func cgroup2LimitFiles(p limitPlan) [][2]string {
	var out [][2]string
	if p.memoryBytes > 0 {
		out = append(out,
			[2]string{"memory.max", strconv.FormatInt(p.memoryBytes, 10)},
			[2]string{"memory.swap.max", "0"},
			// An OOM kill ends the whole attempt, not one process of it at random.
			[2]string{"memory.oom.group", "1"},
		)
	}
	if p.cpus > 0 {
		out = append(out, [2]string{"cpu.max", fmt.Sprintf("%d %d", p.cpus*cpuPeriodUs, cpuPeriodUs)})
	}
	return out
}

// cgroup1LimitFiles is what the v1 leaves are written, by controller, in order: the
// memory+swap limit may not be below the memory limit, so that comes first.
func cgroup1LimitFiles(p limitPlan) map[string][][2]string {
	out := map[string][][2]string{}
	if p.memoryBytes > 0 {
		b := strconv.FormatInt(p.memoryBytes, 10)
		out["memory"] = [][2]string{{"memory.limit_in_bytes", b}, {"memory.memsw.limit_in_bytes", b}}
	}
	if p.cpus > 0 {
		out["cpu"] = [][2]string{{"cpu.cfs_period_us", strconv.Itoa(cpuPeriodUs)}, {"cpu.cfs_quota_us", strconv.Itoa(p.cpus * cpuPeriodUs)}}
	}
	return out
}

// writeLimitFiles writes files into dir in order. optional files (those a kernel may lack)
// that do not exist are skipped.
func writeLimitFiles(dir string, files [][2]string, optional ...string) error {
	for _, f := range files {
		path := filepath.Join(dir, f[0])
		if slices.Contains(optional, f[0]) && !exists(path) {
			continue
		}
		if err := os.WriteFile(path, []byte(f[1]), 0); err != nil {
			return fmt.Errorf("set %s to %s: %w", path, f[1], err)
		}
	}
	return nil
}

// memoryEnd is what the attempt's memory cgroup says at its end.
type memoryEnd struct {
	known     bool
	peakBytes int64
	// oomKills counts processes the kernel killed for want of memory in the cgroup;
	// -1 where the kernel does not count them.
	oomKills int64
	// failcnt counts allocations refused at the limit (v1 only).
	failcnt int64
}

// readMemoryEnd reads a v2 leaf (v1 false) or a v1 memory leaf.
func readMemoryEnd(dir string, v1 bool) memoryEnd {
	m := memoryEnd{oomKills: -1}
	if v1 {
		if n, ok := readInt64(filepath.Join(dir, "memory.max_usage_in_bytes")); ok {
			m.known, m.peakBytes = true, n
		}
		if n, ok := keyedValue(filepath.Join(dir, "memory.oom_control"), "oom_kill"); ok {
			m.oomKills = n
		}
		m.failcnt, _ = readInt64(filepath.Join(dir, "memory.failcnt"))
		return m
	}
	if n, ok := readInt64(filepath.Join(dir, "memory.peak")); ok {
		m.known, m.peakBytes = true, n
	}
	if n, ok := keyedValue(filepath.Join(dir, "memory.events"), "oom_kill"); ok {
		m.oomKills = n
	}
	return m
}

// readInt64 reads a file holding one number ("max" is not one).
func readInt64(path string) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return n, err == nil
}

// keyedValue reads the value of key in a "key value" per line file (memory.events,
// memory.oom_control, cpu.stat).
func keyedValue(path, key string) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == key {
			n, err := strconv.ParseInt(f[1], 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// mb rounds bytes up to whole MB, so a peak at the limit reads as the limit.
func mb(bytes int64) int64 { return (bytes + 1<<20 - 1) >> 20 }

// applyLimits limits the attempt: in its v2 leaf where the controllers can be had, else in
// v1 leaves it makes (always one for memory, to measure the peak and see OOM kills), and
// says what it enforced. A container task's limits are the runtime's (--memory, --cpus):
// its cgroups here hold only the runtime's client, which must not be held to them.
func (s *supervisor) applyLimits(leaf string, spec jobSpec) string {
	plan := planLimits(s.task.MemoryMB, s.task.CPUs)
	if spec.container != "" {
		plan = limitPlan{}
	}
	memBy, cpuBy := "", ""
	if leaf != "" {
		enabled, err := enableControllers(filepath.Dir(leaf), "memory", "cpu")
		if err != nil {
			s.logger.Debug("cgroup v2 controllers", "err", err)
		}
		for _, f := range cgroup2LimitFiles(plan) {
			ctrl, _, _ := strings.Cut(f[0], ".")
			if !slices.Contains(enabled, ctrl) {
				continue
			}
			if err := writeLimitFiles(leaf, [][2]string{f}, "memory.swap.max", "memory.oom.group"); err != nil {
				s.logger.Warn("cgroup v2 limit not set", "err", err)
				enabled = slices.DeleteFunc(enabled, func(c string) bool { return c == ctrl })
			}
		}
		if slices.Contains(enabled, "memory") {
			memBy = limitsCgroup2
			s.memCgroup, s.memV1 = leaf, false
		}
		if slices.Contains(enabled, "cpu") {
			cpuBy = limitsCgroup2
		}
	}
	want := []string{}
	if memBy == "" {
		want = append(want, "memory")
	}
	if cpuBy == "" && plan.cpus > 0 {
		want = append(want, "cpu")
	}
	if leaf == "" {
		want = append(want, "cpuacct") // CPU time, which a v2 leaf counts by itself
	}
	gpus, gpuNote := s.gpuDevices(spec)
	if len(gpus.present) > 0 {
		want = append(want, "devices")
	}
	name := cgroupLeafName(s.meta.ClusterID, s.task.JobID, s.task.Attempt, s.dir)
	made := s.makeCgroups1(name, want)
	files := cgroup1LimitFiles(plan)
	for ctrl, dir := range made {
		if ctrl == "memory" {
			// Kept without a limit too: it measures the peak and sees OOM kills.
			s.memCgroup, s.memV1 = dir, true
		}
		if err := writeLimitFiles(dir, files[ctrl], "memory.memsw.limit_in_bytes"); err != nil {
			s.logger.Warn("cgroup v1 limit not set", "err", err)
			continue
		}
		switch ctrl {
		case "memory":
			memBy = limitsCgroup1
		case "cpu":
			cpuBy = limitsCgroup1
		case "devices":
			if err := writeDeviceRules(dir, gpus); err != nil {
				gpuNote = "GPU device access not restricted: " + err.Error()
			} else {
				gpuNote = "GPU device access restricted to the job's GPUs (cgroup1 devices)"
			}
		}
	}
	return limitsNote(s.task.MemoryMB, s.task.CPUs, memBy, cpuBy, spec, gpuNote)
}

// limitsNote says in one line what was enforced, for status.json and the logs.
func limitsNote(memoryMB int64, cpus int, memBy, cpuBy string, spec jobSpec, gpuNote string) string {
	var parts []string
	switch {
	case memoryMB <= 0:
	case spec.container != "":
		parts = append(parts, fmt.Sprintf("memory limit of %d MB enforced by %s", memoryMB, spec.runtime.Name))
	case memBy != "":
		parts = append(parts, fmt.Sprintf("memory limit of %d MB enforced (%s)", memoryMB, memBy))
	default:
		parts = append(parts, fmt.Sprintf("no cgroup memory controller: memory limit of %d MB not enforced", memoryMB))
	}
	switch {
	case cpus <= 0:
	case spec.container != "":
		parts = append(parts, fmt.Sprintf("limit of %d CPUs enforced by %s", cpus, spec.runtime.Name))
	case cpuBy != "":
		parts = append(parts, fmt.Sprintf("limit of %d CPUs enforced (%s)", cpus, cpuBy))
	default:
		parts = append(parts, fmt.Sprintf("no cgroup cpu controller: limit of %d CPUs not enforced", cpus))
	}
	if gpuNote != "" {
		parts = append(parts, gpuNote)
	}
	return strings.Join(parts, "; ")
}

// makeCgroups1 makes the attempt's v1 leaves, one per controller the node mounts, under
// the supervisor's own v1 cgroups, and records them first. Co-mounted controllers
// (cpu,cpuacct) share one leaf.
func (s *supervisor) makeCgroups1(name string, controllers []string) map[string]string {
	if s.meta.NoCgroup || len(controllers) == 0 {
		return nil
	}
	dirs := map[string]string{}
	for _, c := range controllers {
		own, err := ownCgroup1(c)
		if err != nil {
			s.logger.Debug("no cgroup v1 controller", "controller", c, "err", err)
			continue
		}
		dirs[c] = filepath.Join(own, name)
	}
	var list []string
	for _, d := range dirs {
		if !slices.Contains(list, d) {
			list = append(list, d)
		}
	}
	if len(list) == 0 {
		return nil
	}
	slices.Sort(list)
	if err := atomicfile.Write(filepath.Join(s.dir, fileCgroups1), []byte(strings.Join(list, "\n")+"\n"), 0o644, true); err != nil {
		s.logger.Warn("record the cgroup v1 leaves", "err", err)
		return nil
	}
	made := map[string]string{}
	for c, d := range dirs {
		err := os.Mkdir(d, 0o755)
		if errors.Is(err, os.ErrExist) {
			// Left by a supervisor of this very directory that died; it must be empty.
			cgroupSignal(d, syscall.SIGKILL)
			if err = removeCgroup(d); err == nil {
				err = os.Mkdir(d, 0o755)
			}
		}
		if err != nil && !errors.Is(err, os.ErrExist) {
			s.logger.Warn("cannot create a cgroup v1 leaf", "controller", c, "err", err)
			continue
		}
		made[c] = d
	}
	for _, d := range made {
		if !slices.Contains(s.cgroups1, d) {
			s.cgroups1 = append(s.cgroups1, d)
		}
	}
	slices.Sort(s.cgroups1)
	return made
}

// enterCgroups1 moves the supervisor into the attempt's v1 leaves so that the job, forked
// next, starts in them before it runs a single instruction (cgroup v1 has no
// CLONE_INTO_CGROUP). The returned function moves the supervisor back; charges made
// meanwhile stay with the leaves, and the OOM killer of a leaf picks only its members.
func (s *supervisor) enterCgroups1() (leave func()) {
	self := []byte(strconv.Itoa(os.Getpid()))
	var back []string
	for _, leaf := range slices.Clone(s.cgroups1) {
		if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), self, 0); err != nil {
			s.logger.Warn("cannot enter a cgroup v1 leaf; the job starts outside it", "cgroup", leaf, "err", err)
			_ = removeCgroup(leaf)
			s.cgroups1 = slices.DeleteFunc(s.cgroups1, func(d string) bool { return d == leaf })
			if s.memCgroup == leaf {
				s.memCgroup = ""
			}
			continue
		}
		back = append(back, filepath.Dir(leaf))
	}
	return func() {
		for _, dir := range back {
			if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), self, 0); err != nil {
				s.logger.Error("cannot leave the job's cgroup v1 leaf", "cgroup", dir, "err", err)
			}
		}
	}
}

// removeCgroups1 removes the attempt's emptied v1 leaves.
func removeCgroups1(leaves []string) error {
	var errs []error
	for _, d := range leaves {
		errs = append(errs, removeCgroup(d))
	}
	return errors.Join(errs...)
}

// readCgroups1 reads the leaves a supervisor recorded.
func readCgroups1(dir string) []string {
	data, err := os.ReadFile(filepath.Join(dir, fileCgroups1))
	if err != nil {
		return nil
	}
	return strings.Fields(string(data))
}

// The NVIDIA character devices: /dev/nvidiaN has major 195 and minor N; nvidiactl and
// nvidia-modeset are 195:255 and 195:254; nvidia-uvm has a major of its own.
const (
	nvidiaMajor        = 195
	nvidiaCtlMinor     = 255
	nvidiaModesetMinor = 254
)

// gpuDevices is what restricting a job to its GPUs needs to know of the node.
type gpuDevices struct {
	// present are the minors of the node's /dev/nvidiaN; empty on a node without
	// NVIDIA devices, where there is nothing to restrict.
	present []int
	// job are the minors of the task's GPUs.
	job []int
	// uvmMajor is nvidia-uvm's major, 0 where the module is not loaded.
	uvmMajor int
}

// gpuDevices finds the task's GPU device minors, and says what the job's device access is
// where no v1 devices controller will restrict it.
func (s *supervisor) gpuDevices(spec jobSpec) (gpuDevices, string) {
	if spec.container != "" {
		return gpuDevices{}, "" // the runtime gives the container its GPUs only
	}
	g := findGPUDevices("/dev", "/proc", s.task.GPUIndices, s.task.GPUIDs)
	if len(g.present) == 0 {
		return g, ""
	}
	return g, "GPU device access not restricted (no cgroup v1 devices controller, and cgroup v2 would need an eBPF device program rota does not load): CUDA_VISIBLE_DEVICES names the job's GPUs"
}

// findGPUDevices reads the NVIDIA device nodes under devDir and maps the task's GPUs to
// their minors by UUID through procDir/driver/nvidia/gpus/*/information ("GPU UUID",
// "Device Minor"); a GPU not found there is taken to have its index as minor, and a MIG
// device its GPU's index.
func findGPUDevices(devDir, procDir string, indices []int, uuids []string) gpuDevices {
	var g gpuDevices
	ents, _ := os.ReadDir(devDir)
	for _, e := range ents {
		n, ok := strings.CutPrefix(e.Name(), "nvidia")
		if m, err := strconv.Atoi(n); ok && err == nil && m >= 0 && m < nvidiaModesetMinor {
			g.present = append(g.present, m)
		}
	}
	slices.Sort(g.present)
	if len(g.present) == 0 {
		return g
	}
	minors := map[string]int{}
	infos, _ := filepath.Glob(filepath.Join(procDir, "driver", "nvidia", "gpus", "*", "information"))
	for _, path := range infos {
		if uuid, minor, ok := parseGPUInformation(path); ok {
			minors[uuid] = minor
		}
	}
	for i, idx := range indices {
		minor := idx
		if i < len(uuids) {
			if m, ok := minors[uuids[i]]; ok {
				minor = m
			}
			// A MIG device is reached through its GPU's device node (and the
			// nvidia-caps nodes, which rota leaves alone).
			if p, ok := migParentOf(idx); ok && isMIGUUID(uuids[i]) {
				minor = p
			}
		}
		g.job = append(g.job, minor)
	}
	g.uvmMajor = charMajor(filepath.Join(procDir, "devices"), "nvidia-uvm")
	return g
}

// parseGPUInformation reads a GPU's UUID and device minor from the driver's information
// file.
func parseGPUInformation(path string) (uuid string, minor int, ok bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", 0, false
	}
	minor = -1
	for line := range strings.SplitSeq(string(data), "\n") {
		k, v, found := strings.Cut(line, ":")
		if !found {
			continue
		}
		switch strings.TrimSpace(k) {
		case "GPU UUID":
			uuid = strings.TrimSpace(v)
		case "Device Minor":
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				minor = n
			}
		}
	}
	return uuid, minor, uuid != "" && minor >= 0
}

// charMajor finds a character device's major in /proc/devices; 0 where it is not listed.
func charMajor(path, name string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	inChar := false
	for line := range strings.SplitSeq(string(data), "\n") {
		switch strings.TrimSpace(line) {
		case "Character devices:":
			inChar = true
			continue
		case "Block devices:":
			inChar = false
		}
		f := strings.Fields(line)
		if inChar && len(f) == 2 && f[1] == name {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return 0
}

// deviceRules are the writes to a v1 devices leaf that keep the job to its GPUs, as
// (file, rule). A leaf that allows everything by default (devices.list "a *:* rwm") takes
// deny exceptions only: an allow there merely removes an identical deny, so the other
// GPUs are denied one by one. A leaf that denies by default (the node itself runs in a
// restricted container) loses the NVIDIA wildcard and gets back the job's GPUs, the
// control devices and nvidia-uvm.
func deviceRules(g gpuDevices, defaultAllow bool) [][2]string {
	var out [][2]string
	if !defaultAllow {
		out = append(out, [2]string{"devices.deny", fmt.Sprintf("c %d:* rwm", nvidiaMajor)})
	}
	for _, m := range g.present {
		if !slices.Contains(g.job, m) {
			out = append(out, [2]string{"devices.deny", fmt.Sprintf("c %d:%d rwm", nvidiaMajor, m)})
		}
	}
	if defaultAllow {
		return out
	}
	for _, m := range g.job {
		out = append(out, [2]string{"devices.allow", fmt.Sprintf("c %d:%d rwm", nvidiaMajor, m)})
	}
	out = append(out,
		[2]string{"devices.allow", fmt.Sprintf("c %d:%d rwm", nvidiaMajor, nvidiaCtlMinor)},
		[2]string{"devices.allow", fmt.Sprintf("c %d:%d rwm", nvidiaMajor, nvidiaModesetMinor)})
	if g.uvmMajor > 0 {
		out = append(out, [2]string{"devices.allow", fmt.Sprintf("c %d:* rwm", g.uvmMajor)})
	}
	return out
}

// writeDeviceRules restricts a v1 devices leaf to the job's GPUs.
func writeDeviceRules(dir string, g gpuDevices) error {
	list, err := os.ReadFile(filepath.Join(dir, "devices.list"))
	if err != nil {
		return err
	}
	defaultAllow := strings.TrimSpace(string(list)) == "a *:* rwm"
	for _, r := range deviceRules(g, defaultAllow) {
		if err := os.WriteFile(filepath.Join(dir, r[0]), []byte(r[1]), 0); err != nil {
			return fmt.Errorf("%s %q: %w", r[0], r[1], err)
		}
	}
	return nil
}

// EnterDelegatedCgroup readies a cgroup v2 the agent was delegated (systemd's Delegate=yes)
// for per-attempt CPU and memory limits: see enterAgentCgroup2. `rota agent` calls it when
// systemd started it; elsewhere (a terminal, `rota up`) the agent leaves its cgroup alone,
// since every process in it would move.
func EnterDelegatedCgroup() error { return enterAgentCgroup2() }
