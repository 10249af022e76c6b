package server

import (
	"net/http"
	"runtime/debug"
	"time"
)

// A handler that panics is a bug, and net/http's own recovery (which closes the
// connection) would keep the server running. But a handler that panics while it holds the
// server's lock leaves it held for good: every heartbeat, submit, read and scheduling
// cycle after waits for it, and the whole cluster stops with nothing said. So a panic is
// logged with its stack, and then the lock is asked for: if it is not had within
// Config.WedgedAfter, the server is wedged and says so on Wedged(), where rota server
// exits, to be started again from the store, which holds every change it acknowledged.

// recoverHandler is deferred around each route's handler.
func (s *Server) recoverHandler(rt route) {
	p := recover()
	if p == nil {
		return
	}
	if p == http.ErrAbortHandler { // a handler's own way to end its answer
		panic(p)
	}
	s.log.Error("an API handler panicked: its connection is closed", "route", rt.method+" "+rt.path, "panic", p, "stack", string(debug.Stack()))
	go s.checkNotWedged()
	// net/http ends the connection without logging it again.
	panic(http.ErrAbortHandler)
}

// checkNotWedged waits for the server's lock, in line with everyone else, for up to
// Config.WedgedAfter; past that, the server is wedged.
func (s *Server) checkNotWedged() {
	got := make(chan struct{})
	go func() {
		s.mu.Lock()
		close(got) // had: the lock is not held for good
		s.mu.Unlock()
	}()
	t := time.NewTimer(s.cfg.WedgedAfter)
	defer t.Stop()
	select {
	case <-got:
	case <-t.C:
		s.log.Error("the server is wedged: its lock is still held after a handler panicked", "waited", s.cfg.WedgedAfter)
		s.wedgedOnce.Do(func() { close(s.wedged) })
	}
}

// Wedged is closed when the server can no longer answer: a handler panicked holding its
// lock. Its process should exit and be started again.
func (s *Server) Wedged() <-chan struct{} { return s.wedged }
