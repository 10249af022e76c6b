package agent

import (
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
