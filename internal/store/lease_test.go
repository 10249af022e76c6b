package store

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store/storetest"
)

// TestLease runs the leader-lease tests on one PostgreSQL server, a database each.
func TestLease(t *testing.T) {
	if storetest.LeaseLockKey != leaseLockKey {
		t.Fatalf("storetest.LeaseLockKey %#x is not the lease's lock %#x", storetest.LeaseLockKey, leaseLockKey)
	}
	pg := storetest.NewPostgres(t)
	for _, tc := range []struct {
		name string
		run  func(*testing.T, string)
	}{
		{"FencesADeposedLeader", testLeaseFencesADeposedLeader},
		{"CheckFencesAtOnce", testLeaseCheckFencesAtOnce},
		{"FreedWhenTheLeaderDies", testLeaseFreedWhenTheLeaderDies},
		{"Status", testLeaseStatus},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, pg.NewDatabase(t)) })
	}
}

func openLease(t *testing.T, url string, s Store, id string) *Lease {
	t.Helper()
	l, err := OpenLease(url, s, LeaseOptions{ID: id, Host: "host-" + id, URL: "https://" + id + ":7070"})
	if err != nil {
		t.Fatalf("OpenLease %s: %v", id, err)
	}
	t.Cleanup(l.Release)
	return l
}

func acquire(t *testing.T, l *Lease) int64 {
	t.Helper()
	term, err := l.TryAcquire(context.Background())
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	return term
}

func jobBatch(id int64) *Batch {
	return &Batch{Jobs: []api.Job{bareJob(id)}, Events: []api.Event{fullEvent(id)}}
}

// Two servers on one database: one leads and writes, the other is refused; when the
// leader's session is terminated it stops writing at once, the other takes a new term, and
// the old leader's late commit fails on the term check, leaving nothing behind.
func testLeaseFencesADeposedLeader(t *testing.T, url string) {
	ctx := context.Background()
	a, b := openStore(t, url), openStore(t, url)
	la, lb := openLease(t, url, a, "a"), openLease(t, url, b, "b")

	// Fenced from the start: a server that never led cannot write.
	if err := a.Commit(ctx, jobBatch(1)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("commit before taking the lease: %v, want ErrNotLeader", err)
	}
	if term := acquire(t, la); term != 1 {
		t.Fatalf("first term = %d, want 1", term)
	}
	if term := acquire(t, lb); term != 0 {
		t.Fatalf("b took the lease while a holds it (term %d)", term)
	}
	if term := acquire(t, la); term != 1 {
		t.Fatalf("a asking again: term %d, want its own 1", term)
	}
	commit(t, a, jobBatch(1))
	if err := b.Commit(ctx, jobBatch(2)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("standby commit: %v, want ErrNotLeader", err)
	}
	if err := la.Check(ctx); err != nil {
		t.Fatalf("Check of a held lease: %v", err)
	}

	// The session dies; b takes over before a notices.
	storetest.TerminateLease(t, url)
	var term int64
	for deadline := time.Now().Add(10 * time.Second); term == 0; {
		if term = acquire(t, lb); term == 0 && time.Now().After(deadline) {
			t.Fatal("b never took the lease after a's session ended")
		}
	}
	if term != 2 {
		t.Fatalf("b's term = %d, want 2", term)
	}
	err := a.Commit(ctx, jobBatch(3))
	if !errors.Is(err, ErrNotLeader) || !strings.Contains(err.Error(), "term is now 2") {
		t.Fatalf("deposed leader's commit: %v, want ErrNotLeader naming term 2", err)
	}
	if err := la.Check(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Check after the session ended: %v, want ErrNotLeader", err)
	}
	commit(t, b, jobBatch(4))
	jobs := load(t, b).Jobs
	if len(jobs) != 2 || jobs[0].ID != 1 || jobs[1].ID != 4 {
		t.Fatalf("jobs after failover: %v, want 1 and 4 only", jobIDs(jobs))
	}

	// a may lead again once b lets go, in a newer term.
	lb.Release()
	if err := b.Commit(ctx, jobBatch(5)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("commit after Release: %v, want ErrNotLeader", err)
	}
	if term := acquire(t, la); term != 3 {
		t.Fatalf("a's second term = %d, want 3", term)
	}
	commit(t, a, jobBatch(6))
}

// A leader that notices its session is gone fences its store before anyone else takes
// over: "stops writing at once" does not wait for a successor.
func testLeaseCheckFencesAtOnce(t *testing.T, url string) {
	a := openStore(t, url)
	la := openLease(t, url, a, "a")
	acquire(t, la)
	storetest.TerminateLease(t, url)
	if err := la.Check(context.Background()); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Check: %v, want ErrNotLeader", err)
	}
	if la.Term() != 0 {
		t.Errorf("Term after loss = %d, want 0", la.Term())
	}
	if err := a.Commit(context.Background(), jobBatch(1)); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("commit after the loss was noticed: %v, want ErrNotLeader", err)
	}
}

// A leader that is killed (its process gone, so its connection closed) frees the lease.
func testLeaseFreedWhenTheLeaderDies(t *testing.T, url string) {
	b := openStore(t, url)
	lb := openLease(t, url, b, "b")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), leaseChildEnv+"="+url)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := out.Read(buf)
	if got := strings.TrimSpace(string(buf[:n])); got != "leading 1" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child: %q, want \"leading 1\"", got)
	}
	if term := acquire(t, lb); term != 0 {
		t.Fatalf("b took the lease from a live leader (term %d)", term)
	}
	cmd.Process.Kill()
	cmd.Wait()
	var term int64
	for deadline := time.Now().Add(10 * time.Second); term == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		term = acquire(t, lb)
	}
	if term != 2 {
		t.Fatalf("after kill -9 of the leader: b's term %d, want 2", term)
	}
}

const leaseChildEnv = "ROTA_STORE_LEASE_CHILD_URL"

// runLeaseChild takes the lease, says so, and waits to be killed (see TestMain).
func runLeaseChild(url string) int {
	s, err := Open(context.Background(), url, nil)
	if err != nil {
		return 1
	}
	l, err := OpenLease(url, s, LeaseOptions{ID: "child", URL: "https://child:7070"})
	if err != nil {
		return 1
	}
	term, err := l.TryAcquire(context.Background())
	if err != nil {
		return 1
	}
	os.Stdout.WriteString("leading " + strconv.FormatInt(term, 10) + "\n")
	time.Sleep(time.Hour)
	return 0
}

func testLeaseStatus(t *testing.T, url string) {
	ctx := context.Background()
	a, b := openStore(t, url), openStore(t, url)
	la, lb := openLease(t, url, a, "a"), openLease(t, url, b, "b")
	st, err := la.Status(ctx, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if st.Term != 0 || st.Held || len(st.Replicas) != 0 {
		t.Fatalf("status of a fresh database: %+v", st)
	}
	acquire(t, la)
	for _, l := range []*Lease{la, lb} {
		if err := l.Announce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	st, err = lb.Status(ctx, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if st.Term != 1 || st.Holder != "a" || st.URL != "https://a:7070" || !st.Held || st.Since.IsZero() {
		t.Fatalf("status with a leading: %+v", st)
	}
	if len(st.Replicas) != 2 || st.Replicas[0].ID != "a" || st.Replicas[1].Host != "host-b" || st.Replicas[1].Seen.IsZero() {
		t.Fatalf("replicas: %+v", st.Replicas)
	}
	if err := lb.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	la.Release()
	st, err = lb.Status(ctx, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if st.Held || len(st.Replicas) != 1 {
		t.Fatalf("after a released and b withdrew: %+v", st)
	}
	// Only replicas seen since the time given count.
	if st, err = lb.Status(ctx, time.Now().Add(time.Minute)); err != nil || len(st.Replicas) != 0 {
		t.Fatalf("replicas seen in the future: %+v, %v", st.Replicas, err)
	}
}

func TestLeaseNeedsPostgres(t *testing.T) {
	url := "sqlite://" + filepath.Join(t.TempDir(), "rota.db")
	if _, err := OpenLease(url, openStore(t, url), LeaseOptions{ID: "a", URL: "https://a"}); err == nil || !strings.Contains(err.Error(), "PostgreSQL") {
		t.Fatalf("OpenLease on SQLite: %v, want an error naming PostgreSQL", err)
	}
}

// A second server on one SQLite file is refused before it writes anything; once the first
// closes, the file opens again.
func TestSQLiteSecondOpenRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rota.db")
	url := "sqlite://" + path
	first, err := Open(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	commit(t, first, jobBatch(1))
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Open(context.Background(), url, nil)
	if err == nil {
		second.Close()
		t.Fatal("a second Open of one SQLite file succeeded")
	}
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) || !strings.Contains(err.Error(), path) {
		t.Errorf("second Open: %q, want ErrInUse naming the file and pid %d", err, os.Getpid())
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Error("the refused Open changed the database file")
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again := openStore(t, url)
	if jobs := load(t, again).Jobs; len(jobs) != 1 {
		t.Fatalf("after reopening: %d jobs, want 1", len(jobs))
	}
}

// The refusal holds across processes too, which is what two `rota server` runs are.
func TestSQLiteRefusedAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rota.db")
	openStore(t, "sqlite://"+path)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), sqliteChildEnv+"="+path)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "another rota server") {
		t.Fatalf("child opening the same file: %v, output %q; want a refusal", err, out)
	}
}

const sqliteChildEnv = "ROTA_STORE_SQLITE_CHILD_PATH"

func runSQLiteChild(path string) int {
	s, err := Open(context.Background(), "sqlite://"+path, nil)
	if err != nil {
		os.Stdout.WriteString(err.Error() + "\n")
		return 3
	}
	s.Close()
	return 0
}

// An unreachable database is a clear error in bounded time.
func TestPostgresUnreachable(t *testing.T) {
	start := time.Now()
	// Port 1 on loopback: nothing listens, so the connection is refused.
	_, err := Open(context.Background(), "postgres://rota@127.0.0.1:1/rota?sslmode=disable", nil)
	if err == nil || !strings.Contains(err.Error(), "cannot reach the database") {
		t.Fatalf("Open of an unreachable database: %v, want \"cannot reach the database\"", err)
	}
	if strings.Contains(err.Error(), "rota@") {
		t.Errorf("the error shows the URL's user info: %v", err)
	}
	if d := time.Since(start); d > postgresConnectTimeout+5*time.Second {
		t.Errorf("took %v", d)
	}
}

func jobIDs(jobs []api.Job) []int64 {
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}
