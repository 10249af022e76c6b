package store

import (
	"context"
	"errors"

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

	// DeleteQueues and DeleteTeams name the queues and teams to delete.
	DeleteQueues []string
	DeleteTeams  []string
	// DeleteReservations holds the IDs of the reservations to delete.
	DeleteReservations []int64
}

// Empty reports whether the batch changes nothing.
func (b *Batch) Empty() bool {
	return len(b.Jobs) == 0 && len(b.Attempts) == 0 && len(b.Nodes) == 0 &&
		len(b.Queues) == 0 && len(b.Teams) == 0 && len(b.Reservations) == 0 && len(b.Events) == 0 &&
		len(b.DeleteQueues) == 0 && len(b.DeleteTeams) == 0 && len(b.DeleteReservations) == 0
}

// EventFilter selects events. Zero fields select everything.
type EventFilter struct {
	JobID   int64
	AfterID int64
	// Limit caps the number returned; 0 means no cap.
	Limit int
}

// ErrUnsupportedURL is returned by Open for a store URL it cannot serve.
var ErrUnsupportedURL = errors.New("unsupported store URL: use sqlite://PATH or postgres://…")
