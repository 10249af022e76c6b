package server

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/rotahq/rota/internal/store"
)

// A store that refuses every write (its disk full, a file system remounted read-only, a
// database that refuses commits) used to cost the server a full re-read of its state at
// every change anyone asked for: each failed commit leaves memory suspect, and the next
// change reads the whole store again first, under the server's lock, 2 to 3 s at 100,000
// jobs. Every submit, every heartbeat reporting a rank's start or end and every cycle
// then froze the server for that long, and failed anyway.
//
// So after two failed writes in a row the server holds changes: for a second, then twice
// as long after each further failure, up to holdWritesMax, it refuses them at once with
// 503 and Retry-After, before memory or the store is touched, so that nothing has to be
// read again. After the hold, the next change is tried; the first that the store takes
// ends it. A single failure, which a lost connection makes, is retried at once as before.

const (
	holdWritesMin = time.Second
	holdWritesMax = 30 * time.Second
)

// errWritesHeld marks a change refused while writes are held.
var errWritesHeld = errors.New("the server holds changes: its store refused the last ones")

// writeHold is the store's record of refusing writes. Guarded by s.mu.
type writeHold struct {
	failures int           // writes failed in a row
	since    time.Time     // when the first of them failed
	until    time.Time     // changes are refused until then
	wait     time.Duration // the hold now
	err      error         // the store's last refusal
}

// heldError is a change refused during a hold; it says why, and when to try again.
type heldError struct {
	retry time.Duration
	cause error
}

func (e *heldError) Error() string {
	return fmt.Sprintf("the store refused the server's last writes (%v): it takes no changes for %s, then tries again", e.cause, max(e.retry.Round(time.Second), time.Second))
}

func (e *heldError) Is(target error) bool { return target == errWritesHeld }

// holdWrites refuses a change while writes are held. Callers hold s.mu.
func (s *Server) holdWrites() error {
	h := &s.hold
	if h.until.IsZero() {
		return nil
	}
	left := h.until.Sub(s.cfg.Clock.Now())
	if left <= 0 {
		return nil
	}
	return &heldError{retry: left, cause: h.err}
}

// writeFailed records a write the store refused, and holds changes from the second in a
// row. A standby's refusal (store.ErrNotLeader) is no failure of the store. Callers hold
// s.mu.
func (s *Server) writeFailed(err error) {
	if err == nil || errors.Is(err, store.ErrNotLeader) || errors.Is(err, errNotLeader) || errors.Is(err, errWritesHeld) {
		return
	}
	h := &s.hold
	now := s.cfg.Clock.Now()
	h.failures++
	h.err = err
	if h.failures == 1 {
		h.since = now
		return
	}
	h.wait = min(max(2*h.wait, holdWritesMin), holdWritesMax)
	h.until = now.Add(h.wait)
	if h.failures == 2 {
		s.log.Error("the store refuses writes: the server takes no changes until it takes one again, trying after a hold that grows to 30s",
			"err", err, "hold", h.wait)
	}
}

// writeSucceeded ends a hold, or a run of failures, once the store takes a write.
// Callers hold s.mu.
func (s *Server) writeSucceeded() {
	h := &s.hold
	if h.failures == 0 {
		return
	}
	if h.failures >= 2 {
		s.log.Info("the store takes writes again: the server takes changes", "refused_for", s.cfg.Clock.Now().Sub(h.since).Round(time.Second),
			"failed_writes", h.failures)
	}
	*h = writeHold{}
}

// holdProblem is what rota admin status says while changes are held, or "". Callers
// hold s.mu.
func (s *Server) holdProblem() string {
	h := &s.hold
	if h.failures < 2 {
		return ""
	}
	return fmt.Sprintf("the store has refused every write since %s (%d in a row; the last: %v): the server takes no changes, and tries again every %s at most",
		h.since.UTC().Format(time.RFC3339), h.failures, h.err, holdWritesMax)
}

// setRetryAfter adds Retry-After to an answer refused during a hold.
func setRetryAfter(w http.ResponseWriter, err error) {
	var held *heldError
	if errors.As(err, &held) {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(held.retry.Seconds()))))
	}
}
