package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// Log shipping limits: the protocol caps a request at 1 MiB.
const (
	maxLogChunk    = 1 << 20
	maxLogPoll     = time.Second
	logBackoffMin  = 100 * time.Millisecond
	logBackoffMax  = 5 * time.Second
	logRequestTime = 30 * time.Second
)

// logShipper copies each attempt's output.log to the server.
type logShipper struct {
	client *http.Client
	server string
	node   string
	// poll is how stale a followed log may be while the job runs.
	poll time.Duration
}

// errPermanent marks an answer that a resend would only repeat.
var errPermanent = errors.New("rejected by the server")

// ship sends the log of p until the task has ended and every byte is on the server, or ctx
// ends. It closes p.logShipped when it will send no more, which lets the end be reported.
func (s *logShipper) ship(ctx context.Context, p *proc) {
	defer p.markLogShipped()
	logger := p.logger
	var offset int64
	backoff := logBackoffMin
	failing := false
	for {
		// Read "exited" before the size: once the group is gone the file is final, so a
		// size taken after that is the last one.
		ended := isClosed(p.exited)
		size, err := fileSize(p.logPath)
		if err != nil {
			logger.Error("log shipping stopped", "err", err)
			return
		}
		if offset < size {
			next, err := s.send(ctx, p, offset, min(size-offset, maxLogChunk))
			switch {
			case ctx.Err() != nil:
				return
			case errors.Is(err, errPermanent):
				logger.Error("log shipping stopped", "err", err)
				return
			case err != nil:
				if !failing {
					logger.Debug("log shipping failed, retrying", "err", err)
					failing = true
				}
				if !sleep(ctx, backoff) {
					return
				}
				backoff = min(backoff*2, logBackoffMax)
				continue
			}
			if next == offset {
				// The server took nothing; resending at once would spin.
				if !sleep(ctx, backoff) {
					return
				}
				backoff = min(backoff*2, logBackoffMax)
				continue
			}
			failing, backoff = false, logBackoffMin
			offset = next
			if offset > size {
				// The server holds more than this file: nothing left to send until it grows.
				logger.Warn("server log copy is longer than the local one", "server", offset, "local", size)
			}
			continue
		}
		if ended {
			return
		}
		t := time.NewTimer(s.poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-p.exited:
		case <-t.C:
		}
		t.Stop()
	}
}

// send posts n bytes at offset and returns the server's size, the next offset.
func (s *logShipper) send(ctx context.Context, p *proc, offset, n int64) (int64, error) {
	f, err := os.Open(p.logPath)
	if err != nil {
		return 0, fmt.Errorf("open log: %w", err)
	}
	buf := make([]byte, n)
	_, err = f.ReadAt(buf, offset)
	f.Close()
	if err != nil {
		return 0, fmt.Errorf("read log: %w", err)
	}

	u := fmt.Sprintf("%s/api/v1/agents/%s/logs/%d/%d?offset=%d",
		s.server, url.PathEscape(s.node), p.key.job, p.key.attempt, offset)
	ctx, cancel := context.WithTimeout(ctx, logRequestTime)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(buf))
	if err != nil {
		return 0, fmt.Errorf("log request: %w", err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("ship log: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return 0, fmt.Errorf("ship log: read answer: %w", err)
	}
	// A pointer tells a LogAck from an error body, which also decodes into the struct.
	var ack struct {
		Size *int64 `json:"size"`
	}
	switch {
	case resp.StatusCode/100 == 2:
		if err := json.Unmarshal(body, &ack); err != nil || ack.Size == nil {
			return 0, fmt.Errorf("ship log: answer is not a LogAck: %s", truncate(string(body), 200))
		}
		return *ack.Size, nil
	case resp.StatusCode == http.StatusConflict && json.Unmarshal(body, &ack) == nil && ack.Size != nil:
		// The offset did not match the server's copy; it says where to resume.
		return *ack.Size, nil
	case resp.StatusCode/100 == 4 && resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests:
		return 0, fmt.Errorf("ship log: %w: %s", errPermanent, httpError(resp.StatusCode, body))
	default:
		return 0, fmt.Errorf("ship log: %s", httpError(resp.StatusCode, body))
	}
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
