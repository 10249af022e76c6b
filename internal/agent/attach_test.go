package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// Jobs quicker than their terminal's relay: each one's output still goes up the stream
// before the stream closes, though the server sends the window size just as the job's
// terminal closes, and the relay's write of it fails.
func TestRelayCarriesTheOutputOfQuickJobs(t *testing.T) {
	s := newFakeServer(t)
	const n = 8
	var tasks []api.Task
	for job := int64(1); job <= n; job++ {
		tasks = append(tasks, api.Task{JobID: job, Attempt: 1, TTY: true, Command: []string{"sh", "-c", fmt.Sprintf("echo quick-%d; exit 3", job)}})
	}
	s.setDesired(tasks...)
	startAgent(t, s, testLogger(t))
	for job := int64(1); job <= n; job++ {
		k := taskKey{job, 1}
		eventually(t, 30*time.Second, fmt.Sprintf("job %d's end reported", job), func() bool {
			_, ok := s.finalOf(k)
			return ok
		})
		s.mu.Lock()
		out, streamed := s.ttyOut[k]
		s.mu.Unlock()
		if !streamed || !strings.Contains(out, fmt.Sprintf("quick-%d", job)) {
			t.Errorf("job %d: its stream carried %q (closed normally: %v); want its output", job, out, streamed)
		}
	}
}
