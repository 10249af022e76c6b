package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
	"github.com/rotahq/rota/internal/store"
)

// Interactive jobs (api.JobSpec.TTY; the frames are in api/attach.go). The agent of the
// node running the job holds one WebSocket to GET /api/v1/agents/{node}/attach/{job}/
// {attempt}; the job's owner, or an admin, holds one to GET /api/v1/jobs/{id}/attach. The
// server pipes frames between the two, and keeps the last attachReplay bytes of output for
// a terminal that attaches later. One terminal is attached at a time: a new attach takes
// over, and the terminal it replaces is closed with attachTakenOver. A job with no
// terminal attached for AttachGrace (its user's client went away, or never came) is
// cancelled, so an abandoned session does not hold its GPUs.

// attachReplay is how much recent output a terminal gets when it attaches.
const attachReplay = 64 << 10

// attachTakenOver is the close code a terminal gets when another one attaches.
const attachTakenOver websocket.StatusCode = 4001

// attachPending bounds the keystrokes kept while no agent stream is open.
const attachPending = 4 << 10

// attachWriteTimeout bounds one write to a stream: a peer that stops reading is dropped.
const attachWriteTimeout = 10 * time.Second

// wsPeer is one end of a session's relay. Its writes, and its close, go one at a time
// and in order: output replayed to a terminal that just attached reaches it before output
// relayed after it, and before the close that says the job's terminal has closed.
type wsPeer struct {
	conn *websocket.Conn
	mu   sync.Mutex // held for each write and for the close
}

// writeLocked sends one frame; callers hold p.mu.
func (p *wsPeer) writeLocked(frame []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), attachWriteTimeout)
	defer cancel()
	return p.conn.Write(ctx, websocket.MessageBinary, frame)
}

// write sends one frame after those sent before it; a peer that fails a write is dropped.
func (p *wsPeer) write(frame []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.writeLocked(frame)
	if err != nil {
		p.conn.CloseNow()
	}
	return err
}

// close closes the stream with code once the writes begun before it have finished. It
// does not wait: a close waits for the peer's answer.
func (p *wsPeer) close(code websocket.StatusCode, why string) {
	go func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.conn.Close(code, why)
	}()
}

// ttySession is the relay of one interactive job.
type ttySession struct {
	job     int64
	attempt int
	agent   *wsPeer
	client  *wsPeer
	recent  []byte
	// size is the terminal's last resize frame, and pending the keystrokes typed while no
	// agent stream was open (up to attachPending bytes): an agent that connects gets both.
	size    []byte
	pending []byte
	// idle runs while no terminal is attached; when it fires, the job is cancelled.
	idle *time.Timer
	// ended is set when the job's terminal has closed. The session is kept for a grace,
	// so that a terminal attaching a moment late still gets the output and the end.
	ended bool
}

// attachHub holds the sessions of the interactive jobs that have a stream open.
type attachHub struct {
	mu       sync.Mutex
	sessions map[int64]*ttySession
}

// session returns the job's session, made for attempt if it has none or one of an
// earlier attempt. Callers hold h.mu.
func (h *attachHub) session(job int64, attempt int) *ttySession {
	if h.sessions == nil {
		h.sessions = map[int64]*ttySession{}
	}
	ss := h.sessions[job]
	if ss == nil || ss.attempt != attempt {
		if ss != nil {
			ss.closeAll(websocket.StatusNormalClosure, "a new attempt of the job started")
		}
		ss = &ttySession{job: job, attempt: attempt}
		h.sessions[job] = ss
	}
	return ss
}

func (ss *ttySession) closeAll(code websocket.StatusCode, why string) {
	if ss.idle != nil {
		ss.idle.Stop()
		ss.idle = nil
	}
	if ss.client != nil {
		ss.client.close(code, why)
		ss.client = nil
	}
	if ss.agent != nil {
		ss.agent.close(code, why)
		ss.agent = nil
	}
}

// watchIdle starts the grace period of a session with no terminal. Callers hold h.mu.
func (s *Server) watchIdle(ss *ttySession) {
	if ss.client != nil || ss.idle != nil || ss.ended {
		return
	}
	job := ss.job
	ss.idle = time.AfterFunc(s.cfg.AttachGrace, func() {
		s.attach.mu.Lock()
		cur := s.attach.sessions[job]
		gone := cur == ss && ss.client == nil
		if gone {
			ss.idle = nil
			if ss.agent == nil {
				// Nothing is connected (the node was lost, say): nothing will end the
				// session but this.
				delete(s.attach.sessions, job)
			}
		}
		s.attach.mu.Unlock()
		if gone {
			s.hangUp(job, fmt.Sprintf("no terminal attached for %s", s.cfg.AttachGrace))
		}
	})
}

// hangUp cancels an interactive job whose terminal went away.
func (s *Server) hangUp(id int64, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	job, ok := s.state.Job(id)
	if !ok || !job.State.Active() || job.CancelRequested {
		return
	}
	now := s.cfg.Clock.Now()
	job.CancelRequested = true
	b := &store.Batch{Jobs: []api.Job{job}, Events: []api.Event{{Time: now, JobID: id, Attempt: job.Attempts,
		Actor: "rota", Kind: api.EventCancel, Message: "interactive session ended: " + why + "; cancelling"}}}
	if err := s.commit(context.Background(), b); err != nil {
		s.log.Error("cancel an interactive job whose terminal went away", "job", id, "err", err)
		return
	}
	s.log.Info("interactive job cancelled", "job", id, "why", why)
	s.wake()
}

// mayAttach reports whether id may attach a terminal to the job: its owner, or an admin.
// Operators may cancel any job but not type into another user's shell.
func mayAttach(id auth.Identity, j *api.Job) *api.Error {
	if id.Role == auth.RoleAdmin || (id.Role.AtLeast(auth.RoleMember) && j.Spec.User == id.User) {
		return nil
	}
	return forbidden(id, ruleOwnJobs, "job %d belongs to %s; only its owner or an admin may attach to it", j.ID, j.Spec.User)
}

// handleAttach is a user's terminal attaching to an interactive job.
func (s *Server) handleAttach(w http.ResponseWriter, r *http.Request) {
	id, ok := s.jobID(w, r)
	if !ok {
		return
	}
	who := caller(r)
	job, _, found, err := s.lookupJob(r.Context(), id)
	if err != nil {
		storeError(w, "reading the job", err)
		return
	}
	s.mu.Lock()
	var e *api.Error
	if found {
		if e = s.mayRead(who, &job); e == nil {
			e = mayAttach(who, &job)
		}
	}
	s.mu.Unlock()
	switch {
	case !found:
		notFound(w, id)
		return
	case e != nil:
		writeError(w, http.StatusForbidden, e)
		return
	case !job.Spec.TTY:
		writeError(w, http.StatusConflict, &api.Error{Code: api.CodeConflict, Field: "id",
			Message: fmt.Sprintf("job %d has no terminal: only jobs submitted with tty (rota run from a terminal) can be attached; follow its output with rota logs -f %d", id, id)})
		return
	case job.State.Terminal() && !s.attach.hasEnded(id, job.Attempts):
		writeError(w, http.StatusConflict, &api.Error{Code: api.CodeConflict, Field: "id",
			Message: fmt.Sprintf("job %d has ended: %s", id, job.State)})
		return
	case !job.State.Active() && !job.State.Terminal():
		writeError(w, http.StatusConflict, &api.Error{Code: api.CodeConflict, Field: "id",
			Message: fmt.Sprintf("job %d is %s: a terminal attaches once it runs", id, job.State)})
		return
	}
	if !upgrading(w, r) {
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept answered
	}
	c.SetReadLimit(api.MaxFrame + 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	s.attach.mu.Lock()
	ss := s.attach.session(id, job.Attempts)
	if ss.client != nil {
		ss.client.close(attachTakenOver, "another terminal attached to job "+strconv.FormatInt(id, 10))
	}
	me := &wsPeer{conn: c}
	// The replay is written before anything the agent relays from now on, and before
	// the session's close: both wait for me.mu.
	me.mu.Lock()
	ss.client = me
	if ss.idle != nil {
		ss.idle.Stop()
		ss.idle = nil
	}
	replay, ended := slices.Clone(ss.recent), ss.ended
	if ended {
		ss.client = nil
	}
	s.attach.mu.Unlock()
	if s.attached != nil {
		s.attached(id)
	}
	s.log.Info("terminal attached", "job", id, "user", who.User)
	if len(replay) > 0 {
		_ = me.writeLocked(append([]byte{api.FrameData}, replay...))
	}
	me.mu.Unlock()
	if ended {
		me.mu.Lock()
		c.Close(websocket.StatusNormalClosure, "the job's terminal closed")
		me.mu.Unlock()
		return
	}
	for {
		_, msg, err := c.Read(ctx)
		if err != nil {
			break
		}
		if e := checkClientFrame(msg); e != "" {
			c.Close(websocket.StatusPolicyViolation, e)
			break
		}
		s.attach.mu.Lock()
		agent := ss.agent
		mine := ss.client == me
		switch {
		case !mine:
		case msg[0] == api.FrameResize:
			ss.size = slices.Clone(msg)
		case agent == nil && msg[0] == api.FrameData && len(ss.pending)+len(msg)-1 <= attachPending:
			ss.pending = append(ss.pending, msg[1:]...)
		}
		s.attach.mu.Unlock()
		if !mine {
			break
		}
		if agent != nil {
			_ = agent.write(msg)
		}
	}
	c.CloseNow()
	s.attach.mu.Lock()
	if ss.client == me {
		ss.client = nil
		if s.attach.sessions[id] == ss {
			s.watchIdle(ss)
		}
	}
	s.attach.mu.Unlock()
	s.log.Info("terminal detached", "job", id, "user", who.User)
}

// checkClientFrame says what is wrong with a frame from a user's terminal, or "".
func checkClientFrame(msg []byte) string {
	if len(msg) == 0 {
		return "empty frame"
	}
	switch msg[0] {
	case api.FrameData:
		return ""
	case api.FrameResize:
		if _, _, err := api.ParseResize(msg[1:]); err != nil {
			return err.Error()
		}
		return ""
	case api.FrameSignal:
		if !slices.Contains(api.AttachSignals, string(msg[1:])) {
			return fmt.Sprintf("signal %q cannot be sent; the allowed signals are %v", msg[1:], api.AttachSignals)
		}
		return ""
	}
	return fmt.Sprintf("unknown frame kind %q", msg[0])
}

// handleAgentAttach is a node's agent offering the terminal of an interactive attempt it
// runs. Only the node the attempt is placed on may, and only for the job's current attempt.
func (s *Server) handleAgentAttach(w http.ResponseWriter, r *http.Request) {
	node := r.PathValue("node")
	jobID, err1 := strconv.ParseInt(r.PathValue("job"), 10, 64)
	attempt, err2 := strconv.Atoi(r.PathValue("attempt"))
	if err1 != nil || err2 != nil || jobID <= 0 || attempt <= 0 {
		writeError(w, http.StatusBadRequest, invalid("", "the job and attempt must be numbers of 1 or more"))
		return
	}
	s.mu.Lock()
	job, found := s.state.Job(jobID)
	atts := s.state.Attempts(jobID)
	s.mu.Unlock()
	if !found || attempt != len(atts) || !placedOn(atts[attempt-1], node) || !job.State.Active() {
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("job %d has no live attempt %d on node %s", jobID, attempt, node)})
		return
	}
	if !job.Spec.TTY {
		writeError(w, http.StatusConflict, &api.Error{Code: api.CodeConflict, Message: fmt.Sprintf("job %d has no terminal", jobID)})
		return
	}
	if !upgrading(w, r) {
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	c.SetReadLimit(api.MaxFrame + 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	s.attach.mu.Lock()
	ss := s.attach.session(jobID, attempt)
	if ss.agent != nil {
		ss.agent.close(websocket.StatusNormalClosure, "replaced by a new stream from the agent")
	}
	me := &wsPeer{conn: c}
	// The window size and the keys typed before it connected reach the agent before
	// keys typed from now on.
	me.mu.Lock()
	// The supervisor sends its recent output first on every connection.
	ss.agent, ss.recent = me, nil
	s.watchIdle(ss)
	var first [][]byte
	if ss.size != nil {
		first = append(first, ss.size)
	}
	if len(ss.pending) > 0 {
		first = append(first, append([]byte{api.FrameData}, ss.pending...))
		ss.pending = nil
	}
	s.attach.mu.Unlock()
	for _, f := range first {
		_ = me.writeLocked(f)
	}
	me.mu.Unlock()

	var end error
	for {
		_, msg, err := c.Read(ctx)
		if err != nil {
			end = err
			break
		}
		if len(msg) == 0 || msg[0] != api.FrameData {
			continue
		}
		s.attach.mu.Lock()
		if ss.agent != me {
			s.attach.mu.Unlock()
			break
		}
		ss.recent = append(ss.recent, msg[1:]...)
		if len(ss.recent) > attachReplay {
			ss.recent = slices.Clone(ss.recent[len(ss.recent)-attachReplay:])
		}
		client := ss.client
		s.attach.mu.Unlock()
		if client != nil {
			_ = client.write(msg)
		}
	}
	c.CloseNow()
	s.attach.mu.Lock()
	defer s.attach.mu.Unlock()
	if ss.agent != me {
		return
	}
	ss.agent = nil
	if websocket.CloseStatus(end) == websocket.StatusNormalClosure {
		// The job's terminal closed: the job has ended. The session stays a while for a
		// terminal about to attach.
		ss.closeAll(websocket.StatusNormalClosure, "the job's terminal closed")
		ss.ended = true
		time.AfterFunc(s.cfg.AttachGrace, func() {
			s.attach.mu.Lock()
			defer s.attach.mu.Unlock()
			if s.attach.sessions[jobID] == ss {
				delete(s.attach.sessions, jobID)
			}
		})
	}
}

// hasEnded reports whether the job's attempt has a session whose terminal has closed.
func (h *attachHub) hasEnded(job int64, attempt int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	ss := h.sessions[job]
	return ss != nil && ss.attempt == attempt && ss.ended
}

// upgrading reports whether r asks for a WebSocket, and answers 426 where it does not.
func upgrading(w http.ResponseWriter, r *http.Request) bool {
	if hasToken(r.Header, "Connection", "upgrade") && hasToken(r.Header, "Upgrade", "websocket") {
		return true
	}
	w.Header().Set("Upgrade", "websocket")
	writeError(w, http.StatusUpgradeRequired, &api.Error{Code: api.CodeInvalid,
		Message: "this route is a WebSocket: send Connection: Upgrade and Upgrade: websocket (rota run and rota attach do)"})
	return false
}

// hasToken reports whether the comma-separated header holds token, in any case.
func hasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
