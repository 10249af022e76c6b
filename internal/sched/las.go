package sched

import (
	"math"
	"time"
)

// Least attained service (the "las" order): Tiresias' discretised two-dimensional LAS
// (Gu et al., NSDI'19). A job's attained service is GPUs × time run, summed over its
// attempts (the two dimensions: width and time); the caller supplies it. Jobs of
// preemptible queues fall into a few LAS queues by it (Options.LASThresholds): every job
// starts in queue 0 and sinks as it runs. Within a tier, a lower LAS queue goes first, and
// within a LAS queue the earlier submit; jobs of queues that are not preemptible stay in
// queue 0. A waiting job may preempt a running job of the same tier and a higher LAS queue
// (preempt.go), so that a short experiment overtakes a long training without anyone
// knowing durations; the existing rights (tiers, reclaiming borrowed GPUs) still hold, and
// MinRuntime still protects fresh attempts.
//
// Starvation guard (Tiresias' STARVELIMIT): a job that has waited since its last attempt
// ended longer than Options.LASStarveLimit times that attempt's run is promoted to queue 0,
// and the attempt it then starts counts service from its own start, as Tiresias resets a
// promoted job's executed time. Unlike Tiresias, which remembers promotions, the core is
// stateless: it recognises a promoted attempt from the wait before it (Running.Requeued,
// Running.LastRun), and once that attempt ends the job's full service counts again.

// lasQueue reports whether LAS orders and preempts the queue's jobs: only preemptible work.
func lasQueue(q Queue) bool { return q.Preemptible && !q.NeverPreempt }

// lasLevel returns the LAS queue of an attained service in GPU-seconds.
func (o *Options) lasLevel(service float64) int {
	for i, t := range o.LASThresholds {
		if service < t.Seconds() {
			return i
		}
	}
	return len(o.LASThresholds)
}

// starved reports whether a job that ran lastRun and was requeued at requeued has, by at,
// waited long enough to be promoted.
func (o *Options) starved(lastRun time.Duration, requeued time.Time, at int64) bool {
	return o.LASStarveLimit > 0 && lastRun > 0 && !requeued.IsZero() &&
		float64(at-nanos(requeued)) >= o.LASStarveLimit*float64(lastRun)
}

// pendingLASQueue is a waiting job's LAS queue at now.
func (o *Options) pendingLASQueue(j *Job, q Queue, now int64) int {
	if !lasQueue(q) || o.starved(j.LastRun, j.Requeued, now) {
		return 0
	}
	return o.lasLevel(j.AttainedService)
}

// runningService is the service that places a running job of gpus GPUs in a LAS queue at
// now: all of it, or for an attempt the starvation guard started, that attempt's alone.
func (o *Options) runningService(r *Running, gpus int, now int64) float64 {
	if o.starved(r.LastRun, r.Requeued, nanos(r.Start)) {
		return float64(gpus) * float64(max(now-nanos(r.Start), 0)) / 1e9
	}
	return r.AttainedService
}

// recheck returns when, with nothing else happening, the LAS queues change in a way that
// may let a waiting job preempt: a running job sinks to a lower-priority queue or leaves its
// MinRuntime protection, or a waiting job reaches the starvation limit. Zero: never, or not
// the LAS order, or nothing waits.
func (c *cycle) recheck() time.Time {
	if c.opts.Order != OrderLAS || c.opts.NoPreemption || len(c.plan.Pending) == 0 {
		return time.Time{}
	}
	now := c.st.now
	next := int64(math.MaxInt64)
	soonest := func(t int64) {
		if t > now && t < next {
			next = t
		}
	}
	top := len(c.opts.LASThresholds)
	for i := range c.s.Running {
		r := &c.s.Running[i]
		q, ok := c.s.Queues[r.Queue]
		if !ok || !lasQueue(q) || r.Preempting {
			continue
		}
		gpus := 0
		for _, a := range r.Allocs {
			gpus += len(a.GPUIndices)
		}
		service := c.opts.runningService(r, gpus, now)
		level := c.opts.lasLevel(service)
		if level > 0 && c.opts.MinRuntime > 0 {
			soonest(nanos(r.Start) + int64(c.opts.MinRuntime))
		}
		if level < top && gpus > 0 {
			// Rounded up to the next millisecond, so that at that time the job has
			// crossed, whatever the float rounding.
			left := (c.opts.LASThresholds[level].Seconds() - service) / float64(gpus)
			soonest(now + (int64(math.Ceil(left*1e3))+1)*int64(time.Millisecond))
		}
	}
	if c.opts.LASStarveLimit > 0 {
		for i := range c.s.Pending {
			j := &c.s.Pending[i]
			if j.LastRun <= 0 || j.Requeued.IsZero() || !lasQueue(c.s.Queues[j.Queue]) {
				continue
			}
			soonest(nanos(j.Requeued) + int64(math.Ceil(c.opts.LASStarveLimit*float64(j.LastRun))))
		}
	}
	if next == math.MaxInt64 {
		return time.Time{}
	}
	return c.at(next)
}
