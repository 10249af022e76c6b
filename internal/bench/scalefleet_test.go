package bench

import (
	"context"
	"crypto/tls"
	"fmt"
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
	f := &fleet{srv: &serverProc{url: srv.URL}, agents: make([]*simAgent, agents)}
	for i := range f.agents {
		conn, err := newLeanConn(srv.URL, &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs})
		if err != nil {
			t.Fatal(err)
		}
		f.agents[i] = &simAgent{f: f, name: fmt.Sprintf("n%d", i), client: srv.Client(), conn: conn, beatPath: "/heartbeat",
			wake: make(chan struct{}, 1), tasks: map[api.TaskRef]*api.TaskStatus{}}
	}
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
