package batch

import (
	"encoding/json"
	"time"

	"github.com/rotahq/rota/internal/api"
)

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
	// DeleteTokens holds the IDs of API tokens to forget (revoked or expired long ago).
	DeleteTokens []string
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
		len(b.DeleteUsers) == 0 && len(b.DeleteNodes) == 0 && len(b.DeleteTokens) == 0 && b.PruneIdempotency.IsZero()
}
