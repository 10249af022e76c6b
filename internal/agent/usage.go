package agent

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// What an attempt uses of the node, for telemetry: read from its cgroups where it has
// them, else summed over its processes. Both methods may be called from any goroutine
// while the runner follows the attempt.

// clockTicks is USER_HZ, the unit of /proc/PID/stat's CPU times: 100 on every Linux ABI.
const clockTicks = 100

// startedJob returns job.json as the runner last read it, and whether the job has started
// and not ended.
func (a *attempt) startedJob() (jobRecord, bool) {
	if isClosed(a.exited) {
		return jobRecord{}, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.job, a.job.PID != 0
}

// pids lists every live process of the attempt: those of its cgroup where it has one, else
// its supervisor's descendants. Empty before the job starts and after it ends. A container
// task's processes run under the runtime, not here: only its client is listed.
func (a *attempt) pids() []int {
	job, ok := a.startedJob()
	if !ok {
		return nil
	}
	return a.pidsOf(job)
}

func (a *attempt) pidsOf(job jobRecord) []int {
	leaves := job.Cgroups1
	if job.Cgroup != "" {
		leaves = append([]string{job.Cgroup}, leaves...)
	}
	// Any one of them holds every process: the job started in all of them.
	for _, leaf := range leaves {
		if pids, err := cgroupProcs(leaf); err == nil {
			return pids
		}
	}
	sup, ok := readInt(filepath.Join(a.dir, fileSupervisorPID))
	if !ok || !isSupervisorOf(sup, a.dir) {
		return nil
	}
	return descendants(sup)
}

// resourceUse is the attempt's CPU time so far, in seconds, and its memory now, in MB: the
// cgroup's figures (v2 cpu.stat and memory.current, v1 cpuacct.usage and
// memory.usage_in_bytes) where it has them, else the sum over its live processes of their
// CPU time and resident memory. That sum loses the CPU time of processes that have
// exited, so a caller taking rates should treat a decrease as no use. ok is false before
// the job starts, after it ends, and when nothing can be read.
func (a *attempt) resourceUse() (cpuSeconds float64, memoryMB int64, ok bool) {
	job, started := a.startedJob()
	if !started {
		return 0, 0, false
	}
	cpu, cpuOK := cgroupCPU(job)
	mem, memOK := cgroupMemory(job)
	if cpuOK && memOK {
		return cpu, mb(mem), true
	}
	pids := a.pidsOf(job)
	if len(pids) == 0 {
		return 0, 0, false
	}
	procCPU, procMem := procUse(pids)
	if !cpuOK {
		cpu = procCPU
	}
	if !memOK {
		mem = procMem
	}
	return cpu, mb(mem), true
}

// cgroupCPU reads the attempt's CPU time from its v2 leaf, or its v1 cpuacct leaf.
func cgroupCPU(job jobRecord) (float64, bool) {
	if job.Cgroup != "" {
		if us, ok := keyedValue(filepath.Join(job.Cgroup, "cpu.stat"), "usage_usec"); ok {
			return float64(us) / 1e6, true
		}
	}
	for _, leaf := range job.Cgroups1 {
		if ns, ok := readInt64(filepath.Join(leaf, "cpuacct.usage")); ok {
			return float64(ns) / 1e9, true
		}
	}
	return 0, false
}

// cgroupMemory reads the attempt's memory in bytes from its v2 leaf (with the memory
// controller), or its v1 memory leaf.
func cgroupMemory(job jobRecord) (int64, bool) {
	if job.Cgroup != "" {
		if b, ok := readInt64(filepath.Join(job.Cgroup, "memory.current")); ok {
			return b, true
		}
	}
	for _, leaf := range job.Cgroups1 {
		if b, ok := readInt64(filepath.Join(leaf, "memory.usage_in_bytes")); ok {
			return b, true
		}
	}
	return 0, false
}

// procUse sums the CPU time (seconds) and resident memory (bytes) of processes.
func procUse(pids []int) (cpuSeconds float64, rssBytes int64) {
	page := int64(os.Getpagesize())
	var ticks int64
	for _, pid := range pids {
		dir := "/proc/" + strconv.Itoa(pid)
		if data, err := os.ReadFile(dir + "/stat"); err == nil {
			// Fields after the command name: state is the 3rd of stat, utime the 14th.
			if i := bytes.LastIndexByte(data, ')'); i >= 0 {
				f := strings.Fields(string(data[i+1:]))
				if len(f) > 12 {
					u, _ := strconv.ParseInt(f[11], 10, 64)
					s, _ := strconv.ParseInt(f[12], 10, 64)
					ticks += u + s
				}
			}
		}
		if data, err := os.ReadFile(dir + "/statm"); err == nil {
			if f := strings.Fields(string(data)); len(f) > 1 {
				n, _ := strconv.ParseInt(f[1], 10, 64)
				rssBytes += n * page
			}
		}
	}
	return float64(ticks) / clockTicks, rssBytes
}
