package bench

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// B is what a benchmark function is given: go test's *testing.B, reduced to what the
// suites use. rota's binary must not link package testing, so bench runs its own loop.
type B struct {
	// N is how many operations this run must do, for a benchmark that counts them itself
	// instead of calling Loop.
	N int

	loopI    int // Loop calls so far
	timing   bool
	start    time.Time
	elapsed  time.Duration
	mallocs  uint64 // at start, then the run's total
	bytes    uint64
	extra    map[string]float64
	memStats runtime.MemStats
}

// Loop reports whether to do one more operation, N in all. The first call starts the
// clock, so setup before the loop is not measured, and the last one stops it.
func (b *B) Loop() bool {
	if b.loopI == 0 {
		b.resetTimer()
	}
	if b.loopI < b.N {
		b.loopI++
		return true
	}
	b.stopTimer()
	return false
}

// Elapsed is the measured time of the run so far.
func (b *B) Elapsed() time.Duration {
	if b.timing {
		return b.elapsed + time.Since(b.start)
	}
	return b.elapsed
}

// ReportMetric records a figure of the run under unit, as testing.B's does.
func (b *B) ReportMetric(v float64, unit string) { b.extra[unit] = v }

func (b *B) resetTimer() {
	b.elapsed, b.mallocs, b.bytes = 0, 0, 0
	b.timing = false
	b.startTimer()
}

func (b *B) startTimer() {
	if b.timing {
		return
	}
	runtime.ReadMemStats(&b.memStats)
	b.mallocs -= b.memStats.Mallocs
	b.bytes -= b.memStats.TotalAlloc
	b.start = time.Now()
	b.timing = true
}

func (b *B) stopTimer() {
	if !b.timing {
		return
	}
	b.elapsed += time.Since(b.start)
	runtime.ReadMemStats(&b.memStats)
	b.mallocs += b.memStats.Mallocs
	b.bytes += b.memStats.TotalAlloc
	b.timing = false
}

// runResult is one benchmark's measured run.
type runResult struct {
	N             int
	T             time.Duration
	allocs, bytes uint64
	extra         map[string]float64
}

// parseBenchtime reads a duration ("2s") or a fixed count ("50x").
func parseBenchtime(s string) (d time.Duration, n int, err error) {
	if c, ok := strings.CutSuffix(s, "x"); ok {
		n, err := strconv.Atoi(c)
		if err != nil || n <= 0 {
			return 0, 0, fmt.Errorf("benchtime %q: a count must be a positive whole number, as in 100x", s)
		}
		return 0, n, nil
	}
	d, err = time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, 0, fmt.Errorf("benchtime %q: want a positive duration such as 2s, or a count such as 100x", s)
	}
	return d, 0, nil
}

// measure runs f as go test -bench would: with N fixed for "Nx", else with N grown from 1
// until one run takes benchtime. It returns the last run. f returns an error instead of
// failing a test.
func measure(benchtime string, f func(b *B) error) (runResult, error) {
	d, count, err := parseBenchtime(benchtime)
	if err != nil {
		return runResult{}, err
	}
	run := func(n int) (*B, error) {
		runtime.GC()
		b := &B{N: n, extra: map[string]float64{}}
		b.startTimer()
		err := f(b)
		b.stopTimer()
		return b, err
	}
	var b *B
	if count > 0 {
		b, err = run(count)
	} else {
		// testing's ramp: predict the N that fills benchtime from the last run, with 20%
		// to spare, at most 100 times the last N and at least one more.
		for n := 1; ; {
			if b, err = run(n); err != nil || b.elapsed >= d || n >= 1e9 {
				break
			}
			last := n
			if ns := b.elapsed.Nanoseconds(); ns > 0 {
				n = int(d.Nanoseconds() * int64(last) / ns)
			} else {
				n = 100 * last
			}
			n = min(max(n+n/5, last+1), 100*last, 1e9)
		}
	}
	if err != nil {
		return runResult{}, err
	}
	if b.N == 0 {
		return runResult{}, errors.New("the benchmark ran no operations")
	}
	return runResult{N: b.N, T: b.elapsed, allocs: b.mallocs, bytes: b.bytes, extra: b.extra}, nil
}
