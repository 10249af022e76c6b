package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// Log shipping limits: the protocol caps a one-task request at 1 MiB, and a batch at
// api.MaxLogBatchBytes of data.
const (
	maxLogChunk    = 1 << 20
	maxLogPoll     = time.Second
	logBackoffMin  = 100 * time.Millisecond
	logBackoffMax  = 5 * time.Second
	logRequestTime = 30 * time.Second
)

// logShipper copies each attempt's output.log to the server, one request for all of them.
//
// A round ships every log that has grown: the heartbeat loop asks for one after each
// answered heartbeat (round), on the connection the heartbeat just left, before the watch
// takes it. So a node costs the server one more request per heartbeat interval, however
// many tasks it runs, and the interval is the server's to pace. Between rounds, every
// fast (a second at most) the logs someone reads (api.HeartbeatResponse.LogsFollowed)
// and those of attempts that ended ship: a reader sees output within a second, and an
// end is reported with its whole log.
type logShipper struct {
	// client is the agent's current client: a renewed certificate replaces it.
	client  func() *http.Client
	servers *serverSet
	node    string
	logger  *slog.Logger
	// fast is how stale a followed or ended log may be.
	fast time.Duration
	// bg runs the goroutines that wait for attempts to end.
	bg *sync.WaitGroup

	// rounds carries the heartbeat loop's asks for a round, each closed when done.
	rounds chan chan struct{}
	// kick asks for a fast round now: an attempt ended, or a log came to be followed.
	kick chan struct{}
	// quit is closed when run returns.
	quit chan struct{}

	mu       sync.Mutex // guards the fields below
	logs     map[attemptKey]*shipLog
	followed map[api.TaskRef]bool // job and attempt, no cluster
	stopped  bool                 // run has returned: nothing more ships

	// oneByOne is set once the server has been found without the batch route (a server
	// of an earlier release): chunks then go one request each. Only run's goroutine
	// reads or writes it.
	oneByOne bool
}

// shipLog is one attempt's log being shipped. Only run's goroutine reads or writes its
// fields after add.
type shipLog struct {
	att     *attempt
	current func() bool
	// offset is the size of the server's copy, once known.
	offset int64
	known  bool
	// retryAt holds a log back after a failure, for backoff.
	retryAt time.Time
	backoff time.Duration
	failing bool
	warned  bool
	// gone is set once the log ships no more.
	gone bool
}

func newLogShipper(client func() *http.Client, servers *serverSet, node string, logger *slog.Logger, fast time.Duration) *logShipper {
	return &logShipper{
		client: client, servers: servers, node: node, logger: logger, fast: fast,
		rounds: make(chan chan struct{}), kick: make(chan struct{}, 1), quit: make(chan struct{}),
		logs: map[attemptKey]*shipLog{},
	}
}

// errPermanent marks an answer that a resend would only repeat.
var errPermanent = errors.New("rejected by the server")

// add ships the log of a until the attempt has ended and every byte is on the server, or
// the shipper stops, or current says the attempt is no longer of the server's cluster.
// It starts where the server's copy ends, so a restarted agent resends nothing. It closes
// a.logShipped when it will send no more, which lets the end be reported, and records a
// log that is complete on the server, which lets housekeeping remove the attempt.
func (s *logShipper) add(a *attempt, current func() bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		a.markLogShipped()
		return
	}
	if _, ok := s.logs[a.key]; ok {
		return
	}
	s.logs[a.key] = &shipLog{att: a, current: current, backoff: logBackoffMin}
	s.bg.Go(func() {
		select {
		case <-a.exited:
			s.poke()
		case <-s.quit:
		}
	})
	s.poke()
}

// shipping reports whether the log of the attempt k is being shipped.
func (s *logShipper) shipping(k attemptKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.logs[k]
	return ok
}

// poke asks for a fast round.
func (s *logShipper) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// follow takes the logs the server says someone reads, from a heartbeat's answer.
func (s *logShipper) follow(refs []api.TaskRef) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[api.TaskRef]bool, len(refs))
	added := false
	for _, r := range refs {
		r.ClusterID = ""
		next[r] = true
		added = added || !s.followed[r]
	}
	s.followed = next
	if added {
		s.poke()
	}
}

// round ships every log that has grown, and returns when that is done, or at until, or
// when ctx ends, or at a receive from wake, when it reports true: the heartbeat loop's
// early heartbeat (a task ended) must not wait for the logs.
func (s *logShipper) round(ctx context.Context, until time.Time, wake <-chan struct{}) (woken bool) {
	ctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	done := make(chan struct{})
	select {
	case s.rounds <- done:
	case <-ctx.Done():
		return false
	case <-s.quit:
		return false
	case <-wake:
		return true
	}
	select {
	case <-done:
		return false
	case <-ctx.Done():
		return false
	case <-wake:
		return true
	}
}

// run ships until ctx ends, and then lets every attempt's end be reported.
func (s *logShipper) run(ctx context.Context) {
	defer func() {
		s.mu.Lock()
		s.stopped = true
		for _, l := range s.logs {
			l.att.markLogShipped()
		}
		s.mu.Unlock()
		close(s.quit)
	}()
	tick := time.NewTicker(s.fast)
	defer tick.Stop()
	for {
		var done chan struct{}
		select {
		case <-ctx.Done():
			return
		case done = <-s.rounds:
		case <-tick.C:
		case <-s.kick:
		}
		s.ship(ctx, done != nil)
		if done != nil {
			close(done)
		}
	}
}

// pending is one log's part of a round: what to send of it, up to the size it had when
// the round began (a log that grows as fast as it ships must not hold the round for ever).
type pending struct {
	l        *shipLog
	upTo     int64
	ended    bool
	followed bool
}

// urgency orders a round's logs: ended, followed, the others.
func (p pending) urgency() int {
	switch {
	case p.ended:
		return 0
	case p.followed:
		return 1
	}
	return 2
}

// ship sends, in as few requests as the limits allow, the logs due: all of them in a
// heartbeat's round, else the followed and ended ones.
func (s *logShipper) ship(ctx context.Context, all bool) {
	now := time.Now()
	var due []pending
	s.mu.Lock()
	for k, l := range s.logs {
		a := l.att
		ended := isClosed(a.exited)
		followed := s.followed[api.TaskRef{JobID: k.job, Attempt: k.attempt}]
		if !all && !ended && !followed || now.Before(l.retryAt) {
			continue
		}
		due = append(due, pending{l: l, ended: ended, followed: followed})
	}
	s.mu.Unlock()
	// The ends first, which an end report waits for, then what someone reads: a round
	// with more than a batch holds, after a restart say, sends those in its first.
	slices.SortFunc(due, func(x, y pending) int { return x.urgency() - y.urgency() })

	for i := range due {
		p := &due[i]
		if !p.l.current() {
			s.forget(p.l, false)
			p.l = nil
			continue
		}
		// Read "exited" before the size: once the attempt is over the file is final, so
		// a size taken after that is the last one.
		size, err := fileSize(p.l.att.logPath)
		if err != nil {
			s.giveUp(p.l, err)
			p.l = nil
			continue
		}
		p.upTo = size
	}
	for ctx.Err() == nil {
		chunks, of, again := s.batch(due)
		if len(chunks) == 0 {
			return
		}
		acks, err := s.send(ctx, chunks)
		if ctx.Err() != nil {
			return
		}
		for i, l := range of {
			if err != nil {
				s.retry(l, err)
				continue
			}
			s.apply(l, chunks[i], acks[i])
		}
		if err != nil || !again {
			return
		}
	}
}

// batch is the next request of a round: a chunk for each log due that has something to
// send, within the limits of one batch, with the logs they are of, and whether another
// request may follow: a limit left some out, or a chunk only asks where to start.
func (s *logShipper) batch(due []pending) (chunks []api.LogChunk, of []*shipLog, again bool) {
	budget := api.MaxLogBatchBytes
	for i := range due {
		p := &due[i]
		l := p.l
		if l == nil || l.gone || time.Now().Before(l.retryAt) {
			continue
		}
		if len(chunks) == api.MaxLogBatchChunks {
			return chunks, of, true
		}
		c := api.LogChunk{JobID: l.att.key.job, Attempt: l.att.key.attempt, Offset: l.offset}
		switch {
		case !l.known:
			// An empty chunk at 0 asks the server how much it has; of an ended attempt
			// that printed nothing, it is also the last.
			c.Offset = 0
			c.Final = p.ended && p.upTo == 0
			again = true
		case l.offset < p.upTo:
			if budget == 0 {
				return chunks, of, true
			}
			n := min(p.upTo-l.offset, int64(budget), maxLogChunk)
			data, err := readAt(l.att.logPath, l.offset, n)
			if err != nil {
				s.giveUp(l, err)
				p.l = nil
				continue
			}
			budget -= len(data)
			c.Data = data
			c.Final = p.ended && l.offset+n == p.upTo
			// A log longer than a chunk goes on in the next request of the round: a
			// reader of a long log, or of one the server lost, waits for all of it.
			again = again || l.offset+n < p.upTo
		case p.ended:
			// Everything is on the server; a final chunk asks it to keep it.
			c.Final = true
		default:
			continue
		}
		chunks = append(chunks, c)
		of = append(of, l)
	}
	return chunks, of, again
}

// apply takes the server's answer to one chunk.
func (s *logShipper) apply(l *shipLog, c api.LogChunk, ack api.LogChunkAck) {
	if ack.Error != nil || ack.Status != 0 {
		msg := "no reason given"
		if ack.Error != nil {
			msg = ack.Error.Error()
		}
		if permanentStatus(ack.Status) {
			s.giveUp(l, fmt.Errorf("ship log: %w: %d %s: %s", errPermanent, ack.Status, http.StatusText(ack.Status), msg))
			return
		}
		s.retry(l, fmt.Errorf("ship log: %d %s: %s", ack.Status, http.StatusText(ack.Status), msg))
		return
	}
	if !l.known {
		l.offset, l.known = ack.Size, true
		s.ok(l)
		if c.Final {
			// An ended attempt that printed nothing: the server has all of it.
			s.forget(l, true)
		}
		return
	}
	if len(c.Data) > 0 && ack.Size == c.Offset {
		// The server took nothing; resending at once would spin.
		s.retry(l, errors.New("the server took none of the bytes"))
		return
	}
	s.ok(l)
	end := c.Offset + int64(len(c.Data))
	l.offset = ack.Size
	if l.offset > end && !l.warned {
		// The server holds more than this file: nothing left to send until it grows.
		l.att.logger.Warn("server log copy is longer than the local one", "server", l.offset, "local", end)
		l.warned = true
	}
	if c.Final && l.offset >= end {
		s.forget(l, true)
	}
}

// ok resets a log's backoff after an answer.
func (s *logShipper) ok(l *shipLog) {
	l.failing, l.backoff, l.retryAt = false, logBackoffMin, time.Time{}
}

// retry holds a log back for its backoff after a failure, which it logs once a run.
func (s *logShipper) retry(l *shipLog, err error) {
	if !l.failing {
		l.att.logger.Debug("log shipping failed, retrying", "err", err)
		l.failing = true
	}
	l.retryAt = time.Now().Add(l.backoff)
	l.backoff = min(l.backoff*2, logBackoffMax)
	// A held-back log of an ended attempt must not wait for the next heartbeat's round.
	time.AfterFunc(time.Until(l.retryAt), s.poke)
}

// giveUp stops shipping a log that cannot ship.
func (s *logShipper) giveUp(l *shipLog, err error) {
	l.att.logger.Error("log shipping stopped", "err", err)
	// A resend would only repeat the refusal; the log will never ship.
	s.forget(l, errors.Is(err, errPermanent))
}

// forget stops shipping l, recording the log as needing no more shipping where complete.
func (s *logShipper) forget(l *shipLog, complete bool) {
	if complete {
		s.done(l.att)
	}
	l.gone = true
	s.mu.Lock()
	delete(s.logs, l.att.key)
	s.mu.Unlock()
	l.att.markLogShipped()
}

// done records that the attempt's log needs no more shipping.
func (s *logShipper) done(a *attempt) {
	if err := mark(filepath.Join(a.dir, fileShipped)); err != nil {
		a.logger.Error("record the log shipped", "err", err)
	}
}

// permanentStatus reports whether a refusal with status would be repeated by a resend.
// A 401 or 403 may come right (a renewal, a join).
func permanentStatus(status int) bool {
	return status/100 == 4 && status != http.StatusUnauthorized && status != http.StatusForbidden &&
		status != http.StatusRequestTimeout && status != http.StatusTooManyRequests
}

// send posts chunks in one batch and returns the answer to each, in order; to a server
// without the batch route, it sends them one request each.
func (s *logShipper) send(ctx context.Context, chunks []api.LogChunk) ([]api.LogChunkAck, error) {
	if !s.oneByOne {
		acks, err := s.sendBatch(ctx, chunks)
		if !errors.Is(err, errNoBatchRoute) {
			return acks, err
		}
		s.logger.Info("the server takes logs one task at a time (an earlier release); shipping them so")
		s.oneByOne = true
	}
	acks := make([]api.LogChunkAck, len(chunks))
	for i, c := range chunks {
		acks[i] = api.LogChunkAck{JobID: c.JobID, Attempt: c.Attempt}
		size, err := s.sendOne(ctx, c)
		var refused *chunkRefused
		switch {
		case errors.As(err, &refused):
			acks[i].Status, acks[i].Error = refused.status, &api.Error{Message: refused.msg}
		case err != nil:
			// Unanswered: the chunks not sent yet are no worse off.
			return nil, err
		default:
			acks[i].Size = size
		}
	}
	return acks, nil
}

// errNoBatchRoute is a server's answer that it has no route for batches.
var errNoBatchRoute = errors.New("the server has no route for log batches")

// sendBatch posts chunks to the batch route.
func (s *logShipper) sendBatch(ctx context.Context, chunks []api.LogChunk) ([]api.LogChunkAck, error) {
	body, err := json.Marshal(api.LogBatch{Chunks: chunks})
	if err != nil {
		return nil, fmt.Errorf("log batch: %w", err)
	}
	server := s.servers.current()
	u := fmt.Sprintf("%s/api/v1/agents/%s/logs", server, url.PathEscape(s.node))
	status, answer, err := s.post(ctx, server, u, "application/json", body)
	if err != nil {
		return nil, err
	}
	switch {
	case status/100 == 2:
		var ans api.LogBatchAnswer
		if err := json.Unmarshal(answer, &ans); err != nil || len(ans.Chunks) != len(chunks) {
			return nil, fmt.Errorf("ship logs: answer is not a LogBatchAnswer for %d chunks: %s", len(chunks), truncate(string(answer), 200))
		}
		return ans.Chunks, nil
	case status == http.StatusNotFound || status == http.StatusMethodNotAllowed:
		return nil, errNoBatchRoute
	default:
		return nil, fmt.Errorf("ship logs: %s", httpError(status, answer))
	}
}

// chunkRefused is a one-task request's refusal that a resend would repeat.
type chunkRefused struct {
	status int
	msg    string
}

func (e *chunkRefused) Error() string { return e.msg }

// sendOne posts one chunk to the one-task route and returns the server's size, the next
// offset.
func (s *logShipper) sendOne(ctx context.Context, c api.LogChunk) (int64, error) {
	server := s.servers.current()
	u := fmt.Sprintf("%s/api/v1/agents/%s/logs/%d/%d?offset=%d",
		server, url.PathEscape(s.node), c.JobID, c.Attempt, c.Offset)
	status, body, err := s.post(ctx, server, u, "application/octet-stream", c.Data)
	if err != nil {
		return 0, err
	}
	// A pointer tells a LogAck from an error body, which also decodes into the struct.
	var ack struct {
		Size *int64 `json:"size"`
	}
	switch {
	case status/100 == 2:
		if err := json.Unmarshal(body, &ack); err != nil || ack.Size == nil {
			return 0, fmt.Errorf("ship log: answer is not a LogAck: %s", truncate(string(body), 200))
		}
		return *ack.Size, nil
	case status == http.StatusConflict && json.Unmarshal(body, &ack) == nil && ack.Size != nil:
		// The offset did not match the server's copy; it says where to resume.
		return *ack.Size, nil
	case permanentStatus(status):
		return 0, &chunkRefused{status: status, msg: httpError(status, body)}
	default:
		return 0, fmt.Errorf("ship log: %s", httpError(status, body))
	}
}

// post sends body to u, on server, and returns the answer's status and body.
func (s *logShipper) post(ctx context.Context, server, u, contentType string, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, logRequestTime)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return 0, nil, fmt.Errorf("log request: %w", err)
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := s.client().Do(req)
	if err != nil {
		s.servers.moveOn(server, nil)
		return 0, nil, fmt.Errorf("ship log: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		s.servers.moveOn(server, resp)
	}
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("ship log: read answer: %w", err)
	}
	return resp.StatusCode, answer, nil
}

func readAt(path string, offset, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	defer f.Close()
	buf := make([]byte, n)
	if _, err := f.ReadAt(buf, offset); err != nil {
		return nil, fmt.Errorf("read log: %w", err)
	}
	return buf, nil
}

// httpError renders a non-2xx answer, using the API's error body when there is one.
func httpError(status int, body []byte) string {
	var e api.Error
	if json.Unmarshal(body, &e) == nil && e.Message != "" {
		return fmt.Sprintf("%d %s: %s", status, http.StatusText(status), e.Error())
	}
	return fmt.Sprintf("%d %s: %s", status, http.StatusText(status), truncate(string(bytes.TrimSpace(body)), 200))
}

func fileSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		// A task that failed before its log was created has nothing to ship.
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("stat log: %w", err)
	}
	return fi.Size(), nil
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// sleep waits d or until ctx ends, and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
