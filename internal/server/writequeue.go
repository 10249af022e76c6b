package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rotahq/rota/internal/store"
)

// Agent reports are written behind the lock, in order, many to a transaction.
//
// A heartbeat that changes something (a rank started or ended, a node's record) used to
// commit alone and hold the server's lock through the store's fsync, so that every
// other request waited for each report's disk write. Now the report is applied to memory
// under the lock and queued (commitLater); one goroutine at a time writes everything
// queued in one transaction, outside the lock. The promise to agents is unchanged: a
// heartbeat is answered, and its ended ranks acknowledged, only once its report and
// everything its answer was made from are durable.
//
// Memory may now run ahead of the store, so three rules keep the two the same:
//   - Order: writes reach the store in the order they were applied to memory. A commit
//     made under the lock (commit) first waits for the write under way, then carries
//     everything still queued ahead of its own batch, in the same transaction.
//   - Failure: a write that fails fails every write queued after it, since each was made
//     from memory that held it, and memory is then read again from the store (resync).
//     None of them was acknowledged.
//   - Visibility: what goes out of the server waits for the writes it was made from. A
//     heartbeat's answer waits for the last write queued when it was composed; a read
//     waits, before it starts, for the writes memory holds then, and a job's page for
//     those its memory part was read with, before it reads the job's events from the
//     store. Webhooks and watches hear of a write only once it is durable.
//
// Only batches of jobs, attempts, nodes and events are queued: what heartbeats write.
// Submits keep their own group commit (groupcommit.go): they only insert, so their
// order against these writes does not matter.

// laterWrite is one queued batch, already applied to memory.
type laterWrite struct {
	b    *store.Batch
	obs  commitChanges // what the metrics count of it, read before it was applied
	done chan struct{} // closed once durable, or failed with err
	err  error
}

// wait returns once the write is durable, or with the reason it never will be.
func (w *laterWrite) wait() error {
	<-w.done
	return w.err
}

// writeGroup is the queued writes one transaction carries.
type writeGroup struct {
	writes  []*laterWrite
	written chan struct{} // closed when the store has answered; err and took set before
	err     error
	took    time.Duration
	settled bool // its writes were completed or failed; guarded by s.mu
}

// writeQueue is the writes applied to memory and not yet durable. Guarded by s.mu.
type writeQueue struct {
	pending []*laterWrite // not yet handed to the store
	writing *writeGroup   // being written, nil when none
	running bool          // a goroutine is writing
}

// queueable reports whether b holds only what commitLater may queue.
func queueable(b *store.Batch) bool {
	q := *b
	q.Jobs, q.Attempts, q.Nodes, q.Events = nil, nil, nil, nil
	return q.Empty()
}

// commitLater applies b to memory now and queues it for the store; the caller waits on
// the result after letting go of s.mu. A batch with more than queueable allows is
// committed at once instead. Callers hold s.mu.
func (s *Server) commitLater(b *store.Batch) *laterWrite {
	w := &laterWrite{b: b, done: make(chan struct{})}
	if b.Empty() || !queueable(b) {
		w.err = s.commit(context.Background(), b)
		close(w.done)
		return w
	}
	if err := s.holdWrites(); err != nil {
		w.err = err
		close(w.done)
		return w
	}
	// A write under way is not waited for: should it fail, this one fails with it.
	if err := s.resync(context.Background()); err != nil {
		w.err = err
		close(w.done)
		return w
	}
	w.obs = s.changesOf(b)
	s.applyState(b)
	s.wq.pending = append(s.wq.pending, w)
	if !s.wq.running {
		s.wq.running = true
		s.committing.Add(1)
		go func() {
			defer s.committing.Done()
			s.writeQueued()
		}()
	}
	return w
}

// isDone reports whether w is settled already.
func isDone(w *laterWrite) bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// lastWrite is the write queued last, nil when none waits: once it is durable, so is
// everything memory holds now. Callers hold s.mu.
func (s *Server) lastWrite() *laterWrite {
	if n := len(s.wq.pending); n > 0 {
		return s.wq.pending[n-1]
	}
	if g := s.wq.writing; g != nil {
		return g.writes[len(g.writes)-1]
	}
	return nil
}

// waitWritten returns once every write memory holds now is durable, or failed (memory is
// then read again from the store). Callers do not hold s.mu.
func (s *Server) waitWritten() {
	s.mu.Lock()
	last := s.lastWrite()
	s.mu.Unlock()
	if last != nil {
		last.wait()
	}
}

// writeQueued writes the queued batches, a transaction at a time, until none is left.
func (s *Server) writeQueued() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.wq.pending) > 0 {
		g := &writeGroup{writes: s.wq.pending, written: make(chan struct{})}
		s.wq.pending, s.wq.writing = nil, g
		s.mu.Unlock()
		b := mergeWrites(g.writes, nil)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), commitTimeout)
		g.err = s.store.Commit(ctx, b)
		cancel()
		g.took = time.Since(start)
		if g.err == nil {
			spreadEventIDs(batchesOf(g.writes), b)
		}
		close(g.written)
		s.mu.Lock()
		s.settle(g)
	}
	s.wq.running = false
}

// settleWriting waits for the write under way, if any, and settles it: an error means
// memory was read again and what the caller made from it is void. Callers hold s.mu;
// the writer does not need it to finish.
func (s *Server) settleWriting() error {
	g := s.wq.writing
	if g == nil {
		return nil
	}
	<-g.written
	s.settle(g)
	return g.err
}

// settle completes a written group's writes, or fails them and every write queued after
// them, and reads memory again from the store. Callers hold s.mu.
func (s *Server) settle(g *writeGroup) {
	if g.settled {
		return
	}
	g.settled = true
	if s.wq.writing == g {
		s.wq.writing = nil
	}
	if g.err == nil {
		s.writeSucceeded()
		for _, w := range g.writes {
			s.completeWrite(w, g.took)
		}
		return
	}
	s.writeFailed(g.err)
	g.err = s.dropQueued(g.writes, g.err)
}

// dropQueued fails writes, and every write still queued, after the store refused or lost
// the first of them, and brings memory back to what the store holds. It returns the error
// the writes fail with. Callers hold s.mu.
func (s *Server) dropQueued(writes []*laterWrite, err error) error {
	if errors.Is(err, store.ErrNotLeader) {
		s.stepDown(err)
		err = fmt.Errorf("%w: %v", errNotLeader, err)
	}
	for _, w := range writes {
		w.err = err
		close(w.done)
	}
	s.failQueued(err)
	// Memory holds writes the store does not: it is read again before any other change
	// (and by a standby when it next leads).
	s.suspect = true
	if !errors.Is(err, errNotLeader) {
		if rerr := s.resync(context.Background()); rerr != nil {
			s.log.Error("re-reading the store after a failed write", "err", rerr)
		}
	}
	return err
}

// failQueued fails every write still queued. Callers hold s.mu.
func (s *Server) failQueued(err error) {
	for _, w := range s.wq.pending {
		w.err = err
		close(w.done)
	}
	s.wq.pending = nil
}

// completeWrite tells those watching of a write now durable. Callers hold s.mu.
func (s *Server) completeWrite(w *laterWrite, took time.Duration) {
	s.recordCommit(w.obs, took)
	s.watch.bump(w.b)
	s.notifyCommitted(w.b)
	close(w.done)
}

// mergeWrites is the queued writes' batches and then last (nil: none) as one batch, in
// order: a key given twice keeps its last row, as a batch keeps its last.
func mergeWrites(writes []*laterWrite, last *store.Batch) *store.Batch {
	if len(writes) == 1 && last == nil {
		return writes[0].b
	}
	m := &store.Batch{}
	if last != nil {
		*m = *last
		m.Jobs, m.Attempts, m.Nodes, m.Events = nil, nil, nil, nil
	}
	for _, b := range append(batchesOf(writes), last) {
		if b == nil {
			continue
		}
		m.Jobs = append(m.Jobs, b.Jobs...)
		m.Attempts = append(m.Attempts, b.Attempts...)
		m.Nodes = append(m.Nodes, b.Nodes...)
		m.Events = append(m.Events, b.Events...)
	}
	return m
}

func batchesOf(writes []*laterWrite) []*store.Batch {
	out := make([]*store.Batch, len(writes))
	for i, w := range writes {
		out[i] = w.b
	}
	return out
}

// spreadEventIDs gives the events of batches the IDs the store gave them in merged, whose
// events are theirs, in order.
func spreadEventIDs(batches []*store.Batch, merged *store.Batch) {
	if len(batches) == 1 && batches[0] == merged {
		return
	}
	k := 0
	for _, b := range batches {
		for i := range b.Events {
			b.Events[i].ID = merged.Events[k].ID
			k++
		}
	}
}
