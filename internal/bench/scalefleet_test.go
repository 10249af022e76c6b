package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// After the round, which holds every agent's own heartbeats back for a whole interval,
// the agents go on beating where each was in the interval: spread over it, not all at the
// moment the round ends (and together from then on).
func TestAgentsKeepTheirPlaceAfterTheRound(t *testing.T) {
	const agents, interval = 100, 300 * time.Millisecond
	var mu sync.Mutex
	var arrived []time.Time
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived = append(arrived, time.Now())
		mu.Unlock()
		// One at a time, a round of 100 takes an interval or more.
		time.Sleep(interval / agents)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"tasks":[],"acked":[]}`)
	}))
	defer srv.Close()
	f := testFleet(t, srv, agents)
	f.start(context.Background(), interval, false)
	defer f.stop()
	time.Sleep(2 * interval)
	if _, _, errs, err := f.round(context.Background(), 1); err != nil || errs > 0 {
		t.Fatalf("round: %v, %d errors", err, errs)
	}
	ended := time.Now()
	time.Sleep(interval)
	mu.Lock()
	var after []time.Time
	for _, at := range arrived {
		if at.After(ended) {
			after = append(after, at)
		}
	}
	mu.Unlock()
	slices.SortFunc(after, func(a, b time.Time) int { return a.Compare(b) })
	// Spread over the interval, a sixth of it holds about a sixth of the agents' beats.
	most := 0
	for i := range after {
		j := i
		for j < len(after) && after[j].Sub(after[i]) < interval/6 {
			j++
		}
		most = max(most, j-i)
	}
	if len(after) < agents/2 || most > agents/2 {
		t.Fatalf("in the interval after the round: %d beats, up to %d of them within %v; want them spread, at most %d so close", len(after), most, interval/6, agents/2)
	}
}

// The simulated agents hold their watches between heartbeats on the heartbeat's own
// connection, as rota agent does: one connection each; a change brings a heartbeat at
// once; and a round waits for the watches held to end rather than queueing behind them.
func TestAgentsWatchOnTheirHeartbeatConnection(t *testing.T) {
	const agents = 20
	var (
		mu      sync.Mutex
		conns   int
		watches int
		beats   int
		version uint64
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			mu.Lock()
			watches++
			since := r.URL.Query().Get("version")
			mu.Unlock()
			wait, _ := time.ParseDuration(r.URL.Query().Get("wait") + "s")
			for end := time.Now().Add(wait); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
				mu.Lock()
				v := version
				mu.Unlock()
				if fmt.Sprint(v) != since {
					break
				}
			}
			mu.Lock()
			fmt.Fprintf(w, `{"version":%d}`, version)
			mu.Unlock()
			return
		}
		mu.Lock()
		beats++
		mu.Unlock()
		fmt.Fprint(w, `{"tasks":[],"acked":[],"heartbeat_s":1}`)
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	srv.StartTLS()
	defer srv.Close()
	f := testFleet(t, srv, agents)
	f.start(context.Background(), time.Second, true)
	defer f.stop()
	time.Sleep(2500 * time.Millisecond)
	mu.Lock()
	w, c, before := watches, conns, beats
	version++
	mu.Unlock()
	if w < agents || c != agents {
		t.Errorf("after 2.5 s at a 1 s interval: %d watches over %d connections; want at least %d, over one connection for each of the %d agents", w, c, agents, agents)
	}
	// The change reaches every agent through its watch: each heartbeats at once.
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	after := beats
	mu.Unlock()
	if after-before < agents {
		t.Errorf("%d heartbeats in the 300 ms after the change; want one from each of the %d agents", after-before, agents)
	}
	if _, _, errs, err := f.round(context.Background(), 4); err != nil || errs > 0 {
		t.Fatalf("round: %v, %d errors", err, errs)
	}
	mu.Lock()
	defer mu.Unlock()
	if conns != agents {
		t.Errorf("%d connections after the round; want still one for each of the %d agents", conns, agents)
	}
}

// testFleet is a fleet of n simulated agents, not yet started, of the TLS test server srv.
func testFleet(t *testing.T, srv *httptest.Server, n int) *fleet {
	t.Helper()
	f := &fleet{srv: &serverProc{url: srv.URL}, agents: make([]*simAgent, n)}
	for i := range f.agents {
		conn, err := newLeanConn(srv.URL, &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs})
		if err != nil {
			t.Fatal(err)
		}
		f.agents[i] = &simAgent{f: f, name: fmt.Sprintf("n%d", i), conn: conn, beatPath: "/heartbeat",
			wake: make(chan struct{}, 1), watchUntil: make(chan time.Time, 1), tasks: map[api.TaskRef]*api.TaskStatus{}}
	}
	return f
}
