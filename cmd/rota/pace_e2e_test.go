package main

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// TestAgentsKeepThePacedInterval runs two real agents against a server that takes at
// most two heartbeats a second at a 200 ms interval: it asks each agent for one a second,
// the agents keep to that, and a job still starts and its end is recorded at once, not a
// heartbeat later.
func TestAgentsKeepThePacedInterval(t *testing.T) {
	skipShort(t)
	c := newTestCluster(t, map[string]string{"n1": "1", "n2": "1"}, clusterOpts{maxHeartbeats: "2"})
	waitFor(t, 20*time.Second, "the server to ask for a heartbeat a second", func() bool {
		return c.metric("rota_heartbeat_interval_seconds") == 1
	})
	// Let every agent hear of the interval, then count the heartbeats of 4 s: about 8 at
	// one a second each (give or take the agents' jitter, and a beat sent early when a
	// task changes, which none does here), where 200 ms would make 40.
	time.Sleep(1500 * time.Millisecond)
	before := c.heartbeatsServed()
	time.Sleep(4 * time.Second)
	if n := c.heartbeatsServed() - before; n < 4 || n > 16 {
		t.Errorf("two agents asked for a heartbeat a second sent %v in 4 s; want about 8", n)
	}

	// New work reaches an agent through its watch, and a task's end is reported at once:
	// a job that exits at once is done well inside one interval of each.
	start := time.Now()
	j := c.submit(api.JobSpec{GPUs: 1, Command: shell("exit 0")})
	if got := c.waitEnded(j.ID, 20*time.Second); got.State != api.StateSucceeded {
		t.Fatalf("job %d: %s, want SUCCEEDED", j.ID, got.State)
	}
	t.Logf("a job ran and its end was recorded %v after it was submitted, at a 1 s heartbeat interval", time.Since(start).Round(time.Millisecond))
}

// metricsText is the server's /metrics, as the admin reads it.
func (c *testCluster) metricsText() string {
	c.t.Helper()
	status, body := c.request(http.MethodGet, "/metrics", c.token, nil)
	if status != http.StatusOK {
		c.t.Fatalf("GET /metrics: %d", status)
	}
	return string(body)
}

// metric is the value of the unlabelled metric name on the server's /metrics (-1 when
// it is not there).
func (c *testCluster) metric(name string) float64 {
	c.t.Helper()
	for line := range strings.Lines(c.metricsText()) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				c.t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return -1
}

// heartbeatsServed is how many heartbeats the server has answered, by its /metrics.
func (c *testCluster) heartbeatsServed() float64 {
	c.t.Helper()
	n := 0.0
	for line := range strings.Lines(c.metricsText()) {
		if strings.HasPrefix(line, "rota_api_request_duration_seconds_count{") && strings.Contains(line, `route="/api/v1/agents/{node}/heartbeat"`) {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				c.t.Fatalf("%s: %v", line, err)
			}
			n += v
		}
	}
	return n
}
