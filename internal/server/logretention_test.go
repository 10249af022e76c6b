package server

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// With a log retention, the leader removes the logs of jobs that ended longer ago than
// that, and keeps those of jobs that ended since and of jobs still running, however long
// they have been silent. A read of a removed log says why at once, without asking the node.
func TestLogRetention(t *testing.T) {
	h := &harness{t: t, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir(),
		cfg: func(c *Config) { c.LogRetention = 48 * time.Hour; c.KeepEnded = time.Hour }}
	h.open()
	h.beat("n1", 3)
	var ids []int64
	for _, cmd := range []string{"old", "running", "recent"} {
		ids = append(ids, h.submit(api.JobSpec{GPUs: 1, Command: []string{cmd}}).ID)
	}
	h.cycle()
	start := h.clock.Now()
	var running []api.TaskStatus
	for _, id := range ids {
		running = append(running, api.TaskStatus{JobID: id, Attempt: 1, State: api.StateRunning, StartTime: &start})
	}
	h.beat("n1", 3, running...)
	for _, id := range ids {
		c := api.LogChunk{JobID: id, Attempt: 1, Data: []byte("hello\n")}
		if code, ans, e := h.shipBatch("n1", api.LogBatch{Chunks: []api.LogChunk{c}}); code != http.StatusOK || ans.Chunks[0].Status != 0 {
			t.Fatalf("ship job %d's log: %d %v %+v", id, code, e, ans)
		}
	}
	ended := func(id int64, at time.Time) api.TaskStatus {
		return api.TaskStatus{JobID: id, Attempt: 1, State: api.StateSucceeded, ExitCode: intp(0), EndTime: &at, LogSize: 6}
	}
	// The first ends now; three days on, the third ends; the second runs on, silent.
	h.beat("n1", 3, ended(ids[0], h.clock.Now()), running[1], running[2])
	oldEnd := h.clock.Now()
	h.clock.Add(72 * time.Hour)
	h.beat("n1", 3, running[1], ended(ids[2], h.clock.Now()))
	h.cycle() // the first job leaves memory: the sweep and the read find it in the store
	if _, evicted := h.srv.state.Evicted(ids[0]); !evicted {
		t.Fatalf("job %d is still in memory", ids[0])
	}
	// The files' ages are those the clock says.
	age := func(id int64, at time.Time) {
		dir := filepath.Join(h.dir, "logs", logName(id, 1, "n1"))
		if err := os.Chtimes(dir, at, at); err != nil {
			t.Fatal(err)
		}
	}
	age(ids[0], oldEnd)
	age(ids[1], oldEnd)
	age(ids[2], h.clock.Now())

	if n := h.srv.sweepLogs(h.clock.Now()); n != 1 {
		t.Errorf("the sweep removed the logs of %d jobs; want 1, the job that ended 72h ago", n)
	}
	for i, want := range []bool{false, true, true} {
		_, err := os.Stat(filepath.Join(h.dir, "logs", logName(ids[i], 1, "n1")))
		if kept := err == nil; kept != want {
			t.Errorf("job %d's log kept %v; want %v", ids[i], kept, want)
		}
	}
	began := time.Now()
	body, hdr := h.readLog(ids[0], 0, "0")
	if body != "" || hdr.Get("X-Rota-Log-Done") != "true" ||
		!strings.Contains(hdr.Get("X-Rota-Log-Incomplete"), "removes the logs of jobs that ended more than 48h0m0s ago (rota server --log-retention), and this one ended 2026-11-01T09:00:00Z") {
		t.Errorf("the removed log: %q, done %q, incomplete %q", body, hdr.Get("X-Rota-Log-Done"), hdr.Get("X-Rota-Log-Incomplete"))
	}
	if waited := time.Since(began); waited > 5*time.Second {
		t.Errorf("the read of a removed log took %v, as if it waited the 10 s for the node; want an answer at once", waited)
	}
	if got := h.beat("n1", 3, running[1]).LogsFollowed; slices.Contains(got, api.TaskRef{JobID: ids[0], Attempt: 1}) {
		t.Errorf("the node is asked for a log removed for its age: %v", got)
	}
	if body, _ := h.readLog(ids[2], 0, "0"); body != "hello\n" {
		t.Errorf("the recent job's log: %q", body)
	}
}
