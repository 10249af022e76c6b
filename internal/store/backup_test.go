package store

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rotahq/rota/internal/api"
)

// TestBackupWhileWriting backs up a store that a writer keeps committing to, as a running
// server does, and checks that the backup is a store that opens, holds every commit that
// returned before the backup began, and is private to its owner.
func TestBackupWhileWriting(t *testing.T) {
	dir := t.TempDir()
	url := "sqlite://" + filepath.Join(dir, "rota.db")
	fillStore(t, url)
	s := openStore(t, url) // holds the lock file, as a server does
	ctx := context.Background()

	// Commits before the backup: all must be in it.
	var before []int64
	for i := range 50 {
		b := &Batch{Jobs: []api.Job{bareJob(int64(100 + i))}, Events: []api.Event{fullEvent(int64(100 + i))}}
		commit(t, s, b)
		before = append(before, b.Events[0].ID)
	}
	// Commits during the backup: each is in it whole or not at all.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writeErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := int64(1000); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			b := &Batch{Jobs: []api.Job{bareJob(i)}, Attempts: []api.Attempt{bareAttempt(i, 1)}, Events: []api.Event{fullEvent(i)}}
			if err := s.Commit(ctx, b); err != nil {
				writeErr = err
				return
			}
		}
	}()
	to := filepath.Join(dir, "backups", "rota-1.db")
	if err := os.Mkdir(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := Backup(ctx, url, to)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("Backup: %v", err)
	}
	if writeErr != nil {
		t.Fatalf("a commit during the backup failed: %v", writeErr)
	}
	if res.To != to || res.Bytes <= 0 || res.Schema != len(mustMigrations(t)) {
		t.Errorf("Backup result %+v: want To %s, a size and schema %d", res, to, len(mustMigrations(t)))
	}
	fi, err := os.Stat(to)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("the backup's mode is %v, want 0600: it holds token hashes", fi.Mode().Perm())
	}
	for _, suffix := range []string{"-wal", "-shm", "-journal"} {
		if _, err := os.Stat(to + suffix); err == nil {
			t.Errorf("the backup is not one file: %s is beside it", to+suffix)
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(to))
	if len(entries) != 1 {
		t.Errorf("the backup directory holds %d entries, want the backup alone", len(entries))
	}

	b := openStore(t, "sqlite://"+to)
	c := load(t, b)
	counts := map[string]int64{}
	for _, tc := range res.Tables {
		counts[tc.Table] = tc.Rows
	}
	if int64(len(c.Jobs)) != counts["jobs"] || int64(len(c.Events)) != counts["events"] || int64(len(c.Attempts)) != counts["attempts"] {
		t.Errorf("Backup counted %v; the backup loads %d jobs, %d attempts, %d events", counts, len(c.Jobs), len(c.Attempts), len(c.Events))
	}
	have := map[int64]int{}
	for _, e := range c.Events {
		have[e.ID]++
	}
	for _, id := range before {
		if have[id] != 1 {
			t.Errorf("event %d, committed before the backup began, is in it %d times", id, have[id])
		}
	}
	// Whole commits only: every job written during the backup has its attempt and its event.
	jobs := map[int64]bool{}
	for _, j := range c.Jobs {
		jobs[j.ID] = true
	}
	attempts := map[int64]bool{}
	for _, a := range c.Attempts {
		attempts[a.JobID] = true
	}
	for id := range jobs {
		if id >= 1000 && !attempts[id] {
			t.Errorf("job %d is in the backup without the attempt of the same commit", id)
		}
	}
	for id := range attempts {
		if id >= 1000 && !jobs[id] {
			t.Errorf("attempt of job %d is in the backup without its job", id)
		}
	}
	// A server on the backup goes on from it.
	nb := &Batch{Events: []api.Event{fullEvent(1)}}
	commit(t, b, nb)
	if last := c.Events[len(c.Events)-1].ID; nb.Events[0].ID != last+1 {
		t.Errorf("the first event on the backup got ID %d, want %d", nb.Events[0].ID, last+1)
	}
}

func mustMigrations(t *testing.T) []migration {
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// TestBackupRefuses walks the ways a backup is refused: each says why, and leaves no file.
func TestBackupRefuses(t *testing.T) {
	dir := t.TempDir()
	src := "sqlite://" + filepath.Join(dir, "rota.db")
	fillStore(t, src)
	existing := filepath.Join(dir, "old-backup.db")
	if err := os.WriteFile(existing, []byte("yesterday's backup"), 0o600); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk.db")
	if err := os.WriteFile(junk, []byte("not a database at all, not even close"), 0o600); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain.db") // a SQLite database that is not a rota store
	db, _ := openRaw(t, "sqlite://"+plain)
	if _, err := db.Exec("CREATE TABLE notes (text TEXT)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	out := t.TempDir()

	tests := []struct {
		name, from, to, want string
		is                   error
	}{
		{"Exists", src, existing, "exists: a backup never overwrites a file", nil},
		{"ExistsAsURL", src, "sqlite://" + existing, "exists: a backup never overwrites a file", nil},
		{"IntoItself", src, filepath.Join(dir, "rota.db"), "exists", nil},
		{"Postgres", "postgres://rota:secret@db.example.com/rota", filepath.Join(out, "b.db"), "pg_dump", nil},
		{"UnknownScheme", "mysql://db/rota", filepath.Join(out, "b.db"), "unsupported store URL", ErrUnsupportedURL},
		{"NoFileInURL", "sqlite://", filepath.Join(out, "b.db"), "names no file", nil},
		{"MissingSource", "sqlite://" + filepath.Join(dir, "nope.db"), filepath.Join(out, "b.db"), "no such file", nil},
		{"SourceIsADirectory", "sqlite://" + dir, filepath.Join(out, "b.db"), "is a directory", nil},
		{"NotSQLite", "sqlite://" + junk, filepath.Join(out, "b.db"), "not a SQLite database", nil},
		{"NotRota", "sqlite://" + plain, filepath.Join(out, "b.db"), "not a rota store", nil},
		{"NoTarget", src, "", "no file to write the backup to", nil},
		{"TargetDirectoryMissing", src, filepath.Join(out, "no", "such", "b.db"), "does not exist", nil},
		{"TargetPostgres", src, "postgres://rota@db/rota", "rota admin migrate", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Backup(context.Background(), tc.from, tc.to)
			if err == nil {
				t.Fatalf("Backup(%q, %q): want an error saying %q, got none", tc.from, tc.to, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Backup(%q, %q): error %q does not say %q", tc.from, tc.to, err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("the error shows the password of the URL: %v", err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v does not wrap %v", err, tc.is)
			}
			if entries, _ := os.ReadDir(out); len(entries) != 0 {
				t.Errorf("a refused backup left %d entries in the target directory", len(entries))
			}
		})
	}
	if data, err := os.ReadFile(existing); err != nil || string(data) != "yesterday's backup" {
		t.Errorf("a refused backup changed an existing file: %q, %v", data, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "nope.db")); err == nil {
		t.Errorf("a backup of a missing store created it")
	}
}

// TestBackupOtherProcessAndCrash backs up a store that another process holds open, as a
// server does, then the same store after that process was killed with its last commit
// still in the WAL only; and copies the crashed store with Copy. Each copy has the
// commit.
func TestBackupOtherProcessAndCrash(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rota.db")
	url := "sqlite://" + path
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), killChildEnv+"="+url)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child: %v", err)
	}
	defer cmd.Process.Kill() //nolint:errcheck // killed below unless the test failed first
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "committed\n" {
		t.Fatalf("child did not commit: stdout %q, stderr:\n%s", line, stderr.String())
	}
	check := func(what, url string) {
		t.Helper()
		c := load(t, openStore(t, url))
		if len(c.Jobs) != 1 || c.Jobs[0].ID != killChildJob || len(c.Events) != 1 {
			t.Errorf("%s: %d jobs, %d events; want job %d and its event", what, len(c.Jobs), len(c.Events), killChildJob)
		}
	}
	if _, err := Backup(ctx, url, filepath.Join(dir, "live.db")); err != nil {
		t.Fatalf("Backup of a store another process holds: %v", err)
	}
	if _, err := Copy(ctx, url, "sqlite://"+filepath.Join(dir, "refused.db"), nil); !errors.Is(err, ErrInUse) {
		t.Errorf("Copy of a store another process holds: %v, want ErrInUse", err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // it was killed; its exit status says only that
	if fi, err := os.Stat(path + "-wal"); err != nil || fi.Size() == 0 {
		t.Fatalf("the killed process left no WAL (%v): the test would not show that its commits are read from it", err)
	}
	if _, err := Backup(ctx, url, filepath.Join(dir, "crashed.db")); err != nil {
		t.Fatalf("Backup of a crashed store: %v", err)
	}
	if _, err := Copy(ctx, url, "sqlite://"+filepath.Join(dir, "moved.db"), nil); err != nil {
		t.Fatalf("Copy of a crashed store: %v", err)
	}
	check("backup while another process holds the store", "sqlite://"+filepath.Join(dir, "live.db"))
	check("backup after that process was killed", "sqlite://"+filepath.Join(dir, "crashed.db"))
	check("copy after that process was killed", "sqlite://"+filepath.Join(dir, "moved.db"))
}

// TestBackupRemovesStalePartials checks that a backup removes the partial copies that
// killed backups to the same file left (TestStoreCommandsSurviveAKill in cmd/rota kills
// one), and leaves alone the one a running backup holds locked and every other file.
func TestBackupRemovesStalePartials(t *testing.T) {
	dir := t.TempDir()
	url := "sqlite://" + filepath.Join(dir, "rota.db")
	st := openStore(t, url)
	if err := st.Commit(context.Background(), &Batch{Jobs: []api.Job{{ID: 1, State: api.StatePending}}}); err != nil {
		t.Fatal(err)
	}
	write := func(name string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	stale := []string{
		write(".b.db.partial-111"), write(".b.db.partial-111-journal"),
		write(".b.db.partial-222"), write(".b.db.partial-222-wal"), write(".b.db.partial-222-shm"),
		write(".b.db.partial-333-journal"), // its copy is gone already
	}
	running := write(".b.db.partial-444")
	kept := []string{running,
		write(".b.db.partial-444-journal"), // the running backup's
		write(".b.db.partial-abc"),         // not a name a backup gives
		write(".c.db.partial-555"),         // another backup's
		write("b.db.partial-666"),          // not hidden
		write(".b.db.partial-"),
	}
	f, err := os.Open(running)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}

	if _, err := Backup(context.Background(), url, filepath.Join(dir, "b.db")); err != nil {
		t.Fatal(err)
	}
	for _, path := range stale {
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s, left by a killed backup, is still there (%v)", filepath.Base(path), err)
		}
	}
	for _, path := range kept {
		if _, err := os.Lstat(path); err != nil {
			t.Errorf("%s was removed: %v", filepath.Base(path), err)
		}
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".b.db.partial-*"))
	if len(left) != 4 { // 444, its journal, abc and the bare prefix
		t.Errorf("left beside the backup: %v", left)
	}
}
