package api

import "time"

// ClusterStatus is what GET /api/v1/status answers: which servers there are, which one
// leads, in which term, and on what store.
type ClusterStatus struct {
	// Store is the store's kind: "sqlite" or "postgres".
	Store string `json:"store"`
	// Lease is true when the servers elect a leader through the store (PostgreSQL); a
	// SQLite store serves one server, which is always the leader.
	Lease bool `json:"lease"`
	// Term is the current leader term (0 without a lease). LeaderURL is where the leader
	// serves the API; LeaderHeld is false between a leader's loss and its successor's start.
	Term       int64  `json:"term"`
	LeaderURL  string `json:"leader_url"`
	LeaderHeld bool   `json:"leader_held"`
	// LeaderSince is when the current term began (omitted without a lease).
	LeaderSince *time.Time `json:"leader_since,omitempty"`
	// Answered is the ID of the server that answered, and whether it leads.
	Answered         string `json:"answered"`
	AnsweredIsLeader bool   `json:"answered_is_leader"`
	// Replicas are the servers heard from recently, ordered by ID.
	Replicas []Replica `json:"replicas"`
	// Problems are what the server that answered finds wrong with itself and needs an
	// operator, such as a disk too full to take more job logs; empty when none.
	Problems []string `json:"problems,omitempty"`
}

// Replica is one server of the cluster.
type Replica struct {
	ID      string    `json:"id"`
	Host    string    `json:"host"`
	URL     string    `json:"url"`
	Started time.Time `json:"started"`
	Seen    time.Time `json:"seen"`
	Leader  bool      `json:"leader"`
}

// LeaderHeader is set on the 503 a standby server answers with: the URL of the leader to
// send the request to instead, when the standby knows it.
const LeaderHeader = "Rota-Leader"

// ForwardedByHeader is set by a standby on a request it forwards to the leader: its own
// replica ID. A standby never forwards a request that carries it (so a request goes round
// no loop of servers that each take another for the leader); it proves nothing about
// who sent the request, and no server reads an identity from it.
const ForwardedByHeader = "Rota-Forwarded-By"
