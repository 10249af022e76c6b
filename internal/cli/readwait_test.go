package cli

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// budgetServer answers every request 429 with Retry-After 0, as a server does past a
// user's read budget, until refusals have been given; then each read as an empty list.
func budgetServer(t *testing.T, refusals int64) (url string, calls *atomic.Int64) {
	calls = new(atomic.Int64)
	url = newHTTPServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= refusals {
			w.Header().Set("Retry-After", "0")
			writeTestJSON(w, http.StatusTooManyRequests, api.Error{Code: api.CodeRateLimited,
				Message: "mia's reads have used the server time they may; try again in 1 s"})
			return
		}
		writeTestJSON(w, http.StatusOK, api.QueueList{Queues: []api.Queue{}})
	}))
	return url, calls
}

// A read or a change the server puts off is asked again, and the CLI says why it waits;
// a submit is not asked again; and after putOffFor the refusal is the answer.
func TestClientAsksAgainForReadsPutOff(t *testing.T) {
	url, calls := budgetServer(t, 2)
	code, stdout, stderr := run(t, url, "admin", "queue", "list")
	if code != 0 || calls.Load() != 3 {
		t.Fatalf("rota admin queue list past two refusals: exit %d after %d calls\n%s%s", code, calls.Load(), stdout, stderr)
	}
	if n := strings.Count(stderr, "rota: mia's reads have used the server time they may; try again in 1 s (asking again in 1 s)\n"); n != 2 {
		t.Errorf("stderr says %d times why it waits; want 2:\n%s", n, stderr)
	}
	// -o json keeps stderr for the one JSON error, and waits in silence.
	url, calls = budgetServer(t, 1)
	if code, _, stderr := run(t, url, "admin", "queue", "list", "-o", "json"); code != 0 || calls.Load() != 2 || stderr != "" {
		t.Errorf("-o json: exit %d after %d calls, stderr %q", code, calls.Load(), stderr)
	}

	// A change put off is asked again too: nothing was done.
	url, calls = budgetServer(t, 2)
	if code, _, stderr := run(t, url, "admin", "queue", "delete", "q"); code != 0 || calls.Load() != 3 || !strings.Contains(stderr, "asking again") {
		t.Errorf("rota admin queue delete past two refusals: exit %d after %d calls\n%s", code, calls.Load(), stderr)
	}
	// A submit put off is the caller's to decide on: one call, and the refusal.
	url, calls = budgetServer(t, 1)
	c, err := NewClient(Endpoint{Server: url, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	var apiErr *APIError
	if _, err := c.Submit(context.Background(), api.JobSpec{Command: []string{"x"}}); !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || calls.Load() != 1 {
		t.Errorf("a submit put off: %v after %d calls; want the 429 after one", err, calls.Load())
	}

	defer func(d time.Duration) { putOffFor = d }(putOffFor)
	putOffFor = 600 * time.Millisecond
	url, calls = budgetServer(t, 1000)
	c, _ = NewClient(Endpoint{Server: url, Token: "t"})
	waits := 0
	c.Waiting = func(time.Duration, string) { waits++ }
	if _, err := c.Queues(context.Background()); !errors.As(err, &apiErr) || apiErr.StatusCode != 429 {
		t.Fatalf("reads put off for longer than putOffFor: %v", err)
	}
	if n := calls.Load(); n < 2 || n > 4 || waits != int(n)-1 {
		t.Errorf("%d calls and %d waits in %v at 250 ms each; want 2 to 4, and a wait between each", n, waits, putOffFor)
	}
	// A caller that gives up stops the waiting.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	putOffFor = time.Minute
	if _, err := c.Queues(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a read put off past its context: %v", err)
	}
}
