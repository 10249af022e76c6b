package server

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
)

// Maintenance: an operator drains a node now or plans a window ahead, with a reason, and
// may say when the node comes back. Before a planned window opens, the scheduler lets a
// job start on the node only if its time limit ends it by the window's start (the window
// travels in the snapshot); once it opens, the cycle drains the node; when it ends, the
// cycle returns the node to service. The window is stored with the node, so a restart
// keeps it, and every step is an audit event.

// Bounds on a drain request.
const (
	// drainPastTolerance lets --at lie a little in the past (clocks differ, a command
	// takes time to type): such a window starts now.
	drainPastTolerance = 5 * time.Minute
	// drainAhead is how far ahead a window may be planned.
	drainAhead = 366 * 24 * time.Hour
)

// handleDrain stops new work on a node at once, or plans a maintenance window: its
// running jobs finish, then it is DRAINED. Without a body it drains now, with no reason
// given, until resumed.
func (s *Server) handleDrain(w http.ResponseWriter, r *http.Request) {
	var req api.DrainRequest
	if status, e := s.decodeOptionalJSON(w, r, &req); e != nil {
		writeError(w, status, e)
		return
	}
	name := r.PathValue("name")
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Clock.Now()
	m, e := checkDrain(req, now)
	if e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	m.By = caller(r).User
	n, ok := s.state.Node(name)
	if !ok {
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Field: "name", Message: "no node " + name})
		return
	}
	draining := n.State == api.NodeDraining || n.State == api.NodeDrained
	planned := m.Start.After(now)
	switch {
	case planned && draining:
		writeError(w, http.StatusConflict, &api.Error{Code: api.CodeConflict, Field: "at", Message: fmt.Sprintf(
			"node %s is %s already: a window cannot be planned ahead on it; resume it first, or drain it without --at to change the reason or end", name, n.State)})
		return
	case draining && n.Maintenance == nil && req == (api.DrainRequest{}):
		// A bare drain of a node drained by other means (a failed health check) changes
		// nothing, as it always has.
		writeJSON(w, http.StatusOK, n)
		return
	case draining && n.Maintenance != nil:
		m.Start = n.Maintenance.Start // the window opened then; only its reason and end change
	}
	before := n.Maintenance
	from := n.State
	n.Maintenance = &m
	if !planned && !draining {
		n.State = api.NodeDraining
	}
	ev := withChange(audit(r, now, api.EventDrain, "drain node %s: %s -> %s: %s", name, from, n.State, describeWindow(m, now)), before, n.Maintenance)
	ev.Node = name
	s.adminCommit(w, r, &store.Batch{Nodes: []api.Node{n}, Events: []api.Event{ev}}, http.StatusOK, n)
}

// handleResume lets jobs start on a drained or draining node again, or cancels a window
// planned on a node that is still ready.
func (s *Server) handleResume(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.state.Node(name)
	if !ok {
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Field: "name", Message: "no node " + name})
		return
	}
	draining := n.State == api.NodeDraining || n.State == api.NodeDrained
	if !draining && n.Maintenance == nil {
		writeError(w, http.StatusConflict, &api.Error{Code: api.CodeConflict, Field: "name", Message: fmt.Sprintf("node %s is %s, not draining or drained, and has no maintenance planned", name, n.State)})
		return
	}
	now := s.cfg.Clock.Now()
	from, before := n.State, n.Maintenance
	msg := fmt.Sprintf("resume node %s: %s -> %s", name, from, api.NodeReady)
	if draining {
		n.State = api.NodeReady
	} else {
		msg = fmt.Sprintf("resume node %s: planned maintenance cancelled (%s)", name, describeWindow(*before, now))
	}
	n.Maintenance = nil
	// An operator's resume overrides a drain for version drift: the node is not returned
	// to service again, nor drained again, until it has been back in range.
	n.DriftDrain = false
	ev := withChange(audit(r, now, api.EventDrain, "%s", msg), before, nil)
	ev.Node = name
	s.adminCommit(w, r, &store.Batch{Nodes: []api.Node{n}, Events: []api.Event{ev}}, http.StatusOK, n)
}

// checkDrain validates a drain request and turns it into a window from now or from At.
func checkDrain(req api.DrainRequest, now time.Time) (api.Maintenance, *api.Error) {
	m := api.Maintenance{Reason: strings.TrimSpace(req.Reason), Start: now}
	switch {
	case !utf8.ValidString(m.Reason):
		return m, invalid("reason", "must be UTF-8 text")
	case utf8.RuneCountInString(m.Reason) > api.MaxDrainReason:
		return m, invalid("reason", "is %d characters long; at most %d are allowed", utf8.RuneCountInString(m.Reason), api.MaxDrainReason)
	case strings.IndexFunc(m.Reason, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		// Control and format characters (a newline, an escape, a right-to-left override)
		// would forge lines or reorder text wherever the reason is shown.
		return m, invalid("reason", "must be one line of printable text, without control or format characters")
	case m.Reason == "":
		m.Reason = api.DefaultDrainReason
	}
	if req.At != nil {
		switch at := req.At.UTC(); {
		case at.Before(now.Add(-drainPastTolerance)):
			return m, invalid("at", "%s is in the past: a window starts now (leave at out) or later", at.Format(time.RFC3339))
		case at.After(now.Add(drainAhead)):
			return m, invalid("at", "%s is more than %d days ahead", at.Format(time.RFC3339), int(drainAhead.Hours()/24))
		case at.After(now):
			m.Start = at
		}
	}
	if req.Until != nil {
		until := req.Until.UTC()
		if !until.After(m.Start) {
			return m, invalid("until", "%s is not after the window's start %s: a window must end after it starts", until.Format(time.RFC3339), m.Start.UTC().Format(time.RFC3339))
		}
		if until.After(m.Start.Add(drainAhead)) {
			return m, invalid("until", "%s is more than %d days after the window's start; leave until out for a window that lasts until resume", until.Format(time.RFC3339), int(drainAhead.Hours()/24))
		}
		m.End = &until
	}
	m.Start = m.Start.UTC()
	return m, nil
}

// describeWindow says what a window is, for events: "BIOS update; from ... until ...".
func describeWindow(m api.Maintenance, now time.Time) string {
	var b strings.Builder
	b.WriteString(m.Reason)
	if m.Start.After(now) {
		b.WriteString("; planned from " + m.Start.UTC().Format(time.RFC3339))
	}
	if m.End != nil {
		b.WriteString("; until " + m.End.UTC().Format(time.RFC3339))
	} else {
		b.WriteString("; until resumed")
	}
	return b.String()
}

// decodeOptionalJSON is decodeJSON for a body that may be left out: an empty body leaves v
// as it is.
func (s *Server) decodeOptionalJSON(w http.ResponseWriter, r *http.Request, v any) (int, *api.Error) {
	s.mu.Lock()
	limit := s.state.Limits().MaxBodyBytes
	s.mu.Unlock()
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		return decodeJSON(w, r, v, limit) // reports the error as for any body
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return 0, nil
	}
	// A body must say it is JSON: no page in a browser can then send one cross-origin.
	if e := checkContentType(r, jsonBody); e != nil {
		return http.StatusUnsupportedMediaType, e
	}
	r.Body = io.NopCloser(bytes.NewReader(data))
	return decodeJSON(w, r, v, limit)
}

// maintenanceWindows opens and closes the nodes' maintenance windows: a node whose window
// has started and that is ready again (planned, or back from not-ready) drains; a node
// whose window has ended returns to service, unless it is not ready or lost, which the
// heartbeats decide. It runs after finishDrains and starts from the nodes that already
// changed in b, since the last change of a node in a batch is the one stored.
func (s *Server) maintenanceWindows(b *store.Batch, now time.Time) {
	changed := map[string]int{}
	for i := range b.Nodes {
		changed[b.Nodes[i].Name] = i
	}
	for _, n := range s.state.NodesWhere(func(n *api.Node) bool { return n.Maintenance != nil }) {
		if i, ok := changed[n.Name]; ok {
			n = b.Nodes[i]
		}
		m := n.Maintenance
		switch {
		case m == nil:
			continue
		case m.End != nil && !now.Before(*m.End):
			from := n.State
			if n.State == api.NodeDraining || n.State == api.NodeDrained {
				n.State = api.NodeReady
			}
			n.Maintenance = nil
			ev := withChange(api.Event{Time: now, Actor: "scheduler", Kind: api.EventDrain, Node: n.Name,
				Message: fmt.Sprintf("node %s: %s -> %s: maintenance window ended (%s)", n.Name, from, n.State, m.Reason)}, m, nil)
			b.Nodes, b.Events = append(b.Nodes, n), append(b.Events, ev)
		case !now.Before(m.Start) && n.State == api.NodeReady:
			n.State = api.NodeDraining
			b.Nodes = append(b.Nodes, n)
			b.Events = append(b.Events, api.Event{Time: now, Actor: "scheduler", Kind: api.EventDrain, Node: n.Name,
				Message: fmt.Sprintf("node %s: READY -> DRAINING: maintenance window opened (%s)", n.Name, describeWindow(*m, now))})
		}
	}
}
