package api

import (
	"slices"
	"time"
)

// ArraySummary sums up the listed jobs of an array, for a listing that shows an array as
// one line: GET /api/v1/jobs?arrays=collapse answers each array with its first listed job
// and this, and rota queue draws the line from it either way.
type ArraySummary struct {
	// Jobs counts the listed jobs; FirstIndex and LastIndex are their lowest and highest
	// array indices.
	Jobs       int `json:"jobs"`
	FirstIndex int `json:"first_index"`
	LastIndex  int `json:"last_index"`
	// States counts them by state; Idle counts the running ones flagged idle.
	States map[JobState]int `json:"states"`
	Idle   int              `json:"idle,omitempty"`
	// Since is the earliest start of those not ended, or submit for one not started:
	// their longest time is from then to now. LongestEndedS is the longest an ended one
	// ran, or waited if it never started.
	Since         *time.Time `json:"since,omitempty"`
	LongestEndedS float64    `json:"longest_ended_s,omitempty"`
	// EstimatedStart is the soonest estimated start, still ahead, of those that wait.
	EstimatedStart *time.Time `json:"estimated_start,omitempty"`
	// Reason says why the first of them that waits does (ReasonText), "" when none waits.
	Reason string `json:"reason,omitempty"`
	// Nodes are the nodes they run on, by name, at most MaxSummaryNodes of them.
	Nodes []string `json:"nodes,omitempty"`
}

// MaxSummaryNodes bounds ArraySummary.Nodes: a line shows a few names at most.
const MaxSummaryNodes = 64

// Add counts job j, listed after the jobs already counted, as of now.
func (s *ArraySummary) Add(j *Job, now time.Time) { s.add(j, now, false) }

// AddEarlier counts job j, listed before the jobs already counted, as of now: for a
// listing read backwards.
func (s *ArraySummary) AddEarlier(j *Job, now time.Time) { s.add(j, now, true) }

func (s *ArraySummary) add(j *Job, now time.Time, earlier bool) {
	idx := 0
	if j.ArrayIndex != nil {
		idx = *j.ArrayIndex
	}
	if s.Jobs == 0 {
		s.FirstIndex, s.LastIndex, s.States = idx, idx, map[JobState]int{}
	}
	s.Jobs++
	s.FirstIndex, s.LastIndex = min(s.FirstIndex, idx), max(s.LastIndex, idx)
	s.States[j.State]++
	if j.State == StateRunning && j.IdleSince != nil {
		s.Idle++
	}
	from := j.SubmitTime
	if j.StartTime != nil {
		from = *j.StartTime
	}
	switch {
	case j.EndTime != nil:
		s.LongestEndedS = max(s.LongestEndedS, j.EndTime.Sub(from).Seconds())
	case s.Since == nil || from.Before(*s.Since):
		s.Since = &from
	}
	waits := !j.State.Active() && !j.State.Terminal()
	if waits && j.EstimatedStart != nil && j.EstimatedStart.After(now) && (s.EstimatedStart == nil || j.EstimatedStart.Before(*s.EstimatedStart)) {
		t := *j.EstimatedStart
		s.EstimatedStart = &t
	}
	// The first of them in listing order that says why it waits.
	if r := ReasonText(j); waits && r != "" && (s.Reason == "" || earlier) {
		s.Reason = r
	}
	// The first names by name are kept: those a line shows.
	for _, n := range j.Nodes {
		if i, found := slices.BinarySearch(s.Nodes, n); !found && i < MaxSummaryNodes {
			s.Nodes = slices.Insert(s.Nodes, i, n)
			s.Nodes = s.Nodes[:min(len(s.Nodes), MaxSummaryNodes)]
		}
	}
}

// Longest is the longest time of the counted jobs as of now: run time for one that
// started, waiting time for one that has not, an ended one's up to its end.
func (s *ArraySummary) Longest(now time.Time) time.Duration {
	d := time.Duration(s.LongestEndedS * float64(time.Second))
	if s.Since != nil {
		d = max(d, now.Sub(*s.Since))
	}
	return d
}

// ReasonText is why job j is in its state in a few words: its plain sentence where it has
// one, else its reason code, and "cancel requested" once a cancel reached it.
func ReasonText(j *Job) string {
	r := j.Message
	if r == "" {
		r = j.Reason
	}
	if j.CancelRequested && !j.State.Terminal() {
		r = "cancel requested"
	}
	return r
}
