package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/coder/websocket"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
)

// The agent's side of an interactive attempt's terminal (see tty.go and api/attach.go):
// while the attempt runs, one relay connects its supervisor's attach.sock to the server's
// GET /api/v1/agents/{node}/attach/{job}/{attempt}, and reconnects when either breaks.

// relayRetry is how long a broken relay waits before it connects again.
const relayRetry = time.Second

// startRelays starts a relay for every interactive attempt of the desired state that runs
// here and has none. Callers hold a.mu.
func (a *Agent) startRelays(desired []api.Task) {
	if a.bg == nil {
		return
	}
	for _, t := range desired {
		if !t.TTY || t.Stop {
			continue
		}
		k := attemptKey{cluster: a.cluster, job: t.JobID, attempt: t.Attempt}
		att, ok := a.attempts[k]
		if !ok || isClosed(att.exited) || a.relays[k] {
			continue
		}
		a.relays[k] = true
		a.bg.Go(func() {
			a.relay(a.ctx, att)
			a.mu.Lock()
			delete(a.relays, k)
			a.mu.Unlock()
		})
	}
}

// relay keeps the attempt's terminal connected to the server until the attempt ends.
func (a *Agent) relay(ctx context.Context, att *attempt) {
	for ctx.Err() == nil && !isClosed(att.exited) {
		err := a.relayOnce(ctx, att)
		if isClosed(att.exited) || ctx.Err() != nil {
			return
		}
		if err != nil {
			att.logger.Debug("terminal relay broke; connecting again", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-att.exited:
		case <-time.After(relayRetry):
		}
	}
}

func (a *Agent) relayOnce(ctx context.Context, att *attempt) error {
	// The socket appears once the job has started.
	sock := filepath.Join(att.dir, fileAttachSock)
	for !exists(sock) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-att.exited:
			return nil
		case <-time.After(runnerPoll):
		}
	}
	d, err := os.Open(att.dir)
	if err != nil {
		return err
	}
	uc, err := net.Dial("unix", shortSocketPath(d, fileAttachSock))
	d.Close()
	if err != nil {
		return fmt.Errorf("connect to the job's terminal: %w", err)
	}
	defer uc.Close()

	u := fmt.Sprintf("%s/api/v1/agents/%s/attach/%d/%d", a.servers.current(), url.PathEscape(a.name), att.key.job, att.key.attempt)
	dctx, cancel := context.WithTimeout(ctx, heartbeatTimeout)
	ws, resp, err := websocket.Dial(dctx, u, &websocket.DialOptions{HTTPClient: auth.HTTP1Only(a.httpClient())})
	cancel()
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return fmt.Errorf("open the attach stream: %w", err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(api.MaxFrame + 1)
	outDone := make(chan struct{})
	go func() {
		// Output from the job to the server. The socket's end is the terminal's: the
		// supervisor closes it once the job has ended and its output is all sent.
		defer close(outDone)
		for {
			kind, p, err := api.ReadFrame(uc)
			if err != nil {
				ws.Close(websocket.StatusNormalClosure, "the job's terminal closed")
				return
			}
			if err := ws.Write(ctx, websocket.MessageBinary, append([]byte{kind}, p...)); err != nil {
				return
			}
		}
	}()
	var end error
	for {
		typ, msg, err := ws.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) != websocket.StatusNormalClosure && !errors.Is(err, context.Canceled) {
				end = err
			}
			break
		}
		if typ != websocket.MessageBinary || len(msg) == 0 {
			continue
		}
		if err := api.WriteFrame(uc, msg[0], msg[1:]); err != nil {
			// The job's terminal is closing (a job that ended as a terminal attached,
			// whose window size came in). What it wrote before may still wait in the
			// socket: the output side reads it out to the end before the stream closes.
			select {
			case <-outDone:
			case <-ctx.Done():
			case <-time.After(drainWait):
			}
			end = err
			break
		}
	}
	// Wait for the output side, so that its close of the stream is not cut short.
	uc.Close()
	<-outDone
	return end
}

// drainWait bounds how long a relay whose writes to the job's terminal fail waits for the
// terminal's last output: a socket the supervisor closed ends at once.
const drainWait = 5 * time.Second
