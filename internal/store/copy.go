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
	"slices"
	"strconv"
	"strings"
	"time"
)

// copiedTables are the tables Copy copies, in the order it copies them: a table
// another refers to (attempts refer to jobs) comes first. Together with notCopiedTables
// they must name every table of the schema; TestCopyCoversSchema checks that a new
// migration's table is named in one of them.
var copiedTables = []string{
	"jobs", "attempts", "events", "nodes", "queues", "teams", "reservations",
	"settings", "users", "tokens", "join_tokens", "node_certs", "idempotency",
}

// notCopiedTables are the tables of the schema that describe the servers rather than
// the cluster, and that a new store starts afresh: schema_migrations, which the target's
// own migrations fill; the leader lease's term and holder, and the replicas that
// announced themselves (lease.go), both about the servers on the source's database.
var notCopiedTables = []string{"schema_migrations", "leader", "replicas"}

// CopyResult describes a copy Copy made.
type CopyResult struct {
	// Schema is the schema version of both stores.
	Schema int
	// Tables counts the rows copied into every table, in copy order; each equals the
	// source's count and the target's after the commit.
	Tables []TableCount
	// Skipped names the tables not copied (see notCopiedTables).
	Skipped []string
}

// Copy copies the whole of the store at from into the empty store at to, across
// backends (sqlite:// to postgres:// and back) or within one.
//
// The source must have this binary's schema version and no server on it: Copy holds
// what a server takes for the length of the copy (a SQLite store's lock file, a PostgreSQL
// store's leader lease), so it fails at once when a server runs there and no server can
// start there meanwhile. It reads the source in one transaction and never writes it.
//
// The target must be empty: a database without rota's tables, or with them and no rows
// (a new SQLite file is created). Its schema and every row are written in one transaction,
// and the rows per table are counted on both sides before the commit: a copy that fails
// writes nothing (a SQLite file Copy created is removed again).
func Copy(ctx context.Context, from, to string, logger *slog.Logger) (res CopyResult, err error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ms, err := migrations()
	if err != nil {
		return res, err
	}
	res.Schema = len(ms)
	fromKind, err := storeKind(from)
	if err != nil {
		return res, fmt.Errorf("store: migrate: source: %w", err)
	}
	toKind, err := storeKind(to)
	if err != nil {
		return res, fmt.Errorf("store: migrate: target: %w", err)
	}
	if sameStore(from, fromKind, to, toKind) {
		return res, fmt.Errorf("store: migrate: the source and the target are the same store (%s): name a new, empty one as the target", showURL(to))
	}

	src, err := openCopySource(ctx, from, fromKind, len(ms))
	if err != nil {
		return res, fmt.Errorf("store: migrate: source %s: %w", showURL(from), err)
	}
	defer src.close(false)
	dst, err := openCopyTarget(ctx, to, toKind, len(ms))
	if err != nil {
		return res, fmt.Errorf("store: migrate: target %s: %w", showURL(to), err)
	}
	// Until the copy commits, a failure removes the SQLite file this call created; after,
	// the target holds the copy and stays.
	committed := false
	defer func() {
		dst.close(!committed)
	}()

	counts, err := copyAll(ctx, src, dst, ms, logger)
	if err != nil {
		return res, fmt.Errorf("store: migrate %s to %s: nothing was written: %w", showURL(from), showURL(to), err)
	}
	committed = true
	// Counted again outside the transaction, as any reader of the target now sees it.
	for _, c := range counts {
		n, err := countRows(ctx, dst.db, c.Table)
		if err != nil {
			return res, fmt.Errorf("store: migrate: the copy was committed but cannot be verified: %w", err)
		}
		if n != c.Rows {
			return res, fmt.Errorf("store: migrate: the copy was committed but %s holds %d rows, not the %d copied", c.Table, n, c.Rows)
		}
	}
	res.Tables = counts
	res.Skipped = slices.Clone(notCopiedTables)
	return res, nil
}

// storeKind is the backend a store URL names: "sqlite" or "postgres".
func storeKind(u string) (string, error) {
	switch {
	case strings.HasPrefix(u, "sqlite://"):
		if strings.TrimPrefix(u, "sqlite://") == "" {
			return "", fmt.Errorf("%s names no file: use sqlite:///path/rota.db", u)
		}
		return sqliteDialect.name, nil
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		return postgresDialect.name, nil
	}
	return "", fmt.Errorf("%q: %w", showURL(u), ErrUnsupportedURL)
}

// sameStore says whether two store URLs name one store: the same file (also through
// another spelling or a link), or the same database on the same PostgreSQL server.
func sameStore(a, aKind, b, bKind string) bool {
	if aKind != bKind {
		return false
	}
	if aKind == sqliteDialect.name {
		pa, pb := strings.TrimPrefix(a, "sqlite://"), strings.TrimPrefix(b, "sqlite://")
		fa, errA := os.Stat(pa)
		fb, errB := os.Stat(pb)
		if errA == nil && errB == nil {
			return os.SameFile(fa, fb)
		}
		absA, errA := filepath.Abs(pa)
		absB, errB := filepath.Abs(pb)
		return errA == nil && errB == nil && absA == absB
	}
	return postgresIdentity(a) == postgresIdentity(b)
}

// postgresIdentity reduces a postgres:// URL to host, port and database, which name one
// database whatever the credentials and options.
func postgresIdentity(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	q := p.Query()
	host, port := p.Hostname(), p.Port()
	if h := q.Get("host"); h != "" {
		host = h
	}
	if v := q.Get("port"); v != "" {
		port = v
	}
	if host == "" {
		host = "localhost"
	}
	if port == "" {
		port = "5432"
	}
	db := strings.TrimPrefix(p.Path, "/")
	if v := q.Get("dbname"); v != "" {
		db = v
	}
	if db == "" {
		db = p.User.Username()
	}
	return strings.ToLower(host) + ":" + port + "/" + db
}

// copyEnd is one side of a copy: a pool, its dialect and what it holds while the copy runs.
type copyEnd struct {
	d  dialect
	db *sql.DB
	// held is the SQLite lock file or the PostgreSQL lease session, held until close.
	held func()
	// created lists the files Copy made for a SQLite target, removed again if the copy
	// fails.
	created []string
}

func (e *copyEnd) close(failed bool) {
	// The lease session is one of the pool's connections: it is given up before the pool
	// closes. A SQLite lock file is let go only after the pool, once nothing here can
	// write the file, as a server's store does (Close).
	if e.held != nil && e.d.name == postgresDialect.name {
		e.held()
		e.held = nil
	}
	if e.db != nil {
		e.db.Close()
	}
	if e.held != nil {
		e.held()
	}
	if failed {
		for _, f := range e.created {
			removeSQLiteFiles(f)
		}
	}
}

// openCopySource opens the store at u for reading, with what a server would take held.
func openCopySource(ctx context.Context, u, kind string, schema int) (_ *copyEnd, err error) {
	e := &copyEnd{}
	defer func() {
		if err != nil {
			e.close(false)
		}
	}()
	if kind == sqliteDialect.name {
		path := strings.TrimPrefix(u, "sqlite://")
		if err := checkSQLiteFile(path); err != nil {
			return nil, err
		}
		if e.held, err = holdSQLite(path); err != nil {
			return nil, err
		}
		e.d = sqliteDialect
		e.db, err = openSQLitePool(path, url.Values{"mode": {"ro"}, "_busy_timeout": {sqliteBusyTimeoutMS}})
		if err != nil {
			return nil, err
		}
		e.db.SetMaxOpenConns(1)
	} else {
		e.d = postgresDialect
		if e.db, err = openPostgresPool(ctx, u); err != nil {
			return nil, err
		}
	}
	tables, err := listTables(ctx, e.db, e.d)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(tables, "schema_migrations") {
		return nil, errors.New("not a rota store: it has no schema_migrations table")
	}
	v, err := schemaVersionIn(ctx, e.db)
	if err != nil {
		return nil, err
	}
	switch {
	case v > schema:
		return nil, fmt.Errorf("its schema version %d is newer than this rota's (%d): run the copy with the rota that wrote it", v, schema)
	case v < schema:
		return nil, fmt.Errorf("its schema version %d is older than this rota's (%d): start this rota's server on it once, which upgrades it, stop the server, then copy", v, schema)
	}
	for _, t := range copiedTables {
		if !slices.Contains(tables, t) {
			return nil, fmt.Errorf("schema version %d but no table %s: the store is damaged", v, t)
		}
	}
	if kind == postgresDialect.name {
		if e.held, err = holdLease(ctx, e.db); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// openCopyTarget opens the store at u to copy into, checking that it is empty, and holds
// what a server would take so that none starts on it during the copy.
func openCopyTarget(ctx context.Context, u, kind string, schema int) (_ *copyEnd, err error) {
	e := &copyEnd{}
	defer func() {
		if err != nil {
			e.close(true)
		}
	}()
	if kind == sqliteDialect.name {
		path := strings.TrimPrefix(u, "sqlite://")
		fi, statErr := os.Stat(path)
		switch {
		case errors.Is(statErr, os.ErrNotExist):
			if err := checkNewFile(path); err != nil {
				return nil, err
			}
			// Private to its owner from the start, as a server makes its store (openSQLite).
			f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return nil, err
			}
			f.Close()
			e.created = append(e.created, path)
			if _, err := os.Stat(path + ".lock"); errors.Is(err, os.ErrNotExist) {
				e.created = append(e.created, path+".lock")
			}
		case statErr != nil:
			return nil, statErr
		case fi.Size() > 0:
			if err := checkSQLiteFile(path); err != nil {
				return nil, err
			}
		}
		if e.held, err = holdSQLite(path); err != nil {
			return nil, err
		}
		e.d = sqliteDialect
		e.db, err = openSQLitePool(path, url.Values{
			"_txlock":       {"immediate"},
			"_journal_mode": {"WAL"},
			"_synchronous":  {"FULL"},
			"_foreign_keys": {"1"},
			"_busy_timeout": {sqliteBusyTimeoutMS},
		})
		if err != nil {
			return nil, err
		}
		e.db.SetMaxOpenConns(1)
		if err := e.db.PingContext(ctx); err != nil {
			return nil, err
		}

	} else {
		e.d = postgresDialect
		if e.db, err = openPostgresPool(ctx, u); err != nil {
			return nil, err
		}
	}
	tables, err := listTables(ctx, e.db, e.d)
	if err != nil {
		return nil, err
	}
	if slices.Contains(tables, "schema_migrations") {
		v, err := schemaVersionIn(ctx, e.db)
		if err != nil {
			return nil, err
		}
		if v > schema {
			return nil, fmt.Errorf("its schema version %d is newer than this rota's (%d)", v, schema)
		}
	}
	var foreign, full []string
	for _, t := range tables {
		switch {
		case slices.Contains(notCopiedTables, t):
		case !slices.Contains(copiedTables, t):
			foreign = append(foreign, t)
		default:
			n, err := countRows(ctx, e.db, t)
			if err != nil {
				return nil, err
			}
			if n > 0 {
				full = append(full, fmt.Sprintf("%s has %d %s", t, n, plural(n, "row", "rows")))
			}
		}
	}
	if len(foreign) > 0 {
		return nil, fmt.Errorf("it holds tables that are not rota's (%s): copy into a database of rota's own", strings.Join(foreign, ", "))
	}
	if len(full) > 0 {
		return nil, fmt.Errorf("it is not empty (%s): a copy goes only into a new, empty store, and nothing was written", strings.Join(full, ", "))
	}
	if kind == postgresDialect.name {
		// The lease is taken last: its table may not exist before this point.
		if slices.Contains(tables, "leader") {
			if e.held, err = holdLease(ctx, e.db); err != nil {
				return nil, err
			}
		}
	}
	return e, nil
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// holdSQLite takes the lock file a server takes (lockSQLite), with an error that says
// what to do when a server has it.
func holdSQLite(path string) (func(), error) {
	f, err := lockSQLite(path)
	if errors.Is(err, ErrInUse) {
		holder := ""
		if data, rerr := os.ReadFile(path + ".lock"); rerr == nil {
			if pid := strings.TrimSpace(string(data)); pid != "" {
				holder = " (pid " + pid + ")"
			}
		}
		return nil, fmt.Errorf("%w: a rota server%s has it open: stop the server first (rota admin backup copies a SQLite store while its server runs)", ErrInUse, holder)
	}
	if err != nil {
		return nil, err
	}
	return func() { f.Close() }, nil
}

// holdLease takes the leader lease's lock on a session of its own, as a leader does, so
// that no server leads (and writes) on the database while it is held.
func holdLease(ctx context.Context, db *sql.DB) (func(), error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	var got bool
	if err := conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", leaseLockKey).Scan(&got); err != nil {
		conn.Close()
		return nil, fmt.Errorf("take the leader lease: %w", err)
	}
	if !got {
		conn.Close()
		return nil, fmt.Errorf("%w: a rota server leads on this database (it holds the leader lease): stop every server on it first", ErrInUse)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = conn.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", leaseLockKey) // closing the session frees it too
		conn.Close()
	}, nil
}

// openPostgresPool opens and reaches a PostgreSQL database without migrating it.
func openPostgresPool(ctx context.Context, u string) (*sql.DB, error) {
	db, err := sql.Open("pgx", u)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(4)
	pctx, cancel := context.WithTimeout(ctx, postgresConnectTimeout)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("cannot reach the database: %w", err)
	}
	return db, nil
}

// copyAll copies every table of copiedTables from src to dst: the schema and all rows in
// one transaction on dst, read in one transaction on src. The rows of each table are
// counted on both sides before the commit; any difference rolls the whole copy back.
func copyAll(ctx context.Context, src, dst *copyEnd, ms []migration, logger *slog.Logger) (counts []TableCount, err error) {
	opts := &sql.TxOptions{}
	if src.d.name == postgresDialect.name {
		opts = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}
	}
	stx, err := src.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("read the source: %w", err)
	}
	defer stx.Rollback() //nolint:errcheck // read only: nothing to keep
	tx, err := dst.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin on the target: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback() // err says what went wrong; nothing was committed
		}
	}()
	if err := applyMigrationsTx(ctx, tx, dst.d, logger, ms); err != nil {
		return nil, fmt.Errorf("create the schema: %w", err)
	}
	tables, err := listTables(ctx, tx, dst.d)
	if err != nil {
		return nil, err
	}
	for _, t := range tables {
		if !slices.Contains(copiedTables, t) && !slices.Contains(notCopiedTables, t) {
			return nil, fmt.Errorf("the schema has a table %s this rota does not know how to copy", t)
		}
	}
	for _, t := range copiedTables {
		n, err := copyTable(ctx, stx, tx, dst.d, t)
		if err != nil {
			return nil, fmt.Errorf("copy %s: %w", t, err)
		}
		want, err := countRows(ctx, stx, t)
		if err != nil {
			return nil, err
		}
		got, err := countRows(ctx, tx, t)
		if err != nil {
			return nil, err
		}
		if n != want || got != want {
			return nil, fmt.Errorf("copy %s: the source holds %d rows, %d were read and the target holds %d", t, want, n, got)
		}
		counts = append(counts, TableCount{Table: t, Rows: got})
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit on the target: %w", err)
	}
	return counts, nil
}

// copyTable streams every row of table from src to dst and returns how many it copied.
// The columns are the target's, read from its schema, so their order need not match.
func copyTable(ctx context.Context, src, dst *sql.Tx, d dialect, table string) (int64, error) {
	probe, err := dst.QueryContext(ctx, "SELECT * FROM "+quoteIdent(table)+" WHERE 1 = 0")
	if err != nil {
		return 0, err
	}
	cols, err := probe.Columns()
	probe.Close()
	if err != nil {
		return 0, err
	}
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = quoteIdent(c)
	}
	list := strings.Join(quoted, ", ")
	rows, err := src.QueryContext(ctx, "SELECT "+list+" FROM "+quoteIdent(table))
	if err != nil {
		return 0, err
	}
	defer rows.Close()

	// As many rows a statement as stay well inside both backends' limits on parameters.
	// The statement for a full chunk is prepared once: parsing hundreds of parameters
	// costs more than inserting the rows.
	perStatement := max(1, 900/len(cols))
	full, err := dst.PrepareContext(ctx, multiInsert(d, table, list, len(cols), perStatement))
	if err != nil {
		return 0, err
	}
	defer full.Close()
	var (
		n    int64
		args []any
	)
	flush := func() error {
		if len(args) == 0 {
			return nil
		}
		var err error
		if k := len(args) / len(cols); k == perStatement {
			_, err = full.ExecContext(ctx, args...)
		} else {
			_, err = dst.ExecContext(ctx, multiInsert(d, table, list, len(cols), k), args...)
		}
		args = args[:0]
		return err
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return n, err
		}
		args = append(args, vals...)
		n++
		if len(args) >= perStatement*len(cols) {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	if err := rows.Err(); err != nil {
		return n, err
	}
	return n, flush()
}

// multiInsert is the statement inserting rows rows of cols columns named by list. SQLite
// gets anonymous parameters (?): binding numbered ones ($N) looks each one's name up in a
// list, which costs the square of their number in a statement of hundreds.
func multiInsert(d dialect, table, list string, cols, rows int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO ")
	b.WriteString(quoteIdent(table))
	b.WriteString(" (")
	b.WriteString(list)
	b.WriteString(") VALUES ")
	p := 1
	for r := range rows {
		if r > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for c := range cols {
			if c > 0 {
				b.WriteString(", ")
			}
			if d.name == sqliteDialect.name {
				b.WriteByte('?')
			} else {
				b.WriteByte('$')
				b.WriteString(strconv.Itoa(p))
			}
			p++
		}
		b.WriteByte(')')
	}
	return b.String()
}

// showURL is a store URL as an error may show it: a SQLite file's path in full, a
// PostgreSQL URL without its password.
func showURL(u string) string {
	if strings.HasPrefix(u, "sqlite://") {
		return u
	}
	p, err := url.Parse(u)
	if err != nil || p.Scheme == "" {
		return redact(u)
	}
	if _, has := p.User.Password(); has {
		p.User = url.UserPassword(p.User.Username(), "xxx")
	}
	for _, secret := range []string{"password", "sslpassword"} {
		if q := p.Query(); q.Has(secret) {
			q.Set(secret, "xxx")
			p.RawQuery = q.Encode()
		}
	}
	return p.String()
}
