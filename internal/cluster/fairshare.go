package cluster

import (
	"math"
	"time"
)

// FairShare accumulates each team's GPU use for the fair-share factor, decayed by a
// half-life h: a team's usage at t is the integral of gpus(s)·2^(-(t-s)/h) over its past,
// so every GPU-second counts from when it was used, not from when its job ended. One GPU
// held for exactly one half-life is h/(2 ln 2) GPU-seconds at the end (2,597 for an hour),
// half that one half-life later. The server (State.TeamUsage) and the simulator both keep
// their usage here, so a replay orders the queue as the server did.
//
// Updates and queries cost O(1) per team: each team keeps its usage as of its latest
// change and the GPUs it has held since, from which any later instant follows in closed
// form. It is not safe for concurrent use.
type FairShare struct {
	tau   float64 // the mean life h/ln 2 in seconds; 0: usage never decays
	teams map[string]*teamShare
}

// teamShare is one team's usage as of at, and the GPUs it holds from at on.
type teamShare struct {
	at    time.Time
	value float64
	milli int64 // GPUs held now, in milli-GPU so that shares add up exactly
}

// NewFairShare returns an empty accumulator; halfLife zero or below means usage never
// decays.
func NewFairShare(halfLife time.Duration) *FairShare {
	f := &FairShare{teams: map[string]*teamShare{}}
	if halfLife > 0 {
		f.tau = halfLife.Seconds() / math.Ln2
	}
	return f
}

// Hold records that team holds gpus more GPUs from since on (a share of one GPU as a
// fraction, counted to the milli-GPU); negative gpus releases them.
// since may lie before the team's latest change (an attempt learned late, a start time
// corrected, a history loaded in any order): the GPU-seconds it adds up to that change
// are counted as if recorded in order. Holding and then releasing the same GPUs from the
// same instant cancels out, which is how a caller corrects a record.
func (f *FairShare) Hold(team string, gpus float64, since time.Time) {
	milli := int64(math.Round(gpus * 1000))
	if milli == 0 {
		return
	}
	ts := f.teams[team]
	switch {
	case ts == nil:
		f.teams[team] = &teamShare{at: since, milli: milli}
		return
	case since.After(ts.at):
		ts.value, ts.at = f.valueAt(ts, since), since
	case since.Before(ts.at):
		ts.value += float64(milli) / 1000 * f.held(ts.at.Sub(since))
	}
	ts.milli += milli
}

// Usage returns team's decayed GPU-seconds at t. An instant before the team's latest change
// answers as of that change: usage is never decayed backwards.
func (f *FairShare) Usage(team string, t time.Time) float64 {
	ts := f.teams[team]
	if ts == nil {
		return 0
	}
	return f.valueAt(ts, t)
}

// Usages returns every team's decayed GPU-seconds at t.
func (f *FairShare) Usages(t time.Time) map[string]float64 {
	out := make(map[string]float64, len(f.teams))
	for name, ts := range f.teams {
		out[name] = f.valueAt(ts, t)
	}
	return out
}

func (f *FairShare) valueAt(ts *teamShare, t time.Time) float64 {
	if !t.After(ts.at) {
		return ts.value
	}
	d := t.Sub(ts.at)
	return ts.value*f.decay(d) + float64(ts.milli)/1000*f.held(d)
}

// decay is what one GPU-second is worth d later.
func (f *FairShare) decay(d time.Duration) float64 {
	if f.tau == 0 {
		return 1
	}
	return math.Exp(-d.Seconds() / f.tau)
}

// held is what one GPU held for d is worth at the end of d: the integral of the decay
// over d, τ(1 − e^(−d/τ)).
func (f *FairShare) held(d time.Duration) float64 {
	if f.tau == 0 {
		return d.Seconds()
	}
	return -f.tau * math.Expm1(-d.Seconds()/f.tau)
}
