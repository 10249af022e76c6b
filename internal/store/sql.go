package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// Open opens the store at url and applies any missing migrations. It accepts
// sqlite://PATH (sqlite:///abs/path.db or sqlite://relative/path.db) and
// postgres://… or postgresql://… (any URL pgx accepts). Any other URL yields an error
// wrapping ErrUnsupportedURL. A nil logger discards.
func Open(ctx context.Context, url string, logger *slog.Logger) (Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case strings.HasPrefix(url, "sqlite://"):
		return openSQLite(ctx, strings.TrimPrefix(url, "sqlite://"), logger)
	case strings.HasPrefix(url, "postgres://"), strings.HasPrefix(url, "postgresql://"):
		return openPostgres(ctx, url, logger)
	}
	return nil, fmt.Errorf("store: open %q: %w", redact(url), ErrUnsupportedURL)
}

// redact drops everything after the scheme so a password in a URL never reaches an
// error message or a log.
func redact(url string) string {
	if i := strings.Index(url, "://"); i >= 0 {
		return url[:i+3] + "…"
	}
	return url
}

// dialect holds what differs between the backends once a connection is open.
type dialect struct {
	name string
	// lockWrites, when set, runs first in every write transaction that appends events or
	// migrates, so that writers in other processes wait for it. SQLite needs none: its
	// write transactions begin IMMEDIATE and so already exclude each other.
	lockWrites string
}

// sqlStore is the Store for both backends. Statements use $N placeholders, which both
// PostgreSQL and SQLite understand, and INSERT … ON CONFLICT … DO UPDATE, which both
// support with the same syntax.
type sqlStore struct {
	d     dialect
	write *sql.DB // used for transactions that change something
	read  *sql.DB // used for loads; the same pool as write for PostgreSQL

	// writeSem serializes Commit within this process: event IDs are MAX(id)+1, which is
	// only correct with one writer at a time, and waiting here rather than on a database
	// lock keeps waiting writers from each holding a connection. It is a channel rather
	// than a mutex so that a waiting Commit still honours its context.
	writeSem chan struct{}

	// fence is set by a Lease (PostgreSQL only): every write transaction then checks that
	// the leader term in the store is still this server's, so a deposed leader's late
	// commit fails instead of overwriting its successor's work.
	fence *fence
	// lock is the SQLite store's lock file, held until Close (see lockSQLite).
	lock io.Closer
	// stmts are the write statements, prepared once.
	stmts stmtCache
}

func newSQLStore(d dialect, write, read *sql.DB) *sqlStore {
	return &sqlStore{d: d, write: write, read: read, writeSem: make(chan struct{}, 1), stmts: stmtCache{db: write, d: d}}
}

// Close releases both pools.
func (s *sqlStore) Close() error {
	err := errors.Join(s.stmts.close(), s.write.Close())
	if s.read != s.write {
		err = errors.Join(err, s.read.Close())
	}
	if s.lock != nil {
		// After the pools: the file is released only once nothing here can write it.
		err = errors.Join(err, s.lock.Close())
		s.lock = nil
	}
	if err != nil {
		return fmt.Errorf("store: close %s: %w", s.d.name, err)
	}
	return nil
}

// table describes one table for building multi-row inserts.
type table struct {
	name string
	cols []string
	// key lists the primary-key columns; a row whose key exists replaces the stored one.
	// Empty means append only.
	key []string
}

var (
	jobsTable = table{
		name: "jobs",
		cols: []string{"id", "state", "queue", "team", "user_name", "name", "submit_time", "data", "end_time"},
		key:  []string{"id"},
	}
	attemptsTable = table{
		name: "attempts",
		cols: []string{"job_id", "attempt", "state", "assign_time", "start_time", "end_time",
			"exit_code", "reason", "placements", "message"},
		key: []string{"job_id", "attempt"},
	}
	nodesTable = table{
		name: "nodes",
		cols: []string{"name", "state", "last_heartbeat", "inventory", "data"},
		key:  []string{"name"},
	}
	queuesTable = table{
		name: "queues",
		cols: []string{"name", "data"},
		key:  []string{"name"},
	}
	teamsTable = table{
		name: "teams",
		cols: []string{"name", "data"},
		key:  []string{"name"},
	}
	reservationsTable = table{
		name: "reservations",
		cols: []string{"id", "team", "start_time", "end_time", "data"},
		key:  []string{"id"},
	}
	eventsTable = table{
		name: "events",
		cols: []string{"id", "time", "actor", "kind", "job_id", "attempt", "node",
			"from_state", "to_state", "reason", "message", "role", "source", "before_value", "after_value"},
	}
	settingsTable   = table{name: "settings", cols: []string{"name", "data"}, key: []string{"name"}}
	usersTable      = table{name: "users", cols: []string{"name", "data"}, key: []string{"name"}}
	tokensTable     = table{name: "tokens", cols: []string{"id", "hash", "user_name", "data"}, key: []string{"id"}}
	joinTokensTable = table{name: "join_tokens", cols: []string{"id", "hash", "data"}, key: []string{"id"}}
	nodeCertsTable  = table{name: "node_certs", cols: []string{"node", "serial", "data"}, key: []string{"node"}}
	// Idempotency keys are only ever inserted: a second submit with a key is answered
	// from the first, so a conflict here is a bug to surface, not a row to replace.
	idempotencyTable = table{name: "idempotency", cols: []string{"user_name", "key", "hash", "job_id", "created"}}
)

// rowsPerStatement caps the rows one statement inserts or deletes. A handful of rows goes in one statement (one
// round trip to PostgreSQL); thousands go in a few dozen statements, each under both
// backends' limits on bound parameters (32766 in SQLite, 999 in builds before 3.32;
// 65535 in PostgreSQL) for tables of up to 15 columns.
const rowsPerStatement = 60

// insertSQL returns the statement inserting n rows into t, replacing rows whose key exists.
// Each text is made once: every commit looks its statements up by their text, and
// making it afresh was a fifth of what a submit's commit allocated. The texts are few
// (tables × dialects × the sizes chunks gives).
func (t table) insertSQL(d dialect, n int) string {
	k := insertKey{t.name, d.name, len(t.cols), n}
	if q, ok := insertSQLs.Load(k); ok {
		return q.(string)
	}
	q := t.makeInsertSQL(d, n)
	insertSQLs.Store(k, q)
	return q
}

// insertSQLs holds the texts insertSQL made, by table (its name and how many columns it
// writes: a test writes a table as an older schema had it), dialect and rows.
var insertSQLs sync.Map

type insertKey struct {
	table, dialect string
	cols, rows     int
}

func (t table) makeInsertSQL(d dialect, n int) string {
	var b strings.Builder
	b.WriteString(multiInsert(d, t.name, strings.Join(t.cols, ", "), len(t.cols), n))
	if len(t.key) > 0 {
		b.WriteString(" ON CONFLICT (")
		b.WriteString(strings.Join(t.key, ", "))
		b.WriteString(") DO UPDATE SET ")
		first := true
		for _, c := range t.cols {
			if isKey(t.key, c) {
				continue
			}
			if !first {
				b.WriteString(", ")
			}
			first = false
			b.WriteString(c)
			b.WriteString(" = excluded.")
			b.WriteString(c)
		}
	}
	return b.String()
}

func isKey(key []string, col string) bool {
	for _, k := range key {
		if k == col {
			return true
		}
	}
	return false
}

// chunks splits n rows into statement sizes: as many of rowsPerStatement as fit, then the
// rest as a sum of powers of two. A table is then written by at most a few distinct
// statements, each prepared once per connection and kept (see stmtCache), rather than by
// a statement text of its own for every row count.
func chunks(n int) []int {
	var out []int
	for ; n >= rowsPerStatement; n -= rowsPerStatement {
		out = append(out, rowsPerStatement)
	}
	for p := 32; p > 0; p /= 2 {
		if n >= p {
			out = append(out, p)
			n -= p
		}
	}
	return out
}

// insert writes rows into t in statements of at most rowsPerStatement rows. appendRow
// appends the column values of row i, in t.cols order, to args.
func insert[T any](ctx context.Context, w writeTx, t table, rows []T, appendRow func(args []any, r *T) ([]any, error)) error {
	start := 0
	for _, n := range chunks(len(rows)) {
		if w.Tx == nil {
			if _, err := w.stmts.get(ctx, t.insertSQL(w.stmts.d, n)); err != nil {
				return err
			}
			continue
		}
		chunk := rows[start : start+n]
		start += n
		args := make([]any, 0, len(chunk)*len(t.cols))
		for i := range chunk {
			var err error
			if args, err = appendRow(args, &chunk[i]); err != nil {
				return fmt.Errorf("encode %s row: %w", t.name, err)
			}
		}
		if _, err := w.exec(ctx, t.insertSQL(w.stmts.d, len(chunk)), args...); err != nil {
			return fmt.Errorf("write %s: %w", t.name, err)
		}
	}
	return nil
}

// writeTx is a write transaction and the store's prepared statements. A writeTx with no
// transaction prepares the statements it is asked to run, and runs none.
type writeTx struct {
	*sql.Tx
	stmts *stmtCache
}

// exec runs query in the transaction through its prepared statement; with no
// transaction, it only prepares it.
func (w writeTx) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := w.stmts.get(ctx, query)
	if err != nil || w.Tx == nil {
		return nil, err
	}
	return w.StmtContext(ctx, st).ExecContext(ctx, args...)
}

// queryRow runs query, which returns one row, in the transaction through its prepared
// statement and scans the row into dest; with no transaction, it only prepares it.
// Unprepared, SQLite compiled the query again at each commit.
func (w writeTx) queryRow(ctx context.Context, query string, dest ...any) error {
	st, err := w.stmts.get(ctx, query)
	if err != nil || w.Tx == nil {
		return err
	}
	return w.StmtContext(ctx, st).QueryRowContext(ctx).Scan(dest...)
}

// stmtCache holds the write statements prepared on the write pool, by their text. The
// texts are few (a handful of sizes per table: see chunks), so it is never pruned.
type stmtCache struct {
	db *sql.DB
	d  dialect
	mu sync.Mutex
	m  map[string]*sql.Stmt
}

func (c *stmtCache) get(ctx context.Context, query string) (*sql.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.m[query]; ok {
		return st, nil
	}
	st, err := c.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("prepare: %w", err)
	}
	if c.m == nil {
		c.m = map[string]*sql.Stmt{}
	}
	c.m[query] = st
	return st, nil
}

func (c *stmtCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	for _, st := range c.m {
		err = errors.Join(err, st.Close())
	}
	c.m = nil
	return err
}

// lastByKey returns rows with only the last row of each key kept, in the order keys first
// appear. A batch may carry the same job twice (submitted, then placed), and PostgreSQL
// refuses to let one INSERT … ON CONFLICT update a row twice; keeping the last row is what
// applying the rows one by one would have left.
func lastByKey[T any, K comparable](rows []T, key func(*T) K) []T {
	if len(rows) < 2 {
		return rows
	}
	// Most batches carry each key once: they are written as they are, not copied. out
	// is made at the first key seen twice; until then, a row's place is its index.
	index := make(map[K]int, len(rows))
	var out []T
	for i := range rows {
		k := key(&rows[i])
		if j, ok := index[k]; ok {
			if out == nil {
				out = slices.Clone(rows[:i])
			}
			out[j] = rows[i]
			continue
		}
		if out == nil {
			index[k] = i
			continue
		}
		index[k] = len(out)
		out = append(out, rows[i])
	}
	if out == nil {
		return rows
	}
	return out
}

// deleteKeys deletes the rows of t whose single-column key is in keys, in statements of at
// most rowsPerStatement keys. A key with no row is not an error.
func deleteKeys[K any](ctx context.Context, w writeTx, t table, keys []K) error {
	start := 0
	for _, n := range chunks(len(keys)) {
		chunk := keys[start : start+n]
		start += n
		var q strings.Builder
		fmt.Fprintf(&q, "DELETE FROM %s WHERE %s IN (", t.name, t.key[0])
		args := make([]any, len(chunk))
		for i, k := range chunk {
			if i > 0 {
				q.WriteString(", ")
			}
			fmt.Fprintf(&q, "$%d", i+1)
			args[i] = k
		}
		q.WriteByte(')')
		if _, err := w.exec(ctx, q.String(), args...); err != nil {
			return fmt.Errorf("delete from %s: %w", t.name, err)
		}
	}
	return nil
}

type attemptKey struct {
	job int64
	n   int
}

// Commit applies b in one transaction and, once it has committed, writes the assigned
// event IDs into b.Events. On error nothing is written and b is unchanged.
func (s *sqlStore) Commit(ctx context.Context, b *Batch) error {
	if b.Empty() {
		return nil
	}
	select {
	case s.writeSem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("store: commit: %w", ctx.Err())
	}
	defer func() { <-s.writeSem }()

	lastID, err := s.commit(ctx, b)
	if err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	first := lastID - int64(len(b.Events)) + 1
	for i := range b.Events {
		b.Events[i].ID = first + int64(i)
	}
	return nil
}

// commit runs the transaction and returns the ID given to the batch's last event.
func (s *sqlStore) commit(ctx context.Context, b *Batch) (lastID int64, err error) {
	// The statements are prepared before the transaction begins: SQLite's write pool has
	// one connection, which the transaction then holds.
	if _, err := s.writeBatch(ctx, writeTx{nil, &s.stmts}, b); err != nil {
		return 0, err
	}
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			// The error that matters is err; a failed rollback leaves nothing committed.
			_ = tx.Rollback()
		}
	}()

	if s.fence != nil {
		if err := s.fence.check(ctx, tx); err != nil {
			return 0, err
		}
	}
	if len(b.Events) > 0 && s.d.lockWrites != "" {
		if _, err := tx.ExecContext(ctx, s.d.lockWrites); err != nil {
			return 0, fmt.Errorf("lock: %w", err)
		}
	}
	if lastID, err = s.writeBatch(ctx, writeTx{tx, &s.stmts}, b); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit transaction: %w", err)
	}
	return lastID, nil
}

// writeBatch writes b in w and returns the ID given to its last event. With no
// transaction in w it only prepares the statements that writing b takes.
func (s *sqlStore) writeBatch(ctx context.Context, w writeTx, b *Batch) (lastID int64, err error) {
	// Each table's deletes follow its upserts, so that a key the batch both upserts and
	// deletes ends deleted.
	queues := lastByKey(b.Queues, func(q *api.Queue) string { return q.Name })
	if err := insert(ctx, w, queuesTable, queues, appendQueue); err != nil {
		return 0, err
	}
	if err := deleteKeys(ctx, w, queuesTable, b.DeleteQueues); err != nil {
		return 0, err
	}
	teams := lastByKey(b.Teams, func(t *api.Team) string { return t.Name })
	if err := insert(ctx, w, teamsTable, teams, appendTeam); err != nil {
		return 0, err
	}
	if err := deleteKeys(ctx, w, teamsTable, b.DeleteTeams); err != nil {
		return 0, err
	}
	reservations := lastByKey(b.Reservations, func(r *api.Reservation) int64 { return r.ID })
	if err := insert(ctx, w, reservationsTable, reservations, appendReservation); err != nil {
		return 0, err
	}
	if err := deleteKeys(ctx, w, reservationsTable, b.DeleteReservations); err != nil {
		return 0, err
	}
	// Jobs go before attempts: attempts reference jobs, and PostgreSQL checks foreign keys
	// at the end of each statement.
	jobs := lastByKey(b.Jobs, func(j *api.Job) int64 { return j.ID })
	if err := insert(ctx, w, jobsTable, jobs, appendJob); err != nil {
		return 0, err
	}
	attempts := lastByKey(b.Attempts, func(a *api.Attempt) attemptKey { return attemptKey{a.JobID, a.N} })
	if err := insert(ctx, w, attemptsTable, attempts, appendAttempt); err != nil {
		return 0, err
	}
	nodes := lastByKey(b.Nodes, func(n *api.Node) string { return n.Name })
	if err := insert(ctx, w, nodesTable, nodes, appendNode); err != nil {
		return 0, err
	}
	settings := lastByKey(b.Settings, func(s *Setting) string { return s.Name })
	if err := insert(ctx, w, settingsTable, settings, appendSetting); err != nil {
		return 0, err
	}
	users := lastByKey(b.Users, func(u *api.User) string { return u.Name })
	if err := insert(ctx, w, usersTable, users, appendUser); err != nil {
		return 0, err
	}
	if err := deleteKeys(ctx, w, usersTable, b.DeleteUsers); err != nil {
		return 0, err
	}
	tokens := lastByKey(b.Tokens, func(t *TokenRecord) string { return t.ID })
	if err := insert(ctx, w, tokensTable, tokens, appendToken); err != nil {
		return 0, err
	}
	if err := deleteKeys(ctx, w, tokensTable, b.DeleteTokens); err != nil {
		return 0, err
	}
	joins := lastByKey(b.JoinTokens, func(t *JoinTokenRecord) string { return t.ID })
	if err := insert(ctx, w, joinTokensTable, joins, appendJoinToken); err != nil {
		return 0, err
	}
	certs := lastByKey(b.NodeCerts, func(c *NodeCert) string { return c.Node })
	if err := insert(ctx, w, nodeCertsTable, certs, appendNodeCert); err != nil {
		return 0, err
	}
	// A node's certificate goes with it: a node added again must join again.
	if err := deleteKeys(ctx, w, nodeCertsTable, b.DeleteNodes); err != nil {
		return 0, err
	}
	if err := deleteKeys(ctx, w, nodesTable, b.DeleteNodes); err != nil {
		return 0, err
	}
	if err := insert(ctx, w, idempotencyTable, b.Idempotency, appendIdempotency); err != nil {
		return 0, err
	}
	if !b.PruneIdempotency.IsZero() {
		if _, err := w.exec(ctx, "DELETE FROM idempotency WHERE created < $1", formatTime(b.PruneIdempotency)); err != nil {
			return 0, fmt.Errorf("prune idempotency keys: %w", err)
		}
	}
	if len(b.Events) > 0 {
		// Under the write lock no other transaction can append, so IDs follow commit order
		// and a reader polling with AfterID never skips an event committed later.
		if err := w.queryRow(ctx, "SELECT COALESCE(MAX(id), 0) FROM events", &lastID); err != nil {
			return 0, fmt.Errorf("read last event id: %w", err)
		}
		next := lastID
		appendEvent := func(args []any, e *api.Event) ([]any, error) {
			next++
			return append(args, next, formatTime(e.Time), e.Actor, e.Kind, e.JobID, e.Attempt, e.Node,
				string(e.From), string(e.To), e.Reason, e.Message, e.Role, e.Source, string(e.Before), string(e.After)), nil
		}
		if err := insert(ctx, w, eventsTable, b.Events, appendEvent); err != nil {
			return 0, err
		}
		lastID = next
	}
	return lastID, nil
}

func appendJob(args []any, j *api.Job) ([]any, error) {
	data, err := encodeJob(*j)
	if err != nil {
		return args, err
	}
	return append(args, j.ID, string(j.State), j.Spec.Queue, j.Spec.Team, j.Spec.User, j.Spec.Name,
		formatTime(j.SubmitTime), string(data), formatTimePtr(j.EndTime)), nil
}

func appendAttempt(args []any, a *api.Attempt) ([]any, error) {
	placements, err := encodeJSON(a.Placements)
	if err != nil {
		return args, err
	}
	var exitCode any
	if a.ExitCode != nil {
		exitCode = int64(*a.ExitCode)
	}
	return append(args, a.JobID, a.N, string(a.State), formatTime(a.AssignTime),
		formatTimePtr(a.StartTime), formatTimePtr(a.EndTime), exitCode, a.Reason, placements, a.Message), nil
}

func appendNode(args []any, n *api.Node) ([]any, error) {
	inv, err := encodeJSON(n.Inventory)
	if err != nil {
		return args, err
	}
	data, err := encodeJSON(nodeData{Agent: n.Agent, Syncing: n.Syncing, SyncEpoch: n.SyncEpoch, HealthCheck: n.HealthCheck, Degraded: n.Degraded,
		Maintenance: n.Maintenance, Drift: n.Drift, DriftDrain: n.DriftDrain, DataDirProblem: n.DataDirProblem})
	if err != nil {
		return args, err
	}
	return append(args, n.Name, string(n.State), formatTime(n.LastHeartbeat), inv, data), nil
}

// nodeData is what the nodes table keeps beyond state and inventory. The node's telemetry,
// leftovers and held GPUs change with every reading and are not stored.
type nodeData struct {
	Agent       *api.AgentInfo   `json:"agent,omitempty"`
	Syncing     bool             `json:"syncing,omitempty"`
	SyncEpoch   uint64           `json:"sync_epoch,omitempty"`
	HealthCheck *api.HealthCheck `json:"health_check,omitempty"`
	Degraded    []string         `json:"degraded,omitempty"`
	// Maintenance is an operator's drain with its reason and window. It lives in the
	// data column, which both backends keep as JSON, so it needs no new column.
	Maintenance *api.Maintenance `json:"maintenance,omitempty"`
	// Drift and DriftDrain: the node's versions outside its pool's wanted ranges, and
	// whether it drains on its own for it; a restart must know the drain was automatic.
	Drift      []api.VersionDrift `json:"drift,omitempty"`
	DriftDrain bool               `json:"drift_drain,omitempty"`
	// DataDirProblem is why the node's agent last said it cannot run attempts: a
	// restart keeps new work off the node until its agent says otherwise.
	DataDirProblem string `json:"data_dir_problem,omitempty"`
}

func appendSetting(args []any, s *Setting) ([]any, error) {
	if !json.Valid(s.Data) {
		return args, fmt.Errorf("setting %s is not valid JSON", s.Name)
	}
	return append(args, s.Name, string(s.Data)), nil
}

func appendUser(args []any, u *api.User) ([]any, error) {
	v := *u
	v.Created, v.Teams = v.Created.UTC(), nil
	data, err := encodeJSON(v)
	if err != nil {
		return args, err
	}
	return append(args, u.Name, data), nil
}

func appendToken(args []any, t *TokenRecord) ([]any, error) {
	data, err := encodeJSON(t.TokenInfo)
	if err != nil {
		return args, err
	}
	return append(args, t.ID, t.Hash, t.User, data), nil
}

func appendJoinToken(args []any, t *JoinTokenRecord) ([]any, error) {
	data, err := encodeJSON(t.JoinTokenInfo)
	if err != nil {
		return args, err
	}
	return append(args, t.ID, t.Hash, data), nil
}

func appendNodeCert(args []any, c *NodeCert) ([]any, error) {
	data, err := encodeJSON(c)
	if err != nil {
		return args, err
	}
	return append(args, c.Node, c.Serial, data), nil
}

func appendIdempotency(args []any, r *IdempotencyRecord) ([]any, error) {
	return append(args, r.User, r.Key, r.Hash, r.JobID, formatTime(r.Created)), nil
}

func appendQueue(args []any, q *api.Queue) ([]any, error) {
	data, err := encodeJSON(q)
	if err != nil {
		return args, err
	}
	return append(args, q.Name, data), nil
}

func appendTeam(args []any, t *api.Team) ([]any, error) {
	data, err := encodeTeam(*t)
	if err != nil {
		return args, err
	}
	return append(args, t.Name, data), nil
}

func appendReservation(args []any, r *api.Reservation) ([]any, error) {
	data, err := encodeReservation(*r)
	if err != nil {
		return args, err
	}
	return append(args, r.ID, r.Team, formatTime(r.Start), formatTime(r.End), data), nil
}

// LoadJobs returns every job, ordered by ID.
func (s *sqlStore) LoadJobs(ctx context.Context) ([]api.Job, error) {
	jobs, err := query(ctx, s.read, "SELECT data FROM jobs ORDER BY id", nil,
		func(rows *sql.Rows) (api.Job, error) {
			var data []byte
			if err := rows.Scan(&data); err != nil {
				return api.Job{}, err
			}
			return decodeJob(data)
		})
	if err != nil {
		return nil, fmt.Errorf("store: load jobs: %w", err)
	}
	return jobs, nil
}

// LoadAttempts returns every attempt, ordered by job ID then attempt number.
func (s *sqlStore) LoadAttempts(ctx context.Context) ([]api.Attempt, error) {
	const q = `SELECT job_id, attempt, state, assign_time, start_time, end_time, exit_code, reason, placements, message
		FROM attempts ORDER BY job_id, attempt`
	attempts, err := query(ctx, s.read, q, nil, scanAttempt)
	if err != nil {
		return nil, fmt.Errorf("store: load attempts: %w", err)
	}
	return attempts, nil
}

// LoadNodes returns every node, ordered by name. The fields the API fills in from the
// live state (GPUsUsed, CPUsUsed, Jobs, UsedGPUs, IdleGPUs and the like) are not stored
// and come back zero.
func (s *sqlStore) LoadNodes(ctx context.Context) ([]api.Node, error) {
	const q = "SELECT name, state, last_heartbeat, inventory, data FROM nodes ORDER BY name"
	nodes, err := query(ctx, s.read, q, nil, func(rows *sql.Rows) (api.Node, error) {
		var (
			n            api.Node
			state, heart string
			inv, data    []byte
		)
		if err := rows.Scan(&n.Name, &state, &heart, &inv, &data); err != nil {
			return n, err
		}
		n.State = api.NodeState(state)
		var err error
		if n.LastHeartbeat, err = parseTime(heart); err != nil {
			return n, err
		}
		if err = decodeJSON(inv, &n.Inventory); err != nil {
			return n, err
		}
		var nd nodeData
		err = decodeJSON(data, &nd)
		n.Agent, n.Syncing, n.SyncEpoch, n.HealthCheck, n.Degraded = nd.Agent, nd.Syncing, nd.SyncEpoch, nd.HealthCheck, nd.Degraded
		n.DataDirProblem = nd.DataDirProblem
		n.Maintenance, n.Drift, n.DriftDrain = nd.Maintenance, nd.Drift, nd.DriftDrain
		return n, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: load nodes: %w", err)
	}
	return nodes, nil
}

// LoadQueues returns the queues saved by Commit, ordered by name.
func (s *sqlStore) LoadQueues(ctx context.Context) ([]api.Queue, error) {
	queues, err := query(ctx, s.read, "SELECT data FROM queues ORDER BY name", nil, scanJSON[api.Queue])
	if err != nil {
		return nil, fmt.Errorf("store: load queues: %w", err)
	}
	return queues, nil
}

// LoadTeams returns the teams saved by Commit, ordered by name.
func (s *sqlStore) LoadTeams(ctx context.Context) ([]api.Team, error) {
	teams, err := query(ctx, s.read, "SELECT data FROM teams ORDER BY name", nil, scanJSON[api.Team])
	if err != nil {
		return nil, fmt.Errorf("store: load teams: %w", err)
	}
	return teams, nil
}

// LoadReservations returns the reservations saved by Commit, ordered by ID.
func (s *sqlStore) LoadReservations(ctx context.Context) ([]api.Reservation, error) {
	rs, err := query(ctx, s.read, "SELECT data FROM reservations ORDER BY id", nil, scanJSON[api.Reservation])
	if err != nil {
		return nil, fmt.Errorf("store: load reservations: %w", err)
	}
	return rs, nil
}

// LoadSettings returns every setting saved by Commit, by name.
func (s *sqlStore) LoadSettings(ctx context.Context) (map[string]json.RawMessage, error) {
	list, err := query(ctx, s.read, "SELECT name, data FROM settings ORDER BY name", nil, func(rows *sql.Rows) (Setting, error) {
		var (
			st   Setting
			data string
		)
		err := rows.Scan(&st.Name, &data)
		st.Data = json.RawMessage(data)
		return st, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: load settings: %w", err)
	}
	out := make(map[string]json.RawMessage, len(list))
	for _, st := range list {
		out[st.Name] = st.Data
	}
	return out, nil
}

// LoadUsers returns the users, ordered by name.
func (s *sqlStore) LoadUsers(ctx context.Context) ([]api.User, error) {
	users, err := query(ctx, s.read, "SELECT data FROM users ORDER BY name", nil, scanJSON[api.User])
	if err != nil {
		return nil, fmt.Errorf("store: load users: %w", err)
	}
	return users, nil
}

// LoadTokens returns every API token record, ordered by ID.
func (s *sqlStore) LoadTokens(ctx context.Context) ([]TokenRecord, error) {
	tokens, err := query(ctx, s.read, "SELECT hash, data FROM tokens ORDER BY id", nil, func(rows *sql.Rows) (TokenRecord, error) {
		var (
			t    TokenRecord
			data []byte
		)
		if err := rows.Scan(&t.Hash, &data); err != nil {
			return t, err
		}
		err := decodeJSON(data, &t.TokenInfo)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: load tokens: %w", err)
	}
	return tokens, nil
}

// LoadJoinTokens returns every join token record, ordered by ID.
func (s *sqlStore) LoadJoinTokens(ctx context.Context) ([]JoinTokenRecord, error) {
	tokens, err := query(ctx, s.read, "SELECT hash, data FROM join_tokens ORDER BY id", nil, func(rows *sql.Rows) (JoinTokenRecord, error) {
		var (
			t    JoinTokenRecord
			data []byte
		)
		if err := rows.Scan(&t.Hash, &data); err != nil {
			return t, err
		}
		err := decodeJSON(data, &t.JoinTokenInfo)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: load join tokens: %w", err)
	}
	return tokens, nil
}

// LoadNodeCerts returns the certificate each node may use, ordered by node.
func (s *sqlStore) LoadNodeCerts(ctx context.Context) ([]NodeCert, error) {
	certs, err := query(ctx, s.read, "SELECT data FROM node_certs ORDER BY node", nil, scanJSON[NodeCert])
	if err != nil {
		return nil, fmt.Errorf("store: load node certificates: %w", err)
	}
	return certs, nil
}

// LoadIdempotency returns the submit keys created at or after since.
func (s *sqlStore) LoadIdempotency(ctx context.Context, since time.Time) ([]IdempotencyRecord, error) {
	const q = "SELECT user_name, key, hash, job_id, created FROM idempotency WHERE created >= $1 ORDER BY created, user_name, key"
	recs, err := query(ctx, s.read, q, []any{formatTime(since)}, func(rows *sql.Rows) (IdempotencyRecord, error) {
		var (
			r       IdempotencyRecord
			created string
		)
		if err := rows.Scan(&r.User, &r.Key, &r.Hash, &r.JobID, &created); err != nil {
			return r, err
		}
		var err error
		r.Created, err = parseTime(created)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: load idempotency keys: %w", err)
	}
	return recs, nil
}

// Events returns events matching f, ordered by ID.
func (s *sqlStore) Events(ctx context.Context, f EventFilter) ([]api.Event, error) {
	if f.Limit < 0 {
		return nil, fmt.Errorf("store: events: negative limit %d", f.Limit)
	}
	q := filtered{args: []any{f.AfterID}}
	q.WriteString(`SELECT id, time, actor, kind, job_id, attempt, node, from_state, to_state, reason, message,
		role, source, before_value, after_value
		FROM events WHERE id > $1`)
	q.andIf(f.JobID != 0, "job_id = $%d", f.JobID)
	q.andIf(!f.Since.IsZero(), "time >= $%d", formatTime(f.Since))
	q.andIf(!f.Until.IsZero(), "time < $%d", formatTime(f.Until))
	q.andIf(f.Actor != "", "actor = $%d", f.Actor)
	q.andIf(f.Kind != "", "kind = $%d", f.Kind)
	q.orderByID(f.Limit)
	events, err := query(ctx, s.read, q.String(), q.args, scanEvent)
	if err != nil {
		return nil, fmt.Errorf("store: events: %w", err)
	}
	return events, nil
}

// filtered builds a SELECT with optional conditions, each bound to the next numbered
// parameter.
type filtered struct {
	strings.Builder
	args []any
}

// andIf adds " AND cond" with arg when ok; cond names its parameter as $%d.
func (q *filtered) andIf(ok bool, cond string, arg any) {
	if ok {
		q.args = append(q.args, arg)
		fmt.Fprintf(q, " AND "+cond, len(q.args))
	}
}

// orderByID ends the query in ID order, with at most limit rows when limit > 0.
func (q *filtered) orderByID(limit int) {
	q.WriteString(" ORDER BY id")
	if limit > 0 {
		q.args = append(q.args, limit)
		fmt.Fprintf(q, " LIMIT $%d", len(q.args))
	}
}

// scanJSON decodes a row whose only column is a T as JSON.
func scanJSON[T any](rows *sql.Rows) (T, error) {
	var (
		v    T
		data []byte
	)
	if err := rows.Scan(&data); err != nil {
		return v, err
	}
	// Not "return v, decodeJSON(…, &v)": Go leaves unspecified whether v is read before
	// or after the call fills it.
	err := decodeJSON(data, &v)
	return v, err
}

func scanAttempt(rows *sql.Rows) (api.Attempt, error) {
	var (
		a             api.Attempt
		state, assign string
		start, end    sql.NullString
		exitCode      sql.NullInt64
		placements    []byte
	)
	if err := rows.Scan(&a.JobID, &a.N, &state, &assign, &start, &end, &exitCode, &a.Reason, &placements, &a.Message); err != nil {
		return a, err
	}
	a.State = api.JobState(state)
	var err error
	if a.AssignTime, err = parseTime(assign); err != nil {
		return a, err
	}
	if a.StartTime, err = parseTimePtr(start); err != nil {
		return a, err
	}
	if a.EndTime, err = parseTimePtr(end); err != nil {
		return a, err
	}
	if exitCode.Valid {
		c := int(exitCode.Int64)
		a.ExitCode = &c
	}
	err = decodeJSON(placements, &a.Placements)
	return a, err
}

func scanEvent(rows *sql.Rows) (api.Event, error) {
	var (
		e                          api.Event
		t, from, to, before, after string
	)
	err := rows.Scan(&e.ID, &t, &e.Actor, &e.Kind, &e.JobID, &e.Attempt, &e.Node, &from, &to, &e.Reason, &e.Message,
		&e.Role, &e.Source, &before, &after)
	if err != nil {
		return e, err
	}
	e.From, e.To = api.JobState(from), api.JobState(to)
	if before != "" {
		e.Before = json.RawMessage(before)
	}
	if after != "" {
		e.After = json.RawMessage(after)
	}
	e.Time, err = parseTime(t)
	return e, err
}

// query runs q and turns each row into a T with scan.
func query[T any](ctx context.Context, db *sql.DB, q string, args []any, scan func(*sql.Rows) (T, error)) ([]T, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
