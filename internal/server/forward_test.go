package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
)

// serveTLS serves r's API over TLS with a certificate of the cluster CA, as `rota server
// --tls` does, and returns its https:// URL.
func serveTLS(t *testing.T, r *replica) string {
	t.Helper()
	cert, err := r.srv.CA().ServerCertificate([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(r.srv.Handler())
	ts.TLS = auth.ServerTLSConfig(r.srv.CA(), cert)
	ts.Config.ConnContext = r.srv.ConnContext
	ts.StartTLS()
	t.Cleanup(ts.Close)
	return ts.URL
}

// waitKnowsLeader waits until standby r has read from the store that url leads.
func waitKnowsLeader(t *testing.T, r *replica, url string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if u := r.srv.leaderURL.Load(); u != nil && *u == url {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("standby %s never learnt that %s leads", r.name, url)
		}
	}
}

// pointAt makes r take url for the leader's address. The replicas it is used on check the
// lease hourly, so the lease loop does not overwrite it during the test.
func pointAt(r *replica, url string) { r.srv.leaderURL.Store(&url) }

// raw sends a request with exactly the given headers to url with client and returns the
// status, the headers and the decoded error, if any.
func raw(t *testing.T, client *http.Client, method, url string, body []byte, header map[string]string) (int, http.Header, api.Error) {
	t.Helper()
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	var e api.Error
	data, _ := io.ReadAll(resp.Body)
	json.Unmarshal(data, &e)
	return resp.StatusCode, resp.Header, e
}

// A standby forwards what it can to the leader over TLS trusting the cluster CA, never
// lets a caller pass for someone through it, never forwards a forwarded request, and
// answers 503 only when nothing was done.
func testHAStandbyForwards(t *testing.T, dbURL string) {
	c := newHACluster(t, dbURL)
	a := c.start("a", 20*time.Millisecond)
	b := c.start("b", time.Hour)
	sc := c.start("c", time.Hour)
	waitKnowsLeader(t, b, a.url)
	aTLS, bTLS := serveTLS(t, a), serveTLS(t, b)
	pointAt(b, aTLS)
	pin, err := auth.ClientTLSConfig(auth.Pin{Fingerprint: a.srv.CA().Fingerprint()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: pin}}
	admin := map[string]string{"Authorization": "Bearer " + c.token}
	jobs := func() []api.Job {
		var l api.JobList
		if code, _ := c.call(a, "GET", "/api/v1/jobs", nil, &l, nil); code != http.StatusOK {
			t.Fatalf("list on the leader: %d", code)
		}
		return l.Jobs
	}

	// A submit through the standby is the leader's, and so is its idempotent replay.
	spec, _ := json.Marshal(api.JobSpec{Name: "via-b", Command: []string{"true"}})
	keyed := map[string]string{"Authorization": admin["Authorization"], "Idempotency-Key": "k1"}
	for i, want := range []int{http.StatusCreated, http.StatusOK} {
		if code, _, e := raw(t, client, "POST", bTLS+"/api/v1/jobs", spec, keyed); code != want {
			t.Fatalf("submit %d through the standby: %d %q, want %d", i+1, code, e.Message, want)
		}
	}
	if js := jobs(); len(js) != 1 || js[0].Spec.Name != "via-b" {
		t.Fatalf("jobs on the leader after two submits with one key through the standby: %+v", js)
	}

	// The standby vouches for nobody: a call without a token is anonymous on the leader.
	if code, _, e := raw(t, client, "GET", bTLS+"/api/v1/jobs", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("anonymous list through the standby: %d %q, want 401 from the leader", code, e.Message)
	}
	hb, _ := json.Marshal(api.Heartbeat{Node: "gpu-01", Instance: "i1", ClusterID: a.srv.ClusterID(), Inventory: api.Inventory{DeviceSource: "fake"}})
	if code, _, e := raw(t, client, "POST", bTLS+"/api/v1/agents/gpu-01/heartbeat", hb, nil); code != http.StatusUnauthorized {
		t.Errorf("a heartbeat without a certificate through the standby: %d %q, want 401", code, e.Message)
	}
	// The forwarding header is no credential, sent to the leader or to a standby.
	forged := map[string]string{api.ForwardedByHeader: "b", "X-Forwarded-For": "127.0.0.1"}
	if code, _, _ := raw(t, client, "GET", aTLS+"/api/v1/users", nil, forged); code != http.StatusUnauthorized {
		t.Errorf("users on the leader with a forged forwarding header: %d, want 401", code)
	}
	forged["Authorization"] = admin["Authorization"]
	if code, h, _ := raw(t, client, "POST", bTLS+"/api/v1/jobs", spec, forged); code != http.StatusServiceUnavailable || h.Get(api.LeaderHeader) != aTLS {
		t.Errorf("a submit to the standby claiming to be forwarded: %d %q, want 503 naming the leader", code, h.Get(api.LeaderHeader))
	}

	// A node joins through the standby (the join token is in the body), but its
	// certificate stays with its connection: its heartbeat is sent to the leader.
	var nj api.NewJoinToken
	tokBody, _ := json.Marshal(api.JoinTokenRequest{})
	req, _ := http.NewRequest("POST", bTLS+"/api/v1/join-tokens", bytes.NewReader(tokBody))
	req.Header.Set("Authorization", admin["Authorization"])
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&nj)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("join token through the standby: %d", resp.StatusCode)
	}
	key, _ := auth.NewNodeKey()
	csr, _ := auth.NodeCSR(key, "gpu-01")
	jb, _ := json.Marshal(api.JoinRequest{Token: nj.Token, Node: "gpu-01", CSR: string(csr)})
	resp, err = client.Post(bTLS+"/api/v1/join", "application/json", bytes.NewReader(jb))
	if err != nil {
		t.Fatal(err)
	}
	var jr api.JoinResponse
	json.NewDecoder(resp.Body).Decode(&jr)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || jr.Certificate == "" {
		t.Fatalf("join through the standby: %d", resp.StatusCode)
	}
	node := nodeClient(t, jr, "gpu-01", key)
	if code, h, _ := raw(t, node, "POST", bTLS+"/api/v1/agents/gpu-01/heartbeat", hb, nil); code != http.StatusServiceUnavailable || h.Get(api.LeaderHeader) != aTLS {
		t.Errorf("a node's heartbeat on the standby: %d %q, want 503 naming the leader", code, h.Get(api.LeaderHeader))
	}
	if code, _, e := raw(t, node, "POST", aTLS+"/api/v1/agents/gpu-01/heartbeat", hb, nil); code != http.StatusOK {
		t.Errorf("the node's heartbeat on the leader: %d %q", code, e.Message)
	}

	// Loop: a standby taken for the leader refuses what another forwards to it.
	pointAt(b, sc.url)
	if code, _, e := raw(t, client, "POST", bTLS+"/api/v1/jobs", spec, admin); code != http.StatusServiceUnavailable {
		t.Errorf("a submit forwarded to another standby: %d %q, want 503", code, e.Message)
	}
	// Nor does a standby forward to itself, should the store still name it.
	pointAt(b, b.url)
	if code, _, _ := raw(t, client, "POST", bTLS+"/api/v1/jobs", spec, admin); code != http.StatusServiceUnavailable {
		t.Errorf("a submit on a standby that the store names: %d, want 503", code)
	}

	// A leader that cannot be reached: 503, Retry-After, and no leader named.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	ln.Close()
	pointAt(b, gone)
	if code, h, e := raw(t, client, "POST", bTLS+"/api/v1/jobs", spec, admin); code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" ||
		h.Get(api.LeaderHeader) != "" || !strings.Contains(e.Message, gone) {
		t.Errorf("a submit while the leader is unreachable: %d %q %q", code, h.Get(api.LeaderHeader), e.Message)
	}
	// A server whose certificate another CA issued is no leader of this cluster.
	impostor := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the standby sent %s %s to a server of another CA", r.Method, r.URL.Path)
	}))
	defer impostor.Close()
	pointAt(b, impostor.URL)
	if code, _, e := raw(t, client, "POST", bTLS+"/api/v1/jobs", spec, admin); code != http.StatusServiceUnavailable {
		t.Errorf("a submit with a leader of another CA: %d %q, want 503", code, e.Message)
	}

	// A leader lost after the request reached it: the outcome is unknown, so 502 (which
	// no client sends elsewhere), and the standby does not send it again.
	var hits atomic.Int32
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.ReadAll(r.Body)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer cut.Close()
	pointAt(b, cut.URL)
	keyed["Idempotency-Key"] = "k2"
	if code, _, e := raw(t, client, "POST", bTLS+"/api/v1/jobs", spec, keyed); code != http.StatusBadGateway || e.Code != api.CodeForwardFailed {
		t.Errorf("a submit whose connection to the leader broke: %d %q %q, want 502 forward_failed", code, e.Code, e.Message)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("the leader got the submit %d times, want once", n)
	}
	// A read changes nothing, so the caller may send it elsewhere.
	if code, _, _ := raw(t, client, "GET", bTLS+"/api/v1/jobs", nil, admin); code != http.StatusServiceUnavailable {
		t.Errorf("a list whose connection to the leader broke: %d, want 503", code)
	}
	if js := jobs(); len(js) != 1 {
		t.Errorf("jobs on the leader: %d, want the one submitted through the standby", len(js))
	}
}

// A terminal attached through a standby reaches the job: the WebSocket upgrade and its
// frames pass through the forwarding both ways.
func testHAAttachThroughStandby(t *testing.T, dbURL string) {
	c := newHACluster(t, dbURL)
	a := c.start("a", 20*time.Millisecond)
	b := c.start("b", time.Hour)
	waitKnowsLeader(t, b, a.url)
	n := &haNode{name: "n1", gpus: 1, running: map[api.TaskRef]*haTask{}, ended: map[api.TaskRef]api.TaskStatus{}, server: a}
	if err := c.beat(n); err != nil {
		t.Fatal(err)
	}
	var j api.Job
	if code, _ := c.call(b, "POST", "/api/v1/jobs", api.JobSpec{Command: []string{"bash"}, GPUs: 1, TTY: true, Queue: "interactive"}, &j, nil); code != http.StatusCreated {
		t.Fatalf("submit a job with a terminal through the standby: %d", code)
	}
	if err := a.srv.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	n.running[api.TaskRef{JobID: j.ID, Attempt: 1}] = &haTask{start: time.Now()}
	if err := c.beat(n); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	term, resp, err := websocket.Dial(ctx, fmt.Sprintf("%s/api/v1/jobs/%d/attach", b.url, j.ID),
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + c.token}}})
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("attach through the standby: %v (status %d)", err, status)
	}
	defer term.CloseNow()
	agent, _, err := websocket.Dial(ctx, fmt.Sprintf("http://rota-up/api/v1/agents/n1/attach/%d/1", j.ID), &websocket.DialOptions{HTTPClient: a.agent})
	if err != nil {
		t.Fatalf("the agent offering the terminal on the leader: %v", err)
	}
	defer agent.CloseNow()
	writeFrame(t, term, []byte("dls\n"))
	if got := readFrame(t, agent); string(got) != "dls\n" {
		t.Errorf("the agent got %q; want the keys typed through the standby", got)
	}
	writeFrame(t, agent, []byte("dhello\r\n"))
	if got := readFrame(t, term); string(got) != "dhello\r\n" {
		t.Errorf("the terminal got %q through the standby; want the job's output", got)
	}
}
