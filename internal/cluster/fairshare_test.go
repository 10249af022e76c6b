package cluster

import (
	"math"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/batch"
)

// tau is the mean life of a one-hour half-life in seconds: one GPU held for ever is worth
// tau GPU-seconds.
var tau = 3600 / math.Ln2

func TestFairShareByHand(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	at := func(h float64) time.Time { return t0.Add(time.Duration(h * float64(time.Hour))) }
	type hold struct {
		team  string
		gpus  float64
		since float64 // hours after t0
	}
	cases := []struct {
		name  string
		holds []hold
		at    float64
		team  string
		want  float64
	}{
		// One GPU for one half-life: h/(2 ln 2) = 2,597 GPU-seconds at its end, not 3,600.
		{"one GPU one half-life", []hold{{"a", 1, 0}, {"a", -1, 1}}, 1, "a", tau / 2},
		{"decays after the end", []hold{{"a", 1, 0}, {"a", -1, 1}}, 2, "a", tau / 4},
		// 2 GPUs over [0h, 2h] and 1 over [1h, 3h], at 3h: 2τ(1−¼)·½ + τ(1−¼) = 1.5τ.
		{"two overlapping jobs", []hold{{"a", 2, 0}, {"a", 1, 1}, {"a", -2, 2}, {"a", -1, 3}}, 3, "a", 1.5 * tau},
		// The same jobs recorded as a loaded history might list them: ends before starts.
		{"recorded out of order", []hold{{"a", -1, 3}, {"a", 1, 1}, {"a", -2, 2}, {"a", 2, 0}}, 3, "a", 1.5 * tau},
		// 4 GPUs running since 0h, asked at 30 min: 4τ(1 − 2^(−½)).
		{"running job", []hold{{"a", 4, 0}}, 0.5, "a", 4 * tau * (1 - math.Exp2(-0.5))},
		{"teams apart", []hold{{"a", 4, 0}, {"b", 1, 0}}, 1, "b", tau / 2},
		// Shares of a GPU are charged as shares, and add up exactly.
		{"a quarter of a GPU", []hold{{"a", 0.25, 0}, {"a", -0.25, 1}}, 1, "a", tau / 8},
		{"tenths add up", []hold{{"a", 0.1, 0}, {"a", 0.2, 0}, {"a", -0.1, 1}, {"a", -0.2, 1}}, 2, "a", 0.3 * tau / 4},
		{"a team that used nothing", []hold{{"a", 4, 0}}, 1, "c", 0},
		// A start corrected from 0h to 1h: take back what was held from 0h, hold from 1h.
		{"corrected start", []hold{{"a", 2, 0}, {"a", -2, 0}, {"a", 2, 1}}, 2, "a", tau},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFairShare(time.Hour)
			for _, h := range tc.holds {
				f.Hold(h.team, h.gpus, at(h.since))
			}
			if got := f.Usage(tc.team, at(tc.at)); math.Abs(got-tc.want) > 1e-6 {
				t.Errorf("usage %v; want %v", got, tc.want)
			}
			if got := f.Usages(at(tc.at))[tc.team]; math.Abs(got-tc.want) > 1e-6 {
				t.Errorf("usages %v; want %v", got, tc.want)
			}
		})
	}
}

// Without a half-life usage is the plain sum of GPU-seconds.
func TestFairShareWithoutDecay(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	f := NewFairShare(0)
	f.Hold("a", 2, t0)
	f.Hold("a", -2, t0.Add(time.Hour))
	if got := f.Usage("a", t0.Add(48*time.Hour)); got != 7200 {
		t.Errorf("usage %v; want 7200", got)
	}
}

// The server counts a running attempt from the start its agent reports, not from its
// assignment, once it knows it; and the attempt's end stops the count.
func TestTeamUsageFollowsAnAttempt(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	s := New()
	s.HalfLife = time.Hour
	job := api.Job{ID: 1, Spec: api.JobSpec{Team: "vision"}, State: api.StateAssigned}
	a := api.Attempt{JobID: 1, N: 1, AssignTime: t0, Placements: []api.Placement{{Node: "n1", GPUIndices: []int{0}}}}
	s.Apply(&batch.Batch{Jobs: []api.Job{job}, Attempts: []api.Attempt{a}})
	if got, want := s.TeamUsage(t0.Add(time.Hour))["vision"], tau/2; math.Abs(got-want) > 1e-6 {
		t.Errorf("assigned for an hour: %v; want %v", got, want)
	}
	started := t0.Add(30 * time.Minute)
	a.StartTime = &started
	s.Apply(&batch.Batch{Attempts: []api.Attempt{a}})
	if got, want := s.TeamUsage(t0.Add(time.Hour))["vision"], tau*(1-math.Exp2(-0.5)); math.Abs(got-want) > 1e-6 {
		t.Errorf("running for half an hour: %v; want %v", got, want)
	}
	end := t0.Add(90 * time.Minute)
	a.EndTime = &end
	s.Apply(&batch.Batch{Attempts: []api.Attempt{a}})
	if got, want := s.TeamUsage(end.Add(time.Hour))["vision"], tau/4; math.Abs(got-want) > 1e-6 {
		t.Errorf("one half-life after an hour's run: %v; want %v", got, want)
	}
}

func BenchmarkFairShareUsage(b *testing.B) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	f := NewFairShare(7 * 24 * time.Hour)
	teams := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for i, team := range teams {
		f.Hold(team, float64(i+1), t0.Add(time.Duration(i)*time.Minute))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now := t0.Add(time.Duration(i) * time.Second)
		for _, team := range teams {
			_ = f.Usage(team, now)
		}
	}
}
