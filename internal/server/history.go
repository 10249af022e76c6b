package server

import (
	"net/http"
	"strconv"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
)

// handleHistory lists, a page at a time in ID order, the ended jobs submitted in
// [since, until) with the run time of all their attempts: the accounting record that
// `rota history export` turns into a replayable trace. It pages like the job list: limit
// and the after cursor, with next for the following page.
func (s *Server) handleHistory(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	since, e := queryTime(q, "since")
	if e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	until, e := queryTime(q, "until")
	if e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	if !until.IsZero() && until.Before(since) {
		writeError(w, http.StatusBadRequest, invalid("until", "is before since: the window is [since, until)"))
		return
	}
	limit, after, e := pageQuery(q)
	if e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	who := caller(r)
	s.mu.Lock()
	reads := s.readFilter(who)
	inWindow := func(j *api.Job) bool {
		return !j.SubmitTime.Before(since) && (until.IsZero() || j.SubmitTime.Before(until)) && reads(j)
	}
	jobs, more := s.state.JobsPage(after, endedOf(nil), limit, inWindow)
	attempts := make(map[int64][]api.Attempt, len(jobs))
	for _, j := range jobs {
		attempts[j.ID] = s.state.Attempts(j.ID)
	}
	ev := s.evictedView()
	s.mu.Unlock()

	// Jobs that ended before the KeepEnded window are read from the store, without the
	// lock (see evictedView); mayRead and inWindow read nothing of the state.
	if ev.count > 0 {
		s.hookBetweenReads()
		f := store.JobFilter{After: after, States: endedOf(nil), EndedBefore: ev.before, SubmitSince: since, SubmitUntil: until}
		stored, err := s.storedPage(r.Context(), f, limit, inWindow)
		if err != nil {
			storeError(w, "reading ended jobs", err)
			return
		}
		jobs, more, _ = pageOf(mergeByID(jobs, stored), more, limit)
		// The attempts of the page's jobs that came from the store, from the store too.
		fromStore := map[int64]bool{}
		var first, last int64
		for _, j := range jobs {
			if _, inMemory := attempts[j.ID]; !inMemory {
				fromStore[j.ID] = true
				if first == 0 {
					first = j.ID
				}
				last = j.ID
			}
		}
		if len(fromStore) > 0 {
			atts, err := s.store.AttemptsBetween(r.Context(), first, last)
			if err != nil {
				storeError(w, "reading ended jobs' attempts", err)
				return
			}
			for _, a := range atts {
				if fromStore[a.JobID] {
					attempts[a.JobID] = append(attempts[a.JobID], a)
				}
			}
		}
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
	if more {
		list.Next = strconv.FormatInt(jobs[len(jobs)-1].ID, 10)
	}
	writeJSON(w, http.StatusOK, list)
}
