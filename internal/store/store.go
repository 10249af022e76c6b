package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// Store persists rota's state. One leader writes; every change reaches the store in a Batch
// that commits whole or not at all, before the change is acknowledged to anyone.
type Store interface {
	// Commit applies the batch in one transaction. Jobs, attempts, nodes, queues, teams and
	// reservations are upserted by key, and deleted by key as the batch says; events are
	// appended and get their IDs from the store.
	Commit(ctx context.Context, b *Batch) error
	// LoadJobs returns every job, ordered by ID.
	LoadJobs(ctx context.Context) ([]api.Job, error)
	// LoadAttempts returns every attempt, ordered by job ID then attempt number.
	LoadAttempts(ctx context.Context) ([]api.Attempt, error)
	// LoadNodes returns every node ever registered, ordered by name.
	LoadNodes(ctx context.Context) ([]api.Node, error)
	// LoadQueues returns the queues saved by Commit, ordered by name.
	LoadQueues(ctx context.Context) ([]api.Queue, error)
	// LoadTeams returns the teams saved by Commit, ordered by name. The fields the API fills
	// in from the live state (UsageGPUHours, GPUsInUse) are not stored and come back zero.
	LoadTeams(ctx context.Context) ([]api.Team, error)
	// LoadReservations returns the reservations saved by Commit, ordered by ID.
	LoadReservations(ctx context.Context) ([]api.Reservation, error)
	// LoadSettings returns every setting saved by Commit, by name.
	LoadSettings(ctx context.Context) (map[string]json.RawMessage, error)
	// LoadUsers returns the users, ordered by name (Teams, which the API fills in from
	// team membership, comes back empty).
	LoadUsers(ctx context.Context) ([]api.User, error)
	// LoadTokens returns every API token record, revoked and expired ones included,
	// ordered by ID.
	LoadTokens(ctx context.Context) ([]TokenRecord, error)
	// LoadJoinTokens returns every join token record, ordered by ID.
	LoadJoinTokens(ctx context.Context) ([]JoinTokenRecord, error)
	// LoadNodeCerts returns the certificate each node may use, ordered by node.
	LoadNodeCerts(ctx context.Context) ([]NodeCert, error)
	// LoadIdempotency returns the submit keys created at or after since.
	LoadIdempotency(ctx context.Context, since time.Time) ([]IdempotencyRecord, error)
	// Events returns events matching f, ordered by ID.
	Events(ctx context.Context, f EventFilter) ([]api.Event, error)
	// Close releases the store's resources.
	Close() error
}

// Batch is a set of changes that commit together.
//
// A key given more than once is upserted as the last of its rows, as if the rows were
// applied in order. Deletes apply after the upserts, so a key that a batch both upserts
// and deletes ends deleted. Deleting a key that is not stored is not an error.
type Batch struct {
	Jobs         []api.Job
	Attempts     []api.Attempt
	Nodes        []api.Node
	Queues       []api.Queue
	Teams        []api.Team
	Reservations []api.Reservation
	Events       []api.Event

	Settings   []Setting
	Users      []api.User
	Tokens     []TokenRecord
	JoinTokens []JoinTokenRecord
	NodeCerts  []NodeCert
	// Idempotency records are inserted; a key already stored for the user is an error.
	Idempotency []IdempotencyRecord

	// DeleteQueues and DeleteTeams name the queues and teams to delete.
	DeleteQueues []string
	DeleteTeams  []string
	// DeleteReservations holds the IDs of the reservations to delete.
	DeleteReservations []int64
	// DeleteUsers and DeleteNodes name users and nodes to delete; deleting a node deletes
	// its certificate record too.
	DeleteUsers []string
	DeleteNodes []string
	// PruneIdempotency, when not zero, deletes the submit keys created before it.
	PruneIdempotency time.Time
}

// Setting is one named group of settings, stored as JSON.
type Setting struct {
	Name string
	Data json.RawMessage
}

// TokenRecord is an API token as stored: its description and the hash of the token,
// never the token.
type TokenRecord struct {
	api.TokenInfo
	Hash string
}

// JoinTokenRecord is a join token as stored, with the hash of its secret.
type JoinTokenRecord struct {
	api.JoinTokenInfo
	Hash string
}

// NodeCert is the one client certificate a node may use: the last one a join or a
// renewal issued for it.
type NodeCert struct {
	Node     string    `json:"node"`
	Serial   string    `json:"serial"`
	Issued   time.Time `json:"issued"`
	NotAfter time.Time `json:"not_after"`
	// JoinToken is the ID of the join token it was first issued for ("" for a renewal
	// or the agent inside `rota up`).
	JoinToken string `json:"join_token,omitempty"`
}

// IdempotencyRecord remembers which job a submit with an Idempotency-Key created.
type IdempotencyRecord struct {
	User    string
	Key     string
	Hash    string
	JobID   int64
	Created time.Time
}

// Empty reports whether the batch changes nothing.
func (b *Batch) Empty() bool {
	return len(b.Jobs) == 0 && len(b.Attempts) == 0 && len(b.Nodes) == 0 &&
		len(b.Queues) == 0 && len(b.Teams) == 0 && len(b.Reservations) == 0 && len(b.Events) == 0 &&
		len(b.Settings) == 0 && len(b.Users) == 0 && len(b.Tokens) == 0 && len(b.JoinTokens) == 0 &&
		len(b.NodeCerts) == 0 && len(b.Idempotency) == 0 &&
		len(b.DeleteQueues) == 0 && len(b.DeleteTeams) == 0 && len(b.DeleteReservations) == 0 &&
		len(b.DeleteUsers) == 0 && len(b.DeleteNodes) == 0 && b.PruneIdempotency.IsZero()
}

// EventFilter selects events. Zero fields select everything.
type EventFilter struct {
	JobID   int64
	AfterID int64
	// Since and Until bound the events' times: Since <= time < Until.
	Since, Until time.Time
	// Actor and Kind select by who and what.
	Actor string
	Kind  string
	// Limit caps the number returned; 0 means no cap.
	Limit int
}

// ErrInUse is returned by Open for a SQLite file another server already has open.
var ErrInUse = errors.New("store in use")

// ErrUnsupportedURL is returned by Open for a store URL it cannot serve.
var ErrUnsupportedURL = errors.New("unsupported store URL: use sqlite://PATH or postgres://…")

// Kind names the backend of a store Open returned: "sqlite" or "postgres"; "" for any
// other Store.
func Kind(st Store) string {
	if s, ok := st.(*sqlStore); ok {
		return s.d.name
	}
	return ""
}
