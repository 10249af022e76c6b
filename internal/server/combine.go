package server

import "sync"

// A combiner runs short critical sections under a lock for many goroutines at once: the
// first to arrive takes the lock and runs, besides its own, those that arrive while it
// holds it, and the others wait for theirs to be done instead of for the lock.
//
// Every heartbeat takes the server's lock, for about 13 µs, 5,000 times a second at
// 10,000 nodes. On a busy machine a holder is now and then preempted, and the heartbeats
// that arrive meanwhile queue for the lock. sync.Mutex then hands the lock to its waiters
// in turn, each through the scheduler and on the time slice of the one before, so that
// whichever holds it when the slice runs out is preempted too; a trace of the scale suite
// showed a thousand heartbeats waiting for the lock at once for half a second, with the
// lock free most of the time. Run by a combiner, those that queue are run one after
// another by one goroutine with no hand-off between them, and a preempted holder delays
// them only until it runs again.
//
// The goroutine that runs them runs at most combineMax, then hands the lock back and the
// running to the first that waits: no caller's own answer waits for more than that on
// others, and the lock's other users (a cycle, a submit) get their turn.
type combiner struct {
	mu      sync.Mutex // guards the fields below; never held while the lock is waited for
	queue   []*combined
	running bool // a goroutine holds the lock and runs what queues
}

// combined is one caller's critical section.
type combined struct {
	f func()
	// done is sent to once: when f has run (p is what it panicked with, or nil), or
	// when the caller is to take over the running (lead).
	done chan struct{}
	lead bool
	p    any
}

// combineMax is how many of the others' critical sections one goroutine runs before it
// hands the running on: about 3 ms of heartbeats. Each hand-on waits for the goroutine
// taking over to be scheduled, which on a busy machine takes far longer than a critical
// section, so it is not done often.
const combineMax = 256

// run runs f with l held, on this goroutine or on the one running others', and returns
// once it has. A panic in f is raised again here, on the caller's goroutine.
func (c *combiner) run(l sync.Locker, f func()) {
	w := &combined{f: f}
	c.mu.Lock()
	if c.running {
		w.done = make(chan struct{}, 1)
		c.queue = append(c.queue, w)
		c.mu.Unlock()
		<-w.done
	} else {
		c.running = true
		c.mu.Unlock()
		w.lead = true
	}
	if w.lead {
		c.runQueued(l, w)
	}
	if w.p != nil {
		panic(w.p)
	}
}

// runQueued takes l and runs own's f, then what queues, until the queue is empty or it
// has run combineMax of them; then the first still waiting takes over.
func (c *combiner) runQueued(l sync.Locker, own *combined) {
	l.Lock()
	own.p = call(own.f)
	for n := 0; ; n++ {
		c.mu.Lock()
		if len(c.queue) == 0 {
			c.running = false
			c.mu.Unlock()
			l.Unlock()
			return
		}
		w := c.queue[0]
		c.queue[0] = nil
		c.queue = c.queue[1:]
		if n == combineMax {
			c.mu.Unlock()
			l.Unlock()
			w.lead = true
			w.done <- struct{}{}
			return
		}
		c.mu.Unlock()
		w.p = call(w.f)
		w.done <- struct{}{}
	}
}
