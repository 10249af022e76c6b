package server

import (
	"context"
	"testing"
	"time"
)

// BenchmarkCycle10k is BenchmarkCycle at the scale suite's size: 10,000 full nodes of 8
// GPUs, running 80,000 jobs, with 69,000 waiting and no time limits. It reports how long
// of a cycle the server's lock is held before and after planning.
func BenchmarkCycle10k(b *testing.B) {
	env := benchServer(b)
	benchFill(b, env, 10000, 8, 69_000)
	var start, planned time.Time
	var before, after time.Duration
	env.srv.planning = func() { before += time.Since(start) }
	env.srv.planned = func() { planned = time.Now() }
	b.ResetTimer()
	for range b.N {
		start = time.Now()
		if err := env.srv.Cycle(context.Background()); err != nil {
			b.Fatal(err)
		}
		after += time.Since(planned)
	}
	b.ReportMetric(float64(before.Microseconds())/1000/float64(b.N), "locked-before-ms/op")
	b.ReportMetric(float64(after.Microseconds())/1000/float64(b.N), "locked-after-ms/op")
}
