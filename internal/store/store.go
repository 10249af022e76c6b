package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/batch"
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
	// LoadRecentJobs returns the jobs that have not ended, ended at or after since, or
	// whose end is not stored, ordered by ID: the jobs a server keeps in memory.
	LoadRecentJobs(ctx context.Context, since time.Time) ([]api.Job, error)
	// LoadEndedBefore returns the ID, state and team of every job that ended before
	// since, ordered by ID: the jobs LoadRecentJobs leaves out.
	LoadEndedBefore(ctx context.Context, since time.Time) ([]EndedJob, error)
	// Job returns the job with the given ID and its attempts, oldest first; found is
	// false when there is no such job.
	Job(ctx context.Context, id int64) (job api.Job, attempts []api.Attempt, found bool, err error)
	// AttemptsBetween returns the attempts of the jobs with IDs from first to last, both
	// included, ordered by job ID then attempt number.
	AttemptsBetween(ctx context.Context, first, last int64) ([]api.Attempt, error)
	// JobsPage returns the jobs f selects, ordered by ID.
	JobsPage(ctx context.Context, f JobFilter) ([]api.Job, error)
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

// The store commits and loads the types of package batch; these names keep the store's
// callers (the server, the bench, the migrations) reading as before.
type (
	Batch             = batch.Batch
	Setting           = batch.Setting
	TokenRecord       = batch.TokenRecord
	JoinTokenRecord   = batch.JoinTokenRecord
	NodeCert          = batch.NodeCert
	IdempotencyRecord = batch.IdempotencyRecord
)

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
