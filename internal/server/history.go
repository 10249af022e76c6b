package server

import (
	"net/http"

	"github.com/rotahq/rota/internal/api"
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
	list := api.HistoryList{Records: make([]api.HistoryRecord, 0, len(jobs))}
	for _, j := range jobs {
		rec := api.HistoryRecord{
			ID: j.ID, Submit: j.SubmitTime, Start: j.StartTime, End: j.EndTime, TimeLimit: j.Spec.TimeLimit,
			GPUs: j.Spec.GPUs, Nodes: j.Spec.Nodes, GPUModel: j.Spec.GPUModel, CPUs: j.Spec.CPUs, MemoryMB: j.Spec.MemoryMB,
			Queue: j.Spec.Queue, Team: j.Spec.Team, User: j.Spec.User, State: j.State, Attempts: j.Attempts,
		}
		for _, a := range s.state.Attempts(j.ID) {
			if a.StartTime != nil && a.EndTime != nil {
				rec.RunSeconds += a.EndTime.Sub(*a.StartTime).Seconds()
			}
		}
		list.Records = append(list.Records, rec)
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, list)
}
