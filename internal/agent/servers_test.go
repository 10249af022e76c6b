package agent

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// An agent given several servers finds the leader through a standby's Rota-Leader
// header, and when the leader goes away, moves on until it finds the new one.
func TestAgentFollowsTheLeader(t *testing.T) {
	first, second := newFakeServer(t), newFakeServer(t)
	var mu sync.Mutex
	leader := first.srv.URL
	var standbyCalls int
	standby := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		standbyCalls++
		w.Header().Set(api.LeaderHeader, leader)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"code":"unavailable","message":"this rota server is a standby"}`))
	}))
	t.Cleanup(standby.Close)

	cfg := agentConfig(t, first, t.TempDir())
	cfg.ServerURL = standby.URL + "," + first.srv.URL + "," + second.srv.URL
	launch(t, cfg, testLogger(t))
	eventually(t, 10*time.Second, "heartbeats on the first leader", func() bool { return len(first.heartbeats()) >= 2 })
	mu.Lock()
	if standbyCalls == 0 {
		t.Error("the agent never asked the standby, the first server listed")
	}
	leader = second.srv.URL
	mu.Unlock()

	// The first leader dies: connections fail, and the agent moves on to the second.
	first.mu.Lock()
	first.down = true
	first.mu.Unlock()
	eventually(t, 10*time.Second, "heartbeats on the second leader", func() bool { return len(second.heartbeats()) >= 2 })
}

func TestParseServers(t *testing.T) {
	set, scheme, err := parseServers(" https://a:1/ ,https://b:1")
	if err != nil || scheme != "https" || strings.Join(set.all, " ") != "https://a:1 https://b:1" {
		t.Fatalf("parseServers: %v %q %v", set, scheme, err)
	}
	for _, tc := range []struct{ in, want string }{
		{"http://a:1,https://b:1", "mixes http and https"},
		{"http://a:1,http://a:1/", "names http://a:1 twice"},
		{"http://a:1,", "want http://host:port"},
		{"a:1", "want http://host:port"},
	} {
		if _, _, err := parseServers(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseServers(%q): %v, want %q", tc.in, err, tc.want)
		}
	}
	// A 503 naming a server outside the list is not followed.
	set, _, _ = parseServers("http://a:1,http://b:1,http://c:1")
	resp := &http.Response{Header: http.Header{api.LeaderHeader: {"http://evil:1"}}}
	set.moveOn("http://a:1", resp)
	if got := set.current(); got != "http://b:1" {
		t.Errorf("after a standby named an outsider: %s, want the next listed, http://b:1", got)
	}
	resp.Header.Set(api.LeaderHeader, "http://a:1")
	set.moveOn("http://b:1", resp)
	if got := set.current(); got != "http://a:1" {
		t.Errorf("after a standby named a listed leader: %s, want it", got)
	}
	// A stale failure (from a server already left) changes nothing.
	set.moveOn("http://c:1", nil)
	if got := set.current(); got != "http://a:1" {
		t.Errorf("after a stale failure: %s, want http://a:1 still", got)
	}
}
