package server

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net/http"
	"os"
	"path"
	"strconv"
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
	size, err := s.writeLogAt(logName(jobID, attempt, node), offset, data)
	if err != nil {
		s.log.Error("log write failed", "job", jobID, "attempt", attempt, "err", err)
		writeError(w, http.StatusInternalServerError, &api.Error{Code: api.CodeInternal, Message: "the log chunk could not be stored"})
		return
	}
	writeJSON(w, http.StatusOK, api.LogAck{Size: size})
}

func (s *Server) writeLogAt(name string, offset int64, data []byte) (int64, error) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	if err := s.logs.MkdirAll(path.Dir(name), 0o750); err != nil {
		return 0, fmt.Errorf("create log dir: %w", err)
	}
	f, err := s.logs.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o640)
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
			}
		}
		data, size := s.readLog(name, offset)
		done := ended && offset+int64(len(data)) >= size
		if len(data) > 0 || done || !time.Now().Before(deadline) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("X-Rota-Log-Size", strconv.FormatInt(size, 10))
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
