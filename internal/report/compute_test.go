package report

import (
	"errors"
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

func compute(t *testing.T, in Input, by string, q Query) api.UsageReport {
	t.Helper()
	q.By = by
	rep, err := Compute(in, q)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func rowOf(t *testing.T, rep api.UsageReport, key string) api.UsageRow {
	t.Helper()
	for _, r := range rep.Rows {
		if r.Key == key {
			return r
		}
	}
	t.Fatalf("no row %q in the %s report", key, rep.By)
	return api.UsageRow{}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func fp(v float64) *float64 { return &v }

// checkRow compares every figure of a row with what the test worked out by hand.
func checkRow(t *testing.T, got, want api.UsageRow) {
	t.Helper()
	same := got.Key == want.Key && got.Jobs == want.Jobs && got.Attempts == want.Attempts &&
		near(got.GPUHours, want.GPUHours) && near(got.EffectiveGPUHours, want.EffectiveGPUHours) &&
		near(got.MeasuredGPUHours, want.MeasuredGPUHours) && sameOpt(got.UtilizationPct, want.UtilizationPct) &&
		near(got.IdleGPUHours, want.IdleGPUHours) && got.Succeeded == want.Succeeded && got.Failed == want.Failed &&
		sameOpt(got.SuccessRate, want.SuccessRate) && maps.Equal(got.Failures, want.Failures) &&
		got.Assigned == want.Assigned && near(got.WaitP50Seconds, want.WaitP50Seconds) && near(got.WaitP95Seconds, want.WaitP95Seconds) &&
		got.Preemptions == want.Preemptions && near(got.PreemptionWasteGPUHours, want.PreemptionWasteGPUHours) &&
		near(got.CapacityGPUHours, want.CapacityGPUHours) && near(got.IdleCapacityGPUHours, want.IdleCapacityGPUHours) &&
		sameOpt(got.Cost, want.Cost)
	if !same {
		t.Errorf("row %s:\n got %+v (util %v, success %v, cost %v)\nwant %+v (util %v, success %v, cost %v)", want.Key,
			got, deref(got.UtilizationPct), deref(got.SuccessRate), deref(got.Cost),
			want, deref(want.UtilizationPct), deref(want.SuccessRate), deref(want.Cost))
	}
}

func sameOpt(a, b *float64) bool {
	return (a == nil) == (b == nil) && (a == nil || math.Abs(*a-*b) < 1e-5)
}

func deref(v *float64) any {
	if v == nil {
		return nil
	}
	return *v
}

func TestAccountPerAttempt(t *testing.T) {
	recs := Account(scenario())
	if len(recs) != 8 {
		t.Fatalf("%d records; want one per attempt, 8", len(recs))
	}
	by := map[[2]int64]AttemptUsage{}
	for _, r := range recs {
		by[[2]int64{r.JobID, int64(r.N)}] = r
	}
	j1, j2, j3 := by[[2]int64{1, 1}], by[[2]int64{2, 1}], by[[2]int64{3, 1}]
	j41, j42, j5, j7 := by[[2]int64{4, 1}], by[[2]int64{4, 2}], by[[2]int64{5, 1}], by[[2]int64{7, 1}]
	checks := []struct {
		name      string
		got, want any
	}{
		// Job 1: 2 H100s for 2h at 80%: 4 GPU-hours, 3.2 effective; waited 30m.
		{"job 1 allocated", j1.AllocatedGPUSeconds, 4 * 3600.0},
		{"job 1 effective", j1.EffectiveGPUSeconds, 3.2 * 3600},
		{"job 1 wait", j1.WaitSeconds, 1800.0},
		{"job 1 run", j1.RunSeconds, 7200.0},
		{"job 1 category", j1.Category, ""},
		{"job 1 model", j1.Ranks[0].Model, "H100"},
		// Job 2 has no telemetry: nothing measured, the exit code its category.
		{"job 2 measured", j2.MeasuredGPUSeconds, 0.0},
		{"job 2 category", j2.Category, api.ReasonExitCode},
		{"job 2 exit code", *j2.ExitCode, 1},
		{"job 3 category", j3.Category, api.ReasonOOM},
		// Attempt 4.1: preempted by the event; it lost 15:00→15:45 on 2 GPUs = 1.5 GPU-h.
		{"attempt 4.1 preempted", j41.Preempted, true},
		{"attempt 4.1 category", j41.Category, api.ReasonPreempted},
		{"attempt 4.1 checkpoint", *j41.LastCheckpoint, oct31(15, 0)},
		{"attempt 4.1 waste", j41.WasteGPUSeconds, 1.5 * 3600},
		// Attempt 4.2 waited from 4.1's end (15:45) to 16:45.
		{"attempt 4.2 wait", j42.WaitSeconds, 3600.0},
		{"attempt 4.2 preempted", j42.Preempted, false},
		// Job 5: idle from 20:30 to its end at 21:30 on 1 GPU.
		{"job 5 idle", j5.IdleGPUSeconds, 3600.0},
		{"job 5 category", j5.Category, api.ReasonIdle},
		// Job 7 runs: 2 GPUs from 09:00 to now, 12:00.
		{"job 7 running", j7.Running, true},
		{"job 7 allocated", j7.AllocatedGPUSeconds, 6 * 3600.0},
		{"job 7 category", j7.Category, ""},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %v; want %v", c.name, c.got, c.want)
		}
	}
}

// A preempted attempt without any checkpoint loses everything since it started.
func TestWasteWithoutCheckpoint(t *testing.T) {
	in := scenario()
	in.Events = []api.Event{{Kind: api.EventPreempt, JobID: 4, Attempt: 1, Time: oct31(15, 30)}}
	in.Jobs[3].LastCheckpoint = nil
	for _, r := range Account(in) {
		if r.JobID == 4 && r.N == 1 && r.WasteGPUSeconds != 2*1.75*3600 {
			t.Errorf("waste %v GPU-s; want 2 GPUs × 1h45m = %v", r.WasteGPUSeconds, 2*1.75*3600)
		}
	}
}

func TestByTeam(t *testing.T) {
	rep := compute(t, scenario(), api.ByTeam, scenarioWindow)
	if len(rep.Rows) != 2 || rep.Currency != "USD" {
		t.Fatalf("rows %d, currency %q; want nlp and vision in USD", len(rep.Rows), rep.Currency)
	}
	// nlp: jobs 1, 2, 5, 6. Allocated 4 + 1 + 1.5 + 16 = 22.5; measured all but job 2,
	// 21.5; effective 3.2 + 1.5×0.05 + 16×0.6 = 12.875, so 59.88%. Job 5 idled 1h on 1
	// GPU. Ended: 1 and 6 succeeded, 2 (exit_code) and 5 (idle_reclaimed) did not. Waits
	// 0, 600, 1800, 3600: nearest-rank p50 is the 2nd, 600; p95 the 4th, 3600. Cost:
	// H100 (4 + 16) × 4 = 80, A100 (1 + 1.5) × 1.5 = 3.75: 83.75.
	checkRow(t, rowOf(t, rep, "nlp"), api.UsageRow{Key: "nlp", Jobs: 4, Attempts: 4, GPUHours: 22.5, MeasuredGPUHours: 21.5,
		EffectiveGPUHours: 12.875, UtilizationPct: fp(12.875 / 21.5 * 100), IdleGPUHours: 1, Succeeded: 2, Failed: 2,
		SuccessRate: fp(0.5), Failures: map[string]int{api.ReasonExitCode: 1, api.ReasonIdle: 1}, Assigned: 4, WaitP50Seconds: 600,
		WaitP95Seconds: 3600, Cost: fp(83.75)})
	// vision: jobs 3, 4 (two attempts), 7. Allocated 1.5 + 3.5 + 4 + 6 = 15; measured
	// all but the running job 7, 9; effective 0.75 + 3.15 + 2.8 = 6.7. Ended: 4.2
	// succeeded, 3 (oom) and 4.1 (preempted) did not. Waits 0, 0, 3600, 3600. One
	// preemption wasting 1.5 GPU-hours. Cost: A100 7.5 × 1.5 = 11.25, H100 7.5 × 4 = 30.
	checkRow(t, rowOf(t, rep, "vision"), api.UsageRow{Key: "vision", Jobs: 3, Attempts: 4, GPUHours: 15, MeasuredGPUHours: 9,
		EffectiveGPUHours: 6.7, UtilizationPct: fp(6.7 / 9 * 100), Succeeded: 1, Failed: 2, SuccessRate: fp(1.0 / 3),
		Failures: map[string]int{api.ReasonOOM: 1, api.ReasonPreempted: 1}, Assigned: 4, WaitP50Seconds: 0, WaitP95Seconds: 3600,
		Preemptions: 1, PreemptionWasteGPUHours: 1.5, Cost: fp(41.25)})
	// The total: 7 jobs, 8 attempts; waits 0 0 0 600 1800 3600 3600 3600: p50 the 4th,
	// 600. Capacity: 6 GPUs × the 60 hours from 10-31 00:00 to now = 360, of which
	// 360 − 37.5 = 322.5 nobody held.
	checkRow(t, rep.Total, api.UsageRow{Key: "total", Jobs: 7, Attempts: 8, GPUHours: 37.5, MeasuredGPUHours: 30.5,
		EffectiveGPUHours: 19.575, UtilizationPct: fp(19.575 / 30.5 * 100), IdleGPUHours: 1, Succeeded: 3, Failed: 4,
		SuccessRate: fp(3.0 / 7), Failures: map[string]int{api.ReasonExitCode: 1, api.ReasonIdle: 1, api.ReasonOOM: 1, api.ReasonPreempted: 1},
		Assigned: 8, WaitP50Seconds: 600, WaitP95Seconds: 3600, Preemptions: 1, PreemptionWasteGPUHours: 1.5, Cost: fp(125),
		CapacityGPUHours: 360, IdleCapacityGPUHours: 322.5})
}

func TestByDaySplitsAtMidnight(t *testing.T) {
	rep := compute(t, scenario(), api.ByDay, scenarioWindow)
	if len(rep.Rows) != 3 {
		t.Fatalf("%d rows; want the 3 days of the window", len(rep.Rows))
	}
	// 10-31: jobs 1-5 (4 + 1 + 1.5 + 3.5 + 4 + 1.5 = 15.5) and job 6's 22:00→24:00
	// on 4 GPUs (8): 23.5. Capacity 6 × 24 = 144. Job 6's end is on 11-01.
	d1 := rowOf(t, rep, "2026-10-31")
	if !near(d1.GPUHours, 23.5) || d1.Jobs != 6 || d1.Succeeded != 2 || d1.Failed != 4 || !near(d1.CapacityGPUHours, 144) || !near(d1.IdleCapacityGPUHours, 120.5) {
		t.Errorf("10-31: %+v", d1)
	}
	// 11-01: job 6's 00:00→02:00 on 4 GPUs, 8, and its success.
	d2 := rowOf(t, rep, "2026-11-01")
	if !near(d2.GPUHours, 8) || d2.Jobs != 1 || d2.Succeeded != 1 || !near(*d2.Cost, 32) || !near(d2.IdleCapacityGPUHours, 136) {
		t.Errorf("11-01: %+v", d2)
	}
	// 11-02: job 7 from 09:00 to now (12:00) on 2 GPUs; capacity only up to now: 6 × 12.
	d3 := rowOf(t, rep, "2026-11-02")
	if !near(d3.GPUHours, 6) || !near(d3.CapacityGPUHours, 72) || !near(d3.IdleCapacityGPUHours, 66) || d3.WaitP50Seconds != 3600 {
		t.Errorf("11-02: %+v", d3)
	}
	if !near(rep.Total.IdleCapacityGPUHours, 120.5+136+66) || rep.Total.Jobs != 7 {
		t.Errorf("total: %+v", rep.Total)
	}
}

// Job 6 runs from 10-31 22:00 to 11-01 02:00 on 4 GPUs: October's report has its first
// 8 GPU-hours, November's the other 8 and its end.
func TestMonthBoundary(t *testing.T) {
	oct := compute(t, scenario(), api.ByTeam, Query{Since: time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), Until: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)})
	nov := compute(t, scenario(), api.ByTeam, Query{Since: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), Until: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)})
	// October: everything of 10-31, 23.5 GPU-hours; 2 successes (1, 4.2), 4 failures.
	if o := oct.Total; !near(o.GPUHours, 23.5) || o.Succeeded != 2 || o.Failed != 4 || o.Jobs != 6 || !near(o.CapacityGPUHours, 6*31*24) {
		t.Errorf("October: %+v", o)
	}
	// November: job 6's 8 and job 7's 6; job 6's success. Capacity 6 GPUs × 36 hours to now.
	if n := nov.Total; !near(n.GPUHours, 14) || n.Succeeded != 1 || n.Failed != 0 || n.Jobs != 2 || !near(n.CapacityGPUHours, 216) {
		t.Errorf("November: %+v", n)
	}
	if nlp := rowOf(t, nov, "nlp"); !near(nlp.GPUHours, 8) || !near(*nlp.Cost, 32) {
		t.Errorf("November nlp: %+v", nlp)
	}
	// Together they are the whole story of job 6: 16 GPU-hours.
	if !near(rowOf(t, oct, "nlp").GPUHours+rowOf(t, nov, "nlp").GPUHours, 22.5) {
		t.Error("October and November together do not add up to nlp's 22.5 GPU-hours")
	}
}

func TestByHourOfWeek(t *testing.T) {
	rep := compute(t, scenario(), api.ByHourOfWeek, scenarioWindow)
	if len(rep.Rows) != 168 || rep.Rows[0].Key != "Mon 00" || rep.Rows[167].Key != "Sun 23" {
		t.Fatalf("%d rows from %s to %s; want all 168 from Mon 00 to Sun 23", len(rep.Rows), rep.Rows[0].Key, rep.Rows[len(rep.Rows)-1].Key)
	}
	for _, c := range []struct {
		key                  string
		used, capacity, free float64
	}{
		{"Sat 14", 2, 6, 4},     // attempt 4.1 on 2 GPUs; 10-31 is a Saturday
		{"Sat 15", 1.5, 6, 4.5}, // 4.1 until 15:45
		{"Sat 22", 4, 6, 2},     // job 6 on 4 GPUs
		{"Sun 01", 4, 6, 2},     // job 6 after midnight
		{"Mon 11", 2, 6, 4},     // job 7
		{"Mon 12", 0, 0, 0},     // now: no capacity after it
		{"Tue 00", 0, 0, 0},     // outside the window
		{"Sun 12", 0, 6, 6},     // a quiet Sunday noon
	} {
		r := rowOf(t, rep, c.key)
		if !near(r.GPUHours, c.used) || !near(r.CapacityGPUHours, c.capacity) || !near(r.IdleCapacityGPUHours, c.free) {
			t.Errorf("%s: %.2f used of %.2f, %.2f free; want %.2f of %.2f, %.2f free", c.key, r.GPUHours, r.CapacityGPUHours,
				r.IdleCapacityGPUHours, c.used, c.capacity, c.free)
		}
	}
}

func TestByNodeAndModel(t *testing.T) {
	node := compute(t, scenario(), api.ByNode, scenarioWindow)
	// h1: 4 + 3.5 + 4 + 16 = 27.5 of 4 GPUs × 60h; waits 1800, 0, 3600, 3600.
	checkRow(t, rowOf(t, node, "h1"), api.UsageRow{Key: "h1", Jobs: 3, Attempts: 4, GPUHours: 27.5, MeasuredGPUHours: 27.5,
		EffectiveGPUHours: 3.2 + 3.15 + 2.8 + 9.6, UtilizationPct: fp((3.2 + 3.15 + 2.8 + 9.6) / 27.5 * 100), Succeeded: 3, Failed: 1,
		SuccessRate: fp(0.75), Failures: map[string]int{api.ReasonPreempted: 1}, Assigned: 4, WaitP50Seconds: 1800, WaitP95Seconds: 3600,
		Preemptions: 1, PreemptionWasteGPUHours: 1.5, CapacityGPUHours: 240, IdleCapacityGPUHours: 212.5, Cost: fp(110)})
	a1 := rowOf(t, node, "a1")
	if !near(a1.GPUHours, 10) || !near(a1.CapacityGPUHours, 120) || !near(*a1.Cost, 15) {
		t.Errorf("a1: %+v", a1)
	}
	model := compute(t, scenario(), api.ByGPUModel, scenarioWindow)
	if h := rowOf(t, model, "H100"); !near(h.GPUHours, 27.5) || !near(*h.Cost, 110) || !near(h.CapacityGPUHours, 240) {
		t.Errorf("H100: %+v", h)
	}
	if a := rowOf(t, model, "A100"); !near(a.GPUHours, 10) || !near(*a.Cost, 15) {
		t.Errorf("A100: %+v", a)
	}
}

// An idle node shows with its capacity; a model without a price has no cost, and the
// notes say so.
func TestIdleNodeAndUnpricedModel(t *testing.T) {
	in := scenario()
	in.Nodes = append(in.Nodes, api.Node{Name: "l4", Inventory: api.Inventory{GPUs: []api.GPU{{Index: 0, Model: "L4"}}}, State: api.NodeReady},
		api.Node{Name: "gone", Inventory: api.Inventory{GPUs: []api.GPU{{Index: 0, Model: "L4"}}}, State: api.NodeLost})
	in.Prices = []api.Price{{Model: "H100", PerGPUHour: 4, Currency: "USD"}}
	rep := compute(t, in, api.ByNode, scenarioWindow)
	if r := rowOf(t, rep, "l4"); r.GPUHours != 0 || !near(r.CapacityGPUHours, 60) || r.Cost != nil {
		t.Errorf("idle node l4: %+v", r)
	}
	for _, r := range rep.Rows {
		if r.Key == "gone" {
			t.Error("a lost node has a capacity row")
		}
	}
	if a := rowOf(t, rep, "a1"); a.Cost != nil {
		t.Errorf("a1 has cost %v without an A100 price", *a.Cost)
	}
	if !containsNote(rep.Notes, "no price is set for A100") {
		t.Errorf("notes %q do not name the unpriced model", rep.Notes)
	}
}

func containsNote(notes []string, part string) bool {
	for _, n := range notes {
		if len(n) >= len(part) && contains(n, part) {
			return true
		}
	}
	return false
}

func contains(s, part string) bool {
	for i := 0; i+len(part) <= len(s); i++ {
		if s[i:i+len(part)] == part {
			return true
		}
	}
	return false
}

func TestQueryErrors(t *testing.T) {
	day := func(d int) time.Time { return time.Date(2026, 1, d, 0, 0, 0, 0, time.UTC) }
	for _, c := range []struct {
		q     Query
		param string
	}{
		{Query{By: "cluster", Since: day(1), Until: day(2)}, "by"},
		{Query{By: "", Since: day(1), Until: day(2)}, "by"},
		{Query{By: api.ByTeam, Since: day(2), Until: day(1)}, "until"},
		{Query{By: api.ByTeam, Since: day(2), Until: day(2)}, "until"},
		{Query{By: api.ByTeam, Since: day(1), Until: day(1).Add(401 * 24 * time.Hour)}, "since"},
	} {
		_, err := Compute(scenario(), c.q)
		var qe *QueryError
		if !errors.As(err, &qe) || qe.Param != c.param {
			t.Errorf("%+v: error %v; want one naming %s", c.q, err, c.param)
		}
	}
	if _, err := Compute(scenario(), Query{By: api.ByTeam, Since: day(1), Until: day(1).Add(MaxWindow)}); err != nil {
		t.Errorf("a window of exactly %v: %v", MaxWindow, err)
	}
}

func TestParseTime(t *testing.T) {
	for in, want := range map[string]time.Time{
		"2026-11-01":                time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC),
		"2026-11-01T09:30:00+02:00": time.Date(2026, 11, 1, 7, 30, 0, 0, time.UTC),
	} {
		got, err := ParseTime(in)
		if err != nil || !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "yesterday", "2026-13-01", "2026-11-01 09:00"} {
		if _, err := ParseTime(in); err == nil {
			t.Errorf("ParseTime(%q) took it", in)
		}
	}
}

// Deadlines count in the group of the instant they fall due, when decided: job 1 met its
// deadline, job 3 missed it, job 6's fell due after the window, job 7's is undecided,
// and a job that never started (no attempt) missed a start-by deadline.
func TestDeadlineCounts(t *testing.T) {
	in := scenario()
	set := func(id int64, due time.Time, result string) {
		for i := range in.Jobs {
			if in.Jobs[i].ID == id {
				in.Jobs[i].Spec.Deadline, in.Jobs[i].DeadlineResult = tp(due), result
			}
		}
	}
	set(1, oct31(11, 0), api.DeadlineMet)
	set(3, oct31(13, 0), api.DeadlineMissed)
	set(6, time.Date(2026, 11, 4, 0, 0, 0, 0, time.UTC), api.DeadlineMet)
	set(7, oct31(23, 0), "")
	in.Jobs = append(in.Jobs, api.Job{ID: 9, Spec: api.JobSpec{User: "carol", Team: "vision", Queue: "batch", Deadline: tp(oct31(18, 0)),
		DeadlineKind: api.DeadlineStart}, State: api.StatePending, SubmitTime: oct31(17, 0), DeadlineResult: api.DeadlineMissed})
	rep := compute(t, in, api.ByTeam, scenarioWindow)
	if r := rowOf(t, rep, "nlp"); r.DeadlinesMet != 1 || r.DeadlinesMissed != 0 {
		t.Errorf("nlp: %d met, %d missed; want 1, 0", r.DeadlinesMet, r.DeadlinesMissed)
	}
	if r := rowOf(t, rep, "vision"); r.DeadlinesMet != 0 || r.DeadlinesMissed != 2 {
		t.Errorf("vision: %d met, %d missed; want 0, 2", r.DeadlinesMet, r.DeadlinesMissed)
	}
	if rep.Total.DeadlinesMet != 1 || rep.Total.DeadlinesMissed != 2 {
		t.Errorf("total: %d met, %d missed; want 1, 2", rep.Total.DeadlinesMet, rep.Total.DeadlinesMissed)
	}
	byNode := compute(t, in, api.ByNode, scenarioWindow)
	if r := rowOf(t, byNode, "unknown"); r.DeadlinesMissed != 1 {
		t.Errorf("by node: the job that never ran counts %d missed under unknown; want 1", r.DeadlinesMissed)
	}
	var b strings.Builder
	WriteTable(&b, rep)
	if !strings.Contains(b.String(), "DEADLINES MET/MISSED") || !strings.Contains(b.String(), "0/2") {
		t.Errorf("table lacks the deadline column:\n%s", b.String())
	}
	b.Reset()
	WriteTable(&b, compute(t, scenario(), api.ByTeam, scenarioWindow))
	if strings.Contains(b.String(), "DEADLINES") {
		t.Errorf("a report without deadlines shows the column:\n%s", b.String())
	}
}

// By project, each team's rows split by project, with the team's jobs that name none in a
// row of their own; together they add up to the team's row.
func TestByProject(t *testing.T) {
	in := scenario()
	for i := range in.Jobs {
		switch in.Jobs[i].ID {
		case 1, 6:
			in.Jobs[i].Spec.Project = "llm"
		case 3:
			in.Jobs[i].Spec.Project = "det"
		}
	}
	rep := compute(t, in, api.ByProject, scenarioWindow)
	keys := []string{}
	for _, r := range rep.Rows {
		keys = append(keys, r.Key)
	}
	if strings.Join(keys, " ") != "nlp/(none) nlp/llm vision/(none) vision/det" {
		t.Fatalf("rows %v", keys)
	}
	// nlp's jobs 1 (4 GPU-hours) and 6 (16) are llm's; 2 and 5 (1 + 1.5) the team's.
	if r := rowOf(t, rep, "nlp/llm"); r.Jobs != 2 || !near(r.GPUHours, 20) {
		t.Errorf("nlp/llm: %d jobs, %v GPU-hours; want 2, 20", r.Jobs, r.GPUHours)
	}
	if r := rowOf(t, rep, "nlp/(none)"); r.Jobs != 2 || !near(r.GPUHours, 2.5) {
		t.Errorf("nlp/(none): %d jobs, %v GPU-hours; want 2, 2.5", r.Jobs, r.GPUHours)
	}
	// vision's job 3 (1.5 GPU-hours) is det's.
	if r := rowOf(t, rep, "vision/det"); r.Jobs != 1 || !near(r.GPUHours, 1.5) {
		t.Errorf("vision/det: %d jobs, %v GPU-hours; want 1, 1.5", r.Jobs, r.GPUHours)
	}
	if !near(rep.Total.GPUHours, 37.5) {
		t.Errorf("total %v GPU-hours; want 37.5 as by team", rep.Total.GPUHours)
	}
}
