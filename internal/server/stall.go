package server

import (
	"fmt"
	"math"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/sched"
	"github.com/rotahq/rota/internal/store"
)

// On a large full cluster every submit used to make the next cycle due, and each cycle,
// hundreds of milliseconds of CPU at 10,000 nodes, planned every waiting job again to
// place none: a stream of submits kept planning at half of one core, which the submits
// themselves then lacked. Yet a job that arrives cannot let any other job start (it only
// adds demand), and it cannot start itself where no node has the GPUs it needs free and
// no running job may be preempted for it: none is being stopped, none in a preemptible
// queue has a lower tier (or, under the "las" order, its own), and none borrows GPUs the
// arrival's team could take back (another team's beyond that team's guarantee, or another
// project's of its own team inside it, while its team or project has as many GPUs of its
// guarantee unused as the arrival needs on one node). So when a long cycle placed nothing
// and stopped nothing, and everything that has happened since its snapshot is the arrival
// of such jobs, the next cycle would decide nothing new: the loop leaves it to the
// recompute that time asks for (cycleDue), as it would with nothing changed, and each
// arrival is told at once why it waits. Anything else that happens meanwhile (a job ends
// or is cancelled, a node or the configuration changes, an arrival that might fit or
// preempt) makes a cycle due as before.

// stall is what the loop knows of the last cycle for this. Guarded by s.mu.
type stall struct {
	// state is the state it was armed on, and seq that state's Seq after the last batch
	// noted: a state read again, or a change made otherwise than through a noted batch
	// (a node's GPUs freed of leftover processes, say), voids it.
	state *cluster.State
	seq   uint64
	// armed: from the cycle's snapshot on, every batch applied was arrivals alone.
	armed bool
	// holds: the cycle ended having planned nothing, after long enough, with no arrival
	// since its snapshot that might fit or preempt.
	holds bool
	// need is the fewest GPUs on one node any arrival since the snapshot needs (0 for one
	// that needs none, or a share of one); maxFree, once the stall holds, the most whole
	// GPUs free on one node that takes work.
	need, maxFree int
	// tier is the highest tier of an arrival since the snapshot, and las whether one is
	// in a queue the "las" order lets preempt its own tier; victims, once the stall holds,
	// what the running jobs offer a preemptor.
	tier    int
	las     bool
	victims stallVictims
	// scopes are the teams and projects of the arrivals since the snapshot, with the
	// fewest GPUs on one node any of each needs: with running jobs that borrow, whether
	// one may reclaim depends on its team's guarantees.
	scopes map[teamScope]int
	// arrived are the arrivals since the snapshot, told why they wait if the stall holds.
	arrived []int64
}

// maxStallArrivals bounds the arrivals a stall keeps to explain: past it, the stall ends.
const maxStallArrivals = 1 << 16

// stallAfter is how long a cycle must have taken for the loop to leave arrivals that
// cannot start to the recompute: shorter cycles cost little, and their reasons are exact.
var stallAfter = cycleRestAfter

// armStall starts watching, from a cycle's snapshot on, what the state is told. Callers
// hold s.mu.
func (s *Server) armStall() {
	s.stall = stall{state: s.state, seq: s.state.Seq(), armed: true, need: math.MaxInt, tier: math.MinInt}
}

// stalled reports whether the changes since the last cycle are arrivals that cannot
// start. Callers hold s.mu.
func (s *Server) stalled() bool { return s.stall.holds && s.stall.current(s.state) }

// current reports whether the state is the one the stall was armed on, changed since only
// by the batches it noted.
func (st *stall) current(state *cluster.State) bool {
	return st.state == state && state.Seq() == st.seq
}

// noteBatch is told every batch before the state applies it. A batch that is not
// arrivals alone, or an arrival that might fit, ends the stall. Callers hold s.mu.
func (s *Server) noteBatch(b *store.Batch) {
	st := &s.stall
	if !st.armed {
		return
	}
	if !st.current(s.state) || !arrivalsOnly(s.state, b) {
		*st = stall{}
		return
	}
	for i := range b.Jobs {
		j := &b.Jobs[i]
		if j.State != api.StatePending {
			continue // held: it waits for its dependencies or its user, not for GPUs
		}
		need := gpusPerNode(&j.Spec)
		tier, las := s.arrivalTier(j.Spec.Queue)
		sc := teamScope{j.Spec.Team, j.Spec.Project}
		st.need, st.tier, st.las = min(st.need, need), max(st.tier, tier), st.las || las
		if st.holds && (need <= st.maxFree || s.mayPreempt(st.victims, tier, las) || s.mayReclaim(&st.victims, sc, need)) {
			*st = stall{}
			return
		}
		if st.scopes == nil {
			st.scopes = map[teamScope]int{}
		}
		if n, ok := st.scopes[sc]; !ok || need < n {
			st.scopes[sc] = need
		}
		if len(st.arrived) >= maxStallArrivals {
			*st = stall{} // a cycle is due; the list stays bounded
			return
		}
		st.arrived = append(st.arrived, j.ID)
	}
}

// followBatch follows the state past a batch noteBatch was told of, and tells the
// arrivals why they wait if the stall holds. Callers hold s.mu, after the state has
// applied the batch.
func (s *Server) followBatch() {
	if s.stall.armed {
		s.stall.seq = s.state.Seq()
		s.explainArrivals()
	}
}

// explainArrivals tells the arrivals noted since the stall began to hold why they wait.
// Callers hold s.mu.
func (s *Server) explainArrivals() {
	st := &s.stall
	if !st.holds {
		return
	}
	for _, id := range st.arrived {
		if j := s.state.Peek(id); j != nil {
			s.state.SetPendingReason(id, string(sched.ReasonResources), noRoomMessage(gpusPerNode(&j.Spec), st.maxFree), nil, nil)
		}
	}
	s.metrics.arrivalsDeferred(len(st.arrived))
	st.arrived = st.arrived[:0]
}

// holdStall ends a cycle that planned nothing: if it took at least stallAfter, and every
// arrival since its snapshot needs more GPUs on one node than any has free (maxFree) and
// may preempt none of the running jobs (victims), the stall holds. Callers hold s.mu.
func (s *Server) holdStall(took time.Duration, maxFree int, victims stallVictims) {
	st := &s.stall
	if !st.armed || !st.current(s.state) || took < stallAfter || st.need <= maxFree || s.mayPreempt(victims, st.tier, st.las) {
		*st = stall{}
		return
	}
	for sc, need := range st.scopes {
		if s.mayReclaim(&victims, sc, need) {
			*st = stall{}
			return
		}
	}
	st.holds, st.maxFree, st.victims = true, maxFree, victims
	s.explainArrivals()
}

// stallVictims is what a cycle's snapshot says of the running jobs a preemptor might stop.
type stallVictims struct {
	// others: some running job is being stopped already, or is in a queue the snapshot
	// does not know: every arrival may take its GPUs.
	others bool
	// lowestTier is the lowest tier of a running job in a queue that may be preempted
	// (math.MaxInt with none): only an arrival of a higher tier may stop it, or under the
	// "las" order one of its own tier in such a queue.
	lowestTier int
	// borrowers are the teams of running jobs that borrow beyond their team's guarantee,
	// and inTeam those of jobs that borrow beyond their project's, inside their team. An
	// arrival that may run within a guarantee (guarantees) may reclaim GPUs from the first
	// of another team, and from the second of its own.
	borrowers, inTeam map[string]bool
	guarantees        sched.Guarantees
}

// teamScope is the team and project of an arrival, which quotas weigh.
type teamScope struct{ team, project string }

// mayReclaim reports whether an arrival of sc that needs need GPUs on one node may
// reclaim GPUs a running job borrows. Callers hold s.mu.
func (s *Server) mayReclaim(v *stallVictims, sc teamScope, need int) bool {
	if s.cfg.Policy.NoPreemption {
		return false
	}
	fromOthers := len(v.borrowers) > 1 || (len(v.borrowers) == 1 && !v.borrowers[sc.team])
	return (fromOthers || v.inTeam[sc.team]) && v.guarantees.MayRunInQuota(sc.team, sc.project, need)
}

// arrivalTier is the tier of queue, and whether the "las" order lets its jobs preempt
// jobs of their own tier; a queue the state does not know counts as the highest tier.
// Callers hold s.mu.
func (s *Server) arrivalTier(queue string) (tier int, las bool) {
	q, ok := s.state.Queue(queue)
	if !ok {
		return math.MaxInt, true
	}
	return q.Tier, q.Preemptible && !q.NeverPreempt
}

// mayPreempt reports whether an arrival of tier (in a queue the "las" order lets preempt
// its own tier, if las) might stop one of victims under the server's policy. Like the
// core (sched's preempt), it counts no preemption under NoPreemption; unlike it, it does
// not leave out jobs the minimum runtime protects, or that hold a share of a GPU: more
// victims, so fewer stalls.
func (s *Server) mayPreempt(v stallVictims, tier int, las bool) bool {
	if s.cfg.Policy.NoPreemption {
		return false
	}
	return v.others || tier > v.lowestTier || (s.cfg.Policy.Order == sched.OrderLAS && las && tier >= v.lowestTier)
}

// arrivalsOnly reports whether b does nothing but add waiting jobs the state does not
// know, with their events and idempotency keys.
func arrivalsOnly(state *cluster.State, b *store.Batch) bool {
	if len(b.Attempts)+len(b.Nodes)+len(b.Queues)+len(b.Teams)+len(b.Reservations)+len(b.Settings)+len(b.Users)+
		len(b.Tokens)+len(b.JoinTokens)+len(b.NodeCerts)+len(b.DeleteQueues)+len(b.DeleteTeams)+len(b.DeleteReservations)+
		len(b.DeleteUsers)+len(b.DeleteNodes)+len(b.DeleteTokens) > 0 {
		return false
	}
	for i := range b.Jobs {
		j := &b.Jobs[i]
		if (j.State != api.StatePending && j.State != api.StateHeld) || state.Peek(j.ID) != nil {
			return false
		}
	}
	return true
}

// gpusPerNode is the fewest whole GPUs a job needs free on one node to start: 0 for a job
// without GPUs or with a share of one, which a node with none free may still take.
func gpusPerNode(spec *api.JobSpec) int {
	switch {
	case spec.GPUShare > 0 || spec.GPUMemoryMB > 0:
		return 0
	case spec.Nodes <= 1:
		return max(spec.GPUs, spec.GPUsPerNode)
	case spec.GPUsPerNode > 0:
		return spec.GPUsPerNode
	default:
		return spec.GPUs / spec.Nodes
	}
}

// noRoomMessage says why an arrival waits while the stall holds.
func noRoomMessage(need, maxFree int) string {
	gpus := "GPUs"
	if need == 1 {
		gpus = "GPU"
	}
	return fmt.Sprintf("no node has %d %s free now (at most %d on one node)", need, gpus, maxFree)
}

// stallFacts reads from a cycle's snapshot the most whole GPUs free on one node that
// takes work, and what the running jobs offer a preemptor: the lowest tier of those in a
// queue that may be preempted; the teams of those that borrow, and which teams and
// projects have guarantees unused; and whether any is being stopped already or is in a
// queue the snapshot does not know. Both err towards a cycle: pools, models,
// reservations and CPUs are not counted against the free GPUs, nor an arrival's model
// against the guarantees, nor the minimum runtime that protects a victim.
func stallFacts(snap *sched.Snapshot) (maxFree int, victims stallVictims) {
	victims.lowestTier = math.MaxInt
	at := make(map[string]int, len(snap.Nodes))
	used := make([][]bool, len(snap.Nodes))
	for i := range snap.Nodes {
		at[snap.Nodes[i].Name] = i
		used[i] = make([]bool, len(snap.Nodes[i].GPUs))
	}
	for i := range snap.Running {
		r := &snap.Running[i]
		q, ok := snap.Queues[r.Queue]
		if r.Preempting || !ok {
			victims.others = true
		} else {
			switch {
			case r.Borrowing:
				victims.borrowers = addTeam(victims.borrowers, r.Team)
			case r.BorrowingInTeam:
				victims.inTeam = addTeam(victims.inTeam, r.Team)
			}
			if q.Preemptible && !q.NeverPreempt {
				victims.lowestTier = min(victims.lowestTier, q.Tier)
			}
		}
		for _, a := range r.Allocs {
			ni, ok := at[a.Node]
			if !ok {
				continue
			}
			for _, g := range a.GPUIndices {
				for k := range snap.Nodes[ni].GPUs {
					if snap.Nodes[ni].GPUs[k].Index == g {
						used[ni][k] = true
					}
				}
			}
		}
	}
	if victims.borrowers != nil || victims.inTeam != nil {
		victims.guarantees = sched.NewGuarantees(snap)
	}
	for i := range snap.Nodes {
		n := &snap.Nodes[i]
		if !n.Schedulable {
			continue
		}
		free := 0
		for k, g := range n.GPUs {
			if g.Healthy && !g.Held && !used[i][k] {
				free++
			}
		}
		maxFree = max(maxFree, free)
	}
	return maxFree, victims
}

// addTeam adds team to the set teams, made if nil.
func addTeam(teams map[string]bool, team string) map[string]bool {
	if teams == nil {
		teams = map[string]bool{}
	}
	teams[team] = true
	return teams
}
