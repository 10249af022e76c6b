package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// haServer is a fake server of a cluster with several: a standby refuses everything with
// the leader it names; the leader answers status and submits. Each counts its calls.
type haServer struct {
	url   string
	calls atomic.Int64
}

func standbyServer(t *testing.T, leader func() string) *haServer {
	s := &haServer{}
	s.url = newHTTPServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		if l := leader(); l != "" {
			w.Header().Set(api.LeaderHeader, l)
		}
		w.Header().Set("Retry-After", "1")
		writeTestJSON(w, http.StatusServiceUnavailable, api.Error{Code: api.CodeUnavailable, Message: "this rota server is a standby"})
	}))
	return s
}

func leaderServer(t *testing.T) *haServer {
	s := &haServer{}
	s.url = newHTTPServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.calls.Add(1)
		switch r.Method + " " + r.URL.Path {
		case "GET /api/v1/status":
			since := testNow.Add(-time.Hour)
			writeTestJSON(w, http.StatusOK, api.ClusterStatus{Store: "postgres", Lease: true, Term: 7, LeaderURL: s.url, LeaderHeld: true,
				LeaderSince: &since, Answered: "b:7070", AnsweredIsLeader: true, Replicas: []api.Replica{
					{ID: "a:7070", Host: "host-a", URL: "http://a:7070", Started: testNow.Add(-2 * time.Hour), Seen: testNow},
					{ID: "b:7070", Host: "host-b", URL: s.url, Started: testNow.Add(-2 * time.Hour), Seen: testNow, Leader: true},
				}})
		case "POST /api/v1/jobs":
			writeTestJSON(w, http.StatusCreated, api.Job{ID: 99, State: api.StatePending})
		default:
			writeTestJSON(w, http.StatusBadRequest, api.Error{Code: api.CodeInvalid, Message: "no", Field: "x"})
		}
	}))
	return s
}

func writeTestJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func deadAddress(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + l.Addr().String()
	l.Close()
	return addr
}

// Given every server, a verb reaches the leader past a dead server and a standby, and
// the client then sticks to it.
func TestClientFollowsTheLeader(t *testing.T) {
	leader := leaderServer(t)
	standby := standbyServer(t, func() string { return leader.url })
	dead := deadAddress(t)
	code, out, errOut := run(t, dead+","+standby.url+","+leader.url, "admin", "status")
	if code != ExitOK {
		t.Fatalf("admin status: exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"Store:  postgres", "Leader: " + leader.url, "Term:   7", "a:7070", "standby", "leader (answered)", "host-b"} {
		if !strings.Contains(out, want) {
			t.Errorf("admin status output lacks %q:\n%s", want, out)
		}
	}
	if standby.calls.Load() != 1 || leader.calls.Load() != 1 {
		t.Errorf("calls: standby %d, leader %d; want 1 and 1", standby.calls.Load(), leader.calls.Load())
	}

	c, err := NewClient(Endpoint{Server: standby.url + ", " + leader.url + "/", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if j, err := c.Submit(context.Background(), api.JobSpec{Command: []string{"true"}}); err != nil || j.ID != 99 {
		t.Fatalf("submit through a standby: %+v, %v", j, err)
	}
	if c.BaseURL != leader.url {
		t.Errorf("BaseURL after following = %q, want the leader %q", c.BaseURL, leader.url)
	}
	before := standby.calls.Load()
	if _, err := c.Submit(context.Background(), api.JobSpec{Command: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if standby.calls.Load() != before {
		t.Error("the second call went to the standby again")
	}
}

// A standby naming a leader outside the list is not followed: the token goes only to
// the servers the user gave.
func TestClientFollowsOnlyListedServers(t *testing.T) {
	outsider := leaderServer(t)
	leader := leaderServer(t)
	standby := standbyServer(t, func() string { return outsider.url })
	c, err := NewClient(Endpoint{Server: standby.url + "," + leader.url, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatal(err)
	}
	if outsider.calls.Load() != 0 || leader.calls.Load() != 1 {
		t.Errorf("calls: outsider %d, listed leader %d; want 0 and 1", outsider.calls.Load(), leader.calls.Load())
	}
}

// Only answers that prove nothing was done are retried elsewhere: a 400 is the answer.
func TestClientDoesNotRetryRealAnswers(t *testing.T) {
	first, second := leaderServer(t), leaderServer(t)
	c, err := NewClient(Endpoint{Server: first.url + "," + second.url, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	var apiErr *APIError
	if err := c.do(context.Background(), "GET", "/api/v1/nope", nil, nil, nil); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest {
		t.Fatalf("err %v, want the 400", err)
	}
	if second.calls.Load() != 0 {
		t.Error("a 400 was retried on another server")
	}
}

// With no leader anywhere, the client looks for one for a while, then says why it failed.
func TestClientGivesUpWithoutALeader(t *testing.T) {
	defer func(d time.Duration) { followFor = d }(followFor)
	followFor = 600 * time.Millisecond
	a := standbyServer(t, func() string { return "" })
	b := standbyServer(t, func() string { return "" })
	c, err := NewClient(Endpoint{Server: a.url + "," + b.url, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Status(context.Background())
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("err %v, want the standbys' 503", err)
	}
	if d := time.Since(start); d < followFor || d > followFor+2*time.Second {
		t.Errorf("gave up after %v, want about %v", d, followFor)
	}
	if a.calls.Load() < 2 || b.calls.Load() < 2 {
		t.Errorf("calls %d and %d: both should have been asked more than once", a.calls.Load(), b.calls.Load())
	}
}

func TestServerListErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"http://a:1,,http://b:1", "empty entry"},
		{"http://a:1,unix:///run/rota.sock", "unix:// socket stands alone"},
		{"http://a:1,a:1", "names http://a:1 twice"},
		{"http://a:1,ftp://b", "want http://, https:// or unix://"},
	} {
		if _, err := NewClient(Endpoint{Server: tc.in}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewClient(%q): %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
	got, err := normalizeServer(" a:1 , https://b:2/ ")
	if err != nil || got != "http://a:1,https://b:2" {
		t.Errorf("normalizeServer: %q, %v", got, err)
	}
}

// A client of one server asks again while it answers 503 (a standby that has not yet
// learned the new leader), and gets the answer once one comes.
func TestClientOfOneServerWaitsOutA503(t *testing.T) {
	leader := leaderServer(t)
	var calls atomic.Int32
	url := newHTTPServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			writeTestJSON(w, http.StatusServiceUnavailable, api.Error{Code: api.CodeUnavailable, Message: "this rota server is a standby and no leader is serving yet"})
			return
		}
		resp, err := http.Get(leader.url + r.URL.Path)
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	}))
	c, err := NewClient(Endpoint{Server: url, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(context.Background())
	if err != nil {
		t.Fatalf("status through a server that answered 503 twice: %v", err)
	}
	if st.Term != 7 || calls.Load() != 3 {
		t.Errorf("term %d after %d calls; want 7 after 3", st.Term, calls.Load())
	}

	// A 400 is an answer: not asked again.
	calls.Store(10)
	var apiErr *APIError
	if err := c.do(context.Background(), "GET", "/api/v1/nope", nil, nil, nil); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest {
		t.Fatalf("err %v, want the 400", err)
	}
	if calls.Load() != 11 {
		t.Errorf("%d calls for a 400; want 1", calls.Load()-10)
	}
}

// A client of one server gives up on 503s after followFor, with the server's reason, and
// says at once when the server cannot be reached.
func TestClientOfOneServerGivesUp(t *testing.T) {
	defer func(d time.Duration) { followFor = d }(followFor)
	followFor = 600 * time.Millisecond
	standby := standbyServer(t, func() string { return "" })
	c, err := NewClient(Endpoint{Server: standby.url, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Status(context.Background())
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable || !strings.Contains(apiErr.Error(), "standby") {
		t.Fatalf("err %v, want the standby's 503", err)
	}
	if n := standby.calls.Load(); n < 1 || n > 3 {
		t.Errorf("%d calls in %v with Retry-After 1s; want 1 to 3", n, followFor)
	}

	followFor = time.Minute
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, err = NewClient(Endpoint{Server: "http://" + addr, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var unreachable *UnreachableError
	if _, err := c.Status(ctx); !errors.As(err, &unreachable) {
		t.Fatalf("err %v, want the server unreachable, at once", err)
	}
}

// silentServer takes connections and never answers, as a server whose process is stopped
// does, or, with hangUp, closes each at once. It counts the connections.
func silentServer(t *testing.T, hangUp bool) (url string, conns *atomic.Int64) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns = new(atomic.Int64)
	var held []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			if hangUp {
				c.Close()
			} else {
				held = append(held, c)
			}
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range held {
			c.Close()
		}
	})
	return "https://" + l.Addr().String(), conns
}

// A server of several that takes the connection but never answers (its process stopped,
// its machine frozen), or drops it, is passed over after passOverAfter for the next one:
// the request had not been sent, so even a submit may go elsewhere.
func TestClientPassesOverAServerThatDoesNotAnswer(t *testing.T) {
	defer func(d time.Duration) { passOverAfter = d }(passOverAfter)
	passOverAfter = 300 * time.Millisecond
	stopped, stoppedConns := silentServer(t, false)
	dropping, droppingConns := silentServer(t, true)
	var submits atomic.Int64
	good := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method+" "+r.URL.Path == "POST /api/v1/jobs" {
			submits.Add(1)
			writeTestJSON(w, http.StatusCreated, api.Job{ID: 5, State: api.StatePending})
			return
		}
		writeTestJSON(w, http.StatusNotFound, api.Error{Code: api.CodeNotFound, Message: "no"})
	}))
	good.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake below
	good.StartTLS()
	t.Cleanup(good.Close)
	c, err := NewClient(Endpoint{Server: stopped + "," + dropping + "," + good.URL, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	c.HTTP.Transport.(*http.Transport).TLSClientConfig = good.Client().Transport.(*http.Transport).TLSClientConfig
	j, err := c.Submit(context.Background(), api.JobSpec{Command: []string{"true"}})
	if err != nil || j.ID != 5 {
		t.Fatalf("submit past a stopped and a dropping server: %+v, %v", j, err)
	}
	if stoppedConns.Load() == 0 || droppingConns.Load() == 0 {
		t.Errorf("connections: stopped server %d, dropping server %d; want each tried", stoppedConns.Load(), droppingConns.Load())
	}
	if submits.Load() != 1 || c.BaseURL != good.URL {
		t.Errorf("the answering server got %d submits and the client sticks to %q; want 1 and %q", submits.Load(), c.BaseURL, good.URL)
	}

	// A certificate that does not verify is a refusal, said as it is, not a server to
	// pass over.
	c, err = NewClient(Endpoint{Server: good.URL + "," + stopped, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Submit(context.Background(), api.JobSpec{Command: []string{"true"}})
	var unreachable *UnreachableError
	if err == nil || errors.As(err, &unreachable) || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a server whose certificate does not verify: %v, want that error, not one of reach", err)
	}
}
