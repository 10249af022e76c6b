package sched

import (
	"cmp"
	"math"
	"slices"
)

// ranked is a pending job with the keys it is ordered by.
type ranked struct {
	job      *Job
	queue    Queue
	hasQueue bool
	prio     Priority
	// key is the order's own measure, smaller first: submit time (fifo), known duration
	// (sjf) or attained service (las); unused by the priority order.
	key float64
}

// order returns the pending jobs in the order the policy serves them. Every order ends
// with submit time and then ID, so it is total and the plan deterministic.
func order(s *Snapshot, st *state, opts *Options, now int64) []*ranked {
	shares := fairShares(s.Teams)
	out := make([]ranked, len(s.Pending))
	for i := range s.Pending {
		j := &s.Pending[i]
		q, ok := s.Queues[j.Queue]
		r := ranked{job: j, queue: q, hasQueue: ok}
		r.prio = priority(j, q.Tier, shares, st.totalGPUs, opts, now)
		switch opts.Order {
		case OrderSJF:
			r.key = math.Inf(1)
			if j.Duration > 0 {
				r.key = float64(j.Duration)
			} else if j.TimeLimit > 0 {
				r.key = float64(j.TimeLimit)
			}
		case OrderLAS:
			r.key = j.AttainedService
		}
		out[i] = r
	}
	// Sort positions rather than the records themselves: at 100,000 jobs moving the
	// records dominated the sort.
	idx := make([]int32, len(out))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(x, y int32) int {
		a, b := &out[x], &out[y]
		if opts.Order == OrderPriority {
			if c := cmp.Compare(b.prio.Tier, a.prio.Tier); c != 0 {
				return c
			}
			if c := cmp.Compare(b.prio.Score, a.prio.Score); c != 0 {
				return c
			}
		} else if c := cmp.Compare(a.key, b.key); c != 0 {
			return c
		}
		if c := a.job.SubmitTime.Compare(b.job.SubmitTime); c != 0 {
			return c
		}
		return cmp.Compare(a.job.ID, b.job.ID)
	})
	sorted := make([]*ranked, len(out))
	for i, x := range idx {
		sorted[i] = &out[x]
	}
	return sorted
}

// share is a team's normalised usage and fair share.
type share struct{ usage, share float64 }

// fairShares normalises teams' usage and weights over all teams; nil without teams.
func fairShares(teams map[string]Team) map[string]share {
	if teams == nil {
		return nil
	}
	// Sorted so that the float sums come out the same every time.
	names := sortedTeams(teams)
	var usage, weight float64
	for _, n := range names {
		usage += max(teams[n].Usage, 0)
		weight += max(teams[n].Weight, 0)
	}
	out := make(map[string]share, len(teams))
	for _, n := range names {
		t := teams[n]
		var sh share
		if usage > 0 {
			sh.usage = max(t.Usage, 0) / usage
		}
		if weight > 0 {
			sh.share = max(t.Weight, 0) / weight
		}
		out[n] = sh
	}
	return out
}

// priority computes a job's multifactor score, Slurm-style: each factor lies in [0, 1]
// and is scaled by its weight; nice is subtracted as given.
//
//   - fair share F = 2^(-usage/share): 1 for a team that used nothing, 0.5 for one that
//     used exactly its share, towards 0 beyond; 0 for a team without a share. Without
//     teams in the snapshot every job gets 1, so the factor orders nothing.
//   - age: the wait so far over MaxAge, capped at 1.
//   - size: the job's GPUs over the cluster's, capped at 1 (favours large jobs, which
//     otherwise wait longest for room).
func priority(j *Job, tier int, shares map[string]share, clusterGPUs int, opts *Options, now int64) Priority {
	p := Priority{Tier: tier, Nice: float64(j.Nice)}
	f := 1.0
	if shares != nil {
		sh := shares[j.Team]
		switch {
		case sh.share > 0:
			f = math.Exp2(-sh.usage / sh.share)
		default:
			f = 0
		}
	}
	p.FairShare = opts.Weights.FairShare * f
	if !j.SubmitTime.IsZero() {
		wait := float64(now-j.SubmitTime.UnixNano()) / float64(opts.MaxAge)
		p.Age = opts.Weights.Age * min(max(wait, 0), 1)
	}
	if clusterGPUs > 0 {
		gpus := j.Request.GPUs
		if j.Request.Nodes > 1 && j.Request.GPUsPerNode > 0 {
			gpus = j.Request.Nodes * j.Request.GPUsPerNode
		}
		p.Size = opts.Weights.Size * min(float64(gpus)/float64(clusterGPUs), 1)
	}
	p.Score = p.FairShare + p.Age + p.Size - p.Nice
	return p
}

// sortedTeams lists team names in order, for deterministic iteration.
func sortedTeams(m map[string]Team) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
