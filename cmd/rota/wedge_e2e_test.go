package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// TestWedgedServerExitsAndComesBackWhole runs a server built with fault injection
// (-tags rotafault, internal/server/faultinject.go) and makes one of its handlers panic
// while it holds the server's lock. The server must log the panic, find itself wedged,
// and exit 1 rather than hang; started again, as systemd's Restart=on-failure does, it
// must have every job it acknowledged, the running one still running on its agent, and
// take new work.
func TestWedgedServerExitsAndComesBackWhole(t *testing.T) {
	skipShort(t)
	c := newTestCluster(t, map[string]string{"n1": "2"}, clusterOpts{serverTags: "rotafault", serverEnv: []string{"ROTA_FAULT_WEDGED_AFTER=2s"}})
	running := c.submit(api.JobSpec{Name: "runs-through", GPUs: 1, Command: []string{"sleep", "600"}})
	c.waitState(running.ID, 30*time.Second, api.StateRunning)
	waiting := c.submit(api.JobSpec{Name: "waits-through", GPUs: 2, Command: []string{"true"}})

	// The panic: net/http ends the connection without an answer.
	req, _ := http.NewRequest(http.MethodPost, "https://"+c.addr+"/api/v1/debug/panic-holding-lock", nil)
	req.Header.Set("Authorization", "Bearer "+c.token)
	if resp, err := c.client.HTTP.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the panicking route answered %d; want the connection closed", resp.StatusCode)
	}
	code, exited := c.server.waitExit(30 * time.Second)
	if !exited {
		t.Fatalf("the wedged server still runs 30 s after the panic; it must exit")
	}
	out := c.server.output()
	if code != 1 || !strings.Contains(out, "an API handler panicked") || !strings.Contains(out, "fault injection") ||
		!strings.Contains(out, "the server is wedged") || !strings.Contains(out, "exiting: the server is wedged") {
		t.Fatalf("the wedged server exited %d; want 1, with the panic, its stack and the wedge in its log:\n%s", code, tail(out, 4000))
	}

	// Started again, from the release build, on the same data directory.
	c.opts.serverTags, c.opts.serverEnv = "", nil
	c.startServer()
	if got := c.job(waiting.ID); got.State != api.StatePending {
		t.Errorf("the waiting job is %s after the restart; want PENDING", got.State)
	}
	waitFor(t, 30*time.Second, "the agent back, its job still running in its first attempt", func() bool {
		got := c.job(running.ID)
		return got.State == api.StateRunning && got.Attempts == 1 && c.node("n1").State == api.NodeReady
	})
	if _, err := c.client.Cancel(context.Background(), running.ID); err != nil {
		t.Fatalf("cancel the running job: %v", err)
	}
	c.waitState(waiting.ID, 60*time.Second, api.StateSucceeded)
	if code, _ := c.request(http.MethodPost, "/api/v1/debug/panic-holding-lock", c.token, nil); code != http.StatusNotFound {
		t.Errorf("the release build answers the fault injection route with %d; want 404", code)
	}
}
