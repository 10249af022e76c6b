package sched

import (
	"fmt"
	"strings"
	"time"
)

// Options select the policy. The zero Options is the default policy: every zero field
// takes the default documented on it; DefaultOptions spells them out.
type Options struct {
	// Order of pending jobs: "priority" (default: queue tier, then the multifactor score),
	// "fifo" (submit time only), "sjf" (shortest Job.Duration first, an oracle for the
	// simulator; the time limit stands in when unknown) or "las" (Tiresias' discretised
	// least attained service: queue tier, then a LAS queue by attained GPU-service, then
	// submit time; see LASThresholds). "priority" and "las" keep the tier order, quotas
	// and preemption rights, and "las" adds its own preemption within a tier; "fifo" and
	// "sjf" are research baselines for rota sim that never preempt.
	Order string
	// Placement within the feasible nodes: "bestfit" (default: fewest free GPUs left, to
	// keep whole nodes for large jobs) or "worstfit" (most free GPUs left: spread).
	Placement string
	// SharePlacement places requests for a share of a GPU: "fgd" (default: the GPU whose
	// node's expected fragmentation, given the mix of requests, grows least; Weng et
	// al., ATC'23), "bestfit" (the GPU with the least room left after it, then the node
	// with the fewest free GPUs) or "packing" (a GPU with tenants first, then a free GPU
	// of a node in use, then the smallest unused node).
	SharePlacement string
	// ReservationDepth is how many blocked jobs, highest first, get a backfill reservation
	// and an estimated start (default 100, like Slurm's bf_max_job_test it bounds the cost
	// of a cycle). Jobs further down get no estimate. Negative: no reservations at all, so
	// any job that fits starts (greedy; large jobs may starve).
	ReservationDepth int
	// Weights of the multifactor score; all zero means the DefaultWeight constants.
	Weights Weights
	// MaxAge is the wait after which the age factor stops growing (default 7 days).
	MaxAge time.Duration
	// MinRuntime protects a running job from preemption until it has run this long, to
	// avoid thrashing (default 10 minutes; negative: no protection).
	MinRuntime time.Duration
	// NoPreemption switches preemption off.
	NoPreemption bool
	// NoBackfill makes the order strict: once a job waits for resources, no job behind it
	// starts in the cycle, whatever fits (head-of-line blocking, as in YARN's capacity
	// scheduler, the baseline the papers compare against). Jobs refused by admission
	// (quota, per-user cap) or that no node could ever run do not block.
	NoBackfill bool
	// LASThresholds split jobs of preemptible queues into LAS queues under the "las"
	// order, by attained service in GPU-time (one GPU for a second is a second): below
	// the first threshold queue 0, served first; below the second queue 1; and so on.
	// A waiting job of a lower queue may preempt running jobs of a higher queue of the
	// same tier (never inside MinRuntime, never of a queue that is not preemptible).
	// Default: Tiresias' 3250 s and 7200 s, three queues. Must be ascending and positive.
	LASThresholds []time.Duration
	// LASStarveLimit is the starvation guard of the "las" order (Tiresias' STARVELIMIT): a
	// job of a preemptible queue that has waited since its last attempt ended longer than
	// this multiple of that attempt's run time is promoted to queue 0, and its attempt then
	// counts service from its own start. Default 8; negative: no guard.
	LASStarveLimit float64
	// ServiceHalf is the attained service, in GPU-time, at which the default policy's
	// service factor takes half its weight (Weights.Service): the factor is
	// 1 - 2^(-service/ServiceHalf). Default 8 hours: one node of 8 GPUs for an hour.
	ServiceHalf time.Duration
	// DeadlineHorizon is how far ahead of a job's latest start (Job.StartBy) its deadline
	// factor starts to grow: 0 a horizon or more before it, rising linearly to 1 at it and
	// staying 1 after (default 24 hours).
	DeadlineHorizon time.Duration
	// Terse skips the one-sentence Reason.Message of pending jobs; codes and numbers are
	// still set. For the simulator, which never shows them: at thousands of pending jobs
	// the sentences cost more than the decisions.
	Terse bool
}

// Weights scale the multifactor priority factors, each of which lies in [0, 1]. Nice is
// subtracted unweighted.
type Weights struct {
	FairShare float64
	Age       float64
	Size      float64
	// Service weighs the service factor, which is subtracted: a job of a preemptible queue
	// that has had GPU time in earlier attempts loses up to this many points (half of them
	// at ServiceHalf), so a short experiment does not queue behind a requeued week-long
	// training of the same tier. Jobs of other queues, and jobs that never ran, lose none.
	Service float64
	// Deadline weighs the deadline factor: a job with a deadline gains up to this many
	// points as its latest start nears. It acts inside the job's tier only, since the
	// tier orders first.
	Deadline float64
}

// Order and placement names.
const (
	OrderPriority         = "priority"
	OrderFIFO             = "fifo"
	OrderSJF              = "sjf"
	OrderLAS              = "las"
	PlacementBestFit      = "bestfit"
	PlacementWorstFit     = "worstfit"
	SharePlacementFGD     = "fgd"
	SharePlacementBestFit = "bestfit"
	SharePlacementPacking = "packing"
)

// Defaults of Options.
const (
	DefaultReservationDepth = 100
	DefaultMaxAge           = 7 * 24 * time.Hour
	DefaultMinRuntime       = 10 * time.Minute
	DefaultLASStarveLimit   = 8
	DefaultServiceHalf      = 8 * time.Hour
	DefaultDeadlineHorizon  = 24 * time.Hour
)

// DefaultLASThresholds are Tiresias' queue limits (its simulator's 3250 and 7200
// GPU-seconds): queue 0 holds jobs below about 54 GPU-minutes, queue 1 below two GPU-hours,
// queue 2 the rest.
func DefaultLASThresholds() []time.Duration {
	return []time.Duration{3250 * time.Second, 7200 * time.Second}
}

// Default weights let fair share dominate (a team under its share goes first), with age
// worth a tenth of it so that a job waiting a week can overtake a moderate share gap. Size
// is off, as in Slurm's default, so that FIFO holds within a team. Service is off too: on,
// it changes who resumes first after a preemption (a fresh one-GPU job goes before the
// requeued four-GPU victim and may take the node it needed back, as in the server's
// urgent-gang-preempts-batch scenario). The "service" policy turns it on at
// WeightServiceOn, half of age: a job that has had no GPU time then goes before one of the
// same team and tier that had a node for a day in earlier attempts, until the latter has
// waited three and a half days longer.
const (
	DefaultWeightFairShare = 10000
	DefaultWeightAge       = 1000
	DefaultWeightSize      = 0
	DefaultWeightService   = 0
	// DefaultWeightDeadline is half of fair share: a job whose latest start has come
	// overtakes jobs of its tier whose teams are up to half a fair-share unit better
	// placed, and a heavy team's deadlines cannot take the whole pool from a light one.
	DefaultWeightDeadline = 5000
	// WeightServiceOn is the service weight of the "service" policy.
	WeightServiceOn = 500
)

// DefaultOptions returns the default policy with every field spelled out.
func DefaultOptions() Options {
	return Options{
		Order:            OrderPriority,
		Placement:        PlacementBestFit,
		SharePlacement:   SharePlacementFGD,
		ReservationDepth: DefaultReservationDepth,
		Weights: Weights{FairShare: DefaultWeightFairShare, Age: DefaultWeightAge, Size: DefaultWeightSize,
			Service: DefaultWeightService, Deadline: DefaultWeightDeadline},
		MaxAge:          DefaultMaxAge,
		MinRuntime:      DefaultMinRuntime,
		LASThresholds:   DefaultLASThresholds(),
		LASStarveLimit:  DefaultLASStarveLimit,
		ServiceHalf:     DefaultServiceHalf,
		DeadlineHorizon: DefaultDeadlineHorizon,
	}
}

// withDefaults fills zero fields and checks the names.
func (o Options) withDefaults() (Options, error) {
	d := DefaultOptions()
	if o.Order == "" {
		o.Order = d.Order
	}
	if o.Placement == "" {
		o.Placement = d.Placement
	}
	if o.SharePlacement == "" {
		o.SharePlacement = d.SharePlacement
	}
	if o.ReservationDepth == 0 {
		o.ReservationDepth = d.ReservationDepth
	}
	if o.Weights == (Weights{}) {
		o.Weights = d.Weights
	}
	if o.MaxAge <= 0 {
		o.MaxAge = d.MaxAge
	}
	if o.MinRuntime == 0 {
		o.MinRuntime = d.MinRuntime
	}
	if len(o.LASThresholds) == 0 {
		o.LASThresholds = d.LASThresholds
	}
	if o.LASStarveLimit == 0 {
		o.LASStarveLimit = d.LASStarveLimit
	}
	if o.ServiceHalf <= 0 {
		o.ServiceHalf = d.ServiceHalf
	}
	if o.DeadlineHorizon <= 0 {
		o.DeadlineHorizon = d.DeadlineHorizon
	}
	for i, t := range o.LASThresholds {
		if t <= 0 || (i > 0 && t <= o.LASThresholds[i-1]) {
			return o, fmt.Errorf("sched: LAS thresholds %v: want positive and ascending", o.LASThresholds)
		}
	}
	switch o.Order {
	case OrderPriority, OrderFIFO, OrderSJF, OrderLAS:
	default:
		return o, fmt.Errorf("sched: unknown order %q (want priority, fifo, sjf or las)", o.Order)
	}
	switch o.Placement {
	case PlacementBestFit, PlacementWorstFit:
	default:
		return o, fmt.Errorf("sched: unknown placement %q (want bestfit or worstfit)", o.Placement)
	}
	if _, err := newSharePlacer(o.SharePlacement); err != nil {
		return o, err
	}
	return o, nil
}

// policies maps the names rota sim accepts to what each changes from the default.
var policies = []struct {
	name  string
	apply func(*Options)
}{
	{"default", func(*Options) {}},
	{"fifo", func(o *Options) { o.Order = OrderFIFO }},
	{"fifo-strict", func(o *Options) { o.Order, o.NoBackfill = OrderFIFO, true }},
	{"sjf", func(o *Options) { o.Order = OrderSJF }},
	{"las", func(o *Options) { o.Order = OrderLAS }},
	{"bestfit", func(o *Options) { o.Placement = PlacementBestFit }},
	{"worstfit", func(o *Options) { o.Placement = PlacementWorstFit }},
	{"share-fgd", func(o *Options) { o.SharePlacement = SharePlacementFGD }},
	{"share-bestfit", func(o *Options) { o.SharePlacement = SharePlacementBestFit }},
	{"share-packing", func(o *Options) { o.SharePlacement = SharePlacementPacking }},
	{"greedy", func(o *Options) { o.ReservationDepth = -1 }},
	{"nopreempt", func(o *Options) { o.NoPreemption = true }},
	{"nobackfill", func(o *Options) { o.NoBackfill = true }},
	{"service", func(o *Options) { o.Weights.Service = WeightServiceOn }},
}

// PolicyNames lists the policy names OptionsFor accepts, in a fixed order. Names combine
// with "+", e.g. "fifo+worstfit".
func PolicyNames() []string {
	names := make([]string, len(policies))
	for i, p := range policies {
		names[i] = p.name
	}
	return names
}

// OptionsFor returns the Options of a named policy, or of several joined by "+", each
// applied in turn over DefaultOptions.
func OptionsFor(name string) (Options, error) {
	o := DefaultOptions()
	for part := range strings.SplitSeq(name, "+") {
		part = strings.TrimSpace(strings.ToLower(part))
		found := false
		for _, p := range policies {
			if p.name == part {
				p.apply(&o)
				found = true
				break
			}
		}
		if !found {
			return Options{}, fmt.Errorf("sched: unknown policy %q (known: %s)", part, strings.Join(PolicyNames(), ", "))
		}
	}
	return o, nil
}
