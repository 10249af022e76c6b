package sim

import (
	"context"
	"os"
	"testing"
)

// phillyPath is the full Philly trace of the shared traces, where this checkout has them.
const phillyPath = "../../../shared/traces/philly/philly.csv"

func loadPhilly(tb testing.TB) *Workload {
	tb.Helper()
	if _, err := os.Stat(phillyPath); err != nil {
		tb.Skipf("no Philly trace at %s", phillyPath)
	}
	tr, err := LoadTrace(phillyPath, "philly", false)
	if err != nil {
		tb.Fatal(err)
	}
	w, err := Prepare(tr, PhillyCluster(), false)
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

// BenchmarkSimPhilly replays the whole Philly trace (82,247 jobs) under FIFO on one core
// and reports simulator events per second.
func BenchmarkSimPhilly(b *testing.B) {
	w := loadPhilly(b)
	events := 0
	for b.Loop() {
		res, err := Run(context.Background(), w, DefaultConfig(), []string{"fifo"})
		if err != nil {
			b.Fatal(err)
		}
		events += res[0].Events
		b.ReportMetric(float64(res[0].Plans), "plans/op")
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}
