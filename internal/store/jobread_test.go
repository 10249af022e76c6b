package store

import (
	"context"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// ids lists the jobs' IDs in order.
func ids(jobs []api.Job) []int64 {
	out := []int64{}
	for _, j := range jobs {
		out = append(out, j.ID)
	}
	return out
}

// testJobReads: the reads of a server that keeps only recent jobs in memory select by
// end time, state, submit time, queue and owner, page by ID, and see a job's later
// change (its end) as the last commit left it.
func testJobReads(t *testing.T, url string) {
	s := openStore(t, url)
	ctx := context.Background()
	cutoff := t0.Add(10 * time.Hour)
	ended := func(id int64, st api.JobState, end time.Time) api.Job {
		j := bareJob(id)
		j.State, j.EndTime = st, &end
		return j
	}
	// 1, 2: ended long ago; 3: ended after the cutoff; 4: pending; 5: ended exactly at it;
	// 6: ended long ago in another queue, by another user, submitted later.
	old6 := ended(6, api.StateCancelled, t0.Add(time.Hour))
	old6.Spec.Queue, old6.Spec.User, old6.SubmitTime = "train", "alice", t0.Add(5*time.Hour)
	commit(t, s, &Batch{
		Jobs: []api.Job{ended(1, api.StateSucceeded, t0.Add(time.Hour)), ended(2, api.StateFailed, t0.Add(2*time.Hour)),
			ended(3, api.StateTimeout, t0.Add(11*time.Hour)), bareJob(4), ended(5, api.StateSucceeded, cutoff), old6},
		Attempts: []api.Attempt{fullAttempt(1, 1), fullAttempt(2, 1), fullAttempt(2, 2), bareAttempt(4, 1)},
	})

	recent, err := s.LoadRecentJobs(ctx, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "LoadRecentJobs", ids(recent), []int64{3, 4, 5})
	gone, err := s.LoadEndedBefore(ctx, cutoff)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "LoadEndedBefore", gone, []EndedJob{{1, api.StateSucceeded, "nlp"}, {2, api.StateFailed, "nlp"}, {6, api.StateCancelled, "nlp"}})

	job, atts, found, err := s.Job(ctx, 2)
	if err != nil || !found {
		t.Fatalf("Job(2): found %v, %v", found, err)
	}
	equal(t, "Job(2)", job, storedJob(ended(2, api.StateFailed, t0.Add(2*time.Hour))))
	equal(t, "Job(2) attempts", atts, []api.Attempt{fullAttempt(2, 1), fullAttempt(2, 2)})
	if _, _, found, err := s.Job(ctx, 99); found || err != nil {
		t.Errorf("Job(99): found %v, %v; want not found", found, err)
	}
	if atts, err := s.AttemptsBetween(ctx, 2, 4); err != nil || len(atts) != 3 || atts[0].JobID != 2 || atts[2].JobID != 4 {
		t.Errorf("AttemptsBetween(2, 4): %d attempts, %v", len(atts), err)
	}

	terminal := []api.JobState{api.StateSucceeded, api.StateFailed, api.StateCancelled, api.StateTimeout}
	for _, tc := range []struct {
		name string
		f    JobFilter
		want []int64
	}{
		{"all", JobFilter{}, []int64{1, 2, 3, 4, 5, 6}},
		{"a page from a cursor", JobFilter{After: 2, Limit: 2}, []int64{3, 4}},
		{"states", JobFilter{States: []api.JobState{api.StateFailed, api.StatePending}}, []int64{2, 4}},
		{"no states", JobFilter{States: []api.JobState{}}, []int64{}},
		{"ended before", JobFilter{States: terminal, EndedBefore: cutoff}, []int64{1, 2, 6}},
		{"ended since", JobFilter{States: terminal, EndedSince: t0.Add(2 * time.Hour)}, []int64{2, 3, 5}},
		{"submitted", JobFilter{SubmitSince: t0.Add(time.Hour), SubmitUntil: t0.Add(6 * time.Hour)}, []int64{6}},
		{"queue", JobFilter{Queue: "train"}, []int64{6}},
		{"user", JobFilter{User: "bob", After: 4}, []int64{5}},
	} {
		got, err := s.JobsPage(ctx, tc.f)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		equal(t, tc.name, ids(got), tc.want)
	}
	if _, err := s.JobsPage(ctx, JobFilter{Limit: -1}); err == nil {
		t.Error("a negative limit was taken")
	}

	// Job 4 ends before the cutoff: it moves from the recent jobs to the ended ones.
	commit(t, s, &Batch{Jobs: []api.Job{ended(4, api.StateCancelled, t0.Add(3*time.Hour))}})
	recent, _ = s.LoadRecentJobs(ctx, cutoff)
	equal(t, "LoadRecentJobs after job 4 ended", ids(recent), []int64{3, 5})
	gone, _ = s.LoadEndedBefore(ctx, cutoff)
	if len(gone) != 4 || gone[2] != (EndedJob{4, api.StateCancelled, "nlp"}) {
		t.Errorf("LoadEndedBefore after job 4 ended: %+v", gone)
	}
}
