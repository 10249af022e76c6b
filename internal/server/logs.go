package server

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rotahq/rota/internal/api"
)

const (
	maxLogChunk = 2 << 20
	maxLogWait  = 60 * time.Second
	logPoll     = 100 * time.Millisecond
)

// logPath is where the server keeps its copy of one node's output of one attempt.
func (s *Server) logPath(job int64, attempt int, node string) string {
	return filepath.Join(s.cfg.DataDir, "logs", strconv.FormatInt(job, 10), fmt.Sprintf("%d-%s.log", attempt, node))
}

// handleShipLog stores bytes an agent read from a task's output at the offset it names.
// Writing at an offset makes a resend after a lost answer harmless; an offset past the end
// is answered with the current size so the agent resends from there.
func (s *Server) handleShipLog(w http.ResponseWriter, r *http.Request) {
	node := r.PathValue("node")
	jobID, err1 := strconv.ParseInt(r.PathValue("job"), 10, 64)
	attempt, err2 := strconv.Atoi(r.PathValue("attempt"))
	offset, err3 := strconv.ParseInt(r.URL.Query().Get("offset"), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || offset < 0 {
		writeError(w, http.StatusBadRequest, invalid("offset", "job, attempt and offset must be non-negative numbers"))
		return
	}
	s.mu.Lock()
	atts := s.state.Attempts(jobID)
	s.mu.Unlock()
	if attempt < 1 || attempt > len(atts) || !placedOn(atts[attempt-1], node) {
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("job %d has no attempt %d on node %s", jobID, attempt, node)})
		return
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxLogChunk))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, &api.Error{Code: api.CodeTooLarge, Message: fmt.Sprintf("log chunks are limited to %d bytes", maxLogChunk)})
		return
	}
	size, err := s.writeLogAt(s.logPath(jobID, attempt, node), offset, data)
	if err != nil {
		s.log.Error("log write failed", "job", jobID, "attempt", attempt, "err", err)
		writeError(w, http.StatusInternalServerError, &api.Error{Code: api.CodeInternal, Message: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, api.LogAck{Size: size})
}

func (s *Server) writeLogAt(path string, offset int64, data []byte) (int64, error) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return 0, fmt.Errorf("create log dir: %w", err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return 0, fmt.Errorf("open log: %w", err)
	}
	defer f.Close()
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
	return max(size, offset+int64(len(data))), f.Sync()
}

// handleGetLogs returns a job's output from an offset. With wait it holds the request until
// there is something new or the log is complete, so `rota logs -f` is a loop of long polls.
func (s *Server) handleGetLogs(w http.ResponseWriter, r *http.Request) {
	id, ok := s.jobID(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	offset, err := parseNonNeg(q.Get("offset"))
	if err != nil {
		writeError(w, http.StatusBadRequest, invalid("offset", "must be a non-negative number of bytes"))
		return
	}
	wantAttempt, err := parseNonNeg(q.Get("attempt"))
	if err != nil {
		writeError(w, http.StatusBadRequest, invalid("attempt", "must be an attempt number"))
		return
	}
	waitS, err := strconv.ParseFloat(orZero(q.Get("wait")), 64)
	if err != nil || waitS < 0 {
		writeError(w, http.StatusBadRequest, invalid("wait", "must be a number of seconds"))
		return
	}
	deadline := time.Now().Add(min(time.Duration(waitS*float64(time.Second)), maxLogWait))
	for {
		s.mu.Lock()
		job, found := s.state.Job(id)
		atts := s.state.Attempts(id)
		s.mu.Unlock()
		if !found {
			notFound(w, id)
			return
		}
		n := int(wantAttempt)
		if n == 0 {
			n = len(atts)
		}
		if n > len(atts) && wantAttempt != 0 {
			writeError(w, http.StatusNotFound, invalid("attempt", "job %d has %d attempts", id, len(atts)))
			return
		}
		var path string
		ended := job.State.Terminal()
		if n > 0 {
			a := atts[n-1]
			node := q.Get("node")
			if node == "" && len(a.Placements) > 0 {
				node = a.Placements[0].Node
			}
			path = s.logPath(id, n, node)
			ended = a.EndTime != nil
		}
		data, size := readFrom(path, offset)
		done := ended && offset+int64(len(data)) >= size
		if len(data) > 0 || done || !time.Now().Before(deadline) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("X-Rota-Log-Size", strconv.FormatInt(size, 10))
			w.Header().Set("X-Rota-Log-Attempt", strconv.Itoa(n))
			w.Header().Set("X-Rota-Log-Done", strconv.FormatBool(done))
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

// readFrom returns up to maxLogChunk bytes of the file from offset, and the file's size.
func readFrom(path string, offset int64) ([]byte, int64) {
	if path == "" {
		return nil, 0
	}
	f, err := os.Open(path)
	if err != nil {
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

func parseNonNeg(v string) (int64, error) {
	n, err := strconv.ParseInt(orZero(v), 10, 64)
	if err == nil && n < 0 {
		err = fmt.Errorf("negative")
	}
	return n, err
}

func orZero(v string) string {
	if v == "" {
		return "0"
	}
	return v
}
