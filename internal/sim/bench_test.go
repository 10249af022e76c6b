package sim

import (
	"bytes"
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

// contendedRows is the length of the contended Philly extract: the first rows of the trace
// file, as `head -n 3001` (with the header) cuts them.
const contendedRows = 3000

// loadPhillyExtract loads the first rows of the shared Philly trace on the small cluster of
// testdata/philly_contended.yaml, where hundreds of jobs wait at once; with contendedRows
// rows it is the contended Philly extract.
func loadPhillyExtract(tb testing.TB, rows int) *Workload {
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
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	lines := bytes.SplitAfterN(data, []byte("\n"), rows+2)
	tr, err := ReadTrace(bytes.NewReader(bytes.Join(lines[:min(rows+1, len(lines))], nil)), "philly", false)
	if err != nil {
		tb.Fatal(err)
	}
	c, err := LoadCluster("testdata/philly_contended.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	w, err := Prepare(tr, c, false)
	if err != nil {
		tb.Fatal(err)
	}
	return w
}

// BenchmarkSimPhillyContended replays the contended Philly extract under each default
// policy (one sub-benchmark each; run with GOMAXPROCS=1 for one core) and reports the
// simulator's events per second: the case where backfill dominates.
func BenchmarkSimPhillyContended(b *testing.B) {
	w := loadPhillyExtract(b, contendedRows)
	for _, policy := range DefaultPolicies {
		b.Run(policy, func(b *testing.B) {
			events := 0
			for b.Loop() {
				res, err := Run(context.Background(), w, DefaultConfig(), []string{policy})
				if err != nil {
					b.Fatal(err)
				}
				events += res[0].Events
				b.ReportMetric(float64(res[0].Plans), "plans/op")
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
