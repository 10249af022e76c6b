package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cli"
	"github.com/rotahq/rota/internal/store"
	"github.com/rotahq/rota/internal/store/storetest"
)

// TestBackupAndRestore backs up a running server's SQLite store with `rota admin backup`
// while clients keep submitting, restores the backup into a new data dir as
// docs/operations.md says, starts a server there, and finds every job acknowledged before
// the backup began exactly once, and none submitted after it ended. It then copies the
// backup to PostgreSQL with `rota admin migrate`, starts a server on that, and finds the
// same jobs again.
func TestBackupAndRestore(t *testing.T) {
	skipShort(t)
	c := newTestCluster(t, nil, clusterOpts{})
	ctx := context.Background()

	// What each submit's client saw: when it asked, and the job it got.
	type ack struct {
		id    int64
		name  string
		asked time.Time
	}
	var (
		mu    sync.Mutex
		acked []ack
	)
	submit := func(name string) error {
		asked := time.Now()
		j, err := c.client.Submit(ctx, api.JobSpec{Name: name, GPUs: 1, Command: []string{"true"}})
		if err != nil {
			return err
		}
		mu.Lock()
		acked = append(acked, ack{id: j.ID, name: name, asked: asked})
		mu.Unlock()
		return nil
	}
	for i := range 30 {
		if err := submit(fmt.Sprintf("before-%d", i)); err != nil {
			t.Fatal(err)
		}
	}

	// Writers keep submitting while the backup runs.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	writeErrs := make(chan error, 2)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := submit(fmt.Sprintf("during-%d-%d", w, i)); err != nil {
					writeErrs <- err
					return
				}
			}
		}()
	}
	// Let the writers get going, so the backup meets a server that is writing.
	waitFor(t, 30*time.Second, "submits from the writers", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= 40
	})

	backup := filepath.Join(c.root, "backups", "rota-1.db")
	if err := os.MkdirAll(filepath.Dir(backup), 0o700); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	ackedBefore := append([]ack(nil), acked...)
	mu.Unlock()
	r := runCLI(t, nil, "admin", "backup", "--data-dir", c.dataDir, "--to", backup, "-o", "json")
	backupEnded := time.Now()
	if r.code != 0 {
		t.Fatalf("rota admin backup:\n%s", r)
	}
	// The writers go on a little after the backup, then stop.
	mu.Lock()
	n := len(acked)
	mu.Unlock()
	waitFor(t, 30*time.Second, "submits after the backup", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= n+10
	})
	close(stop)
	wg.Wait()
	close(writeErrs)
	for err := range writeErrs {
		t.Fatalf("a submit failed while the backup ran: %v", err)
	}
	var res cli.StoreBackup
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("rota admin backup -o json: %v\n%s", err, r.stdout)
	}
	rows := map[string]int64{}
	for _, tc := range res.Tables {
		rows[tc.Table] = tc.Rows
	}

	// Another backup to the same file is refused, and leaves the first as it was.
	first, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	r2 := runCLI(t, nil, "admin", "backup", "--data-dir", c.dataDir, "--to", backup)
	if r2.code != 1 || !strings.Contains(r2.stderr, "exists: a backup never overwrites a file") {
		t.Errorf("a second backup to the same file: want exit 1 saying it exists, got\n%s", r2)
	}
	if again, _ := os.ReadFile(backup); string(again) != string(first) {
		t.Errorf("a refused backup changed the existing file")
	}
	// A copy of the store is refused while its server runs.
	r3 := runCLI(t, nil, "admin", "migrate", "--from", "sqlite://"+filepath.Join(c.dataDir, "rota.db"), "--to", "sqlite://"+filepath.Join(c.root, "copy.db"))
	if r3.code != 1 || !strings.Contains(r3.stderr, "stop the server first") {
		t.Errorf("rota admin migrate from a running server's store: want exit 1 saying to stop the server, got\n%s", r3)
	}

	// Restore, as docs/operations.md says: the backup as rota.db of a data dir that has the
	// cluster's CA and the admin token.
	c.server.signal(syscall.SIGTERM)
	if _, ok := c.server.waitExit(30 * time.Second); !ok {
		t.Fatal("the server did not stop")
	}
	restored := filepath.Join(c.root, "restored")
	copyTree(t, filepath.Join(c.dataDir, "ca"), filepath.Join(restored, "ca"))
	copyFile(t, filepath.Join(c.dataDir, "admin-token"), filepath.Join(restored, "admin-token"))
	copyFile(t, backup, filepath.Join(restored, "rota.db"))
	c.dataDir = restored
	c.startServer()

	checkJobs := func(where string) {
		t.Helper()
		jobs, err := c.client.AllJobs(ctx, cli.ListOptions{States: []string{"all"}})
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(jobs)) != rows["jobs"] {
			t.Errorf("%s: %d jobs, the backup counted %d", where, len(jobs), rows["jobs"])
		}
		byID, byName := map[int64]int{}, map[string]int{}
		for _, j := range jobs {
			byID[j.ID]++
			byName[j.Spec.Name]++
		}
		for _, a := range ackedBefore {
			if byID[a.id] != 1 || byName[a.name] != 1 {
				t.Errorf("%s: job %d (%s), acknowledged before the backup began, is there %d times by ID, %d by name", where, a.id, a.name, byID[a.id], byName[a.name])
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, a := range acked {
			if a.asked.After(backupEnded) && byID[a.id] > 0 {
				t.Errorf("%s: job %d (%s), submitted after the backup ended, is there", where, a.id, a.name)
			}
		}
	}
	checkJobs("the restored server")
	t.Logf("%d jobs acknowledged before the backup, %d in it, %d acknowledged in all", len(ackedBefore), rows["jobs"], len(acked))
	// The restored server goes on: a new job gets an ID after every one it holds.
	j := c.submit(api.JobSpec{Name: "after-restore", GPUs: 1, Command: []string{"true"}})
	if j.ID <= ackedBefore[len(ackedBefore)-1].id {
		t.Errorf("a job submitted to the restored server got ID %d, not after the backup's jobs", j.ID)
	}

	// The backup, copied to PostgreSQL, serves the same jobs.
	c.server.signal(syscall.SIGTERM)
	if _, ok := c.server.waitExit(30 * time.Second); !ok {
		t.Fatal("the server did not stop")
	}
	dbURL := storetest.StartPostgres(t)
	m := runCLI(t, nil, "admin", "migrate", "--from", "sqlite://"+backup, "--to", dbURL)
	if m.code != 0 {
		t.Fatalf("rota admin migrate:\n%s", m)
	}
	if !hasRow(m.stdout, "jobs", fmt.Sprint(rows["jobs"])) {
		t.Errorf("rota admin migrate does not print the jobs' count, %d:\n%s", rows["jobs"], m.stdout)
	}
	// Copying again into the now full database is refused, and writes nothing.
	m2 := runCLI(t, nil, "admin", "migrate", "--from", "sqlite://"+backup, "--to", dbURL)
	if m2.code != 1 || !strings.Contains(m2.stderr, "not empty") {
		t.Errorf("a second copy into the same database: want exit 1 saying it is not empty, got\n%s", m2)
	}
	c.opts.store = dbURL
	pgDir := filepath.Join(c.root, "on-postgres")
	copyTree(t, filepath.Join(c.dataDir, "ca"), filepath.Join(pgDir, "ca"))
	copyFile(t, filepath.Join(c.dataDir, "admin-token"), filepath.Join(pgDir, "admin-token"))
	c.dataDir = pgDir
	c.startServer()
	checkJobs("the server on PostgreSQL")
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestStoreCommands runs rota admin backup and migrate in this process against real
// SQLite files: what they print, and how they refuse bad input (exit 1, nothing written).
func TestStoreCommands(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	src := filepath.Join(dir, "rota.db")
	st, err := store.Open(ctx, "sqlite://"+src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(ctx, &store.Batch{Jobs: []api.Job{{ID: 1, State: api.StatePending}, {ID: 2, State: api.StatePending}}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	rota := func(args ...string) (int, string, string) {
		var out, errOut strings.Builder
		code := run(ctx, args, &out, &errOut)
		return code, out.String(), errOut.String()
	}

	code, out, errOut := rota("admin", "backup", "--store", "sqlite://"+src, "--to", filepath.Join(dir, "b.db"))
	if code != 0 || !strings.HasPrefix(out, "Backed up "+src+" to "+filepath.Join(dir, "b.db")+" (schema ") || !hasRow(out, "jobs", "2") {
		t.Errorf("rota admin backup: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = rota("admin", "migrate", "--from", "sqlite://"+src, "--to", "sqlite://"+filepath.Join(dir, "c.db"))
	if code != 0 || !hasRow(out, "jobs", "2") || !hasRow(out, "events", "0") ||
		!strings.Contains(out, "Not copied: schema_migrations, leader, replicas") {
		t.Errorf("rota admin migrate: exit %d\n%s%s", code, out, errOut)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"backup", "--store", "postgres://rota:secret@db.example.com/rota", "--to", filepath.Join(dir, "p.db")}, "pg_dump"},
		{[]string{"backup", "--store", "sqlite://" + filepath.Join(dir, "missing.db"), "--to", filepath.Join(dir, "m.db")}, "no such file"},
		{[]string{"backup", "--data-dir", filepath.Join(dir, "nowhere"), "--to", filepath.Join(dir, "n.db")}, "no such file"},
		{[]string{"backup", "--store", "sqlite://" + src, "--to", filepath.Join(dir, "b.db")}, "exists"},
		{[]string{"migrate", "--from", "sqlite://" + src, "--to", "sqlite://" + src}, "the same store"},
		{[]string{"migrate", "--from", "sqlite://" + src, "--to", "sqlite://" + filepath.Join(dir, "c.db")}, "not empty (jobs has 2 rows)"},
		{[]string{"migrate", "--from", "sqlite://" + filepath.Join(dir, "missing.db"), "--to", "sqlite://" + filepath.Join(dir, "d.db")}, "no such file"},
		{[]string{"migrate", "--from", "sqlite://" + src, "--to", "postgres://rota:secret@127.0.0.1:1/rota?connect_timeout=5"}, "cannot reach the database"},
	} {
		code, out, errOut := rota(append([]string{"admin"}, tc.args...)...)
		if code != 1 || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("rota admin %s: exit %d, want 1 and an error saying %q\nstdout %q\nstderr %q", strings.Join(tc.args, " "), code, tc.want, out, errOut)
		}
		if strings.Contains(errOut, "secret") {
			t.Errorf("rota admin %s: the error shows the URL's password: %s", strings.Join(tc.args, " "), errOut)
		}
	}
	for _, name := range []string{"p.db", "m.db", "n.db", "d.db", "missing.db", "nowhere"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			t.Errorf("a refused command left %s behind", name)
		}
	}
}

// hasRow says whether a printed table has a row of exactly these cells.
func hasRow(table string, cells ...string) bool {
	for _, line := range strings.Split(table, "\n") {
		if strings.Join(strings.Fields(line), " ") == strings.Join(cells, " ") {
			return true
		}
	}
	return false
}
