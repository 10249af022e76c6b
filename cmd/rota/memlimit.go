package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/rotahq/rota/internal/cli"
)

// cgroupShare is the part of a cgroup's memory limit that --memory-limit=auto gives the
// Go heap, stacks and runtime: the rest is for what the runtime does not count (SQLite's
// page cache, the binary's text) and for the collector's lag, so that the kernel's limit,
// which kills, is not reached before the soft one, which collects.
const cgroupShare = 0.9

// minMemoryLimit is the smallest limit --memory-limit takes as a size: below it the server
// would spend its time collecting, which is a typo's doing, not an operator's wish.
const minMemoryLimit = 64 << 20

// memoryLimit is the soft memory limit the server asks of the Go runtime, in bytes (0:
// none), and where it comes from, from --memory-limit:
//   - "auto": 90% of the limit of the cgroup the server runs in (systemd's MemoryMax, a
//     container's memory limit), and none where the cgroup has none;
//   - a size such as 900M or 1.5G (megabytes without a unit): that;
//   - "off": none.
//
// GOMEMLIMIT in the environment is Go's own setting, which the runtime has applied before
// main: it wins over all three, and memoryLimit returns 0 with env as the source. cgroup
// reads the cgroup's limit (memlimit.FromCgroup outside tests).
func memoryLimit(flag, env string, cgroup func() (uint64, error)) (limit int64, from string, err error) {
	if env != "" {
		return 0, "GOMEMLIMIT=" + env + " in the environment, which wins over --memory-limit", nil
	}
	switch v := strings.TrimSpace(flag); strings.ToLower(v) {
	case "off":
		return 0, "--memory-limit off", nil
	case "auto", "":
		cgMax, err := cgroup()
		switch {
		case errors.Is(err, memlimit.ErrNoLimit):
			return 0, "--memory-limit auto: the server's cgroup has no memory limit", nil
		case err != nil:
			// Not in a cgroup the kernel lets it read (not Linux, cgroups not mounted):
			// nothing limits the server, so nothing needs to keep it under a limit.
			return 0, "--memory-limit auto: no cgroup memory limit could be read (" + err.Error() + ")", nil
		}
		limit = int64(float64(cgMax) * cgroupShare)
		return limit, fmt.Sprintf("--memory-limit auto: %.0f%% of the cgroup's memory limit of %s", cgroupShare*100, mib(int64(cgMax))), nil
	default:
		mb, err := cli.ParseSize(v)
		if err != nil {
			return 0, "", fmt.Errorf("--memory-limit: %q is not auto, off or a size such as 900M or 1.5G", flag)
		}
		if mb > 1<<40 {
			return 0, "", fmt.Errorf("--memory-limit: %q is larger than any machine's memory", flag)
		}
		if mb<<20 < minMemoryLimit {
			return 0, "", fmt.Errorf("--memory-limit: %s is below the smallest limit, %s; off sets none", mib(mb<<20), mib(minMemoryLimit))
		}
		return mb << 20, "--memory-limit " + v, nil
	}
}

// mib renders bytes in MiB, the unit of the limits above.
func mib(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }
