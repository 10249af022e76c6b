package bench

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A fixed count runs exactly that many operations, once.
func TestMeasureCount(t *testing.T) {
	calls, ops := 0, 0
	r, err := measure("7x", func(b *B) error {
		calls++
		for b.Loop() {
			ops++
		}
		b.ReportMetric(42, "answers")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 || ops != 7 || r.N != 7 {
		t.Fatalf("calls=%d ops=%d N=%d, want 1, 7, 7", calls, ops, r.N)
	}
	if got := toResult("s", "n", r).Metrics["answers"]; got != 42 {
		t.Fatalf("metric = %v, want 42", got)
	}
}

// A duration grows N until one run fills it, and the time reported covers only the loop:
// setup before the first Loop is not measured.
func TestMeasureDuration(t *testing.T) {
	const per = 100 * time.Microsecond
	var (
		runs []int
		loop time.Duration // the last run's loop, by the test's own clock
	)
	r, err := measure("20ms", func(b *B) error {
		time.Sleep(30 * time.Millisecond) // setup longer than the benchtime itself
		runs = append(runs, b.N)
		start := time.Now()
		for b.Loop() {
			time.Sleep(per)
		}
		loop = time.Since(start)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) < 2 || runs[0] != 1 {
		t.Fatalf("runs %v: want a ramp starting at N=1", runs)
	}
	if r.N != runs[len(runs)-1] || r.T < 20*time.Millisecond {
		t.Fatalf("N=%d T=%v after runs %v: the last run must fill the 20ms", r.N, r.T, runs)
	}
	if r.T > loop {
		t.Fatalf("T=%v, more than the loop's %v: the setup was measured", r.T, loop)
	}
	res := toResult("s", "n", r)
	if res.NsPerOp < float64(per.Nanoseconds()) {
		t.Fatalf("ns/op = %v, below the %v each operation sleeps", res.NsPerOp, per)
	}
}

// A benchmark that counts b.N itself is timed from its start, and allocations are counted.
func TestMeasureCountsAllocations(t *testing.T) {
	var keep [][]byte
	r, err := measure("50x", func(b *B) error {
		for range b.N {
			keep = append(keep, make([]byte, 4096))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	res := toResult("s", "n", r)
	if res.N != 50 || res.AllocsPerOp < 1 || res.BytesPerOp < 4096 {
		t.Fatalf("N=%d allocs/op=%d bytes/op=%d: want 50 ops of at least one 4 KiB allocation", res.N, res.AllocsPerOp, res.BytesPerOp)
	}
	_ = keep
}

func TestMeasureErrors(t *testing.T) {
	boom := errors.New("boom")
	if _, err := measure("5x", func(*B) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the benchmark's own", err)
	}
	for _, bt := range []string{"", "0x", "-3x", "ax", "0s", "-1s", "soon"} {
		_, err := measure(bt, func(b *B) error {
			t.Fatalf("benchtime %q ran the benchmark", bt)
			return nil
		})
		if err == nil || !strings.Contains(err.Error(), "benchtime") {
			t.Errorf("benchtime %q: err = %v, want one naming benchtime", bt, err)
		}
	}
}
