package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// printer is a task that prints a numbered line every 50 ms until stopFile exists, then
// "end" and exits.
func printer(job int64, stopFile string) api.Task {
	return api.Task{JobID: job, Attempt: 1, GraceSeconds: 5, Command: []string{"sh", "-c", `
i=0; while [ ! -e "$1" ]; do i=$((i+1)); echo "line $i"; sleep 0.05; done; echo end`, "job", stopFile}}
}

// wellFormed reports whether log is what printer prints, up to some line: nothing lost,
// repeated or out of order, whatever the requests it came in.
func wellFormed(log string, ended bool) bool {
	lines := strings.Split(strings.TrimSuffix(log, "\n"), "\n")
	if log == "" || !strings.HasSuffix(log, "\n") {
		return log == "" && !ended
	}
	for i, l := range lines {
		if ended && i == len(lines)-1 {
			return l == "end"
		}
		if l != fmt.Sprintf("line %d", i+1) {
			return false
		}
	}
	return !ended
}

// dataChunks counts, per batch, the chunks with data of each job.
func (s *fakeServer) dataChunks() []map[int64]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]map[int64]int, len(s.batches))
	for i, b := range s.batches {
		out[i] = map[int64]int{}
		for _, c := range b.Chunks {
			if len(c.Data) > 0 {
				out[i][c.JobID]++
			}
		}
	}
	return out
}

// What a node's tasks print goes in one request after each heartbeat, for all of them,
// not one request per task every second: a node costs the server the same whether it
// runs one task or many.
func TestLogsShipOnceAHeartbeatForAllTasks(t *testing.T) {
	s := newFakeServer(t)
	s.interval = time.Second
	stop := filepath.Join(t.TempDir(), "stop")
	s.setDesired(printer(1, stop), printer(2, stop), printer(3, stop))
	cfg := agentConfig(t, s, t.TempDir())
	cfg.HeartbeatInterval = 200 * time.Millisecond
	launch(t, cfg, testLogger(t))
	time.Sleep(3500 * time.Millisecond)

	s.mu.Lock()
	withData := 0
	for _, b := range s.batches {
		for _, c := range b.Chunks {
			if len(c.Data) > 0 {
				withData++
				break
			}
		}
	}
	beats := len(s.beats)
	oneByOne := s.oneByOne
	logs := map[int64]string{}
	for k, l := range s.logs {
		logs[k.job] = string(l)
	}
	s.mu.Unlock()
	if oneByOne != 0 {
		t.Errorf("%d one-task log requests to a server that takes batches", oneByOne)
	}
	// One request with data a round, for all tasks. A round slowed by a loaded machine can
	// land after the next heartbeat, so the requests are counted against the heartbeats
	// in all rather than beat by beat.
	if withData > beats {
		t.Errorf("%d requests with log data in %d heartbeats; want at most one a heartbeat, for all tasks", withData, beats)
	}
	all := 0
	for _, per := range s.dataChunks() {
		if len(per) == 3 {
			all++
		}
	}
	if all < 2 {
		t.Errorf("%d batches carried all three tasks' output; want every round's", all)
	}
	for job := int64(1); job <= 3; job++ {
		if !wellFormed(logs[job], false) || strings.Count(logs[job], "\n") < 10 {
			t.Errorf("job %d's log on the server is %q; want its lines so far, in order", job, logs[job])
		}
	}
}

// A log someone reads ships every second, between heartbeats; the others wait for the
// next heartbeat's round.
func TestFollowedLogShipsBetweenHeartbeats(t *testing.T) {
	s := newFakeServer(t)
	s.interval = 4 * time.Second
	s.followed = []api.TaskRef{{JobID: 1, Attempt: 1}}
	stop := filepath.Join(t.TempDir(), "stop")
	s.setDesired(printer(1, stop), printer(2, stop))
	cfg := agentConfig(t, s, t.TempDir())
	cfg.HeartbeatInterval = 200 * time.Millisecond
	launch(t, cfg, testLogger(t))
	eventually(t, 10*time.Second, "the tasks to start", func() bool {
		st, ok := s.lastReported(taskKey{2, 1})
		return ok && st.State == api.StateRunning
	})
	n := s.beatCount()
	time.Sleep(1500 * time.Millisecond)
	// A heartbeat may come early (a task's state to report): each gets its round.
	s.mu.Lock()
	followed, other := 0, map[int]int{}
	for i, b := range s.batches {
		if s.batchBeat[i] < n {
			continue
		}
		for _, c := range b.Chunks {
			if len(c.Data) > 0 && c.JobID == 1 {
				followed++
			}
			if len(c.Data) > 0 && c.JobID == 2 {
				other[s.batchBeat[i]]++
			}
		}
	}
	s.mu.Unlock()
	for beat, n := range other {
		if n > 1 {
			t.Errorf("a log no one reads shipped %d times after heartbeat %d; want once, in the heartbeat's round", n, beat)
		}
	}
	if followed < 4 {
		t.Errorf("the followed log shipped %d times in 1.5 s between heartbeats; want about every 200 ms", followed)
	}
}

// A task's end ships its log's last bytes at once, marked final, and is reported with its
// whole log, long before the next heartbeat would have shipped it.
func TestEndedLogShipsAtOnce(t *testing.T) {
	s := newFakeServer(t)
	s.interval = 5 * time.Second
	stop := filepath.Join(t.TempDir(), "stop")
	s.setDesired(printer(1, stop))
	cfg := agentConfig(t, s, t.TempDir())
	cfg.HeartbeatInterval = 200 * time.Millisecond
	launch(t, cfg, testLogger(t))
	k := taskKey{1, 1}
	eventually(t, 10*time.Second, "the task to run", func() bool {
		st, ok := s.lastReported(k)
		return ok && st.State == api.StateRunning
	})
	time.Sleep(300 * time.Millisecond)
	stopped := time.Now()
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the end report", func() bool { _, ok := s.finalOf(k); return ok })
	took := time.Since(stopped)
	s.mu.Lock()
	defer s.mu.Unlock()
	if took > 3*time.Second {
		t.Errorf("the end was reported %s after the task ended; want at once, not after the log waited for a heartbeat", took)
	}
	if !wellFormed(s.logAtEnd[k], true) {
		t.Errorf("log when the end was reported: %q; want every line and the end", s.logAtEnd[k])
	}
	if s.finalSize[k] != int64(len(s.logs[k])) || s.finalSize[k] == 0 {
		t.Errorf("the final chunk left %d bytes; want the whole log, %d", s.finalSize[k], len(s.logs[k]))
	}
}

// A server of an earlier release has no batch route: the agent ships each log on its own
// and nothing is lost.
func TestLogsShipOneByOneToAnOlderServer(t *testing.T) {
	s := newFakeServer(t)
	s.noBatch = true
	stop := filepath.Join(t.TempDir(), "stop")
	s.setDesired(printer(1, stop), printer(2, stop))
	startAgent(t, s, testLogger(t))
	time.Sleep(500 * time.Millisecond)
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, k := range []taskKey{{1, 1}, {2, 1}} {
		eventually(t, 10*time.Second, "the end report", func() bool { _, ok := s.finalOf(k); return ok })
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range []taskKey{{1, 1}, {2, 1}} {
		if !wellFormed(s.logAtEnd[k], true) {
			t.Errorf("job %d's log when its end was reported: %q", k.job, s.logAtEnd[k])
		}
	}
	if s.oneByOne == 0 || len(s.batches) != 0 {
		t.Errorf("%d one-task requests and %d batches taken; want only one-task requests", s.oneByOne, len(s.batches))
	}
}

// A chunk the server refuses for good (the node holds no such attempt) stops that log
// alone: the others ship, the refused one is not sent again, and its task's end is
// still reported.
func TestRefusedLogStopsAlone(t *testing.T) {
	s := newFakeServer(t)
	s.refuseLogs[taskKey{1, 1}] = true
	stop := filepath.Join(t.TempDir(), "stop")
	s.setDesired(printer(1, stop), printer(2, stop))
	dir := t.TempDir()
	launch(t, agentConfig(t, s, dir), testLogger(t))
	time.Sleep(500 * time.Millisecond)
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, k := range []taskKey{{1, 1}, {2, 1}} {
		eventually(t, 10*time.Second, "the end report", func() bool { _, ok := s.finalOf(k); return ok })
	}
	n := s.beatCount()
	eventually(t, 10*time.Second, "more heartbeats", func() bool { return s.beatCount() > n+5 })
	s.mu.Lock()
	defer s.mu.Unlock()
	refused := 0
	for _, b := range s.batches {
		for _, c := range b.Chunks {
			if c.JobID == 1 {
				refused++
			}
		}
	}
	if refused != 1 {
		t.Errorf("the refused log was sent %d times; want once", refused)
	}
	if !wellFormed(s.logAtEnd[taskKey{2, 1}], true) {
		t.Errorf("the other log when its end was reported: %q", s.logAtEnd[taskKey{2, 1}])
	}
}

// A chunk the server puts off (503: the chunks before it took the batch's time on its
// disk) goes again in a later round, from where the server's copy ends: the log arrives
// whole, and the other task's log, taken meanwhile, is not held back for it.
func TestPutOffLogIsSentAgain(t *testing.T) {
	s := newFakeServer(t)
	first, second := taskKey{1, 1}, taskKey{2, 1}
	s.putOff[first] = 4
	stop := filepath.Join(t.TempDir(), "stop")
	s.setDesired(printer(1, stop), printer(2, stop))
	startAgent(t, s, testLogger(t))
	eventually(t, 10*time.Second, "the put-off log on the server", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.putOff[first] == 0 && strings.Count(string(s.logs[first]), "\n") >= 3
	})
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, k := range []taskKey{first, second} {
		eventually(t, 10*time.Second, "the end report", func() bool { _, ok := s.finalOf(k); return ok })
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range []taskKey{first, second} {
		if !wellFormed(s.logAtEnd[k], true) {
			t.Errorf("log of job %d when its end was reported: %q; want every line once, in order", k.job, s.logAtEnd[k])
		}
	}
	// The batches in which the first log's chunks were put off wrote the other's.
	otherWritten := 0
	for _, i := range s.putOffIn {
		for _, c := range s.batches[i].Chunks {
			if c.JobID == 2 && len(c.Data) > 0 {
				otherWritten++
				break
			}
		}
	}
	if len(s.putOffIn) != 4 || otherWritten == 0 {
		t.Errorf("chunks put off in %d batches, %d of which carried the other log; want 4, and some", len(s.putOffIn), otherWritten)
	}
}

// Chunks other than the last are not made durable by the server: a crash of its machine
// can lose them. The next chunk's offset is then past the copy's end, the server says
// where the copy ends, and the agent sends again from there: the log ends up whole.
func TestLogLostByTheServerIsSentAgain(t *testing.T) {
	s := newFakeServer(t)
	stop := filepath.Join(t.TempDir(), "stop")
	s.setDesired(printer(1, stop))
	startAgent(t, s, testLogger(t))
	k := taskKey{1, 1}
	eventually(t, 10*time.Second, "some lines on the server", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return strings.Count(string(s.logs[k]), "\n") >= 5
	})
	s.mu.Lock()
	s.logs[k] = s.logs[k][:len("line 1\nline 2\n")]
	s.mu.Unlock()
	time.Sleep(300 * time.Millisecond)
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the end report", func() bool { _, ok := s.finalOf(k); return ok })
	s.mu.Lock()
	defer s.mu.Unlock()
	if !wellFormed(s.logAtEnd[k], true) {
		t.Errorf("log when the end was reported: %q; want every line once, in order", s.logAtEnd[k])
	}
}

// A heartbeat asked for early (a task ended, the node synced) does not wait for the log
// round before it: a server slow to take logs must not hold back the reports.
func TestEarlyHeartbeatDoesNotWaitForLogs(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release // a server that takes logs slowly
		json.NewEncoder(w).Encode(api.LogBatchAnswer{Chunks: []api.LogChunkAck{{JobID: 1, Attempt: 1, Size: 0}}})
	}))
	defer srv.Close()
	defer close(release)
	s := testShipper(t, srv)
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); s.bg.Wait() }()
	s.bg.Go(func() { s.run(ctx) })
	s.add(testAttempt(t, 1, nil, false), func() bool { return true })

	// The round waits for the slow server until the deadline it was given...
	start := time.Now()
	if s.round(ctx, start.Add(300*time.Millisecond), nil) {
		t.Error("a round with no wake says it was woken")
	}
	if took := time.Since(start); took < 250*time.Millisecond || took > 2*time.Second {
		t.Errorf("a round held by the server returned after %s; want at its deadline, 300ms", took)
	}
	// ...and a wake ends it at once.
	wake := make(chan struct{}, 1)
	start = time.Now()
	time.AfterFunc(100*time.Millisecond, func() { wake <- struct{}{} })
	if !s.round(ctx, start.Add(10*time.Second), wake) {
		t.Error("a round ended by a wake does not say so")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the early heartbeat waited %s for the logs; want about 100ms", took)
	}
}

// A round with more to send than one batch holds (a node whose agent was down a while)
// sends the end of an ended task's log in its first batch, which the end report waits for.
func TestEndedLogsGoFirstInALongRound(t *testing.T) {
	s := newFakeServer(t)
	sh := testShipper(t, s.srv)
	// The round is run here, not by run: a round of its own would ship the ended log first.
	defer func() { close(sh.quit); sh.bg.Wait() }()
	// Several long logs, so that whichever comes first in the node's map fills a batch.
	for job := int64(1); job <= 3; job++ {
		sh.add(testAttempt(t, job, []byte(strings.Repeat("x", 3<<20)), false), func() bool { return true })
	}
	ended := testAttempt(t, 9, []byte("bye\n"), true)
	sh.add(ended, func() bool { return true })
	sh.ship(context.Background(), true)
	if !isClosed(ended.logShipped) {
		t.Fatal("the ended task's log was not shipped")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, b := range s.batches {
		for _, c := range b.Chunks {
			if len(c.Data) == 0 {
				continue
			}
			if c.JobID != 9 {
				t.Fatalf("batch %d sent job %d's data before the ended task's; want the end first", i, c.JobID)
			}
			if !c.Final || string(c.Data) != "bye\n" {
				t.Errorf("the ended task's chunk %+v; want its whole log, final", c)
			}
			return
		}
	}
	t.Fatal("no batch carried data")
}

// testShipper is node-1's log shipper, sending to srv, with run not started.
func testShipper(t *testing.T, srv *httptest.Server) *logShipper {
	t.Helper()
	servers, _, err := parseServers(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	sh := newLogShipper(srv.Client, servers, "node-1", testLogger(t), time.Hour)
	sh.bg = &sync.WaitGroup{}
	return sh
}

// testAttempt is attempt 1 of job, in a directory of its own, whose log holds log (no
// file for nil), ended or still running.
func testAttempt(t *testing.T, job int64, log []byte, ended bool) *attempt {
	t.Helper()
	dir := t.TempDir()
	a := &attempt{key: attemptKey{cluster: testCluster, job: job, attempt: 1}, dir: dir, logPath: filepath.Join(dir, fileOutput),
		logger: testLogger(t), exited: make(chan struct{}), logShipped: make(chan struct{})}
	if log != nil {
		if err := os.WriteFile(a.logPath, log, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if ended {
		close(a.exited)
	}
	return a
}

// An ended task's end carries its whole log's size, to a server that takes it. A server
// that then holds less (it took over from another, or lost its log directory) names the
// log among those followed, and the agent ships it again from its copy: once the attempt
// is forgotten, and after a restart too. To a server that does not take sizes, none goes.
func TestEndedLogIsShippedAgainWhenAsked(t *testing.T) {
	s := newFakeServer(t)
	s.logSizes = true
	stop := filepath.Join(t.TempDir(), "stop")
	s.setDesired(printer(1, stop))
	dir := t.TempDir()
	ra := launch(t, agentConfig(t, s, dir), testLogger(t))
	k := taskKey{1, 1}
	time.Sleep(300 * time.Millisecond)
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the end report", func() bool { _, ok := s.finalOf(k); return ok })
	s.setDesired()
	whole := s.logOf(k)
	if st, _ := s.finalOf(k); st.LogSize != int64(len(whole)) || !wellFormed(whole, true) {
		t.Fatalf("end reported with a log size of %d; want the whole log's, %d (%q)", st.LogSize, len(whole), whole)
	}
	eventually(t, 10*time.Second, "the attempt forgotten", func() bool {
		ra.mu.Lock()
		defer ra.mu.Unlock()
		return len(ra.attempts) == 0
	})

	lose := func() {
		s.mu.Lock()
		s.logs[k] = nil
		s.followed = []api.TaskRef{{JobID: 1, Attempt: 1}}
		s.mu.Unlock()
	}
	lose()
	eventually(t, 10*time.Second, "the log shipped again", func() bool { return s.logOf(k) == whole })
	// Shipped, it is asked for no more and sent no more.
	s.mu.Lock()
	sent := s.logSent[k]
	s.mu.Unlock()
	n := s.beatCount()
	eventually(t, 10*time.Second, "more heartbeats", func() bool { return s.beatCount() > n+10 })
	s.mu.Lock()
	if s.logSent[k] != sent || len(s.followed) != 0 {
		t.Errorf("%d more bytes sent, still followed: %v; want none once the log was whole", s.logSent[k]-sent, s.followed)
	}
	s.mu.Unlock()

	// A restarted agent has not the attempt in memory at all: its directory serves.
	ra.stop(t)
	lose()
	launch(t, agentConfig(t, s, dir), testLogger(t))
	eventually(t, 10*time.Second, "the log shipped again after a restart", func() bool { return s.logOf(k) == whole })

	// A server that does not say it takes sizes gets none.
	old := newFakeServer(t)
	old.setDesired(printer(1, stop)) // the stop file is there: it prints "end" and exits
	startAgent(t, old, testLogger(t))
	eventually(t, 10*time.Second, "the end report", func() bool { _, ok := old.finalOf(k); return ok })
	if st, _ := old.finalOf(k); st.LogSize != 0 {
		t.Errorf("a server that takes no log sizes was sent one: %d", st.LogSize)
	}
}

// One round sends a log longer than a request holds whole, in as many requests as it
// takes, whether it is the round's only log or one of several: an ended attempt's log
// that the server lost comes back in one round, not a chunk a second.
func TestLongLogShipsInOneRound(t *testing.T) {
	for _, ended := range []bool{true, false} {
		s := newFakeServer(t)
		sh := testShipper(t, s.srv)
		log := []byte(strings.Repeat("y", 5<<20+123))
		a := testAttempt(t, 4, log, ended)
		sh.add(a, func() bool { return true })
		sh.ship(context.Background(), !ended)
		s.mu.Lock()
		got := 0
		for _, b := range s.batches {
			for _, c := range b.Chunks {
				got += len(c.Data)
			}
		}
		requests := len(s.batches)
		s.mu.Unlock()
		if got != len(log) {
			t.Errorf("ended %v: one round sent %d bytes of the %d in %d requests; want all of it", ended, got, len(log), requests)
		}
		if ended && !isClosed(a.logShipped) {
			t.Errorf("the ended attempt's log is not marked shipped after the round")
		}
		close(sh.quit)
		sh.bg.Wait()
	}
}
