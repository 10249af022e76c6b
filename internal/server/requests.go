package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/notify"
	"github.com/rotahq/rota/internal/store"
)

// Requests and approvals: a member asks for a quota raise, a restricted queue or reserved
// GPUs (api.Request); an operator or admin other than the one who asked approves or
// denies it. An approved request applies in the same commit as the decision, and the
// scheduling loop ends it at its end time (undoing a quota raise) and expires a request
// nobody decided in time. Each step is a request event in the audit log.

const (
	// requestTTL is how long a request waits for a decision before it expires.
	requestTTL = 72 * time.Hour
	// maxGrant bounds how long a grant may last.
	maxGrant = 366 * 24 * time.Hour
	// Defaults for --for.
	defaultQuotaFor = 7 * 24 * time.Hour
	defaultQueueFor = 24 * time.Hour
	maxReasonLen    = 1000
	// maxPending bounds the requests one user may have waiting, so nobody can fill the
	// store and the deciders' list.
	maxPending = 20
)

// ruleOwnRequests names the rule that lets a member see only their own requests.
const ruleOwnRequests = "own-requests"

func (s *Server) handleCreateRequest(w http.ResponseWriter, r *http.Request) {
	var req api.Request
	if status, e := s.decodeJSON(w, r, &req); e != nil {
		writeError(w, status, e)
		return
	}
	id := caller(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Clock.Now()
	if e := s.validateRequest(&req, id, now); e != nil {
		status := http.StatusBadRequest
		switch e.Code {
		case api.CodeForbidden:
			status = http.StatusForbidden
		case api.CodeConflict:
			status = http.StatusConflict // the reservations already made leave no room
		}
		writeError(w, status, e)
		return
	}
	pending := 0
	for _, o := range s.state.OpenRequests() {
		if o.User == id.User && o.State == api.RequestPending {
			pending++
		}
	}
	if pending >= maxPending {
		writeError(w, http.StatusConflict, &api.Error{Code: api.CodeConflict, Field: "kind",
			Message: fmt.Sprintf("%s already has %d requests waiting for a decision, the most one user may have; wait for them to be decided or to expire", id.User, pending)})
		return
	}
	req.ID = s.state.NextRequestID()
	req.User = id.User
	req.State = api.RequestPending
	req.Created = now
	req.Expires = now.Add(requestTTL)
	if req.Kind == api.RequestReservation && req.Start.Before(req.Expires) {
		// Undecided at its start, a reservation is no longer worth deciding.
		req.Expires = *req.Start
	}
	ev := withChange(audit(r, now, api.EventRequest, "request %d filed: %s: %s", req.ID, req.Describe(), req.Reason), nil, req)
	b := &store.Batch{Settings: []store.Setting{cluster.RequestSetting(req)}, Events: []api.Event{ev}}
	s.adminCommit(w, r, b, http.StatusCreated, req)
}

// validateRequest checks a new request and fills in its defaults. It names the field at
// fault; nothing is stored when it refuses. Callers hold s.mu.
func (s *Server) validateRequest(req *api.Request, id auth.Identity, now time.Time) *api.Error {
	// What the server sets is not the caller's to give.
	req.DecidedBy, req.Decided, req.Note, req.Previous, req.Reservation, req.Nodes, req.Message = "", nil, "", nil, 0, nil, ""
	req.Reason = strings.TrimSpace(req.Reason)
	switch {
	case req.Reason == "":
		return invalid("reason", "is required: say why you need it, for whoever decides")
	case len(req.Reason) > maxReasonLen:
		return invalid("reason", "is %d bytes; at most %d are allowed", len(req.Reason), maxReasonLen)
	case req.For < 0 || time.Duration(req.For)*time.Second > maxGrant:
		return invalid("for_s", "must be between 0 (the default) and %d seconds (a year)", int64(maxGrant/time.Second))
	}
	if req.Team == "" {
		req.Team = s.state.TeamOf(id.User)
	}
	if req.Team != "default" && !s.hasTeam(req.Team) {
		return invalid("team", "unknown team %q", req.Team)
	}
	if !id.Role.AtLeast(auth.RoleOperator) && req.Team != "default" && !slices.Contains(s.state.TeamsOf(id.User), req.Team) {
		return forbidden(id, ruleOwnRequests, "%s may ask only for the teams it belongs to (%s), not team %s", id.User, joinOr(s.state.TeamsOf(id.User), "none"), req.Team)
	}
	switch req.Kind {
	case api.RequestQuota:
		return s.validateQuotaRequest(req)
	case api.RequestQueue:
		return s.validateQueueRequest(req, id)
	case api.RequestReservation:
		return s.validateReservationRequest(req, now)
	}
	return invalid("kind", "%q is not a request kind: use quota, queue or reservation", req.Kind)
}

func (s *Server) validateQuotaRequest(req *api.Request) *api.Error {
	req.Queue, req.GPUs, req.Pool, req.Start, req.End = "", 0, "", nil, nil
	if req.Team == "default" {
		return invalid("team", "the default team has no quota to raise; name a team")
	}
	if req.GPUModel == "" {
		return invalid("gpu_model", "is required: the GPU model whose limit to raise, or * for any")
	}
	have := s.modelGPUs(req.GPUModel)
	if req.Limit < 1 || req.Limit > have {
		return invalid("limit", "must be between 1 and %d, the cluster's GPUs of model %s; got %d", have, req.GPUModel, req.Limit)
	}
	t, _ := s.state.Team(req.Team)
	if q, ok := t.Quotas[req.GPUModel]; ok && q.Limit >= req.Limit {
		return invalid("limit", "team %s's %s limit is already %d; ask for more", req.Team, req.GPUModel, q.Limit)
	}
	if req.For == 0 {
		req.For = int64(defaultQuotaFor / time.Second)
	}
	return nil
}

func (s *Server) validateQueueRequest(req *api.Request, id auth.Identity) *api.Error {
	req.GPUModel, req.Limit, req.GPUs, req.Pool, req.Start, req.End = "", 0, 0, "", nil, nil
	q, ok := s.state.Queue(req.Queue)
	switch {
	case req.Queue == "":
		return invalid("queue", "is required: the restricted queue to submit to")
	case !ok:
		return invalid("queue", "unknown queue %q", req.Queue)
	case len(q.Users) == 0 && len(q.Teams) == 0:
		return invalid("queue", "anyone may submit to queue %s; there is nothing to ask", req.Queue)
	case slices.Contains(q.Users, id.User) || slices.Contains(q.Teams, req.Team):
		return invalid("queue", "%s may already submit to queue %s", id.User, req.Queue)
	}
	if req.For == 0 {
		req.For = int64(defaultQueueFor / time.Second)
	}
	return nil
}

func (s *Server) validateReservationRequest(req *api.Request, now time.Time) *api.Error {
	req.Limit, req.Queue, req.For = 0, "", 0
	if req.GPUModel == "*" {
		req.GPUModel = "" // any model, as a quota says it
	}
	switch {
	case req.GPUs < 1 || req.GPUs > maxGPUs:
		return invalid("gpus", "must be between 1 and %d, got %d", maxGPUs, req.GPUs)
	case req.Start == nil || req.Start.IsZero():
		return invalid("start", "is required")
	case req.End == nil || req.End.IsZero():
		return invalid("end", "is required")
	case req.Start.Before(now):
		return invalid("start", "%s is in the past (now is %s)", req.Start.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	case !req.End.After(*req.Start):
		return invalid("end", "%s is not after the start %s", req.End.UTC().Format(time.RFC3339), req.Start.UTC().Format(time.RFC3339))
	case req.End.Sub(*req.Start) > maxGrant:
		return invalid("end", "a reservation may last at most a year")
	}
	// What the cluster has now, and the reservations already made: a request the cluster
	// cannot hold is refused before anyone is asked to decide it.
	resv := api.Reservation{Team: req.Team, GPUs: req.GPUs, Model: req.GPUModel, Pool: req.Pool, Start: *req.Start, End: *req.End}
	return s.checkCount(&resv)
}

// modelGPUs counts the GPUs of a model ("*": any) on the nodes that are not lost.
// Callers hold s.mu.
func (s *Server) modelGPUs(model string) int {
	n := 0
	for _, node := range s.state.Nodes() {
		if node.State == api.NodeLost {
			continue
		}
		for _, g := range node.GPUs {
			if model == "*" || g.Model == model {
				n++
			}
		}
	}
	return n
}

func (s *Server) handleListRequests(w http.ResponseWriter, r *http.Request) {
	id := caller(r)
	v, e := queryString(r.URL.Query(), "state", 16)
	if e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	state := api.RequestState(v)
	switch state {
	case "", api.RequestPending, api.RequestApproved, api.RequestDenied, api.RequestExpired, api.RequestEnded:
	default:
		writeError(w, http.StatusBadRequest, invalid("state", "%q is not a request state: use pending, approved, denied, expired or ended", state))
		return
	}
	s.mu.Lock()
	all := s.state.Requests()
	s.mu.Unlock()
	out := []api.Request{}
	for _, req := range all {
		if (state == "" || req.State == state) && mayReadRequest(id, req) == nil {
			out = append(out, req)
		}
	}
	writeJSON(w, http.StatusOK, api.RequestList{Requests: out})
}

// mayReadRequest: operators and admins read every request, anyone else their own.
func mayReadRequest(id auth.Identity, req api.Request) *api.Error {
	if id.Role.AtLeast(auth.RoleOperator) || req.User == id.User {
		return nil
	}
	return forbidden(id, ruleOwnRequests, "request %d is %s's; role %s reads only its own requests", req.ID, req.User, id.Role)
}

// requestOf finds the request the URL names and checks that the caller may read it.
// Callers hold s.mu.
func (s *Server) requestOf(w http.ResponseWriter, r *http.Request) (api.Request, bool) {
	n, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || n < 1 {
		writeError(w, http.StatusBadRequest, invalid("id", "%q is not a request ID: request IDs are positive numbers", r.PathValue("id")))
		return api.Request{}, false
	}
	req, ok := s.state.Request(n)
	if !ok {
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Field: "id", Message: fmt.Sprintf("no request %d", n)})
		return api.Request{}, false
	}
	if e := mayReadRequest(caller(r), req); e != nil {
		writeError(w, http.StatusForbidden, e)
		return api.Request{}, false
	}
	return req, true
}

func (s *Server) handleGetRequest(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	req, ok := s.requestOf(w, r)
	s.mu.Unlock()
	if ok {
		writeJSON(w, http.StatusOK, req)
	}
}

func (s *Server) handleApproveRequest(w http.ResponseWriter, r *http.Request) { s.decide(w, r, true) }
func (s *Server) handleDenyRequest(w http.ResponseWriter, r *http.Request)    { s.decide(w, r, false) }

// decide approves or denies a pending request. Approving applies it in the same commit.
func (s *Server) decide(w http.ResponseWriter, r *http.Request, approve bool) {
	var d api.Decision
	if r.ContentLength != 0 {
		if status, e := s.decodeJSON(w, r, &d); e != nil {
			writeError(w, status, e)
			return
		}
	}
	d.Note = strings.TrimSpace(d.Note)
	switch {
	case len(d.Note) > maxReasonLen:
		writeError(w, http.StatusBadRequest, invalid("note", "is %d bytes; at most %d are allowed", len(d.Note), maxReasonLen))
		return
	case !approve && d.Note == "":
		writeError(w, http.StatusBadRequest, invalid("note", "is required to deny: tell the asker why"))
		return
	}
	id := caller(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	req, ok := s.requestOf(w, r)
	if !ok {
		return
	}
	now := s.cfg.Clock.Now()
	switch {
	case req.User == id.User:
		writeError(w, http.StatusForbidden, forbidden(id, "not-own-request",
			"request %d is your own; another operator or admin must decide it", req.ID))
		return
	case req.State != api.RequestPending:
		by := ""
		if req.DecidedBy != "" {
			by = " by " + req.DecidedBy
		}
		writeError(w, http.StatusConflict, &api.Error{Code: api.CodeConflict, Field: "id",
			Message: fmt.Sprintf("request %d is already %s%s", req.ID, req.State, by)})
		return
	case !now.Before(req.Expires):
		writeError(w, http.StatusConflict, &api.Error{Code: api.CodeConflict, Field: "id",
			Message: fmt.Sprintf("request %d expired at %s undecided; ask again", req.ID, req.Expires.UTC().Format(time.RFC3339))})
		return
	}
	before := req
	req.DecidedBy, req.Decided, req.Note = id.User, &now, d.Note
	b := &store.Batch{}
	verb := "denied"
	if approve {
		verb = "approved"
		if e := s.grant(r, b, &req, now); e != nil {
			writeError(w, http.StatusConflict, e)
			return
		}
	} else {
		req.State = api.RequestDenied
	}
	msg := fmt.Sprintf("request %d of %s %s: %s", req.ID, req.User, verb, req.Describe())
	if d.Note != "" {
		msg += ": " + d.Note
	}
	b.Settings = append(b.Settings, cluster.RequestSetting(req))
	b.Events = append(b.Events, withChange(audit(r, now, api.EventRequest, "%s", msg), before, req))
	s.adminCommit(w, r, b, http.StatusOK, req)
}

// grant applies an approved request to b: the raised quota, the queue grant's window, or
// the reservation. It refuses (409) what the cluster no longer allows. Callers hold s.mu.
func (s *Server) grant(r *http.Request, b *store.Batch, req *api.Request, now time.Time) *api.Error {
	req.State = api.RequestApproved
	if req.Kind != api.RequestReservation {
		end := now.Add(time.Duration(req.For) * time.Second)
		req.Start, req.End = &now, &end
	}
	conflict := func(format string, args ...any) *api.Error {
		return &api.Error{Code: api.CodeConflict, Field: "id", Message: fmt.Sprintf(format, args...)}
	}
	switch req.Kind {
	case api.RequestQuota:
		t, ok := s.state.Team(req.Team)
		if !ok {
			return conflict("team %s no longer exists", req.Team)
		}
		old, had := t.Quotas[req.GPUModel]
		if had && old.Limit >= req.Limit {
			return conflict("team %s's %s limit is already %d, not below the %d asked", req.Team, req.GPUModel, old.Limit, req.Limit)
		}
		before := cloneTeam(t)
		if had {
			req.Previous = &old
		}
		if t.Quotas == nil {
			t.Quotas = map[string]api.Quota{}
		}
		// A model the team has no quota of falls under its "*" quota: the raise keeps
		// that guarantee, so it only ever adds.
		base := old
		if !had {
			base = t.Quotas["*"]
		}
		t.Quotas[req.GPUModel] = api.Quota{Guaranteed: min(base.Guaranteed, req.Limit), Limit: req.Limit}
		b.Teams = append(b.Teams, t)
		b.Events = append(b.Events, withChange(audit(r, now, api.EventQuota, "team %s's %s limit raised to %d until %s by request %d",
			req.Team, req.GPUModel, req.Limit, req.End.UTC().Format(time.RFC3339), req.ID), before, t))
		req.Message = fmt.Sprintf("limit raised from %d to %d until %s", old.Limit, req.Limit, req.End.UTC().Format(time.RFC3339))
	case api.RequestQueue:
		req.Message = fmt.Sprintf("%s may submit to queue %s until %s", req.User, req.Queue, req.End.UTC().Format(time.RFC3339))
	case api.RequestReservation:
		if !req.End.After(now) {
			return conflict("the reservation asked for ended at %s", req.End.UTC().Format(time.RFC3339))
		}
		resv, e := s.reserveForRequest(*req)
		if e != nil {
			return e
		}
		b.Reservations = append(b.Reservations, resv)
		b.Events = append(b.Events, withChange(audit(r, now, api.EventReservation, "%s",
			describeReservation(resv, fmt.Sprintf(" by request %d", req.ID))), nil, resv))
		req.Reservation = resv.ID
		req.Message = fmt.Sprintf("reservation %d holds %d %s for team %s from %s until %s", resv.ID, resv.GPUs, scopeName(resv.Model, resv.Pool),
			resv.Team, resv.Start.UTC().Format(time.RFC3339), resv.End.UTC().Format(time.RFC3339))
	}
	return nil
}

// reserveForRequest turns a request for a number of GPUs into a reservation by GPU count
// of the model and pool asked: the scheduler keeps that many free for the team during the
// window, on whichever nodes. It refuses (409) what the cluster, with the reservations made
// since the request was filed, can no longer hold. Callers hold s.mu.
func (s *Server) reserveForRequest(req api.Request) (api.Reservation, *api.Error) {
	resv := api.Reservation{ID: s.state.NextReservationID(), Name: "request-" + strconv.FormatInt(req.ID, 10), Team: req.Team,
		GPUs: req.GPUs, Model: req.GPUModel, Pool: req.Pool, Start: *req.Start, End: *req.End}
	if e := s.checkCount(&resv); e != nil {
		// Whatever the field, it is the cluster that changed, not the request.
		return api.Reservation{}, &api.Error{Code: api.CodeConflict, Field: e.Field, Message: e.Message}
	}
	return resv, nil
}

func cloneTeam(t api.Team) api.Team {
	c := t
	c.Quotas = map[string]api.Quota{}
	for k, v := range t.Quotas {
		c.Quotas[k] = v
	}
	return c
}

// expireRequests, run by each scheduling cycle, expires the requests nobody decided in
// time and ends the grants whose end has come: a raised quota goes back to what it was,
// unless someone has changed it since. Callers hold s.mu.
func (s *Server) expireRequests(b *store.Batch, now time.Time) {
	teams := map[string]api.Team{} // changed in this batch
	for _, req := range s.state.OpenRequests() {
		before := req
		switch {
		case req.State == api.RequestPending && !now.Before(req.Expires):
			req.State = api.RequestExpired
			req.Message = "nobody decided it before " + req.Expires.UTC().Format(time.RFC3339)
		case req.State == api.RequestApproved && req.End != nil && !now.Before(*req.End):
			req.State = api.RequestEnded
			req.Message = s.endGrant(b, teams, req, now)
		default:
			continue
		}
		b.Settings = append(b.Settings, cluster.RequestSetting(req))
		b.Events = append(b.Events, withChange(api.Event{Time: now, Actor: "scheduler", Kind: api.EventRequest,
			Message: fmt.Sprintf("request %d of %s %s: %s: %s", req.ID, req.User, req.State, req.Describe(), req.Message)}, before, req))
	}
	for _, name := range sortedTeamNames(teams) {
		b.Teams = append(b.Teams, teams[name])
	}
}

// endGrant undoes what an approved request applied, into b, and says what it did.
func (s *Server) endGrant(b *store.Batch, teams map[string]api.Team, req api.Request, now time.Time) string {
	switch req.Kind {
	case api.RequestQuota:
		t, ok := teams[req.Team]
		if !ok {
			if t, ok = s.state.Team(req.Team); !ok {
				return "team " + req.Team + " no longer exists"
			}
			t = cloneTeam(t)
		}
		if cur, ok := t.Quotas[req.GPUModel]; !ok || cur.Limit != req.Limit {
			return fmt.Sprintf("team %s's %s quota was changed since; left as it is", req.Team, req.GPUModel)
		}
		before := cloneTeam(t)
		if req.Previous != nil {
			t.Quotas[req.GPUModel] = *req.Previous
		} else {
			delete(t.Quotas, req.GPUModel)
		}
		teams[req.Team] = t
		b.Events = append(b.Events, withChange(api.Event{Time: now, Actor: "scheduler", Kind: api.EventQuota,
			Message: fmt.Sprintf("team %s's %s limit back from %d at the end of request %d", req.Team, req.GPUModel, req.Limit, req.ID)}, before, t))
		if req.Previous != nil {
			return fmt.Sprintf("limit back to %d", req.Previous.Limit)
		}
		return "raised quota removed"
	case api.RequestQueue:
		return fmt.Sprintf("%s may no longer submit to queue %s", req.User, req.Queue)
	}
	return fmt.Sprintf("reservation %d ended", req.Reservation)
}

func sortedTeamNames(m map[string]api.Team) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// notifyRequests tells the webhooks that asked for "request" of each request the batch
// stores: the asker's and their team's, and for a request filed, those of the operators
// and admins who may decide it. Callers hold s.mu.
func (s *Server) notifyRequests(b *store.Batch) {
	var settings *api.Notifications
	for _, st := range b.Settings {
		req, ok := cluster.RequestOf(st)
		if !ok {
			continue
		}
		lists := [][]api.Notify{}
		if u, ok := s.state.User(req.User); ok {
			lists = append(lists, u.Notify)
		}
		if t, ok := s.state.Team(req.Team); ok {
			lists = append(lists, t.Notify)
		}
		if req.State == api.RequestPending {
			for _, u := range s.state.Users() {
				if auth.Role(u.Role).AtLeast(auth.RoleOperator) && u.Name != req.User {
					lists = append(lists, u.Notify)
				}
			}
		}
		var urls []string
		for _, list := range lists {
			for _, n := range list {
				if slices.Contains(n.Events, api.NotifyRequest) && !slices.Contains(urls, n.URL) {
					urls = append(urls, n.URL)
				}
			}
		}
		if len(urls) == 0 {
			continue
		}
		if settings == nil {
			n := notifySettings(s.state)
			settings = &n
		}
		msg := fmt.Sprintf("request %d of %s is %s: %s", req.ID, req.User, req.State, req.Describe())
		n := api.Notification{ID: newNotificationID(), Time: s.cfg.Clock.Now(), Event: api.NotifyRequest, Cluster: s.clusterID,
			Message: msg, Request: &req}
		body, _ := json.Marshal(n) // plain data: it always marshals
		for _, u := range urls {
			if !allowedURL(u, settings.URLPrefixes) {
				s.log.Warn("webhook not sent: its URL is outside the cluster's url_prefixes", "request", req.ID)
				continue
			}
			s.notifier.q.Enqueue(notify.Delivery{ID: n.ID, Event: api.NotifyRequest, URL: u, Body: body, Secret: settings.Secret})
		}
	}
}
