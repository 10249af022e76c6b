package cluster

import (
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/batch"
)

// Requests (api.Request) are kept as settings, one per request, named by requestPrefix and
// the request's ID: a request is a small JSON value written whole at each step, exactly
// what a setting is, and settings already commit, load, back up and copy on both stores.
const requestPrefix = "request/"

// RequestSetting is the setting that stores r.
func RequestSetting(r api.Request) batch.Setting {
	data, _ := json.Marshal(r) // plain data: it always marshals
	return batch.Setting{Name: requestPrefix + strconv.FormatInt(r.ID, 10), Data: data}
}

// RequestOf decodes the request a setting stores; ok is false for any other setting.
func RequestOf(st batch.Setting) (api.Request, bool) {
	if !strings.HasPrefix(st.Name, requestPrefix) {
		return api.Request{}, false
	}
	var r api.Request
	if json.Unmarshal(st.Data, &r) != nil || r.ID < 1 {
		return api.Request{}, false
	}
	return r, true
}

// applyRequest keeps the decoded copy of a request setting.
func (id *identity) applyRequest(st batch.Setting) {
	r, ok := RequestOf(st)
	if !ok {
		return
	}
	id.requests[r.ID] = r
	if r.State == api.RequestPending || r.State == api.RequestApproved {
		id.open[r.ID] = true
	} else {
		delete(id.open, r.ID)
	}
}

// Requests returns every request, ordered by ID.
func (s *State) Requests() []api.Request {
	out := make([]api.Request, 0, len(s.id.requests))
	for _, r := range s.id.requests {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b api.Request) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// OpenRequests returns the requests pending or approved, ordered by ID: those a decision,
// an expiry or an end may still change.
func (s *State) OpenRequests() []api.Request {
	out := make([]api.Request, 0, len(s.id.open))
	for id := range s.id.open {
		out = append(out, s.id.requests[id])
	}
	slices.SortFunc(out, func(a, b api.Request) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Request returns the request with the ID.
func (s *State) Request(id int64) (api.Request, bool) {
	r, ok := s.id.requests[id]
	return r, ok
}

// NextRequestID is the ID the next request gets.
func (s *State) NextRequestID() int64 {
	var top int64
	for id := range s.id.requests {
		top = max(top, id)
	}
	return top + 1
}

// QueueGrant reports whether the user holds an approved grant to submit to the queue.
// A grant holds until the scheduling loop marks it ended at its end time.
func (s *State) QueueGrant(user, queue string) bool {
	for _, r := range s.OpenRequests() {
		if r.Kind == api.RequestQueue && r.State == api.RequestApproved && r.User == user && r.Queue == queue {
			return true
		}
	}
	return false
}
