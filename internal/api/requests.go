package api

import (
	"fmt"
	"time"
)

// Request is a member's ask for something only an operator or admin may grant: a raise of
// a team's quota limit, use of a restricted queue, or GPUs reserved for a team. An
// operator or admin other than the one who asked approves or denies it; an approved
// request applies at once and undoes itself at its end.
type Request struct {
	ID   int64       `json:"id"`
	Kind RequestKind `json:"kind"`
	// User asked; Team is the team it is for (the quota's or reservation's team, the
	// user's team for a queue).
	User  string       `json:"user"`
	Team  string       `json:"team"`
	State RequestState `json:"state"`
	// Reason is why the user asks, in their words.
	Reason string `json:"reason"`
	// Created is when it was asked; Expires, when it expires if nobody decides it.
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`

	// GPUModel and Limit: a quota raise to Limit GPUs of the model ("*" for any model);
	// for a reservation, the model its GPUs must be ("" for any).
	GPUModel string `json:"gpu_model,omitempty"`
	Limit    int    `json:"limit,omitempty"`
	// Queue is the restricted queue asked for.
	Queue string `json:"queue,omitempty"`
	// GPUs is the number of GPUs a reservation asks for, and Pool the pool they must be
	// in ("": any).
	GPUs int    `json:"gpus,omitempty"`
	Pool string `json:"pool,omitempty"`
	// For is how long a quota raise or queue grant lasts from its approval, in seconds.
	For int64 `json:"for_s,omitempty"`
	// Start and End bound a reservation; for a quota raise or a queue grant they are set
	// at approval (approval, approval + For).
	Start *time.Time `json:"start,omitempty"`
	End   *time.Time `json:"end,omitempty"`

	// DecidedBy, Decided and Note record the decision.
	DecidedBy string     `json:"decided_by,omitempty"`
	Decided   *time.Time `json:"decided,omitempty"`
	Note      string     `json:"note,omitempty"`
	// Previous is the team's quota for the model before an approved raise, restored when
	// the raise ends (nil: the team had no quota of that model).
	Previous *Quota `json:"previous,omitempty"`
	// Reservation is the ID of the reservation an approved reservation request made, a
	// reservation by GPU count. Nodes are the nodes it holds, for a reservation granted
	// as whole nodes before reservations by count existed.
	Reservation int64    `json:"reservation,omitempty"`
	Nodes       []string `json:"nodes,omitempty"`
	// Message says what applying or ending the grant did.
	Message string `json:"message,omitempty"`
}

// RequestKind is what a Request asks for.
type RequestKind string

// Request kinds.
const (
	RequestQuota       RequestKind = "quota"
	RequestQueue       RequestKind = "queue"
	RequestReservation RequestKind = "reservation"
)

// RequestState is where a Request stands. Pending is the only state a decision leaves;
// approved becomes ended at the grant's end.
type RequestState string

// Request states.
const (
	RequestPending  RequestState = "pending"
	RequestApproved RequestState = "approved"
	RequestDenied   RequestState = "denied"
	RequestExpired  RequestState = "expired"
	RequestEnded    RequestState = "ended"
)

// RequestList is the answer to GET /api/v1/requests.
type RequestList struct {
	Requests []Request `json:"requests"`
}

// Decision is the body of POST /api/v1/requests/{id}/approve and /deny.
type Decision struct {
	Note string `json:"note,omitempty"`
}

// Describe says in a few words what r asks for.
func (r Request) Describe() string {
	switch r.Kind {
	case RequestQuota:
		return fmt.Sprintf("raise team %s's %s limit to %d GPUs", r.Team, r.GPUModel, r.Limit)
	case RequestQueue:
		return fmt.Sprintf("let %s submit to queue %s", r.User, r.Queue)
	case RequestReservation:
		model := r.GPUModel
		if model == "" {
			model = "any"
		}
		if r.Pool != "" {
			return fmt.Sprintf("reserve %d GPUs (model %s, pool %s) for team %s", r.GPUs, model, r.Pool, r.Team)
		}
		return fmt.Sprintf("reserve %d GPUs (model %s) for team %s", r.GPUs, model, r.Team)
	}
	return string(r.Kind)
}
