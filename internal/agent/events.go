package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
)

// Limits on what a job's events file can push through a heartbeat: a job that writes a
// flood must not make heartbeats huge or the agent's memory grow.
const (
	maxEventsPerBeat = 100
	maxEventLine     = 64 << 10
)

// eventsReader reads the JSON lines a job appends to ROTA_EVENTS_FILE, from where it left
// off. Events read but not yet delivered stay pending, so a failed heartbeat loses none.
type eventsReader struct {
	path   string
	logger *slog.Logger

	offset int64
	// skipping is set while discarding the rest of an over-long line.
	skipping bool
	pending  []map[string]any
}

// peek returns up to maxEventsPerBeat undelivered events, reading more from the file if
// there is room. They stay pending until drop.
func (e *eventsReader) peek() []map[string]any {
	if len(e.pending) < maxEventsPerBeat {
		e.read(maxEventsPerBeat - len(e.pending))
	}
	return e.pending[:min(len(e.pending), maxEventsPerBeat)]
}

// drop forgets the first n pending events, once a heartbeat carried them.
func (e *eventsReader) drop(n int) {
	e.pending = append(e.pending[:0], e.pending[n:]...)
}

func (e *eventsReader) read(room int) {
	f, err := os.Open(e.path)
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
		e.pending = append(e.pending, ev)
		room--
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
