package notify

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeClock answers a fixed time and records the waits asked of it without waiting.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
}

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.mu.Unlock()
	return ctx.Err()
}

// endpoint is a webhook receiver that answers the statuses given in turn (the last one
// for ever) and records what it was sent.
type endpoint struct {
	*httptest.Server
	mu       sync.Mutex
	statuses []int
	reqs     []*http.Request
	bodies   []string
	done     chan struct{} // receives once per request answered
}

func newEndpoint(t *testing.T, statuses ...int) *endpoint {
	e := &endpoint{statuses: statuses, done: make(chan struct{}, 100)}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		e.mu.Lock()
		status := e.statuses[min(len(e.reqs), len(e.statuses)-1)]
		e.reqs = append(e.reqs, r)
		e.bodies = append(e.bodies, string(body))
		e.mu.Unlock()
		w.WriteHeader(status)
		e.done <- struct{}{}
	}))
	t.Cleanup(e.Close)
	return e
}

// wait waits for n requests to have been answered.
func (e *endpoint) wait(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-e.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("the endpoint got %d requests; want %d", len(e.reqs), n)
		}
	}
}

// settle waits for n deliveries to have ended, delivered or given up, then closes q and
// returns its counts.
func settle(t *testing.T, q *Queue, n int64) Stats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s := q.Stats(); s.Delivered+s.Failed < n; s = q.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v: fewer than %d deliveries ended", s, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	q.Close()
	return q.Stats()
}

var t0 = time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)

func TestSignedDelivery(t *testing.T) {
	e := newEndpoint(t, 200)
	q := New(Options{Clock: &fakeClock{now: t0}})
	body := `{"id":"n1","event":"started"}`
	q.Enqueue(Delivery{ID: "n1", Event: "started", URL: e.URL + "/hook?x=1", Body: []byte(body), Secret: "s3cret"})
	e.wait(t, 1)
	if s := settle(t, q, 1); s != (Stats{Delivered: 1}) {
		t.Errorf("stats %+v; want one delivered", s)
	}
	r := e.reqs[0]
	for h, want := range map[string]string{"Content-Type": "application/json", "User-Agent": "rota", "Rota-Event": "started", "Rota-Delivery": "n1"} {
		if got := r.Header.Get(h); got != want {
			t.Errorf("%s: %q; want %q", h, got, want)
		}
	}
	if r.Method != "POST" || r.URL.RawQuery != "x=1" || e.bodies[0] != body {
		t.Errorf("%s ?%s %q", r.Method, r.URL.RawQuery, e.bodies[0])
	}
	// Recompute the signature as a receiver would.
	ts, mac, ok := strings.Cut(r.Header.Get("Rota-Signature"), ",v1=")
	h := hmac.New(sha256.New, []byte("s3cret"))
	h.Write([]byte(strings.TrimPrefix(ts, "t=") + "." + body))
	if !ok || ts != "t="+strconv.FormatInt(t0.Unix(), 10) || mac != hex.EncodeToString(h.Sum(nil)) {
		t.Errorf("Rota-Signature %q does not verify", r.Header.Get("Rota-Signature"))
	}
}

func TestUnsignedWithoutSecret(t *testing.T) {
	e := newEndpoint(t, 204)
	q := New(Options{})
	q.Enqueue(Delivery{ID: "n1", Event: "ended", URL: e.URL, Body: []byte("{}")})
	e.wait(t, 1)
	settle(t, q, 1)
	if sig := e.reqs[0].Header.Get("Rota-Signature"); sig != "" {
		t.Errorf("Rota-Signature %q without a secret", sig)
	}
}

// What is retried and how often: failures that may pass, with backoff, up to MaxTries;
// refusals never.
func TestRetries(t *testing.T) {
	for _, tc := range []struct {
		name     string
		statuses []int
		requests int
		want     Stats
	}{
		{"500 twice then 200", []int{500, 500, 200}, 3, Stats{Delivered: 1, Retried: 2}},
		{"429 then 200", []int{429, 200}, 2, Stats{Delivered: 1, Retried: 1}},
		{"400 is not retried", []int{400}, 1, Stats{Failed: 1}},
		{"404 is not retried", []int{404}, 1, Stats{Failed: 1}},
		{"a redirect is not followed", []int{302}, 1, Stats{Failed: 1}},
		{"503 for ever: MaxTries", []int{503}, 5, Stats{Failed: 1, Retried: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEndpoint(t, tc.statuses...)
			clock := &fakeClock{now: t0}
			q := New(Options{Clock: clock, MaxTries: 5, Rand: func() float64 { return 0 }})
			q.Enqueue(Delivery{ID: "same", Event: "failed", URL: e.URL, Body: []byte("{}")})
			e.wait(t, tc.requests)
			// Give an extra request, which would be a bug, the time to arrive.
			time.Sleep(50 * time.Millisecond)
			if s := settle(t, q, 1); s != tc.want {
				t.Errorf("stats %+v; want %+v", s, tc.want)
			}
			if len(e.reqs) != tc.requests {
				t.Fatalf("%d requests; want %d", len(e.reqs), tc.requests)
			}
			for _, r := range e.reqs {
				if id := r.Header.Get("Rota-Delivery"); id != "same" {
					t.Errorf("a retry came with delivery ID %q; want the first one's", id)
				}
			}
			var want []time.Duration
			for n := 1; n < tc.requests; n++ {
				want = append(want, time.Second<<(n-1))
			}
			if len(clock.waits) != len(want) || (len(want) > 0 && clock.waits[len(want)-1] != want[len(want)-1]) {
				t.Errorf("waits %v; want %v", clock.waits, want)
			}
		})
	}
}

func TestUnreachableIsRetried(t *testing.T) {
	e := newEndpoint(t, 200)
	url := e.URL
	e.Close() // nothing listens there now
	q := New(Options{Clock: &fakeClock{now: t0}, MaxTries: 3})
	q.Enqueue(Delivery{ID: "x", URL: url, Body: []byte("{}")})
	if s := settle(t, q, 1); s != (Stats{Retried: 2, Failed: 1}) {
		t.Errorf("stats %+v; want 2 retries, then given up", s)
	}
}

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		n    int
		r    float64
		want time.Duration
	}{
		{1, 0, time.Second},
		{2, 0, 2 * time.Second},
		{3, 0, 4 * time.Second},
		{8, 0, 128 * time.Second},
		{9, 0, 256 * time.Second},
		{10, 0, 5 * time.Minute},
		{60, 0, 5 * time.Minute},
		{1, 0.5, 750 * time.Millisecond},
		{60, 0.999999, 150*time.Second + 150*time.Microsecond},
	} {
		if got := Backoff(tc.n, time.Second, 5*time.Minute, tc.r); got != tc.want {
			t.Errorf("Backoff(%d, r=%g) = %s; want %s", tc.n, tc.r, got, tc.want)
		}
	}
}

// hang is a transport whose requests get no answer until they are cancelled.
type hang struct{ started chan struct{} }

func (h hang) RoundTrip(r *http.Request) (*http.Response, error) {
	h.started <- struct{}{}
	<-r.Context().Done()
	return nil, r.Context().Err()
}

// An endpoint that never answers fills the queue; what does not fit is dropped and
// counted at once, Enqueue never waits, and Close stops everything: the bubble ends only
// when no goroutine of the queue is left.
func TestHangingEndpointDropsAndCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := hang{started: make(chan struct{}, 10)}
		q := New(Options{Size: 3, Workers: 2, Client: &http.Client{Transport: h}, Timeout: time.Hour})
		taken := 0
		for range 10 {
			if q.Enqueue(Delivery{ID: "x", URL: "http://hooks.example/", Body: []byte("{}")}) {
				taken++
			}
		}
		<-h.started
		<-h.started
		if s := q.Stats(); taken != 3 || s.Dropped != 7 {
			t.Errorf("%d taken, stats %+v; want 3 taken and 7 dropped", taken, s)
		}
		q.Close()
		s := q.Stats()
		if s.Dropped != 10 || s.Delivered != 0 {
			t.Errorf("after Close: %+v; want every delivery dropped", s)
		}
		if q.Enqueue(Delivery{}) {
			t.Error("a closed queue took a delivery")
		}
	})
}

// A try that gets no answer within Timeout is a failure like any other, and retried.
func TestTimeoutIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := hang{started: make(chan struct{}, 10)}
		var outcomes []Outcome
		var mu sync.Mutex
		q := New(Options{Client: &http.Client{Transport: h}, MaxTries: 2, Count: func(o Outcome) {
			mu.Lock()
			outcomes = append(outcomes, o)
			mu.Unlock()
		}})
		q.Enqueue(Delivery{ID: "x", URL: "http://hooks.example/", Body: []byte("{}")})
		<-h.started
		time.Sleep(10*time.Second + time.Minute) // the timeout, then any backoff
		<-h.started
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if s := settle(t, q, 1); s != (Stats{Retried: 1, Failed: 1}) {
			t.Errorf("stats %+v; want a retry, then given up", s)
		}
		if len(outcomes) != 2 || outcomes[0] != Retried || outcomes[1] != Failed {
			t.Errorf("counted %v; want Retried, Failed", outcomes)
		}
	})
}
