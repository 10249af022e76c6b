package server

import (
	"fmt"
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
	indices, limit := []int(nil), 0
	if spec.Array != "" {
		var e *api.Error
		if indices, limit, e = parseArray(spec.Array); e != nil {
			writeError(w, http.StatusBadRequest, e)
			return
		}
	}
	now := s.cfg.Clock.Now()
	first := s.state.NextJobID()
	b := &store.Batch{}
	add := func(j api.Job) {
		j.State, j.Reason, j.Message = s.initialState(&j)
		b.Jobs = append(b.Jobs, j)
		b.Events = append(b.Events, api.Event{Time: now, Actor: spec.User, Kind: api.EventSubmit, JobID: j.ID, To: j.State,
			Reason: j.Reason, Message: "submitted to queue " + spec.Queue})
	}
	if indices == nil {
		add(api.Job{ID: first, Spec: spec, SubmitTime: now, UserHold: spec.Hold})
	}
	for i, idx := range indices {
		add(api.Job{ID: first + int64(i), Spec: spec, SubmitTime: now, UserHold: spec.Hold, ArrayID: first, ArrayIndex: &idx, ArrayLimit: limit})
	}
	job := b.Jobs[0]
	// The answer goes out only after the commit: an acknowledged job is a durable job.
	if err := s.commit(r.Context(), b); err != nil {
		s.log.Error("submit: commit failed", "err", err)
		writeError(w, http.StatusInternalServerError, &api.Error{Code: api.CodeInternal, Message: "the job could not be stored: " + err.Error()})
		return
	}
	s.log.Info("job submitted", "job", job.ID, "jobs", len(b.Jobs), "user", spec.User, "queue", spec.Queue, "gpus", spec.GPUs)
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

// initialState is where a new job starts: HELD for a user hold or unmet dependencies,
// FAILED if a dependency can never be met, else PENDING.
func (s *Server) initialState(j *api.Job) (api.JobState, string, string) {
	if j.UserHold {
		return api.StateHeld, reasonUserHold, "held by its owner; rota release " + strconv.FormatInt(j.ID, 10) + " lets it run"
	}
	met, msg, never := s.depsMet(j)
	switch {
	case never:
		return api.StateFailed, reasonDependency, msg
	case !met:
		return api.StateHeld, reasonDependency, msg
	}
	return api.StatePending, "", ""
}

// Reasons for HELD jobs and jobs the server keeps out of the scheduler.
const (
	reasonUserHold   = "UserHold"
	reasonDependency = "Dependency"
	reasonArrayLimit = "ArrayLimit"
)

// depsMet reports whether the job's dependencies allow it to start, a sentence saying what
// it waits for, and whether an after-ok dependency failed so that it never can.
func (s *Server) depsMet(j *api.Job) (met bool, msg string, never bool) {
	var waiting []string
	for _, id := range j.Spec.After {
		if d, ok := s.state.Job(id); ok && !d.State.Terminal() {
			waiting = append(waiting, strconv.FormatInt(id, 10))
		}
	}
	for _, id := range j.Spec.AfterOK {
		d, ok := s.state.Job(id)
		switch {
		case !ok:
			continue
		case d.State == api.StateSucceeded:
		case d.State.Terminal():
			return false, fmt.Sprintf("job %d ended %s, so --after-ok %d can never be met", id, d.State, id), true
		default:
			waiting = append(waiting, strconv.FormatInt(id, 10))
		}
	}
	if len(waiting) > 0 {
		return false, "waits for job " + strings.Join(waiting, ", ") + " to end", false
	}
	return true, "", false
}

func (s *Server) handleHold(w http.ResponseWriter, r *http.Request)    { s.setHold(w, r, true) }
func (s *Server) handleRelease(w http.ResponseWriter, r *http.Request) { s.setHold(w, r, false) }

// setHold holds a waiting job, or releases it. Released, it waits again for any unmet
// dependency; held, it keeps its place in the order by its submit time.
func (s *Server) setHold(w http.ResponseWriter, r *http.Request, hold bool) {
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
	if job.State != api.StatePending && job.State != api.StateHeld {
		writeError(w, http.StatusConflict, &api.Error{Code: api.CodeConflict, Field: "id",
			Message: fmt.Sprintf("job %d is %s: only waiting jobs can be held or released", id, job.State)})
		return
	}
	if job.UserHold == hold {
		writeJSON(w, http.StatusOK, job)
		return
	}
	now := s.cfg.Clock.Now()
	job.UserHold = hold
	to, reason, msg := s.initialState(&job)
	b := &store.Batch{}
	if to != job.State {
		ev, err := cluster.Transition(&job, to, reason, msg, "user", now)
		if err != nil {
			writeError(w, http.StatusConflict, &api.Error{Code: api.CodeConflict, Message: err.Error()})
			return
		}
		b.Events = append(b.Events, ev)
	} else {
		job.Reason, job.Message = reason, msg
		verb := "released"
		if hold {
			verb = "held"
		}
		b.Events = append(b.Events, api.Event{Time: now, Actor: "user", Kind: api.EventAdmin, JobID: id, Message: verb + " by user; " + msg})
	}
	b.Jobs = append(b.Jobs, job)
	if err := s.commit(r.Context(), b); err != nil {
		writeError(w, http.StatusInternalServerError, &api.Error{Code: api.CodeInternal, Message: "the change could not be stored: " + err.Error()})
		return
	}
	s.wake()
	writeJSON(w, http.StatusOK, job)
}
