package store

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
)

// postgresWriteLock is the advisory lock key rota's writers take. It spells "rota" so that
// it is recognisable in pg_locks.
const postgresWriteLock = 0x726f7461

// postgresMaxConns bounds each server's connections, so several replicas stay well inside
// PostgreSQL's default max_connections of 100.
const postgresMaxConns = 16

// postgresConnectTimeout bounds the first connection at start: an unreachable database
// (a wrong host, a firewall dropping packets) is an error in seconds, not a start that
// hangs for the minutes a TCP connect may take.
const postgresConnectTimeout = 15 * time.Second

// postgresDialect serializes writers with an advisory lock (see openPostgres).
var postgresDialect = dialect{
	name:       "postgres",
	lockWrites: fmt.Sprintf("SELECT pg_advisory_xact_lock(%d)", postgresWriteLock),
}

// openPostgres opens a pool to the database at url. PostgreSQL's default synchronous_commit
// makes a commit durable once it returns.
//
// Writers are serialized across processes by a transaction-scoped advisory lock, taken by
// every transaction that appends events or migrates: event IDs must follow commit order,
// which a sequence does not give when transactions overlap. It is released at commit or
// rollback, so a crashed writer never leaves it held.
func openPostgres(ctx context.Context, url string, logger *slog.Logger) (Store, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, fmt.Errorf("store: open postgres %s: %w", redact(url), err)
	}
	db.SetMaxOpenConns(postgresMaxConns)
	// Idle connections are kept because pgx caches prepared statements per connection.
	db.SetMaxIdleConns(postgresMaxConns)
	pctx, cancel := context.WithTimeout(ctx, postgresConnectTimeout)
	err = db.PingContext(pctx)
	cancel()
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("store: open postgres %s: cannot reach the database (nothing was written): %w", redact(url), err)
	}
	if err := migrate(ctx, db, postgresDialect, logger); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: migrate postgres %s: %w", redact(url), err)
	}
	logger.Info("store opened", "backend", "postgres")
	return newSQLStore(postgresDialect, db, db), nil
}
