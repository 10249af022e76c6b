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
	"path/filepath"
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
	// client is the agent's current client: a renewed certificate replaces it.
	client  func() *http.Client
	servers *serverSet
	node    string
	// poll is how stale a followed log may be while the job runs.
	poll time.Duration
}

// errPermanent marks an answer that a resend would only repeat.
var errPermanent = errors.New("rejected by the server")

// ship sends the log of a until the attempt has ended and every byte is on the server, or
// ctx ends, or current says the attempt is no longer of the server's cluster. It starts
// where the server's copy ends, so a restarted agent resends nothing. It closes
// a.logShipped when it will send no more, which lets the end be reported, and records a
// log that is complete on the server, which lets housekeeping remove the attempt.
func (s *logShipper) ship(ctx context.Context, a *attempt, current func() bool) {
	defer a.markLogShipped()
	logger := a.logger
	backoff := logBackoffMin
	failing := false
	retry := func(err error) bool {
		if !failing {
			logger.Debug("log shipping failed, retrying", "err", err)
			failing = true
		}
		ok := sleep(ctx, backoff)
		backoff = min(backoff*2, logBackoffMax)
		return ok
	}
	giveUp := func(err error) {
		logger.Error("log shipping stopped", "err", err)
		if errors.Is(err, errPermanent) {
			// A resend would only repeat the refusal; the log will never ship.
			s.done(a)
		}
	}

	// An empty write at 0 asks the server how much it has.
	var offset int64
	for {
		if !current() {
			return
		}
		n, err := s.send(ctx, a, 0, nil)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errPermanent) {
			giveUp(err)
			return
		}
		if err == nil {
			offset = n
			break
		}
		if !retry(err) {
			return
		}
	}
	failing, backoff = false, logBackoffMin

	for {
		if !current() {
			return
		}
		// Read "exited" before the size: once the attempt is over the file is final, so a
		// size taken after that is the last one.
		ended := isClosed(a.exited)
		size, err := fileSize(a.logPath)
		if err != nil {
			giveUp(err)
			return
		}
		if offset < size {
			data, err := readAt(a.logPath, offset, min(size-offset, maxLogChunk))
			if err != nil {
				giveUp(err)
				return
			}
			next, err := s.send(ctx, a, offset, data)
			switch {
			case ctx.Err() != nil:
				return
			case errors.Is(err, errPermanent):
				giveUp(err)
				return
			case err != nil:
				if !retry(err) {
					return
				}
				continue
			}
			if next == offset {
				// The server took nothing; resending at once would spin.
				if !retry(errors.New("the server took none of the bytes")) {
					return
				}
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
			s.done(a)
			return
		}
		t := time.NewTimer(s.poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-a.exited:
		case <-t.C:
		}
		t.Stop()
	}
}

// done records that the attempt's log needs no more shipping.
func (s *logShipper) done(a *attempt) {
	if err := mark(filepath.Join(a.dir, fileShipped)); err != nil {
		a.logger.Error("record the log shipped", "err", err)
	}
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

// send posts data at offset and returns the server's size, the next offset.
func (s *logShipper) send(ctx context.Context, a *attempt, offset int64, data []byte) (int64, error) {
	server := s.servers.current()
	u := fmt.Sprintf("%s/api/v1/agents/%s/logs/%d/%d?offset=%d",
		server, url.PathEscape(s.node), a.key.job, a.key.attempt, offset)
	ctx, cancel := context.WithTimeout(ctx, logRequestTime)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(data))
	if err != nil {
		return 0, fmt.Errorf("log request: %w", err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := s.client().Do(req)
	if err != nil {
		s.servers.moveOn(server, nil)
		return 0, fmt.Errorf("ship log: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		s.servers.moveOn(server, resp)
	}
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
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		// The node's credentials may come right (a renewal, a join); keep trying.
		return 0, fmt.Errorf("ship log: %s", httpError(resp.StatusCode, body))
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
