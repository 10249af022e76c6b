package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store/storetest"
)

// fillStore commits to the store at url a row of every kind the store holds, and more
// events than one insert statement takes, then closes it.
func fillStore(t *testing.T, url string) {
	t.Helper()
	s, err := Open(context.Background(), url, nil)
	if err != nil {
		t.Fatalf("Open %s: %v", url, err)
	}
	defer s.Close()
	var evs []api.Event
	for i := range 150 {
		evs = append(evs, fullEvent(int64(i%7+1)))
	}
	commit(t, s, &Batch{
		Jobs:         []api.Job{fullJob(7), bareJob(3), fullJob(9)},
		Attempts:     []api.Attempt{fullAttempt(7, 2), bareAttempt(7, 1), fullAttempt(3, 1)},
		Nodes:        []api.Node{fullNode("gpu-02"), fullNode("gpu-01")},
		Queues:       []api.Queue{fullQueue("train"), fullQueue("batch")},
		Teams:        []api.Team{fullTeam("vision"), {Name: "nlp"}},
		Reservations: []api.Reservation{{ID: 11, Team: "nlp"}, fullReservation(4)},
		Events:       evs,
		Settings:     []Setting{{Name: "cluster", Data: json.RawMessage(`{"id":"0123456789abcdef"}`)}},
		Users:        []api.User{{Name: "ada", Role: "admin", UnixUser: "ada2", Created: t0}, {Name: "bob", Role: "member", Created: t0}},
		Tokens: []TokenRecord{{TokenInfo: api.TokenInfo{ID: "abcd1234", User: "ada", Description: "laptop", Created: t0,
			Expires: ptr(t0.Add(time.Hour))}, Hash: "ff00"}},
		JoinTokens:  []JoinTokenRecord{{JoinTokenInfo: api.JoinTokenInfo{ID: "j1", Created: t0, Expires: t0.Add(time.Hour), Uses: 3}, Hash: "aa11"}},
		NodeCerts:   []NodeCert{{Node: "gpu-01", Serial: "0a0b", Issued: t0, NotAfter: t0.Add(time.Hour), JoinToken: "j1"}},
		Idempotency: []IdempotencyRecord{{User: "ada", Key: "k-1", Hash: "beef", JobID: 7, Created: t0}},
	})
}

// dumpTables reads every copied table of the store at url, raw: each row's values in
// column order, the rows sorted, so two stores compare equal when they hold the same rows.
func dumpTables(t *testing.T, url string) map[string][]string {
	t.Helper()
	out, err := tryDump(url)
	if err != nil {
		t.Fatalf("dump %s: %v", url, err)
	}
	return out
}

func tryDump(url string) (map[string][]string, error) {
	var db *sql.DB
	var err error
	if path, ok := strings.CutPrefix(url, "sqlite://"); ok {
		db, err = openSQLitePool(path, neturl.Values{"mode": {"ro"}})
	} else {
		db, err = sql.Open("pgx", url)
	}
	if err != nil {
		return nil, err
	}
	defer db.Close()
	out := map[string][]string{}
	for _, table := range copiedTables {
		rows, err := db.Query("SELECT * FROM " + table)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", table, err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				return nil, fmt.Errorf("%s: %w", table, err)
			}
			var b strings.Builder
			for i, v := range vals {
				switch x := v.(type) { // the backends' drivers give integers and text their own types
				case int32:
					v = int64(x)
				case []byte:
					v = string(x)
				}
				fmt.Fprintf(&b, "%s=%#v ", cols[i], v)
			}
			out[table] = append(out[table], b.String())
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", table, err)
		}
		rows.Close()
		sort.Strings(out[table])
	}
	return out, nil
}

// identity is what a store holds beside contents: settings, users, tokens, certificates
// and idempotency keys.
type identity struct {
	Settings    map[string]json.RawMessage
	Users       []api.User
	Tokens      []TokenRecord
	JoinTokens  []JoinTokenRecord
	NodeCerts   []NodeCert
	Idempotency []IdempotencyRecord
}

func loadAll(t *testing.T, url string) (contents, identity) {
	t.Helper()
	s := openStore(t, url)
	defer s.Close()
	ctx := context.Background()
	var id identity
	var err error
	must := func(what string, err error) {
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	id.Settings, err = s.LoadSettings(ctx)
	must("LoadSettings", err)
	id.Users, err = s.LoadUsers(ctx)
	must("LoadUsers", err)
	id.Tokens, err = s.LoadTokens(ctx)
	must("LoadTokens", err)
	id.JoinTokens, err = s.LoadJoinTokens(ctx)
	must("LoadJoinTokens", err)
	id.NodeCerts, err = s.LoadNodeCerts(ctx)
	must("LoadNodeCerts", err)
	id.Idempotency, err = s.LoadIdempotency(ctx, time.Time{})
	must("LoadIdempotency", err)
	c := load(t, s)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return c, id
}

func checkCounts(t *testing.T, res CopyResult, dump map[string][]string) {
	t.Helper()
	var names []string
	for _, c := range res.Tables {
		names = append(names, c.Table)
		if int64(len(dump[c.Table])) != c.Rows {
			t.Errorf("Copy counted %d rows of %s; the source holds %d", c.Rows, c.Table, len(dump[c.Table]))
		}
	}
	if !slices.Equal(names, copiedTables) {
		t.Errorf("Copy counted tables %v, want %v", names, copiedTables)
	}
}

// TestCopyCoversSchema fails when a migration adds a table Copy does not know: it must
// be copied (copiedTables) or said to describe the servers only (notCopiedTables).
func TestCopyCoversSchema(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "rota.db")
	openStore(t, url)
	db, _ := openRaw(t, url)
	defer db.Close()
	tables, err := listTables(context.Background(), db, sqliteDialect)
	if err != nil {
		t.Fatal(err)
	}
	known := append(slices.Clone(copiedTables), notCopiedTables...)
	sort.Strings(known)
	if !slices.Equal(tables, known) {
		t.Errorf("the schema's tables are %v; Copy copies %v and leaves %v: name every table in one of the two lists in copy.go",
			tables, copiedTables, notCopiedTables)
	}
}

func TestMigrateSQLiteToSQLite(t *testing.T) {
	dir := t.TempDir()
	from, to := "sqlite://"+filepath.Join(dir, "a.db"), "sqlite://"+filepath.Join(dir, "b.db")
	fillStore(t, from)
	res, err := Copy(context.Background(), from, to, testLogger(t))
	if err != nil {
		t.Fatalf("Copy: %v", err)
	}
	want := dumpTables(t, from)
	checkCounts(t, res, want)
	equal(t, "target's rows", dumpTables(t, to), want)
	fi, err := os.Stat(filepath.Join(dir, "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("the new store's mode is %v, want 0600: it holds token hashes", fi.Mode().Perm())
	}
}

// TestMigrateRoundTrip copies a store of every kind of row from SQLite to PostgreSQL and
// back, and finds the same rows, and the same values loaded, at each step. The copy back is
// a working store: a commit's events continue the copied IDs.
func TestMigrateRoundTrip(t *testing.T) {
	pg := storetest.NewPostgres(t)
	ctx := context.Background()
	dir := t.TempDir()
	first, back := "sqlite://"+filepath.Join(dir, "first.db"), "sqlite://"+filepath.Join(dir, "back.db")
	mid := pg.NewDatabase(t)
	fillStore(t, first)
	want := dumpTables(t, first)
	wantC, wantID := loadAll(t, first)

	res, err := Copy(ctx, first, mid, testLogger(t))
	if err != nil {
		t.Fatalf("Copy sqlite to postgres: %v", err)
	}
	checkCounts(t, res, want)
	equal(t, "postgres rows", dumpTables(t, mid), want)
	gotC, gotID := loadAll(t, mid)
	equal(t, "postgres contents", gotC, wantC)
	equal(t, "postgres identity", gotID, wantID)

	res, err = Copy(ctx, mid, back, testLogger(t))
	if err != nil {
		t.Fatalf("Copy postgres to sqlite: %v", err)
	}
	checkCounts(t, res, want)
	equal(t, "rows after the round trip", dumpTables(t, back), want)
	gotC, gotID = loadAll(t, back)
	equal(t, "contents after the round trip", gotC, wantC)
	equal(t, "identity after the round trip", gotID, wantID)

	s := openStore(t, back)
	b := &Batch{Events: []api.Event{fullEvent(7)}}
	commit(t, s, b)
	if last := wantC.Events[len(wantC.Events)-1].ID; b.Events[0].ID != last+1 {
		t.Errorf("the first event after the copy got ID %d, want %d", b.Events[0].ID, last+1)
	}
}

// checkRefused runs Copy, wants an error saying want, and checks that the target's
// rows are as they were, or that no file was made for a SQLite target that did not exist.
// (A target that is not a rota store is checked by its own test.)
func checkRefused(t *testing.T, from, to, want string) error {
	t.Helper()
	path, isFile := strings.CutPrefix(to, "sqlite://")
	_, statErr := os.Stat(path)
	existed := !isFile || statErr == nil
	before, dumpErr := tryDump(to)
	_, err := Copy(context.Background(), from, to, testLogger(t))
	if err == nil {
		t.Fatalf("Copy %s to %s: want an error saying %q, got none", from, to, want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("Copy %s to %s: error %q does not say %q", from, to, err, want)
	}
	if isFile && !existed {
		for _, suffix := range []string{"", ".lock", "-wal", "-shm"} {
			if _, err := os.Stat(path + suffix); err == nil {
				t.Errorf("a refused copy left %s behind", path+suffix)
			}
		}
	} else if dumpErr == nil {
		equal(t, "the target after a refused copy", dumpTables(t, to), before)
	}
	return err
}

func TestMigrateRefuses(t *testing.T) {
	dir := t.TempDir()
	src := "sqlite://" + filepath.Join(dir, "src.db")
	fillStore(t, src)
	newTarget := func() string { return "sqlite://" + filepath.Join(t.TempDir(), "new.db") }

	t.Run("TargetNotEmpty", func(t *testing.T) {
		full := "sqlite://" + filepath.Join(t.TempDir(), "full.db")
		s := openStore(t, full)
		commit(t, s, &Batch{Jobs: []api.Job{bareJob(1)}})
		s.Close()
		checkRefused(t, src, full, "not empty (jobs has 1 row)")
	})
	t.Run("SameStore", func(t *testing.T) {
		checkRefused(t, src, src, "the same store")
		checkRefused(t, src, "sqlite://"+filepath.Join(dir, ".", "..", filepath.Base(dir), "src.db"), "the same store")
		link := filepath.Join(t.TempDir(), "link.db")
		if err := os.Symlink(filepath.Join(dir, "src.db"), link); err != nil {
			t.Fatal(err)
		}
		checkRefused(t, src, "sqlite://"+link, "the same store")
	})
	t.Run("UnknownScheme", func(t *testing.T) {
		err := checkRefused(t, "mysql://db/rota", newTarget(), "source")
		if !errors.Is(err, ErrUnsupportedURL) {
			t.Errorf("error %v does not wrap ErrUnsupportedURL", err)
		}
		err = checkRefused(t, src, "/tmp/plain/path.db", "target")
		if !errors.Is(err, ErrUnsupportedURL) {
			t.Errorf("error %v does not wrap ErrUnsupportedURL", err)
		}
		checkRefused(t, "sqlite://", newTarget(), "names no file")
	})
	t.Run("MissingSource", func(t *testing.T) {
		checkRefused(t, "sqlite://"+filepath.Join(dir, "nope.db"), newTarget(), "no such file")
		if _, err := os.Stat(filepath.Join(dir, "nope.db.lock")); err == nil {
			t.Errorf("a refused copy made a lock file for a source that does not exist")
		}
	})
	t.Run("TargetDirectoryMissing", func(t *testing.T) {
		checkRefused(t, src, "sqlite://"+filepath.Join(dir, "no", "such", "dir", "x.db"), "does not exist")
	})
	t.Run("NotSQLite", func(t *testing.T) {
		junk := filepath.Join(t.TempDir(), "junk.db")
		if err := os.WriteFile(junk, []byte("hello, not a database at all"), 0o600); err != nil {
			t.Fatal(err)
		}
		checkRefused(t, "sqlite://"+junk, newTarget(), "not a SQLite database")
		checkRefused(t, src, "sqlite://"+junk, "not a SQLite database")
		if data, err := os.ReadFile(junk); err != nil || string(data) != "hello, not a database at all" {
			t.Errorf("a refused copy changed the file it was given as the target: %q, %v", data, err)
		}
	})
	t.Run("NewerSchema", func(t *testing.T) {
		newer := "sqlite://" + filepath.Join(t.TempDir(), "newer.db")
		fillStore(t, newer)
		db, _ := openRaw(t, newer)
		if _, err := db.Exec("INSERT INTO schema_migrations (version, applied_at) VALUES (999, 'x')"); err != nil {
			t.Fatal(err)
		}
		db.Close()
		checkRefused(t, newer, newTarget(), "schema version 999 is newer than this rota's")
		checkRefused(t, src, newer, "schema version 999 is newer than this rota's")
	})
	t.Run("OlderSchema", func(t *testing.T) {
		older := filepath.Join(t.TempDir(), "older.db")
		db, _ := openRaw(t, "sqlite://"+older)
		ms, err := migrations()
		if err != nil {
			t.Fatal(err)
		}
		if err := applyMigrations(context.Background(), db, sqliteDialect, testLogger(t), ms[:1]); err != nil {
			t.Fatal(err)
		}
		db.Close()
		checkRefused(t, "sqlite://"+older, newTarget(), "schema version 1 is older than this rota's")
	})
	t.Run("ServerOnSource", func(t *testing.T) {
		s := openStore(t, src) // a server holds the file while it runs
		err := checkRefused(t, src, newTarget(), "stop the server first")
		if !errors.Is(err, ErrInUse) {
			t.Errorf("error %v does not wrap ErrInUse", err)
		}
		s.Close()
	})
	t.Run("ServerOnTarget", func(t *testing.T) {
		busy := "sqlite://" + filepath.Join(t.TempDir(), "busy.db")
		s := openStore(t, busy)
		checkRefused(t, src, busy, "stop the server first")
		s.Close()
	})
}

// TestMigrateRefusesPostgres walks the refusals that only PostgreSQL has: a leader on the
// source or the target, a target with rows or with tables that are not rota's.
func TestMigrateRefusesPostgres(t *testing.T) {
	pg := storetest.NewPostgres(t)
	ctx := context.Background()
	src := "sqlite://" + filepath.Join(t.TempDir(), "src.db")
	fillStore(t, src)

	t.Run("TargetNotEmpty", func(t *testing.T) {
		url := pg.NewDatabase(t)
		s := openStore(t, url)
		commit(t, s, &Batch{Users: []api.User{{Name: "eve", Role: "admin", Created: t0}}})
		s.Close()
		checkRefused(t, src, url, "not empty (users has 1 row)")
	})
	t.Run("ForeignTables", func(t *testing.T) {
		url := pg.NewDatabase(t)
		db, _ := openRaw(t, url)
		if _, err := db.Exec("CREATE TABLE invoices (id BIGINT)"); err != nil {
			t.Fatal(err)
		}
		db.Close()
		checkRefused(t, src, url, "tables that are not rota's (invoices)")
		db, _ = openRaw(t, url)
		defer db.Close()
		tables, err := listTables(ctx, db, postgresDialect)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "tables after a refused copy", tables, []string{"invoices"})
	})
	t.Run("SameDatabase", func(t *testing.T) {
		url := pg.NewDatabase(t)
		fillStore(t, url)
		other := url + "&application_name=another"
		checkRefused(t, url, other, "the same store")
	})
	t.Run("LeaderOnSource", func(t *testing.T) {
		url := pg.NewDatabase(t)
		fillStore(t, url)
		s := openStore(t, url)
		lease, err := OpenLease(url, s, LeaseOptions{ID: "a", URL: "http://a"})
		if err != nil {
			t.Fatal(err)
		}
		if term, err := lease.TryAcquire(ctx); err != nil || term == 0 {
			t.Fatalf("TryAcquire: %d, %v", term, err)
		}
		err = checkRefused(t, url, "sqlite://"+filepath.Join(t.TempDir(), "x.db"), "holds the leader lease")
		if !errors.Is(err, ErrInUse) {
			t.Errorf("error %v does not wrap ErrInUse", err)
		}
		lease.Release()
		// With the leader gone the copy runs.
		if _, err := Copy(ctx, url, "sqlite://"+filepath.Join(t.TempDir(), "y.db"), nil); err != nil {
			t.Errorf("Copy once the leader has gone: %v", err)
		}
		// And the copy gives the lease back: a server may lead there again.
		if term, err := lease.TryAcquire(ctx); err != nil || term == 0 {
			t.Errorf("TryAcquire after the copy: term %d, %v; want the lease", term, err)
		}
		lease.Release()
	})
	t.Run("EmptyRotaSchemaAccepted", func(t *testing.T) {
		// A database a rota opened but never wrote to is empty: the copy goes in.
		url := pg.NewDatabase(t)
		openStore(t, url).Close()
		if _, err := Copy(ctx, src, url, testLogger(t)); err != nil {
			t.Fatalf("Copy into a database with rota's tables and no rows: %v", err)
		}
		equal(t, "rows", dumpTables(t, url), dumpTables(t, src))
	})
	t.Run("NewerSchemaTarget", func(t *testing.T) {
		url := pg.NewDatabase(t)
		openStore(t, url).Close()
		db, _ := openRaw(t, url)
		if _, err := db.Exec("INSERT INTO schema_migrations (version, applied_at) VALUES (999, 'x')"); err != nil {
			t.Fatal(err)
		}
		db.Close()
		checkRefused(t, src, url, "newer than this rota's")
	})
}
