package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
)

// Group commit: submits are checked one at a time under s.mu, as before, but their
// batches are then merged and written in one transaction, outside s.mu, by whichever
// goroutine the group committer runs. Every submitter waits for its group's transaction
// and is answered only once it is durable, so the promise is unchanged (an acknowledged
// job is a stored job) while one fsync and one round of statements serve many submits.
//
// Submits only insert: new jobs with IDs no one else can have (s.nextJobID), their
// events and their idempotency keys. So a group's commit commutes with every other commit
// made meanwhile, and applying it to memory after them leaves memory equal to the store.
// Memory learns of a group only once the store holds it, and nothing can refer to a job
// before its submitter has been answered.

// submitGroup is the batches of the submits waiting for one transaction.
type submitGroup struct {
	parts []*store.Batch // one per submit, until merge
	b     store.Batch    // all of them, once merged
	n     int            // submits in the group
	done  chan struct{}
	err   error // set before done is closed
}

// merge gathers the group's batches into b, once no submit can join it: each job is
// copied once, into a slice of the right size, rather than again each time a slice
// that grew with the group had to move (jobs are about 800 bytes each).
func (g *submitGroup) merge() {
	var jobs, events, keys int
	for _, p := range g.parts {
		jobs, events, keys = jobs+len(p.Jobs), events+len(p.Events), keys+len(p.Idempotency)
	}
	g.b.Jobs = make([]api.Job, 0, jobs)
	g.b.Events = make([]api.Event, 0, events)
	g.b.Idempotency = make([]store.IdempotencyRecord, 0, keys)
	for _, p := range g.parts {
		g.b.Jobs = append(g.b.Jobs, p.Jobs...)
		g.b.Events = append(g.b.Events, p.Events...)
		g.b.Idempotency = append(g.b.Idempotency, p.Idempotency...)
		if p.PruneIdempotency.After(g.b.PruneIdempotency) {
			g.b.PruneIdempotency = p.PruneIdempotency
		}
	}
	g.parts = nil
}

func (g *submitGroup) wait() error {
	<-g.done
	return g.err
}

// groupCommitter holds the open group and the bookkeeping of what is in flight. All of
// it is guarded by s.mu.
type groupCommitter struct {
	open    *submitGroup
	running bool // a goroutine is committing groups
	// jobs counts the jobs in flight; waiting the jobs in flight per user (they count
	// against the user's limit on waiting jobs); keys the in-flight idempotency keys.
	jobs    int
	waiting map[string]int
	keys    map[[2]string]*submitGroup
}

// reserveJobIDs hands out n job IDs no other job has or will have. Callers hold s.mu.
func (s *Server) reserveJobIDs(n int) int64 {
	first := max(s.nextJobID, s.state.NextJobID())
	s.nextJobID = first + int64(n)
	return first
}

// inflightWaiting is how many of user's jobs are waiting for a group commit. Callers hold s.mu.
func (s *Server) inflightWaiting(user string) int { return s.groups.waiting[user] }

// inflightKey returns the group that holds user's submit with key, if one is in flight.
// Callers hold s.mu.
func (s *Server) inflightKey(user, key string) (*submitGroup, bool) {
	g, ok := s.groups.keys[[2]string{user, key}]
	return g, ok
}

// errBusy refuses a submit while too many wait for their commit.
var errBusy = errors.New("too many submits are waiting to be stored")

// enqueueSubmit adds one submit's batch to the open group and makes sure a committer
// runs. Beyond cfg.MaxInflightSubmits jobs in flight it refuses, so that a flood gets
// backpressure rather than an unbounded queue; a submit larger than the bound alone (an
// array) is still taken when nothing else waits. The caller holds s.mu, and waits on the group after releasing it.
func (s *Server) enqueueSubmit(b *store.Batch, user, key string) (*submitGroup, error) {
	gc := &s.groups
	if gc.jobs+len(b.Jobs) > s.cfg.MaxInflightSubmits && gc.jobs > 0 {
		return nil, errBusy
	}
	if gc.open == nil {
		gc.open = &submitGroup{done: make(chan struct{})}
	}
	g := gc.open
	g.parts = append(g.parts, b)
	g.n++
	gc.jobs += len(b.Jobs)
	if gc.waiting == nil {
		gc.waiting, gc.keys = map[string]int{}, map[[2]string]*submitGroup{}
	}
	for _, j := range b.Jobs {
		if waiting(&j) {
			gc.waiting[j.Spec.User]++
		}
	}
	if key != "" {
		gc.keys[[2]string{user, key}] = g
	}
	if !gc.running {
		gc.running = true
		s.committing.Add(1)
		go func() {
			defer s.committing.Done()
			s.commitGroups()
		}()
	}
	return g, nil
}

// commitGroups commits open groups one after another until none is left. While one is
// being written, the submits that arrive form the next.
func (s *Server) commitGroups() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		g := s.groups.open
		if g == nil {
			s.groups.running = false
			return
		}
		s.groups.open = nil
		s.mu.Unlock()
		g.merge()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
		err := s.store.Commit(ctx, &g.b)
		cancel()
		s.mu.Lock()
		s.groupCommitted(g, err, time.Since(start))
		close(g.done)
	}
}

// groupCommitted brings memory up to date with a group's commit, or, when its outcome
// is unknown, re-reads the store; then the group leaves the in-flight bookkeeping.
// Callers hold s.mu.
func (s *Server) groupCommitted(g *submitGroup, err error, took time.Duration) {
	gc := &s.groups
	gc.jobs -= len(g.b.Jobs)
	for _, j := range g.b.Jobs {
		if waiting(&j) {
			if gc.waiting[j.Spec.User]--; gc.waiting[j.Spec.User] <= 0 {
				delete(gc.waiting, j.Spec.User)
			}
		}
	}
	for k, kg := range gc.keys {
		if kg == g {
			delete(gc.keys, k)
		}
	}
	switch {
	case err == nil:
		s.writeSucceeded()
		s.applyCommitted(&g.b, took)
		s.metrics.observeGroup(g.n)
	case errors.Is(err, store.ErrNotLeader):
		s.stepDown(err)
		g.err = fmt.Errorf("%w: %v", errNotLeader, err)
	default:
		g.err = err
		s.writeFailed(err)
		s.suspect = true
		if rerr := s.resync(context.Background()); rerr != nil {
			s.log.Error("re-reading the store after a failed group commit", "err", rerr)
		}
	}
}
