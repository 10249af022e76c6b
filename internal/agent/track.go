package agent

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Finding and ending an attempt's processes: its cgroup v2 leaf where the node has one,
// its process group, the supervisor's descendants, and, for an agent cleaning up after a
// dead supervisor, the processes whose environment names the attempt.

// ownCgroup2 returns the directory of this process's cgroup in the cgroup v2 hierarchy:
// /sys/fs/cgroup/... on a unified host, /sys/fs/cgroup/unified/... in hybrid mode.
func ownCgroup2() (string, error) {
	mount, root, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		path, ok := strings.CutPrefix(line, "0::")
		if !ok {
			continue
		}
		// The mount may show only part of the hierarchy (a container's namespace).
		rel := path
		if root != "/" {
			if rel, ok = strings.CutPrefix(path, root); !ok {
				return "", fmt.Errorf("cgroup %s is outside the mounted part %s of the cgroup2 hierarchy", path, root)
			}
		}
		return filepath.Join(mount, rel), nil
	}
	return "", errors.New("no cgroup v2 entry in /proc/self/cgroup")
}

// cgroup2Mount finds the cgroup2 mount in /proc/self/mountinfo: its mount point and the
// hierarchy path it shows.
func cgroup2Mount() (mount, root string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 5 || sep+1 >= len(fields) || fields[sep+1] != "cgroup2" {
			continue
		}
		return unescapeMountinfo(fields[4]), unescapeMountinfo(fields[3]), nil
	}
	if err := sc.Err(); err != nil {
		return "", "", err
	}
	return "", "", errors.New("no cgroup2 file system is mounted")
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of mountinfo paths.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupLeafName names an attempt's cgroup from its cluster, job and attempt, plus a hash
// of its directory: two agents on one machine (two data dirs) may run ranks of one attempt.
func cgroupLeafName(cluster string, job int64, attempt int, dir string) string {
	c := []byte(cluster)
	for i, ch := range c {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_') {
			c[i] = '_'
		}
	}
	if len(c) > 32 {
		c = c[:32]
	}
	sum := sha256.Sum256([]byte(dir))
	return fmt.Sprintf("rota-%s-j%d-a%d-%s", c, job, attempt, hex.EncodeToString(sum[:4]))
}

// cgroupProcs lists the processes in a cgroup.
func cgroupProcs(dir string) ([]int, error) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for f := range strings.FieldsSeq(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// cgroupSignal sends sig to every process of a cgroup; SIGKILL goes through cgroup.kill
// where the kernel has it, which also catches processes forked meanwhile.
func cgroupSignal(dir string, sig syscall.Signal) {
	if sig == syscall.SIGKILL {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err == nil {
			return
		}
	}
	pids, _ := cgroupProcs(dir)
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
}

// removeCgroup removes an emptied leaf; the kernel may take a moment after the last
// process is reaped.
func removeCgroup(dir string) error {
	var err error
	for range 50 {
		err = syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", dir, err)
}

// procInfo is a process as /proc/PID/stat shows it.
type procInfo struct {
	pid, ppid, pgid int
	zombie          bool
}

func readProcStat(pid int) (procInfo, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	// The command name may hold spaces and parentheses; the fields follow the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procInfo{}, false
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 3 {
		return procInfo{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	pgid, _ := strconv.Atoi(f[2])
	return procInfo{pid: pid, ppid: ppid, pgid: pgid, zombie: f[0] == "Z" || f[0] == "X"}, true
}

// listProcs reads every process of the machine (of this PID namespace).
func listProcs() []procInfo {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	out := make([]procInfo, 0, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProcStat(pid); ok {
			out = append(out, p)
		}
	}
	return out
}

// descendants lists the live processes below root.
func descendants(root int) []int {
	children := map[int][]int{}
	for _, p := range listProcs() {
		if !p.zombie {
			children[p.ppid] = append(children[p.ppid], p.pid)
		}
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// processAlive reports whether pid is a live process; a zombie is dead.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	p, ok := readProcStat(pid)
	return ok && !p.zombie
}

// cmdlineOf returns the arguments a process was started with.
func cmdlineOf(pid int) []string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(data) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(data), "\x00"), "\x00")
}

// isSupervisorOf reports whether pid is a live supervisor of the attempt in dir: it runs
// as the agent's account and its arguments say "supervise" and name dir, so a recycled
// pid is never taken for it.
func isSupervisorOf(pid int, dir string) bool {
	if !processAlive(pid) {
		return false
	}
	fi, err := os.Stat("/proc/" + strconv.Itoa(pid))
	if err != nil {
		return false
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		return false
	}
	args := cmdlineOf(pid)
	return slices.Contains(args, "supervise") && slices.Contains(args, dir)
}

// findSupervisor looks for the attempt's supervisor among all processes, for when its pid
// file is not there (yet).
func findSupervisor(dir string) (int, bool) {
	for _, p := range listProcs() {
		if !p.zombie && isSupervisorOf(p.pid, dir) {
			return p.pid, true
		}
	}
	return 0, false
}

// environMatches reports whether the process's environment has every one of want.
func environMatches(pid int, want []string) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	vars := strings.Split(string(data), "\x00")
	for _, w := range want {
		if !slices.Contains(vars, w) {
			return false
		}
	}
	return true
}

// processesWithEnv lists the live processes whose environment has every one of want.
func processesWithEnv(want []string) []int {
	self := os.Getpid()
	var out []int
	for _, p := range listProcs() {
		if !p.zombie && p.pid != self && environMatches(p.pid, want) {
			out = append(out, p.pid)
		}
	}
	return out
}
