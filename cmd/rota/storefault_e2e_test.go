package main

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"golang.org/x/sys/unix"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
	"github.com/rotahq/rota/internal/store/storetest"
)

// faultJobs is how many jobs the store the kill tests copy holds, each with five events:
// enough that a copy takes a second or more here, so that it can be killed midway.
const faultJobs = 10000

// fillFaultStore writes faultJobs jobs and their events into the store at url.
func fillFaultStore(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	msg := strings.Repeat("the job waits for a node with 8 free GPUs of model H100; ", 4)
	for start := int64(1); start <= faultJobs; start += 1000 {
		b := &store.Batch{}
		for id := start; id < start+1000; id++ {
			b.Jobs = append(b.Jobs, api.Job{ID: id, State: api.StatePending, SubmitTime: time.Unix(1_780_000_000+id, 0).UTC(),
				Spec: api.JobSpec{Name: "train-" + strconv.FormatInt(id, 10), User: "alice", Queue: "train", GPUs: 8,
					Command: []string{"python", "train.py", "--config", "configs/llama-8b.yaml", "--seed", strconv.FormatInt(id, 10)}}})
			for k := range 5 {
				b.Events = append(b.Events, api.Event{Time: time.Unix(1_780_000_000+id, int64(k)).UTC(), Actor: "scheduler", Kind: "job.waiting", JobID: id, Message: msg})
			}
		}
		if err := st.Commit(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
}

// storeJobs counts the jobs the store at url holds, opened as a server opens it.
func storeJobs(t *testing.T, url string) int {
	t.Helper()
	st, err := store.Open(context.Background(), url, nil)
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	defer st.Close()
	jobs, err := st.LoadJobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(jobs)
}

// killMidway starts rota with args and kills it with SIGKILL, as the OOM killer or a lost
// machine would, once midway says its copy is under way. It fails the test if the
// command ends first.
func killMidway(t *testing.T, dir, name string, midway func() bool, args ...string) {
	t.Helper()
	p := startProc(t, dir, name, nil, args...)
	deadline := time.Now().Add(60 * time.Second)
	for !midway() {
		if p.exited() {
			t.Fatalf("rota %s ended before it could be killed midway (make the store larger):\n%s", strings.Join(args, " "), tail(p.output(), 2000))
		}
		if time.Now().After(deadline) {
			t.Fatalf("rota %s: its copy never showed as under way:\n%s", strings.Join(args, " "), tail(p.output(), 2000))
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.kill()
	if _, exited := p.waitExit(10 * time.Second); !exited {
		t.Fatal("the killed command did not exit")
	}
}

// fileLarger says whether one of the files matching pattern holds more than n bytes.
func fileLarger(pattern string, n int64) bool {
	names, _ := filepath.Glob(pattern)
	for _, name := range names {
		if fi, err := os.Stat(name); err == nil && fi.Size() > n {
			return true
		}
	}
	return false
}

// TestStoreCommandsSurviveAKill kills rota admin migrate and rota admin backup in the
// middle of their copy, and checks that the source is whole, that no part of the copy is
// taken for a store, and that the same command run again succeeds.
func TestStoreCommandsSurviveAKill(t *testing.T) {
	skipShort(t)
	dir := t.TempDir()
	src := "sqlite://" + filepath.Join(dir, "rota.db")
	fillFaultStore(t, src)

	t.Run("migrate to SQLite", func(t *testing.T) {
		target := filepath.Join(dir, "copy.db")
		// The copy is one transaction; once it outgrows SQLite's page cache it spills
		// into the write-ahead log, uncommitted.
		killMidway(t, dir, "migrate-sqlite", func() bool { return fileLarger(target+"-wal", 1<<20) },
			"admin", "migrate", "--from", src, "--to", "sqlite://"+target)
		if n := storeJobs(t, src); n != faultJobs {
			t.Errorf("the source holds %d jobs after the kill, want %d", n, faultJobs)
		}
		r := runCLI(t, nil, "admin", "migrate", "--from", src, "--to", "sqlite://"+target)
		if r.code != 0 || !hasRow(r.stdout, "jobs", strconv.Itoa(faultJobs)) || !hasRow(r.stdout, "events", strconv.Itoa(5*faultJobs)) {
			t.Fatalf("migrate again into what the killed one left: %s", r)
		}
		if n := storeJobs(t, "sqlite://"+target); n != faultJobs {
			t.Errorf("the copy holds %d jobs, want %d", n, faultJobs)
		}
	})

	t.Run("migrate to PostgreSQL", func(t *testing.T) {
		pg := storetest.NewPostgres(t)
		target := pg.NewDatabase(t)
		db, err := sql.Open("pgx", target)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		// Midway: the copy's session is inserting rows, which no other session sees.
		inserting := func() bool {
			var n int
			err := db.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
				AND xact_start IS NOT NULL AND xact_start < now() - interval '200 milliseconds' AND query LIKE 'INSERT INTO %'`).Scan(&n)
			return err == nil && n > 0
		}
		killMidway(t, dir, "migrate-postgres", inserting, "admin", "migrate", "--from", src, "--to", target)
		// The database ends the dead client's transaction, and frees its lease, as soon
		// as it reads the closed connection; the next copy must not need more.
		r := runCLI(t, nil, "admin", "migrate", "--from", src, "--to", target)
		if r.code != 0 || !hasRow(r.stdout, "jobs", strconv.Itoa(faultJobs)) {
			t.Fatalf("migrate again into the database the killed one wrote to: %s", r)
		}
		if n := storeJobs(t, target); n != faultJobs {
			t.Errorf("the copy holds %d jobs, want %d", n, faultJobs)
		}
	})

	t.Run("backup", func(t *testing.T) {
		to := filepath.Join(dir, "backup.db")
		partials := filepath.Join(dir, ".backup.db.partial-*")
		killMidway(t, dir, "backup", func() bool { return fileLarger(partials, 1<<20) },
			"admin", "backup", "--store", src, "--to", to)
		if _, err := os.Stat(to); err == nil {
			t.Fatalf("a killed backup left %s, which looks whole", to)
		}
		r := runCLI(t, nil, "admin", "backup", "--store", src, "--to", to)
		if r.code != 0 || !hasRow(r.stdout, "jobs", strconv.Itoa(faultJobs)) {
			t.Fatalf("backup again: %s", r)
		}
		if n := storeJobs(t, "sqlite://"+to); n != faultJobs {
			t.Errorf("the backup holds %d jobs, want %d", n, faultJobs)
		}
		// What the killed backup left, a store's worth of the cluster's secrets under a
		// hidden name, is removed by the next one.
		if left, _ := filepath.Glob(partials); len(left) > 0 {
			t.Errorf("the killed backup's partial copy is still there after the next backup: %v", left)
		}
	})
}

// TestServerKeepsRoomForItsStore fills the disk of the server's data dir (a tmpfs) to
// below what it keeps free for its store (--keep-free-disk), with a job's log on its way.
// The server takes no more of the log and says why, to the admin and to the log's reader,
// while submits and the job's end, which its store records, go on; once room is freed the
// node sends the rest, and the log reads whole.
func TestServerKeepsRoomForItsStore(t *testing.T) {
	skipShort(t)
	c := newTestCluster(t, map[string]string{"n1": "1"}, clusterOpts{dataTmpfs: "64m", keepFreeDisk: "24M"})
	fill := filepath.Join(c.dataDir, "fill")
	free := func() int64 {
		var st unix.Statfs_t
		if err := unix.Statfs(c.dataDir, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Bavail) * st.Bsize
	}
	// 16 MiB left: room for the store, not above what the server keeps.
	if err := os.WriteFile(fill, make([]byte, free()-16<<20), 0o600); err != nil {
		t.Fatal(err)
	}

	const lines = 400_000 // seq prints 2.7 MB
	job := c.submit(api.JobSpec{Command: []string{"seq", strconv.Itoa(lines)}, GPUs: 1})
	if got := c.waitEnded(job.ID, 60*time.Second); got.State != api.StateSucceeded {
		t.Fatalf("job %d ended %s (%s: %s), want SUCCEEDED: the store should record its end", job.ID, got.State, got.Reason, got.Message)
	}
	if n := c.logBytes(job.ID); n != 0 {
		t.Errorf("the server wrote %d bytes of the log with less free than it keeps", n)
	}
	r := c.rota("admin", "status")
	if r.code != 0 || !strings.Contains(r.stdout, "Problem: the server's disk is nearly full: its data dir "+c.dataDir+" has ") ||
		!strings.Contains(r.stdout, "and the server keeps 24 MiB free for its store (rota server --keep-free-disk); job logs wait on their nodes until there is room") {
		t.Errorf("rota admin status does not say the disk is nearly full:\n%s", r)
	}
	for range 3 {
		if r := c.rota("submit", "--", "true"); r.code != 0 {
			t.Fatalf("a submit with the logs held back: %s", r)
		}
	}
	// The log's reader waits for the node (--log-repair-wait, 10 s), then is told why the
	// rest is not here.
	r = c.rota("logs", strconv.FormatInt(job.ID, 10))
	if r.code == 0 || !strings.Contains(r.stderr, "this server's disk is nearly full (rota admin status says more), so it takes no more logs: what node n1 printed lately waits there until there is room") {
		t.Errorf("rota logs of the held-back log does not say why it is short:\n%s", r)
	}
	if !strings.Contains(c.server.output(), `msg="the server's disk is nearly full: it takes no more job logs, which wait on their nodes, until there is room"`) {
		t.Errorf("the server does not log that its disk is nearly full:\n%s", tail(c.server.output(), 3000))
	}

	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := 1; i <= lines; i++ {
		want.WriteString(strconv.Itoa(i) + "\n")
	}
	waitFor(t, 60*time.Second, "the node to send the held-back log", func() bool { return c.logBytes(job.ID) == int64(want.Len()) })
	if got := c.logs(job.ID); got != want.String() {
		t.Fatalf("the log once room was freed: %d bytes, want %d", len(got), want.Len())
	}
	if r := c.rota("admin", "status"); strings.Contains(r.stdout, "Problem:") {
		t.Errorf("rota admin status still says there is a problem:\n%s", r)
	}
	if !strings.Contains(c.server.output(), `msg="room again on the server's disk: it takes job logs again"`) {
		t.Errorf("the server does not log that it takes logs again:\n%s", tail(c.server.output(), 3000))
	}
}

// logBytes is the size of the server's copy of a job's first attempt's log on node n1.
func (c *testCluster) logBytes(id int64) int64 {
	fi, err := os.Stat(filepath.Join(c.dataDir, "logs", strconv.FormatInt(id, 10), "1-n1.log"))
	if err != nil {
		return 0
	}
	return fi.Size()
}

// TestServerOnAFullDisk fills the disk of the server's data dir (a tmpfs, with no room
// kept: --keep-free-disk off) to the last byte while a job runs. The store refuses
// writes: submits fail, then are refused at once for a hold, the status says why, and
// the job's end waits on its node. Once space is freed the server takes changes again
// and records the end; nothing acknowledged was lost.
func TestServerOnAFullDisk(t *testing.T) {
	skipShort(t)
	c := newTestCluster(t, map[string]string{"n1": "1"}, clusterOpts{dataTmpfs: "64m", keepFreeDisk: "off"})
	stop := filepath.Join(c.root, "stop")
	job := c.submit(api.JobSpec{Command: []string{"sh", "-c", "while [ ! -e " + stop + " ]; do sleep 0.1; done"}})
	c.waitState(job.ID, 30*time.Second, api.StateRunning)

	fill := filepath.Join(c.dataDir, "fill")
	f, err := os.Create(fill)
	if err != nil {
		t.Fatal(err)
	}
	block := make([]byte, 64<<10)
	for {
		if _, err := f.Write(block); err != nil {
			break
		}
	}
	f.Close()
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var held cliResult
	waitFor(t, 30*time.Second, "a submit refused while the server holds changes", func() bool {
		held = c.rota("submit", "--", "true")
		return held.code != 0 && strings.Contains(held.stderr, "it takes no changes for")
	})
	if !strings.Contains(held.stderr, "database or disk is full") {
		t.Errorf("the refusal does not say what the store said:\n%s", held)
	}
	r := c.rota("admin", "status")
	if !strings.Contains(r.stdout, "Problem: the store has refused every write since") {
		t.Errorf("rota admin status does not say the store refuses writes:\n%s", r)
	}
	if got := c.job(job.ID); got.State != api.StateRunning {
		t.Errorf("job %d is %s with its end not stored, want RUNNING", job.ID, got.State)
	}

	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	if got := c.waitEnded(job.ID, 60*time.Second); got.State != api.StateSucceeded {
		t.Errorf("job %d ended %s once there was room, want SUCCEEDED", job.ID, got.State)
	}
	var next cliResult
	waitFor(t, 40*time.Second, "a submit taken once there is room", func() bool {
		next = c.rota("submit", "--", "true")
		return next.code == 0
	})
	lines := strings.Fields(next.stdout)
	id, err := strconv.ParseInt(lines[len(lines)-1], 10, 64)
	if err != nil {
		t.Fatalf("submit printed %q", next.stdout)
	}
	if got := c.waitEnded(id, 60*time.Second); got.State != api.StateSucceeded {
		t.Errorf("job %d, submitted once there was room, ended %s", id, got.State)
	}
	if r := c.rota("admin", "status"); strings.Contains(r.stdout, "Problem:") {
		t.Errorf("rota admin status still says there is a problem:\n%s", r)
	}
	if out := c.server.output(); !strings.Contains(out, `msg="the store refuses writes: the server takes no changes until it takes one again`) ||
		!strings.Contains(out, `msg="the store takes writes again: the server takes changes"`) {
		t.Errorf("the server's log does not say when the store refused writes and took them again:\n%s", tail(out, 4000))
	}
	if n := strings.Count(c.server.output(), "state re-read from the store"); n > 12 {
		t.Errorf("the server read its whole state again %d times while the disk was full", n)
	}
}
