package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cli"
	"github.com/rotahq/rota/internal/store/storetest"
)

// TestHAProcesses runs three `rota server` processes on one PostgreSQL database and one
// agent that, like the client, is given all three. A stream of one-GPU jobs goes on while
// the leader is killed with kill -9 (and started again) or has its database session
// terminated, at random points. Afterwards every acknowledged job exists exactly once and
// succeeded, no GPU ran two jobs at once, and each round's failover time (from the fault
// to the first submit a new leader acknowledged) is logged with the median and worst.
//
// The suite runs two rounds, one of each fault; ROTA_HA_SOAK=1 runs ROTA_HA_SOAK_ROUNDS
// (default 30) with the production lease interval of 1s.
func TestHAProcesses(t *testing.T) {
	skipShort(t)
	rounds, leaseInterval := 2, "200ms"
	// Not parallel: three servers, PostgreSQL and an agent at once would slow the other
	// end-to-end tests, whose timing checks are tight, on a small machine.
	if os.Getenv("ROTA_HA_SOAK") == "1" {
		rounds, leaseInterval = 30, "1s"
		if s := os.Getenv("ROTA_HA_SOAK_ROUNDS"); s != "" {
			if _, err := fmt.Sscan(s, &rounds); err != nil || rounds < 1 {
				t.Fatalf("ROTA_HA_SOAK_ROUNDS=%q: want a positive number", s)
			}
		}
	}
	began := time.Now()
	phase := func(what string) { t.Logf("%v: %s", time.Since(began).Round(time.Millisecond), what) }
	dbURL := storetest.StartPostgres(t)
	phase("postgres up")
	rotaBinary(t)
	root, err := os.MkdirTemp("", "rota-ha-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		killProcessesUnder(root)
		os.RemoveAll(root)
	})
	logDir := filepath.Join(root, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}

	type server struct {
		dir, addr string
		p         *proc
	}
	servers := make([]*server, 3)
	var urls []string
	for i := range servers {
		servers[i] = &server{dir: filepath.Join(root, fmt.Sprintf("server-%d", i)), addr: freePort(t)}
		urls = append(urls, "https://"+servers[i].addr)
	}
	start := func(s *server) {
		s.p = startProc(t, logDir, "server-"+filepath.Base(s.dir), nil, "server", "--tls", "--data-dir", s.dir, "--listen", s.addr,
			"--store", dbURL, "--lease-interval", leaseInterval, "--heartbeat-interval", "200ms", "--min-runtime", "0s")
	}
	// The first server creates the cluster and its CA; the others get a copy of the CA, as
	// docs/ha.md says.
	start(servers[0])
	var token, fingerprint string
	waitFor(t, 30*time.Second, "the first server's admin token and CA", func() bool {
		tok, err1 := os.ReadFile(filepath.Join(servers[0].dir, "admin-token"))
		fp, err2 := caFingerprint(filepath.Join(servers[0].dir, "ca", "ca.crt"))
		token, fingerprint = strings.TrimSpace(string(tok)), fp
		return err1 == nil && err2 == nil && token != ""
	})
	phase("first server up")
	for _, s := range servers[1:] {
		copyTree(t, filepath.Join(servers[0].dir, "ca"), filepath.Join(s.dir, "ca"))
		start(s)
	}
	client, err := cli.NewClient(cli.Endpoint{Server: strings.Join(urls, ","), Token: token, CAFingerprint: fingerprint})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var st api.ClusterStatus
	waitFor(t, 30*time.Second, "three replicas and a leader", func() bool {
		st, err = client.Status(ctx)
		return err == nil && len(st.Replicas) == 3 && st.LeaderHeld
	})
	phase("three replicas")
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	// A client given only a standby is answered by the leader, through it, over TLS.
	standby := ""
	for _, r := range st.Replicas {
		if !r.Leader {
			standby = r.URL
		}
	}
	viaStandby, err := cli.NewClient(cli.Endpoint{Server: standby, Token: token, CAFingerprint: fingerprint})
	if err != nil {
		t.Fatal(err)
	}
	// A standby learns the leader's address within a lease interval of its election;
	// until then it answers 503 with nothing done, which a client may send again.
	var setErr error
	waitFor(t, 10*time.Second, "a change sent to the standby "+standby, func() bool {
		_, setErr = viaStandby.SetUser(ctx, api.User{Name: "admin", Role: "admin", UnixUser: u.Username, AllowRoot: os.Geteuid() == 0})
		return setErr == nil || !strings.Contains(setErr.Error(), "no leader is serving yet")
	})
	if setErr != nil {
		t.Fatalf("a change sent to the standby %s: %v", standby, setErr)
	}
	join, err := client.CreateJoinToken(ctx, api.JoinTokenRequest{Node: "n1", Uses: 1})
	if err != nil {
		t.Fatal(err)
	}
	agent := startProc(t, logDir, "agent-n1", nil, "agent", "--server", strings.Join(urls, ","), "--name", "n1", "--fake-gpus", "4",
		"--cpus", "64", "--memory", "256G", "--data-dir", filepath.Join(root, "agent-n1"), "--join", join.Token)
	waitFor(t, 30*time.Second, "node n1 ready", func() bool {
		if agent.exited() {
			t.Fatalf("agent exited:\n%s", tail(agent.output(), maxShownLog))
		}
		list, err := client.Nodes(ctx)
		return err == nil && len(list.Nodes) == 1 && list.Nodes[0].State == api.NodeReady && !list.Nodes[0].Syncing
	})

	phase("cluster up")
	// The stream: two submitters, each with its own client following the leader.
	var (
		mu        sync.Mutex
		acked     = map[string]int64{}
		failed    []string
		lastAcked time.Time
		ackTimes  []time.Time
		stop      = make(chan struct{})
		wg        sync.WaitGroup
	)
	for w := range 2 {
		c, err := cli.NewClient(cli.Endpoint{Server: strings.Join(urls, ","), Token: token, CAFingerprint: fingerprint})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("w%d-%d", w, i)
				j, err := c.Submit(ctx, api.JobSpec{Name: name, GPUs: 1, Command: []string{"sh", "-c", `echo "job $ROTA_JOB_ID"; sleep 0.2`}})
				mu.Lock()
				if err != nil {
					failed = append(failed, name+": "+err.Error())
				} else {
					acked[name] = j.ID
					lastAcked = time.Now()
					ackTimes = append(ackTimes, lastAcked)
				}
				mu.Unlock()
				time.Sleep(100 * time.Millisecond)
			}
		})
	}

	leaderOf := func(st api.ClusterStatus) *server {
		for _, s := range servers {
			if "https://"+s.addr == st.LeaderURL {
				return s
			}
		}
		t.Fatalf("leader %q is none of the servers", st.LeaderURL)
		return nil
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 12))
	var times []time.Duration
	for round := range rounds {
		time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
		st, err := client.Status(ctx)
		if err != nil || !st.LeaderHeld {
			t.Fatalf("round %d: no leader before the fault: %+v %v", round, st, err)
		}
		old := leaderOf(st)
		kill := round%2 == 0
		fault := time.Now()
		if kill {
			old.p.kill()
		} else {
			storetest.TerminateLease(t, dbURL)
		}
		// The failover is over at the first submit acknowledged after a later term began
		// (the old leader is fenced from that moment, so it was the new leader's).
		var began time.Time
		waitFor(t, 60*time.Second, fmt.Sprintf("round %d: a new term acknowledging submits", round), func() bool {
			now, err := client.Status(ctx)
			if err != nil || !now.LeaderHeld || now.Term <= st.Term || now.LeaderSince == nil {
				return false
			}
			began = *now.LeaderSince
			mu.Lock()
			defer mu.Unlock()
			return lastAcked.After(began)
		})
		mu.Lock()
		for _, at := range ackTimes {
			if at.After(began) {
				times = append(times, at.Sub(fault))
				break
			}
		}
		mu.Unlock()
		if kill {
			start(old) // back as a standby
		}
	}
	close(stop)
	wg.Wait()

	sorted := append([]time.Duration(nil), times...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	t.Logf("failover over %d rounds (lease interval %s, kill -9 and session termination alternating): median %v, worst %v; all: %v",
		rounds, leaseInterval, sorted[len(sorted)/2].Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond), times)
	if len(failed) > 0 {
		t.Errorf("%d submits failed (the client follows the leader for 15 s): %v", len(failed), failed[:min(5, len(failed))])
	}

	phase("faults done")
	// Every acknowledged job runs to success exactly once; nothing else was stored.
	var jobs []api.Job
	waitFor(t, 120*time.Second, "every job ended", func() bool {
		jobs, err = client.AllJobs(ctx, cli.ListOptions{States: []string{"all"}})
		if err != nil {
			return false
		}
		for _, j := range jobs {
			if !j.State.Terminal() {
				return false
			}
		}
		return true
	})
	phase("jobs ended")
	byName := map[string][]api.Job{}
	for _, j := range jobs {
		byName[j.Spec.Name] = append(byName[j.Spec.Name], j)
	}
	for name, id := range acked {
		js := byName[name]
		if len(js) != 1 || js[0].ID != id || js[0].State != api.StateSucceeded {
			t.Errorf("acknowledged job %s (ID %d): stored as %+v, want once and SUCCEEDED", name, id, js)
		}
	}
	if len(jobs) != len(acked) {
		t.Errorf("%d jobs stored, %d acknowledged", len(jobs), len(acked))
	}
	// No GPU ran two attempts at once, by the times the agent reported.
	type span struct {
		job        int64
		start, end time.Time
	}
	byGPU := map[string][]span{}
	for _, j := range jobs {
		d, err := client.GetJob(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range d.AttemptList {
			if a.StartTime == nil || a.EndTime == nil {
				continue
			}
			for _, p := range a.Placements {
				for _, g := range p.GPUIDs {
					byGPU[g] = append(byGPU[g], span{j.ID, *a.StartTime, *a.EndTime})
				}
			}
		}
	}
	for g, spans := range byGPU {
		sort.Slice(spans, func(i, j int) bool { return spans[i].start.Before(spans[j].start) })
		for i := 1; i < len(spans); i++ {
			if spans[i].start.Before(spans[i-1].end) {
				t.Errorf("GPU %s ran job %d (from %v) while job %d ran (until %v)", g, spans[i].job, spans[i].start, spans[i-1].job, spans[i-1].end)
			}
		}
	}
	// Every job's log reads whole through whichever server leads now: those that ended
	// under an earlier leader went to its data dir, and the node sends them again.
	for _, j := range jobs {
		var buf strings.Builder
		var chunk cli.LogChunk
		for off := int64(0); ; off += chunk.N {
			if chunk, err = client.Logs(ctx, j.ID, cli.LogOptions{Offset: off}, &buf); err != nil || chunk.Done || chunk.N == 0 {
				break
			}
		}
		if want := fmt.Sprintf("job %d\n", j.ID); buf.String() != want || err != nil || !chunk.Done || chunk.Incomplete != "" {
			t.Errorf("job %d's log through the leader: %q (done %v, incomplete %q, %v); want %q", j.ID, buf.String(), chunk.Done, chunk.Incomplete, err, want)
		}
	}
	phase(fmt.Sprintf("logs read, %d shipped again by the node", strings.Count(agent.output(), "shipping an ended attempt's log again")))
	t.Logf("%d jobs acknowledged and succeeded across %d failovers", len(acked), rounds)
}

// copyTree copies the regular files of src into dst, keeping their modes.
func copyTree(t *testing.T, src, dst string) {
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
