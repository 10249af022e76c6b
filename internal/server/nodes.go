package server

import (
	"cmp"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
	"github.com/rotahq/rota/internal/cluster"
)

// Bounds of GET /api/v1/nodes's parameters (api/openapi.yaml).
const (
	// maxNodePage is the most nodes a page lists: at eight GPUs each, a screen's worth
	// many times over, and about 1 MB of answer.
	maxNodePage = 1000
	// maxNodeQuery bounds a name given to filter or page by: longer than any node's name
	// may be (limits.max_name_length is at most 253).
	maxNodeQuery = 256
	// maxFreeQuery bounds free=: more GPUs than any node has.
	maxFreeQuery = 1024
)

// nodeQuery is what GET /api/v1/nodes was asked for: the nodes that match every filter
// given, all of them or a page of them by name, and with jobs, the active jobs on the
// page's nodes that the caller may read.
type nodeQuery struct {
	states   map[api.NodeState]bool // empty: any state
	pool     string                 // "": any pool
	name     string                 // a part of the name; "": any name
	drifting bool                   // only the nodes whose versions drift from their pool's
	problems bool                   // only the nodes with a problem (Node.HasProblem)
	free     int                    // only the nodes with at least this many GPUs free; 0: any
	limit    int                    // 0: every node that matches, unpaged
	after    string                 // list the names after this one
	before   string                 // list the last page of names before this one
	jobs     bool
}

// parseNodeQuery reads GET /api/v1/nodes's parameters, refusing a bad one by name.
func parseNodeQuery(q url.Values) (nodeQuery, *api.Error) {
	f := nodeQuery{states: map[api.NodeState]bool{}}
	if vs, ok := q["state"]; ok {
		if len(vs) > 1 || vs[0] == "" {
			return f, invalid("state", "give it once, as states separated by commas: READY, DRAINING, DRAINED, NOT_READY or LOST")
		}
		for _, v := range strings.Split(vs[0], ",") {
			st := api.NodeState(strings.ToUpper(strings.TrimSpace(v)))
			if !st.Valid() {
				return f, invalid("state", "unknown node state %q; use READY, DRAINING, DRAINED, NOT_READY or LOST", truncateName(v))
			}
			f.states[st] = true
		}
	}
	var e *api.Error
	for _, p := range []struct {
		name string
		to   *string
	}{{"pool", &f.pool}, {"name", &f.name}, {"after", &f.after}, {"before", &f.before}} {
		if *p.to, e = queryString(q, p.name, maxNodeQuery); e != nil {
			return f, e
		}
	}
	if f.drifting, e = queryBool(q, "drifting"); e != nil {
		return f, e
	}
	if f.problems, e = queryBool(q, "problems"); e != nil {
		return f, e
	}
	if f.jobs, e = queryBool(q, "jobs"); e != nil {
		return f, e
	}
	free, e := queryInt(q, "free", 1, maxFreeQuery, 0)
	if e != nil {
		return f, e
	}
	f.free = int(free)
	limit, e := queryInt(q, "limit", 1, maxNodePage, 0)
	if e != nil {
		return f, e
	}
	f.limit = int(limit)
	switch {
	case f.after != "" && f.before != "":
		return f, invalid("before", "give after or before, not both")
	case (f.after != "" || f.before != "") && f.limit == 0:
		return f, invalid("limit", "is needed with after or before: they page, and a page has a size")
	case f.jobs && f.limit == 0:
		return f, invalid("jobs", "lists the jobs on a page of nodes: give limit too")
	}
	return f, nil
}

// matches reports whether node n passes the query's filters; holds says how many ranks
// of active jobs hold each of its GPUs (State.GPUHolds).
func (f *nodeQuery) matches(n *api.Node, holds map[int]int) bool {
	return (len(f.states) == 0 || f.states[n.State]) &&
		(f.pool == "" || n.Labels["pool"] == f.pool) &&
		(f.name == "" || strings.Contains(n.Name, f.name)) &&
		(!f.drifting || len(n.Drift) > 0) &&
		(!f.problems || n.HasProblem()) &&
		(f.free == 0 || freeGPUs(n, holds) >= f.free)
}

// freeGPUs is how many of n's GPUs are free by the glance's count (api.StateOfGPU):
// healthy, held by no job nor leftover process, on a node that takes work.
func freeGPUs(n *api.Node, holds map[int]int) int {
	return api.CountGPUStates(n, func(g int) bool { return holds[g] > 0 }, noGPU).Free
}

// handleNodes lists the nodes by name: all of them, or with limit a page, with the count
// of those that match and cursors to the pages on either side. One pass over the names
// filters and counts under the lock; only the listed nodes are copied.
func (s *Server) handleNodes(w http.ResponseWriter, r *http.Request) {
	f, e := parseNodeQuery(r.URL.Query())
	if e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	who := caller(r)
	list, usage, idle := s.nodePage(&f, who)
	// What jobs hold of each node is filled in without the lock, as the answer is encoded.
	for i := range list.Nodes {
		fillUsage(&list.Nodes[i], usage[i], func(id int64) bool { return idle[id] })
	}
	for i := range list.Jobs {
		redactEnv(who, &list.Jobs[i])
	}
	writeJSON(w, http.StatusOK, list)
}

// nodePage reads under the lock the page of nodes the query asks for, copies of them, and
// for each what active jobs hold of it (nil where they hold nothing), with the jobs
// flagged idle; and the jobs on them that who may read, if asked for.
func (s *Server) nodePage(f *nodeQuery, who auth.Identity) (list api.NodeList, usage []*cluster.NodeUsage, idle map[int64]bool) {
	list.Nodes = []api.Node{}
	s.mu.Lock()
	defer s.mu.Unlock()
	var match []string // the names that match, in order: only names, so it is cheap
	for _, name := range s.state.NodeNames() {
		if f.matches(s.state.PeekNode(name), s.state.GPUHolds(name)) {
			match = append(match, name)
		}
	}
	// The page: from the first name after the cursor, or the last page before it.
	lo, hi := 0, len(match)
	if f.limit > 0 {
		switch {
		case f.before != "":
			hi, _ = slices.BinarySearch(match, f.before)
			lo = max(0, hi-f.limit)
		default:
			if f.after != "" {
				lo, _ = slices.BinarySearch(match, f.after)
				if lo < len(match) && match[lo] == f.after {
					lo++
				}
			}
			hi = min(len(match), lo+f.limit)
		}
		if hi > lo && hi < len(match) {
			list.Next = match[hi-1]
		}
		if hi > lo && lo > 0 {
			list.Prev = match[lo]
		}
	}
	list.Total, list.Offset = len(match), lo
	idle = map[int64]bool{}
	for _, id := range s.state.IdleIDs() {
		idle[id] = true
	}
	seen := map[int64]bool{}
	reads := s.readFilter(who)
	for _, name := range match[lo:hi] {
		list.Nodes = append(list.Nodes, *s.state.PeekNode(name))
		usage = append(usage, s.state.NodeUsage(name))
		if !f.jobs {
			continue
		}
		for _, id := range s.state.ActiveOnNode(name) {
			if j := s.state.Peek(id); j != nil && !seen[id] && reads(j) {
				seen[id] = true
				list.Jobs = append(list.Jobs, *j)
			}
		}
	}
	if f.jobs {
		slices.SortFunc(list.Jobs, func(a, b api.Job) int { return cmp.Compare(a.ID, b.ID) })
		s.listed(list.Jobs)
	}
	return list, usage, idle
}
