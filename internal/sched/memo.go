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
type memos struct {
	// cycle numbers the cycles; a memo or a failure of another cycle's number is stale.
	cycle uint32
	list  []jobMemo
	byID  map[int64]int32 // index in list
	// next is where the previous cycle's jobs continue in list: the pending jobs of a
	// snapshot come mostly in the order the previous snapshot gave them, so a job is
	// found there without a map lookup.
	next int
	live int // the memos this cycle used
	// shapes numbers the shapes of the jobs' requests, teams the jobs' teams.
	shapes map[shape]int32
	teams  map[string]int32
	// failed holds, by shape number, the request of that shape that failed to fit in this
	// cycle (a failure of an earlier cycle is ignored).
	failed []failedShape
}

type failedShape struct {
	cycle uint32
	f     failure
}

// jobMemo is one job's memo: the inputs its demand was derived from, and what was derived.
type jobMemo struct {
	id    int64
	cycle uint32 // the last cycle that used it
	in    demandInputs
	pools []string // the queue's pools, which demandInputs cannot compare
	d     demand
	bad   string // why the request is malformed; "" when it is not
	shape int32  // the number of d.shape()
	team  int32  // the number of the job's team
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

func newMemos() *memos {
	return &memos{byID: map[int64]int32{}, shapes: map[shape]int32{}, teams: map[string]int32{}}
}

// begin starts a cycle.
func (m *memos) begin() {
	m.cycle++
	m.next, m.live = 0, 0
}

// of returns the number of job j's memo, up to date for this cycle and the queue q.
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
		m.list = append(m.list, jobMemo{id: j.ID})
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
		m.list = append(m.list, jobMemo{id: j.ID})
		m.byID[j.ID] = i
	}
	m.next = int(i) + 1
	e := &m.list[i]
	e.cycle = m.cycle
	m.live++
	if e.shape > 0 && e.in == in && !in.lists && slices.Equal(e.pools, q.Pools) {
		return i
	}
	e.in, e.pools = in, q.Pools
	e.d, e.bad = newDemand(st, j, q)
	key := e.d.shape()
	n, ok := m.shapes[key]
	if !ok {
		n = int32(len(m.shapes) + 1) // 0 marks a memo not yet derived
		m.shapes[key] = n
	}
	e.shape = n
	t, ok := m.teams[j.Team]
	if !ok {
		t = int32(len(m.teams))
		m.teams[j.Team] = t
	}
	e.team = t
	return i
}

// lookupFailed returns the failure of shape n in this cycle, if any.
func (m *memos) lookupFailed(n int32) (failure, bool) {
	if int(n) < len(m.failed) && m.failed[n].cycle == m.cycle {
		return m.failed[n].f, true
	}
	return failure{}, false
}

func (m *memos) setFailed(n int32, f failure) {
	if int(n) >= len(m.failed) {
		m.failed = slices.Grow(m.failed, int(n)+1-len(m.failed))[:n+1]
	}
	m.failed[n] = failedShape{m.cycle, f}
}

// end drops the memos of jobs this cycle did not see, once they are most of the list:
// jobs that started or left keep no memo for long.
func (m *memos) end() {
	if len(m.list) <= 2*m.live+64 {
		return
	}
	m.list = slices.DeleteFunc(m.list, func(e jobMemo) bool { return e.cycle != m.cycle })
	clear(m.byID)
	clear(m.shapes)
	clear(m.failed)
	m.failed = m.failed[:0]
	for i := range m.list {
		e := &m.list[i]
		m.byID[e.id] = int32(i)
		key := e.d.shape()
		n, ok := m.shapes[key]
		if !ok {
			n = int32(len(m.shapes) + 1)
			m.shapes[key] = n
		}
		e.shape = n
	}
}
