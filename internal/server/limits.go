package server

import (
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/rotahq/rota/internal/api"
)

// submitLimiter rate-limits each user's submits with a token bucket per user, sized by the
// limits in force. It keeps its own lock so that it never waits on the server's.
type submitLimiter struct {
	mu     sync.Mutex // guards the fields below
	limits api.Limits // what users' buckets were made for; a change starts them afresh
	users  map[string]*rate.Limiter
}

// allow takes one submit from user's bucket at now, or says how long until there is one.
func (l *submitLimiter) allow(user string, lim api.Limits, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.users == nil || l.limits != lim {
		l.users, l.limits = map[string]*rate.Limiter{}, lim
	}
	b := l.users[user]
	if b == nil {
		b = rate.NewLimiter(rate.Limit(lim.SubmitsPerSecond), lim.SubmitBurst)
		l.users[user] = b
	}
	r := b.ReserveN(now, 1)
	if !r.OK() {
		return time.Second, false
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d, false
	}
	return 0, true
}

// checkpointRoot is the shared checkpoint root for a job: its queue's, else the cluster's;
// empty when checkpoints are node-local.
func (s *Server) checkpointRoot(j *api.Job) string {
	if q, ok := s.state.Queue(j.Spec.Queue); ok && q.CheckpointRoot != "" {
		return q.CheckpointRoot
	}
	return s.state.Execution().CheckpointRoot
}

// checkpointDir is the job's shared ROTA_CHECKPOINT_DIR, the same for every attempt on
// every node: ROOT/<cluster>/<job>. Empty means node-local.
func (s *Server) checkpointDir(j *api.Job) string {
	root := s.checkpointRoot(j)
	if root == "" {
		return ""
	}
	return filepath.Join(root, s.clusterID, strconv.FormatInt(j.ID, 10))
}

// checkpointsNote says where the job's checkpoints live and what a requeue means for them.
func (s *Server) checkpointsNote(j *api.Job) string {
	if dir := s.checkpointDir(j); dir != "" {
		return "shared: " + dir + " (every attempt finds it, on any node)"
	}
	return "node-local: a requeued attempt on another node starts without the checkpoints of earlier attempts (set execution.checkpoint_root to share them)"
}
