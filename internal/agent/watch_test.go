package agent

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// watchServer is a fakeServer with the watch route, counting the connections agents
// open to it.
type watchServer struct {
	*fakeServer

	wmu     sync.Mutex // guards the fields below
	conns   int        // connections opened
	version uint64
	watches []heldWatch
	// held is closed, and replaced, each time a watch starts being held.
	held chan struct{}
}

// heldWatch is one watch request: when it came, the wait it asked for, and when it was
// answered (zero while held).
type heldWatch struct {
	start, end time.Time
	wait       time.Duration
}

func newWatchServer(t *testing.T, interval time.Duration) *watchServer {
	s := &watchServer{fakeServer: newFakeState(), held: make(chan struct{})}
	s.interval = interval
	mux := s.mux()
	mux.HandleFunc("GET /api/v1/agents/{node}/watch", s.watch)
	s.srv = httptest.NewUnstartedServer(mux)
	s.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.wmu.Lock()
			s.conns++
			s.wmu.Unlock()
		}
	}
	s.srv.Start()
	t.Cleanup(s.srv.Close)
	return s
}

// watch answers when the version differs from ?version=, or after ?wait= seconds.
func (s *watchServer) watch(w http.ResponseWriter, r *http.Request) {
	since, _ := strconv.ParseUint(r.URL.Query().Get("version"), 10, 64)
	secs, _ := strconv.ParseFloat(r.URL.Query().Get("wait"), 64)
	wait := time.Duration(secs * float64(time.Second))
	s.wmu.Lock()
	i := len(s.watches)
	s.watches = append(s.watches, heldWatch{start: time.Now(), wait: wait})
	close(s.held)
	s.held = make(chan struct{})
	s.wmu.Unlock()
	deadline := time.Now().Add(wait)
	for {
		s.wmu.Lock()
		v := s.version
		s.wmu.Unlock()
		if v != since || !time.Now().Before(deadline) || r.Context().Err() != nil {
			s.wmu.Lock()
			s.watches[i].end = time.Now()
			s.wmu.Unlock()
			json.NewEncoder(w).Encode(api.WatchAnswer{Version: v})
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// nextHeld returns a channel closed when the next watch starts being held.
func (s *watchServer) nextHeld() <-chan struct{} {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.held
}

func (s *watchServer) counts() (conns, watches, beats int) {
	s.wmu.Lock()
	conns, watches = s.conns, len(s.watches)
	s.wmu.Unlock()
	return conns, watches, len(s.heartbeats())
}

// TestWatchTakesTurnsWithHeartbeats: the agent holds its watch only between heartbeats,
// ending it before the next is due, so that both go over one connection; a change still
// brings a heartbeat at once, and so does a task's end while a watch is held (on a second
// connection, as it must not wait).
func TestWatchTakesTurnsWithHeartbeats(t *testing.T) {
	const interval = 2 * time.Second
	s := newWatchServer(t, interval)
	a := startAgent(t, s.fakeServer, testLogger(t))

	eventually(t, 20*time.Second, "four heartbeats with watches between them", func() bool {
		_, watches, beats := s.counts()
		return beats >= 4 && watches >= 3
	})
	conns, _, _ := s.counts()
	if conns != 1 {
		t.Errorf("the agent opened %d connections for its heartbeats and watches; want 1", conns)
	}
	s.wmu.Lock()
	for i, w := range s.watches {
		// A tenth of the interval, give or take the agent's jitter of a tenth, is left
		// before the next heartbeat.
		if w.wait > interval || w.wait < minWatch {
			t.Errorf("watch %d asked to be held %v; want between %v and the interval, %v", i, w.wait, minWatch, interval)
		}
	}
	s.wmu.Unlock()
	for _, at := range s.beatTimes() {
		s.wmu.Lock()
		for i, w := range s.watches {
			if at.After(w.start) && (w.end.IsZero() || at.Before(w.end)) {
				t.Errorf("a heartbeat came at %v while watch %d was held (%v to %v)", at, i, w.start, w.end)
			}
		}
		s.wmu.Unlock()
	}

	// The node's desired state changes just after a watch starts: the heartbeat comes at
	// once, not about two seconds later at its turn.
	<-s.nextHeld()
	_, _, before := s.counts()
	changed := time.Now()
	s.wmu.Lock()
	s.version++
	s.wmu.Unlock()
	eventually(t, 10*time.Second, "the heartbeat the change asks for", func() bool {
		_, _, beats := s.counts()
		return beats > before
	})
	if took := time.Since(changed); took > interval/2 {
		t.Errorf("the heartbeat came %v after the change; want it at once, well inside the %v interval", took, interval)
	}

	// A heartbeat sent early while a watch is held (a task ended) does not wait for it.
	<-s.nextHeld()
	_, _, before = s.counts()
	poked := time.Now()
	a.poke()
	eventually(t, 10*time.Second, "the early heartbeat", func() bool {
		_, _, beats := s.counts()
		return beats > before
	})
	if took := time.Since(poked); took > interval/2 {
		t.Errorf("the early heartbeat came %v after it was asked for, behind the watch; want it at once", took)
	}
	if conns, _, _ := s.counts(); conns != 2 {
		t.Errorf("%d connections after a heartbeat sent while a watch was held; want 2", conns)
	}
}

// beatTimes is when each heartbeat came.
func (s *fakeServer) beatTimes() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.beatAt...)
}

// TestWatchNotSentAtShortIntervals: at an interval too short for a watch to be worth a
// request, the agent sends none.
func TestWatchNotSentAtShortIntervals(t *testing.T) {
	s := newWatchServer(t, 200*time.Millisecond)
	startAgent(t, s.fakeServer, testLogger(t))
	eventually(t, 20*time.Second, "ten heartbeats", func() bool {
		_, _, beats := s.counts()
		return beats >= 10
	})
	if conns, watches, _ := s.counts(); watches != 0 || conns != 1 {
		t.Errorf("at a 200ms interval the agent sent %d watches over %d connections; want none, and one connection", watches, conns)
	}
}
