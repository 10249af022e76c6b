package cli

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// What `rota show` says about what a job used and how it ran: its Usage section, its
// idle flag and the image digest that ran. The figures come from the agents' telemetry
// through the server; a Usage with no samples is unknown, never zero.

// printUsage writes the Usage section: what the current or last attempt used. A job
// that runs but has no telemetry yet says so; one that never started has no section.
func printUsage(cfg Config, j api.Job) {
	u := j.Usage
	if u == nil || u.Samples == 0 {
		switch {
		case j.State.Active():
			fmt.Fprintln(cfg.Stdout, "\nUsage: no telemetry yet")
		case j.State.Terminal() && j.StartTime != nil:
			fmt.Fprintln(cfg.Stdout, "\nUsage: no telemetry was recorded")
		}
		return
	}
	loc := cfg.location()
	head := fmt.Sprintf("attempt %d, %s", j.Attempts, plural(u.Samples, "sample", "samples"))
	if !u.First.IsZero() && !u.Last.IsZero() {
		head += ", " + u.First.In(loc).Format("15:04:05") + " to " + u.Last.In(loc).Format("15:04:05")
	}
	fmt.Fprintf(cfg.Stdout, "\nUsage (%s):\n", head)
	tw := newTable(cfg.Stdout)
	if j.Spec.GPUs > 0 {
		fmt.Fprintf(tw, "  GPU util:\tmean %s, p95 %s, last %s\n",
			formatPct(u.GPUUtilPct.Mean), formatPct(u.GPUUtilPct.P95), formatPct(u.GPUUtilPct.Last))
		fmt.Fprintf(tw, "  GPU memory:\tmean %s, p95 %s, peak %s\n",
			statMB(u.GPUMemoryMB.Mean), statMB(u.GPUMemoryMB.P95), statMB(u.GPUMemoryMB.Max))
	}
	fmt.Fprintf(tw, "  CPUs busy:\tmean %s, p95 %s, last %s\n",
		cpus(u.CPUPct.Mean), cpus(u.CPUPct.P95), cpus(u.CPUPct.Last))
	fmt.Fprintf(tw, "  Memory:\tmean %s, p95 %s, peak %s\n",
		statMB(u.MemoryMB.Mean), statMB(u.MemoryMB.P95), formatMB(peakMemory(*u)))
	tw.Flush()
}

// printRankUsage writes what each rank of a multi-node attempt used, when any of them
// has telemetry.
func printRankUsage(cfg Config, spec api.JobSpec, a api.Attempt) {
	if len(a.Placements) < 2 || !slices.ContainsFunc(a.Placements, func(p api.Placement) bool {
		return p.Usage != nil && p.Usage.Samples > 0
	}) {
		return
	}
	fmt.Fprintf(cfg.Stdout, "\nUsage by rank of attempt %d:\n", a.N)
	tw := newTable(cfg.Stdout)
	gpuCols := ""
	if spec.GPUs > 0 {
		gpuCols = "UTIL MEAN/P95/LAST\tGMEM MEAN/P95/PEAK\t"
	}
	fmt.Fprintf(tw, "  RANK\tNODE\t%sCPUS MEAN/P95/LAST\tMEM MEAN/P95/PEAK\n", gpuCols)
	for r, p := range a.Placements {
		u := p.Usage
		if u == nil || u.Samples == 0 {
			fmt.Fprintf(tw, "  %d\t%s\tno telemetry\n", r, clean(p.Node))
			continue
		}
		gpu := ""
		if spec.GPUs > 0 {
			gpu = fmt.Sprintf("%s/%s/%s\t%s/%s/%s\t",
				formatPct(u.GPUUtilPct.Mean), formatPct(u.GPUUtilPct.P95), formatPct(u.GPUUtilPct.Last),
				statMB(u.GPUMemoryMB.Mean), statMB(u.GPUMemoryMB.P95), statMB(u.GPUMemoryMB.Max))
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s%s/%s/%s\t%s/%s/%s\n", r, clean(p.Node), gpu,
			cpus(u.CPUPct.Mean), cpus(u.CPUPct.P95), cpus(u.CPUPct.Last),
			statMB(u.MemoryMB.Mean), statMB(u.MemoryMB.P95), formatMB(peakMemory(*u)))
	}
	tw.Flush()
}

// peakMemory is the most memory the attempt held: the cgroup's own peak where the node
// measures one, which catches what falls between two readings, else the largest reading.
func peakMemory(u api.Usage) int64 {
	return max(u.PeakMemoryMB, int64(math.Round(u.MemoryMB.Max)))
}

// statMB prints a measured amount of megabytes.
func statMB(mb float64) string { return formatMB(int64(math.Round(mb))) }

// cpus prints CPU use, measured in percent of one CPU, as CPUs busy: 350 is "3.5".
func cpus(pct float64) string {
	return strconv.FormatFloat(math.Round(pct/10)/10, 'f', -1, 64)
}

// describeIdle is the Idle line: since when the job's GPUs have all stayed below its
// queue's idle threshold, and whether it has been warned.
func describeIdle(j api.Job, now time.Time, loc *time.Location) string {
	if j.IdleSince == nil {
		return ""
	}
	d := "since " + formatTimeRel(j.IdleSince, now, loc)
	if j.IdleWarned {
		d += ", warned"
	}
	return d
}

// imageDigests is the Image digest line: the digest of the image each rank of the last
// attempt ran, once when all ran the same; "" while none is known.
func imageDigests(attempts []api.Attempt) string {
	if len(attempts) == 0 {
		return ""
	}
	var digests, byRank []string
	for r, p := range attempts[len(attempts)-1].Placements {
		if p.ImageDigest == "" {
			continue
		}
		d := cleanCell(p.ImageDigest, problemWidth)
		if !slices.Contains(digests, d) {
			digests = append(digests, d)
		}
		byRank = append(byRank, fmt.Sprintf("%s (rank %d)", d, r))
	}
	if len(digests) > 1 {
		return strings.Join(byRank, ", ")
	}
	return strings.Join(digests, "")
}
