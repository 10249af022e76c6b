package server

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/store"
)

const (
	defaultPage = 500
	maxPage     = 5000
)

func (s *Server) handleSubmit(w http.ResponseWriter, r *http.Request) {
	var spec api.JobSpec
	if status, e := decodeJSON(w, r, &spec); e != nil {
		writeError(w, status, e)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := validateSpec(&spec, s.state); e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	now := s.cfg.Clock.Now()
	job := api.Job{ID: s.state.NextJobID(), Spec: spec, State: api.StatePending, SubmitTime: now}
	ev := api.Event{Time: now, Actor: spec.User, Kind: api.EventSubmit, JobID: job.ID, To: api.StatePending,
		Message: "submitted to queue " + spec.Queue}
	// The answer goes out only after the commit: an acknowledged job is a durable job.
	if err := s.commit(r.Context(), &store.Batch{Jobs: []api.Job{job}, Events: []api.Event{ev}}); err != nil {
		s.log.Error("submit: commit failed", "err", err)
		writeError(w, http.StatusInternalServerError, &api.Error{Code: api.CodeInternal, Message: "the job could not be stored: " + err.Error()})
		return
	}
	s.log.Info("job submitted", "job", job.ID, "user", spec.User, "queue", spec.Queue, "gpus", spec.GPUs)
	s.wake()
	writeJSON(w, http.StatusCreated, job)
}

func (s *Server) handleListJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	states := map[api.JobState]bool{}
	all := false
	for _, v := range strings.Split(q.Get("state"), ",") {
		v = strings.ToUpper(strings.TrimSpace(v))
		switch {
		case v == "":
		case v == "ALL":
			all = true
		case api.JobState(v).Valid():
			states[api.JobState(v)] = true
		default:
			writeError(w, http.StatusBadRequest, invalid("state", "unknown state %q; use PENDING, HELD, ASSIGNED, RUNNING, SUCCEEDED, FAILED, CANCELLED, TIMEOUT or all", v))
			return
		}
	}
	limit := defaultPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPage {
			writeError(w, http.StatusBadRequest, invalid("limit", "must be a number from 1 to %d", maxPage))
			return
		}
		limit = n
	}
	var after int64
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, invalid("after", "must be the cursor from a previous page"))
			return
		}
		after = n
	}
	queue, user := q.Get("queue"), q.Get("user")
	keep := func(j *api.Job) bool {
		switch {
		case j.ID <= after:
			return false
		case len(states) > 0 && !states[j.State]:
			return false
		case len(states) == 0 && !all && j.State.Terminal():
			return false
		case queue != "" && j.Spec.Queue != queue:
			return false
		case user != "" && j.Spec.User != user:
			return false
		}
		return true
	}
	s.mu.Lock()
	jobs := s.state.Jobs(keep)
	s.mu.Unlock()
	list := api.JobList{Jobs: jobs}
	if len(jobs) > limit {
		list.Jobs = jobs[:limit]
		list.Next = strconv.FormatInt(jobs[limit-1].ID, 10)
	}
	if list.Jobs == nil {
		list.Jobs = []api.Job{}
	}
	writeJSON(w, http.StatusOK, list)
}

// jobID parses the {id} path value, answering 400 or 404 itself when it fails.
func (s *Server) jobID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		writeError(w, http.StatusBadRequest, invalid("id", "%q is not a job ID: job IDs are positive numbers", r.PathValue("id")))
		return 0, false
	}
	return id, true
}

func notFound(w http.ResponseWriter, id int64) {
	writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Field: "id", Message: "no job " + strconv.FormatInt(id, 10)})
}

func (s *Server) handleGetJob(w http.ResponseWriter, r *http.Request) {
	id, ok := s.jobID(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	job, found := s.state.Job(id)
	attempts := s.state.Attempts(id)
	s.mu.Unlock()
	if !found {
		notFound(w, id)
		return
	}
	events, err := s.store.Events(r.Context(), store.EventFilter{JobID: id})
	if err != nil {
		writeError(w, http.StatusInternalServerError, &api.Error{Code: api.CodeInternal, Message: "reading the job's events: " + err.Error()})
		return
	}
	if attempts == nil {
		attempts = []api.Attempt{}
	}
	writeJSON(w, http.StatusOK, api.JobDetail{Job: job, AttemptList: attempts, Events: events})
}

func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	id, ok := s.jobID(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	job, found := s.state.Job(id)
	if !found {
		notFound(w, id)
		return
	}
	now := s.cfg.Clock.Now()
	b := &store.Batch{}
	switch {
	case job.State.Terminal():
		writeError(w, http.StatusConflict, &api.Error{Code: api.CodeConflict, Field: "id",
			Message: "job " + strconv.FormatInt(id, 10) + " has already ended: " + string(job.State)})
		return
	case job.State.Active():
		if job.CancelRequested {
			writeJSON(w, http.StatusOK, job)
			return
		}
		// The agent stops the process (notice, signal, grace, kill) and the job becomes
		// CANCELLED when it reports the end, so the record never claims GPUs are free early.
		job.CancelRequested = true
		b.Events = append(b.Events, api.Event{Time: now, Actor: "user", Kind: "cancel_requested", JobID: id, Attempt: job.Attempts,
			Message: "cancel requested; stopping on " + strings.Join(job.Nodes, ",")})
	default:
		ev, err := cluster.Transition(&job, api.StateCancelled, api.ReasonCancelled, "cancelled by user", "user", now)
		if err != nil {
			writeError(w, http.StatusConflict, &api.Error{Code: api.CodeConflict, Message: err.Error()})
			return
		}
		b.Events = append(b.Events, ev)
	}
	b.Jobs = append(b.Jobs, job)
	if err := s.commit(r.Context(), b); err != nil {
		writeError(w, http.StatusInternalServerError, &api.Error{Code: api.CodeInternal, Message: "the cancel could not be stored: " + err.Error()})
		return
	}
	s.wake()
	writeJSON(w, http.StatusOK, job)
}

func (s *Server) handleNodes(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	nodes := s.state.Nodes()
	usage := s.state.Usage()
	s.mu.Unlock()
	for i := range nodes {
		if u := usage[nodes[i].Name]; u != nil {
			nodes[i].GPUsUsed, nodes[i].CPUsUsed, nodes[i].Jobs = len(u.GPUs), u.CPUs, u.Jobs
		}
	}
	writeJSON(w, http.StatusOK, api.NodeList{Nodes: nodes})
}
