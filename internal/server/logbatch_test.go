package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// shipBatch posts a log batch as node's agent and returns the status and the answer.
func (h *harness) shipBatch(node string, b api.LogBatch) (int, api.LogBatchAnswer, api.Error) {
	h.t.Helper()
	body, _ := json.Marshal(b)
	resp, err := h.agent.Post("http://rota-up/api/v1/agents/"+node+"/logs", "application/json", bytes.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var ans api.LogBatchAnswer
	var e api.Error
	if resp.StatusCode != http.StatusOK {
		json.Unmarshal(data, &e)
	} else if err := json.Unmarshal(data, &ans); err != nil {
		h.t.Fatalf("answer %s: %v", data, err)
	}
	return resp.StatusCode, ans, e
}

// readLog reads job's log from offset as the job's owner, with wait seconds at most.
// shipOne posts data at offset of a task's log through the one-chunk route of agents
// before the batch, and returns the answer's status and body.
func (h *harness) shipOne(node string, job int64, attempt, offset int, data []byte) (int, string) {
	h.t.Helper()
	resp, err := h.agent.Post(fmt.Sprintf("http://rota-up/api/v1/agents/%s/logs/%d/%d?offset=%d", node, job, attempt, offset),
		"application/octet-stream", bytes.NewReader(data))
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (h *harness) readLog(id int64, offset int, wait string) (string, http.Header) {
	h.t.Helper()
	req, _ := http.NewRequest("GET", fmt.Sprintf("%s/api/v1/jobs/%d/logs?offset=%d&wait=%s", h.http.URL, id, offset, wait), nil)
	req.Header.Set("Authorization", "Bearer "+h.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return string(data), resp.Header
}

// One batch writes every task's chunk at its offset, each answered apart: a chunk of an
// attempt the node holds no rank of is refused alone, and a resent or misplaced chunk
// is answered as the one-task route answers it.
func TestLogBatchWritesEachChunk(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 2)
	a := h.submit(api.JobSpec{GPUs: 1, Command: []string{"a"}})
	b := h.submit(api.JobSpec{GPUs: 1, Command: []string{"b"}})
	h.cycle()
	onN1 := func(id int64) bool { return h.job(id).Nodes[0] == "n1" }
	if !onN1(a.ID) || !onN1(b.ID) {
		t.Fatalf("jobs on %v and %v; want both on n1", h.job(a.ID).Nodes, h.job(b.ID).Nodes)
	}
	h.beat("n2", 1)
	other := h.submit(api.JobSpec{GPUs: 1, Command: []string{"c"}})
	h.cycle()
	if got := h.job(other.ID).Nodes; len(got) != 1 || got[0] != "n2" {
		t.Fatalf("third job on %v; want n2", got)
	}

	code, ans, _ := h.shipBatch("n1", api.LogBatch{Chunks: []api.LogChunk{
		{JobID: a.ID, Attempt: 1, Offset: 0, Data: []byte("a1\n")},
		{JobID: b.ID, Attempt: 1, Offset: 0},
		{JobID: other.ID, Attempt: 1, Offset: 0, Data: []byte("intruder\n")},
		{JobID: a.ID, Attempt: 1, Offset: 3, Data: []byte("a2\n"), Final: true},
		{JobID: b.ID, Attempt: 1, Offset: 50, Data: []byte("gap")},
		{JobID: a.ID, Attempt: 2, Offset: 0, Data: []byte("no such attempt")},
	}})
	if code != http.StatusOK || len(ans.Chunks) != 6 {
		t.Fatalf("batch: %d with %d answers; want 200 with 6", code, len(ans.Chunks))
	}
	want := []struct {
		size   int64
		status int
	}{{3, 0}, {0, 0}, {0, 404}, {6, 0}, {0, 0}, {0, 404}}
	for i, w := range want {
		got := ans.Chunks[i]
		if got.Size != w.size || got.Status != w.status || (w.status != 0) != (got.Error != nil) {
			t.Errorf("chunk %d answered size %d status %d error %v; want size %d status %d", i, got.Size, got.Status, got.Error, w.size, w.status)
		}
	}
	if e := ans.Chunks[2].Error; e == nil || e.Field != "chunks[2]" || !strings.Contains(e.Message, "n1") {
		t.Errorf("the refused chunk's error %+v; want it to name chunks[2] and the node", e)
	}
	if got, hdr := h.readLog(a.ID, 0, "0"); got != "a1\na2\n" || hdr.Get("X-Rota-Log-Size") != "6" {
		t.Errorf("job a's log %q; want both chunks", got)
	}
	if got, _ := h.readLog(other.ID, 0, "0"); got != "" {
		t.Errorf("n1 wrote %q into the log of a job on n2", got)
	}
	// The same chunk again changes nothing: a resend after a lost answer is harmless.
	if _, ans, _ := h.shipBatch("n1", api.LogBatch{Chunks: []api.LogChunk{{JobID: a.ID, Attempt: 1, Offset: 3, Data: []byte("a2\n")}}}); ans.Chunks[0].Size != 6 {
		t.Errorf("a resent chunk left the log at %d bytes; want 6", ans.Chunks[0].Size)
	}
}

// holdLogMaking makes the making of the named log wait, once it has its place, until
// release is called (or the test ends); blocked is closed when it is waiting.
func (h *harness) holdLogMaking(log string) (blocked <-chan struct{}, release func()) {
	waiting, released := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(released) }) }
	h.t.Cleanup(release)
	h.srv.openingLog = func(name string) {
		if name == log {
			close(waiting)
			<-released
		}
	}
	return waiting, release
}

// A log slow to be made (a disk slow to allocate files, a network filesystem) holds up
// the writes of no other log: a log's writes are ordered only with its own.
func TestSlowLogHoldsUpNoOtherLog(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 1)
	slow := h.submit(api.JobSpec{GPUs: 1, Command: []string{"a"}})
	h.cycle()
	h.beat("n2", 1)
	fast := h.submit(api.JobSpec{GPUs: 1, Command: []string{"b"}})
	h.cycle()
	if a, b := h.job(slow.ID).Nodes, h.job(fast.ID).Nodes; len(a) != 1 || a[0] != "n1" || len(b) != 1 || b[0] != "n2" {
		t.Fatalf("jobs on %v and %v; want n1 and n2", a, b)
	}
	if _, ans, _ := h.shipBatch("n2", api.LogBatch{Chunks: []api.LogChunk{{JobID: fast.ID, Attempt: 1, Data: []byte("b1\n")}}}); ans.Chunks[0].Size != 3 {
		t.Fatalf("first chunk of the fast log: %+v", ans.Chunks[0])
	}
	blocked, release := h.holdLogMaking(logName(slow.ID, 1, "n1"))
	slowDone := make(chan api.LogChunkAck, 1)
	go func() {
		_, ans, _ := h.shipBatch("n1", api.LogBatch{Chunks: []api.LogChunk{{JobID: slow.ID, Attempt: 1, Data: []byte("a1\n")}}})
		slowDone <- ans.Chunks[0]
	}()
	<-blocked
	fastDone := make(chan api.LogChunkAck, 1)
	go func() {
		_, ans, _ := h.shipBatch("n2", api.LogBatch{Chunks: []api.LogChunk{{JobID: fast.ID, Attempt: 1, Offset: 3, Data: []byte("b2\n")}}})
		fastDone <- ans.Chunks[0]
	}()
	select {
	case ack := <-fastDone:
		if ack.Size != 6 || ack.Status != 0 {
			t.Errorf("the other log's chunk, written while a log was being made: %+v; want size 6", ack)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the other log's chunk waited for a slow log to be made")
	}
	release()
	if ack := <-slowDone; ack.Size != 3 || ack.Status != 0 {
		t.Errorf("the slow log's chunk: %+v; want size 3", ack)
	}
	if got, _ := h.readLog(slow.ID, 0, "0"); got != "a1\n" {
		t.Errorf("slow log %q", got)
	}
	if got, _ := h.readLog(fast.ID, 0, "0"); got != "b1\nb2\n" {
		t.Errorf("fast log %q", got)
	}
}

// The chunks of a batch that come after its time on the disk (logBatchTime) has run out
// are put off: answered 503, naming the chunk, counted on /metrics, and written when the
// node sends them again. The node's next heartbeat waits for the answer on its
// connection, so a slow disk does not hold it for the whole batch.
func TestLogBatchPutsOffWhatItHasNoTimeFor(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 3)
	var ids []int64
	for i := range 3 {
		ids = append(ids, h.submit(api.JobSpec{GPUs: 1, Command: []string{fmt.Sprint(i)}}).ID)
	}
	h.cycle()
	var slowed atomic.Bool
	first := logName(ids[0], 1, "n1")
	h.srv.openingLog = func(name string) {
		if name == first && !slowed.Swap(true) {
			time.Sleep(logBatchTime + 100*time.Millisecond)
		}
	}
	chunk := func(i int) api.LogChunk {
		return api.LogChunk{JobID: ids[i], Attempt: 1, Data: []byte(fmt.Sprintf("x%d\n", i))}
	}
	code, ans, _ := h.shipBatch("n1", api.LogBatch{Chunks: []api.LogChunk{chunk(0), chunk(1), chunk(2)}})
	if code != http.StatusOK || len(ans.Chunks) != 3 {
		t.Fatalf("batch: %d with %d answers; want 200 with 3", code, len(ans.Chunks))
	}
	if a := ans.Chunks[0]; a.Status != 0 || a.Size != 3 {
		t.Errorf("the slow chunk: %+v; want written, size 3", a)
	}
	for i := 1; i < 3; i++ {
		a := ans.Chunks[i]
		if a.Status != http.StatusServiceUnavailable || a.Error == nil || a.Error.Code != api.CodeUnavailable ||
			a.Error.Field != fmt.Sprintf("chunks[%d]", i) || !strings.Contains(a.Error.Message, "put off") || a.JobID != ids[i] {
			t.Errorf("chunk %d after the batch's time: %+v (error %+v); want 503 unavailable, put off, naming chunks[%d]", i, a, a.Error, i)
		}
		if got, _ := h.readLog(ids[i], 0, "0"); got != "" {
			t.Errorf("a put-off chunk was written: %q", got)
		}
	}
	_, fams := h.scrapeMetrics(h.token)
	if v, _ := fams.value("rota_log_chunks_put_off_total", nil); v != 2 {
		t.Errorf("rota_log_chunks_put_off_total %v; want 2", v)
	}
	var st api.ClusterStatus
	if h.do("GET", "/api/v1/status", nil, &st); len(st.Problems) != 1 || !strings.Contains(st.Problems[0], "job logs arrive late") ||
		!strings.Contains(st.Problems[0], "2 pieces") {
		t.Errorf("status problems %q; want one saying logs arrive late, 2 pieces put off", st.Problems)
	}
	_, again, _ := h.shipBatch("n1", api.LogBatch{Chunks: []api.LogChunk{chunk(1), chunk(2)}})
	for i, a := range again.Chunks {
		if a.Status != 0 || a.Size != 3 {
			t.Errorf("chunk %d sent again: %+v; want written", i+1, a)
		}
	}
	for i, id := range ids {
		if got, _ := h.readLog(id, 0, "0"); got != fmt.Sprintf("x%d\n", i) {
			t.Errorf("log of job %d: %q", id, got)
		}
	}
	h.clock.Add(putOffShownFor + time.Second)
	var later api.ClusterStatus
	if h.do("GET", "/api/v1/status", nil, &later); len(later.Problems) != 0 {
		t.Errorf("status problems a minute after the last piece put off: %q; want none", later.Problems)
	}
}

// Logs are made a few at a time (half the server's cores): a log to be made waits for a
// place until its batch's time has run out, and is then put off, while a log already
// there is written without waiting.
func TestLogsMadeAFewAtATime(t *testing.T) {
	h := newHarness(t)
	h.srv.logLocks.making = make(chan struct{}, 1)
	h.beat("n1", 3)
	var ids []int64
	for i := range 3 {
		ids = append(ids, h.submit(api.JobSpec{GPUs: 1, Command: []string{fmt.Sprint(i)}}).ID)
	}
	h.cycle()
	there, making, waiting := ids[0], ids[1], ids[2]
	if _, ans, _ := h.shipBatch("n1", api.LogBatch{Chunks: []api.LogChunk{{JobID: there, Attempt: 1, Data: []byte("a\n")}}}); ans.Chunks[0].Size != 2 {
		t.Fatalf("first chunk: %+v", ans.Chunks[0])
	}
	blocked, release := h.holdLogMaking(logName(making, 1, "n1"))
	made := make(chan api.LogChunkAck, 1)
	go func() {
		_, ans, _ := h.shipBatch("n1", api.LogBatch{Chunks: []api.LogChunk{{JobID: making, Attempt: 1, Data: []byte("m\n")}}})
		made <- ans.Chunks[0]
	}()
	<-blocked
	_, ans, _ := h.shipBatch("n1", api.LogBatch{Chunks: []api.LogChunk{
		{JobID: there, Attempt: 1, Offset: 2, Data: []byte("b\n")},
		{JobID: waiting, Attempt: 1, Data: []byte("w\n")},
	}})
	if a := ans.Chunks[0]; a.Status != 0 || a.Size != 4 {
		t.Errorf("the log already there, while another is made: %+v; want written", a)
	}
	if a := ans.Chunks[1]; a.Status != http.StatusServiceUnavailable || a.Error == nil || !strings.Contains(a.Error.Message, "put off") {
		t.Errorf("the log waiting for a place past its batch's time: %+v (%+v); want put off", a, a.Error)
	}
	// An agent of an earlier release, one piece a request, is put off the same way.
	if code, body := h.shipOne("n1", waiting, 1, 0, []byte("w\n")); code != http.StatusServiceUnavailable || !strings.Contains(body, "put off") {
		t.Errorf("a piece on its own, waiting for a place past a second: %d %s; want 503 put off", code, body)
	}
	release()
	if a := <-made; a.Status != 0 || a.Size != 2 {
		t.Errorf("the log being made: %+v; want written", a)
	}
	if _, ans, _ := h.shipBatch("n1", api.LogBatch{Chunks: []api.LogChunk{{JobID: waiting, Attempt: 1, Data: []byte("w\n")}}}); ans.Chunks[0].Status != 0 || ans.Chunks[0].Size != 2 {
		t.Errorf("the put-off log sent again: %+v; want written", ans.Chunks[0])
	}
	for id, want := range map[int64]string{there: "a\nb\n", making: "m\n", waiting: "w\n"} {
		if got, _ := h.readLog(id, 0, "0"); got != want {
			t.Errorf("log of job %d: %q; want %q", id, got, want)
		}
	}
}

// A batch whose agent has hung up writes no more of it than the chunk under way: the
// answer will not be read, and the node sends the rest again.
func TestLogBatchOfAGoneAgentStops(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 2)
	a := h.submit(api.JobSpec{GPUs: 1, Command: []string{"a"}})
	b := h.submit(api.JobSpec{GPUs: 1, Command: []string{"b"}})
	h.cycle()
	body, _ := json.Marshal(api.LogBatch{Chunks: []api.LogChunk{
		{JobID: a.ID, Attempt: 1, Data: []byte("a\n")}, {JobID: b.ID, Attempt: 1, Data: []byte("b\n")}}})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequestWithContext(ctx, "POST", "/api/v1/agents/n1/logs", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.SetPathValue("node", "n1")
	rec := httptest.NewRecorder()
	h.srv.handleShipLogBatch(rec, req)
	var ans api.LogBatchAnswer
	if err := json.Unmarshal(rec.Body.Bytes(), &ans); err != nil || len(ans.Chunks) != 2 {
		t.Fatalf("answer %d %s: %v", rec.Code, rec.Body, err)
	}
	if ans.Chunks[0].Status != 0 || ans.Chunks[1].Status != http.StatusServiceUnavailable {
		t.Errorf("answers %+v; want the first written and the second put off", ans.Chunks)
	}
	if got, _ := h.readLog(b.ID, 0, "0"); got != "" {
		t.Errorf("the gone agent's second chunk was written: %q", got)
	}
}

// A batch the API does not allow is refused whole, naming the chunk and field at fault,
// and writes nothing.
func TestLogBatchRefusesBadInput(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 1)
	j := h.submit(api.JobSpec{GPUs: 1, Command: []string{"x"}})
	h.cycle()
	ok := api.LogChunk{JobID: j.ID, Attempt: 1, Data: []byte("kept out\n")}
	many := make([]api.LogChunk, api.MaxLogBatchChunks+1)
	for i := range many {
		many[i] = api.LogChunk{JobID: j.ID, Attempt: 1}
	}
	big := bytes.Repeat([]byte("x"), api.MaxLogBatchBytes/2+1)
	for _, c := range []struct {
		name   string
		batch  api.LogBatch
		status int
		field  string
	}{
		{"job 0", api.LogBatch{Chunks: []api.LogChunk{ok, {JobID: 0, Attempt: 1}}}, 400, "chunks[1].job_id"},
		{"attempt 0", api.LogBatch{Chunks: []api.LogChunk{ok, {JobID: j.ID, Attempt: 0}}}, 400, "chunks[1].attempt"},
		{"negative offset", api.LogBatch{Chunks: []api.LogChunk{ok, {JobID: j.ID, Attempt: 1, Offset: -1}}}, 400, "chunks[1].offset"},
		{"too many chunks", api.LogBatch{Chunks: many}, 400, "chunks"},
		{"too many bytes", api.LogBatch{Chunks: []api.LogChunk{ok, {JobID: j.ID, Attempt: 1, Data: big}, {JobID: j.ID, Attempt: 1, Data: big}}}, 400, "chunks"},
	} {
		code, _, e := h.shipBatch("n1", c.batch)
		if code != c.status || e.Field != c.field {
			t.Errorf("%s: %d naming %q (%s); want %d naming %q", c.name, code, e.Field, e.Message, c.status, c.field)
		}
	}
	for _, body := range []string{`{}`, `{"chunks":[{"job_id":1,"attempt":1}]}`, `{"chunks":[{"job_id":1,"attempt":1,"offset":0,"data":"not base64!"}]}`, `[]`} {
		code, e := h.call("local", "POST", "/api/v1/agents/n1/logs", "application/json", []byte(body))
		if code != http.StatusBadRequest || e.Message == "" {
			t.Errorf("body %s: %d %+v; want 400 saying why", body, code, e)
		}
	}
	if code, _ := h.call("local", "POST", "/api/v1/agents/n1/logs", "application/octet-stream", []byte(`{"chunks":[]}`)); code != http.StatusUnsupportedMediaType {
		t.Errorf("a batch not sent as JSON: %d; want 415", code)
	}
	if got, _ := h.readLog(j.ID, 0, "0"); got != "" {
		t.Errorf("a refused batch wrote %q", got)
	}
}

// Reading a running task's log makes its node's answers name it, and wakes the node's
// watch so that the agent hears at once; 30 s after the last read it is named no more.
func TestReadingALogFollowsIt(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 1)
	j := h.submit(api.JobSpec{GPUs: 1, Command: []string{"x"}})
	h.cycle()
	start := h.clock.Now()
	running := api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateRunning, StartTime: &start}
	if got := h.beat("n1", 1, running).LogsFollowed; len(got) != 0 {
		t.Fatalf("followed %v before anyone read the log", got)
	}
	before, _ := h.srv.watch.current("n1")
	h.readLog(j.ID, 0, "0")
	after, _ := h.srv.watch.current("n1")
	if after == before {
		t.Error("the first read of a log did not wake the node's watch")
	}
	want := []api.TaskRef{{JobID: j.ID, Attempt: 1}}
	if got := h.beat("n1", 1, running).LogsFollowed; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after a read the answer names %v; want %v", got, want)
	}
	// Reads that keep coming keep it followed, and wake the watch no more.
	h.clock.Add(20 * time.Second)
	h.readLog(j.ID, 0, "0")
	if again, _ := h.srv.watch.current("n1"); again != after {
		t.Error("a log still followed woke the watch again")
	}
	h.clock.Add(20 * time.Second)
	if got := h.beat("n1", 1, running).LogsFollowed; len(got) != 1 {
		t.Errorf("20 s after the last read the answer names %v; want the log", got)
	}
	h.clock.Add(11 * time.Second)
	if got := h.beat("n1", 1, running).LogsFollowed; len(got) != 0 {
		t.Errorf("31 s after the last read the answer names %v; want none", got)
	}
	// The log of a task that has ended is followed by no one.
	h.end("n1", j.ID, 1, api.StateSucceeded, 0)
	h.readLog(j.ID, 0, "0")
	if got := h.beat("n1", 1).LogsFollowed; len(got) != 0 {
		t.Errorf("an ended task's log is followed: %v", got)
	}
}

// A node's followed logs are forgotten when no one reads them, whichever node asks.
func TestLogFollowsAreSwept(t *testing.T) {
	var f logFollows
	now := time.Unix(1000, 0)
	for i := range 100 {
		f.follow(fmt.Sprintf("n%d", i), 1, 1, now)
	}
	if !f.follow("n0", 1, 1, now.Add(followFor)) {
		t.Error("a log last read followFor ago counted as still followed")
	}
	if len(f.byNode) != 1 {
		t.Errorf("%d nodes kept after a sweep; want only the one read since", len(f.byNode))
	}
}

// A server that holds less of an ended rank's log than its node reported with the end
// (it took over from another server, or lost its log directory) asks the node for the
// rest through the heartbeat answers, and a reader waits for it, up to LogRepairWait;
// the final chunk ends the asking, though the job has left memory meanwhile. A node that
// does not send it, or cannot, leaves the reader what there is, marked incomplete.
func TestShortLogIsAskedOfItsNode(t *testing.T) {
	h := &harness{t: t, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir(),
		cfg: func(c *Config) { c.LogRepairWait = 1500 * time.Millisecond; c.KeepEnded = time.Hour }}
	h.open()
	h.beat("n1", 2)
	a := h.submit(api.JobSpec{GPUs: 1, Command: []string{"a"}})
	b := h.submit(api.JobSpec{GPUs: 1, Command: []string{"b"}})
	h.cycle() // both on n1, which they fill
	h.beat("n2", 1)
	c := h.submit(api.JobSpec{GPUs: 1, Command: []string{"c"}})
	h.cycle()
	start := h.clock.Now()
	running := func(id int64) api.TaskStatus {
		return api.TaskStatus{JobID: id, Attempt: 1, State: api.StateRunning, StartTime: &start}
	}
	h.beat("n1", 2, running(a.ID), running(b.ID))
	h.beat("n2", 1, running(c.ID))
	whole := "part one\npart two\n"
	if code, _, e := h.shipBatch("n1", api.LogBatch{Chunks: []api.LogChunk{{JobID: a.ID, Attempt: 1, Data: []byte("part one\n")}}}); code != http.StatusOK {
		t.Fatalf("ship: %d %v", code, e)
	}
	ended := func(id int64, size int) api.TaskStatus {
		return api.TaskStatus{JobID: id, Attempt: 1, State: api.StateSucceeded, ExitCode: intp(0), EndTime: &start, LogSize: int64(size)}
	}
	// The ends come with the logs' sizes; the last piece of a's went elsewhere, and none
	// of b's or c's came here.
	if resp := h.beat("n1", 2, ended(a.ID, len(whole)), ended(b.ID, 7)); !resp.LogSizes {
		t.Fatal("the heartbeat answer does not say the server takes log sizes")
	}
	h.beat("n2", 1, ended(c.ID, 5))
	if p := h.job(a.ID).AttemptList[0].Placements[0]; p.LogSize != int64(len(whole)) {
		t.Fatalf("placement records a log size of %d; want %d", p.LogSize, len(whole))
	}

	// A read gets what there is, not done, and names the log to the node.
	before, _ := h.srv.watch.current("n1")
	body, hdr := h.readLog(a.ID, 0, "0")
	if body != "part one\n" || hdr.Get("X-Rota-Log-Done") != "false" {
		t.Fatalf("read %q, done %q; want the first part, not done", body, hdr.Get("X-Rota-Log-Done"))
	}
	// The size to read up to is the whole log's, so that a reader without wait (rota logs)
	// asks for the rest rather than stop where this copy ends.
	if got := hdr.Get("X-Rota-Log-Size"); got != strconv.Itoa(len(whole)) {
		t.Errorf("X-Rota-Log-Size %s while the rest is asked for; want the whole log's, %d", got, len(whole))
	}
	if after, _ := h.srv.watch.current("n1"); after == before {
		t.Error("a short log did not wake its node's watch")
	}
	if got := h.beat("n1", 2).LogsFollowed; !slices.Contains(got, api.TaskRef{JobID: a.ID, Attempt: 1}) {
		t.Errorf("the answer names %v; want job %d's log asked for again", got, a.ID)
	}
	// A read from where the copy ends waits for the rest, which the node sends.
	got := make(chan string, 1)
	go func() {
		body, hdr := h.readLog(a.ID, len("part one\n"), "0")
		got <- body + "|" + hdr.Get("X-Rota-Log-Done") + "|" + hdr.Get("X-Rota-Log-Incomplete")
	}()
	time.Sleep(200 * time.Millisecond)
	if code, ans, e := h.shipBatch("n1", api.LogBatch{Chunks: []api.LogChunk{{JobID: a.ID, Attempt: 1, Data: []byte(whole), Final: true}}}); code != http.StatusOK || ans.Chunks[0].Status != 0 {
		t.Fatalf("ship the rest: %d %v %+v", code, e, ans)
	}
	if r := <-got; r != "part two\n|true|" {
		t.Errorf("the waiting read got %q; want the rest, done, complete", r)
	}
	if got := h.beat("n1", 2).LogsFollowed; slices.Contains(got, api.TaskRef{JobID: a.ID, Attempt: 1}) {
		t.Errorf("after the final chunk the answer still names job %d's log: %v", a.ID, got)
	}
	if body, hdr := h.readLog(a.ID, 0, "0"); body != whole || hdr.Get("X-Rota-Log-Done") != "true" || hdr.Get("X-Rota-Log-Incomplete") != "" {
		t.Errorf("whole log: %q, done %q, incomplete %q", body, hdr.Get("X-Rota-Log-Done"), hdr.Get("X-Rota-Log-Incomplete"))
	}

	// b's node sends nothing: the reader gets nothing, marked incomplete, once
	// LogRepairWait has passed, and at once after that.
	for range 2 {
		body, hdr = h.readLog(b.ID, 0, "0")
		if body != "" || hdr.Get("X-Rota-Log-Done") != "true" || !strings.Contains(hdr.Get("X-Rota-Log-Incomplete"), "holds 0 of the 7 bytes node n1 reported; the node has sent none of the rest for 1.5s") {
			t.Errorf("unsent log: %q, done %q, incomplete %q", body, hdr.Get("X-Rota-Log-Done"), hdr.Get("X-Rota-Log-Incomplete"))
		}
	}
	// Two hours on, b has left memory; the node's chunk for it is still taken while the
	// server asks for it, and completes it.
	h.clock.Add(2 * time.Hour)
	h.beat("n1", 2)
	h.beat("n2", 1)
	h.cycle()
	if _, evicted := h.srv.state.Evicted(b.ID); !evicted {
		t.Fatal("job b is still in memory")
	}
	h.readLog(b.ID, 0, "0") // asks again: the last ask was more than followFor ago
	if code, ans, _ := h.shipBatch("n1", api.LogBatch{Chunks: []api.LogChunk{{JobID: b.ID, Attempt: 1, Data: []byte("b done\n"), Final: true}}}); code != http.StatusOK || ans.Chunks[0].Status != 0 {
		t.Fatalf("ship b's log after it left memory: %d %+v", code, ans)
	}
	if body, hdr := h.readLog(b.ID, 0, "0"); body != "b done\n" || hdr.Get("X-Rota-Log-Incomplete") != "" {
		t.Errorf("b's log: %q, incomplete %q", body, hdr.Get("X-Rota-Log-Incomplete"))
	}
	// A chunk of a job out of memory that the server did not ask for is refused.
	if _, ans, _ := h.shipBatch("n2", api.LogBatch{Chunks: []api.LogChunk{{JobID: c.ID, Attempt: 1, Data: []byte("c\n")}}}); ans.Chunks[0].Status != http.StatusNotFound {
		t.Errorf("an unasked chunk of a job out of memory: %+v; want 404", ans.Chunks[0])
	}

	// c's node is lost: the reader is told at once, and why.
	h.clock.Add(2 * time.Minute)
	h.beat("n1", 2)
	h.srv.checkNodes(context.Background())
	if n, _ := h.srv.state.Node("n2"); n.State != api.NodeLost {
		t.Fatalf("n2 is %s; want LOST", n.State)
	}
	body, hdr = h.readLog(c.ID, 0, "0")
	if body != "" || hdr.Get("X-Rota-Log-Done") != "true" || !strings.Contains(hdr.Get("X-Rota-Log-Incomplete"), "node n2 reported; the node is LOST") {
		t.Errorf("log on a lost node: %q, done %q, incomplete %q", body, hdr.Get("X-Rota-Log-Done"), hdr.Get("X-Rota-Log-Incomplete"))
	}
}

// A reader of a log the node is sending again waits for as long as it keeps coming: the
// repair's wait runs from the last piece that arrived, not from the first ask, so a long
// log that takes longer than LogRepairWait to come back is read whole.
func TestLogRepairWaitsWhileTheLogComes(t *testing.T) {
	h, j, start := oneRunning(t, func(c *Config) { c.LogRepairWait = time.Second })
	const pieces, piece = 8, "0123456789\n"
	h.beat("n1", 1, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateSucceeded, ExitCode: intp(0), EndTime: &start,
		LogSize: int64(pieces * len(piece))})

	// The node sends a piece every 250 ms: 2 s in all, twice the wait.
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range pieces {
			time.Sleep(250 * time.Millisecond)
			c := api.LogChunk{JobID: j.ID, Attempt: 1, Offset: int64(i * len(piece)), Data: []byte(piece), Final: i == pieces-1}
			if code, ans, e := h.shipBatch("n1", api.LogBatch{Chunks: []api.LogChunk{c}}); code != http.StatusOK || ans.Chunks[0].Status != 0 {
				t.Errorf("ship piece %d: %d %v %+v", i, code, e, ans)
				return
			}
		}
	}()
	var got strings.Builder
	for reads := 0; ; reads++ {
		body, hdr := h.readLog(j.ID, got.Len(), "0")
		got.WriteString(body)
		if inc := hdr.Get("X-Rota-Log-Incomplete"); inc != "" {
			t.Fatalf("after %d bytes the reader was told the log is incomplete: %s", got.Len(), inc)
		}
		if hdr.Get("X-Rota-Log-Done") == "true" {
			break
		}
		if reads > 100 {
			t.Fatalf("not done after %d reads, %d bytes", reads, got.Len())
		}
	}
	<-sent
	if want := strings.Repeat(piece, pieces); got.String() != want {
		t.Errorf("read %q; want %q", got.String(), want)
	}
}

// The server keeps at most MaxLogSize of a rank's log: the bytes before the limit are
// written, those past it refused with 413, which makes the agent stop sending that log,
// and a read of the ended rank's log gives the part kept, done, with the reason it is
// not whole, at once: the node is not asked for the rest.
func TestLogLimit(t *testing.T) {
	h, j, start := oneRunning(t, func(c *Config) { c.MaxLogSize = 100 })
	line := strings.Repeat("x", 59) + "\n"
	// A node whose limit is the same ends its copy at the limit and offers no more: a log
	// as long as the limit, nothing refused, is followed as any other.
	h2, j2, _ := oneRunning(t, func(c *Config) { c.MaxLogSize = 120 })
	if code, ans, e := h2.shipBatch("n1", api.LogBatch{Chunks: []api.LogChunk{{JobID: j2.ID, Attempt: 1, Data: []byte(line + line)}}}); code != http.StatusOK || ans.Chunks[0].Status != 0 {
		t.Fatalf("a log of exactly the limit: %d %+v %v; want it taken", code, ans.Chunks[0], e)
	}
	if body, hdr := h2.readLog(j2.ID, 0, "0"); body != line+line || hdr.Get("X-Rota-Log-Full") != "" {
		t.Errorf("a log of exactly the limit: read %q, full %q; want it all, not said to be full", body, hdr.Get("X-Rota-Log-Full"))
	}
	if got := h2.beat("n1", 1).LogsFollowed; !slices.Contains(got, api.TaskRef{JobID: j2.ID, Attempt: 1}) {
		t.Errorf("a log of exactly the limit is not followed: %v", got)
	}

	ship := func(offset int) api.LogChunkAck {
		t.Helper()
		code, ans, e := h.shipBatch("n1", api.LogBatch{Chunks: []api.LogChunk{{JobID: j.ID, Attempt: 1, Offset: int64(offset), Data: []byte(line)}}})
		if code != http.StatusOK {
			t.Fatalf("ship at %d: %d %v", offset, code, e)
		}
		return ans.Chunks[0]
	}
	if ack := ship(0); ack.Status != 0 || ack.Size != 60 {
		t.Fatalf("first 60 bytes: %+v; want taken", ack)
	}
	ack := ship(60)
	if ack.Status != http.StatusRequestEntityTooLarge || ack.Size != 100 || ack.Error == nil ||
		ack.Error.Field != "chunks[0].data" || !strings.Contains(ack.Error.Message, "limit of 100 bytes a rank (rota server --max-log-size); the rest stays on node n1") {
		t.Fatalf("bytes 60 to 120 with a limit of 100: %+v %v; want 413 naming the limit, the first 40 kept", ack, ack.Error)
	}
	if ack := ship(100); ack.Status != http.StatusRequestEntityTooLarge || ack.Size != 100 {
		t.Errorf("bytes past the limit: %+v; want 413 and nothing kept", ack)
	}
	// The one-chunk route of older agents keeps to the same limit.
	code, body := h.shipOne("n1", j.ID, 1, 100, []byte("more\n"))
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "max-log-size") {
		t.Errorf("one chunk past the limit: %d %s; want 413 naming the limit", code, body)
	}

	// A reader of the running task's log is told now that no more of it will come here.
	body, hdr := h.readLog(j.ID, 0, "0")
	if want := (line + line)[:100]; body != want || hdr.Get("X-Rota-Log-Done") != "false" ||
		!strings.Contains(hdr.Get("X-Rota-Log-Full"), "keeps the first 100 bytes of a rank's log (rota server --max-log-size); the rest stays on node n1") {
		t.Errorf("running: read %q, done %q, full %q; want the part kept and the limit named", body, hdr.Get("X-Rota-Log-Done"), hdr.Get("X-Rota-Log-Full"))
	}

	h.beat("n1", 1, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateSucceeded, ExitCode: intp(0), EndTime: &start, LogSize: 1000})
	began := time.Now()
	body, hdr = h.readLog(j.ID, 0, "0")
	if want := (line + line)[:100]; body != want || hdr.Get("X-Rota-Log-Done") != "true" || hdr.Get("X-Rota-Log-Full") != "" {
		t.Errorf("read %q, done %q; want the first 100 bytes, done", body, hdr.Get("X-Rota-Log-Done"))
	}
	if inc := hdr.Get("X-Rota-Log-Incomplete"); !strings.Contains(inc, "keeps the first 100 bytes of a rank's log (rota server --max-log-size); node n1 wrote 1000 bytes") {
		t.Errorf("incomplete %q; want it to name the limit and the node's size", inc)
	}
	if waited := time.Since(began); waited > 5*time.Second {
		t.Errorf("the read took %v, as if it waited the 10 s for the node: a log cut at the limit is not asked of it", waited)
	}
	if got := h.beat("n1", 1).LogsFollowed; slices.Contains(got, api.TaskRef{JobID: j.ID, Attempt: 1}) {
		t.Errorf("the node is asked for the log past the limit: %v", got)
	}
}

// oneRunning is a server configured by cfg with one node, n1, of one GPU, running one
// job, which started at the time it returns.
func oneRunning(t *testing.T, cfg func(*Config)) (*harness, api.Job, time.Time) {
	t.Helper()
	h := &harness{t: t, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir(), cfg: cfg}
	h.open()
	h.beat("n1", 1)
	j := h.submit(api.JobSpec{GPUs: 1, Command: []string{"a"}})
	h.cycle()
	start := h.clock.Now()
	h.beat("n1", 1, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateRunning, StartTime: &start})
	return h, j, start
}

// A place among the logs being made is taken at once where one is free, even past the
// deadline; otherwise it is waited for until the deadline, or for ever without one.
func TestLogPlaces(t *testing.T) {
	var l logLocks
	l.making = make(chan struct{}, 1)
	past := time.Now().Add(-time.Second)
	if !l.place(past) {
		t.Fatal("a free place was refused past the deadline")
	}
	if l.place(past) {
		t.Error("a place was given past the deadline where none is free")
	}
	start := time.Now()
	if l.place(start.Add(50 * time.Millisecond)) {
		t.Error("a place was given where none was freed")
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Errorf("gave up after %v; want the deadline waited for", waited)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		<-l.making
	}()
	if !l.place(time.Time{}) {
		t.Error("no place after one was freed, with no deadline")
	}
}
