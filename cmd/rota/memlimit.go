package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

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
// reads the cgroup's limit (memlimit.FromCgroup outside tests). follow says the limit is
// auto's from a cgroup that could be read, whose limit may change while the server runs
// (followCgroupLimit).
func memoryLimit(flag, env string, cgroup func() (uint64, error)) (limit int64, from string, follow bool, err error) {
	if env != "" {
		return 0, "GOMEMLIMIT=" + env + " in the environment, which wins over --memory-limit", false, nil
	}
	switch v := strings.TrimSpace(flag); strings.ToLower(v) {
	case "off":
		return 0, "--memory-limit off", false, nil
	case "auto", "":
		limit, from, readable := autoLimit(cgroup)
		return limit, from, readable, nil
	default:
		mb, err := cli.ParseSize(v)
		if err != nil {
			return 0, "", false, fmt.Errorf("--memory-limit: %q is not auto, off or a size such as 900M or 1.5G", flag)
		}
		if mb > 1<<40 {
			return 0, "", false, fmt.Errorf("--memory-limit: %q is larger than any machine's memory", flag)
		}
		if mb<<20 < minMemoryLimit {
			return 0, "", false, fmt.Errorf("--memory-limit: %s is below the smallest limit, %s; off sets none", mib(mb<<20), mib(minMemoryLimit))
		}
		return mb << 20, "--memory-limit " + v, false, nil
	}
}

// autoLimit is --memory-limit auto's limit (0: none) and where it comes from; readable
// says whether the cgroup could be read, its having no limit included.
func autoLimit(cgroup func() (uint64, error)) (limit int64, from string, readable bool) {
	cgMax, err := cgroup()
	switch {
	case errors.Is(err, memlimit.ErrNoLimit):
		return 0, "--memory-limit auto: the server's cgroup has no memory limit", true
	case err != nil:
		// Not in a cgroup the kernel lets it read (not Linux, cgroups not mounted):
		// nothing limits the server, so nothing needs to keep it under a limit.
		return 0, "--memory-limit auto: no cgroup memory limit could be read (" + err.Error() + ")", false
	}
	limit = int64(float64(cgMax) * cgroupShare)
	return limit, fmt.Sprintf("--memory-limit auto: %.0f%% of the cgroup's memory limit of %s", cgroupShare*100, mib(int64(cgMax))), true
}

// followCgroupLimit reads the cgroup's memory limit again every interval until ctx ends,
// and moves the runtime's soft limit with it (refreshLimit): an operator who changes the
// MemoryMax of a running server (systemctl set-property) need not restart it for the
// server to keep under the new one, or to use it.
func followCgroupLimit(ctx context.Context, every time.Duration, cgroup func() (uint64, error), set func(int64) int64, log *slog.Logger) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	cur := set(-1)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			cur = refreshLimit(cur, cgroup, set, log)
		}
	}
}

// refreshLimit sets the runtime's soft limit (set: debug.SetMemoryLimit outside tests)
// to auto's from the cgroup if it is not cur already, and returns the limit now in force
// (math.MaxInt64: none). A cgroup that cannot be read leaves the limit as it is: a read
// that fails is no news of the limit.
func refreshLimit(cur int64, cgroup func() (uint64, error), set func(int64) int64, log *slog.Logger) int64 {
	limit, from, readable := autoLimit(cgroup)
	if !readable {
		log.Debug("memory limit: cannot read the cgroup's again; the limit stays", "limit", limitText(cur), "why", from)
		return cur
	}
	if limit == 0 {
		limit = math.MaxInt64
	}
	if limit == cur {
		return cur
	}
	set(limit)
	log.Info("memory limit changed with the cgroup's", "limit", limitText(limit), "was", limitText(cur), "from", from)
	return limit
}

// limitText renders a runtime memory limit, math.MaxInt64 being none.
func limitText(limit int64) string {
	if limit == math.MaxInt64 {
		return "none"
	}
	return mib(limit)
}

// mib renders bytes in MiB, the unit of the limits above.
func mib(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }
