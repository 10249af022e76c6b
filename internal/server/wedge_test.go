package server

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// A handler that panics is logged with its stack and its connection ended. One that
// panicked holding the server's lock wedges the server, which says so on Wedged once the
// lock has stayed held for WedgedAfter; one that let go of it does not, and the server
// answers on.
func TestHandlerPanicWedgesOnlyWithTheLockHeld(t *testing.T) {
	for _, held := range []bool{false, true} {
		var logs syncBuffer
		h := &harness{t: t, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir(),
			cfg: func(c *Config) { c.WedgedAfter = 200 * time.Millisecond }}
		h.open()
		h.srv.log = slog.New(slog.NewTextHandler(&logs, nil))
		rt := route{method: "GET", path: "/api/v1/test-panic", rule: ruleViewer, body: noBody,
			handle: func(s *Server, w http.ResponseWriter, r *http.Request) {
				s.mu.Lock()
				if !held {
					s.mu.Unlock()
				}
				panic("a bug")
			}}
		r := httptest.NewRequest("GET", "/api/v1/test-panic", nil)
		r.Header.Set("Authorization", "Bearer "+h.token)
		func() {
			defer func() {
				if p := recover(); p != http.ErrAbortHandler {
					t.Errorf("held=%v: the handler's panic reached net/http as %v; want http.ErrAbortHandler, which ends the connection quietly", held, p)
				}
			}()
			h.srv.serve(rt, httptest.NewRecorder(), r)
		}()
		if out := logs.String(); !strings.Contains(out, "an API handler panicked") || !strings.Contains(out, "a bug") || !strings.Contains(out, "wedge_test.go") {
			t.Errorf("held=%v: the log says %q; want the panic, its value and its stack", held, out)
		}
		select {
		case <-h.srv.Wedged():
			if !held {
				t.Errorf("the server says it is wedged after a panic that let the lock go")
			}
		case <-time.After(time.Second):
			if held {
				t.Fatalf("the server does not say it is wedged a second after a panic left its lock held")
			}
		}
		if held {
			if !strings.Contains(logs.String(), "the server is wedged") {
				t.Errorf("the log does not say the server is wedged: %q", logs.String())
			}
			h.srv.mu.Unlock() // for the harness's clean-up
			continue
		}
		var list api.NodeList
		if code := h.do("GET", "/api/v1/nodes", nil, &list); code != http.StatusOK {
			t.Errorf("after a panic that let the lock go, GET /api/v1/nodes: %d", code)
		}
	}
}

// syncBuffer is a bytes.Buffer that goroutines may write to at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
