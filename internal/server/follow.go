package server

import (
	"sync"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// An agent ships what its tasks print once per heartbeat interval, in one request for all
// of them: at 10,000 nodes the interval is 10 s. Someone reading a running task's log
// (`rota logs -f`, `rota run`, the job's page) wants it within a second, so the server
// notes each log read while its task runs, and names it in the node's heartbeat answers
// (api.HeartbeatResponse.LogsFollowed) until no one has read it for followFor. The agent
// ships the logs named every second. A log newly read wakes its node's watch, so the
// agent hears of it at once rather than a heartbeat later.

//
// The same list asks a node for the logs of ended tasks that this server holds only in
// part: the node reported each one's size with its end (api.Placement.LogSize), and a
// server that took over from another, or lost its log directory, has less. Such a log
// is a repair: followed like the others while someone reads it, and known from when the
// copy last grew (or the node was first asked), so that a reader waits for the rest only
// while it keeps coming.

// followFor is how long a log stays followed after its last read: longer than the wait
// of `rota logs -f`'s requests and the refresh of the job's page.
const followFor = 30 * time.Second

// logFollows is the logs read lately, per node, with when each was last read.
type logFollows struct {
	mu     sync.Mutex
	byNode map[string]map[api.TaskRef]time.Time
	// repairs holds, of the followed logs that are repairs, how far each has come.
	repairs map[nodeLog]repairing
	swept   time.Time
}

// repairing is how far a repair has come: the size of this server's copy, and since when
// (wall time) it has been that size.
type repairing struct {
	size  int64
	since time.Time
}

// nodeLog names one rank's log: its node, job and attempt.
type nodeLog struct {
	node string
	ref  api.TaskRef
}

// follow notes that the log of job's attempt on node was read at now, and reports
// whether it was not followed before.
func (f *logFollows) follow(node string, job int64, attempt int, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if now.Sub(f.swept) >= followFor {
		// Readers of nodes that report no more, or no more read, leave nothing behind.
		f.sweep(now)
	}
	if f.byNode == nil {
		f.byNode = map[string]map[api.TaskRef]time.Time{}
	}
	m := f.byNode[node]
	if m == nil {
		m = map[api.TaskRef]time.Time{}
		f.byNode[node] = m
	}
	ref := api.TaskRef{JobID: job, Attempt: attempt}
	last, ok := m[ref]
	m[ref] = now
	return !ok || now.Sub(last) >= followFor
}

// repair notes that the log of job's attempt on node, an ended rank's, was read at now
// and found short, with size bytes here, and returns since when (in wall time) the copy
// has not grown: wall when the node is first asked (fresh is then set) and whenever the
// copy has grown since the last read.
func (f *logFollows) repair(node string, job int64, attempt int, size int64, now, wall time.Time) (since time.Time, fresh bool) {
	f.follow(node, job, attempt, now)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.repairs == nil {
		f.repairs = map[nodeLog]repairing{}
	}
	k := nodeLog{node, api.TaskRef{JobID: job, Attempt: attempt}}
	r, ok := f.repairs[k]
	if !ok || size > r.size {
		r = repairing{size: size, since: wall}
		f.repairs[k] = r
	}
	return r.since, !ok
}

// repairing reports whether the log of job's attempt on node is a repair in progress:
// the node may send it though the job has left memory.
func (f *logFollows) repairing(node string, job int64, attempt int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.repairs[nodeLog{node, api.TaskRef{JobID: job, Attempt: attempt}}]
	return ok
}

// done forgets the log of job's attempt on node, whose end has arrived: an ended task's
// log needs following no more.
func (f *logFollows) done(node string, job int64, attempt int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ref := api.TaskRef{JobID: job, Attempt: attempt}
	if m := f.byNode[node]; m != nil {
		delete(m, ref)
		if len(m) == 0 {
			delete(f.byNode, node)
		}
	}
	delete(f.repairs, nodeLog{node, ref})
}

// of lists the logs of node read within followFor of now, in no order; nil for none.
func (f *logFollows) of(node string, now time.Time) []api.TaskRef {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.TaskRef
	for ref, last := range f.byNode[node] {
		if now.Sub(last) < followFor {
			out = append(out, ref)
		}
	}
	return out
}

// sweep forgets the reads older than followFor. Callers hold f.mu.
func (f *logFollows) sweep(now time.Time) {
	for node, m := range f.byNode {
		for ref, last := range m {
			if now.Sub(last) >= followFor {
				delete(m, ref)
			}
		}
		if len(m) == 0 {
			delete(f.byNode, node)
		}
	}
	for k := range f.repairs {
		if _, ok := f.byNode[k.node][k.ref]; !ok {
			delete(f.repairs, k)
		}
	}
	f.swept = now
}
