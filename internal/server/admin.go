package server

import (
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/store"
)

// Administrative routes: queues, teams, node drain, reservations and whole configurations.
// Each change is one commit with an audit event.

func (s *Server) adminCommit(w http.ResponseWriter, r *http.Request, b *store.Batch, status int, answer any) {
	if err := s.commit(r.Context(), b); err != nil {
		commitError(w, "the change could not be stored", err)
		return
	}
	s.wake()
	if answer == nil {
		w.WriteHeader(status)
		return
	}
	writeJSON(w, status, answer)
}

func (s *Server) handlePutQueue(w http.ResponseWriter, r *http.Request) {
	putNamed(s, w, r, api.EventQueue, func(q *api.Queue) *string { return &q.Name }, validateQueue,
		func(name string) (any, bool) { q, ok := s.state.Queue(name); return q, ok },
		func(b *store.Batch, q api.Queue) { b.Queues = append(b.Queues, q) })
}

// putNamed serves PUT of a named admin object: the name comes from the URL (the body may
// repeat it), the whole object is validated, then stored with an audit event that holds
// the object before and after.
func putNamed[T any](s *Server, w http.ResponseWriter, r *http.Request, kind string, name func(*T) *string,
	validate func(*T) *api.Error, old func(string) (any, bool), add func(*store.Batch, T)) {
	var v T
	if status, e := s.decodeJSON(w, r, &v); e != nil {
		writeError(w, status, e)
		return
	}
	n := name(&v)
	if *n == "" {
		*n = r.PathValue("name")
	}
	if *n != r.PathValue("name") {
		writeError(w, http.StatusBadRequest, invalid("name", "body names %s %q but the URL names %q", kind, *n, r.PathValue("name")))
		return
	}
	if e := validate(&v); e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	before, existed := old(*n)
	if !existed {
		before = nil
	}
	evKind := kind
	if t, ok := any(v).(api.Team); ok && existed && !reflect.DeepEqual(before.(api.Team).Quotas, t.Quotas) {
		evKind = api.EventQuota
	}
	b := &store.Batch{Events: []api.Event{withChange(audit(r, s.cfg.Clock.Now(), evKind, "set %s %s", kind, *n), before, v)}}
	add(b, v)
	s.adminCommit(w, r, b, http.StatusOK, v)
}

// inUse counts the jobs that have not ended and match.
func (s *Server) inUse(match func(*api.Job) bool) int {
	return len(s.state.Jobs(func(j *api.Job) bool { return !j.State.Terminal() && match(j) }))
}

func (s *Server) handleDeleteQueue(w http.ResponseWriter, r *http.Request) {
	for _, q := range DefaultQueues() {
		if q.Name == r.PathValue("name") {
			writeError(w, http.StatusConflict, &api.Error{Code: api.CodeConflict, Field: "name",
				Message: fmt.Sprintf("queue %s is one of the default queues, which every cluster keeps; change it with rota admin queue set instead", q.Name)})
			return
		}
	}
	s.deleteNamed(w, r, api.EventQueue,
		func(name string) (any, bool) { q, ok := s.state.Queue(name); return q, ok },
		func(j *api.Job, name string) bool { return j.Spec.Queue == name },
		func(b *store.Batch, name string) { b.DeleteQueues = append(b.DeleteQueues, name) })
}

// deleteNamed serves DELETE of a named admin object: 404 if it does not exist, 409 while
// jobs that have not ended use it, else the delete with an audit event.
func (s *Server) deleteNamed(w http.ResponseWriter, r *http.Request, kind string, old func(string) (any, bool),
	uses func(*api.Job, string) bool, del func(*store.Batch, string)) {
	name := r.PathValue("name")
	s.mu.Lock()
	defer s.mu.Unlock()
	before, exists := old(name)
	if !exists {
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Field: "name", Message: "no " + kind + " " + name})
		return
	}
	if n := s.inUse(func(j *api.Job) bool { return uses(j, name) }); n > 0 {
		writeError(w, http.StatusConflict, &api.Error{Code: api.CodeConflict, Field: "name", Message: fmt.Sprintf("%s %s still has %d jobs that have not ended", kind, name, n)})
		return
	}
	b := &store.Batch{Events: []api.Event{withChange(audit(r, s.cfg.Clock.Now(), kind, "deleted %s %s", kind, name), before, nil)}}
	del(b, name)
	s.adminCommit(w, r, b, http.StatusNoContent, nil)
}

func (s *Server) handleTeams(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	teams := s.state.Teams()
	usage := s.state.TeamUsage(s.cfg.Clock.Now())
	inUse := map[string]map[string]int{}
	for _, id := range s.state.ActiveIDs() {
		j, _ := s.state.Job(id)
		if inUse[j.Spec.Team] == nil {
			inUse[j.Spec.Team] = map[string]int{}
		}
		model := j.Spec.GPUModel
		if len(cluster.GPUModels(model)) > 1 {
			// A job that takes any of several models counts under the one it holds.
			model = s.heldModel(id)
		}
		if model == "" {
			model = "*"
		}
		inUse[j.Spec.Team][model] += len(j.GPUIDs)
	}
	s.mu.Unlock()
	for i := range teams {
		teams[i].UsageGPUHours = usage[teams[i].Name] / 3600
		teams[i].GPUsInUse = inUse[teams[i].Name]
	}
	writeJSON(w, http.StatusOK, api.TeamList{Teams: teams})
}

// heldModel is the GPU model of the GPUs the job's current attempt holds ("" when it holds
// none, or its node is gone). Callers hold s.mu.
func (s *Server) heldModel(id int64) string {
	a, ok := s.state.CurrentAttempt(id)
	if !ok {
		return ""
	}
	for _, p := range a.Placements {
		n, ok := s.state.Node(p.Node)
		if !ok || len(p.GPUIndices) == 0 {
			continue
		}
		for _, g := range n.GPUs {
			if g.Index == p.GPUIndices[0] {
				return g.Model
			}
		}
	}
	return ""
}

func (s *Server) handlePutTeam(w http.ResponseWriter, r *http.Request) {
	putNamed(s, w, r, api.EventTeam, func(t *api.Team) *string { return &t.Name }, s.validateTeamNotify,
		func(name string) (any, bool) { t, ok := s.state.Team(name); return t, ok },
		func(b *store.Batch, t api.Team) { b.Teams = append(b.Teams, t) })
}

// validateTeamNotify is validateTeam, and the team's webhooks checked against the cluster's
// allowed prefixes.
func (s *Server) validateTeamNotify(t *api.Team) *api.Error {
	if e := validateTeam(t); e != nil {
		return e
	}
	s.mu.Lock()
	prefixes := notifySettings(s.state).URLPrefixes
	s.mu.Unlock()
	return validateNotify("notify", t.Notify, prefixes)
}

func (s *Server) handleDeleteTeam(w http.ResponseWriter, r *http.Request) {
	s.deleteNamed(w, r, api.EventTeam,
		func(name string) (any, bool) { t, ok := s.state.Team(name); return t, ok },
		func(j *api.Job, name string) bool { return j.Spec.Team == name },
		func(b *store.Batch, name string) { b.DeleteTeams = append(b.DeleteTeams, name) })
}

func (s *Server) handleReservations(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	now := s.cfg.Clock.Now()
	// A reservation ends by itself at its end: it holds nothing after, and is not listed.
	list := slices.DeleteFunc(s.state.Reservations(), func(r api.Reservation) bool { return !r.End.After(now) })
	s.state.ReservationUse(list, now)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, api.ReservationList{Reservations: list})
}

// handleReserve holds GPUs for a team in a window: a number of GPUs of a model and pool
// (no nodes), which the scheduler keeps free for the team wherever they are, or the whole
// nodes named. Nothing is stored unless every check passes.
func (s *Server) handleReserve(w http.ResponseWriter, r *http.Request) {
	var req api.Reservation
	if status, e := s.decodeJSON(w, r, &req); e != nil {
		writeError(w, status, e)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Clock.Now()
	req.ID, req.Used, req.Held = 0, 0, 0
	if e := s.checkReservation(&req, now); e != nil {
		status := http.StatusBadRequest
		if e.Code == api.CodeConflict {
			status = http.StatusConflict
		}
		writeError(w, status, e)
		return
	}
	req.ID = s.state.NextReservationID()
	if req.Name == "" {
		req.Name = "resv-" + strconv.FormatInt(req.ID, 10)
	}
	b := &store.Batch{Reservations: []api.Reservation{req}, Events: []api.Event{withChange(audit(r, now, api.EventReservation, "%s",
		describeReservation(req, "")), nil, req)}}
	s.adminCommit(w, r, b, http.StatusCreated, req)
}

// checkReservation checks a new reservation, by count or by nodes, naming the field at
// fault. Callers hold s.mu.
func (s *Server) checkReservation(req *api.Reservation, now time.Time) *api.Error {
	switch {
	case req.Team == "":
		return invalid("team", "is required")
	case req.Team != "default" && !s.hasTeam(req.Team):
		return invalid("team", "unknown team %q", req.Team)
	case req.Start.IsZero() || req.End.IsZero():
		return invalid("start", "start and end are both required")
	case !req.End.After(req.Start):
		return invalid("end", "%s is not after the start %s", req.End.UTC().Format(time.RFC3339), req.Start.UTC().Format(time.RFC3339))
	case !req.End.After(now):
		return invalid("end", "is in the past")
	case req.End.Sub(req.Start) > 366*24*time.Hour:
		return invalid("end", "a reservation may last at most a year")
	case req.Name != "" && !nameRE().MatchString(req.Name):
		return invalid("name", "use letters, digits and ._@+-")
	}
	if len(req.Nodes) > 0 {
		return s.checkReservedNodes(req)
	}
	return s.checkCount(req)
}

// describeReservation says what a reservation holds, for the audit trail.
func describeReservation(r api.Reservation, by string) string {
	what := fmt.Sprintf("%d %s", r.GPUs, scopeName(r.Model, r.Pool))
	if !r.ByCount() {
		what = fmt.Sprintf("nodes %s (%d GPUs)", strings.Join(r.Nodes, ", "), r.GPUs)
	}
	return fmt.Sprintf("reservation %d: %s for team %s from %s to %s%s", r.ID, what, r.Team,
		r.Start.UTC().Format(time.RFC3339), r.End.UTC().Format(time.RFC3339), by)
}

func (s *Server) hasTeam(name string) bool {
	_, ok := s.state.Team(name)
	return ok
}

func (s *Server) handleUnreserve(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, invalid("id", "is not a reservation ID"))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var before *api.Reservation
	for _, o := range s.state.Reservations() {
		if o.ID == id {
			before = &o
		}
	}
	if before == nil {
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Field: "id", Message: fmt.Sprintf("no reservation %d", id)})
		return
	}
	b := &store.Batch{DeleteReservations: []int64{id}, Events: []api.Event{withChange(audit(r, s.cfg.Clock.Now(), api.EventReservation, "deleted reservation %d", id), before, nil)}}
	s.adminCommit(w, r, b, http.StatusNoContent, nil)
}

func (s *Server) handlePutConfig(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	limit := s.state.Limits().MaxBodyBytes
	s.mu.Unlock()
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, &api.Error{Code: api.CodeTooLarge, Message: fmt.Sprintf("configurations are limited to %d bytes", limit)})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := caller(r)
	cfg, e := s.applyConfig(r.Context(), data, api.Event{Actor: id.User, Role: string(id.Role), Source: id.Source})
	if e != nil {
		status := http.StatusBadRequest
		switch e.Code {
		case api.CodeInternal:
			status = http.StatusInternalServerError
		case api.CodeUnavailable:
			status = http.StatusServiceUnavailable
		}
		writeError(w, status, e)
		return
	}
	writeJSON(w, http.StatusOK, cfg)
}
