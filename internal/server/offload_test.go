package server

import (
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestHandOffRunsElsewhereAndWaits checks that a handler handed off answers its request as
// if it had run on the connection's goroutine: it runs on another goroutine, and the
// request is answered only once it returns.
func TestHandOffRunsElsewhereAndWaits(t *testing.T) {
	o := newHandOff(time.Minute)
	var mu sync.Mutex
	var ids, conns []uint64
	inner := o.wrap(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ids = append(ids, goid())
		mu.Unlock()
		body, _ := io.ReadAll(r.Body)
		time.Sleep(20 * time.Millisecond) // the answer must wait for this
		w.Header().Set("X-Len", "x")
		io.WriteString(w, strings.ToUpper(string(body)))
	})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		conns = append(conns, goid())
		mu.Unlock()
		inner(w, r)
	}))
	defer hs.Close()
	for range 3 {
		resp, err := http.Post(hs.URL, "text/plain", strings.NewReader("beat"))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(got) != "BEAT" || resp.Header.Get("X-Len") != "x" {
			t.Fatalf("answer %q with header %q, want BEAT and x", got, resp.Header.Get("X-Len"))
		}
	}
	// One client, one request at a time: the goroutine that ran the first ran them all.
	if len(ids) != 3 || ids[0] != ids[1] || ids[1] != ids[2] {
		t.Fatalf("handlers ran on goroutines %v, want one kept goroutine for all three", ids)
	}
	if conns[0] == ids[0] {
		t.Fatalf("the handler ran on the connection's goroutine %d", conns[0])
	}
}

// TestHandOffDoesNotQueueBehindSlowHandlers checks that handlers blocked in their work (a
// heartbeat waiting for its report's commit) do not hold others back: a handler that finds
// no goroutine waiting gets a new one.
func TestHandOffDoesNotQueueBehindSlowHandlers(t *testing.T) {
	o := newHandOff(time.Minute)
	const n = 20
	var started sync.WaitGroup
	started.Add(n)
	release := make(chan struct{})
	var done sync.WaitGroup
	for range n {
		done.Add(1)
		go func() {
			defer done.Done()
			o.run(func() {
				started.Done()
				<-release
			})
		}()
	}
	ok := make(chan struct{})
	go func() { started.Wait(); close(ok) }()
	select {
	case <-ok:
	case <-time.After(10 * time.Second):
		t.Fatal("handlers waited for each other: all 20 should run at once")
	}
	close(release)
	done.Wait()
}

// TestHandOffPanics checks that a handler's panic stays the one request's, as net/http
// makes it for a handler on the connection's goroutine: the connection is dropped and the
// server goes on. Raised on a goroutine of the hand-off, it would end the process.
func TestHandOffPanics(t *testing.T) {
	o := newHandOff(time.Minute)
	hs := httptest.NewUnstartedServer(o.wrap(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/abort":
			panic(http.ErrAbortHandler)
		case "/bug":
			panic("a bug")
		case "/nil":
			panic(nil)
		}
		io.WriteString(w, "ok")
	}))
	hs.Config.ErrorLog = log.New(io.Discard, "", 0) // net/http logs the panics
	hs.Start()
	defer hs.Close()
	for _, path := range []string{"/abort", "/bug", "/nil"} {
		resp, err := http.Get(hs.URL + path)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("GET %s: status %d, want the connection dropped", path, resp.StatusCode)
		}
		resp, err = http.Get(hs.URL + "/fine")
		if err != nil {
			t.Fatalf("after the panic at %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "ok" {
			t.Fatalf("after the panic at %s: answer %q, want ok", path, body)
		}
	}
	// The panic reaches the caller as it was raised.
	defer func() {
		if p := recover(); !errors.Is(p.(error), http.ErrAbortHandler) {
			t.Fatalf("run raised %v, want http.ErrAbortHandler", p)
		}
	}()
	o.run(func() { panic(http.ErrAbortHandler) })
}

// TestHandOffGoroutinesExit checks that the goroutines a burst started exit once idle,
// even while requests keep coming one at a time: taken in turn, each would be used often
// enough to stay.
func TestHandOffGoroutinesExit(t *testing.T) {
	o := newHandOff(50 * time.Millisecond)
	var started, wg sync.WaitGroup
	release := make(chan struct{})
	started.Add(50)
	for range 50 {
		wg.Add(1)
		go func() { defer wg.Done(); o.run(func() { started.Done(); <-release }) }()
	}
	started.Wait()
	if n := o.count(); n != 50 {
		t.Fatalf("%d runners with 50 handlers running, want 50", n)
	}
	close(release)
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for o.count() > 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d runners 10 s after the burst, with one request at a time since: idle runners should exit", o.count())
		}
		o.run(func() {})
		time.Sleep(time.Millisecond)
	}
}

func (o *handOff) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.runners
}

// goid returns the calling goroutine's number, from its stack's first line.
func goid() uint64 {
	var buf [64]byte
	s := string(buf[:runtime.Stack(buf[:], false)])
	s = strings.TrimPrefix(s, "goroutine ")
	var id uint64
	for _, c := range s {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return id
}
