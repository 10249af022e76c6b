package agent

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// listTree lists the paths under root, relative, directories with a trailing slash.
func listTree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			rel += "/"
		}
		out = append(out, rel)
		return nil
	})
	sort.Strings(out)
	return out
}

// The data directory does not grow with finished jobs: an attempt's directory goes once
// the server has its end and its log and KeepFinished has passed, its node-local
// checkpoints KeepCheckpoints after that; what still runs, or is not acknowledged, stays.
func TestHousekeepingRemovesFinishedAttempts(t *testing.T) {
	s := newFakeServer(t)
	dir := t.TempDir()
	release := filepath.Join(t.TempDir(), "release")
	var tasks []api.Task
	for job := int64(1); job <= 5; job++ {
		tasks = append(tasks, api.Task{JobID: job, Attempt: 1, Command: []string{"sh", "-c", `echo out; echo data > "$ROTA_CHECKPOINT_DIR/c"`}})
	}
	running := api.Task{JobID: 6, Attempt: 1, Command: []string{"sh", "-c", `while [ ! -e "$1" ]; do sleep 0.05; done`, "job", release}}
	s.setDesired(append(tasks, running)...)
	a := launch(t, agentConfig(t, s, dir), testLogger(t))
	for job := int64(1); job <= 5; job++ {
		adir := attemptDir(dir, taskKey{job, 1}.in(testCluster))
		eventually(t, 20*time.Second, "job "+adir+" acknowledged and shipped", func() bool {
			return exists(filepath.Join(adir, fileAcked)) && exists(filepath.Join(adir, fileShipped))
		})
	}
	s.setDesired(running)
	// An answer composed before would list the ended attempts still; once they are
	// removed, it would start them anew. Two heartbeats later none is in flight.
	n := s.beatCount()
	eventually(t, 10*time.Second, "two heartbeats answered without the ended attempts", func() bool { return s.beatCount() > n+1 })
	a.attemptOf(t, taskKey{6, 1})

	jobs := filepath.Join(dir, "clusters", testCluster, "jobs")
	ckpts := filepath.Join(dir, "clusters", testCluster, "checkpoints")
	now := time.Now()
	a.housekeep(now.Add(time.Hour))
	if n := len(listTree(t, jobs)); n < 6 {
		t.Fatalf("attempts removed before KeepFinished passed: %v", listTree(t, jobs))
	}
	later := now.Add(defaultKeepFinished + time.Hour)
	a.housekeep(later)
	for job := int64(1); job <= 5; job++ {
		if adir := attemptDir(dir, taskKey{job, 1}.in(testCluster)); exists(adir) {
			t.Errorf("%s is still there", adir)
		}
	}
	if !exists(attemptDir(dir, taskKey{6, 1}.in(testCluster))) {
		t.Fatal("housekeeping removed a running attempt")
	}
	if got := listTree(t, ckpts); len(got) != 11 { // 6 directories and 5 files
		t.Errorf("checkpoints right after their attempts went: %v, want all kept", got)
	}
	a.housekeep(later.Add(defaultKeepCheckpoints + time.Hour))
	if got := strings.Join(listTree(t, ckpts), " "); got != "6/" {
		t.Errorf("checkpoints left: %q, want only the running job's", got)
	}
	var left []string
	for _, p := range listTree(t, jobs) {
		if strings.HasSuffix(p, "/") {
			left = append(left, p)
		}
	}
	if got := strings.Join(left, " "); got != "6/ 6/1/ 6/1/job/" {
		t.Errorf("jobs left: %q, want only the running one", got)
	}
}

// Another cluster's attempts go too once their stop is acknowledged, and so do the
// cluster's directories.
func TestHousekeepingRemovesOtherClusters(t *testing.T) {
	s := newFakeServer(t)
	dir := t.TempDir()
	stale := attemptDir(dir, attemptKey{cluster: "bbbbbbbbbbbbbbbb", job: 1, attempt: 1})
	os.MkdirAll(stale, 0o755)
	writeStatus(stale, endRecord{State: api.StateSucceeded, EndTime: time.Now().Add(-48 * time.Hour)})
	os.MkdirAll(localCheckpointDir(dir, attemptKey{cluster: "bbbbbbbbbbbbbbbb", job: 1}), 0o755)
	a := launch(t, agentConfig(t, s, dir), testLogger(t))
	eventually(t, 10*time.Second, "the cluster to be known", func() bool {
		hb, _ := s.lastBeat()
		return hb.ClusterID == testCluster
	})
	a.housekeep(time.Now().Add(defaultKeepCheckpoints + time.Hour))
	a.housekeep(time.Now().Add(2*defaultKeepCheckpoints + time.Hour))
	if exists(filepath.Join(dir, "clusters", "bbbbbbbbbbbbbbbb")) {
		t.Errorf("the other cluster's directory is still there: %v", listTree(t, filepath.Join(dir, "clusters")))
	}
}
