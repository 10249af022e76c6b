package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// newLeanTestServer serves h over TLS, configured by configure, and returns a leanConn to it, and the number of
// connections the server has accepted.
func newLeanTestServer(t *testing.T, h http.HandlerFunc, configure ...func(*http.Server)) (*leanConn, *atomic.Int64) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	for _, f := range configure {
		f(srv.Config)
	}
	var conns atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c, err := newLeanConn(srv.URL, &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, &conns
}

func TestLeanConnRequests(t *testing.T) {
	c, conns := newLeanTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Idempotency-Key") != "k1" || r.ContentLength != int64(len(body)) {
			http.Error(w, "bad request: "+r.Header.Get("Content-Type")+" "+r.Header.Get("Idempotency-Key"), http.StatusBadRequest)
			return
		}
		switch r.URL.Path {
		case "/echo":
			w.Write(body)
		case "/big":
			// Over net/http's buffer: sent chunked, with no Content-Length.
			w.Write([]byte(strings.Repeat("x", 10_000)))
		case "/refuse":
			http.Error(w, "no such thing", http.StatusNotFound)
		case "/busy":
			w.Header().Set("Retry-After", "1")
			http.Error(w, "slow down", http.StatusTooManyRequests)
		}
	})
	ctx := context.Background()
	for range 3 {
		status, data, err := c.do(ctx, http.MethodPost, "/echo", []byte(`{"a":1}`), "Idempotency-Key", "k1")
		if err != nil || status != http.StatusOK || string(data) != `{"a":1}` {
			t.Fatalf("echo: %d %q %v", status, data, err)
		}
	}
	status, data, err := c.do(ctx, http.MethodPost, "/big", []byte(`{}`), "Idempotency-Key", "k1")
	if err != nil || status != http.StatusOK || len(data) != 10_000 {
		t.Fatalf("chunked answer: %d, %d bytes, %v", status, len(data), err)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("five requests took %d connections, want one kept connection", n)
	}

	status, data, err = c.do(ctx, http.MethodPost, "/refuse", []byte(`{}`), "Idempotency-Key", "k1")
	if err != nil || status != http.StatusNotFound {
		t.Fatalf("refused: %d %v", status, err)
	}
	var refused *refusedError
	if e := answerError(status, data); !errors.As(e, &refused) || refused.status != 404 || refused.msg != "no such thing" {
		t.Errorf("answerError(404) = %v, want a refusedError with the body", e)
	}
	status, data, err = c.do(ctx, http.MethodPost, "/busy", []byte(`{}`), "Idempotency-Key", "k1")
	if err != nil || status != http.StatusTooManyRequests {
		t.Fatalf("busy: %d %v", status, err)
	}
	if e := answerError(status, data); e == nil || errors.As(e, &refused) {
		t.Errorf("answerError(429) = %v, want an error to retry, not a refusal", e)
	}
	// A GET has no body and no Content-Type.
	status, _, err = c.do(ctx, http.MethodGet, "/echo", nil, "Idempotency-Key", "k1")
	if err != nil || status != http.StatusBadRequest {
		t.Errorf("GET: %d %v, want the handler's 400 for a missing Content-Type", status, err)
	}
}

// A kept connection the server has closed at its idle timeout is dialled again, and the
// request sent on the new one; the server sees it once.
func TestLeanConnRedialsClosedConnection(t *testing.T) {
	var served atomic.Int64
	c, conns := newLeanTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.Write([]byte("ok"))
	}, func(s *http.Server) { s.IdleTimeout = 20 * time.Millisecond })
	ctx := context.Background()
	for i := range 3 {
		status, data, err := c.do(ctx, http.MethodGet, "/", nil)
		if err != nil || status != 200 || string(data) != "ok" {
			t.Fatalf("request %d: %d %q %v", i, status, data, err)
		}
		time.Sleep(200 * time.Millisecond) // past the server's idle timeout
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("%d connections, want 3: each closed by the server while idle", n)
	}
	if n := served.Load(); n != 3 {
		t.Errorf("the server handled %d requests, want 3", n)
	}
}

// Cancelling the context ends a request the server has not answered.
func TestLeanConnCancel(t *testing.T) {
	release := make(chan struct{})
	c, _ := newLeanTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, _, err := c.do(ctx, http.MethodGet, "/", nil)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a cancelled request reported no error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancelling the context did not end the request")
	}
}

// BenchmarkGeneratorRequest is one request of the scale suite's generator, a 300-byte
// JSON body posted and a 1.5 KB answer read, from 64 goroutines on connections of their
// own: through http.Client as before, and through leanConn. The server's side is the same
// in both, so the difference is the client's.
//
//	go test -run XXX -bench BenchmarkGeneratorRequest -benchmem ./internal/bench/
func BenchmarkGeneratorRequest(b *testing.B) {
	answer := []byte(strings.Repeat(`{"job_id":1,"attempt":1},`, 60))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write(answer)
	}))
	srv.StartTLS()
	defer srv.Close()
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	body := []byte(`{"node":"n1","tasks":[` + strings.Repeat(`{"job_id":1,"attempt":1,"state":"RUNNING"},`, 6) + `{}]}`)
	ctx := context.Background()
	b.Run("client=net-http", func(b *testing.B) {
		b.SetParallelism(32) // 64 goroutines on 2 cores
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
			defer c.CloseIdleConnections()
			for pb.Next() {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/heartbeat", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := c.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				if _, err := io.ReadAll(resp.Body); err != nil {
					b.Error(err)
				}
				resp.Body.Close()
			}
		})
	})
	b.Run("client=lean", func(b *testing.B) {
		b.SetParallelism(32)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			c, err := newLeanConn(srv.URL, &tls.Config{RootCAs: roots})
			if err != nil {
				b.Error(err)
				return
			}
			defer c.Close()
			for pb.Next() {
				if status, _, err := c.do(ctx, http.MethodPost, "/heartbeat", body); err != nil || status != 200 {
					b.Error(status, err)
					return
				}
			}
		})
	})
}
