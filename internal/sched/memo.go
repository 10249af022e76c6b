package sched

import (
	"slices"
	"time"
)

// memos keeps, per pending job, what a cycle derives from its request alone: the demand
// (newDemand), the sentence of a request no node could ever accept, and the number of its
// shape, by which a cycle finds requests that already failed. A Planner keeps them from
// one cycle to the next for as long as the job's request, team, time limit and queue stay
// as they were and the node layout stays the same: on a long queue, deriving every job's
// demand and hashing its shape at every cycle was a third of the cycle.
//
// Jobs whose inputs are equal share one derived memo: requests come in few kinds (an
// array, a sweep, a team's usual job), and a derived memo is about 550 bytes, so at 69,000
// waiting jobs one each was 40 MB where a few hundred serve them all.
type memos struct {
	// keep is set for a Planner's memos, which outlive the cycle (see newMemos).
	keep bool
	// cycle numbers the cycles; a memo or a failure of another cycle's number is stale.
	cycle uint32
	list  []jobMemo
	byID  map[int64]int32 // index in list
	// derived holds what was derived, byInputs the shared ones by their inputs.
	derived  []demandMemo
	byInputs map[demandInputs]int32
	// next is where the previous cycle's jobs continue in list: the pending jobs of a
	// snapshot come mostly in the order the previous snapshot gave them, so a job is
	// found there without a map lookup.
	next int
	live int // the job memos this cycle used
	// liveDerived is how many derived memos this cycle used.
	liveDerived int
	// shapes numbers the shapes of the jobs' requests, teams the jobs' teams. lastKey is
	// the shape last numbered, lastShape its number (0: none).
	shapes    map[shape]int32
	teams     map[string]int32
	lastKey   shape
	lastShape int32
	// scratch is the one memo of memos that do not keep, byShape their failed requests.
	scratch demandMemo
	byShape failedByShape
	// failed holds, by shape number, where in fails the failure of a request of that
	// shape to fit in this cycle is (one of an earlier cycle is ignored): an array of
	// small entries, as there may be a shape for every job.
	failed []failedShape
	fails  []failure
}

type failedShape struct {
	cycle uint32
	at    int32
}

// jobMemo is one job's memo: which derived memo serves it.
type jobMemo struct {
	id    int64
	cycle uint32 // the last cycle that used it
	at    int32  // its derived memo, in memos.derived; -1: none yet
}

// demandMemo is what was derived from one set of inputs: the inputs, and what was derived.
type demandMemo struct {
	in    demandInputs
	pools []string // the queue's pools, which demandInputs cannot compare
	d     demand
	bad   string // why the request is malformed; "" when it is not
	shape int32  // the number of d.shape()
	team  int32  // the number of the job's team
	cycle uint32 // the last cycle that used it
	// own marks the memo of a request that lists models or gives speeds, derived for that
	// one job at each cycle (demandInputs cannot tell two lists apart), and shared with
	// no other.
	own bool
}

// demandInputs are the comparable inputs of newDemand. A request that lists models or
// gives speeds is not memoised: its lists cannot be compared cheaply, and such requests
// are rare.
type demandInputs struct {
	queue, team, project string
	image                bool
	timeLimit            time.Duration
	gpus, nodes, perNode int
	model                string
	cpus                 int
	mem                  int64
	share                int
	gmem                 int64
	cuda, driver         string
	// lists is set for a request that lists models or gives speeds: such a memo is never
	// reused, and a memo derived from a list does not serve the same job without one.
	lists bool
}

// newMemos returns memos for a Planner (keep), with room for n jobs, or for one cycle
// alone. The latter keep no memo: a job's is derived when the cycle serves it, into one
// scratch memo, since writing a memo per job only to read each once, in another order,
// cost a one-off cycle more than it saved.
func newMemos(n int, keep bool) *memos {
	m := &memos{keep: keep, shapes: map[shape]int32{}, teams: map[string]int32{}}
	if keep {
		m.list, m.byID = make([]jobMemo, 0, n), make(map[int64]int32, n)
		m.byInputs = map[demandInputs]int32{}
	}
	return m
}

// begin starts a cycle.
func (m *memos) begin() {
	m.cycle++
	m.next, m.live, m.liveDerived = 0, 0, 0
	clear(m.fails) // their reasons may hold maps and slices
	m.fails = m.fails[:0]
}

// of returns the number of job j's derived memo, up to date for this cycle and the queue
// q. Only memos that keep call it.
func (m *memos) of(st *state, j *Job, q *Queue) int32 {
	i := int32(-1)
	if m.next < len(m.list) && m.list[m.next].id == j.ID {
		i = int32(m.next)
	} else if k, ok := m.byID[j.ID]; ok {
		i = k
	}
	if i >= 0 && m.list[i].cycle == m.cycle {
		// A second job of the same ID in one snapshot: it gets a memo of its own, which
		// no later cycle finds.
		i = int32(len(m.list))
		m.list = append(m.list, jobMemo{id: j.ID, at: -1})
	}
	r := &j.Request
	in := demandInputs{
		queue: j.Queue, team: j.Team, project: j.Project, image: j.Image != "", timeLimit: j.TimeLimit,
		gpus: r.GPUs, nodes: r.Nodes, perNode: r.GPUsPerNode, model: r.GPUModel, cpus: r.CPUs, mem: r.MemoryMB,
		share: r.GPUShare, gmem: r.GPUMemoryMB, cuda: r.CUDA, driver: r.Driver,
		lists: len(r.GPUModels) > 0 || r.Speeds != nil,
	}
	if i < 0 {
		i = int32(len(m.list))
		m.list = append(m.list, jobMemo{id: j.ID, at: -1})
		m.byID[j.ID] = i
	}
	m.next = int(i) + 1
	e := &m.list[i]
	e.cycle = m.cycle
	m.live++
	if e.at >= 0 {
		if d := &m.derived[e.at]; !d.own && !in.lists && d.in == in && slices.Equal(d.pools, q.Pools) {
			m.use(e.at)
			return e.at
		}
	}
	e.at = m.find(st, j, q, in, e.at)
	return e.at
}

// find returns the number of the derived memo of j, whose inputs are in, deriving it if
// none is up to date; at is the one j had, -1 for none.
func (m *memos) find(st *state, j *Job, q *Queue, in demandInputs, at int32) int32 {
	if in.lists {
		if at < 0 || !m.derived[at].own {
			at = int32(len(m.derived))
			m.derived = append(m.derived, demandMemo{own: true})
		}
	} else if k, ok := m.byInputs[in]; ok {
		at = k
		if slices.Equal(m.derived[at].pools, q.Pools) {
			m.use(at)
			return at
		}
		// The queue's pools changed since: derived again for every job that shares it.
	} else {
		at = int32(len(m.derived))
		m.derived = append(m.derived, demandMemo{})
		m.byInputs[in] = at
	}
	e := &m.derived[at]
	e.in, e.pools = in, q.Pools
	m.derive(e, st, j, q)
	m.use(at)
	return at
}

// use marks the derived memo k as used in this cycle.
func (m *memos) use(k int32) {
	if e := &m.derived[k]; e.cycle != m.cycle {
		e.cycle = m.cycle
		m.liveDerived++
	}
}

// memo returns the memo of the ranked job r, which has a queue: its own, or for memos
// that do not keep, the scratch memo derived anew.
func (m *memos) memo(st *state, r *ranked) *demandMemo {
	if r.memo >= 0 {
		return &m.derived[r.memo]
	}
	m.derive(&m.scratch, st, r.job, r.queue)
	return &m.scratch
}

// derive sets what e derives from job j in queue q.
func (m *memos) derive(e *demandMemo, st *state, j *Job, q *Queue) {
	e.d, e.bad = newDemand(st, j, q)
	if !m.keep {
		return // shapes are numbered, and teams, only for the cycles to come
	}
	e.shape = m.number(e.d.shape())
	t, ok := m.teams[j.Team]
	if !ok {
		t = int32(len(m.teams))
		m.teams[j.Team] = t
	}
	e.team = t
}

// number returns the number of a shape, numbering it if it is new.
func (m *memos) number(key shape) int32 {
	// Identical requests come in runs (an array, a sweep, one team's jobs in fair-share
	// order): the last shape is compared before the map is hashed.
	if m.lastShape == 0 || key != m.lastKey {
		n, ok := m.shapes[key]
		if !ok {
			n = int32(len(m.shapes) + 1) // 0 marks a memo not yet derived
			m.shapes[key] = n
		}
		m.lastKey, m.lastShape = key, n
	}
	return m.lastShape
}

// lookupFailed returns the failure in this cycle of a request of e's shape, nil if none.
// It is valid until the next setFailed.
func (m *memos) lookupFailed(e *demandMemo) *failure {
	if !m.keep {
		return m.byShape.lookup(e.d.shape())
	}
	if n := e.shape; int(n) < len(m.failed) && m.failed[n].cycle == m.cycle {
		return &m.fails[m.failed[n].at]
	}
	return nil
}

func (m *memos) setFailed(e *demandMemo, f failure) {
	if !m.keep {
		m.byShape.set(e.d.shape(), f)
		return
	}
	n := e.shape
	if int(n) >= len(m.failed) {
		m.failed = slices.Grow(m.failed, int(n)+1-len(m.failed))[:n+1]
	}
	if e := &m.failed[n]; e.cycle == m.cycle {
		m.fails[e.at] = f
		return
	}
	m.failed[n] = failedShape{m.cycle, int32(len(m.fails))}
	m.fails = append(m.fails, f)
}

// failedByShape is the failed requests of a cycle alone, by their shape: numbering every
// shape would cost a one-off cycle more than hashing those it looks up. last is the
// last lookup: identical requests come in runs.
type failedByShape struct {
	failed map[shape]failure
	last   struct {
		key   shape
		f     failure
		found bool
		valid bool
	}
}

func (b *failedByShape) lookup(key shape) *failure {
	if l := &b.last; !l.valid || l.key != key {
		l.f, l.found = b.failed[key]
		l.key, l.valid = key, true
	}
	if !b.last.found {
		return nil
	}
	return &b.last.f
}

func (b *failedByShape) set(key shape, f failure) {
	if b.failed == nil {
		b.failed = map[shape]failure{}
	}
	b.failed[key] = f
	b.last.valid = false
}

// end drops the memos of jobs this cycle did not see, and the derived memos no job used,
// once they are most of their lists: jobs that started or left keep no memo for long.
func (m *memos) end() {
	if !m.keep || len(m.list) <= 2*m.live+64 && len(m.derived) <= 2*m.liveDerived+64 {
		return
	}
	moved := make([]int32, len(m.derived)) // new number by old
	n := 0
	for k := range m.derived {
		moved[k] = -1
		if m.derived[k].cycle == m.cycle {
			moved[k] = int32(n)
			m.derived[n] = m.derived[k]
			n++
		}
	}
	clear(m.derived[n:]) // they hold slices and strings
	m.derived = m.derived[:n]
	// A job this cycle saw uses a derived memo this cycle used.
	m.list = slices.DeleteFunc(m.list, func(e jobMemo) bool { return e.cycle != m.cycle })
	clear(m.byID)
	for i := range m.list {
		e := &m.list[i]
		e.at = moved[e.at]
		m.byID[e.id] = int32(i)
	}
	clear(m.byInputs)
	clear(m.shapes)
	m.lastShape = 0
	clear(m.failed)
	m.failed = m.failed[:0]
	for k := range m.derived {
		e := &m.derived[k]
		if !e.own {
			m.byInputs[e.in] = int32(k)
		}
		e.shape = m.number(e.d.shape())
	}
}
