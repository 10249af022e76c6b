package server

import (
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
)

// nodeWatch lets an agent learn at once that its node's desired state changed (a job placed,
// cancelled or preempted there), instead of at its next heartbeat: it long-polls
// GET /api/v1/agents/{node}/watch and heartbeats as soon as the answer comes.
type nodeWatch struct {
	mu      sync.Mutex // guards the fields below
	version map[string]uint64
	// changed holds, per node watched, a channel closed at the node's next bump. One
	// channel per node, not one for all: with ten thousand agents watching, a job placed
	// on one node must wake its agent, not all of them.
	changed map[string]chan struct{}
}

// bump records that the jobs of a committed batch changed on their nodes.
func (w *nodeWatch) bump(b *store.Batch) {
	if len(b.Jobs) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, j := range b.Jobs {
		for _, n := range j.Nodes {
			w.bumpLocked(n)
		}
	}
}

// bumpLocked moves node's version on and wakes its watch. Callers hold w.mu.
func (w *nodeWatch) bumpLocked(node string) {
	if w.version == nil {
		w.version = map[string]uint64{}
	}
	w.version[node]++
	if c := w.changed[node]; c != nil {
		close(c)
		delete(w.changed, node)
	}
}

// poke tells node's agent to heartbeat: its answer has something new that is not a job's
// (a log someone reads, follow.go).
func (w *nodeWatch) poke(node string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.bumpLocked(node)
}

// bumpAll tells every watching agent to heartbeat, after the state was read afresh.
func (w *nodeWatch) bumpAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.version == nil {
		w.version = map[string]uint64{}
	}
	for n := range w.version {
		w.version[n]++
	}
	for n, c := range w.changed {
		if _, counted := w.version[n]; !counted {
			w.version[n]++
		}
		close(c)
	}
	w.changed = nil
}

// current returns the node's version and a channel closed at the node's next bump.
func (w *nodeWatch) current(node string) (uint64, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.changed[node]
	if c == nil {
		if w.changed == nil {
			w.changed = map[string]chan struct{}{}
		}
		c = make(chan struct{})
		w.changed[node] = c
	}
	return w.version[node], c
}

const maxWatch = 60 * time.Second

// handleWatch answers when the node's version differs from ?version=, or after ?wait=
// seconds (at most a minute), with the node's current version. A restarted server starts
// counting from zero, which differs from what the agent holds, so the agent re-syncs at once.
func (s *Server) handleWatch(w http.ResponseWriter, r *http.Request) {
	node := r.PathValue("node")
	q := r.URL.Query()
	since, e := queryInt(q, "version", 0, math.MaxInt64, 0)
	if e != nil {
		e.Message += " (the version from the previous answer)"
		writeError(w, http.StatusBadRequest, e)
		return
	}
	wait, e := querySeconds(q, "wait", maxWatch)
	if e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	for {
		v, changed := s.watch.current(node)
		if v != uint64(since) {
			writeJSON(w, http.StatusOK, api.WatchAnswer{Version: v})
			return
		}
		select {
		case <-changed:
		case <-timeout.C:
			writeJSON(w, http.StatusOK, api.WatchAnswer{Version: v})
			return
		case <-r.Context().Done():
			return
		}
	}
}
