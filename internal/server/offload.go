package server

import (
	"net/http"
	"slices"
	"sync"
	"time"
)

// A handOff runs handlers on goroutines kept for the purpose, while the connection's own
// goroutine waits.
//
// net/http serves each connection on a goroutine of its own, and a handler runs on it.
// Every agent holds a connection open for its heartbeats, so at 10,000 nodes there are
// 10,000 such goroutines, idle between beats. A goroutine's stack grows to the deepest
// call it has made (a heartbeat decodes JSON, takes the lock, applies a report) and
// shrinks only at a garbage collection after which it is found using a quarter of it; with
// a beat every two seconds it grows back before long. So each agent's goroutine held
// 14 to 23 KB of stack, and the collector counts stacks when it sizes the heap, which
// doubled their cost in memory. A handler run here leaves the connection's goroutine only
// reading requests and waiting, which fits its first stack; the deep stacks are those of
// the few goroutines that run handlers at once.
//
// Goroutines waiting for work are taken last-in first-out, so that a burst's extra ones
// find nothing to do and exit: handed out in turn, every one would be kept busy enough to
// stay, and the pool would keep its largest size.
type handOff struct {
	idle time.Duration // how long a goroutine with nothing to run waits before it exits

	mu      sync.Mutex
	waiting []*runner // the most recent last
	runners int       // how many there are, waiting or running
}

// A runner is one goroutine of a handOff.
type runner struct {
	jobs chan job // one at a time, sent by whoever took it from waiting
}

// A job is a handler to run and where to say it returned: nil, or what it panicked with.
type job struct {
	f    func()
	done chan any
}

func newHandOff(idle time.Duration) *handOff { return &handOff{idle: idle} }

// wrap returns h run through o.
func (o *handOff) wrap(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		o.run(func() { h(w, r) })
	}
}

// run runs f on one of o's goroutines, or on a new one if none is waiting, and returns
// when f has. A panic in f is raised again here, on the caller's goroutine, where
// net/http recovers it for the one connection as it does for any handler
// (http.ErrAbortHandler included); on a goroutine of o's it would end the process.
func (o *handOff) run(f func()) {
	o.mu.Lock()
	var r *runner
	if n := len(o.waiting); n > 0 {
		r = o.waiting[n-1]
		o.waiting[n-1] = nil
		o.waiting = o.waiting[:n-1]
	} else {
		r = &runner{jobs: make(chan job, 1)}
		o.runners++
		go o.work(r)
	}
	o.mu.Unlock()
	done := make(chan any, 1)
	r.jobs <- job{f, done}
	if p := <-done; p != nil {
		panic(p)
	}
}

// work runs r's jobs until it has waited o.idle for one. A runner is waiting again before
// its caller hears that its job is done, so that the caller's next request finds it.
func (o *handOff) work(r *runner) {
	t := time.NewTimer(o.idle)
	defer t.Stop()
	j := <-r.jobs
	for {
		p := call(j.f)
		o.mu.Lock()
		o.waiting = append(o.waiting, r)
		o.mu.Unlock()
		j.done <- p
		t.Reset(o.idle)
		select {
		case j = <-r.jobs:
		case <-t.C:
			o.mu.Lock()
			i := slices.Index(o.waiting, r)
			if i >= 0 {
				o.waiting = slices.Delete(o.waiting, i, i+1)
				o.runners--
			}
			o.mu.Unlock()
			if i >= 0 {
				return
			}
			j = <-r.jobs // taken just as the wait ended: its job is on its way
		}
	}
}

// call runs f and returns what it panicked with, nil if it returned.
func call(f func()) (p any) {
	defer func() { p = recover() }()
	f()
	return nil
}
