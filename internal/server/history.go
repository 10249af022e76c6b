package server

import (
	"context"
	"net/http"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
)

// handleHistory lists ended jobs submitted in [since, until) with the run time of all their
// attempts: the accounting record that `rota history export` turns into a replayable trace.
func (s *Server) handleHistory(w http.ResponseWriter, r *http.Request) {
	since, e := queryTime(r.URL.Query(), "since")
	if e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	until, e := queryTime(r.URL.Query(), "until")
	if e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	who := caller(r)
	s.mu.Lock()
	mayRead := s.readRule(who)
	jobs := s.state.Jobs(func(j *api.Job) bool {
		return j.State.Terminal() && !j.SubmitTime.Before(since) && (until.IsZero() || j.SubmitTime.Before(until)) && mayRead(j) == nil
	})
	attempts := map[int64][]api.Attempt{}
	for _, j := range jobs {
		attempts[j.ID] = s.state.Attempts(j.ID)
	}
	// Jobs that ended before the KeepEnded window are read from the store.
	if s.state.EvictedCount() > 0 {
		stored, atts, err := s.evictedHistory(r.Context(), since, until, mayRead)
		if err != nil {
			s.mu.Unlock()
			storeError(w, "reading ended jobs", err)
			return
		}
		for _, a := range atts {
			attempts[a.JobID] = append(attempts[a.JobID], a)
		}
		jobs = mergeByID(jobs, stored)
	}
	list := api.HistoryList{Records: make([]api.HistoryRecord, 0, len(jobs))}
	for _, j := range jobs {
		rec := api.HistoryRecord{
			ID: j.ID, Submit: j.SubmitTime, Start: j.StartTime, End: j.EndTime, TimeLimit: j.Spec.TimeLimit,
			GPUs: j.Spec.GPUs, Nodes: j.Spec.Nodes, GPUModel: j.Spec.GPUModel, CPUs: j.Spec.CPUs, MemoryMB: j.Spec.MemoryMB,
			Queue: j.Spec.Queue, Team: j.Spec.Team, Project: j.Spec.Project, User: j.Spec.User, State: j.State, Attempts: j.Attempts,
		}
		for _, a := range attempts[j.ID] {
			if a.StartTime != nil && a.EndTime != nil {
				rec.RunSeconds += a.EndTime.Sub(*a.StartTime).Seconds()
			}
		}
		list.Records = append(list.Records, rec)
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, list)
}

// evictedHistory reads from the store the evicted jobs submitted in [since, until) that
// mayRead allows, ascending by ID, and their attempts. Callers hold s.mu.
func (s *Server) evictedHistory(ctx context.Context, since, until time.Time, mayRead func(*api.Job) *api.Error) ([]api.Job, []api.Attempt, error) {
	const page = 1000
	f := store.JobFilter{States: endedOf(nil), EndedBefore: s.state.EvictedBefore(), SubmitSince: since, SubmitUntil: until, Limit: page}
	var jobs []api.Job
	for {
		got, err := s.store.JobsPage(ctx, f)
		if err != nil {
			return nil, nil, err
		}
		for i := range got {
			if _, ok := s.state.Evicted(got[i].ID); ok && mayRead(&got[i]) == nil {
				jobs = append(jobs, got[i])
			}
		}
		if len(got) < page {
			break
		}
		f.After = got[len(got)-1].ID
	}
	if len(jobs) == 0 {
		return nil, nil, nil
	}
	atts, err := s.store.AttemptsBetween(ctx, jobs[0].ID, jobs[len(jobs)-1].ID)
	if err != nil {
		return nil, nil, err
	}
	kept := atts[:0]
	for _, a := range atts {
		if _, ok := s.state.Evicted(a.JobID); ok {
			kept = append(kept, a)
		}
	}
	return jobs, kept, nil
}
