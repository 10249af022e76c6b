package agent

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// A task that shares a GPU (api.Task.GPUShare, GPUMemoryLimitMB) is told its share and
// slice, and held to the slice: what CUDA offers to enforce is used where it runs (MPS),
// and everywhere the agent watches each task's GPU memory and stops a task that holds
// more than its slice for longer than the grace, with reason gpu_memory_exceeded.
// Compute is shared by the GPU's time slicing, or MPS's thread limit where MPS runs; it
// is advised, not enforced, without MPS.

// The variables a task that shares a GPU gets.
const (
	// EnvGPUShare is the share of the GPU the task may use, e.g. 0.25.
	EnvGPUShare = "ROTA_GPU_SHARE"
	// EnvGPUMemLimit is the GPU memory the task may hold, in MiB.
	EnvGPUMemLimit = "ROTA_GPU_MEM_LIMIT"
	// The MPS client's limits, set where an MPS control daemon runs.
	envMPSMemLimit = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	envMPSThreads  = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	envMPSPipeDir  = "CUDA_MPS_PIPE_DIRECTORY"
)

const (
	defaultGPUMemoryGrace = 10 * time.Second
	defaultMPSPipeDir     = "/tmp/nvidia-mps"
)

// mpsPipeDir is the MPS pipe directory an agent looks in: the configured one, else the
// one MPS itself would use.
func mpsPipeDir(configured string) string {
	if configured != "" {
		return configured
	}
	if d := os.Getenv(envMPSPipeDir); d != "" {
		return d
	}
	return defaultMPSPipeDir
}

// mpsRunning reports whether an MPS control daemon listens in dir: its control pipe is
// there.
func mpsRunning(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, "control"))
	return err == nil && fi.Mode()&os.ModeNamedPipe != 0
}

// shareEnv adds a shared task's share and slice to its variables, and MPS's limits
// where MPS runs. The task sees one GPU, which CUDA numbers 0.
func shareEnv(t api.Task, mps bool, env map[string]string) {
	if t.GPUShare <= 0 && t.GPUMemoryLimitMB <= 0 {
		return
	}
	if t.GPUShare > 0 {
		env[EnvGPUShare] = strconv.FormatFloat(t.GPUShare, 'f', -1, 64)
	}
	if t.GPUMemoryLimitMB > 0 {
		env[EnvGPUMemLimit] = strconv.FormatInt(t.GPUMemoryLimitMB, 10)
	}
	if !mps {
		return
	}
	if t.GPUMemoryLimitMB > 0 {
		env[envMPSMemLimit] = fmt.Sprintf("0=%dM", t.GPUMemoryLimitMB)
	}
	if t.GPUShare > 0 {
		env[envMPSThreads] = strconv.Itoa(max(1, int(math.Round(t.GPUShare*100))))
	}
}

// enforceSlices stops the tasks that have held more GPU memory than their slice for
// longer than the grace. A task back under its slice starts its grace afresh.
func (a *Agent) enforceSlices(now time.Time, live []*liveTask, gpuMem map[*liveTask]int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, lt := range live {
		if lt.gpuMemLimit <= 0 || !lt.current || lt.status.State != api.StateRunning || lt.att.stopReason != "" {
			continue
		}
		used := gpuMem[lt]
		if used <= lt.gpuMemLimit {
			delete(a.mon.over, lt.key)
			continue
		}
		since, seen := a.mon.over[lt.key]
		if !seen {
			a.mon.over[lt.key] = now
			appendToLog(lt.att, fmt.Sprintf("rota: the job holds %d MiB of GPU memory, above its %d MiB slice; it is stopped if it still does in %s",
				used, lt.gpuMemLimit, a.mon.memGrace))
			lt.att.logger.Warn("task above its GPU memory slice", "used_mb", used, "slice_mb", lt.gpuMemLimit)
			continue
		}
		if now.Sub(since) < a.mon.memGrace {
			continue
		}
		appendToLog(lt.att, fmt.Sprintf("rota: stopping the job: it held %d MiB of GPU memory, above its %d MiB slice, for %s",
			used, lt.gpuMemLimit, now.Sub(since).Round(time.Second)))
		lt.att.stop(api.ReasonGPUMemoryExceeded)
		delete(a.mon.over, lt.key)
	}
}
