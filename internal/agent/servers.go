package agent

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/rotahq/rota/internal/api"
)

// serverSet is the servers an agent may talk to, and the one it talks to now. A cluster
// with several servers on one PostgreSQL store has one leader; the others (standbys)
// answer 503 naming it in the Rota-Leader header. The agent follows that header when it
// names a listed server, and otherwise, or when the server cannot be reached at all,
// moves on to the next one, so it finds the leader after a failover without being told.
type serverSet struct {
	all []string

	mu  sync.Mutex
	cur int
}

// parseServers reads Config.ServerURL: one URL or a comma-separated list, all http:// or
// all https:// (an agent joins and authenticates one way), each once. It returns the set
// and the scheme.
func parseServers(list string) (*serverSet, string, error) {
	set := &serverSet{}
	scheme := ""
	for _, part := range strings.Split(list, ",") {
		s := strings.TrimRight(strings.TrimSpace(part), "/")
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, "", fmt.Errorf("server URL %q: want http://host:port or https://host:port (several: a comma-separated list)", part)
		}
		if scheme != "" && u.Scheme != scheme {
			return nil, "", fmt.Errorf("server URL list %q: mixes http and https; the servers of one cluster serve one or the other", list)
		}
		if slices.Contains(set.all, s) {
			return nil, "", fmt.Errorf("server URL list %q names %s twice", list, s)
		}
		scheme = u.Scheme
		set.all = append(set.all, s)
	}
	return set, scheme, nil
}

// current is the server to send the next call to.
func (s *serverSet) current() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.all[s.cur]
}

// moveOn is called when a call to from got no answer or a standby's 503 (resp, which may
// be nil). It switches to the leader the answer names if that is listed, else to the next
// server. If another call has already moved on from from, it does nothing.
func (s *serverSet) moveOn(from string, resp *http.Response) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.all) < 2 || s.all[s.cur] != from {
		return
	}
	if resp != nil {
		leader := strings.TrimRight(resp.Header.Get(api.LeaderHeader), "/")
		if i := slices.Index(s.all, leader); i >= 0 && leader != from {
			s.cur = i
			return
		}
	}
	s.cur = (s.cur + 1) % len(s.all)
}
