package server

import (
	"cmp"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
)

// GET /api/v1/top is the cluster at a glance, for `rota top` and dashboards: the load of
// every pool, the first nodes, the job counts and the first jobs of each list. A screen
// of it costs the server one pass over the nodes and, for the waiting list, one over the
// jobs that wait, rather than every job copied, encoded and sent page by page.

const (
	defaultTopNodes = 20
	defaultTopJobs  = 10
	maxTopJobs      = 100
)

// activeStates are the states of a job that holds its resources.
var activeStates = []api.JobState{api.StateAssigned, api.StateRunning}

func (s *Server) handleTop(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	nodes, e := topNodesQuery(q)
	if e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	rows, e := queryInt(q, "jobs", 0, maxTopJobs, defaultTopJobs)
	if e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	who := caller(r)
	s.mu.Lock()
	top := s.top(who, nodes, int(rows))
	s.mu.Unlock()
	for _, list := range [][]api.Job{top.RunningJobs, top.WaitingJobs} {
		for i := range list {
			redactEnv(who, &list[i])
		}
	}
	writeJSON(w, http.StatusOK, top)
}

// topNodesQuery reads how many nodes to list: a whole number, or "all".
func topNodesQuery(q url.Values) (int, *api.Error) {
	v, ok := q["nodes"]
	switch {
	case !ok:
		return defaultTopNodes, nil
	case len(v) > 1:
		return 0, invalid("nodes", "is given %d times; give it once", len(v))
	case v[0] == "all":
		return math.MaxInt, nil
	}
	n, err := strconv.Atoi(v[0])
	if err != nil || n < 0 {
		return 0, invalid("nodes", "%q is not a whole number of 0 or more, nor all", truncateName(v[0]))
	}
	return n, nil
}

// top reads the glance: the loads of every node, the first nodeRows nodes by name, and
// the counts and first jobRows jobs of the running and waiting lists, of the jobs who may
// read. Callers hold s.mu.
func (s *Server) top(who auth.Identity, nodeRows, jobRows int) api.Top {
	t := api.Top{Time: s.cfg.Clock.Now(), Pools: []api.Load{}, Nodes: []api.Node{},
		RunningJobs: []api.Job{}, WaitingJobs: []api.Job{}, Queues: []api.QueueDepth{}}
	pools := map[string]*api.Load{}
	idleOn := s.idleNodes()
	for i, name := range s.state.NodeNames() {
		n := s.state.PeekNode(name)
		// The node's record does not say which GPUs jobs hold: the state's holds do, and
		// on the few nodes with a job flagged idle, which of them are idle.
		holds := s.state.GPUHolds(name)
		idle := noGPU
		if idleOn[name] {
			c := *n
			fillUsage(&c, s.state.NodeUsage(name), s.flaggedIdle)
			idle = func(g int) bool { return slices.Contains(c.IdleGPUs, g) }
		}
		l := api.NodeLoadOf(n, len(holds), func(g int) bool { return holds[g] > 0 }, idle)
		t.Total.Add(l)
		pool := n.Labels["pool"]
		if pools[pool] == nil {
			pools[pool] = &api.Load{Pool: pool}
		}
		pools[pool].Add(l)
		if i < nodeRows {
			c := *n
			fillUsage(&c, s.state.NodeUsage(name), s.flaggedIdle)
			t.Nodes = append(t.Nodes, c)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(pools)) {
		t.Pools = append(t.Pools, *pools[name])
	}
	t.JobLabels = s.arrayLabels(t.Nodes)

	// Who reads every job has the counts from the state's own; a member's are counted
	// by walking the jobs not ended with the read rule.
	var keep func(*api.Job) bool // nil: every job, which walks need not test
	if readsEveryJob(who) {
		t.Running = s.state.CountJobs(activeStates...)
		t.Pending = s.state.CountJobs(api.StatePending)
		t.Held = s.state.CountJobs(api.StateHeld)
		t.Queues = s.state.QueueDepths()
	} else {
		keep = s.readFilter(who)
		s.countReadable(&t, keep)
	}
	t.RunningJobs, _ = s.state.JobsPage(0, activeStates, jobRows, keep)
	// Pending jobs come before held ones, so the held are looked at only when fewer
	// pending jobs than the list's rows were found.
	pending := s.soonest(api.StatePending, jobRows, keep)
	held := s.soonest(api.StateHeld, jobRows-len(pending), keep)
	for _, j := range append(pending, held...) {
		t.WaitingJobs = append(t.WaitingJobs, *j)
	}
	s.listed(t.RunningJobs)
	s.listed(t.WaitingJobs)
	return t
}

// noGPU says no to any GPU.
func noGPU(int) bool { return false }

// idleNodes returns the nodes where an active job flagged idle runs. Callers hold s.mu.
func (s *Server) idleNodes() map[string]bool {
	on := map[string]bool{}
	for _, id := range s.state.IdleIDs() {
		if a, ok := s.state.CurrentAttempt(id); ok {
			for _, p := range a.Placements {
				on[p.Node] = true
			}
		}
	}
	return on
}

// soonest returns the first rows jobs in state st that keep accepts (nil: all), soonest
// estimated start first, those without an estimate last, then by ID. It walks the
// state's jobs once, or not at all when rows is 0.
func (s *Server) soonest(st api.JobState, rows int, keep func(*api.Job) bool) []*api.Job {
	var best []*api.Job
	if rows <= 0 {
		return best
	}
	for j := range s.state.EachJob(st) {
		if keep != nil && !keep(j) {
			continue
		}
		// Jobs arrive in ID order, so a job goes after those it ties with on the estimate,
		// and one that does not start before the last of a full list is left out.
		if len(best) == rows && compareStarts(j, best[rows-1]) >= 0 {
			continue
		}
		i, _ := slices.BinarySearchFunc(best, j, func(a, b *api.Job) int {
			return cmp.Or(compareStarts(a, b), cmp.Compare(a.ID, b.ID))
		})
		best = slices.Insert(best, i, j)
		best = best[:min(len(best), rows)]
	}
	return best
}

// compareStarts orders jobs by their estimated start, soonest first, before those with none.
func compareStarts(a, b *api.Job) int {
	switch {
	case a.EstimatedStart == nil && b.EstimatedStart == nil:
		return 0
	case a.EstimatedStart == nil:
		return 1
	case b.EstimatedStart == nil:
		return -1
	}
	return a.EstimatedStart.Compare(*b.EstimatedStart)
}

// countReadable counts into t the jobs not ended that keep accepts: by state, and per
// queue.
func (s *Server) countReadable(t *api.Top, keep func(*api.Job) bool) {
	depth := map[string]*api.QueueDepth{}
	for j := range s.state.EachJob(api.StatePending, api.StateHeld, api.StateAssigned, api.StateRunning) {
		if !keep(j) {
			continue
		}
		switch {
		case j.State == api.StatePending:
			t.Pending++
		case j.State == api.StateHeld:
			t.Held++
		default:
			t.Running++
		}
		if depth[j.Spec.Queue] == nil {
			depth[j.Spec.Queue] = &api.QueueDepth{Queue: j.Spec.Queue}
		}
		depth[j.Spec.Queue].Add(j, 1)
	}
	t.Queues = []api.QueueDepth{}
	for _, q := range slices.Sorted(maps.Keys(depth)) {
		t.Queues = append(t.Queues, *depth[q])
	}
}

// arrayLabels names the jobs on the nodes that belong to an array as ARRAYID_INDEX.
// Callers hold s.mu.
func (s *Server) arrayLabels(nodes []api.Node) map[int64]string {
	var out map[int64]string
	for _, n := range nodes {
		for _, id := range n.Jobs {
			j := s.state.Peek(id)
			if j == nil || j.ArrayID == 0 || j.ArrayIndex == nil {
				continue
			}
			if out == nil {
				out = map[int64]string{}
			}
			out[id] = strconv.FormatInt(j.ArrayID, 10) + "_" + strconv.Itoa(*j.ArrayIndex)
		}
	}
	return out
}
