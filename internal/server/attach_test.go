package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rotahq/rota/internal/api"
)

// A harness whose interactive jobs are cancelled after grace without a terminal.
func newAttachHarness(t *testing.T, grace time.Duration) *harness {
	t.Helper()
	h := &harness{t: t, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir()}
	h.cfg = func(c *Config) { c.AttachGrace = grace }
	h.open()
	return h
}

// runningTTYJob submits a job with a terminal and has node n1 run it.
func (h *harness) runningTTYJob() api.Job {
	h.t.Helper()
	j := h.submit(api.JobSpec{Command: []string{"bash"}, GPUs: 1, TTY: true, Queue: "interactive"})
	h.beat("n1", 1)
	h.srv.Cycle(context.Background())
	resp := h.beat("n1", 1, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateRunning, PID: 42})
	if len(resp.Tasks) != 1 || !resp.Tasks[0].TTY {
		h.t.Fatalf("n1's desired tasks %+v; want the job, with tty", resp.Tasks)
	}
	if d := h.job(j.ID); d.State != api.StateRunning {
		h.t.Fatalf("job %d is %s; want RUNNING", j.ID, d.State)
	}
	return j
}

// dialAttach opens a user's attach stream, or returns the refusal's status.
func (h *harness) dialAttach(token string, id int64) (*websocket.Conn, int) {
	h.t.Helper()
	hdr := http.Header{}
	if token != "" {
		hdr.Set("Authorization", "Bearer "+token)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, fmt.Sprintf("%s/api/v1/jobs/%d/attach", h.http.URL, id), &websocket.DialOptions{HTTPHeader: hdr})
	if err != nil {
		if resp == nil {
			h.t.Fatalf("attach to job %d: %v", id, err)
		}
		return nil, resp.StatusCode
	}
	h.t.Cleanup(func() { c.CloseNow() })
	return c, http.StatusSwitchingProtocols
}

// dialAgentAttach opens an agent's stream as the in-process agent, for node.
func (h *harness) dialAgentAttach(node string, id int64, attempt int) (*websocket.Conn, int) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, fmt.Sprintf("http://rota-up/api/v1/agents/%s/attach/%d/%d", node, id, attempt), &websocket.DialOptions{HTTPClient: h.agent})
	if err != nil {
		if resp == nil {
			h.t.Fatalf("agent attach: %v", err)
		}
		return nil, resp.StatusCode
	}
	h.t.Cleanup(func() { c.CloseNow() })
	return c, http.StatusSwitchingProtocols
}

func readFrame(t *testing.T, c *websocket.Conn) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, msg, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("read a frame: %v", err)
	}
	return msg
}

func writeFrame(t *testing.T, c *websocket.Conn, frame []byte) {
	t.Helper()
	if err := c.Write(context.Background(), websocket.MessageBinary, frame); err != nil {
		t.Fatalf("write a frame: %v", err)
	}
}

func TestAttachRelaysBetweenTerminalAndAgent(t *testing.T) {
	h := newAttachHarness(t, time.Minute)
	j := h.runningTTYJob()

	// Keys typed and the window size set before the agent's stream opens reach it when
	// it does.
	term, code := h.dialAttach(h.token, j.ID)
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("the owner attaching: status %d", code)
	}
	writeFrame(t, term, api.ResizeFrame(50, 160))
	writeFrame(t, term, []byte("dls\n"))
	time.Sleep(50 * time.Millisecond)

	agent, code := h.dialAgentAttach("n1", j.ID, 1)
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("n1's agent offering the terminal: status %d", code)
	}
	if got := readFrame(t, agent); string(got) != string(api.ResizeFrame(50, 160)) {
		t.Errorf("agent's first frame %q; want the window size", got)
	}
	if got := readFrame(t, agent); string(got) != "dls\n" {
		t.Errorf("agent's second frame %q; want the keys typed before it connected", got)
	}
	writeFrame(t, term, []byte("sINT"))
	if got := readFrame(t, agent); string(got) != "sINT" {
		t.Errorf("agent got %q; want the signal frame", got)
	}
	writeFrame(t, agent, []byte("dhello\r\n"))
	if got := readFrame(t, term); string(got) != "dhello\r\n" {
		t.Errorf("terminal got %q; want the job's output", got)
	}

	// A second terminal takes over, and first gets the recent output.
	term2, _ := h.dialAttach(h.token, j.ID)
	if got := readFrame(t, term2); string(got) != "dhello\r\n" {
		t.Errorf("the second terminal's first frame %q; want the recent output replayed", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := term.Read(ctx); websocket.CloseStatus(err) != attachTakenOver {
		t.Errorf("the first terminal after a take-over: %v; want close code %d", err, attachTakenOver)
	}

	// A frame the protocol does not have closes the stream; a signal outside the list too.
	for _, bad := range [][]byte{[]byte("xjunk"), []byte("sKILL"), {api.FrameResize, 0, 0, 0, 1}, {}} {
		tc, _ := h.dialAttach(h.token, j.ID)
		writeFrame(t, tc, bad)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for {
			_, _, err := tc.Read(ctx)
			if err != nil {
				if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
					t.Errorf("frame %q: stream ended with %v; want close code 1008", bad, err)
				}
				break
			}
		}
		cancel()
	}

	// The job's terminal closing ends the session: the terminal's stream closes normally.
	term3, _ := h.dialAttach(h.token, j.ID)
	readFrame(t, term3) // the replay
	agent.Close(websocket.StatusNormalClosure, "the job's terminal closed")
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if _, _, err := term3.Read(ctx2); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("terminal after the job's terminal closed: %v; want close code 1000", err)
	}
}

func TestAttachIsForTheOwnerAndTheNodeOnly(t *testing.T) {
	h := newAttachHarness(t, time.Minute)
	j := h.runningTTYJob()
	bob := h.addUser("bob", "member")
	olga := h.addUser("olga", "operator")
	for _, tc := range []struct {
		who, token string
		want       int
	}{{"another member", bob, http.StatusForbidden}, {"an operator", olga, http.StatusForbidden}, {"nobody", "", http.StatusUnauthorized}} {
		if _, code := h.dialAttach(tc.token, j.ID); code != tc.want {
			t.Errorf("%s attaching to the admin's job: status %d; want %d", tc.who, code, tc.want)
		}
	}
	if _, code := h.dialAttach(h.token, 999); code != http.StatusNotFound {
		t.Errorf("attaching to no job: %d; want 404", code)
	}
	// Agents: only the node the attempt is placed on, only its current attempt.
	h.beat("n2", 1)
	if _, code := h.dialAgentAttach("n2", j.ID, 1); code != http.StatusNotFound {
		t.Errorf("n2 offering the terminal of a job on n1: %d; want 404", code)
	}
	if _, code := h.dialAgentAttach("n1", j.ID, 2); code != http.StatusNotFound {
		t.Errorf("n1 offering an attempt the job has not had: %d; want 404", code)
	}
	// A node's token-less user route: a user's token never opens an agent route.
	if code, _ := h.call(h.token, "GET", fmt.Sprintf("/api/v1/agents/n1/attach/%d/1", j.ID), "", nil); code != http.StatusForbidden {
		t.Errorf("a user's token on the agent route: %d; want 403", code)
	}
	// A plain GET is not a stream.
	if code, e := h.call(h.token, "GET", fmt.Sprintf("/api/v1/jobs/%d/attach", j.ID), "", nil); code != http.StatusUpgradeRequired || !strings.Contains(e.Message, "WebSocket") {
		t.Errorf("a plain GET: %d %q; want 426 saying it is a WebSocket", code, e.Message)
	}
	// A job without a terminal cannot be attached.
	batch := h.submit(api.JobSpec{Command: []string{"x"}})
	if _, code := h.dialAttach(h.token, batch.ID); code != http.StatusConflict {
		t.Errorf("attaching to a batch job: %d; want 409", code)
	}
}

func TestAttachGraceCancelsAnAbandonedJob(t *testing.T) {
	h := newAttachHarness(t, 150*time.Millisecond)
	j := h.runningTTYJob()
	agent, _ := h.dialAgentAttach("n1", j.ID, 1)
	term, _ := h.dialAttach(h.token, j.ID)
	// Attached: the grace does not run.
	time.Sleep(400 * time.Millisecond)
	if d := h.job(j.ID); d.CancelRequested {
		t.Fatalf("job %d was cancelled while a terminal was attached", j.ID)
	}
	agent.CloseNow() // the node is cut off, say
	term.CloseNow()  // and the client vanishes without a word
	deadline := time.Now().Add(5 * time.Second)
	for !h.job(j.ID).CancelRequested {
		if time.Now().After(deadline) {
			t.Fatalf("job %d still not cancelled %s after its terminal went away", j.ID, time.Since(deadline.Add(-5*time.Second)))
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp := h.beat("n1", 1, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateRunning, PID: 42})
	if len(resp.Tasks) != 1 || !resp.Tasks[0].Stop || resp.Tasks[0].StopReason != api.ReasonCancelled {
		t.Errorf("n1's desired tasks %+v; want the job stopped as cancelled", resp.Tasks)
	}
	h.srv.attach.mu.Lock()
	left := len(h.srv.attach.sessions)
	h.srv.attach.mu.Unlock()
	if left != 0 {
		t.Errorf("%d relay sessions left after the grace ended one with nothing connected", left)
	}
	var ok bool
	for _, e := range h.job(j.ID).Events {
		ok = ok || (e.Kind == api.EventCancel && strings.Contains(e.Message, "no terminal attached"))
	}
	if !ok {
		t.Errorf("job %d's events do not say why it was cancelled", j.ID)
	}
}

func TestTTYSpecLimits(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 2)
	for _, spec := range []api.JobSpec{
		{Command: []string{"x"}, TTY: true, Nodes: 2, GPUsPerNode: 1, GPUs: 2},
		{Command: []string{"x"}, TTY: true, Array: "0-3"},
		{Command: []string{"x"}, TTY: true, Image: "docker.io/library/ubuntu:24.04"},
	} {
		var e api.Error
		if code := h.do("POST", "/api/v1/jobs", spec, &e); code != http.StatusBadRequest || e.Field != "tty" {
			t.Errorf("%+v: %d field %q (%s); want 400 naming tty", spec, code, e.Field, e.Message)
		}
	}
}

// A job that ends before its terminal attaches: the terminal still gets its output and
// the end, for the grace after.
func TestAttachAfterTheJobsTerminalClosed(t *testing.T) {
	h := newAttachHarness(t, time.Minute)
	j := h.runningTTYJob()
	agent, _ := h.dialAgentAttach("n1", j.ID, 1)
	writeFrame(t, agent, []byte("dquick\r\n"))
	agent.Close(websocket.StatusNormalClosure, "the job's terminal closed")
	h.beat("n1", 1, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateSucceeded, PID: 42, ExitCode: new(int)})
	if d := h.job(j.ID); d.State != api.StateSucceeded {
		t.Fatalf("job %d is %s; want SUCCEEDED", j.ID, d.State)
	}
	term, code := h.dialAttach(h.token, j.ID)
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("attaching just after the end: %d; want the stream", code)
	}
	if got := readFrame(t, term); string(got) != "dquick\r\n" {
		t.Errorf("first frame %q; want the job's output", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := term.Read(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Errorf("after the output: %v; want close code 1000", err)
	}
	// Another job that ended, with no session: 409.
	other := h.submit(api.JobSpec{Command: []string{"x"}, TTY: true})
	h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", other.ID), nil, nil)
	if _, code := h.dialAttach(h.token, other.ID); code != http.StatusConflict {
		t.Errorf("attaching to a job cancelled before it ran: %d; want 409", code)
	}
}

// A terminal attaching just as the job's terminal closes gets the output it is owed before
// the end: the replay and the close go to it in order.
func TestAttachRacingTheTerminalsClose(t *testing.T) {
	h := newAttachHarness(t, time.Minute)
	j := h.runningTTYJob()
	agent, _ := h.dialAgentAttach("n1", j.ID, 1)
	writeFrame(t, agent, []byte("dquick\r\n"))
	// The output is the session's before the terminal attaches: it is owed as the replay.
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		h.srv.attach.mu.Lock()
		ss := h.srv.attach.sessions[j.ID]
		held := ss != nil && string(ss.recent) == "quick\r\n"
		h.srv.attach.mu.Unlock()
		if held {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the server did not take the job's output")
		}
	}
	// The job's terminal closes after the terminal has joined the session and before it
	// has been sent what it is owed.
	h.srv.attached = func(id int64) {
		// The close handshake is the agent's to finish; what matters here is the server
		// seeing the job's terminal close while this terminal waits for its replay.
		go agent.Close(websocket.StatusNormalClosure, "the job's terminal closed")
		for end := time.Now().Add(30 * time.Second); !h.srv.attach.hasEnded(id, 1); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(end) {
				t.Error("the session did not end after the agent's stream closed")
				return
			}
		}
	}
	term, code := h.dialAttach(h.token, j.ID)
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("attaching: %d; want the stream", code)
	}
	var got []byte
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		_, msg, err := term.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
				t.Errorf("the stream ended with %v; want close code 1000", err)
			}
			break
		}
		got = append(got, msg...)
	}
	if string(got) != "dquick\r\n" {
		t.Errorf("the terminal got %q before the end; want the job's output", got)
	}
}
