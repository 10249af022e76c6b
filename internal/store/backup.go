package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// TableCount is how many rows one table of a store holds.
type TableCount struct {
	Table string `json:"table"`
	Rows  int64  `json:"rows"`
}

// BackupResult describes a backup Backup wrote.
type BackupResult struct {
	// From is the source's file and To the backup's.
	From, To string
	// Schema is the backup's schema version.
	Schema int
	// Bytes is the backup file's size.
	Bytes int64
	// Tables counts the rows of every table in the backup, by name.
	Tables []TableCount
}

// Backup writes a consistent copy of the SQLite store at from (sqlite://PATH) to the new
// file to (a path, or sqlite://PATH), while a server may be running on the source.
//
// It reads the source as one more reader beside the server, which WAL mode allows: it
// takes no lock the server holds and never writes the source. The copy is SQLite's VACUUM
// INTO, which reads inside one read transaction and so copies the store as it was at one
// commit: every commit the server had made before the backup began is in it, and no part
// of a later one. The copy is written under a temporary name beside to, checked
// (quick_check, schema version, rows per table), synced, and only then linked to its name:
// a backup that fails leaves no file at to, and one never replaces an existing file.
// The result is a rota store a server can start on.
//
// A PostgreSQL store is backed up with pg_dump instead (docs/operations.md).
func Backup(ctx context.Context, from, to string) (res BackupResult, err error) {
	src, err := sqliteSourcePath(from, "back up")
	if err != nil {
		return res, err
	}
	dst := strings.TrimPrefix(to, "sqlite://")
	if strings.TrimSpace(dst) == "" {
		return res, errors.New("store: backup: no file to write the backup to")
	}
	if strings.HasPrefix(dst, "postgres://") || strings.HasPrefix(dst, "postgresql://") {
		return res, fmt.Errorf("store: backup: %s: a backup is a file; to copy a store into PostgreSQL use rota admin migrate", redact(dst))
	}
	if err := checkNewFile(dst); err != nil {
		return res, fmt.Errorf("store: backup: %w", err)
	}
	if err := checkSQLiteFile(src); err != nil {
		return res, fmt.Errorf("store: backup: %w", err)
	}
	res.From, res.To = src, dst

	db, err := openSQLitePool(src, url.Values{"mode": {"ro"}, "_busy_timeout": {sqliteBusyTimeoutMS}})
	if err != nil {
		return res, fmt.Errorf("store: backup: open %s: %w", src, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	tables, err := listTables(ctx, db, sqliteDialect)
	if err != nil {
		return res, fmt.Errorf("store: backup: read %s: %w", src, err)
	}
	if !slices.Contains(tables, "schema_migrations") {
		return res, fmt.Errorf("store: backup: %s is a SQLite database but not a rota store (it has no schema_migrations table)", src)
	}

	// VACUUM INTO writes into a file that does not exist or is empty: the temporary file
	// is created empty here, private to its owner as the store is (it holds token hashes
	// and jobs' environments), and the copy keeps that mode.
	tmpFile, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".partial-*")
	if err != nil {
		return res, fmt.Errorf("store: backup: %w", err)
	}
	tmp := tmpFile.Name()
	// Locked until the backup ends, so that another backup to the same name tells this
	// partial copy from one a killed backup left (removeStalePartials). Closed last, after
	// the copy is removed or linked.
	defer tmpFile.Close()
	if err := unix.Flock(int(tmpFile.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		removeSQLiteFiles(tmp)
		return res, fmt.Errorf("store: backup: lock %s: %w", tmp, err)
	}
	removeStalePartials(dst, tmp)
	defer func() {
		if err != nil {
			removeSQLiteFiles(tmp)
		}
	}()
	if _, err := db.ExecContext(ctx, "VACUUM INTO $1", tmp); err != nil {
		return res, fmt.Errorf("store: backup: copy %s: %w", src, err)
	}
	if res.Schema, res.Tables, err = checkBackup(ctx, tmp); err != nil {
		return res, fmt.Errorf("store: backup: check the copy: %w", err)
	}
	if err := syncFile(tmp); err != nil {
		return res, fmt.Errorf("store: backup: %w", err)
	}
	// A link never replaces an existing name, so a file that appeared at dst meanwhile is
	// kept, and the backup is refused.
	if err := os.Link(tmp, dst); err != nil {
		if errors.Is(err, os.ErrExist) {
			return res, fmt.Errorf("store: backup: %s exists: a backup never overwrites a file; name a new one", dst)
		}
		return res, fmt.Errorf("store: backup: %w", err)
	}
	removeSQLiteFiles(tmp)
	if err := syncFile(filepath.Dir(dst)); err != nil {
		return res, fmt.Errorf("store: backup: %w", err)
	}
	if fi, err := os.Stat(dst); err == nil {
		res.Bytes = fi.Size()
	}
	return res, nil
}

// checkBackup opens the copy at path, makes it one self-contained file (journal mode
// DELETE: no -wal beside it to lose; a server switches it back to WAL when it opens it),
// and checks that SQLite finds it sound. It returns its schema version and rows per table.
func checkBackup(ctx context.Context, path string) (int, []TableCount, error) {
	db, err := openSQLitePool(path, url.Values{"mode": {"rw"}, "_journal_mode": {"DELETE"}})
	if err != nil {
		return 0, nil, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	var check string
	if err := db.QueryRowContext(ctx, "PRAGMA quick_check").Scan(&check); err != nil {
		return 0, nil, err
	}
	if check != "ok" {
		return 0, nil, fmt.Errorf("SQLite finds the copy damaged: %s", check)
	}
	version, err := schemaVersionIn(ctx, db)
	if err != nil {
		return 0, nil, err
	}
	tables, err := listTables(ctx, db, sqliteDialect)
	if err != nil {
		return 0, nil, err
	}
	var counts []TableCount
	for _, t := range tables {
		n, err := countRows(ctx, db, t)
		if err != nil {
			return 0, nil, err
		}
		counts = append(counts, TableCount{Table: t, Rows: n})
	}
	return version, counts, db.Close()
}

// sqliteSourcePath returns the file of a sqlite:// URL naming an existing store to read,
// and a clear error for any other URL; verb names what was asked ("back up").
func sqliteSourcePath(u, verb string) (string, error) {
	switch {
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		return "", fmt.Errorf("store: %s %s: a PostgreSQL store is backed up with pg_dump, not by rota (docs/operations.md)", verb, redact(u))
	case !strings.HasPrefix(u, "sqlite://"):
		return "", fmt.Errorf("store: %s %q: %w", verb, redact(u), ErrUnsupportedURL)
	}
	path := strings.TrimPrefix(u, "sqlite://")
	if path == "" {
		return "", fmt.Errorf("store: %s %s: the URL names no file", verb, u)
	}
	return path, nil
}

// sqliteMagic opens every SQLite database file.
var sqliteMagic = []byte("SQLite format 3\x00")

// checkSQLiteFile checks that path is an existing SQLite database file.
func checkSQLiteFile(path string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s: no such file: name an existing store, as rota server --store does", path)
	case err != nil:
		return err
	case fi.IsDir():
		return fmt.Errorf("%s is a directory: name the store's file (rota.db in the server's data dir)", path)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	head := make([]byte, len(sqliteMagic))
	if _, err := io.ReadFull(f, head); err != nil || !bytes.Equal(head, sqliteMagic) {
		return fmt.Errorf("%s is not a SQLite database", path)
	}
	return nil
}

// checkNewFile checks that a file may be created at path: nothing is there yet and its
// directory exists.
func checkNewFile(path string) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s exists: a backup never overwrites a file; name a new one", path)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%s: the directory %s does not exist", path, dir)
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s: %s is not a directory", path, dir)
	}
	return nil
}

// removeSQLiteFiles removes a database file and the journal files SQLite may have left
// beside it.
// removeStalePartials removes what backups to dst that were killed before they ended (by
// the OOM killer, a reboot) left beside it: their partial copies, under hidden names, each
// as large as the store and holding its secrets. A partial copy a running backup holds
// locked, and own, are left alone.
func removeStalePartials(dst, own string) {
	dir := filepath.Dir(dst)
	prefix := "." + filepath.Base(dst) + ".partial-"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		name := filepath.Join(dir, e.Name())
		digits, companion := rest, false
		for _, suffix := range []string{"-wal", "-shm", "-journal"} {
			if d, ok := strings.CutSuffix(rest, suffix); ok {
				digits, companion = d, true
			}
		}
		if digits == "" || strings.Trim(digits, "0123456789") != "" || filepath.Join(dir, prefix+digits) == own {
			continue
		}
		if companion {
			// A companion goes with its copy, unless the copy is gone already.
			if _, err := os.Lstat(filepath.Join(dir, prefix+digits)); errors.Is(err, os.ErrNotExist) {
				_ = os.Remove(name)
			}
			continue
		}
		f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			removeSQLiteFiles(name)
		}
		f.Close()
	}
}

func removeSQLiteFiles(path string) {
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		_ = os.Remove(path + suffix) // best effort: what is not there need not go
	}
}

// syncFile flushes a file or a directory to disk.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}

// listTables returns the names of the tables in db's schema, sorted.
func listTables(ctx context.Context, q queryer, d dialect) ([]string, error) {
	const (
		sqliteTables   = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
		postgresTables = "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name"
	)
	stmt := sqliteTables
	if d.name == postgresDialect.name {
		stmt = postgresTables
	}
	rows, err := q.QueryContext(ctx, stmt)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("list tables: %w", err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	return names, nil
}

// schemaVersionIn reads the schema version of a rota store.
func schemaVersionIn(ctx context.Context, q queryer) (int, error) {
	var v int
	if err := q.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&v); err != nil {
		return 0, fmt.Errorf("read the schema version: %w", err)
	}
	return v, nil
}

// countRows counts the rows of table, a name listTables returned.
func countRows(ctx context.Context, q queryer, table string) (int64, error) {
	var n int64
	if err := q.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+quoteIdent(table)).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the rows of %s: %w", table, err)
	}
	return n, nil
}

// quoteIdent quotes a table or column name for both backends.
func quoteIdent(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// queryer is what *sql.DB, *sql.Conn and *sql.Tx share for reading.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}
