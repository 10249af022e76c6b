package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
	"github.com/rotahq/rota/internal/store/storetest"
)

// replica is one server of a several-server cluster on one PostgreSQL database, served
// over real HTTP (people) and in-process (its agents), as `rota server` serves them.
type replica struct {
	name   string
	url    string // the HTTP API's address, which is also its lease URL
	srv    *Server
	st     store.Store
	lease  *store.Lease
	agent  *http.Client
	cancel context.CancelFunc
	done   chan struct{}
	closed bool
}

// haCluster is a set of replicas on one database; the first one started creates the
// cluster and its CA, which the others' data dirs get a copy of, as docs/ha.md says.
type haCluster struct {
	t        *testing.T
	dbURL    string
	caDir    string
	token    string
	replicas []*replica
	// log, if set, receives every replica's log, each line naming its replica.
	log io.Writer
	// cfg, if set, changes each replica's configuration.
	cfg func(*Config)
}

func newHACluster(t *testing.T, dbURL string) *haCluster {
	return &haCluster{t: t, dbURL: dbURL}
}

// start starts a replica whose lease is checked every interval.
func (c *haCluster) start(name string, interval time.Duration) *replica {
	t := c.t
	t.Helper()
	dir := t.TempDir()
	if c.caDir != "" {
		copyDir(t, c.caDir, filepath.Join(dir, "ca"))
	}
	st, err := store.Open(context.Background(), c.dbURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(nil)
	url := "http://" + hs.Listener.Addr().String()
	lease, err := store.OpenLease(c.dbURL, st, store.LeaseOptions{ID: name, Host: "test", URL: url})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{DataDir: dir, Lease: lease, LeaseInterval: interval, CycleInterval: 20 * time.Millisecond,
		NotReadyAfter: time.Minute, LostAfter: time.Hour}
	if c.cfg != nil {
		c.cfg(&cfg)
	}
	var logger *slog.Logger
	if c.log != nil {
		logger = slog.New(slog.NewTextHandler(c.log, nil)).With("replica", name)
	}
	srv, err := New(context.Background(), cfg, st, logger)
	if err != nil {
		t.Fatalf("start replica %s: %v", name, err)
	}
	if c.caDir == "" {
		c.caDir = filepath.Join(dir, "ca")
		tok, err := os.ReadFile(filepath.Join(dir, "admin-token"))
		if err != nil {
			t.Fatal(err)
		}
		c.token = strings.TrimSpace(string(tok))
	}
	srv.SetURL(url)
	hs.Config.Handler, hs.Config.ConnContext = srv.Handler(), srv.ConnContext
	hs.Start()
	local := NewLocalListener()
	lhs := &http.Server{Handler: srv.Handler(), ConnContext: srv.ConnContext}
	go lhs.Serve(local)
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{name: name, url: url, srv: srv, st: st, lease: lease, agent: local.Client(), cancel: cancel, done: make(chan struct{})}
	go func() { defer close(r.done); srv.Run(ctx) }()
	c.replicas = append(c.replicas, r)
	t.Cleanup(func() {
		r.stop()
		lhs.Close()
		hs.Close()
		srv.Close()
		st.Close()
	})
	return r
}

// copyDir copies the files of src to dst with their modes, as `cp -a` would.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
}

// stop ends the replica's loops, which gives its lease up.
func (r *replica) stop() {
	if !r.closed {
		r.closed = true
		r.cancel()
		<-r.done
	}
}

// call sends a request to r as the first admin and decodes the answer into out.
func (c *haCluster) call(r *replica, method, path string, body, out any, header http.Header) (int, http.Header) {
	c.t.Helper()
	var buf bytes.Buffer
	if body != nil {
		json.NewEncoder(&buf).Encode(body)
	}
	req, _ := http.NewRequest(method, r.url+path, &buf)
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s on %s: %v", method, path, r.name, err)
	}
	defer resp.Body.Close()
	if out != nil {
		json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode, resp.Header
}

func (c *haCluster) status(r *replica) api.ClusterStatus {
	c.t.Helper()
	var st api.ClusterStatus
	if code, _ := c.call(r, "GET", "/api/v1/status", nil, &st, nil); code != http.StatusOK {
		c.t.Fatalf("status on %s: %d", r.name, code)
	}
	return st
}

// leaders are the replicas that take themselves for the leader.
func (c *haCluster) leaders() []*replica {
	var out []*replica
	for _, r := range c.replicas {
		if !r.closed && r.srv.isLeader() {
			out = append(out, r)
		}
	}
	return out
}

// waitForLeader waits until exactly one replica other than not leads, and returns it.
func (c *haCluster) waitForLeader(not *replica, within time.Duration) *replica {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		if ls := c.leaders(); len(ls) == 1 && ls[0] != not {
			return ls[0]
		} else if len(ls) > 1 {
			names := []string{}
			for _, l := range ls {
				names = append(names, l.name)
			}
			c.t.Fatalf("two leaders at once: %v", names)
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no new leader within %v", within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (c *haCluster) byURL(url string) *replica {
	for _, r := range c.replicas {
		if r.url == url {
			return r
		}
	}
	return nil
}

// TestHA runs the several-server tests on one PostgreSQL server, a database each.
func TestHA(t *testing.T) {
	pg := storetest.NewPostgres(t)
	for _, tc := range []struct {
		name string
		run  func(*testing.T, string)
	}{
		{"OneLeaderStandbysRefuse", testHAOneLeader},
		{"DeposedLeaderCommitFails", testHADeposedCommit},
		{"FailoverUnderLoad", testHAFailoverUnderLoad},
		{"ReplicaWithoutTheCARefused", testHAReplicaWithoutCA},
		{"StandbyForwards", testHAStandbyForwards},
		{"AttachThroughStandby", testHAAttachThroughStandby},
		{"StandbySweepsLogs", testHAStandbySweepsLogs},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, pg.NewDatabase(t)) })
	}
}

// TestHAStoreOutage stops the PostgreSQL server under a two-server cluster and starts it
// again, as a database restart or failover does. Meanwhile no server leads, a caller is told
// why without being shown the database's address, and each server's log says once that
// the store is out of reach, not at every lease round. Once the database is back a leader
// is elected, says for how long the store was gone, and has every job acknowledged before.
func TestHAStoreOutage(t *testing.T) {
	pg := storetest.NewPostgres(t)
	dbURL := pg.NewDatabase(t)
	c := newHACluster(t, dbURL)
	var logs syncBuffer
	c.log = &logs
	a := c.start("a", 20*time.Millisecond)
	b := c.start("b", 20*time.Millisecond)
	c.waitForLeader(nil, 10*time.Second)
	var before api.Job
	if code, _ := c.call(a, "POST", "/api/v1/jobs", api.JobSpec{Name: "before", Command: []string{"true"}}, &before, nil); code != http.StatusCreated {
		t.Fatalf("submit before the outage: %d", code)
	}

	pg.Stop(t)
	deadline := time.Now().Add(10 * time.Second)
	for len(c.leaders()) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("a server still leads 10s after its database stopped")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(time.Second) // 50 lease rounds on each server
	for _, r := range []*replica{a, b} {
		var e api.Error
		code, h := c.call(r, "POST", "/api/v1/jobs", api.JobSpec{Name: "during", Command: []string{"true"}}, &e, nil)
		if code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" {
			t.Fatalf("submit to %s while the database is stopped: %d (Retry-After %q), want 503 with Retry-After", r.name, code, h.Get("Retry-After"))
		}
		if !strings.Contains(e.Message, "has not reached the cluster's store since") {
			t.Errorf("%s answered %q, which does not say the store is out of reach", r.name, e.Message)
		}
		if host := strings.TrimPrefix(dbURL, "postgres://"); strings.Contains(e.Message, "127.0.0.1") || strings.Contains(e.Message, host[strings.LastIndex(host, "/")+1:]) {
			t.Errorf("%s showed a caller the database's address: %q", r.name, e.Message)
		}
	}
	for _, r := range []*replica{a, b} {
		if n := strings.Count(logs.String(), `msg="cannot reach the store; trying again every lease interval" replica=`+r.name); n != 1 {
			t.Errorf("%s's log said %d times that it cannot reach the store, want once:\n%s", r.name, n, logs.String())
		}
		if n := strings.Count(logs.String(), "replica="+r.name); n > 10 {
			t.Errorf("%s wrote %d log lines in a second without its database, want a few:\n%s", r.name, n, logs.String())
		}
	}

	pg.Start(t)
	leader := c.waitForLeader(nil, 20*time.Second)
	for i := 0; strings.Count(logs.String(), `msg="reached the store again"`) < 2; i++ {
		if i == 500 {
			t.Fatalf("the servers did not both say the store is back:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	var got api.Job
	if code, _ := c.call(leader, "GET", fmt.Sprintf("/api/v1/jobs/%d", before.ID), nil, &got, nil); code != http.StatusOK || got.Spec.Name != "before" {
		t.Fatalf("job %d acknowledged before the outage: %d %q", before.ID, code, got.Spec.Name)
	}
	var after api.Job
	if code, _ := c.call(leader, "POST", "/api/v1/jobs", api.JobSpec{Name: "after", Command: []string{"true"}}, &after, nil); code != http.StatusCreated {
		t.Fatalf("submit after the outage: %d", code)
	}
	var list api.JobList
	c.call(leader, "GET", "/api/v1/jobs?state=all", nil, &list, nil)
	for _, j := range list.Jobs {
		if j.Spec.Name == "during" {
			t.Errorf("job %d, refused while the database was stopped, exists", j.ID)
		}
	}
}

// Three servers on one database: one leads; the others answer the API through it (and send
// agents to it), schedule nothing, and report the same leader, term and replicas.
func testHAOneLeader(t *testing.T, dbURL string) {
	c := newHACluster(t, dbURL)
	a := c.start("a", 20*time.Millisecond)
	b := c.start("b", 20*time.Millisecond)
	c.start("c", 20*time.Millisecond)
	if ls := c.leaders(); len(ls) != 1 || ls[0] != a {
		t.Fatalf("leaders: %d, want a alone", len(ls))
	}
	// Every replica answers the status, from the store; wait for all three to announce.
	var st api.ClusterStatus
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st = c.status(b); len(st.Replicas) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replicas: %+v, want 3", st.Replicas)
		}
	}
	if st.Store != "postgres" || !st.Lease || st.Term != 1 || st.LeaderURL != a.url || !st.LeaderHeld || st.Answered != "b" || st.AnsweredIsLeader || st.LeaderSince == nil {
		t.Fatalf("status on b: %+v", st)
	}
	if !st.Replicas[0].Leader || st.Replicas[1].Leader || st.Replicas[2].Leader {
		t.Errorf("replica leader flags: %+v", st.Replicas)
	}
	if st := c.status(a); !st.AnsweredIsLeader || st.Term != 1 {
		t.Errorf("status on a: %+v", st)
	}

	// A standby forwards a submit and a list to the leader, which answers them, once it
	// has read from the store where the leader is.
	waitKnowsLeader(t, b, a.url)
	var fj api.Job
	if code, _ := c.call(b, "POST", "/api/v1/jobs", api.JobSpec{Command: []string{"true"}}, &fj, nil); code != http.StatusCreated || fj.ID == 0 {
		t.Fatalf("submit on a standby: %d %+v, want 201 from the leader", code, fj)
	}
	var list api.JobList
	if code, _ := c.call(b, "GET", "/api/v1/jobs", nil, &list, nil); code != http.StatusOK || len(list.Jobs) != 1 || list.Jobs[0].ID != fj.ID {
		t.Errorf("list on a standby: %d %+v, want the leader's list", code, list.Jobs)
	}
	// Agents, whose identity is their connection's, are sent on as before.
	// Agents are sent on as well.
	req, _ := http.NewRequest("POST", "http://rota-up/api/v1/agents/n1/heartbeat", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.agent.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(api.LeaderHeader) != a.url {
		t.Fatalf("heartbeat on a standby: %d %q", resp.StatusCode, resp.Header.Get(api.LeaderHeader))
	}
	var j api.Job
	if code, _ := c.call(a, "POST", "/api/v1/jobs", api.JobSpec{Command: []string{"true"}}, &j, nil); code != http.StatusCreated {
		t.Fatalf("submit on the leader: %d", code)
	}
	// A standby's cycle is a no-op even when called: only the leader schedules.
	if err := b.srv.Cycle(context.Background()); err != nil {
		t.Fatalf("standby cycle: %v", err)
	}

	// A leader that stops cleanly hands over at once, and the new one has the job.
	a.stop()
	next := c.waitForLeader(a, 5*time.Second)
	var got api.JobDetail
	if code, _ := c.call(next, "GET", fmt.Sprintf("/api/v1/jobs/%d", j.ID), nil, &got, nil); code != http.StatusOK {
		t.Fatalf("job %d on the new leader: %d", j.ID, code)
	}
	if st := c.status(next); st.Term != 2 || st.LeaderURL != next.url {
		t.Errorf("status after handover: %+v", st)
	}
}

// A leader whose session ended, and which has not noticed (its lease is checked only
// hourly here), still takes itself for the leader; its next commit fails on the term
// check, writes nothing, and sends the caller to the new leader.
func testHADeposedCommit(t *testing.T, dbURL string) {
	c := newHACluster(t, dbURL)
	a := c.start("a", time.Hour)
	b := c.start("b", 10*time.Millisecond)
	storetest.TerminateLease(t, dbURL)
	for deadline := time.Now().Add(10 * time.Second); !b.srv.isLeader(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("b never took over")
		}
	}
	if !a.srv.isLeader() {
		t.Fatal("a noticed its loss; the test needs it not to")
	}
	var e api.Error
	code, _ := c.call(a, "POST", "/api/v1/jobs", api.JobSpec{Name: "late", Command: []string{"true"}}, &e, nil)
	if code != http.StatusServiceUnavailable || !strings.Contains(e.Message, "term") {
		t.Fatalf("deposed leader's submit: %d %q, want 503 naming the term", code, e.Message)
	}
	if a.srv.isLeader() {
		t.Fatal("a still leads after its commit was refused")
	}
	var list api.JobList
	if code, _ := c.call(b, "GET", "/api/v1/jobs?state=all", nil, &list, nil); code != http.StatusOK || len(list.Jobs) != 0 {
		t.Fatalf("jobs on the new leader: %d %+v, want none", code, list.Jobs)
	}
	// a now answers through b, the leader, and sends agents to it.
	waitKnowsLeader(t, a, b.url)
	if code, _ := c.call(a, "GET", "/api/v1/jobs?state=all", nil, &list, nil); code != http.StatusOK || len(list.Jobs) != 0 {
		t.Fatalf("jobs through the deposed leader: %d %+v, want b's answer", code, list.Jobs)
	}
	req, _ := http.NewRequest("POST", "http://rota-up/api/v1/agents/n1/heartbeat", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.agent.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(api.LeaderHeader) != b.url {
		t.Fatalf("heartbeat on the deposed leader: %d, naming %q, want b", resp.StatusCode, resp.Header.Get(api.LeaderHeader))
	}
}

// haNode is an agent that follows the leader: it runs whatever it is given, checks that
// no GPU is handed to two of its tasks at once, and ends each task after a few beats.
type haNode struct {
	name    string
	gpus    int
	running map[api.TaskRef]*haTask
	ended   map[api.TaskRef]api.TaskStatus
	server  *replica
}

type haTask struct {
	gpus  []int
	beats int
	start time.Time
}

func (c *haCluster) beat(n *haNode) error {
	inv := api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake"}
	for i := range n.gpus {
		inv.GPUs = append(inv.GPUs, api.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", n.name, i), Model: "H100", MemoryMB: 81559, Healthy: true})
	}
	var tasks []api.TaskStatus
	for ref, tk := range n.running {
		start := tk.start
		tasks = append(tasks, api.TaskStatus{JobID: ref.JobID, Attempt: ref.Attempt, State: api.StateRunning, PID: 1, StartTime: &start})
	}
	for _, ts := range n.ended {
		tasks = append(tasks, ts)
	}
	hb := api.Heartbeat{Node: n.name, Inventory: inv, Tasks: tasks, Instance: "agent-" + n.name, ClusterID: n.server.srv.ClusterID(), Synced: true}
	body, _ := json.Marshal(hb)
	req, _ := http.NewRequest("POST", "http://rota-up/api/v1/agents/"+n.name+"/heartbeat", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.server.agent.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		if next := c.byURL(resp.Header.Get(api.LeaderHeader)); next != nil {
			n.server = next
		}
		return nil
	}
	if resp.StatusCode != http.StatusOK {
		var e api.Error
		json.NewDecoder(resp.Body).Decode(&e)
		return fmt.Errorf("heartbeat %s: %d %s", n.name, resp.StatusCode, e.Message)
	}
	var out api.HeartbeatResponse
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return err
	}
	for _, ack := range out.Acked {
		delete(n.ended, ack)
	}
	for _, task := range out.Tasks {
		ref := api.TaskRef{JobID: task.JobID, Attempt: task.Attempt}
		if _, ok := n.running[ref]; ok {
			if task.Stop {
				delete(n.running, ref)
			}
			continue
		}
		if _, ok := n.ended[ref]; ok || task.Stop {
			continue
		}
		for other, tk := range n.running {
			for _, g := range task.GPUIndices {
				if slices.Contains(tk.gpus, g) {
					return fmt.Errorf("GPU %d of %s given to job %d attempt %d while job %d attempt %d holds it",
						g, n.name, task.JobID, task.Attempt, other.JobID, other.Attempt)
				}
			}
		}
		n.running[ref] = &haTask{gpus: task.GPUIndices, start: time.Now()}
	}
	for ref, tk := range n.running {
		if tk.beats++; tk.beats >= 3 {
			delete(n.running, ref)
			code, end := 0, time.Now()
			start := tk.start
			n.ended[ref] = api.TaskStatus{JobID: ref.JobID, Attempt: ref.Attempt, State: api.StateSucceeded, ExitCode: &code, StartTime: &start, EndTime: &end}
		}
	}
	return nil
}

// submitter sends jobs to whichever replica leads, following the Rota-Leader header, each
// with an Idempotency-Key it reuses until the submit is acknowledged.
type submitter struct {
	c      *haCluster
	server *replica
	mu     sync.Mutex
	acked  map[string]int64 // job name → ID
}

func (s *submitter) submit(name string) {
	key := "key-" + name
	for {
		var buf bytes.Buffer
		json.NewEncoder(&buf).Encode(api.JobSpec{Name: name, GPUs: 1, Command: []string{"train"}})
		req, _ := http.NewRequest("POST", s.server.url+"/api/v1/jobs", &buf)
		req.Header.Set("Authorization", "Bearer "+s.c.token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		var j api.Job
		json.NewDecoder(resp.Body).Decode(&j)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusCreated, http.StatusOK:
			s.mu.Lock()
			s.acked[name] = j.ID
			s.mu.Unlock()
			return
		case http.StatusServiceUnavailable:
			if next := s.c.byURL(resp.Header.Get(api.LeaderHeader)); next != nil {
				s.server = next
			} else {
				time.Sleep(5 * time.Millisecond)
			}
		default:
			s.c.t.Errorf("submit %s: status %d", name, resp.StatusCode)
			return
		}
	}
}

// failoverRound runs submits and two fake nodes against the cluster, ends the leader's
// database session once some submits are acknowledged, and returns how long it took from
// the session's end until a new leader acknowledged a submit.
func (c *haCluster) failoverRound(round, perRound int, nodes []*haNode, sub *submitter) time.Duration {
	t := c.t
	t.Helper()
	old := c.waitForLeader(nil, 10*time.Second)
	oldTerm := c.status(old).Term
	stop := make(chan struct{})
	beatErr := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			for _, n := range nodes {
				if err := c.beat(n); err != nil {
					beatErr <- err
					return
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	var killed time.Time
	var recovered time.Duration
	for i := range perRound {
		if i == perRound/2 {
			storetest.TerminateLease(t, c.dbURL)
			killed = time.Now()
		}
		sub.submit(fmt.Sprintf("r%d-j%d", round, i))
		// Recovered once a submit is acknowledged in a new term: by another server, or by
		// the old one if it won the free lease back first (a busy machine lets it).
		if !killed.IsZero() && recovered == 0 && (sub.server != old || c.status(old).Term > oldTerm) {
			recovered = time.Since(killed)
		}
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-beatErr:
		t.Fatal(err)
	default:
	}
	if recovered == 0 {
		t.Fatalf("round %d: submits kept going to the old leader %s in term %d", round, old.name, oldTerm)
	}
	return recovered
}

// Submissions and completions go on while the leader's session is terminated: every
// acknowledged job exists exactly once on the new leader, no GPU is given to two tasks at
// once (the fake nodes check every task they are given), and scheduling resumes.
func testHAFailoverUnderLoad(t *testing.T, dbURL string) {
	c := newHACluster(t, dbURL)
	for _, name := range []string{"a", "b", "c"} {
		c.start(name, 20*time.Millisecond)
	}
	leader := c.waitForLeader(nil, 5*time.Second)
	nodes := []*haNode{
		{name: "n1", gpus: 4, running: map[api.TaskRef]*haTask{}, ended: map[api.TaskRef]api.TaskStatus{}, server: leader},
		{name: "n2", gpus: 4, running: map[api.TaskRef]*haTask{}, ended: map[api.TaskRef]api.TaskStatus{}, server: leader},
	}
	sub := &submitter{c: c, server: leader, acked: map[string]int64{}}
	rounds := 2
	if os.Getenv("ROTA_HA_SOAK") != "" {
		rounds = 30
	}
	var times []time.Duration
	for round := range rounds {
		times = append(times, c.failoverRound(round, 40, nodes, sub))
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	t.Logf("failover (session terminated → first submit acknowledged by the new leader) over %d rounds: median %v, worst %v",
		len(times), times[len(times)/2].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond))

	// Let the nodes drain the queue on the last leader: scheduling resumed.
	leader = c.waitForLeader(nil, 5*time.Second)
	for _, n := range nodes {
		n.server = leader
	}
	var list api.JobList
	for deadline := time.Now().Add(30 * time.Second); ; {
		for _, n := range nodes {
			if err := c.beat(n); err != nil {
				t.Fatal(err)
			}
		}
		if code, _ := c.call(leader, "GET", "/api/v1/jobs?state=all&limit=1000", nil, &list, nil); code != http.StatusOK {
			t.Fatalf("list: %d", code)
		}
		done := 0
		for _, j := range list.Jobs {
			if j.State == api.StateSucceeded {
				done++
			}
		}
		if done == len(list.Jobs) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs succeeded; scheduling did not resume", done, len(list.Jobs))
		}
		time.Sleep(5 * time.Millisecond)
	}
	byName := map[string][]int64{}
	for _, j := range list.Jobs {
		byName[j.Spec.Name] = append(byName[j.Spec.Name], j.ID)
	}
	if len(sub.acked) != rounds*40 {
		t.Fatalf("%d submits acknowledged, want %d", len(sub.acked), rounds*40)
	}
	for name, id := range sub.acked {
		if ids := byName[name]; len(ids) != 1 || ids[0] != id {
			t.Errorf("acknowledged job %s (ID %d) stored as %v, want exactly once", name, id, ids)
		}
	}
	if len(list.Jobs) != len(sub.acked) {
		t.Errorf("%d jobs stored, %d acknowledged", len(list.Jobs), len(sub.acked))
	}
}

// A replica joining an existing cluster without its CA would make one of its own, which
// agents and clients of the cluster would refuse: it is stopped at start instead, having
// written nothing.
func testHAReplicaWithoutCA(t *testing.T, dbURL string) {
	c := newHACluster(t, dbURL)
	c.start("a", 20*time.Millisecond)
	st, err := store.Open(context.Background(), dbURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lease, err := store.OpenLease(dbURL, st, store.LeaseOptions{ID: "b", URL: "http://b"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	_, err = New(context.Background(), Config{DataDir: dir, Lease: lease}, st, nil)
	if err == nil || !strings.Contains(err.Error(), "copy the ca directory") {
		t.Fatalf("New without the CA: %v, want an error saying to copy it", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ca")); !os.IsNotExist(err) {
		t.Errorf("a CA was made in the refused replica's data dir: %v", err)
	}
}

// With SQLite there is one server: it leads, with no lease and term 0.
func TestStatusOnSQLite(t *testing.T) {
	h := newHarness(t)
	h.srv.SetURL("https://rota-1:7070")
	var st api.ClusterStatus
	if code := h.do("GET", "/api/v1/status", nil, &st); code != http.StatusOK {
		t.Fatalf("status: %d", code)
	}
	if st.Store != "sqlite" || st.Lease || st.Term != 0 || !st.LeaderHeld || st.LeaderURL != "https://rota-1:7070" ||
		!st.AnsweredIsLeader || len(st.Replicas) != 1 || !st.Replicas[0].Leader || st.Replicas[0].URL != "https://rota-1:7070" {
		t.Fatalf("status on SQLite: %+v", st)
	}
}
