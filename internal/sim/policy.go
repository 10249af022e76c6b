package sim

import (
	"github.com/rotahq/rota/internal/sched"
)

// This file is the simulator's one point of contact with the policy side of internal/sched:
// a policy name becomes sched.Options, and the engine calls the same ScheduleWith the server
// calls, so a simulated answer is the answer the cluster would give.

// PolicyNames lists the policies rota sim accepts; names combine with "+" (fifo+worstfit).
func PolicyNames() []string { return sched.PolicyNames() }

// DefaultPolicies are compared when --policy is not given.
var DefaultPolicies = []string{"default", "fifo", "sjf", "las", "worstfit"}

// plannerFor returns the scheduler configured as the named policy.
func plannerFor(policy string) (planFunc, error) {
	opts, err := sched.OptionsFor(policy)
	if err != nil {
		return nil, err
	}
	// The replay reads codes, placements and estimates, never the sentences.
	opts.Terse = true
	// A Planner plans as ScheduleWith does, but keeps the node layout between calls while
	// no node fails or comes back: most of a replay's cost otherwise.
	p, err := sched.NewPlanner(opts)
	if err != nil {
		return nil, err
	}
	return p.Schedule, nil
}
