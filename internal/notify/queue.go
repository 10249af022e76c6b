package notify

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"time"
)

// Delivery is one webhook to send: a body to one URL.
type Delivery struct {
	// ID is the notification's ID, sent as Rota-Delivery; every retry keeps it, so a
	// receiver can drop duplicates.
	ID string
	// Event is sent as Rota-Event, so a receiver can route without parsing the body.
	Event string
	URL   string
	Body  []byte
	// Secret signs the body (Rota-Signature) when not empty.
	Secret string
}

// Outcome is what became of one try or one delivery, for the caller's counters.
type Outcome int

const (
	// Delivered: the endpoint answered 2xx.
	Delivered Outcome = iota
	// Retried: a try failed in a way worth retrying (no answer, 429, 5xx); another follows.
	Retried
	// Dropped: the queue was full or closing, so the delivery was never sent.
	Dropped
	// Failed: the endpoint refused it (another 4xx, a redirect) or every try failed.
	Failed
)

// Stats counts outcomes since the queue started.
type Stats struct {
	Delivered, Retried, Dropped, Failed int64
}

// Clock tells the time and waits. Deliveries wait seconds to minutes between tries; a test
// gives a clock that does not really sleep, so a whole retry schedule runs at once.
type Clock interface {
	Now() time.Time
	// Sleep waits d, or returns ctx's error as soon as ctx ends.
	Sleep(ctx context.Context, d time.Duration) error
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Options configure a Queue. Zero values take the defaults in their comments.
type Options struct {
	// Size bounds the deliveries held at once, queued or waiting to be retried (10000).
	Size int
	// Workers is how many deliveries are sent at once (4).
	Workers int
	// Timeout bounds one try, answer included (10s).
	Timeout time.Duration
	// MaxTries is the most tries of one delivery (8).
	MaxTries int
	// FirstRetry is the wait before the first retry; each next one doubles, up to
	// MaxRetry (1s, 5m). Each wait is jittered down to half, so that many deliveries
	// failing together do not come back together.
	FirstRetry, MaxRetry time.Duration
	// Client sends the requests (default: one with Timeout that follows no redirect).
	Client *http.Client
	Clock  Clock
	// Rand returns a number in [0, 1) for the jitter (default math/rand/v2).
	Rand func() float64
	// Logger hears of deliveries given up (nil: discard).
	Logger *slog.Logger
	// Count, if set, is called with every outcome: a place for the caller's metrics.
	Count func(Outcome)
}

func (o *Options) setDefaults() {
	if o.Size <= 0 {
		o.Size = 10000
	}
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.MaxTries <= 0 {
		o.MaxTries = 8
	}
	if o.FirstRetry <= 0 {
		o.FirstRetry = time.Second
	}
	if o.MaxRetry <= 0 {
		o.MaxRetry = 5 * time.Minute
	}
	if o.Client == nil {
		// A redirect is not followed: the URL was checked against the cluster's allowed
		// prefixes, where it points to was not.
		o.Client = &http.Client{Timeout: o.Timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if o.Clock == nil {
		o.Clock = wallClock{}
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// Queue sends deliveries in the background. Its methods may be called from any goroutine.
type Queue struct {
	opts Options
	// work holds deliveries ready to be sent. Its capacity is opts.Size and at most
	// opts.Size deliveries are held at all (see pending), so a send to it never blocks.
	work   chan *try
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the workers and the retries waiting to be queued again

	mu sync.Mutex // guards the fields below
	// pending counts the deliveries held: queued, being sent, or waiting to retry.
	pending int
	closed  bool
	stats   Stats
}

// try is a delivery and how many times it was sent.
type try struct {
	Delivery
	n int
}

// New starts a queue's workers. Close stops them.
func New(opts Options) *Queue {
	opts.setDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	q := &Queue{opts: opts, work: make(chan *try, opts.Size), ctx: ctx, cancel: cancel}
	for range opts.Workers {
		q.wg.Add(1)
		go q.worker()
	}
	return q
}

// Enqueue queues d and reports whether it was taken. It never blocks: when the queue is
// full or closed, d is dropped and counted.
func (q *Queue) Enqueue(d Delivery) bool {
	q.mu.Lock()
	if q.closed || q.pending >= q.opts.Size {
		q.mu.Unlock()
		q.count(Dropped)
		return false
	}
	q.pending++
	q.mu.Unlock()
	q.work <- &try{Delivery: d}
	return true
}

// Close stops the workers and the waiting retries, and returns once they have stopped. What
// was still queued is lost, and counted as dropped.
func (q *Queue) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cancel()
	q.wg.Wait()
	for {
		select {
		case <-q.work:
			q.finish(Dropped)
		default:
			return
		}
	}
}

// Stats returns the counts so far.
func (q *Queue) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stats
}

func (q *Queue) worker() {
	defer q.wg.Done()
	for {
		select {
		case <-q.ctx.Done():
			return
		case t := <-q.work:
			q.send(t)
		}
	}
}

// send makes one try of t and decides what follows: done, or a retry after a backoff.
func (q *Queue) send(t *try) {
	t.n++
	status, err := q.post(t)
	switch {
	case err == nil && status >= 200 && status < 300:
		q.finish(Delivered)
		return
	case q.ctx.Err() != nil:
		q.finish(Dropped) // cut short by Close
		return
	case !retryable(status, err) || t.n >= q.opts.MaxTries:
		q.opts.Logger.Warn("webhook given up", "url", redact(t.URL), "event", t.Event, "delivery", t.ID,
			"tries", t.n, "status", status, "err", err)
		q.finish(Failed)
		return
	}
	q.count(Retried)
	wait := Backoff(t.n, q.opts.FirstRetry, q.opts.MaxRetry, q.opts.Rand())
	// The wait happens off the workers, so that one failing endpoint does not hold them.
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		if q.opts.Clock.Sleep(q.ctx, wait) != nil {
			q.finish(Dropped)
			return
		}
		q.work <- t // its place in pending was kept: there is room
	}()
}

// post sends t once and returns the answer's status.
func (q *Queue) post(t *try) (int, error) {
	ctx, cancel := context.WithTimeout(q.ctx, q.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(t.Body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "rota")
	req.Header.Set("Rota-Event", t.Event)
	req.Header.Set("Rota-Delivery", t.ID)
	if t.Secret != "" {
		req.Header.Set("Rota-Signature", Sign(t.Secret, q.opts.Clock.Now(), t.Body))
	}
	resp, err := q.opts.Client.Do(req)
	if err != nil {
		return 0, err
	}
	// Read a little of the answer so the connection can be reused; nobody needs more.
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode, nil
}

// retryable reports whether a failed try is worth another: no answer, too many requests,
// or a server error. Any other answer would be the same the next time.
func retryable(status int, err error) bool {
	return err != nil || status == http.StatusTooManyRequests || status >= 500
}

// Backoff is the wait after the n-th try (n from 1): first, doubled for each further try,
// at most max, then jittered: r in [0, 1) takes it down by up to half.
func Backoff(n int, first, max time.Duration, r float64) time.Duration {
	d := first
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return d - time.Duration(r*float64(d/2))
}

// finish counts a delivery's end and frees its place.
func (q *Queue) finish(o Outcome) {
	q.mu.Lock()
	q.pending--
	q.mu.Unlock()
	q.count(o)
}

func (q *Queue) count(o Outcome) {
	q.mu.Lock()
	switch o {
	case Delivered:
		q.stats.Delivered++
	case Retried:
		q.stats.Retried++
	case Dropped:
		q.stats.Dropped++
	case Failed:
		q.stats.Failed++
	}
	q.mu.Unlock()
	if q.opts.Count != nil {
		q.opts.Count(o)
	}
}

// redact keeps a URL's scheme, host and path for the log: a query may carry a token.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Scheme + "://" + u.Host + u.Path
}
