package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrNotLeader is returned by Commit on a store fenced by a Lease when this server does not
// hold the lease: it never took it, it lost its session, or another server has taken it
// since (the error then names both terms).
var ErrNotLeader = errors.New("this server does not hold the leader lease")

// leaseLockKey is the session-level advisory lock the leader holds for as long as it leads.
// It spells "rotaLEAD", and differs from postgresWriteLock, which every writer takes for
// the length of one transaction.
const leaseLockKey int64 = 0x726f74614c454144

// fence is the leader term a fenced store's writes must match.
type fence struct {
	// term is this server's term while it holds the lease, 0 otherwise.
	term atomic.Int64
}

// check runs first in every write transaction of a fenced store. It reads the term with
// FOR SHARE, so a server taking the lease (which updates the row) waits for this
// transaction to end, and this transaction, if it started after the update, sees the new
// term and fails: a deposed leader's commit either lands before its successor's term
// begins, and so before the successor loads the state, or not at all.
func (f *fence) check(ctx context.Context, tx *sql.Tx) error {
	mine := f.term.Load()
	if mine == 0 {
		return ErrNotLeader
	}
	var cur int64
	if err := tx.QueryRowContext(ctx, "SELECT term FROM leader WHERE id = 1 FOR SHARE").Scan(&cur); err != nil {
		return fmt.Errorf("check the leader term: %w", err)
	}
	if cur != mine {
		f.term.CompareAndSwap(mine, 0)
		return fmt.Errorf("%w: deposed: the leader term is now %d, this server's was %d", ErrNotLeader, cur, mine)
	}
	return nil
}

// LeaseOptions describe the server taking part in the election.
type LeaseOptions struct {
	// ID names this server among the replicas; Host is the machine it runs on and URL the
	// address clients and agents reach its API at, which standbys hand to callers.
	ID, Host, URL string
	// CheckTimeout bounds one check of the held session (default 2s): a leader that cannot
	// reach its session for that long gives the lease up.
	CheckTimeout time.Duration
	// SessionTimeout is how long PostgreSQL keeps an idle lease session (default 10s): a
	// leader that hangs without exiting (stopped, or cut off by the network) loses its
	// session, and so the lease, after this long. It must exceed the check interval.
	SessionTimeout time.Duration
}

// Lease elects one leader among the servers sharing a PostgreSQL store. The leader holds a
// session-level advisory lock on a session of its own, and the term it got by incrementing
// the leader row when it took the lock; every Commit of its store checks that term.
// PostgreSQL releases the lock the moment the session ends (the process died, the
// connection broke, pg_terminate_backend), and another server may then take it.
type Lease struct {
	url     string
	st      *sqlStore
	opts    LeaseOptions
	started time.Time

	mu   sync.Mutex
	db   *sql.DB // the lease session's pool of one, open while the lease is held
	conn *sql.Conn
	term int64
}

// OpenLease prepares st, which must be a PostgreSQL store opened from url, for leader
// election, and fences it at once: until TryAcquire succeeds, every Commit fails with
// ErrNotLeader. It takes nothing yet.
func OpenLease(url string, st Store, opts LeaseOptions) (*Lease, error) {
	s, ok := st.(*sqlStore)
	if !ok || s.d.name != postgresDialect.name {
		return nil, errors.New("store: a leader lease needs a PostgreSQL store (postgres://…); a SQLite file serves one server")
	}
	if opts.ID == "" || opts.URL == "" {
		return nil, errors.New("store: a leader lease needs the server's ID and URL")
	}
	if opts.CheckTimeout <= 0 {
		opts.CheckTimeout = 2 * time.Second
	}
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = 10 * time.Second
	}
	if s.fence == nil {
		s.fence = &fence{}
	}
	return &Lease{url: url, st: s, opts: opts, started: time.Now()}, nil
}

// Term is the term this server leads in, 0 when it does not hold the lease.
func (l *Lease) Term() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.term
}

// TryAcquire takes the lease if no server holds it, and returns the new term; it returns
// 0 and no error when another server holds it, and the current term when this one does.
func (l *Lease) TryAcquire(ctx context.Context) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		return l.term, nil
	}
	db, err := sql.Open("pgx", l.url)
	if err != nil {
		return 0, fmt.Errorf("store: lease: open %s: %w", redact(l.url), err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		db.Close()
		return 0, fmt.Errorf("store: lease: connect: %w", err)
	}
	fail := func(err error) (int64, error) {
		conn.Close()
		db.Close()
		return 0, err
	}
	var got bool
	if err := conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", leaseLockKey).Scan(&got); err != nil {
		return fail(fmt.Errorf("store: lease: take the lock: %w", err))
	}
	if !got {
		return fail(nil)
	}
	// A leader that hangs must not keep the lease: PostgreSQL ends a session idle this long
	// (the leader checks it far more often). Before PostgreSQL 14 the setting is unknown,
	// and a hung leader keeps the lease until its TCP connection times out.
	_, _ = conn.ExecContext(ctx, fmt.Sprintf("SET idle_session_timeout = %d", l.opts.SessionTimeout.Milliseconds()))
	var term int64
	err = conn.QueryRowContext(ctx, "UPDATE leader SET term = term + 1, holder = $1, url = $2, since = $3 WHERE id = 1 RETURNING term",
		l.opts.ID, l.opts.URL, formatTime(time.Now())).Scan(&term)
	if err != nil {
		// Closing the session releases the lock.
		return fail(fmt.Errorf("store: lease: start a term: %w", err))
	}
	l.db, l.conn, l.term = db, conn, term
	l.st.fence.term.Store(term)
	return term, nil
}

// Check confirms that the lease is still held: its session answers and the term is still
// this server's. When it is not, the store is fenced at once (every Commit fails), the
// session is closed, and Check returns an error wrapping ErrNotLeader.
func (l *Lease) Check(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return ErrNotLeader
	}
	cctx, cancel := context.WithTimeout(ctx, l.opts.CheckTimeout)
	defer cancel()
	var term int64
	err := l.conn.QueryRowContext(cctx, "SELECT term FROM leader WHERE id = 1").Scan(&term)
	if err == nil && term != l.term {
		err = fmt.Errorf("the leader term is %d, this server's was %d", term, l.term)
	}
	if err != nil {
		l.dropLocked()
		return fmt.Errorf("%w: lease lost: %v", ErrNotLeader, err)
	}
	return nil
}

// Release gives the lease up, if held: the store is fenced and the session closed, which
// frees the lock for another server at once.
func (l *Lease) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		// Unlock before closing: the server frees a closed session's locks only once its
		// backend has exited, a moment after the client has gone, and until then a
		// standby would find the lease still held.
		ctx, cancel := context.WithTimeout(context.Background(), l.opts.CheckTimeout)
		_, _ = l.conn.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", leaseLockKey)
		cancel()
	}
	l.dropLocked()
}

func (l *Lease) dropLocked() {
	l.st.fence.term.Store(0)
	if l.conn != nil {
		l.conn.Close()
		l.db.Close()
	}
	l.db, l.conn, l.term = nil, nil, 0
}

// Announce records this server among the replicas, as seen now. It is not fenced:
// standbys announce themselves too.
func (l *Lease) Announce(ctx context.Context) error {
	now := formatTime(time.Now())
	_, err := l.st.write.ExecContext(ctx, `INSERT INTO replicas (id, host, url, started, seen) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (id) DO UPDATE SET host = excluded.host, url = excluded.url, seen = excluded.seen`,
		l.opts.ID, l.opts.Host, l.opts.URL, formatTime(l.started), now)
	if err != nil {
		return fmt.Errorf("store: announce this replica: %w", err)
	}
	// Replicas gone for a day are forgotten, so the table does not grow with restarts.
	if _, err := l.st.write.ExecContext(ctx, "DELETE FROM replicas WHERE seen < $1", formatTime(time.Now().Add(-24*time.Hour))); err != nil {
		return fmt.Errorf("store: forget old replicas: %w", err)
	}
	return nil
}

// Withdraw removes this server from the replicas, at a clean stop.
func (l *Lease) Withdraw(ctx context.Context) error {
	if _, err := l.st.write.ExecContext(ctx, "DELETE FROM replicas WHERE id = $1", l.opts.ID); err != nil {
		return fmt.Errorf("store: withdraw this replica: %w", err)
	}
	return nil
}

// LeaseStatus is who leads and who is there, as the store has it.
type LeaseStatus struct {
	// Term is the last term started; Holder, URL and Since describe the server that
	// started it. Held says whether a session holds the lease now: after a leader's
	// session ends and before another server takes over, it is false.
	Term   int64
	Holder string
	URL    string
	Since  time.Time
	Held   bool
	// Replicas are the servers seen at or after the time given to Status, ordered by ID.
	Replicas []Replica
}

// Replica is one server that has announced itself.
type Replica struct {
	ID, Host, URL string
	Started, Seen time.Time
}

// Status reads the leader row, whether the lease is held, and the replicas seen since.
func (l *Lease) Status(ctx context.Context, since time.Time) (LeaseStatus, error) {
	var (
		st         LeaseStatus
		sinceText  string
		heldLocks  int
		classid    = uint64(leaseLockKey) >> 32
		objid      = uint64(leaseLockKey) & 0xffffffff
		leaderRead = "SELECT term, holder, url, since FROM leader WHERE id = 1"
	)
	if err := l.st.read.QueryRowContext(ctx, leaderRead).Scan(&st.Term, &st.Holder, &st.URL, &sinceText); err != nil {
		return st, fmt.Errorf("store: read the leader: %w", err)
	}
	if sinceText != "" {
		t, err := parseTime(sinceText)
		if err != nil {
			return st, fmt.Errorf("store: read the leader: %w", err)
		}
		st.Since = t
	}
	const held = `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1`
	if err := l.st.read.QueryRowContext(ctx, held, int64(classid), int64(objid)).Scan(&heldLocks); err != nil {
		return st, fmt.Errorf("store: read the lease lock: %w", err)
	}
	st.Held = heldLocks > 0
	reps, err := query(ctx, l.st.read, "SELECT id, host, url, started, seen FROM replicas WHERE seen >= $1 ORDER BY id",
		[]any{formatTime(since)}, func(rows *sql.Rows) (Replica, error) {
			var (
				r             Replica
				started, seen string
			)
			if err := rows.Scan(&r.ID, &r.Host, &r.URL, &started, &seen); err != nil {
				return r, err
			}
			var err error
			if r.Started, err = parseTime(started); err != nil {
				return r, err
			}
			r.Seen, err = parseTime(seen)
			return r, err
		})
	if err != nil {
		return st, fmt.Errorf("store: read the replicas: %w", err)
	}
	st.Replicas = reps
	return st, nil
}

// ID is this server's replica ID, and URL its API's address, as given to OpenLease.
func (l *Lease) ID() string  { return l.opts.ID }
func (l *Lease) URL() string { return l.opts.URL }

// Started is when this server's lease was opened, which is when it started.
func (l *Lease) Started() time.Time { return l.started }
