package sim

import (
	"context"
	"os"
	"testing"
)

// sharedTraces are where the shared public traces may be: in the checkout, or beside it.
var sharedTraces = []string{"../../shared/traces", "../../../shared/traces"}

func loadPhilly(tb testing.TB) *Workload {
	tb.Helper()
	path := ""
	for _, dir := range sharedTraces {
		if _, err := os.Stat(dir + "/philly/philly.csv"); err == nil {
			path = dir + "/philly/philly.csv"
			break
		}
	}
	if path == "" {
		tb.Skip("no shared Philly trace")
	}
	tr, err := LoadTrace(path, "philly", false)
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
