package server

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
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

	if n := h.srv.sweepLogs(context.Background(), h.clock.Now()); n != 1 {
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

// A standby removes the expired logs in its own data dir (those that arrived while it
// led) by what the store says of their jobs, since its memory is not kept up to date:
// those of jobs ended before the retention, or unknown, go; those of a job still running
// and of one ended since stay. A store it cannot read keeps every log.
func testHAStandbySweepsLogs(t *testing.T, dbURL string) {
	c := newHACluster(t, dbURL)
	c.cfg = func(cfg *Config) { cfg.LogRetention = 48 * time.Hour }
	a := c.start("a", time.Hour)
	b := c.start("b", time.Hour)
	if !a.srv.isLeader() || b.srv.isLeader() {
		t.Fatalf("a leads %v, b leads %v; the test needs a to lead", a.srv.isLeader(), b.srv.isLeader())
	}
	now := time.Now()
	long, lately := now.Add(-72*time.Hour), now.Add(-time.Hour)
	// The jobs as the leader stored them, in the past: written here straight to the
	// database, which a's memory then does not know, as b's does not.
	st, err := store.Open(context.Background(), dbURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	job := func(id int64, state api.JobState, end *time.Time) api.Job {
		return api.Job{ID: id, State: state, SubmitTime: long.Add(-time.Hour), EndTime: end,
			Spec: api.JobSpec{Command: []string{"train"}, User: "ada", Team: "default", Queue: "default", GPUs: 1}}
	}
	const endedLong, running, endedLately, unknown = 9001, 9002, 9003, 9004
	if err := st.Commit(context.Background(), &store.Batch{Jobs: []api.Job{
		job(endedLong, api.StateSucceeded, &long), job(running, api.StateRunning, nil), job(endedLately, api.StateFailed, &lately),
	}}); err != nil {
		t.Fatal(err)
	}
	logs := filepath.Join(b.srv.cfg.DataDir, "logs")
	write := func(id int64, at time.Time) string {
		f := filepath.Join(logs, logName(id, 1, "n1"))
		if err := os.MkdirAll(filepath.Dir(f), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("hello\n"), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(f, at, at); err != nil {
			t.Fatal(err)
		}
		return f
	}
	files := map[int64]string{endedLong: write(endedLong, long), running: write(running, long), endedLately: write(endedLately, lately), unknown: write(unknown, long)}
	kept := func(id int64) bool { _, err := os.Stat(files[id]); return err == nil }

	// The store out of reach (here, a read given no time): every log stays.
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if n := b.srv.sweepLogs(gone, now); n != 0 {
		t.Errorf("with the store unread, the standby's sweep removed %d jobs' logs; want none", n)
	}
	for id := range files {
		if !kept(id) {
			t.Errorf("job %d's log went while the store could not be read", id)
		}
	}

	if n := b.srv.sweepLogs(context.Background(), now); n != 2 {
		t.Errorf("the standby's sweep removed %d jobs' logs; want 2: the job ended 72h ago and the unknown one", n)
	}
	for id, want := range map[int64]bool{endedLong: false, running: true, endedLately: true, unknown: false} {
		if kept(id) != want {
			t.Errorf("job %d's log kept %v; want %v", id, kept(id), want)
		}
	}
}
