package sched

import (
	"cmp"
	"math"
	"slices"
)

// ranked is a pending job with the keys it is ordered by.
type ranked struct {
	job *Job
	// queue is the job's queue, a zero one when hasQueue is false.
	queue    *Queue
	hasQueue bool
	prio     Priority
	// memo is the number of the job's derived memo (memos.derived); -1 without a queue,
	// and for memos that do not keep.
	memo int32
	// key is the order's own measure, smaller first: submit time (fifo), known duration
	// (sjf) or attained service (las); unused by the priority order.
	key float64
}

// orderBuf holds order's arrays; a Planner keeps one from a cycle to the next. The
// pending jobs of a cycle point into it, so it serves one cycle at a time.
type orderBuf struct {
	ranked []ranked
	// queues holds a copy of each queue the jobs name, for ranked.queue to point to, and
	// whether the snapshot has it.
	queues map[string]queueCopy
	// shares holds the teams' fair-share factors by team number (memos.teams).
	shares []float64
	keys   []orderKey
	sorted []*ranked
}

// release lets go of the snapshot the arrays point into, keeping the arrays: a Planner
// that held the last snapshot until the next had both alive as the caller built the
// next, every pending job of a long queue twice.
func (b *orderBuf) release() {
	for i := range b.ranked {
		b.ranked[i].job = nil
	}
	for i := range b.keys {
		b.keys[i].job = nil
	}
}

type queueCopy struct {
	q  *Queue
	ok bool
}

// orderKey is what the sort compares, in one small record: the ranked records are large.
type orderKey struct {
	tier  int
	score float64 // Priority.Score in the priority order, else ranked.key
	job   *Job    // for ties
	at    int     // place in the ranked records
}

// order returns the pending jobs in the order the policy serves them. Every order ends
// with submit time and then ID, so it is total and the plan deterministic.
func order(s *Snapshot, st *state, opts *Options, now int64, buf *orderBuf, m *memos) []*ranked {
	if buf == nil {
		buf = &orderBuf{}
	}
	if buf.queues == nil {
		buf.queues = map[string]queueCopy{}
	}
	shares := teamShares{shares: fairShares(s.Teams)}
	// The factors of the teams the memos know, by number: a job's team is then an index,
	// where looking its name up was a tenth of a cycle on a long queue of many teams.
	byTeam := slices.Grow(buf.shares[:0], len(m.teams))[:len(m.teams)]
	buf.shares = byTeam
	for name, n := range m.teams {
		byTeam[n] = shares.of(name)
	}
	out := slices.Grow(buf.ranked[:0], len(s.Pending))[:len(s.Pending)]
	buf.ranked = out
	// The jobs of a queue share one copy of it, and come in runs: each run's queue is
	// looked up once.
	clear(buf.queues)
	var q *Queue
	qName, ok := "", false
	for i := range s.Pending {
		j := &s.Pending[i]
		if q == nil || j.Queue != qName {
			qName = j.Queue
			e, seen := buf.queues[qName]
			if !seen {
				e.q = new(Queue)
				*e.q, e.ok = s.Queues[qName]
				buf.queues[qName] = e
			}
			q, ok = e.q, e.ok
		}
		r := &out[i]
		*r = ranked{job: j, queue: q, hasQueue: ok, memo: -1}
		var f float64
		if ok && m.keep {
			r.memo = m.of(st, j, q)
			// Teams are numbered in the order the memos meet them, so a team new in
			// this cycle is the next number.
			if t := m.derived[r.memo].team; int(t) < len(byTeam) {
				f = byTeam[t]
			} else {
				f = shares.of(j.Team)
				byTeam = append(byTeam, f)
			}
		} else {
			f = shares.of(j.Team)
		}
		r.prio = priority(j, q, f, st.totalGPUs, opts, now)
		switch opts.Order {
		case OrderSJF:
			r.key = math.Inf(1)
			if j.Duration > 0 {
				r.key = float64(j.Duration)
			} else if j.TimeLimit > 0 {
				r.key = float64(j.TimeLimit)
			}
		case OrderLAS:
			r.prio.LASQueue = opts.pendingLASQueue(j, *q, now)
			r.key = float64(r.prio.LASQueue)
		}
	}
	buf.shares = byTeam
	// Sort small keys rather than the records themselves: at 100,000 jobs moving the
	// records dominated the sort.
	keys := slices.Grow(buf.keys[:0], len(out))[:len(out)]
	buf.keys = keys
	// Both the priority order and LAS keep the tier order above their own.
	byPriority := opts.Order == OrderPriority
	byTier := byPriority || opts.Order == OrderLAS
	for i := range out {
		r := &out[i]
		keys[i] = orderKey{score: r.key, job: r.job, at: i}
		if byTier {
			keys[i].tier = r.prio.Tier
		}
		if byPriority {
			keys[i].score = r.prio.Score
		}
	}
	slices.SortFunc(keys, func(a, b orderKey) int {
		// Higher tier first.
		if c := cmp.Compare(b.tier, a.tier); byTier && c != 0 {
			return c
		}
		if byPriority {
			// Higher score first.
			if c := cmp.Compare(b.score, a.score); c != 0 {
				return c
			}
		} else if c := cmp.Compare(a.score, b.score); c != 0 {
			return c
		}
		if c := a.job.SubmitTime.Compare(b.job.SubmitTime); c != 0 {
			return c
		}
		return cmp.Compare(a.job.ID, b.job.ID)
	})
	sorted := slices.Grow(buf.sorted[:0], len(out))[:len(out)]
	buf.sorted = sorted
	for i, k := range keys {
		sorted[i] = &out[k.at]
	}
	return sorted
}

// fairShares returns each team's fair-share factor (see priority), from its usage and
// weight normalised over all teams; nil without teams. Computed once per team, not per
// job.
func fairShares(teams map[string]Team) map[string]float64 {
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
	out := make(map[string]float64, len(teams))
	for _, n := range names {
		t := teams[n]
		var used, share float64
		if usage > 0 {
			used = max(t.Usage, 0) / usage
		}
		if weight > 0 {
			share = max(t.Weight, 0) / weight
		}
		if share > 0 {
			out[n] = math.Exp2(-used / share)
		}
	}
	return out
}

// teamShares looks up the teams' fair-share factors, remembering the last answer: jobs
// of one team come in runs, and on a long queue the map lookups were a tenth of a cycle.
type teamShares struct {
	shares map[string]float64
	team   string
	f      float64
	known  bool
}

// of returns the team's factor: 1 without teams, 0 for a team without a share.
func (t *teamShares) of(team string) float64 {
	if t == nil || t.shares == nil {
		return 1
	}
	if !t.known || team != t.team {
		t.team, t.f, t.known = team, t.shares[team], true
	}
	return t.f
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
//   - service, subtracted like nice: 1 - 2^(-attained/ServiceHalf) for jobs of
//     preemptible queues, 0 for the others and for jobs that never ran: work that has had
//     much GPU time in earlier attempts goes after work that has had little.
//   - deadline: 0 while the job's latest start (Job.StartBy) is DeadlineHorizon or more
//     away, rising linearly to 1 when it comes and staying 1 after; 0 without a deadline.
//     Like every factor it orders only inside the tier.
func priority(j *Job, q *Queue, share float64, clusterGPUs int, opts *Options, now int64) Priority {
	p := Priority{Tier: q.Tier, Nice: float64(j.Nice)}
	p.FairShare = opts.Weights.FairShare * share
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
	if opts.Weights.Service != 0 && j.AttainedService > 0 && lasQueue(*q) {
		p.Service = opts.Weights.Service * (1 - math.Exp2(-j.AttainedService/opts.ServiceHalf.Seconds()))
	}
	if !j.StartBy.IsZero() && opts.Weights.Deadline != 0 {
		slack := float64(j.StartBy.UnixNano()-now) / float64(opts.DeadlineHorizon)
		p.Deadline = opts.Weights.Deadline * min(max(1-slack, 0), 1)
	}
	p.Score = p.FairShare + p.Age + p.Size + p.Deadline - p.Service - p.Nice
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
