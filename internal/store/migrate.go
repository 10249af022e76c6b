package store

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// migrationFiles holds the schema, one file per version, named NNNN_what.sql. A file is
// never edited once released; a change to the schema is a new file.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in version order. Versions must run 1, 2, 3…
// without gaps, so that "the highest applied version" says which ones have run.
func migrations() ([]migration, error) {
	names, err := fs.Glob(migrationFiles, "migrations/*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	var ms []migration
	for _, name := range names {
		base := path.Base(name)
		prefix, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(prefix)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive version, as in 0001_init.sql", base)
		}
		body, err := migrationFiles.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", base, err)
		}
		ms = append(ms, migration{version: v, name: base, sql: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration %s: expected version %d", m.name, i+1)
		}
	}
	return ms, nil
}

// SchemaVersion is the schema version this binary migrates a store to: the number of its
// embedded migrations. `rota version` reports it, so an operator can tell which binaries a
// database has outgrown.
func SchemaVersion() (int, error) {
	ms, err := migrations()
	if err != nil {
		return 0, err
	}
	return len(ms), nil
}

// migrate applies the migrations db lacks, all in one transaction, so a failure leaves the
// schema as it was. It refuses a database whose schema is newer than this binary's: an
// older rota writing to it could lose what the newer one stores.
func migrate(ctx context.Context, db *sql.DB, d dialect, logger *slog.Logger) error {
	ms, err := migrations()
	if err != nil {
		return err
	}
	return applyMigrations(ctx, db, d, logger, ms)
}

// applyMigrations brings db up to the last of ms, which must be a prefix of migrations():
// tests pass fewer to build a database as an older rota left it.
func applyMigrations(ctx context.Context, db *sql.DB, d dialect, logger *slog.Logger, ms []migration) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback() // err says what went wrong; nothing was committed
		}
	}()
	if err := applyMigrationsTx(ctx, tx, d, logger, ms); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// applyMigrationsTx applies the migrations of ms that tx's database lacks, inside tx: the
// caller commits, so that a copy into a new store (see Copy) writes its schema and its
// rows in one transaction.
func applyMigrationsTx(ctx context.Context, tx *sql.Tx, d dialect, logger *slog.Logger, ms []migration) error {
	// Several servers starting at once against one PostgreSQL must not both migrate.
	if d.lockWrites != "" {
		if _, err := tx.ExecContext(ctx, d.lockWrites); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
	}
	const create = `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    BIGINT PRIMARY KEY,
		applied_at TEXT NOT NULL
	)`
	if _, err := tx.ExecContext(ctx, create); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	var current int
	if err := tx.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&current); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if current > len(ms) {
		return fmt.Errorf("schema version %d is newer than this rota knows (%d): run a newer rota", current, len(ms))
	}
	for _, m := range ms[current:] {
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("apply migration %s: %w", m.name, err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)",
			m.version, formatTime(time.Now())); err != nil {
			return fmt.Errorf("record migration %s: %w", m.name, err)
		}
		logger.Info("applied store migration", "backend", d.name, "version", m.version, "name", m.name)
	}
	return nil
}
