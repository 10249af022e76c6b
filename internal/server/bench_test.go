package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
	"github.com/rotahq/rota/internal/store"
)

// End-to-end benchmarks: a real server over a real SQLite file, answering real HTTP on
// loopback, with simulated agents (one goroutine per node, many in one process).

// benchEnv is a server for benchmarks: clients reach it over loopback TCP with the first
// admin's token, simulated agents through the in-process connection.
type benchEnv struct {
	srv    *Server
	hs     *httptest.Server
	token  string
	agents *http.Client
}

func benchServer(b *testing.B, configure ...func(*Config)) *benchEnv {
	b.Helper()
	dir := b.TempDir()
	st, err := store.Open(context.Background(), "sqlite://"+filepath.Join(dir, "rota.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{DataDir: dir, HeartbeatInterval: 50 * time.Millisecond, CycleInterval: 20 * time.Millisecond}
	for _, f := range configure {
		f(&cfg)
	}
	srv, err := New(context.Background(), cfg, st, nil)
	if err != nil {
		b.Fatal(err)
	}
	// A benchmark submits far faster than one person may.
	srv.mu.Lock()
	_, e := srv.applyConfig(context.Background(), []byte("limits: {submits_per_second: 1000000, submit_burst: 10000000, max_pending_per_user: 10000000}\n"), api.Event{Actor: "bench"})
	srv.mu.Unlock()
	if e != nil {
		b.Fatal(e.Message)
	}
	token, err := os.ReadFile(filepath.Join(dir, "admin-token"))
	if err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(srv.Handler())
	hs.Config.ConnContext = srv.ConnContext
	hs.Start()
	local := NewLocalListener()
	ls := &http.Server{Handler: srv.Handler(), ConnContext: srv.ConnContext}
	go ls.Serve(local)
	b.Cleanup(func() { ls.Close(); hs.Close(); srv.Close(); st.Close() })
	return &benchEnv{srv: srv, hs: hs, token: strings.TrimSpace(string(token)), agents: local.Client()}
}

// post sends body as JSON with the token, if any, and decodes the answer into out.
func post(client *http.Client, url, token string, body any, out any) error {
	data, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", url, bytes.NewReader(data))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s: status %d", url, resp.StatusCode)
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	// Drained, so the connection is used again as a client with keep-alive would.
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// BenchmarkSubmit measures durable submissions: each op is one POST /api/v1/jobs answered
// only after its commit to SQLite, from 8 and from 64 concurrent clients, each with its
// own connection. Concurrent submits share group commits (groupcommit.go).
func BenchmarkSubmit(b *testing.B) {
	for _, clients := range []int{8, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			benchSubmits(b, benchServer(b), clients, api.JobSpec{Command: []string{"true"}, User: "bench"})
		})
	}
}

// BenchmarkSubmitIntoLargeStore is BenchmarkSubmit's 64 clients sending idempotency keys,
// as rota submit does, into a store that already holds 100,000 jobs and their keys: the
// scale suite's queue, without its fleet. The store's indexes and pages are then larger
// than SQLite's page cache, as on a cluster that has run for a while. keys=cli sends the
// keys rota submit makes, which grow with time; keys=random sends random ones, as the
// CLI did before and an API client may, each of which lands on its own page of the
// index of keys.
func BenchmarkSubmitIntoLargeStore(b *testing.B) {
	for _, keys := range []struct {
		name string
		make func() string
	}{{"cli", func() string { return api.NewIdempotencyKey(time.Now()) }}, {"random", randomKey}} {
		b.Run("keys="+keys.name, func(b *testing.B) {
			env := benchServer(b)
			for range 10 {
				spec := api.JobSpec{Command: []string{"true"}, User: "bench", Array: "0-9999", Hold: true, Name: "backlog"}
				if err := post(http.DefaultClient, env.hs.URL+"/api/v1/jobs", env.token, spec, nil); err != nil {
					b.Fatal(err)
				}
			}
			// A day's keys, as a busy cluster remembers.
			now := env.srv.cfg.Clock.Now()
			recs := make([]store.IdempotencyRecord, 100_000)
			for i := range recs {
				recs[i] = store.IdempotencyRecord{User: "admin", Key: keys.make(), Hash: "h", JobID: int64(i + 1), Created: now}
			}
			env.srv.mu.Lock()
			err := env.srv.commit(context.Background(), &store.Batch{Idempotency: recs})
			env.srv.mu.Unlock()
			if err != nil {
				b.Fatal(err)
			}
			benchKeyedSubmits(b, env, api.JobSpec{Command: []string{"true"}, User: "bench", GPUs: 1}, keys.make)
		})
	}
}

// randomKey is 96 random bits in hex.
func randomKey() string {
	k := make([]byte, 12)
	rand.Read(k)
	return hex.EncodeToString(k)
}

// BenchmarkSubmitWhileCycling is BenchmarkSubmit's clients at the scale suite's size
// (10,000 full nodes of 8 GPUs, 69,000 jobs waiting) with cycles run as the server's loop
// runs them (cycleDue, loopCycle: each long one followed by as long a rest): what submits
// wait for is the lock the cycles take, and the CPU. It reports the submits' p99 latency
// and the cycles run per second too. stall=off makes every submit's change due for a
// cycle, as before arrivals that cannot start could be left to the recompute (stall.go);
// stall=on is the server's setting.
func BenchmarkSubmitWhileCycling(b *testing.B) {
	env := benchServer(b)
	benchFill(b, env, 10_000, 8, 69_000)
	for _, stall := range []string{"off", "on"} {
		for _, clients := range []int{8, 64} {
			b.Run(fmt.Sprintf("stall=%s/clients=%d", stall, clients), func(b *testing.B) {
				defer func(d time.Duration) { stallAfter = d }(stallAfter)
				if stall == "off" {
					stallAfter = time.Duration(1 << 62)
				}
				benchSubmitsWhileCycling(b, env, clients)
			})
		}
	}
}

// BenchmarkSubmitWhileBorrowing is BenchmarkSubmitWhileCycling's 64 clients on a cluster
// whose running jobs all borrow: they belong to 25 teams with no guarantee, each within
// its limit. The arrivals, of a team with no guarantee either, can take nothing back:
// with the stall on they make no cycle due, as on a cluster where nothing borrows; with
// it off, each makes one due, as every arrival did while any job borrowed before the
// stall weighed guarantees.
func BenchmarkSubmitWhileBorrowing(b *testing.B) {
	env := benchServer(b)
	const teams = 25
	config := "limits: {submits_per_second: 1000000, submit_burst: 10000000, max_pending_per_user: 10000000}\nteams:\n" +
		"  - name: default\n    quotas: {\"*\": {guaranteed: 0, limit: 4096}}\n"
	for t := range teams {
		config += fmt.Sprintf("  - name: t%02d\n    quotas: {\"*\": {guaranteed: 0, limit: 4096}}\n", t)
	}
	env.srv.mu.Lock()
	_, e := env.srv.applyConfig(context.Background(), []byte(config), api.Event{Actor: "bench"})
	env.srv.mu.Unlock()
	if e != nil {
		b.Fatal(e.Message)
	}
	benchFillWith(b, env, 10_000, 8, 69_000, func(j *api.Job) {
		j.Spec.Team = fmt.Sprintf("t%02d", j.ID%teams)
		j.Borrowing = j.State == api.StateRunning
	})
	for _, stall := range []string{"off", "on"} {
		b.Run("stall="+stall, func(b *testing.B) {
			defer func(d time.Duration) { stallAfter = d }(stallAfter)
			if stall == "off" {
				stallAfter = time.Duration(1 << 62)
			}
			// From a settled loop: a cycle of the queue the last run left runs untimed, so
			// that the first run with the stall on does not time the cycle that begins it.
			env.srv.loopCycle(context.Background())
			benchSubmitsWhileCycling(b, env, 64)
		})
	}
}

func benchSubmitsWhileCycling(b *testing.B, env *benchEnv, clients int) {
	ctx, cancel := context.WithCancel(context.Background())
	cycled := make(chan int)
	go func() {
		// The server's loop (Run) without its liveness checks: the benchmark's nodes
		// send no heartbeats.
		n := 0
		tick := time.NewTicker(env.srv.cfg.CycleInterval)
		defer tick.Stop()
		for ctx.Err() == nil {
			if env.srv.cycleDue() {
				env.srv.loopCycle(ctx)
				n++
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			case <-env.srv.kick:
			}
		}
		cycled <- n
	}()
	body, _ := json.Marshal(api.JobSpec{Command: []string{"true"}, User: "bench", GPUs: 1})
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism(max(1, clients/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
		var mine []time.Duration
		for pb.Next() {
			t0 := time.Now()
			req, _ := http.NewRequest("POST", env.hs.URL+"/api/v1/jobs", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+env.token)
			if status, err := doDrained(client, req); err != nil || status != http.StatusCreated {
				b.Errorf("submit: status %d, %v", status, err)
				return
			}
			mine = append(mine, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	took := time.Since(start)
	b.StopTimer()
	cancel()
	cycles := <-cycled
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/took.Seconds(), "submits/s")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(cycles)/took.Seconds(), "cycles/s")
}

// benchSubmits times b.N submits of spec from clients concurrent clients, each with its
// own connection, and reports submits per second.
func benchSubmits(b *testing.B, env *benchEnv, clients int, spec api.JobSpec) {
	b.SetParallelism(max(1, clients/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
		for pb.Next() {
			if err := post(client, env.hs.URL+"/api/v1/jobs", env.token, spec, nil); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "submits/s")
}

// BenchmarkSubmitWithKeys is BenchmarkSubmit's 64 clients sending, as rota submit does, an
// Idempotency-Key with each submit, into a server that remembers a day's keys (100,000).
func BenchmarkSubmitWithKeys(b *testing.B) {
	env := benchServer(b)
	now := env.srv.cfg.Clock.Now()
	recs := make([]store.IdempotencyRecord, 100_000)
	for i := range recs {
		recs[i] = store.IdempotencyRecord{User: "admin", Key: fmt.Sprintf("old-%d", i), Hash: "h", JobID: int64(i + 1),
			Created: now.Add(-time.Duration(i) * 800 * time.Millisecond)}
	}
	env.srv.mu.Lock()
	err := env.srv.commit(context.Background(), &store.Batch{Idempotency: recs})
	env.srv.mu.Unlock()
	if err != nil {
		b.Fatal(err)
	}
	var n atomic.Int64
	benchKeyedSubmits(b, env, api.JobSpec{Command: []string{"true"}, User: "bench"}, func() string { return fmt.Sprintf("new-%d", n.Add(1)) })
}

// benchKeyedSubmits times b.N submits of spec from 64 concurrent clients, each with its
// own connection, each submit with an Idempotency-Key of its own (from key), as rota
// submit sends, and reports submits per second.
func benchKeyedSubmits(b *testing.B, env *benchEnv, spec api.JobSpec, key func() string) {
	body, _ := json.Marshal(spec)
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
		for pb.Next() {
			req, _ := http.NewRequest("POST", env.hs.URL+"/api/v1/jobs", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+env.token)
			req.Header.Set("Idempotency-Key", key())
			if status, err := doDrained(client, req); err != nil || status != http.StatusCreated && status != http.StatusOK {
				b.Errorf("submit: status %d, %v", status, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "submits/s")
}

// doDrained sends req and reads its answer to the end, so that the connection is used
// again, and returns its status.
func doDrained(client *http.Client, req *http.Request) (int, error) {
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}

// BenchmarkSubmitToRunning measures the latency from a submit's acknowledgement to the job
// being reported RUNNING by its (simulated) agent, on 50 nodes of 8 GPUs with the scheduling
// loop and heartbeats running as in production, only faster.
func BenchmarkSubmitToRunning(b *testing.B) {
	env := benchServer(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go env.srv.Run(ctx)
	const nodes = 50
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			simulatedAgent(ctx, env, fmt.Sprintf("bench-%03d", i))
		}()
	}
	defer wg.Wait()
	defer cancel()
	client := &http.Client{}
	waitNodes(b, env, nodes)

	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		var j api.Job
		if err := post(client, env.hs.URL+"/api/v1/jobs", env.token, api.JobSpec{Command: []string{"x"}, GPUs: 1}, &j); err != nil {
			b.Fatal(err)
		}
		acked := time.Now()
		for {
			var d api.JobDetail
			req, _ := http.NewRequest("GET", fmt.Sprintf("%s/api/v1/jobs/%d", env.hs.URL, j.ID), nil)
			req.Header.Set("Authorization", "Bearer "+env.token)
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			json.NewDecoder(resp.Body).Decode(&d)
			resp.Body.Close()
			if d.State == api.StateRunning || d.State == api.StateSucceeded {
				break
			}
			time.Sleep(time.Millisecond)
		}
		lat = append(lat, time.Since(acked))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

func waitNodes(b *testing.B, env *benchEnv, n int) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var list api.NodeList
		req, _ := http.NewRequest("GET", env.hs.URL+"/api/v1/nodes", nil)
		req.Header.Set("Authorization", "Bearer "+env.token)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			json.NewDecoder(resp.Body).Decode(&list)
			resp.Body.Close()
			if len(list.Nodes) == n {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatalf("%d simulated agents did not register", n)
}

// simulatedAgent heartbeats like a real agent and "runs" each task for 50 ms: it reports it
// RUNNING on the next beat and SUCCEEDED a few beats later.
func simulatedAgent(ctx context.Context, env *benchEnv, name string) {
	inv := api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake"}
	for g := range 8 {
		inv.GPUs = append(inv.GPUs, api.GPU{Index: g, UUID: fmt.Sprintf("GPU-%s-%d", name, g), Model: "H100", MemoryMB: 81559, Healthy: true})
	}
	started := map[api.TaskRef]time.Time{}
	var statuses []api.TaskStatus
	for ctx.Err() == nil {
		statuses = statuses[:0]
		now := time.Now()
		for ref, t := range started {
			st := api.TaskStatus{JobID: ref.JobID, Attempt: ref.Attempt, State: api.StateRunning, StartTime: &t}
			if now.Sub(t) > 50*time.Millisecond {
				code := 0
				st.State, st.ExitCode, st.EndTime = api.StateSucceeded, &code, &now
			}
			statuses = append(statuses, st)
		}
		var resp api.HeartbeatResponse
		hb := api.Heartbeat{Node: name, Inventory: inv, Tasks: statuses, Instance: "bench-" + name, ClusterID: env.srv.ClusterID(), Synced: true}
		if err := post(env.agents, "http://rota-up/api/v1/agents/"+name+"/heartbeat", "", hb, &resp); err != nil {
			return
		}
		for _, ref := range resp.Acked {
			delete(started, ref)
		}
		for _, t := range resp.Tasks {
			ref := api.TaskRef{JobID: t.JobID, Attempt: t.Attempt}
			if _, ok := started[ref]; !ok {
				started[ref] = now
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// benchFill commits, straight to the store and the state, a cluster of nodes×8 H100 nodes
// each running perNode jobs (eight of one GPU, the rest CPU only), then pending more jobs.
// The agents' instance is "bench-NAME", as benchBeat sends it.
func benchFill(b *testing.B, env *benchEnv, nodes, perNode, pending int) {
	b.Helper()
	benchFillWith(b, env, nodes, perNode, pending, nil)
}

// benchFillWith is benchFill with each job passed to edit, if not nil, before the commit.
func benchFillWith(b *testing.B, env *benchEnv, nodes, perNode, pending int, edit func(*api.Job)) {
	b.Helper()
	now := time.Now()
	batch := &store.Batch{}
	var id int64
	for i := range nodes {
		name := fmt.Sprintf("bench-%05d", i)
		n := api.Node{Name: name, State: api.NodeReady, LastHeartbeat: now, SyncEpoch: 1,
			Inventory: benchInventory(name), Agent: &api.AgentInfo{Instance: "bench-" + name}}
		batch.Nodes = append(batch.Nodes, n)
		for k := range perNode {
			id++
			j := api.Job{ID: id, Spec: api.JobSpec{Command: []string{"x"}, User: "bench", Team: "default", Queue: "train", CPUs: 1},
				State: api.StateRunning, SubmitTime: now, Attempts: 1, Nodes: []string{name}}
			p := api.Placement{Node: name, CPUs: 1, State: api.StateRunning}
			if k < 8 {
				j.Spec.GPUs = 1
				p.GPUIndices, p.GPUIDs = []int{k}, []string{n.GPUs[k].UUID}
			}
			batch.Jobs = append(batch.Jobs, j)
			batch.Attempts = append(batch.Attempts, api.Attempt{JobID: id, N: 1, State: api.StateRunning, AssignTime: now, StartTime: &now, Placements: []api.Placement{p}})
		}
	}
	for range pending {
		id++
		batch.Jobs = append(batch.Jobs, api.Job{ID: id, Spec: api.JobSpec{Command: []string{"x"}, User: "bench", Team: "default", Queue: "train", GPUs: 1, CPUs: 1},
			State: api.StatePending, SubmitTime: now})
	}
	if edit != nil {
		for i := range batch.Jobs {
			edit(&batch.Jobs[i])
		}
	}
	env.srv.mu.Lock()
	err := env.srv.commit(context.Background(), batch)
	env.srv.mu.Unlock()
	if err != nil {
		b.Fatal(err)
	}
}

func benchInventory(name string) api.Inventory {
	inv := api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake"}
	for g := range 8 {
		inv.GPUs = append(inv.GPUs, api.GPU{Index: g, UUID: fmt.Sprintf("GPU-%s-%d", name, g), Model: "NVIDIA H100", MemoryMB: 81559, Healthy: true})
	}
	return inv
}

// BenchmarkHeartbeat measures one heartbeat, over HTTP, of a node running 10 jobs in a
// cluster of 2,000 nodes running 20,000: the answer lists the node's tasks, so its cost
// should follow the node's jobs, not the cluster's. The node's 8-GPU inventory goes whole
// (as to a server that keeps no hash, or after it changed), or is left out with its hash
// (as an agent does while the server holds it).
func BenchmarkHeartbeat(b *testing.B) {
	env := benchServer(b)
	benchFill(b, env, 2000, 10, 0)
	name := "bench-00042"
	var tasks []api.TaskStatus
	for k := range int64(10) {
		tasks = append(tasks, api.TaskStatus{JobID: 42*10 + k + 1, Attempt: 1, State: api.StateRunning})
	}
	hb := api.Heartbeat{Node: name, Inventory: benchInventory(name), Tasks: tasks, Instance: "bench-" + name, ClusterID: env.srv.ClusterID(), Synced: true, SyncEpoch: 1}
	url := "http://rota-up/api/v1/agents/" + name + "/heartbeat"
	var resp api.HeartbeatResponse
	// The first beat records the agent's address; the others change nothing.
	if err := post(env.agents, url, "", hb, &resp); err != nil {
		b.Fatal(err)
	}
	if len(resp.Tasks) != 10 || resp.InventoryHash != api.InventoryHash(hb.Inventory) {
		b.Fatalf("the node is told %d tasks and inventory hash %q, want its 10 and its inventory's", len(resp.Tasks), resp.InventoryHash)
	}
	leftOut := hb
	leftOut.Inventory, leftOut.InventoryHash = api.Inventory{}, resp.InventoryHash
	for _, bc := range []struct {
		name string
		hb   api.Heartbeat
	}{{"inventory=whole", hb}, {"inventory=left-out", leftOut}} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				if err := post(env.agents, url, "", bc.hb, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkListJobsFirstPage measures the first page of GET /api/v1/jobs (what rota queue
// asks for) with 100,000 jobs waiting.
func BenchmarkListJobsFirstPage(b *testing.B) {
	env := benchServer(b)
	benchFill(b, env, 10, 0, 100_000)
	client := &http.Client{}
	b.ResetTimer()
	for range b.N {
		req, _ := http.NewRequest("GET", env.hs.URL+"/api/v1/jobs?limit=500", nil)
		req.Header.Set("Authorization", "Bearer "+env.token)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var list api.JobList
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if err != nil || len(list.Jobs) != 500 || list.Next == "" {
			b.Fatalf("page of %d jobs, next %q, err %v", len(list.Jobs), list.Next, err)
		}
	}
}

// BenchmarkValidateSubmit measures the checks a submit makes against the cluster, with
// 10,000 nodes registered.
func BenchmarkValidateSubmit(b *testing.B) {
	env := benchServer(b)
	benchFill(b, env, 10_000, 0, 0)
	env.srv.mu.Lock()
	defer env.srv.mu.Unlock()
	b.ResetTimer()
	for range b.N {
		spec := api.JobSpec{Command: []string{"x"}, User: "bench", Team: "default", GPUs: 4, GPUModel: "h100"}
		if e := validateSpec(&spec, env.srv.state); e != nil {
			b.Fatal(e.Message)
		}
	}
}

// BenchmarkCycle measures one scheduling cycle on 2,000 full nodes of 8 GPUs with 14,000
// jobs waiting, and how long of it the server's lock is held: the part submits, heartbeats
// and reads wait for. Planning itself runs without the lock.
func BenchmarkCycle(b *testing.B) { benchCycle(b, 2000, 14_000) }

// BenchmarkCycle10k is BenchmarkCycle at the scale suite's size: 10,000 full nodes of 8
// GPUs, running 80,000 jobs, with 69,000 waiting and no time limits.
func BenchmarkCycle10k(b *testing.B) { benchCycle(b, 10_000, 69_000) }

// benchCycle times cycles on nodes full nodes with pending jobs waiting.
func benchCycle(b *testing.B, nodes, pending int) {
	env := benchServer(b)
	benchFill(b, env, nodes, 8, pending)
	var start, planned, resumed time.Time
	var before, after, longest time.Duration
	// longest is the longest the lock was held at once before planning: the snapshot's
	// walk lets go of it between chunks of jobs.
	held := func() { longest = max(longest, time.Since(resumed)) }
	env.srv.snapshotPaused = func() { held(); resumed = time.Now() }
	env.srv.planning = func() { held(); before += time.Since(start) }
	env.srv.planned = func() { planned = time.Now() }
	cpu0 := processCPU(b)
	b.ResetTimer()
	for range b.N {
		start = time.Now()
		resumed = start
		if err := env.srv.Cycle(context.Background()); err != nil {
			b.Fatal(err)
		}
		after += time.Since(planned)
		// A cycle after one that changed nothing would not run (cycleDue); the benchmark
		// makes it plan everything again, as a change would.
	}
	// CPU time, which a loaded machine stretches less than wall time.
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(before.Microseconds())/1000/float64(b.N), "locked-before-ms/op")
	b.ReportMetric(float64(after.Microseconds())/1000/float64(b.N), "locked-after-ms/op")
	b.ReportMetric(float64(longest.Microseconds())/1000, "longest-hold-before-ms")
}

// processCPU is the CPU time the process has used, user and system, every thread.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCycleWithBudgets is BenchmarkCycle with a month budget on the team every job is
// in (and a week budget on one of its projects): each cycle sums the GPU-hours of the
// 16,000 running attempts for them.
func BenchmarkCycleWithBudgets(b *testing.B) {
	env := benchServer(b)
	benchFill(b, env, 2000, 8, 14_000)
	team := api.Team{Name: "default", Weight: 1, Budget: &api.Budget{Period: api.BudgetMonth, Soft: 1e8, Hard: 1e9},
		Projects: []api.Project{{Name: "p", Budget: &api.Budget{Period: api.BudgetWeek, Hard: 1e9}}}}
	env.srv.mu.Lock()
	err := env.srv.commit(context.Background(), &store.Batch{Teams: []api.Team{team}})
	env.srv.mu.Unlock()
	if err != nil {
		b.Fatal(err)
	}
	var start time.Time
	var locked time.Duration
	env.srv.planning = func() { locked += time.Since(start) }
	b.ResetTimer()
	for range b.N {
		start = time.Now()
		if err := env.srv.Cycle(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(locked.Microseconds())/1000/float64(b.N), "locked-ms/op")
}

// BenchmarkHeartbeatAnswer measures writing the answer of a node running 10 tasks, each
// kept encoded: through encoding/json, which checks and compacts every kept task again,
// and as the server writes it (appendJSON), the tasks copied as they are.
func BenchmarkHeartbeatAnswer(b *testing.B) {
	end := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	a := heartbeatAnswer{answerRest: answerRest{Acked: []api.TaskRef{}, ClusterID: "0123456789abcdef", HeartbeatSeconds: 2, SyncEpoch: 1,
		InventoryHash: strings.Repeat("ab", 32)}}
	for k := range 10 {
		t := api.Task{JobID: int64(420 + k), Attempt: 1, Command: []string{"python", "train.py", "--config", "configs/run.yaml"},
			Env: map[string]string{"ROTA_JOB_ID": strconv.Itoa(420 + k), "ROTA_ATTEMPT": "1", "ROTA_NODELIST": "bench-00042",
				"ROTA_QUEUE": "train", "ROTA_TIME_LIMIT_END": end.Format(time.RFC3339)},
			GPUIndices: []int{k % 8}, GPUIDs: []string{fmt.Sprintf("GPU-bench-00042-%d", k%8)}, CPUs: 8, MemoryMB: 65536,
			TimeLimitEnd: end, Signal: "SIGTERM", GraceSeconds: 120, RunAs: "bench"}
		data, err := json.Marshal(t)
		if err != nil {
			b.Fatal(err)
		}
		a.Tasks = append(a.Tasks, data)
	}
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(a); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("kept", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			var err error
			if buf, err = a.appendJSON(buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkTop compares what rota top reads at every refresh, at the scale suite's size
// (10,000 nodes of 8 GPUs running 40,000 jobs, 69,000 waiting): GET /api/v1/top, and
// what it read before there was one, the node list and every page of the jobs.
func BenchmarkTop(b *testing.B) {
	env := benchServer(b)
	benchFill(b, env, 10_000, 4, 69_000)
	client := &http.Client{}
	get := func(b *testing.B, path string, out any) {
		req, _ := http.NewRequest("GET", env.hs.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+env.token)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: %d %v", path, resp.StatusCode, err)
		}
	}
	b.Run("top", func(b *testing.B) {
		for range b.N {
			var top api.Top
			get(b, "/api/v1/top?nodes=60", &top)
			if top.Total.Nodes != 10_000 || len(top.Nodes) != 60 || top.Running != 40_000 || top.Pending != 69_000 || len(top.WaitingJobs) != 10 {
				b.Fatalf("%d nodes (%d listed), %d running, %d pending", top.Total.Nodes, len(top.Nodes), top.Running, top.Pending)
			}
		}
	})
	// What of it holds the server's lock, which heartbeats and submits wait for: for an
	// admin, who reads every job, and for a member who reads none of them, whose counts
	// and lists are made by walking every job not ended with the read rule.
	for _, who := range []auth.Identity{{User: "admin", Role: auth.RoleAdmin}, {User: "nobody", Role: auth.RoleMember}} {
		b.Run("locked-"+string(who.Role), func(b *testing.B) {
			for range b.N {
				env.srv.mu.Lock()
				top := env.srv.top(who, 60, 10)
				env.srv.mu.Unlock()
				if top.Total.Nodes != 10_000 || (top.Pending == 69_000) != (who.Role == auth.RoleAdmin) {
					b.Fatalf("%s: %d nodes, %d pending", who.Role, top.Total.Nodes, top.Pending)
				}
			}
		})
	}
	// What the web UI's overview reads every 10 s: the node list whole, as it did, or a
	// glance with the first 50 nodes, as it does. And what its Nodes page reads every 5 s:
	// the node list whole and the first 10,000 jobs in pages of 500, as it did, or a page
	// of 50 nodes with their jobs, as it does. answer-bytes is the answers' size.
	var jobPages []string
	for i := range 20 {
		jobPages = append(jobPages, "/api/v1/jobs?limit=500&after="+strconv.Itoa(i*500))
	}
	for _, c := range []struct {
		name  string
		paths []string
	}{
		{"overview-glance", []string{"/api/v1/top?nodes=50&jobs=0"}},
		{"overview-nodes", []string{"/api/v1/nodes"}},
		{"nodes-page", []string{"/api/v1/nodes?limit=50&jobs=true&after=bench-05000"}},
		{"nodes-page-whole", append([]string{"/api/v1/nodes"}, jobPages...)},
		// Its Queue page: the first 10,000 jobs, as it read, or a page of each list.
		{"queue-page", []string{"/api/v1/top?nodes=0&jobs=0", "/api/v1/jobs?state=PENDING,HELD&limit=100&arrays=collapse", "/api/v1/jobs?state=ASSIGNED,RUNNING&limit=100&arrays=collapse"}},
		{"queue-page-whole", append([]string{"/api/v1/top?nodes=0&jobs=0"}, jobPages...)},
	} {
		b.Run(c.name, func(b *testing.B) {
			var size int64
			for range b.N {
				size = 0
				for _, path := range c.paths {
					req, _ := http.NewRequest("GET", env.hs.URL+path, nil)
					req.Header.Set("Authorization", "Bearer "+env.token)
					resp, err := client.Do(req)
					if err != nil || resp.StatusCode != http.StatusOK {
						b.Fatalf("%s: %v %v", path, err, resp)
					}
					n, _ := io.Copy(io.Discard, resp.Body)
					size += n
					resp.Body.Close()
				}
			}
			b.ReportMetric(float64(size), "answer-bytes")
		})
	}
	b.Run("lists", func(b *testing.B) {
		for range b.N {
			var nodes api.NodeList
			get(b, "/api/v1/nodes", &nodes)
			jobs, after := 0, ""
			for {
				var page api.JobList
				get(b, "/api/v1/jobs?limit=500&after="+after, &page)
				jobs += len(page.Jobs)
				if after = page.Next; after == "" {
					break
				}
			}
			if len(nodes.Nodes) != 10_000 || jobs != 109_000 {
				b.Fatalf("%d nodes, %d jobs", len(nodes.Nodes), jobs)
			}
		}
	})
}

// BenchmarkHostileCaller measures what one member calling in a tight loop from 16
// connections does to an admin's glance at 10,000 nodes, with the default limits and with
// none, against the member quiet. The reader reads every node; the scraper scrapes
// /metrics; the writer holds and releases its own job, a store commit each. The member asks again at once after a
// refusal, as a hostile caller would; served and refused are its calls per second.
func BenchmarkHostileCaller(b *testing.B) {
	env := benchServer(b)
	benchFill(b, env, 10_000, 4, 69_000)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	call := func(method, token, path string, body any) (int, error) {
		var rd io.Reader
		if body != nil {
			data, _ := json.Marshal(body)
			rd = bytes.NewReader(data)
		}
		req, _ := http.NewRequest(method, env.hs.URL+path, rd)
		req.Header.Set("Authorization", "Bearer "+token)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		return doDrained(client, req)
	}
	if code, err := call("PUT", env.token, "/api/v1/users/mallory", api.User{Role: "member"}); code/100 != 2 {
		b.Fatalf("add user mallory: %d %v", code, err)
	}
	var tok api.NewToken
	if err := post(client, env.hs.URL+"/api/v1/tokens", env.token, api.TokenRequest{User: "mallory"}, &tok); err != nil {
		b.Fatal(err)
	}
	mallory := tok.Token
	var job api.Job
	if err := post(client, env.hs.URL+"/api/v1/jobs", mallory, api.JobSpec{Command: []string{"x"}, GPUs: 1}, &job); err != nil {
		b.Fatal(err)
	}
	setLimits := func(extra string) {
		env.srv.mu.Lock()
		_, e := env.srv.applyConfig(context.Background(), []byte("limits: {submits_per_second: 1000000, submit_burst: 10000000, max_pending_per_user: 10000000"+extra+"}\n"), api.Event{Actor: "bench"})
		env.srv.mu.Unlock()
		if e != nil {
			b.Fatal(e.Message)
		}
	}
	read := func(int) (int, error) { return call("GET", mallory, "/api/v1/nodes", nil) }
	scrape := func(int) (int, error) { return call("GET", mallory, "/metrics", nil) }
	write := func(i int) (int, error) {
		verb := "hold"
		if i%2 == 1 {
			verb = "release"
		}
		return call("POST", mallory, fmt.Sprintf("/api/v1/jobs/%d/%s", job.ID, verb), nil)
	}
	const none = ", read_seconds_per_second: 1000, read_burst_seconds: 86400, max_reads_in_flight: 100000, writes_per_second: 1000000, write_burst: 10000000"
	for _, c := range []struct {
		name, limits string
		hostile      func(int) (int, error)
	}{
		{"quiet", "", nil},
		{"reader/limits=default", "", read},
		{"reader/limits=none", none, read},
		{"scraper/limits=default", "", scrape},
		{"scraper/limits=none", none, scrape},
		{"writer/limits=default", "", write},
		{"writer/limits=none", none, write},
	} {
		b.Run(c.name, func(b *testing.B) {
			setLimits(c.limits)
			var served, refused atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			if c.hostile != nil {
				for g := range 16 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := g; ; i++ {
							select {
							case <-stop:
								return
							default:
							}
							switch code, _ := c.hostile(i); code {
							case http.StatusOK:
								served.Add(1)
							case http.StatusTooManyRequests:
								refused.Add(1)
							}
						}
					}()
				}
				time.Sleep(time.Second) // past the member's first burst
			}
			served.Store(0)
			refused.Store(0)
			start := time.Now()
			b.ResetTimer()
			for range b.N {
				if code, err := call("GET", env.token, "/api/v1/top?nodes=60", nil); code != http.StatusOK {
					b.Fatalf("glance: %d %v", code, err)
				}
			}
			b.StopTimer()
			secs := time.Since(start).Seconds()
			close(stop)
			wg.Wait()
			b.ReportMetric(float64(served.Load())/secs, "served/s")
			b.ReportMetric(float64(refused.Load())/secs, "refused/s")
		})
	}
}
