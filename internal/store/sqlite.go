package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// sqliteBusyTimeoutMS is how long a connection waits for a lock held by another connection
// (a reader during a checkpoint, or another process) before failing with SQLITE_BUSY.
const sqliteBusyTimeoutMS = "10000"

// sqliteDialect needs no lockWrites: every write transaction begins IMMEDIATE (see openSQLite).
var sqliteDialect = dialect{name: "sqlite"}

// openSQLite opens the database file at path, creating it and its directory if needed.
//
// Durability: journal_mode=WAL with synchronous=FULL. In WAL mode, FULL syncs the WAL to
// disk at every commit, so a commit that returned survives kill -9 of the process and
// also a power cut or OS crash; NORMAL would survive kill -9 but could lose the last
// commits to a power cut, and DESIGN.md allows no crash to lose an acknowledged submit.
//
// Statement journals: the write connection keeps them in memory (temp_store=MEMORY).
// SQLite writes one for each statement that may have to be undone on its own, such as an
// insert into a table with a unique index; they serve only to roll back that statement
// and are never read after a crash, which the WAL alone recovers from. Kept in a file,
// they cost a write call of their own for each page they held: 3.4 pwrite calls a
// submit in a file, 2.9 in memory (BenchmarkSubmit/clients=64 under strace -c), and
// two and a half times as many for an array submit of 10,000 jobs.
//
// Concurrency: all writes go through one connection, so writers queue in this process
// instead of failing with SQLITE_BUSY, and every write transaction begins IMMEDIATE, taking
// the write lock up front so that one never fails halfway when upgrading a read lock.
// Reads use a separate pool of read-only connections, which WAL lets run alongside a write.
func openSQLite(ctx context.Context, path string, logger *slog.Logger) (Store, error) {
	if path == "" {
		return nil, fmt.Errorf("store: open sqlite: %w: the URL names no file", ErrUnsupportedURL)
	}
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("store: open sqlite %s: %w", path, err)
		}
	}
	// The database holds jobs' environments and the hashes of API tokens: it is the
	// owner's alone. SQLite gives its WAL and shared-memory files the same mode.
	if f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o600); err == nil {
		f.Close()
	}
	lock, err := lockSQLite(path)
	if err != nil {
		return nil, err
	}
	opened := false
	defer func() {
		if !opened {
			lock.Close()
		}
	}()
	params := url.Values{
		"_txlock":       {"immediate"},
		"_journal_mode": {"WAL"},
		"_synchronous":  {"FULL"},
		"_foreign_keys": {"1"},
		"_busy_timeout": {sqliteBusyTimeoutMS},
	}
	// Migrations run first, on a connection of their own that keeps statement journals
	// in a file: one statement of a migration may rewrite a whole table, whose every
	// page would otherwise be journaled in memory. The server's own statements are
	// small (an insert of at most rowsPerStatement rows; the largest, the prune of an
	// hour's submit keys), so its connection keeps them in memory.
	if err := migrateSQLite(ctx, path, params, logger); err != nil {
		return nil, err
	}
	params.Set("_pragma", "temp_store=MEMORY")
	write, err := openSQLitePool(path, params)
	if err != nil {
		return nil, fmt.Errorf("store: open sqlite %s: %w", path, err)
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	if err := write.PingContext(ctx); err != nil {
		write.Close()
		return nil, fmt.Errorf("store: open sqlite %s: %w", path, err)
	}

	read, err := openSQLitePool(path, url.Values{
		"_query_only":   {"1"},
		"_busy_timeout": {sqliteBusyTimeoutMS},
	})
	if err != nil {
		write.Close()
		return nil, fmt.Errorf("store: open sqlite %s for reading: %w", path, err)
	}
	n := max(4, runtime.GOMAXPROCS(0))
	read.SetMaxOpenConns(n)
	read.SetMaxIdleConns(n)
	logger.Info("store opened", "backend", "sqlite", "path", path)
	s := newSQLStore(sqliteDialect, write, read)
	s.lock = lock
	opened = true
	return s, nil
}

// migrateSQLite brings the schema of the database at path up to date on a connection
// opened with params. Its ping creates the file and switches it to WAL before any reader
// opens it.
func migrateSQLite(ctx context.Context, path string, params url.Values, logger *slog.Logger) error {
	db, err := openSQLitePool(path, params)
	if err != nil {
		return fmt.Errorf("store: open sqlite %s: %w", path, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("store: open sqlite %s: %w", path, err)
	}
	if err := migrate(ctx, db, sqliteDialect, logger); err != nil {
		return fmt.Errorf("store: migrate sqlite %s: %w", path, err)
	}
	return nil
}

// lockSQLite takes an exclusive lock on PATH.lock, held until the store closes: two
// servers writing one SQLite file would each schedule from their own memory and give one
// GPU to two jobs, so the second is refused at start, before it writes anything. The
// kernel drops the lock when the process dies, so a crash never leaves the file locked.
func lockSQLite(path string) (*os.File, error) {
	lockPath := path + ".lock"
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: open sqlite %s: lock file: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder := ""
			if data, err := os.ReadFile(lockPath); err == nil && len(strings.TrimSpace(string(data))) > 0 {
				holder = " (pid " + strings.TrimSpace(string(data)) + ")"
			}
			return nil, fmt.Errorf("store: open sqlite %s: %w: another rota server%s is using this file; "+
				"a SQLite store serves one server: stop the other, give this one another --data-dir or --store, "+
				"or run several servers on PostgreSQL (docs/ha.md)", path, ErrInUse, holder)
		}
		return nil, fmt.Errorf("store: open sqlite %s: lock %s: %w", path, lockPath, err)
	}
	// The pid only names the holder to a server that finds the file taken.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// openSQLitePool opens a pool whose every connection is set up with params. The path is
// given as a file: URI with the path escaped, so a '?' or '#' in a file name stays part of
// the name instead of starting the parameters.
func openSQLitePool(path string, params url.Values) (*sql.DB, error) {
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + params.Encode()
	return sql.Open("sqlite", dsn)
}
