package storetest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" driver
)

// pgUser is the superuser initdb creates; connections authenticate as it with trust.
const pgUser = "rota"

// Postgres is a throwaway PostgreSQL server listening on 127.0.0.1, owned by one test.
type Postgres struct {
	port int
	// ctl runs pg_ctl with its arguments as the server's user; start starts the server.
	ctl   func(args ...string) error
	start []string
	// databases counts the databases NewDatabase has created, to name the next one.
	databases atomic.Int64
	stopped   atomic.Bool
}

// StartPostgres starts a throwaway PostgreSQL server for t and returns the URL of an empty
// database on it. See NewPostgres.
func StartPostgres(t testing.TB) string {
	t.Helper()
	return NewPostgres(t).NewDatabase(t)
}

// NewPostgres starts a throwaway PostgreSQL server that t.Cleanup stops and deletes. It
// skips t when no PostgreSQL binaries are installed. initdb and pg_ctl refuse to run as
// root, so as root they run as the "postgres" system user, which must exist.
func NewPostgres(t testing.TB) *Postgres {
	t.Helper()
	bin, err := findPostgresBin()
	if err != nil {
		t.Skipf("PostgreSQL not installed: install postgresql to run the PostgreSQL conformance suite (%v)", err)
	}
	runAs, err := serverUser()
	if err != nil {
		t.Fatalf("start postgres: %v", err)
	}

	// Not t.TempDir: its parents are private to this user, and the server may run as another.
	dir, err := os.MkdirTemp("", "rota-pg-")
	if err != nil {
		t.Fatalf("start postgres: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if runAs != nil {
		if err := os.Chown(dir, runAs.uid, runAs.gid); err != nil {
			t.Fatalf("start postgres: give %s to %s: %v", dir, runAs.name, err)
		}
	}
	data := filepath.Join(dir, "data")
	logFile := filepath.Join(dir, "server.log")

	run := func(name string, args ...string) error {
		path := filepath.Join(bin, name)
		cmd := exec.Command(path, args...)
		if runAs != nil {
			cmd = exec.Command("runuser", append([]string{"-u", runAs.name, "--", path}, args...)...)
		}
		// The server's locale must not depend on the machine running the tests.
		cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
		}
		return nil
	}
	// --no-sync: a server that lives for one test need not survive a power cut while it is
	// created; the running server keeps fsync on, so commits cost what they cost in production.
	if err := run("initdb", "-D", data, "-U", pgUser, "--auth=trust", "--encoding=UTF8",
		"--no-locale", "--no-sync", "--no-instructions"); err != nil {
		t.Fatalf("start postgres: %v", err)
	}

	// The port is found free and then released before the server binds it, so another
	// process may take it in between; a few attempts make that race harmless.
	var p *Postgres
	var startErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			t.Fatalf("start postgres: %v", err)
		}
		opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1", port, dir)
		start := []string{"-D", data, "-l", logFile, "-o", opts, "-w", "start"}
		if startErr = run("pg_ctl", start...); startErr == nil {
			p = &Postgres{port: port, start: start, ctl: func(args ...string) error { return run("pg_ctl", args...) }}
			break
		}
	}
	if p == nil {
		logText, _ := os.ReadFile(logFile)
		t.Fatalf("start postgres: %v\nserver log:\n%s", startErr, logText)
	}
	t.Cleanup(func() {
		if err := run("pg_ctl", "-D", data, "-m", "fast", "-w", "stop"); err != nil && p.running() {
			t.Errorf("stop postgres: %v", err)
		}
	})
	return p
}

// Stop stops the server as an operator's `pg_ctl stop -m fast` does: every session is
// ended, and connections are refused until Start.
func (p *Postgres) Stop(t testing.TB) {
	t.Helper()
	if err := p.ctl(p.start[0], p.start[1], "-m", "fast", "-w", "stop"); err != nil {
		t.Fatalf("stop postgres: %v", err)
	}
	p.stopped.Store(true)
}

// Start starts again, on the same port, a server Stop stopped.
func (p *Postgres) Start(t testing.TB) {
	t.Helper()
	if err := p.ctl(p.start...); err != nil {
		t.Fatalf("start postgres again: %v", err)
	}
	p.stopped.Store(false)
}

func (p *Postgres) running() bool { return !p.stopped.Load() }

// NewDatabase creates an empty database on the server and returns its URL.
func (p *Postgres) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("rota_%d", p.databases.Add(1))
	admin, err := sql.Open("pgx", p.url("postgres"))
	if err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	return p.url(name)
}

func (p *Postgres) url(database string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", pgUser, p.port, database)
}

// findPostgresBin returns the directory holding initdb and pg_ctl: the one on PATH, else
// the newest of the versioned directories Debian and Red Hat packages install.
func findPostgresBin() (string, error) {
	if path, err := exec.LookPath("pg_ctl"); err == nil {
		dir := filepath.Dir(path)
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	var dirs []string
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin"} {
		matches, _ := filepath.Glob(pattern) // the patterns are constant and well formed
		dirs = append(dirs, matches...)
	}
	var found []string
	for _, dir := range dirs {
		_, errCtl := os.Stat(filepath.Join(dir, "pg_ctl"))
		_, errInit := os.Stat(filepath.Join(dir, "initdb"))
		if errCtl == nil && errInit == nil {
			found = append(found, dir)
		}
	}
	if len(found) == 0 {
		return "", fmt.Errorf("no pg_ctl and initdb on PATH or in /usr/lib/postgresql/*/bin or /usr/pgsql-*/bin")
	}
	// Sort by major version as a number, so that 15 comes after 9.6.
	sort.Slice(found, func(i, j int) bool { return majorVersion(found[i]) < majorVersion(found[j]) })
	return found[len(found)-1], nil
}

// majorVersion reads the major version from a path like /usr/lib/postgresql/15/bin.
func majorVersion(binDir string) int {
	name := filepath.Base(filepath.Dir(binDir))
	name = strings.TrimPrefix(name, "pgsql-")
	major, _, _ := strings.Cut(name, ".")
	v, _ := strconv.Atoi(major) // an unparsable name sorts first
	return v
}

type osUser struct {
	name     string
	uid, gid int
}

// serverUser returns the user to run the server as, or nil to run it as ourselves.
func serverUser() (*osUser, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and PostgreSQL will not: need a \"postgres\" user to run it as: %w", err)
	}
	if _, err := exec.LookPath("runuser"); err != nil {
		return nil, fmt.Errorf("running as root, and PostgreSQL will not: need runuser to run it as postgres: %w", err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil, fmt.Errorf("postgres uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return nil, fmt.Errorf("postgres gid %q: %w", u.Gid, err)
	}
	return &osUser{name: u.Username, uid: uid, gid: gid}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// LeaseLockKey is the advisory lock the store's leader lease holds (store.leaseLockKey,
// which the store's tests check this against: storetest cannot import the store).
const LeaseLockKey int64 = 0x726f74614c454144

// TerminateLease ends, from outside, the database session that holds the leader lease,
// as an operator's pg_terminate_backend or a broken connection would, and fails the test
// unless exactly one session held it.
func TerminateLease(t testing.TB, dbURL string) {
	t.Helper()
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	const q = `SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1`
	if err := db.QueryRow(q, int64(uint64(LeaseLockKey)>>32), int64(uint64(LeaseLockKey)&0xffffffff)).Scan(&n); err != nil {
		t.Fatalf("terminate the lease session: %v", err)
	}
	if n != 1 {
		t.Fatalf("terminated %d lease sessions, want 1", n)
	}
}
