package server

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"math"
	"net/http"
	"os"
	"path"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/rotahq/rota/internal/api"
)

const (
	maxLogChunk = 2 << 20
	maxLogWait  = 60 * time.Second
	logPoll     = 100 * time.Millisecond
)

// logName is where, under the logs root, the server keeps its copy of one rank's output of
// one attempt. The node name has passed validName and the attempt's placement, and the file
// is opened through an os.Root, so no request string can reach outside the logs directory.
func logName(job int64, attempt int, node string) string {
	return path.Join(strconv.FormatInt(job, 10), fmt.Sprintf("%d-%s.log", attempt, node))
}

// handleShipLog stores bytes an agent read from a task's output at the offset it names.
// Writing at an offset makes a resend after a lost answer harmless; an offset past the end
// is answered with the current size so the agent resends from there. A zero-length chunk
// asks for the size, which is where an agent restarted mid-log resumes.
func (s *Server) handleShipLog(w http.ResponseWriter, r *http.Request) {
	node := r.PathValue("node")
	jobID, err1 := strconv.ParseInt(r.PathValue("job"), 10, 64)
	attempt, err2 := strconv.Atoi(r.PathValue("attempt"))
	offset, err3 := strconv.ParseInt(r.URL.Query().Get("offset"), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || offset < 0 || jobID <= 0 {
		writeError(w, http.StatusBadRequest, invalid("", "the job, attempt and offset must be numbers: a job and attempt of 1 or more, an offset of 0 or more"))
		return
	}
	s.mu.Lock()
	atts := s.state.Attempts(jobID)
	e := s.validName("node", node)
	s.mu.Unlock()
	if e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	if attempt < 1 || attempt > len(atts) || !placedOn(atts[attempt-1], node) {
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("job %d has no attempt %d on node %s", jobID, attempt, node)})
		return
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxLogChunk))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, &api.Error{Code: api.CodeTooLarge, Message: fmt.Sprintf("log chunks are limited to %d bytes", maxLogChunk)})
		return
	}
	data, over := s.capLog(offset, data)
	if e := s.room.take(int64(len(data))); e != nil {
		e.Message += fmt.Sprintf("; the log waits on node %s until there is room", node)
		writeError(w, http.StatusInsufficientStorage, e)
		return
	}
	size, err := s.writeLogAt(logName(jobID, attempt, node), offset, data, true, time.Now().Add(logBatchTime))
	if errors.Is(err, errLogPutOff) {
		s.countPutOff(1)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, &api.Error{Code: api.CodeUnavailable,
			Message: fmt.Sprintf("put off: the log found no place among those this server is making within %s; send it again", logBatchTime)})
		return
	}
	if err != nil {
		s.logWriteFailed(jobID, attempt, err)
		writeError(w, http.StatusInternalServerError, &api.Error{Code: api.CodeInternal, Message: "the log chunk could not be stored"})
		return
	}
	if over {
		s.markLogCut(logName(jobID, attempt, node))
		writeError(w, http.StatusRequestEntityTooLarge, s.logFullError(jobID, attempt, node, ""))
		return
	}
	writeJSON(w, http.StatusOK, api.LogAck{Size: size})
}

// logWriteErrorsEvery is how often failed log writes are logged: a disk that fails
// fails every node's logs at every heartbeat, thousands of writes a second on a large
// cluster, and one line a write would drown the rest of the server's log.
const logWriteErrorsEvery = time.Minute

// logWriteErrors counts the log writes that failed since the last one logged.
type logWriteErrors struct {
	mu     sync.Mutex
	logged time.Time
	since  int
}

// logWriteFailed logs a failed write of a shipped log, at most once every
// logWriteErrorsEvery, with how many others failed since.
func (s *Server) logWriteFailed(job int64, attempt int, err error) {
	e := &s.logWriteErrs
	e.mu.Lock()
	now := time.Now()
	if now.Sub(e.logged) < logWriteErrorsEvery {
		e.since++
		e.mu.Unlock()
		return
	}
	since := e.since
	e.logged, e.since = now, 0
	e.mu.Unlock()
	s.log.Error("cannot write a shipped log; the node keeps it and sends it again", "job", job, "attempt", attempt, "err", err,
		"failures_since_last_line", since)
}

// capLog is the part of data, to be written at offset of a rank's log, that fits in the
// log's limit (Config.MaxLogSize), and whether some did not.
func (s *Server) capLog(offset int64, data []byte) ([]byte, bool) {
	limit := s.cfg.MaxLogSize
	if limit <= 0 || offset+int64(len(data)) <= limit {
		return data, false
	}
	return data[:max(0, min(int64(len(data)), limit-offset))], true
}

// logCutSuffix names the file beside a rank's log that says this server refused bytes of
// it past the limit. A log as long as the limit is not therefore cut: a node whose own
// limit is the same (rota up's, and both defaults) ends its copy there, with a line that
// says so, and offers nothing more.
const logCutSuffix = ".cut"

// markLogCut records that bytes of the named log past the limit were refused.
func (s *Server) markLogCut(name string) {
	s.logLocks.sweep.RLock()
	defer s.logLocks.sweep.RUnlock()
	f, err := s.logs.OpenFile(name+logCutSuffix, os.O_WRONLY|os.O_CREATE, 0o640)
	if err != nil {
		s.log.Warn("cannot mark a log as cut at the limit", "file", name, "err", err)
		return
	}
	f.Close()
}

// logCut reports whether bytes of the named log past the limit were refused.
func (s *Server) logCut(name string) bool {
	_, err := s.logs.Stat(name + logCutSuffix)
	return err == nil
}

// logFullError is the refusal of a log's bytes past the limit, for field.
func (s *Server) logFullError(job int64, attempt int, node, field string) *api.Error {
	return &api.Error{Code: api.CodeTooLarge, Field: field,
		Message: fmt.Sprintf("the log of job %d attempt %d has reached this server's limit of %s a rank (rota server --max-log-size); the rest stays on node %s", job, attempt, api.SizeText(s.cfg.MaxLogSize), node)}
}

// logLocks order the writes to shipped logs. A log's first write makes its file (and its
// job's directory), which some disks do slowly: a filesystem that searches long for a
// free inode (ext4 without a journal passes over every recently deleted one, at up to a
// millisecond of kernel CPU a file), a network one. So a log that is already there is
// opened and written under no lock that a log being made holds, and only a log's size and
// what is written at it must agree, under a lock of the log's stripe.
type logLocks struct {
	// sweep is held to read by every write, and to write by the retention's sweep while
	// it removes a job's logs, so that no chunk is written into a directory as it goes.
	sweep   sync.RWMutex
	stripes [64]sync.Mutex
	// making holds a place for each log being made: at most half the server's cores make
	// logs at once, so that a burst of new logs (a large array starting) leaves the rest
	// to heartbeats and submits.
	making chan struct{}
}

func (l *logLocks) init() {
	l.making = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2))
}

// place takes a place among the logs being made, waiting for one until deadline (for
// ever where zero), and reports whether it has one. A free place is taken even past the
// deadline.
func (l *logLocks) place(deadline time.Time) bool {
	select {
	case l.making <- struct{}{}:
		return true
	default:
	}
	if deadline.IsZero() {
		l.making <- struct{}{}
		return true
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case l.making <- struct{}{}:
		return true
	case <-t.C:
		return false
	}
}

// of is the lock of the stripe the named log falls in.
func (l *logLocks) of(name string) *sync.Mutex {
	h := fnv.New32a()
	io.WriteString(h, name)
	return &l.stripes[h.Sum32()%uint32(len(l.stripes))]
}

// defaultOpeningLog is every server's openingLog: nil, but in a build with fault
// injection (faultinject.go).
var defaultOpeningLog func(name string)

// errLogPutOff is a write that could not begin by its deadline: a log to be made waited
// that long for a place among those being made.
var errLogPutOff = errors.New("no place to make the log before the deadline")

// writeLogAt writes data at offset of the named log, unless offset is past its end, and
// returns the log's size. With durable the data is on disk when it returns. A log to be
// made waits for a place until deadline (none where zero), and then fails with
// errLogPutOff.
func (s *Server) writeLogAt(name string, offset int64, data []byte, durable bool, deadline time.Time) (int64, error) {
	s.logLocks.sweep.RLock()
	defer s.logLocks.sweep.RUnlock()
	f, err := s.openLog(name, deadline)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	mu := s.logLocks.of(name)
	mu.Lock()
	size, err := writeOpenLog(f, offset, data)
	mu.Unlock()
	if err != nil {
		return 0, err
	}
	if durable {
		if err := f.Sync(); err != nil {
			return 0, fmt.Errorf("sync log: %w", err)
		}
	}
	return size, nil
}

// openLog opens the named log to write, making it and its job's directory where it is
// the job's first, once a place among the logs being made is free, or fails with
// errLogPutOff at deadline (none where zero). Callers hold s.logLocks.sweep to read.
func (s *Server) openLog(name string, deadline time.Time) (*os.File, error) {
	f, err := s.logs.OpenFile(name, os.O_RDWR, 0)
	if err == nil {
		return f, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open log: %w", err)
	}
	if !s.logLocks.place(deadline) {
		return nil, errLogPutOff
	}
	defer func() { <-s.logLocks.making }()
	if s.openingLog != nil {
		s.openingLog(name)
	}
	f, err = s.logs.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o640)
	if errors.Is(err, fs.ErrNotExist) {
		// The job's first log here: its directory comes first. (Made only then, not
		// before every write: a tenth of what a write cost.)
		if err := s.logs.MkdirAll(path.Dir(name), 0o750); err != nil {
			return nil, fmt.Errorf("create log dir: %w", err)
		}
		f, err = s.logs.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o640)
	}
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	return f, nil
}

// writeOpenLog writes data at offset of the open log f, unless offset is past its end,
// and returns the log's size. Callers hold the log's stripe lock.
func writeOpenLog(f *os.File, offset int64, data []byte) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("stat log: %w", err)
	}
	size := fi.Size()
	if offset > size || len(data) == 0 {
		return size, nil
	}
	if _, err := f.WriteAt(data, offset); err != nil {
		return 0, fmt.Errorf("write log: %w", err)
	}
	return max(size, offset+int64(len(data))), nil
}

// handleShipLogBatch stores pieces of the logs of a node's tasks, each as handleShipLog
// stores one, and answers each chunk apart: a chunk of an attempt the node holds no rank
// of is refused (404) while the others are written. Only a chunk marked final waits for
// the disk (api.LogChunk.Final).
func (s *Server) handleShipLogBatch(w http.ResponseWriter, r *http.Request) {
	node := r.PathValue("node")
	var batch api.LogBatch
	if status, e := decodeJSON(w, r, &batch, maxLogBatchBody); e != nil {
		writeError(w, status, e)
		return
	}
	if e := checkLogBatch(batch); e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	placed := make([]bool, len(batch.Chunks))
	s.mu.Lock()
	e := s.validName("node", node)
	if e == nil {
		for i, c := range batch.Chunks {
			atts := s.state.Attempts(c.JobID)
			placed[i] = c.Attempt <= len(atts) && placedOn(atts[c.Attempt-1], node) ||
				// A log this server asked the node for again, of a job no longer in
				// memory: its read found the job and the rank on this node.
				atts == nil && s.follows.repairing(node, c.JobID, c.Attempt)
		}
	}
	s.mu.Unlock()
	if e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	ans := api.LogBatchAnswer{Chunks: make([]api.LogChunkAck, len(batch.Chunks))}
	deadline, tried, putOff := time.Now().Add(logBatchTime), 0, 0
	for i, c := range batch.Chunks {
		ack := &ans.Chunks[i]
		ack.JobID, ack.Attempt = c.JobID, c.Attempt
		if !placed[i] {
			ack.Status, ack.Error = http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Field: fmt.Sprintf("chunks[%d]", i),
				Message: fmt.Sprintf("job %d has no attempt %d on node %s", c.JobID, c.Attempt, node)}
			continue
		}
		putOffErr := func() *api.Error {
			return &api.Error{Code: api.CodeUnavailable, Field: fmt.Sprintf("chunks[%d]", i),
				Message: fmt.Sprintf("put off: this batch has had the %s of this server's disk a batch may take; the node sends it again", logBatchTime)}
		}
		if tried > 0 && (time.Now().After(deadline) || r.Context().Err() != nil) {
			// The node's next heartbeat waits for this answer on its connection: what
			// the disk could not take in time goes in a later batch.
			ack.Status, ack.Error = http.StatusServiceUnavailable, putOffErr()
			putOff++
			continue
		}
		tried++
		// Bytes past the log's limit are refused, those before it written: the agent
		// stops sending this log, and the copy here ends at the limit.
		data, over := s.capLog(c.Offset, c.Data)
		if e := s.room.take(int64(len(data))); e != nil {
			e.Field = fmt.Sprintf("chunks[%d].data", i)
			e.Message += fmt.Sprintf("; the log waits on node %s until there is room", node)
			ack.Status, ack.Error = http.StatusInsufficientStorage, e
			continue
		}
		size, err := s.writeLogAt(logName(c.JobID, c.Attempt, node), c.Offset, data, c.Final || over, deadline)
		if errors.Is(err, errLogPutOff) {
			ack.Status, ack.Error = http.StatusServiceUnavailable, putOffErr()
			putOff++
			continue
		}
		if err != nil {
			s.logWriteFailed(c.JobID, c.Attempt, err)
			ack.Status, ack.Error = http.StatusInternalServerError, &api.Error{Code: api.CodeInternal, Field: fmt.Sprintf("chunks[%d]", i),
				Message: "the log chunk could not be stored"}
			continue
		}
		ack.Size = size
		if over {
			s.markLogCut(logName(c.JobID, c.Attempt, node))
			ack.Status, ack.Error = http.StatusRequestEntityTooLarge, s.logFullError(c.JobID, c.Attempt, node, fmt.Sprintf("chunks[%d].data", i))
			continue
		}
		if c.Final && size == c.Offset+int64(len(c.Data)) {
			// The end of an ended task's log is here: it needs following no more.
			s.follows.done(node, c.JobID, c.Attempt)
		}
	}
	s.countPutOff(putOff)
	writeJSON(w, http.StatusOK, ans)
}

// putOffShownFor is how long after the last piece of a log put off rota admin status
// still says logs arrive late.
const putOffShownFor = time.Minute

// logsPutOff remembers the pieces of logs put off lately, for rota admin status: a
// counter on /metrics says it to a scraper, this to whoever asks the server.
type logsPutOff struct {
	mu          sync.Mutex
	since, last time.Time // the first and last put off in this run of them
	n           int64     // pieces put off since
}

// add counts n pieces put off at now.
func (p *logsPutOff) add(n int, now time.Time) {
	if n == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last.IsZero() || now.Sub(p.last) > putOffShownFor {
		p.since, p.n = now, 0
	}
	p.last = now
	p.n += int64(n)
}

// problem says that logs arrive late, while pieces were put off within putOffShownFor
// of now; "" otherwise.
func (p *logsPutOff) problem(now time.Time) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last.IsZero() || now.Sub(p.last) > putOffShownFor {
		return ""
	}
	return fmt.Sprintf("job logs arrive late: this server's disk is slow to make log files, and %d pieces of logs sent since %s were put off, the last at %s; their nodes send them again (rota_log_chunks_put_off_total counts them)",
		p.n, p.since.UTC().Format(time.RFC3339), p.last.UTC().Format(time.RFC3339))
}

// countPutOff counts n pieces of logs put off, for /metrics and rota admin status.
func (s *Server) countPutOff(n int) {
	s.metrics.logChunksPutOff(n)
	s.putOff.add(n, s.cfg.Clock.Now())
}

// logBatchTime is how long the chunks of one batch may take to write before the rest
// are put off. An agent sends its batch after its heartbeat, on the same connection, and
// its next heartbeat waits for the answer: a disk slow to make files must not make the
// node look silent. A second makes a thousand new logs or more even on the slowest disk
// measured (docs/scale.md), as many as a batch may hold.
const logBatchTime = time.Second

// maxLogBatchBody bounds a LogBatch's body: its data in base64 and the chunks' fields.
const maxLogBatchBody = api.MaxLogBatchBytes*4/3 + api.MaxLogBatchChunks*256

// checkLogBatch refuses a batch the API does not allow, naming the chunk at fault.
func checkLogBatch(b api.LogBatch) *api.Error {
	if len(b.Chunks) > api.MaxLogBatchChunks {
		return invalid("chunks", "holds %d chunks: at most %d", len(b.Chunks), api.MaxLogBatchChunks)
	}
	total := 0
	for i, c := range b.Chunks {
		field := func(name string) string { return fmt.Sprintf("chunks[%d].%s", i, name) }
		switch {
		case c.JobID < 1:
			return invalid(field("job_id"), "must be 1 or more, not %d", c.JobID)
		case c.Attempt < 1:
			return invalid(field("attempt"), "must be 1 or more, not %d", c.Attempt)
		case c.Offset < 0:
			return invalid(field("offset"), "must be 0 or more, not %d", c.Offset)
		case c.Offset > math.MaxInt64-int64(len(c.Data)):
			return invalid(field("offset"), "%d is too large", c.Offset)
		}
		total += len(c.Data)
	}
	if total > api.MaxLogBatchBytes {
		return invalid("chunks", "carry %d bytes of logs: at most %d in one batch", total, api.MaxLogBatchBytes)
	}
	return nil
}

// handleGetLogs returns one rank's output of a job's attempt from an offset. With wait it
// holds the request until there is something new or the log is complete, so `rota logs
// -f` is a loop of long polls. The rank is picked with ?rank= or ?node=, rank 0 by default.
func (s *Server) handleGetLogs(w http.ResponseWriter, r *http.Request) {
	id, ok := s.jobID(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	offset, e := queryInt(q, "offset", 0, math.MaxInt64, 0)
	if e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	wantAttempt, e := queryInt(q, "attempt", 1, math.MaxInt32, 0) // 0: the current one
	if e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	wait, e := querySeconds(q, "wait", maxLogWait)
	if e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	wantRank64, e := queryInt(q, "rank", 0, math.MaxInt32, -1) // -1: by node, else rank 0
	if e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	wantRank := int(wantRank64)
	wantNode := q.Get("node")
	who := caller(r)
	deadline := time.Now().Add(wait)
	for {
		job, atts, found, err := s.lookupJob(r.Context(), id)
		if err != nil {
			storeError(w, "reading the job", err)
			return
		}
		if !found {
			notFound(w, id)
			return
		}
		if e := mayReadLogs(who, &job); e != nil {
			writeError(w, http.StatusForbidden, e)
			return
		}
		n := int(wantAttempt)
		if n == 0 {
			n = len(atts)
		}
		if n > len(atts) && wantAttempt != 0 {
			writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Field: "attempt", Message: fmt.Sprintf("job %d has %d attempts", id, len(atts))})
			return
		}
		var name, node string
		rank := 0
		ended := job.State.Terminal()
		var whole int64 // the size of the ended rank's whole log, as its node reported it
		var cut int64   // that size, where it is more than this server keeps
		if n > 0 {
			a := atts[n-1]
			switch {
			case wantNode != "":
				rank = rankOn(a, wantNode)
				if rank < 0 {
					writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Field: "node", Message: fmt.Sprintf("attempt %d of job %d has no rank on node %q", n, id, truncateName(wantNode))})
					return
				}
			case wantRank >= 0:
				if wantRank >= len(a.Placements) {
					writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Field: "rank", Message: fmt.Sprintf("attempt %d of job %d has %d ranks", n, id, len(a.Placements))})
					return
				}
				rank = wantRank
			}
			if len(a.Placements) > 0 {
				p := a.Placements[rank]
				node = p.Node
				name = logName(id, n, node)
				ended = a.EndTime != nil || p.State.Terminal()
				if p.State.Terminal() {
					whole = p.LogSize
				}
				if limit := s.cfg.MaxLogSize; limit > 0 && whole > limit {
					// This server keeps no more than the limit of any log.
					whole, cut = limit, p.LogSize
				}
			}
		}
		data, size := s.readLog(name, offset)
		// A running rank's log whose bytes past the limit were refused takes no more: it
		// is not asked of its node, and its reader is told so.
		full := !ended && s.cfg.MaxLogSize > 0 && size >= s.cfg.MaxLogSize && s.logCut(name)
		if name != "" && !ended && !full && s.follows.follow(node, id, n, s.cfg.Clock.Now()) {
			s.watch.poke(node)
		}
		done := ended && offset+int64(len(data)) >= size
		var short string // why this server's copy of an ended log lacks part of it
		shown := size    // the size the answer gives
		if gone := s.expiredLog(job.EndTime, s.cfg.Clock.Now()); ended && size == 0 && gone != "" {
			// Removed for its age: nothing to ask the node for.
			short, whole = gone, 0
		}
		if ended && size < whole {
			// A server that took over from another, or lost its log directory, holds
			// less than the node wrote: the node is asked for the rest, which a reader
			// waits for unless the node cannot answer, or has sent nothing of it for
			// LogRepairWait.
			since, fresh := s.follows.repair(node, id, n, size, s.cfg.Clock.Now(), time.Now())
			if fresh {
				s.watch.poke(node)
			}
			short = s.shortLog(node, size, whole)
			if until := since.Add(s.cfg.LogRepairWait); short == "" && time.Now().Before(until) {
				// The size to read up to is the whole log's: a reader that stops at the
				// end of what is here would miss what is on its way.
				done, shown = false, whole
				deadline = maxTime(deadline, until)
			} else if held := s.room.heldBack(node); short == "" && held != "" {
				short = fmt.Sprintf("this server holds %d of the %d bytes node %s reported; %s", size, whole, node, held)
			} else if short == "" {
				short = fmt.Sprintf("this server holds %d of the %d bytes node %s reported; the node has sent none of the rest for %s (it keeps an ended attempt's log for a while, 24 h by default)", size, whole, node, s.cfg.LogRepairWait)
			}
		}
		if done && short == "" && cut > 0 && size >= whole {
			short = fmt.Sprintf("this server keeps the first %s of a rank's log (rota server --max-log-size); node %s wrote %d bytes, and keeps them for a while (24 h by default)",
				api.SizeText(s.cfg.MaxLogSize), node, cut)
		}
		if len(data) > 0 || done || !time.Now().Before(deadline) {
			if done && short != "" {
				w.Header().Set("X-Rota-Log-Incomplete", short)
			}
			if full {
				w.Header().Set("X-Rota-Log-Full", fmt.Sprintf("this server keeps the first %s of a rank's log (rota server --max-log-size); the rest stays on node %s, and no more of it is shown here",
					api.SizeText(s.cfg.MaxLogSize), node))
			}
			if held := s.room.heldBack(node); !ended && !full && name != "" && held != "" {
				w.Header().Set("X-Rota-Log-Held", held)
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("X-Rota-Log-Size", strconv.FormatInt(shown, 10))
			w.Header().Set("X-Rota-Log-Attempt", strconv.Itoa(n))
			w.Header().Set("X-Rota-Log-Done", strconv.FormatBool(done))
			w.Header().Set("X-Rota-Log-Node", node)
			w.Header().Set("X-Rota-Log-Rank", strconv.Itoa(rank))
			w.WriteHeader(http.StatusOK)
			w.Write(data)
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(logPoll):
		}
	}
}

// shortLog says why node cannot send the rest of a log this server holds size of whole
// bytes of: it is gone or silent. "" while it may.
func (s *Server) shortLog(node string, size, whole int64) string {
	s.mu.Lock()
	n := s.state.PeekNode(node)
	state := api.NodeState("")
	if n != nil {
		state = n.State
	}
	s.mu.Unlock()
	switch state {
	case "":
		return fmt.Sprintf("this server holds %d of the %d bytes node %s reported; the node has been removed, with the rest", size, whole, node)
	case api.NodeLost, api.NodeNotReady:
		return fmt.Sprintf("this server holds %d of the %d bytes node %s reported; the node is %s, and is asked for the rest when it is back", size, whole, node, state)
	}
	return ""
}

// readLog returns up to maxLogChunk bytes of the named log from offset, and its size.
func (s *Server) readLog(name string, offset int64) ([]byte, int64) {
	if name == "" {
		return nil, 0
	}
	f, err := s.logs.Open(name)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("read log", "file", name, "err", err)
		}
		return nil, 0
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0
	}
	if offset >= fi.Size() {
		return nil, fi.Size()
	}
	buf := make([]byte, min(fi.Size()-offset, maxLogChunk))
	n, _ := f.ReadAt(buf, offset)
	return buf[:n], fi.Size()
}
