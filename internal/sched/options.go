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
	// simulator; the time limit stands in when unknown) or "las" (least attained service
	// first, as in Tiresias). Only "priority" looks at tiers and weights, and only it
	// preempts: the others are research baselines for rota sim.
	Order string
	// Placement within the feasible nodes: "bestfit" (default: fewest free GPUs left, to
	// keep whole nodes for large jobs) or "worstfit" (most free GPUs left: spread).
	Placement string
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
}

// Order and placement names.
const (
	OrderPriority     = "priority"
	OrderFIFO         = "fifo"
	OrderSJF          = "sjf"
	OrderLAS          = "las"
	PlacementBestFit  = "bestfit"
	PlacementWorstFit = "worstfit"
)

// Defaults of Options.
const (
	DefaultReservationDepth = 100
	DefaultMaxAge           = 7 * 24 * time.Hour
	DefaultMinRuntime       = 10 * time.Minute
)

// Default weights let fair share dominate (a team under its share goes first), with age
// worth a tenth of it so that a job waiting a week can overtake a moderate share gap. Size
// is off, as in Slurm's default, so that FIFO holds within a team.
const (
	DefaultWeightFairShare = 10000
	DefaultWeightAge       = 1000
	DefaultWeightSize      = 0
)

// DefaultOptions returns the default policy with every field spelled out.
func DefaultOptions() Options {
	return Options{
		Order:            OrderPriority,
		Placement:        PlacementBestFit,
		ReservationDepth: DefaultReservationDepth,
		Weights:          Weights{FairShare: DefaultWeightFairShare, Age: DefaultWeightAge, Size: DefaultWeightSize},
		MaxAge:           DefaultMaxAge,
		MinRuntime:       DefaultMinRuntime,
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
	return o, nil
}

// policies maps the names rota sim accepts to what each changes from the default.
var policies = []struct {
	name  string
	apply func(*Options)
}{
	{"default", func(*Options) {}},
	{"fifo", func(o *Options) { o.Order = OrderFIFO }},
	{"sjf", func(o *Options) { o.Order = OrderSJF }},
	{"las", func(o *Options) { o.Order = OrderLAS }},
	{"bestfit", func(o *Options) { o.Placement = PlacementBestFit }},
	{"worstfit", func(o *Options) { o.Placement = PlacementWorstFit }},
	{"greedy", func(o *Options) { o.ReservationDepth = -1 }},
	{"nopreempt", func(o *Options) { o.NoPreemption = true }},
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
