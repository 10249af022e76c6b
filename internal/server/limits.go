package server

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/rotahq/rota/internal/api"
)

// userLimiter rate-limits each user's requests of one kind (submits, or other changes)
// with a token bucket per user. It keeps its own lock so that it never waits on the
// server's.
type userLimiter struct {
	mu    sync.Mutex // guards the fields below
	rate  float64    // what users' buckets were made for; a change starts them afresh
	burst int
	users map[string]*rate.Limiter
}

// allow takes one request from user's bucket at now, or says how long until there is one.
func (l *userLimiter) allow(user string, perSecond float64, burst int, now time.Time) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.users == nil || l.rate != perSecond || l.burst != burst {
		l.users, l.rate, l.burst = map[string]*rate.Limiter{}, perSecond, burst
	}
	b := l.users[user]
	if b == nil {
		b = rate.NewLimiter(rate.Limit(perSecond), burst)
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

// readBudget bounds the server time each user's reads take, so that a script reading in
// a tight loop, or a hostile caller, cannot keep the server's lock from everyone else:
// Slurm's per-user RPC rate limit does the same for slurmctld. A rate of requests would
// not do it, as one read of every node costs what a thousand reads of one job do. So each
// user has a bucket of seconds, filled at ReadSecondsPerSecond up to ReadBurstSeconds. A
// read is let in while its user's bucket holds any time and pays, when it ends, what its
// handler took (at least minReadCharge), so one long read may overdraw the bucket and the
// user's next reads wait until it has filled again. What a read will cost is not known
// before it runs; pay-after is why this is not golang.org/x/time/rate, whose buckets take
// the cost up front. At most MaxReadsInFlight of a user's reads run at once, or a burst of
// parallel reads would all be let in on what the bucket holds.
type readBudget struct {
	mu     sync.Mutex // guards the fields below
	limits api.Limits // what the buckets were filled for; a change starts them afresh
	users  map[string]*readBucket
}

// readBucket is one user's read budget.
type readBucket struct {
	secs     float64   // seconds left at `at`; negative when overdrawn
	at       time.Time // when secs was last brought up to date
	inFlight int       // reads let in that have not yet paid
}

// minReadCharge is the least a read pays: the work around its handler (TLS, routing,
// authentication) that it does not time.
const minReadCharge = time.Millisecond

// readRefusal says why a read was not let in, and when to try again.
type readRefusal struct {
	wait    time.Duration
	message string
}

// admit lets one of user's reads in at now, or says why not. A read let in must pay
// what it took, even nothing, through pay. A long poll (longPolls) is let in while the
// bucket holds time, but is not one of the reads in flight: `rota logs -f` in a few
// terminals waits in as many.
func (b *readBudget) admit(user string, lim api.Limits, now time.Time, longPoll bool) *readRefusal {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.bucket(user, lim, now)
	switch {
	case !longPoll && k.inFlight >= lim.MaxReadsInFlight:
		return &readRefusal{wait: time.Second, message: fmt.Sprintf(
			"%s has %d reads in progress and may have at most %d at once (limits.max_reads_in_flight); try again in 1 s",
			user, k.inFlight, lim.MaxReadsInFlight)}
	case k.secs <= 0:
		// Whole seconds, rounded up: by then the bucket holds time again. A rate set
		// near zero says at most a day.
		secs := math.Ceil((-k.secs + minReadCharge.Seconds()) / lim.ReadSecondsPerSecond)
		wait := time.Duration(min(max(1, secs), 86400)) * time.Second
		return &readRefusal{wait: wait, message: fmt.Sprintf(
			"%s's reads have used the server time they may (%g s per second, bursts of %g s: limits.read_seconds_per_second and limits.read_burst_seconds); try again in %d s",
			user, lim.ReadSecondsPerSecond, lim.ReadBurstSeconds, int64(wait/time.Second))}
	}
	if !longPoll {
		k.inFlight++
	}
	return nil
}

// pay ends a read admit let in, taking what it took from user's bucket. A long poll
// pays the least a read pays, whatever it took: it waits by design, holding nothing.
func (b *readBudget) pay(user string, lim api.Limits, now time.Time, took time.Duration, longPoll bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.bucket(user, lim, now)
	if longPoll {
		took = 0
	} else {
		k.inFlight = max(0, k.inFlight-1) // a change of limits since the read began reset it
	}
	// One read overdraws by at most a burst, so that a stalled client does not shut its
	// user out for long.
	k.secs = max(k.secs-max(took, minReadCharge).Seconds(), -lim.ReadBurstSeconds)
}

// bucket is user's bucket, brought up to now. Callers hold b.mu.
func (b *readBudget) bucket(user string, lim api.Limits, now time.Time) *readBucket {
	if b.users == nil || b.limits != lim {
		b.users, b.limits = map[string]*readBucket{}, lim
	}
	k := b.users[user]
	if k == nil {
		k = &readBucket{secs: lim.ReadBurstSeconds, at: now}
		b.users[user] = k
	}
	if now.After(k.at) {
		k.secs = min(lim.ReadBurstSeconds, k.secs+now.Sub(k.at).Seconds()*lim.ReadSecondsPerSecond)
		k.at = now
	}
	return k
}
