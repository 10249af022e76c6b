package agent

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
)

// fakeServer plays the server's side of the agent protocol and records what it hears.
type fakeServer struct {
	srv *httptest.Server

	mu        sync.Mutex // guards the fields below
	clusterID string
	desired   []api.Task
	// down makes the server drop every connection, as if unreachable.
	down bool
	// refuse answers heartbeats with this status (and refuseMsg) while set.
	refuse    int
	refuseMsg string
	// withholdAcks is how many end reports of a task go unacknowledged first.
	withholdAcks int
	beats        []api.Heartbeat
	// beatAt is when each heartbeat came, slow the delay before the next one is read
	// and answered, and interval the heartbeat interval the answers give (0: 50 ms).
	beatAt   []time.Time
	slow     time.Duration
	interval time.Duration
	refused  int
	// keepHashes makes the server answer with the hash of the inventory it holds, as a
	// rota server does; held is that inventory, and full counts the heartbeats that
	// carried one.
	keepHashes bool
	held       api.Inventory
	full       int
	// ttyOut is what each interactive attempt's stream carried before it closed normally.
	ttyOut     map[taskKey]string
	endReports map[taskKey]int
	final      map[taskKey]api.TaskStatus
	ackedAt    map[taskKey]int
	logs       map[taskKey][]byte
	// logSent counts the log bytes received, resent ones included.
	logSent  map[taskKey]int
	logAtEnd map[taskKey]string
	// batches are the log batches received; oneByOne counts the one-task log requests.
	// With noBatch the server has no batch route; refuseLogs answers a chunk of those
	// attempts with 404, and putOff the next chunks of those with 503, as a server
	// whose disk took the batch's time does.
	batches    []api.LogBatch
	batchBeat  []int // how many heartbeats had come when each batch came
	finalSize  map[taskKey]int64
	oneByOne   int
	noBatch    bool
	refuseLogs map[taskKey]bool
	putOff     map[taskKey]int
	putOffIn   []int // the batches, by index, in which a chunk was put off
	// followed is what answers say someone reads (LogsFollowed); a final chunk takes its
	// log out, as the server does. logSizes makes the answers say the server takes
	// TaskStatus.LogSize.
	followed []api.TaskRef
	logSizes bool
	// dataDirProblems makes the answers say the server takes Heartbeat.DataDirProblem.
	dataDirProblems bool
	events          map[taskKey][]map[string]any
	// stops holds the first Stopped report of each attempt, stopReports how many came.
	stops       map[api.TaskRef]api.StoppedTask
	stopReports map[api.TaskRef]int

	// With a CA the server speaks TLS, lets nodes join with joinToken and takes only
	// heartbeats with a node certificate; certs has the serial of each heartbeat's.
	ca           *auth.CA
	joinToken    string
	joinValidity time.Duration
	joins        int
	renewals     int
	certs        []string
}

func newFakeServer(t *testing.T) *fakeServer {
	s := newFakeState()
	s.srv = httptest.NewServer(s.unlessDown(s.mux()))
	t.Cleanup(s.srv.Close)
	return s
}

func newFakeState() *fakeServer {
	return &fakeServer{
		clusterID:   testCluster,
		endReports:  map[taskKey]int{},
		final:       map[taskKey]api.TaskStatus{},
		ackedAt:     map[taskKey]int{},
		logs:        map[taskKey][]byte{},
		logSent:     map[taskKey]int{},
		logAtEnd:    map[taskKey]string{},
		finalSize:   map[taskKey]int64{},
		refuseLogs:  map[taskKey]bool{},
		putOff:      map[taskKey]int{},
		events:      map[taskKey][]map[string]any{},
		stops:       map[api.TaskRef]api.StoppedTask{},
		stopReports: map[api.TaskRef]int{},
		ttyOut:      map[taskKey]string{},
	}
}

func (s *fakeServer) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/agents/{node}/heartbeat", s.heartbeat)
	mux.HandleFunc("POST /api/v1/agents/{node}/logs/{job}/{attempt}", s.log)
	mux.HandleFunc("POST /api/v1/agents/{node}/logs", s.logBatch)
	mux.HandleFunc("GET /api/v1/agents/{node}/attach/{job}/{attempt}", s.attach)
	return mux
}

// attach takes an interactive attempt's terminal stream as the server does: it sends the
// terminal's window size at once, as it does for a terminal attached first, and records
// the output that comes before the stream closes normally.
func (s *fakeServer) attach(w http.ResponseWriter, r *http.Request) {
	job, _ := strconv.ParseInt(r.PathValue("job"), 10, 64)
	attempt, _ := strconv.Atoi(r.PathValue("attempt"))
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	k := taskKey{job, attempt}
	c.Write(r.Context(), websocket.MessageBinary, api.ResizeFrame(24, 80))
	var out []byte
	for {
		_, msg, err := c.Read(r.Context())
		if err != nil {
			if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
				s.mu.Lock()
				s.ttyOut[k] = string(out)
				s.mu.Unlock()
			}
			return
		}
		if len(msg) > 0 && msg[0] == api.FrameData {
			out = append(out, msg[1:]...)
		}
	}
}

func (s *fakeServer) unlessDown(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		down := s.down
		if down {
			s.refused++
		}
		s.mu.Unlock()
		if !down {
			h.ServeHTTP(w, r)
			return
		}
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	})
}

func (s *fakeServer) heartbeat(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.beatAt = append(s.beatAt, time.Now())
	slow := s.slow
	s.slow = 0
	s.mu.Unlock()
	time.Sleep(slow)
	var hb api.Heartbeat
	if err := json.NewDecoder(r.Body).Decode(&hb); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ca != nil {
		node, serial, ok := "", "", false
		if r.TLS != nil {
			node, serial, ok = auth.NodeFromState(*r.TLS, s.clusterID)
		}
		if !ok || node != r.PathValue("node") {
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(api.Error{Code: api.CodeUnauthorized, Message: "no node certificate for " + r.PathValue("node")})
			return
		}
		s.certs = append(s.certs, serial)
	}
	if s.refuse != 0 {
		s.refused++
		w.WriteHeader(s.refuse)
		json.NewEncoder(w).Encode(api.Error{Code: api.CodeConflict, Message: s.refuseMsg})
		return
	}
	s.beats = append(s.beats, hb)
	resp := api.HeartbeatResponse{Tasks: append([]api.Task(nil), s.desired...), HeartbeatSeconds: cmp(s.interval, 50*time.Millisecond).Seconds(), ClusterID: s.clusterID, LogsFollowed: s.followed, LogSizes: s.logSizes, DataDirProblems: s.dataDirProblems}
	if !reflect.ValueOf(hb.Inventory).IsZero() {
		s.held = hb.Inventory
		s.full++
	}
	if s.keepHashes {
		resp.InventoryHash = api.InventoryHash(s.held)
	}
	for _, st := range hb.Tasks {
		k := taskKey{st.JobID, st.Attempt}
		s.events[k] = append(s.events[k], st.Events...)
		if !st.State.Terminal() {
			continue
		}
		if s.endReports[k] == 0 {
			s.final[k] = st
			s.logAtEnd[k] = string(s.logs[k])
		}
		s.endReports[k]++
		if s.endReports[k] > s.withholdAcks {
			resp.Acked = append(resp.Acked, api.TaskRef{JobID: st.JobID, Attempt: st.Attempt})
			if _, ok := s.ackedAt[k]; !ok {
				s.ackedAt[k] = len(s.beats)
			}
		}
	}
	for _, st := range hb.Stopped {
		ref := api.TaskRef{ClusterID: st.ClusterID, JobID: st.JobID, Attempt: st.Attempt}
		if s.stopReports[ref] == 0 {
			s.stops[ref] = st
		}
		s.stopReports[ref]++
		resp.StoppedAcked = append(resp.StoppedAcked, ref)
	}
	json.NewEncoder(w).Encode(resp)
}

func (s *fakeServer) log(w http.ResponseWriter, r *http.Request) {
	job, err1 := strconv.ParseInt(r.PathValue("job"), 10, 64)
	attempt, err2 := strconv.Atoi(r.PathValue("attempt"))
	offset, err3 := strconv.Atoi(r.URL.Query().Get("offset"))
	data, err4 := io.ReadAll(r.Body)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || len(data) > maxLogChunk {
		http.Error(w, "bad log request", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.oneByOne++
	size, past := s.writeLog(taskKey{job, attempt}, offset, data)
	if past {
		w.WriteHeader(http.StatusConflict)
	}
	json.NewEncoder(w).Encode(api.LogAck{Size: size})
}

// logBatch takes a batch of chunks as the server does; with noBatch set it has no such
// route, as a server of an earlier release.
func (s *fakeServer) logBatch(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.noBatch {
		http.NotFound(w, r)
		return
	}
	var b api.LogBatch
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil || len(b.Chunks) > api.MaxLogBatchChunks {
		http.Error(w, "bad log batch", http.StatusBadRequest)
		return
	}
	s.batches = append(s.batches, b)
	s.batchBeat = append(s.batchBeat, len(s.beats))
	ans := api.LogBatchAnswer{Chunks: []api.LogChunkAck{}}
	for _, c := range b.Chunks {
		ack := api.LogChunkAck{JobID: c.JobID, Attempt: c.Attempt}
		k := taskKey{c.JobID, c.Attempt}
		switch {
		case s.refuseLogs[k]:
			ack.Status, ack.Error = http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Message: "no such attempt on this node"}
		case s.putOff[k] > 0:
			s.putOff[k]--
			s.putOffIn = append(s.putOffIn, len(s.batches)-1)
			ack.Status, ack.Error = http.StatusServiceUnavailable, &api.Error{Code: api.CodeUnavailable, Message: "put off"}
		default:
			ack.Size, _ = s.writeLog(k, int(c.Offset), c.Data)
			if c.Final {
				s.finalSize[k] = ack.Size
				s.followed = slices.DeleteFunc(s.followed, func(r api.TaskRef) bool { return r.JobID == c.JobID && r.Attempt == c.Attempt })
			}
		}
		ans.Chunks = append(ans.Chunks, ack)
	}
	json.NewEncoder(w).Encode(ans)
}

// writeLog writes data at offset of k's log, unless offset is past its end, and returns
// the log's size and whether offset was past it. Callers hold s.mu.
func (s *fakeServer) writeLog(k taskKey, offset int, data []byte) (int64, bool) {
	s.logSent[k] += len(data)
	have := s.logs[k]
	if offset > len(have) {
		return int64(len(have)), true
	}
	if end := offset + len(data); end > len(have) {
		have = append(have, make([]byte, end-len(have))...)
	}
	copy(have[offset:], data)
	s.logs[k] = have
	return int64(len(have)), false
}

func (s *fakeServer) setDesired(tasks ...api.Task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.desired = tasks
}

func (s *fakeServer) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

func (s *fakeServer) finalOf(k taskKey) (api.TaskStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.final[k]
	return st, ok
}

func (s *fakeServer) logOf(k taskKey) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.logs[k])
}

func (s *fakeServer) beatCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.beats)
}

// lastBeat is the latest heartbeat.
func (s *fakeServer) lastBeat() (api.Heartbeat, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.beats) == 0 {
		return api.Heartbeat{}, false
	}
	return s.beats[len(s.beats)-1], true
}

// heartbeats is a copy of every heartbeat heard so far.
func (s *fakeServer) heartbeats() []api.Heartbeat {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]api.Heartbeat(nil), s.beats...)
}

// lastReported is the task's status in the latest heartbeat, if it was there.
func (s *fakeServer) lastReported(k taskKey) (api.TaskStatus, bool) {
	hb, _ := s.lastBeat()
	for _, st := range hb.Tasks {
		if st.JobID == k.job && st.Attempt == k.attempt {
			return st, true
		}
	}
	return api.TaskStatus{}, false
}

// stopOf is the first Stopped report of an attempt of cluster.
func (s *fakeServer) stopOf(cluster string, k taskKey) (api.StoppedTask, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ref := api.TaskRef{ClusterID: cluster, JobID: k.job, Attempt: k.attempt}
	return s.stops[ref], s.stopReports[ref]
}

// startAgent runs an agent against s on a fresh data directory until the test ends.
func startAgent(t *testing.T, s *fakeServer, logger *slog.Logger, tweaks ...func(*Agent)) *runningAgent {
	t.Helper()
	return launch(t, agentConfig(t, s, t.TempDir()), logger, tweaks...)
}

func TestAgentRunsTaskOnceAndReportsItsEnd(t *testing.T) {
	s := newFakeServer(t)
	s.withholdAcks = 3
	runs := filepath.Join(t.TempDir(), "runs")
	k := taskKey{1, 1}
	// The server keeps listing the task after it ended; the agent must not run it again.
	s.setDesired(api.Task{JobID: 1, Attempt: 1, GraceSeconds: 5, Command: []string{"sh", "-c", `
echo run >> "$1"
echo out; echo err >&2
echo '{"progress": {"step": 5, "total": 10}}' >> "$ROTA_EVENTS_FILE"
sleep 0.2
echo done`, "job", runs}})
	a := startAgent(t, s, testLogger(t))

	eventually(t, 20*time.Second, "the end to be acknowledged and dropped", func() bool {
		s.mu.Lock()
		at, acked := s.ackedAt[k]
		n := len(s.beats)
		s.mu.Unlock()
		_, reported := s.lastReported(k)
		return acked && n > at+2 && !reported
	})

	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.final[k]
	if st.State != api.StateSucceeded || st.ExitCode == nil || *st.ExitCode != 0 {
		t.Errorf("final status %+v, want SUCCEEDED with exit code 0", st)
	}
	if s.endReports[k] != s.withholdAcks+1 {
		t.Errorf("end reported %d times, want %d: until acknowledged, then no more", s.endReports[k], s.withholdAcks+1)
	}
	if got := readFile(t, runs); got != "run\n" {
		t.Errorf("the task ran %d times, want once", strings.Count(got, "run"))
	}
	want := "out\nerr\ndone\n"
	if got := string(s.logs[k]); got != want {
		t.Errorf("server log = %q, want %q", got, want)
	}
	if s.logAtEnd[k] != want {
		t.Errorf("log when the end was first reported = %q, want the complete %q", s.logAtEnd[k], want)
	}
	if ev := s.events[k]; len(ev) != 1 || ev[0]["progress"] == nil {
		t.Errorf("events = %v, want the one progress line", ev)
	}
	first, last := s.beats[0], s.beats[len(s.beats)-1]
	inv := first.Inventory
	if first.Node != "node-1" || len(inv.GPUs) != 2 || inv.DeviceSource != SourceFake || inv.Labels["pool"] != "train" || inv.CPUs == 0 || inv.MemoryMB == 0 {
		t.Errorf("first heartbeat: node %q inventory %+v", first.Node, inv)
	}
	if last.Instance != a.instance || len(last.Instance) != 32 || last.PID != os.Getpid() || last.Version == "" || last.ClusterID != testCluster {
		t.Errorf("heartbeat says instance %q pid %d version %q cluster %q, want this agent's (%q, %d) of cluster %s",
			last.Instance, last.PID, last.Version, last.ClusterID, a.instance, os.Getpid(), testCluster)
	}
	if first.Synced || first.ClusterID != "" || !last.Synced {
		t.Errorf("synced %v (cluster %q) in the first heartbeat and %v in the last; want false before any answer, true once in step",
			first.Synced, first.ClusterID, last.Synced)
	}
	dir := attemptDir(a.dataDir, k.in(testCluster))
	for _, f := range []string{fileAcked, fileShipped, fileStatus} {
		if !exists(filepath.Join(dir, f)) {
			t.Errorf("attempt directory lacks %s", f)
		}
	}
}

func TestAgentStopsTasks(t *testing.T) {
	script := `trap 'echo got-term; exit 0' TERM; echo ready; while :; do sleep 0.05; done`
	tests := []struct {
		name   string
		change func(api.Task) []api.Task
		state  api.JobState
		reason string
		// stopped is the reason of the Stopped report the agent must make, if any.
		stopped string
	}{
		{"removed from desired", func(api.Task) []api.Task { return nil }, api.StateCancelled, api.ReasonCancelled, api.StoppedNotListed},
		{"stop cancelled", func(t api.Task) []api.Task {
			t.Stop, t.StopReason = true, api.ReasonCancelled
			return []api.Task{t}
		}, api.StateCancelled, api.ReasonCancelled, ""},
		{"stop preempted", func(t api.Task) []api.Task {
			t.Stop, t.StopReason = true, api.ReasonPreempted
			return []api.Task{t}
		}, api.StateFailed, api.ReasonPreempted, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newFakeServer(t)
			task := api.Task{JobID: 4, Attempt: 2, GraceSeconds: 30, Command: []string{"sh", "-c", script}}
			k := taskKey{4, 2}
			s.setDesired(task)
			startAgent(t, s, testLogger(t))
			eventually(t, 10*time.Second, "the job to start and its log to arrive", func() bool {
				return strings.Contains(s.logOf(k), "ready")
			})
			s.setDesired(tt.change(task)...)
			var st api.TaskStatus
			eventually(t, 20*time.Second, "the end report", func() bool {
				var ok bool
				st, ok = s.finalOf(k)
				return ok
			})
			if st.State != tt.state || st.Reason != tt.reason {
				t.Errorf("got %s reason %q, want %s reason %q", st.State, st.Reason, tt.state, tt.reason)
			}
			// The shell may also report its sleep being terminated; what matters is that
			// the job's last words arrived.
			if got := s.logOf(k); !strings.HasPrefix(got, "ready\n") || !strings.HasSuffix(got, "got-term\n") {
				t.Errorf("server log = %q, want the job's reaction to SIGTERM too", got)
			}
			stop, n := s.stopOf(testCluster, k)
			if stop.Reason != tt.stopped || (tt.stopped != "") != (n == 1) {
				t.Errorf("Stopped report %+v sent %d times, want reason %q once (none for a stop the server asked)", stop, n, tt.stopped)
			}
		})
	}
}

func TestAgentStopBeforeStart(t *testing.T) {
	s := newFakeServer(t)
	marker := filepath.Join(t.TempDir(), "ran")
	s.setDesired(api.Task{JobID: 9, Attempt: 1, Stop: true, StopReason: api.ReasonCancelled,
		Command: []string{"sh", "-c", `touch "$1"`, "job", marker}})
	startAgent(t, s, testLogger(t))
	var st api.TaskStatus
	eventually(t, 10*time.Second, "the end report", func() bool {
		var ok bool
		st, ok = s.finalOf(taskKey{9, 1})
		return ok
	})
	if st.State != api.StateCancelled || st.Reason != api.ReasonCancelled {
		t.Errorf("got %s reason %q, want CANCELLED cancelled", st.State, st.Reason)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("a task stopped before it started ran anyway")
	}
}

func TestAgentKeepsTasksThroughServerOutage(t *testing.T) {
	s := newFakeServer(t)
	logs := &lockedBuffer{}
	release := filepath.Join(t.TempDir(), "release")
	k := taskKey{5, 1}
	s.setDesired(api.Task{JobID: 5, Attempt: 1, GraceSeconds: 5, Command: []string{"sh", "-c",
		`echo start; while [ ! -e "$1" ]; do sleep 0.05; done; echo end`, "job", release}})
	// The log cannot ship while the server is away; do not hold the end back long for it.
	shortFlush := func(a *Agent) { a.runner.flushWait = 200 * time.Millisecond }
	a := startAgent(t, s, slog.New(slog.NewTextHandler(io.MultiWriter(logs, newTestWriter(t)), nil)), shortFlush)

	eventually(t, 10*time.Second, "the task to run", func() bool {
		st, ok := s.lastReported(k)
		return ok && st.State == api.StateRunning
	})
	s.setDown(true)
	eventually(t, 10*time.Second, "heartbeats to fail", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.refused >= 5
	})
	// The job ends while the server is away; its end must reach the server later.
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	att := a.attemptOf(t, k)
	eventually(t, 10*time.Second, "the job to end on the node", func() bool {
		_, ended := att.snapshot()
		return ended
	})
	s.mu.Lock()
	refused := s.refused
	s.mu.Unlock()
	eventually(t, 10*time.Second, "more heartbeats to fail", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.refused >= refused+3
	})
	s.setDown(false)

	var st api.TaskStatus
	eventually(t, 20*time.Second, "the end report and the whole log", func() bool {
		var ok bool
		st, ok = s.finalOf(k)
		return ok && s.logOf(k) == "start\nend\n"
	})
	if st.State != api.StateSucceeded {
		t.Errorf("got %s (%s), want SUCCEEDED: the outage must not stop the job", st.State, st.Message)
	}
	// The agent says so once the answer that carried the end is back: a moment after the
	// server recorded it.
	eventually(t, 10*time.Second, "the reconnect to be logged", func() bool { return strings.Contains(logs.String(), "server reachable again") })
	out := logs.String()
	if n := strings.Count(out, "server unreachable"); n != 1 {
		t.Errorf("outage logged %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, "server reachable again"); n != 1 {
		t.Errorf("reconnect logged %d times, want once", n)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	dir := t.TempDir()
	badYAML := filepath.Join(dir, "fake.yaml")
	if err := os.WriteFile(badYAML, []byte("count: [oops\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no server", Config{DataDir: dir}, "server URL"},
		{"bad server", Config{ServerURL: "rota:8080", DataDir: dir}, "server URL"},
		{"no data dir", Config{ServerURL: "http://x"}, "data directory"},
		{"bad fake gpus", Config{ServerURL: "http://x", DataDir: dir, FakeGPUs: "abc"}, "--fake-gpus"},
		{"https without joining", Config{ServerURL: "https://x:8443", DataDir: dir}, "pass --join with a token from `rota admin join-token`"},
		{"bad join token", Config{ServerURL: "https://x:8443", DataDir: dir, Join: "rotajoin1.nope"}, "--join"},
		{"both fake flags", Config{ServerURL: "http://x", DataDir: dir, FakeGPUs: "2", FakeGPUsConfig: badYAML}, "--fake-gpus and --fake-gpus-config"},
		{"bad fake config", Config{ServerURL: "http://x", DataDir: dir, FakeGPUsConfig: badYAML}, "--fake-gpus-config: fake GPU config " + badYAML},
		{"missing fake config", Config{ServerURL: "http://x", DataDir: dir, FakeGPUsConfig: filepath.Join(dir, "nope.yaml")}, "--fake-gpus-config"},
		{"negative telemetry interval", Config{ServerURL: "http://x", DataDir: dir, TelemetryInterval: -time.Second}, "telemetry interval -1s: want 0"},
		{"negative health interval", Config{ServerURL: "http://x", DataDir: dir, HealthCheckInterval: -time.Second}, "health-check interval -1s"},
		{"negative health timeout", Config{ServerURL: "http://x", DataDir: dir, HealthCheckTimeout: -time.Second}, "health-check timeout -1s"},
		{"negative leftover grace", Config{ServerURL: "http://x", DataDir: dir, KillLeftoversAfter: -time.Minute}, "kill-leftovers-after -1m0s"},
		{"unknown container runtime", Config{ServerURL: "http://x", DataDir: dir, ContainerRuntime: "lxc"}, `--container-runtime: container runtime "lxc": must be podman`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := New(tt.cfg, nil)
			if err == nil {
				a.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New error = %v, want one about %s", err, tt.want)
			}
		})
	}
}

func TestNewOffersResources(t *testing.T) {
	tests := []struct {
		name     string
		cfg      Config
		cpus     int
		memoryMB int64
	}{
		{"fake node offers enough per GPU", Config{FakeGPUs: "64"}, 64 * fakeCPUsPerGPU, 64 * fakeMemoryMBPerGPU},
		{"flags override", Config{FakeGPUs: "64", CPUs: 3, MemoryMB: 2048}, 3, 2048},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.ServerURL, tt.cfg.DataDir = "http://127.0.0.1:1", t.TempDir()
			a, err := New(tt.cfg, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			// 512 CPUs and 4 TiB exceed this machine, so the fake minimum shows.
			if a.inventory.CPUs != tt.cpus || a.inventory.MemoryMB != tt.memoryMB {
				t.Errorf("offers %d CPUs and %d MB, want %d and %d", a.inventory.CPUs, a.inventory.MemoryMB, tt.cpus, tt.memoryMB)
			}
		})
	}
}

// Without GPUs an agent still comes up, CPU-only.
func TestNewWithoutGPUs(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("this machine has an NVIDIA driver")
	}
	logs := &lockedBuffer{}
	a, err := New(Config{ServerURL: "http://127.0.0.1:1", DataDir: t.TempDir()}, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.inventory.DeviceSource != SourceNone || len(a.inventory.GPUs) != 0 {
		t.Errorf("inventory %+v, want no GPUs from source none", a.inventory)
	}
	if n := strings.Count(logs.String(), "no NVIDIA GPUs: NVML not available"); n != 1 {
		t.Errorf("the missing GPUs were logged %d times, want once:\n%s", n, logs)
	}
}

// A notice from the server reaches the job's notice file once per text, is taken back
// when the server drops it, and never replaces a stop notice.
func TestAgentWritesNotices(t *testing.T) {
	s := newFakeServer(t)
	logs := &lockedBuffer{}
	task := api.Task{JobID: 3, Attempt: 1, GraceSeconds: 1, Command: []string{"sh", "-c",
		`echo "$ROTA_NOTICE_FILE" > "$1"; while :; do sleep 0.05; done`, "job", filepath.Join(t.TempDir(), "notice-path")}}
	s.setDesired(task)
	a := startAgent(t, s, testLoggerTo(t, logs))
	k := taskKey{3, 1}
	eventually(t, 10*time.Second, "the task to run", func() bool {
		st, ok := s.lastReported(k)
		return ok && st.State == api.StateRunning
	})
	path := noticePath(attemptDir(a.dataDir, k.in(testCluster)))
	eventually(t, 10*time.Second, "the job to say where its notice file is", func() bool {
		data, _ := os.ReadFile(task.Command[4])
		return strings.HasSuffix(string(data), "\n")
	})
	if got := strings.TrimSpace(readFile(t, task.Command[4])); got != path {
		t.Fatalf("ROTA_NOTICE_FILE = %q, want %q", got, path)
	}

	notice := func(text string) {
		task.Notice = text
		s.setDesired(task)
	}
	readNotice := func() (jobNotice, bool) {
		var n jobNotice
		ok, err := readJSON(path, &n)
		return n, ok && err == nil
	}
	notice("idle for 30m: GPUs below 5% (stop in 1h)")
	eventually(t, 10*time.Second, "the notice file", func() bool {
		n, ok := readNotice()
		return ok && n == jobNotice{Reason: noticeReasonIdle, Message: "idle for 30m: GPUs below 5% (stop in 1h)"}
	})
	// Many heartbeats list the same notice; it is written once.
	n := s.beatCount()
	eventually(t, 10*time.Second, "more heartbeats", func() bool { return s.beatCount() > n+5 })
	if c := strings.Count(logs.String(), "notice written to the job"); c != 1 {
		t.Errorf("notice written %d times for one text, want once", c)
	}

	notice("idle for 45m")
	eventually(t, 10*time.Second, "the new text", func() bool {
		n, ok := readNotice()
		return ok && n.Message == "idle for 45m"
	})
	notice("")
	eventually(t, 10*time.Second, "the notice to be taken back", func() bool { return !exists(path) })
}

func TestNoticeNeverReplacesStopNotice(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, dirJob), 0o700); err != nil {
		t.Fatal(err)
	}
	newAttempt := func() *attempt {
		return &attempt{key: taskKey{1, 1}.in(testCluster), dir: dir, logger: testLogger(t), exited: make(chan struct{}),
			status: api.TaskStatus{State: api.StateRunning}}
	}
	a := &Agent{logger: testLogger(t), notices: map[attemptKey]string{}}
	stop := notice{Reason: api.ReasonTimeout, Deadline: time.Now().Add(time.Minute).UTC()}
	if err := writeNotice(filepath.Join(dir, dirJob), stop); err != nil {
		t.Fatal(err)
	}
	before := readFile(t, noticePath(dir))
	a.deliverNotice(newAttempt(), "idle")
	a.deliverNotice(newAttempt(), "")
	if got := readFile(t, noticePath(dir)); got != before {
		t.Errorf("notice file = %s, want the stop notice %s left alone", got, before)
	}

	// One the agent is stopping is not warned either, whatever the file says.
	os.Remove(noticePath(dir))
	att := newAttempt()
	att.stopReason = api.ReasonPreempted
	a.notices = map[attemptKey]string{}
	a.deliverNotice(att, "idle")
	if exists(noticePath(dir)) {
		t.Error("a notice was written to a task being stopped")
	}

	// A job may have put anything there: a FIFO is replaced, never waited on.
	if err := syscall.Mkfifo(noticePath(dir), 0o644); err != nil {
		t.Fatal(err)
	}
	a.deliverNotice(newAttempt(), "idle")
	var n jobNotice
	if ok, err := readJSON(noticePath(dir), &n); !ok || err != nil || n.Message != "idle" {
		t.Errorf("notice over a FIFO: %+v, %v, %v; want the idle notice", n, ok, err)
	}
}

// A fake GPU config replaces NVML; the inventory says how the node limits jobs and that,
// told so, it runs no images.
func TestNewWithFakeGPUConfig(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(t.TempDir(), "fake.yaml")
	if err := os.WriteFile(config, []byte("count: 3\nmodel: NVIDIA A100-SXM4-40GB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{ServerURL: "http://127.0.0.1:1", DataDir: dir, Name: "n1", FakeGPUsConfig: config, ContainerRuntime: "none"}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	inv := a.inventory
	if len(inv.GPUs) != 3 || inv.GPUs[2].Model != "NVIDIA A100-SXM4-40GB" || inv.DeviceSource != SourceFake {
		t.Errorf("inventory GPUs %+v from %q, want the config's three A100s", inv.GPUs, inv.DeviceSource)
	}
	if inv.ContainerRuntime != "" || !slices.Contains([]string{"cgroup2", "cgroup1", "none"}, inv.Limits) {
		t.Errorf("container runtime %q and limits %q, want none and one of cgroup2, cgroup1, none", inv.ContainerRuntime, inv.Limits)
	}
	if want := filepath.Join(dir, "fake-gpus"); a.runner.jobEnv[EnvFakeGPUDir] != want || fakeDir(t, a) != want {
		t.Errorf("jobs are told %v, want the fake GPUs' directory %s", a.runner.jobEnv, want)
	}
}
