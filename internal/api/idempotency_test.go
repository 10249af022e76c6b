package api

import (
	"regexp"
	"testing"
	"time"
)

func TestNewIdempotencyKey(t *testing.T) {
	// What the server accepts (internal/server: idempotencyKeyRE).
	valid := regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)
	at := time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)
	seen := map[string]bool{}
	prev := ""
	for i := range 10_000 {
		// Ten keys in each millisecond: unique within one, ordered across them.
		now := at.Add(time.Duration(i/10) * time.Millisecond)
		k := NewIdempotencyKey(now)
		if len(k) != 32 || !valid.MatchString(k) {
			t.Fatalf("key %q: want 32 hex digits", k)
		}
		if seen[k] {
			t.Fatalf("key %q made twice", k)
		}
		seen[k] = true
		if i%10 == 0 && k <= prev {
			t.Fatalf("key %q made at %v sorts before %q, made a millisecond before", k, now, prev)
		}
		if i%10 == 9 {
			prev = k
		}
	}
	// The time is in the first 12 digits: 2026-12-02T15:00:00Z is 1,796,223,600,000 ms.
	if k := NewIdempotencyKey(at); k[:12] != "01a237450580" {
		t.Errorf("key %q made at %v: want it to start with the milliseconds 01a237450580", k, at)
	}
}
