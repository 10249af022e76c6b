package agent

import (
	"log/slog"
	"testing"
	"time"
)

// The wait between heartbeats is the interval give or take a tenth, spread over all of
// that range, so that agents whose beats fell together drift apart.
func TestHeartbeatWaitIsJittered(t *testing.T) {
	const d = 2 * time.Second
	lo, hi := d, time.Duration(0)
	for range 2000 {
		w := jittered(d)
		if w < d-d/10 || w > d+d/10 {
			t.Fatalf("wait %v for an interval of %v; want within a tenth of it", w, d)
		}
		lo, hi = min(lo, w), max(hi, w)
	}
	// Uniform over ±200 ms: 2,000 draws leave none of either end's 20 ms empty but by
	// a chance of 0.99^2000, about 2e-9.
	if lo > d-d/10+20*time.Millisecond || hi < d+d/10-20*time.Millisecond {
		t.Fatalf("waits from %v to %v; want them spread over %v to %v", lo, hi, d-d/10, d+d/10)
	}
}

func TestKeepPhase(t *testing.T) {
	const d = 2 * time.Second
	for _, c := range []struct{ elapsed, want time.Duration }{
		{0, d},
		{300 * time.Millisecond, 1700 * time.Millisecond},
		{d, d},
		{2500 * time.Millisecond, 1500 * time.Millisecond},
		{9 * time.Second, time.Second},
		// Due 100 ms from now, but that is less than half a wait after the answer.
		{3900 * time.Millisecond, 2100 * time.Millisecond},
	} {
		if got := keepPhase(d, c.elapsed); got != c.want {
			t.Errorf("keepPhase(%v, %v) = %v; want %v", d, c.elapsed, got, c.want)
		}
	}
	if got := keepPhase(0, time.Second); got != 0 {
		t.Errorf("keepPhase(0, 1s) = %v; want 0", got)
	}
}

// An answer that comes late does not move the agent's place in the interval: the next
// heartbeat goes when it is due counted from the late one's send, not a whole interval
// after the answer. Else a server that stalled, then answered every agent at once, would
// have its fleet beat together from then on.
func TestHeartbeatsKeepTheirPlaceAfterALateAnswer(t *testing.T) {
	const interval = time.Second
	s := newFakeServer(t)
	s.interval = interval
	startAgent(t, s, slog.New(slog.DiscardHandler), func(a *Agent) { a.jitter = func(d time.Duration) time.Duration { return d } })
	eventually(t, 10*time.Second, "three heartbeats", func() bool { return s.beatCount() >= 3 })
	s.mu.Lock()
	late := len(s.beatAt)
	// Answered 1.45 intervals after it came: due again 2 intervals after it was sent,
	// where counting from the answer would send it 2.45 intervals after. A busy machine
	// only makes the gap longer, so the bound above leaves it 0.3 intervals.
	s.slow = 145 * interval / 100
	s.mu.Unlock()
	eventually(t, 10*time.Second, "the heartbeat after the late answer", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.beatAt) >= late+2
	})
	s.mu.Lock()
	gap := s.beatAt[late+1].Sub(s.beatAt[late])
	s.mu.Unlock()
	if gap < 145*interval/100 || gap > 23*interval/10 {
		t.Fatalf("the heartbeat after an answer 1.45 intervals late came %v after the late one; want about 2 intervals (%v), not 2.45", gap, 2*interval)
	}
}
