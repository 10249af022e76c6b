package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"syscall"

	"github.com/rotahq/rota/internal/atomicfile"
)

// Limits on what a job's events file can push through a heartbeat: a job that writes a
// flood must not make heartbeats huge or the agent's memory grow.
const (
	maxEventsPerBeat = 100
	maxEventLine     = 64 << 10
)

// eventsReader reads the JSON lines a job appends to ROTA_EVENTS_FILE, from where it left
// off. Events read but not yet delivered stay pending, so a failed heartbeat loses none;
// how far the server has them is kept in offsetPath, so a restarted agent resends none.
type eventsReader struct {
	path       string
	offsetPath string
	logger     *slog.Logger

	// offset is how far the file has been read; delivered how far the server has it.
	offset    int64
	delivered int64
	// skipping is set while discarding the rest of an over-long line.
	skipping bool
	pending  []pendingEvent
}

type pendingEvent struct {
	ev map[string]any
	// end is the file offset just past the event's line.
	end int64
}

func newEventsReader(path, offsetPath string, logger *slog.Logger) *eventsReader {
	e := &eventsReader{path: path, offsetPath: offsetPath, logger: logger}
	if n, ok := readInt(offsetPath); ok && n > 0 {
		e.offset, e.delivered = int64(n), int64(n)
	}
	return e
}

// peek returns up to maxEventsPerBeat undelivered events, reading more from the file if
// there is room. They stay pending until drop.
func (e *eventsReader) peek() []map[string]any {
	if len(e.pending) < maxEventsPerBeat {
		e.read(maxEventsPerBeat - len(e.pending))
	}
	n := min(len(e.pending), maxEventsPerBeat)
	out := make([]map[string]any, n)
	for i := range n {
		out[i] = e.pending[i].ev
	}
	return out
}

// drop forgets the first n pending events, once a heartbeat carried them, and records how
// far the server has the file.
func (e *eventsReader) drop(n int) {
	if n == 0 && len(e.pending) > 0 {
		return
	}
	delivered := e.offset
	if n < len(e.pending) {
		delivered = e.pending[n-1].end
	}
	e.pending = append(e.pending[:0], e.pending[n:]...)
	if delivered == e.delivered || e.offsetPath == "" {
		return
	}
	if err := atomicfile.Write(e.offsetPath, []byte(strconv.FormatInt(delivered, 10)+"\n"), 0o644, false); err != nil {
		e.logger.Warn("record the events delivered", "err", err)
		return
	}
	e.delivered = delivered
}

func (e *eventsReader) read(room int) {
	f, err := openJobFile(e.path)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			e.logger.Warn("read events file", "err", err)
		}
		return
	}
	defer f.Close()
	if _, err := f.Seek(e.offset, io.SeekStart); err != nil {
		e.logger.Warn("read events file", "err", err)
		return
	}
	br := bufio.NewReaderSize(f, maxEventLine)
	for room > 0 {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if !e.skipping {
				e.logger.Warn("skipping events line longer than the limit", "limit_bytes", maxEventLine)
			}
			e.skipping = true
			e.offset += int64(len(line))
			continue
		}
		if err != nil {
			// A line without its newline is still being written; take it next time. The
			// tail of an over-long line is discarded as it comes.
			if e.skipping {
				e.offset += int64(len(line))
			}
			return
		}
		e.offset += int64(len(line))
		if e.skipping {
			e.skipping = false
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal(line, &ev); err != nil || ev == nil {
			if len(line) > 1 {
				e.logger.Warn("skipping events line that is not a JSON object", "line", truncate(string(line), 120))
			}
			continue
		}
		e.pending = append(e.pending, pendingEvent{ev: ev, end: e.offset})
		room--
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// openJobFile opens a file in a job's own directory for the agent to read. The job may
// have replaced it with a link to a file only the agent may read (symbolic or hard), or
// with a pipe that would block the agent: only a regular file of one name is read.
func openJobFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !fi.Mode().IsRegular() || ok && st.Nlink > 1 {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file of its own", path)
	}
	return f, nil
}
