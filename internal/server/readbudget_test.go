package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// The budget's arithmetic, on a stopped clock: what a read is let in on, what it pays,
// when the bucket fills again, and the reads in flight.
func TestReadBudgetBucket(t *testing.T) {
	lim := api.Limits{ReadSecondsPerSecond: 0.5, ReadBurstSeconds: 2, MaxReadsInFlight: 2}
	var b readBudget
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	admit := func(user string, at time.Time, longPoll bool) *readRefusal {
		t.Helper()
		return b.admit(user, lim, at, longPoll)
	}
	// A full bucket lets a read in; a read that takes 1.5 s leaves 0.5 s.
	if no := admit("ann", t0, false); no != nil {
		t.Fatalf("first read: %s", no.message)
	}
	b.pay("ann", lim, t0, 1500*time.Millisecond, false)
	// 0.5 s is enough to let the next one in, which overdraws the bucket by 1 s.
	if no := admit("ann", t0, false); no != nil {
		t.Fatalf("second read, with 0.5 s left: %s", no.message)
	}
	b.pay("ann", lim, t0, 1500*time.Millisecond, false)
	no := admit("ann", t0, false)
	if no == nil {
		t.Fatal("a read on an overdrawn bucket was let in")
	}
	// 1 s overdrawn, and 1 ms more to hold time again, at 0.5 s a second: 2.002 s, so 3.
	if no.wait != 3*time.Second || !strings.Contains(no.message, "limits.read_seconds_per_second") || !strings.Contains(no.message, "ann") {
		t.Fatalf("refusal: %v %q", no.wait, no.message)
	}
	// Another user has a bucket of their own.
	if no := admit("bob", t0, false); no != nil {
		t.Fatalf("bob: %s", no.message)
	}
	b.pay("bob", lim, t0, 0, false)
	// Two seconds on, ann's bucket is back at 0: still nothing; a third second gives 0.5.
	if admit("ann", t0.Add(2*time.Second), false) == nil {
		t.Fatal("let in at exactly 0 s left")
	}
	if no := admit("ann", t0.Add(3*time.Second), false); no != nil {
		t.Fatalf("after Retry-After: %s", no.message)
	}
	b.pay("ann", lim, t0.Add(3*time.Second), 0, false) // nothing taken still pays 1 ms
	if got := b.users["ann"].secs; !near(got, 0.499, 1e-9) {
		t.Errorf("after a read that took nothing: %g s left; want 0.499", got)
	}
	// A long wait fills the bucket only up to the burst.
	later := t0.Add(time.Hour)
	b.bucket("ann", lim, later)
	if got := b.users["ann"].secs; got != lim.ReadBurstSeconds {
		t.Errorf("after an hour: %g s; want the burst, 2", got)
	}
	// One stalled read overdraws by a burst at most.
	if no := admit("ann", later, false); no != nil {
		t.Fatal(no.message)
	}
	b.pay("ann", lim, later, time.Hour, false)
	if got := b.users["ann"].secs; got != -lim.ReadBurstSeconds {
		t.Errorf("after a read of an hour: %g s; want -2", got)
	}

	// In flight: two reads at once, a third is refused until one ends; long polls
	// neither wait for a place nor take one.
	later = later.Add(time.Hour)
	for i := range 2 {
		if no := admit("cy", later, false); no != nil {
			t.Fatalf("read %d in flight: %s", i, no.message)
		}
	}
	if no := admit("cy", later, false); no == nil || no.wait != time.Second || !strings.Contains(no.message, "limits.max_reads_in_flight") {
		t.Fatalf("a third read in flight: %+v", no)
	}
	if no := admit("cy", later, true); no != nil {
		t.Fatalf("a long poll with two reads in flight: %s", no.message)
	}
	b.pay("cy", lim, later, time.Minute, true)
	if got := b.users["cy"]; got.inFlight != 2 || !near(got.secs, 1.999, 1e-9) {
		t.Errorf("after a long poll of a minute: %d in flight, %g s; want 2 and 1.999", got.inFlight, got.secs)
	}
	b.pay("cy", lim, later, 0, false)
	if no := admit("cy", later, false); no != nil {
		t.Fatalf("after one read ended: %s", no.message)
	}

	// New limits start every bucket afresh; a read let in before pays without going
	// below no reads in flight.
	lim2 := lim
	lim2.ReadBurstSeconds = 5
	b.pay("cy", lim2, later, 0, false)
	b.pay("cy", lim2, later, 0, false)
	if got := b.users["cy"]; got.inFlight != 0 || !near(got.secs, 4.998, 1e-9) {
		t.Errorf("after new limits: %d in flight, %g s", got.inFlight, got.secs)
	}
	// A rate set near zero asks for a day at most.
	tiny := api.Limits{ReadSecondsPerSecond: 1e-300, ReadBurstSeconds: 1e-3, MaxReadsInFlight: 1}
	var c readBudget
	c.admit("dee", tiny, t0, false)
	c.pay("dee", tiny, t0, time.Second, false)
	if no := c.admit("dee", tiny, t0, false); no == nil || no.wait != 24*time.Hour {
		t.Errorf("refusal at a rate near zero: %+v", no)
	}
}

// Over HTTP: a member's reads past the budget are put off with 429 and Retry-After, while
// other users and admins read on, and let in again once Retry-After has passed. The
// limits are set through the configuration, as an admin would, and bad ones are refused.
func TestReadBudget(t *testing.T) {
	h := newHarness(t)
	// 1 ms a second, 3.5 ms at once: each read pays at least 1 ms, so at most four reads
	// are let in while the fake clock stands still.
	if code, e := h.putConfig("limits:\n  read_seconds_per_second: 0.001\n  read_burst_seconds: 0.0035\n"); code != 200 {
		t.Fatalf("set limits: %d %s", code, e.Message)
	}
	mia := h.addUser("mia", "member")
	ned := h.addUser("ned", "viewer")
	read := func(token, path string) (int, http.Header, api.Error) { return h.bodiless(token, "GET", path) }
	let := 0
	var retry int
	for ; ; let++ {
		code, hdr, e := read(mia, "/api/v1/jobs")
		if code == 200 {
			if let == 4 {
				t.Fatal("a fifth read let in on a budget of 3.5 ms")
			}
			continue
		}
		if code != 429 || e.Code != api.CodeRateLimited || !strings.Contains(e.Message, "limits.read_seconds_per_second") {
			t.Fatalf("read %d past the budget: %d %+v", let, code, e)
		}
		var err error
		if retry, err = strconv.Atoi(hdr.Get("Retry-After")); err != nil || retry < 1 || retry > 5 {
			t.Fatalf("Retry-After %q; want 1 to 5 s at 1 ms a second", hdr.Get("Retry-After"))
		}
		break
	}
	if let == 0 {
		t.Fatal("no read let in on a full budget")
	}
	// Every read route is bounded, not the job list alone: a scrape of /metrics, the
	// costliest read there is, too.
	for _, path := range []string{"/api/v1/nodes", "/api/v1/top", "/api/v1/whoami", "/api/v1/status", "/metrics"} {
		if code, _, _ := read(mia, path); code != 429 {
			t.Errorf("GET %s on a spent budget: %d; want 429", path, code)
		}
	}
	// Others read on: a viewer on a budget of their own, and an admin on none.
	if code, _, e := read(ned, "/api/v1/jobs"); code != 200 {
		t.Errorf("another user's read: %d %s", code, e.Message)
	}
	for i := range 20 {
		if code := h.do("GET", "/api/v1/jobs", nil, nil); code != 200 {
			t.Fatalf("admin read %d: %d", i, code)
		}
	}
	if code, _, e := h.bodiless(h.token, "GET", "/metrics"); code != 200 {
		t.Errorf("an admin's scrape: %d %s", code, e.Message)
	}
	// Writes are not reads: the member still submits.
	if code := h.doAs(mia, "POST", "/api/v1/jobs", api.JobSpec{Command: []string{"x"}}, nil); code != 201 {
		t.Errorf("a submit on a spent read budget: %d", code)
	}
	h.clock.Add(time.Duration(retry) * time.Second)
	if code, _, e := read(mia, "/api/v1/jobs"); code != 200 {
		t.Errorf("after Retry-After: %d %s", code, e.Message)
	}

	h.refusesLimits(map[string]string{
		"read_seconds_per_second: -1":   "limits.read_seconds_per_second",
		"read_seconds_per_second: .nan": "limits.read_seconds_per_second",
		"read_seconds_per_second: 1001": "limits.read_seconds_per_second",
		"read_burst_seconds: -0.5":      "limits.read_burst_seconds",
		"read_burst_seconds: .inf":      "limits.read_burst_seconds",
		"max_reads_in_flight: -1":       "limits.max_reads_in_flight",
		"max_reads_in_flight: 100001":   "limits.max_reads_in_flight",
		"submits_per_second: .nan":      "limits.submits_per_second",
	})
}

// bodiless makes a request without a body with a token, and returns the status, the
// headers and the error body, if any.
func (h *harness) bodiless(token, method, path string) (int, http.Header, api.Error) {
	h.t.Helper()
	req, _ := http.NewRequest(method, h.http.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	var e api.Error
	if resp.StatusCode/100 != 2 {
		json.NewDecoder(resp.Body).Decode(&e)
	}
	return resp.StatusCode, resp.Header, e
}

// refusesLimits checks that each limits setting (YAML) is refused with 400, naming the
// field it maps to.
func (h *harness) refusesLimits(bad map[string]string) {
	h.t.Helper()
	for yaml, field := range bad {
		if code, e := h.putConfig("limits:\n  " + yaml + "\n"); code != 400 || e.Field != field {
			h.t.Errorf("limits %s: %d field %q; want 400 naming %s", yaml, code, e.Field, field)
		}
	}
}

// A member's reads running at once are bounded: with one in flight, the next is put off
// with Retry-After 1, while a long poll of the same member's logs is not, and other users
// read on. Once the read ends, the member reads again.
func TestReadsInFlight(t *testing.T) {
	h := newHarness(t)
	if code, e := h.putConfig("limits:\n  max_reads_in_flight: 1\n"); code != 200 {
		t.Fatalf("set limits: %d %s", code, e.Message)
	}
	mia := h.addUser("mia", "member")
	ned := h.addUser("ned", "viewer")
	var arr api.Job
	if code := h.doAs(mia, "POST", "/api/v1/jobs", api.JobSpec{Command: []string{"x"}, Array: "0-1"}, &arr); code != 201 {
		t.Fatalf("submit an array: %d", code)
	}
	in, out := make(chan struct{}), make(chan struct{})
	var once sync.Once // only the first read waits: the reads that follow must pass
	h.srv.betweenReads = func() { once.Do(func() { close(in); <-out }) }
	first := make(chan int)
	go func() { first <- h.doAs(mia, "GET", fmt.Sprintf("/api/v1/arrays/%d", arr.ArrayID), nil, nil) }()
	<-in
	var e api.Error
	code := h.doAs(mia, "GET", "/api/v1/jobs", nil, &e)
	if code != 429 || !strings.Contains(e.Message, "limits.max_reads_in_flight") {
		t.Errorf("a second read in flight: %d %+v", code, e)
	}
	if code := h.doAs(mia, "GET", fmt.Sprintf("/api/v1/jobs/%d/logs", arr.ID), nil, &e); code == 429 {
		t.Errorf("a read of logs with one read in flight: %d %s", code, e.Message)
	}
	if code := h.doAs(ned, "GET", "/api/v1/jobs", nil, nil); code != 200 {
		t.Errorf("another user's read: %d", code)
	}
	close(out)
	if code := <-first; code != 200 {
		t.Errorf("the held read: %d", code)
	}
	if code := h.doAs(mia, "GET", "/api/v1/jobs", nil, nil); code != 200 {
		t.Errorf("a read after the held one ended: %d", code)
	}
}

// What the budget adds to each of a user's reads: admit and pay, from every core at once,
// for one user and for a thousand.
func BenchmarkReadBudget(b *testing.B) {
	lim := api.DefaultLimits()
	lim.ReadSecondsPerSecond, lim.ReadBurstSeconds = 1000, 86400 // never put off: the cost of the books alone
	for _, users := range []int{1, 1000} {
		b.Run(fmt.Sprintf("users=%d", users), func(b *testing.B) {
			var rb readBudget
			names := make([]string, users)
			for i := range names {
				names[i] = fmt.Sprintf("user%d", i)
			}
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(1))
				for pb.Next() {
					user := names[i%users]
					now := time.Now()
					if no := rb.admit(user, lim, now, false); no == nil {
						rb.pay(user, lim, now, 0, false)
					}
					i++
				}
			})
		})
	}
}

// A member's changes other than submits are rate-limited per user: past the burst a hold
// is refused with 429 and Retry-After, and nothing changes; the user's submits, reads and
// another user's changes go on, an admin's are not limited, and after Retry-After the
// member's change is made.
func TestWriteLimit(t *testing.T) {
	h := newHarness(t)
	if code, e := h.putConfig("limits:\n  writes_per_second: 1\n  write_burst: 2\n"); code != 200 {
		t.Fatalf("set limits: %d %s", code, e.Message)
	}
	mia := h.addUser("mia", "member")
	ned := h.addUser("ned", "member")
	var j api.Job
	if code := h.doAs(mia, "POST", "/api/v1/jobs", api.JobSpec{Command: []string{"x"}}, &j); code != 201 {
		t.Fatalf("submit: %d", code)
	}
	act := func(token, verb string) (int, http.Header, api.Error) {
		return h.bodiless(token, "POST", fmt.Sprintf("/api/v1/jobs/%d/%s", j.ID, verb))
	}
	for _, verb := range []string{"hold", "release"} {
		if code, _, e := act(mia, verb); code != 200 {
			t.Fatalf("%s within the burst: %d %s", verb, code, e.Message)
		}
	}
	code, hdr, e := act(mia, "hold")
	if code != 429 || hdr.Get("Retry-After") != "1" || e.Code != api.CodeRateLimited || !strings.Contains(e.Message, "limits.writes_per_second") {
		t.Fatalf("a third change: %d Retry-After %q %+v; want 429, 1 and the limit named", code, hdr.Get("Retry-After"), e)
	}
	if d := h.job(j.ID); d.UserHold {
		t.Errorf("the refused hold held the job")
	}
	// Her submits have a limit of their own, and her reads a budget.
	if code := h.doAs(mia, "POST", "/api/v1/jobs", api.JobSpec{Command: []string{"x"}}, nil); code != 201 {
		t.Errorf("a submit past the change limit: %d", code)
	}
	if code := h.doAs(mia, "GET", fmt.Sprintf("/api/v1/jobs/%d", j.ID), nil, nil); code != 200 {
		t.Errorf("a read past the change limit: %d", code)
	}
	// Another member's changes, and an admin's, go on.
	if code := h.doAs(ned, "POST", "/api/v1/ui/links", nil, nil); code != 201 {
		t.Errorf("another member's change: %d", code)
	}
	for i, verb := range []string{"hold", "release", "hold", "release"} {
		if code, _, e := act(h.token, verb); code != 200 {
			t.Errorf("admin's change %d: %d %s", i, code, e.Message)
		}
	}
	h.clock.Add(time.Second)
	if code, _, e := act(mia, "hold"); code != 200 {
		t.Errorf("a change after Retry-After: %d %s", code, e.Message)
	}
	h.refusesLimits(map[string]string{
		"writes_per_second: -1":   "limits.writes_per_second",
		"writes_per_second: .nan": "limits.writes_per_second",
		"write_burst: -1":         "limits.write_burst",
		"write_burst: 10000001":   "limits.write_burst",
	})
}
