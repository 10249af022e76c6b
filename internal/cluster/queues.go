package cluster

import "github.com/rotahq/rota/internal/api"

// DefaultQueue is where a job goes when it names none.
const DefaultQueue = "train"

const (
	hour = 3600
	day  = 24 * hour
)

// DefaultQueues are the queues a new cluster starts with (DESIGN.md, "Domain model"), and
// those the simulator replays with when a cluster file names none, so a replay sees the
// server's rules. Tiers leave gaps so admins can slot their own queues in between.
func DefaultQueues() []api.Queue {
	return []api.Queue{
		{Name: "batch", Tier: 20, Preemptible: true, DefaultTimeLimit: 4 * hour, MaxTimeLimit: 3 * day, Grace: 60},
		// Services run on their own nodes (label them pool=inference), which no other
		// queue's jobs may take: DefaultPools makes the pool exclusive.
		{Name: "inference", Tier: 70, NeverPreempt: true, DefaultTimeLimit: 0, MaxTimeLimit: 0, Grace: 30, RestartPolicy: api.RestartAlways,
			Pools: []string{"inference"}},
		// Debugging sessions are where GPUs sit idle longest: after 30 minutes without
		// use the job is warned, and stopped a grace later.
		{Name: "interactive", Tier: 60, DefaultTimeLimit: hour, MaxTimeLimit: 8 * hour, Grace: 30,
			IdleAfter: 30 * 60, IdleAction: api.IdleStop},
		{Name: "maintenance", Tier: 100, DefaultTimeLimit: 4 * hour, MaxTimeLimit: day, Grace: 30},
		{Name: "train", Tier: 40, DefaultTimeLimit: day, MaxTimeLimit: 7 * day, Grace: 120},
		{Name: "urgent", Tier: 80, DefaultTimeLimit: day, MaxTimeLimit: 3 * day, Grace: 120},
	}
}

// DefaultPools are the pool settings a new cluster starts with: the inference pool is kept
// for the inference queue, so training can never creep onto serving capacity.
func DefaultPools() []api.Pool {
	return []api.Pool{{Name: "inference", Exclusive: true}}
}
