package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/server"
	"github.com/rotahq/rota/internal/store"
)

// The timings of the end-to-end server: faster than production's (2 s heartbeats, 1 s
// cycles) so that a benchmark measures the server's work rather than its waiting, and the
// same as internal/server's benchmarks so that the numbers agree.
const (
	heartbeatInterval = 50 * time.Millisecond
	cycleInterval     = 20 * time.Millisecond
	// agentBeat is how often a simulated agent heartbeats; agentTaskTime is how long it
	// "runs" each task.
	agentBeat     = 5 * time.Millisecond
	agentTaskTime = 50 * time.Millisecond
	// submitClients is how many clients submit at once in the submit benchmark.
	submitClients = 8
	// runningTimeout bounds the wait for one job to start; a job that takes longer means the
	// server or an agent is stuck, not slow.
	runningTimeout = 10 * time.Second
)

func e2eBenchmarks(quick bool) []benchmark {
	agents, submitTime, latencyCount := 50, "1s", "300x"
	if quick {
		agents, submitTime, latencyCount = 10, "200ms", "20x"
	}
	return []benchmark{
		{suite: "e2e", name: fmt.Sprintf("submit/%dclients", submitClients), benchtime: submitTime, run: benchSubmit},
		{suite: "e2e", name: fmt.Sprintf("submit-to-running/%dagents", agents), benchtime: latencyCount,
			run: func(ctx context.Context, bt string) (runResult, error) {
				return benchSubmitToRunning(ctx, bt, agents)
			}},
	}
}

// benchSubmit measures durable submissions: each operation is one POST /api/v1/jobs,
// answered only after its commit to SQLite, with submitClients clients at once. The
// scheduling loop does not run, so nothing competes with the submits.
func benchSubmit(ctx context.Context, benchtime string) (runResult, error) {
	ls, err := startServer(ctx)
	if err != nil {
		return runResult{}, err
	}
	defer ls.close()
	spec := api.JobSpec{Command: []string{"true"}, User: "bench"}
	return measure(benchtime, func(b *B) error {
		var (
			next  atomic.Int64
			wg    sync.WaitGroup
			mu    sync.Mutex
			first error
		)
		for range submitClients {
			wg.Go(func() {
				for next.Add(1) <= int64(b.N) {
					if err := ls.post(ctx, "/api/v1/jobs", spec, nil); err != nil {
						mu.Lock()
						first = cmp.Or(first, err)
						mu.Unlock()
						return
					}
				}
			})
		}
		wg.Wait()
		if first != nil {
			return first
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "submits/s")
		return nil
	})
}

// benchSubmitToRunning measures the latency from a submit's acknowledgement to the job
// being reported RUNNING by its agent, one 1-GPU job at a time, on agents simulated nodes of
// 8 GPUs with the scheduling loop and heartbeats running.
func benchSubmitToRunning(ctx context.Context, benchtime string, agents int) (runResult, error) {
	ls, err := startServer(ctx)
	if err != nil {
		return runResult{}, err
	}
	defer ls.close()
	ls.runScheduler()
	for i := range agents {
		ls.startAgent(fmt.Sprintf("bench-%03d", i))
	}
	if err := ls.waitNodes(ctx, agents); err != nil {
		return runResult{}, err
	}
	spec := api.JobSpec{Command: []string{"x"}, GPUs: 1, User: "bench"}
	return measure(benchtime, func(b *B) error {
		var lat []time.Duration
		for b.Loop() {
			var j api.Job
			if err := ls.post(ctx, "/api/v1/jobs", spec, &j); err != nil {
				return err
			}
			acked := time.Now()
			if err := ls.waitRunning(ctx, j.ID); err != nil {
				return err
			}
			lat = append(lat, time.Since(acked))
		}
		slices.Sort(lat)
		b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
		b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
		return nil
	})
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// loopbackServer is a real server with its SQLite store in a temporary directory, serving
// HTTP on a loopback port, and the goroutines that drive it.
type loopbackServer struct {
	url    string
	client *http.Client
	// token is the first admin's; clients' requests carry it. Simulated agents reach the
	// server through agents, an in-process connection like the agent of `rota up`.
	token  string
	agents *http.Client
	local  *server.LocalListener
	srv    *server.Server
	st     store.Store
	hs     *http.Server
	dir    string
	// ctx ends the scheduling loop and the agents; wg waits for them.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex // guards agentErr
	agentErr error
}

func startServer(ctx context.Context) (*loopbackServer, error) {
	dir, err := os.MkdirTemp("", "rota-bench-")
	if err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, "sqlite://"+filepath.Join(dir, "rota.db"), nil)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	srv, err := server.New(ctx, server.Config{DataDir: dir, HeartbeatInterval: heartbeatInterval, CycleInterval: cycleInterval}, st, nil)
	if err != nil {
		st.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	token, err := os.ReadFile(filepath.Join(dir, "admin-token"))
	if err != nil {
		st.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		st.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	local := server.NewLocalListener()
	ls := &loopbackServer{
		url: "http://" + ln.Addr().String(),
		// Many connections kept open: the default two per host would make the concurrent
		// clients and agents open a new connection for most requests.
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}},
		token:  strings.TrimSpace(string(token)),
		agents: local.Client(),
		local:  local,
		srv:    srv, st: st, dir: dir,
		hs: &http.Server{Handler: srv.Handler(), ConnContext: srv.ConnContext},
	}
	ls.ctx, ls.cancel = context.WithCancel(ctx)
	go ls.hs.Serve(ln)
	go ls.hs.Serve(local)
	// A benchmark submits far faster than one person may.
	if err := ls.put(ctx, "/api/v1/config", "limits:\n  submits_per_second: 1000000\n  submit_burst: 10000000\n  max_pending_per_user: 10000000\n"); err != nil {
		ls.close()
		return nil, err
	}
	return ls, nil
}

// close stops the loop and the agents, then the HTTP server, then the store, and removes
// the directory. The HTTP server is shut down, not closed: a request whose client gave
// up as the agents stopped may still be in its handler, and the server and the store
// must not close under it (Close does not wait for handlers; Shutdown does).
func (ls *loopbackServer) close() {
	ls.cancel()
	ls.wg.Wait()
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ls.hs.Shutdown(shutdown) != nil {
		ls.hs.Close()
	}
	ls.client.CloseIdleConnections()
	ls.agents.CloseIdleConnections()
	ls.srv.Close()
	ls.st.Close()
	os.RemoveAll(ls.dir)
}

func (ls *loopbackServer) runScheduler() {
	ls.wg.Go(func() { ls.srv.Run(ls.ctx) })
}

func (ls *loopbackServer) post(ctx context.Context, path string, body, out any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ls.url+path, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return ls.do(req, out)
}

func (ls *loopbackServer) put(ctx context.Context, path, yamlDoc string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, ls.url+path, strings.NewReader(yamlDoc))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/yaml")
	return ls.do(req, nil)
}

func (ls *loopbackServer) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ls.url+path, nil)
	if err != nil {
		return err
	}
	return ls.do(req, out)
}

func (ls *loopbackServer) do(req *http.Request, out any) error {
	client := ls.client
	if strings.HasPrefix(req.URL.Path, "/api/v1/agents/") {
		client = ls.agents
	} else {
		req.Header.Set("Authorization", "Bearer "+ls.token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: status %d: %s", req.Method, req.URL.Path, resp.StatusCode, bytes.TrimSpace(msg))
	}
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// waitNodes waits until n nodes have registered.
func (ls *loopbackServer) waitNodes(ctx context.Context, n int) error {
	deadline := time.Now().Add(runningTimeout)
	for time.Now().Before(deadline) {
		var list api.NodeList
		if err := ls.get(ctx, "/api/v1/nodes", &list); err == nil && len(list.Nodes) == n {
			return nil
		}
		if err := ls.sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("%d simulated agents did not all register within %s%s", n, runningTimeout, ls.agentError())
}

// waitRunning polls the job every millisecond until it runs (or has already ended).
func (ls *loopbackServer) waitRunning(ctx context.Context, id int64) error {
	deadline := time.Now().Add(runningTimeout)
	for time.Now().Before(deadline) {
		var d api.JobDetail
		if err := ls.get(ctx, fmt.Sprintf("/api/v1/jobs/%d", id), &d); err != nil {
			return err
		}
		if d.State == api.StateRunning || d.State == api.StateSucceeded {
			return nil
		}
		if err := ls.sleep(ctx, time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("job %d did not start within %s%s", id, runningTimeout, ls.agentError())
}

func (ls *loopbackServer) sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// agentError is the first error a simulated agent stopped on, as a suffix for a message.
func (ls *loopbackServer) agentError() string {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.agentErr == nil {
		return ""
	}
	return fmt.Sprintf(" (an agent stopped: %v)", ls.agentErr)
}

// startAgent starts a simulated agent for a node of 8 H100s. It heartbeats every agentBeat
// like a real agent, reports each task RUNNING on the beat after it was given, and
// SUCCEEDED once it has run agentTaskTime. Many share one process and one HTTP client.
func (ls *loopbackServer) startAgent(name string) {
	inv := api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake"}
	for g := range 8 {
		inv.GPUs = append(inv.GPUs, api.GPU{Index: g, UUID: fmt.Sprintf("GPU-%s-%d", name, g), Model: "H100", MemoryMB: 81559, Healthy: true})
	}
	ls.wg.Go(func() {
		started := map[api.TaskRef]time.Time{}
		var statuses []api.TaskStatus
		for ls.ctx.Err() == nil {
			statuses = statuses[:0]
			now := time.Now()
			for ref, t := range started {
				st := api.TaskStatus{JobID: ref.JobID, Attempt: ref.Attempt, State: api.StateRunning, StartTime: &t}
				if now.Sub(t) > agentTaskTime {
					code := 0
					st.State, st.ExitCode, st.EndTime = api.StateSucceeded, &code, &now
				}
				statuses = append(statuses, st)
			}
			var resp api.HeartbeatResponse
			hb := api.Heartbeat{Node: name, Inventory: inv, Tasks: statuses, AgentTime: now,
				Instance: "bench-" + name, ClusterID: ls.srv.ClusterID(), Synced: true}
			if err := ls.post(ls.ctx, "/api/v1/agents/"+name+"/heartbeat", hb, &resp); err != nil {
				if !errors.Is(err, context.Canceled) {
					ls.mu.Lock()
					ls.agentErr = cmp.Or(ls.agentErr, fmt.Errorf("%s: %w", name, err))
					ls.mu.Unlock()
				}
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
			if ls.sleep(ls.ctx, agentBeat) != nil {
				return
			}
		}
	})
}
