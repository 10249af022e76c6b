package server

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/notify"
	"github.com/rotahq/rota/internal/store"
)

// Webhook notifications (docs/notifications.md). A committed batch is read for what
// happened to jobs; each happening is announced to the webhooks of the job, of its user
// and of its team that asked for it, through a bounded queue (internal/notify) that sends
// in the background. The commit path only queues: an endpoint that hangs or fails delays
// nothing but its own deliveries.

// settingNotifications is the store setting that holds the cluster's api.Notifications.
const settingNotifications = "notifications"

// defaultNotifyEvents are the events of a webhook that names none.
var defaultNotifyEvents = []string{api.NotifyStarted, api.NotifyEnded, api.NotifyPreempted, api.NotifyIdleWarning, api.NotifyNodeLost}

// notifySettings returns the cluster's webhook settings.
func notifySettings(st *cluster.State) api.Notifications {
	var n api.Notifications
	if data, ok := st.Setting(settingNotifications); ok {
		// Validated before it was stored; one that does not decode means no settings.
		_ = json.Unmarshal(data, &n)
	}
	return n
}

// notifier delivers webhooks in the background.
type notifier struct {
	q *notify.Queue
}

func newNotifier(s *Server) *notifier {
	return &notifier{q: notify.New(notify.Options{Logger: s.log, Count: s.countWebhook})}
}

// countWebhook counts a delivery's fate in /metrics: a delivery given up counts as dropped,
// like one that found the queue full, since neither reached its endpoint.
func (s *Server) countWebhook(o notify.Outcome) {
	switch o {
	case notify.Delivered:
		s.metrics.webhookDelivered()
	case notify.Retried:
		s.metrics.webhookRetried()
	case notify.Dropped, notify.Failed:
		s.metrics.webhookDropped()
	}
}

// close stops the deliveries; those still queued are lost.
func (n *notifier) close() {
	if n != nil {
		n.q.Close()
	}
}

// notice is one thing that happened to a job that webhooks may be told of. Events are the
// names it may go out under, most specific first: a job that failed goes out as "failed"
// to a webhook that asked for failures, as "ended" to one that asked for ends only.
type notice struct {
	ev     api.Event
	events []string
	node   string
}

// notices returns what ev announces: a job started, ended, was preempted or lost its node,
// or holds GPUs idle. One event may announce two things: a job that failed because its
// node was lost both lost its node and ended. b is the batch ev came in, for the node.
func notices(ev api.Event, b *store.Batch) []notice {
	var out []notice
	switch {
	case ev.Kind == api.EventIdle && ev.Reason == "":
		// The warning; an idle event with a reason is the stop, announced when the job ends.
		return []notice{{ev: ev, events: []string{api.NotifyIdleWarning}}}
	case ev.Kind != api.EventTransition:
		return nil
	}
	if ev.Reason == api.ReasonNodeLost {
		out = append(out, notice{ev: ev, events: []string{api.NotifyNodeLost}, node: lostNode(ev, b)})
	}
	switch {
	case ev.To == api.StateRunning:
		out = append(out, notice{ev: ev, events: []string{api.NotifyStarted}})
	case ev.To == api.StateSucceeded:
		out = append(out, notice{ev: ev, events: []string{api.NotifySucceeded, api.NotifyEnded}})
	case ev.To == api.StateFailed:
		out = append(out, notice{ev: ev, events: []string{api.NotifyFailed, api.NotifyEnded}})
	case ev.To.Terminal():
		out = append(out, notice{ev: ev, events: []string{api.NotifyEnded}})
	case ev.To == api.StatePending && ev.Reason == api.ReasonPreempted:
		// Announced when the job has stopped and is requeued, not when the scheduler asks
		// for it (the preempt event): a job that finishes within its grace was not preempted.
		out = append(out, notice{ev: ev, events: []string{api.NotifyPreempted}})
	}
	return out
}

// lostNode names the node whose loss ended ev's attempt, from the attempt in b.
func lostNode(ev api.Event, b *store.Batch) string {
	for _, a := range b.Attempts {
		if a.JobID != ev.JobID || a.N != ev.Attempt {
			continue
		}
		for _, p := range a.Placements {
			if p.Reason == api.ReasonNodeLost {
				return p.Node
			}
		}
	}
	return ""
}

// notifyCommitted queues the notifications a committed batch calls for. It never blocks:
// it reads memory and queues, and the queue drops what does not fit. Callers hold s.mu.
func (s *Server) notifyCommitted(b *store.Batch) {
	if s.notifier == nil {
		return // commits made while the server starts, before it sends anything
	}
	s.notifyRequests(b)
	var settings *api.Notifications
	for _, ev := range b.Events {
		for _, nt := range notices(ev, b) {
			job, ok := s.state.Job(ev.JobID)
			if !ok {
				continue
			}
			hooks := s.webhooksOf(job)
			if len(hooks) == 0 {
				continue
			}
			if settings == nil {
				n := notifySettings(s.state)
				settings = &n
			}
			s.announce(job, nt, hooks, *settings)
		}
	}
}

// webhook is one URL to tell, and the events it asked for.
type webhook struct {
	url    string
	events []string
}

// webhooksOf gathers the webhooks of a job, of its user and of its team, each URL once
// with the events it was given anywhere.
func (s *Server) webhooksOf(job api.Job) []webhook {
	lists := [][]api.Notify{job.Spec.Notify}
	if u, ok := s.state.User(job.Spec.User); ok {
		lists = append(lists, u.Notify)
	}
	if t, ok := s.state.Team(job.Spec.Team); ok {
		lists = append(lists, t.Notify)
	}
	var out []webhook
	for _, list := range lists {
		for _, n := range list {
			events := n.Events
			if len(events) == 0 {
				events = defaultNotifyEvents
			}
			i := slices.IndexFunc(out, func(w webhook) bool { return w.url == n.URL })
			if i < 0 {
				out = append(out, webhook{url: n.URL})
				i = len(out) - 1
			}
			for _, e := range events {
				if !slices.Contains(out[i].events, e) {
					out[i].events = append(out[i].events, e)
				}
			}
		}
	}
	return out
}

// announce queues nt to every webhook that asked for one of its events, under the most
// specific of them. Webhooks told under the same name share one notification, and so its ID.
func (s *Server) announce(job api.Job, nt notice, hooks []webhook, settings api.Notifications) {
	bodies := map[string]notification{}
	for _, h := range hooks {
		i := slices.IndexFunc(nt.events, func(e string) bool { return slices.Contains(h.events, e) })
		if i < 0 {
			continue
		}
		// Checked again as it goes: the allowed prefixes may have narrowed since the URL
		// was set.
		if !allowedURL(h.url, settings.URLPrefixes) {
			s.log.Warn("webhook not sent: its URL is outside the cluster's url_prefixes", "job", job.ID, "user", job.Spec.User)
			continue
		}
		event := nt.events[i]
		n, ok := bodies[event]
		if !ok {
			n = s.notification(job, nt, event)
			bodies[event] = n
		}
		s.notifier.q.Enqueue(notify.Delivery{ID: n.id, Event: event, URL: h.url, Body: n.body, Secret: settings.Secret})
	}
}

// notification is a Notification ready to send: its ID and its JSON.
type notification struct {
	id   string
	body []byte
}

// notification builds the body announcing nt as event.
func (s *Server) notification(job api.Job, nt notice, event string) notification {
	state := job.State
	if nt.ev.To != "" {
		// The state the event moved the job to: a later event of the same batch may
		// have moved it on.
		state = nt.ev.To
	}
	n := api.Notification{
		ID: newNotificationID(), Time: nt.ev.Time, Event: event, Cluster: s.clusterID, Node: nt.node, Message: nt.ev.Message,
		Job: &api.NotificationJob{
			ID: job.ID, Name: job.Spec.Name, User: job.Spec.User, Team: job.Spec.Team, Queue: job.Spec.Queue,
			State: state, Reason: nt.ev.Reason, Message: nt.ev.Message, Attempt: nt.ev.Attempt,
			ExitCode: job.ExitCode, Nodes: job.Nodes,
		},
	}
	body, _ := json.Marshal(n) // plain data: it always marshals
	return notification{id: n.ID, body: body}
}

// newNotificationID returns a random ID for one notification.
func newNotificationID() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// allowedURL reports whether url is under one of prefixes; no prefixes allow every URL.
func allowedURL(url string, prefixes []string) bool {
	return len(prefixes) == 0 || slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(url, p) })
}

// handlePutUserNotify sets a user's default webhooks: the user themself or an admin. The
// body is the whole list; an empty one clears it.
func (s *Server) handlePutUserNotify(w http.ResponseWriter, r *http.Request) {
	var list []api.Notify
	if status, e := s.decodeJSON(w, r, &list); e != nil {
		writeError(w, status, e)
		return
	}
	name := r.PathValue("name")
	id := caller(r)
	if id.User != name && id.Role != auth.RoleAdmin {
		writeError(w, http.StatusForbidden, forbidden(id, "user.notify", "only %s or an admin may set %s's webhooks", name, name))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.state.User(name)
	if !ok {
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Field: "name", Message: "no user " + name + "; an admin adds users (rota admin user add)"})
		return
	}
	if e := validateNotify("notify", list, notifySettings(s.state).URLPrefixes); e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	before := u
	u.Notify = list
	if len(list) == 0 {
		u.Notify = nil
	}
	ev := withChange(audit(r, s.cfg.Clock.Now(), api.EventUser, "set the webhooks of user %s (%d)", name, len(u.Notify)), before, u)
	s.adminCommit(w, r, &store.Batch{Users: []api.User{u}, Events: []api.Event{ev}}, http.StatusOK, u)
}
