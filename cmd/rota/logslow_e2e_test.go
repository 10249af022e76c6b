package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// TestLogsOnADiskSlowToMakeFiles runs a server built with fault injection whose every new
// log takes 1.5 s to make (ROTA_FAULT_LOG_MAKE_DELAY), as on a disk slow to make files,
// and four jobs that start together on one node. The node's batch cannot make their logs
// within its second, so the server puts pieces off, says so on /metrics and in rota admin
// status, and the agent sends them again: every job ends SUCCEEDED with its log whole, and
// the node stays READY.
func TestLogsOnADiskSlowToMakeFiles(t *testing.T) {
	skipShort(t)
	c := newTestCluster(t, map[string]string{"n1": "4"}, clusterOpts{serverTags: "rotafault", serverEnv: []string{"ROTA_FAULT_LOG_MAKE_DELAY=1500ms"}})
	var want strings.Builder
	for k := 1; k <= 20; k++ {
		fmt.Fprintf(&want, "line %d\n", k)
	}
	var ids []int64
	for i := range 4 {
		ids = append(ids, c.submit(api.JobSpec{Name: fmt.Sprintf("slow-log-%d", i), GPUs: 1,
			Command: []string{"sh", "-c", `for k in $(seq 1 20); do echo "line $k"; sleep 0.2; done`}}).ID)
	}
	waitFor(t, 60*time.Second, "pieces of logs put off", func() bool { return c.metric("rota_log_chunks_put_off_total") > 0 })
	if st := c.rota("admin", "status"); st.code != 0 || !strings.Contains(st.stdout, "Problem: job logs arrive late") {
		t.Errorf("rota admin status while pieces are put off: %s; want a problem saying logs arrive late", st)
	}
	notReady := 0
	waitFor(t, 90*time.Second, "every job ended", func() bool {
		if c.node("n1").State != api.NodeReady {
			notReady++
		}
		for _, id := range ids {
			if !c.job(id).State.Terminal() {
				return false
			}
		}
		return true
	})
	if notReady > 0 {
		t.Errorf("node n1 was found not READY %d times while the logs were put off; want READY throughout", notReady)
	}
	for _, id := range ids {
		if got := c.job(id); got.State != api.StateSucceeded {
			t.Errorf("job %d ended %s; want SUCCEEDED", id, got.State)
		}
		if got := c.logs(id); got != want.String() {
			t.Errorf("job %d's log %q; want its 20 lines, each once, in order", id, got)
		}
	}
}
