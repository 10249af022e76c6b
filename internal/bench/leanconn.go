package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// leanConn is one kept HTTP/1.1 connection over TLS for a load generator's requests, one
// at a time: the request is written by hand into one buffer and the answer read with
// net/http's own parser, on the calling goroutine.
//
// The scale suite's generator shares the machine with the server it measures. Through
// http.Transport each request also passed through the connection's two goroutines (a
// reader and a writer) and their channels: about 40 µs more CPU a request
// (BenchmarkGeneratorRequest), taken from the server. The server sees the same requests:
// HTTP/1.1 on a kept connection, over mutual TLS where the agents hold certificates.
type leanConn struct {
	addr string // host:port
	cfg  *tls.Config

	mu   sync.Mutex // one request at a time; guards the fields below
	conn *tls.Conn
	br   *bufio.Reader
	req  []byte
	body bytes.Buffer
}

// newLeanConn returns a connection to the server at base (https://host:port) with TLS
// configuration cfg; it dials on first use, and again after the server closes it.
func newLeanConn(base string, cfg *tls.Config) (*leanConn, error) {
	addr, ok := strings.CutPrefix(base, "https://")
	if !ok {
		return nil, fmt.Errorf("lean connection: %q is not an https:// address", base)
	}
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	return &leanConn{addr: addr, cfg: cfg}, nil
}

// do sends method path with body (Content-Type application/json when body is not nil)
// and the header lines in header, given as name, value, name, value…, and returns the
// status and the answer's body, which is the connection's until its next request. The
// request is sent again once, on a new connection, when a kept one turns out closed
// before any of its answer came: as http.Transport does for requests safe to repeat, which
// are all this suite sends (heartbeats, and submits with an Idempotency-Key).
func (c *leanConn) do(ctx context.Context, method, path string, body []byte, header ...string) (int, []byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.req = appendRequest(c.req[:0], method, c.addr, path, body, header)
	for try := 0; ; try++ {
		kept := c.conn != nil
		status, err := c.roundTrip(ctx)
		if err == nil {
			return status, c.body.Bytes(), nil
		}
		c.close()
		var early *beforeAnswer
		if !kept || try > 0 || !errors.As(err, &early) || ctx.Err() != nil {
			return 0, nil, err
		}
	}
}

// beforeAnswer is a failure on a kept connection before any byte of the answer came.
type beforeAnswer struct{ err error }

func (e *beforeAnswer) Error() string { return e.err.Error() }
func (e *beforeAnswer) Unwrap() error { return e.err }

// roundTrip writes c.req and reads the answer into c.body.
func (c *leanConn) roundTrip(ctx context.Context) (int, error) {
	if c.conn == nil {
		d := tls.Dialer{Config: c.cfg}
		nc, err := d.DialContext(ctx, "tcp", c.addr)
		if err != nil {
			return 0, err
		}
		c.conn = nc.(*tls.Conn)
		c.br = bufio.NewReaderSize(c.conn, 4<<10)
	}
	if dl, ok := ctx.Deadline(); ok {
		c.conn.SetDeadline(dl)
	} else {
		c.conn.SetDeadline(time.Time{})
	}
	// Cancelling ctx ends a request in flight, as it does through http.Client. A
	// connection whose deadline the cancellation may have spoiled is not kept.
	conn := c.conn
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() {
			c.close()
		}
	}()
	if _, err := c.conn.Write(c.req); err != nil {
		return 0, &beforeAnswer{err}
	}
	if _, err := c.br.Peek(1); err != nil {
		return 0, &beforeAnswer{err}
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return 0, err
	}
	c.body.Reset()
	_, err = c.body.ReadFrom(io.LimitReader(resp.Body, 16<<20))
	resp.Body.Close()
	if err != nil {
		return 0, err
	}
	if resp.Close {
		c.close()
	}
	return resp.StatusCode, nil
}

// close drops the connection; the next request dials again.
func (c *leanConn) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn, c.br = nil, nil
	}
}

// Close closes the connection. It waits for a request in flight: cancel its context first.
func (c *leanConn) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.close()
}

// appendRequest appends an HTTP/1.1 request to b.
func appendRequest(b []byte, method, host, path string, body []byte, header []string) []byte {
	b = append(b, method...)
	b = append(b, ' ')
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\nUser-Agent: rota-bench\r\n"...)
	for i := 0; i+1 < len(header); i += 2 {
		b = append(b, header[i]...)
		b = append(b, ": "...)
		b = append(b, header[i+1]...)
		b = append(b, "\r\n"...)
	}
	if body != nil {
		b = append(b, "Content-Type: application/json\r\nContent-Length: "...)
		b = strconv.AppendInt(b, int64(len(body)), 10)
		b = append(b, "\r\n"...)
	}
	b = append(b, "\r\n"...)
	return append(b, body...)
}

// answerError is the error for an answer with status outside 2xx: a refusal (4xx other
// than 408 and 429) is a refusedError, which sending again would not change.
func answerError(status int, data []byte) error {
	msg := string(bytes.TrimSpace(data[:min(len(data), 512)]))
	if status/100 == 4 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests {
		return &refusedError{status: status, msg: msg}
	}
	return fmt.Errorf("status %d: %s", status, msg)
}
