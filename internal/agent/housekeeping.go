package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/atomicfile"
)

// housekeepEvery is how often finished attempts and stale checkpoints are looked for.
const housekeepEvery = 5 * time.Minute

// fileLastRemoved, in a job's directory with no attempts left, is when its last attempt
// directory was removed: its node-local checkpoints are kept KeepCheckpoints after that.
const fileLastRemoved = "last-removed"

// housekeeping keeps the data directory from growing with finished jobs, for as long as
// Run runs.
func (a *Agent) housekeeping(ctx context.Context) {
	for {
		a.housekeep(time.Now())
		if !sleep(ctx, housekeepEvery) {
			return
		}
	}
}

// housekeep removes what nothing needs any more:
//   - an attempt's directory once it has ended, the server has its end (or, for another
//     cluster's, its stop) and its whole log, and KeepFinished has passed since its end;
//   - a job's node-local checkpoints once none of its attempt directories remain and
//     KeepCheckpoints has passed since the last one went;
//   - the directories of other clusters once empty.
//
// It holds the agent's lock while it removes, so that no attempt starts in a directory
// being removed.
func (a *Agent) housekeep(now time.Time) {
	found, err := scanAttempts(a.dataDir)
	if err != nil {
		a.logger.Warn("housekeeping", "err", err)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, f := range found {
		if !a.removable(f, now) {
			continue
		}
		if att, ok := a.attempts[f.key]; ok {
			if !isClosed(att.exited) || !isClosed(att.logShipped) {
				continue
			}
			delete(a.attempts, f.key)
		}
		if err := os.RemoveAll(f.dir); err != nil {
			a.logger.Warn("remove a finished attempt", "dir", f.dir, "err", err)
			continue
		}
		a.logger.Debug("removed a finished attempt", "dir", f.dir)
		jobDir := filepath.Dir(f.dir)
		if !hasAttempts(jobDir) {
			_ = atomicfile.Write(filepath.Join(jobDir, fileLastRemoved), []byte(now.UTC().Format(time.RFC3339Nano)+"\n"), 0o644, false)
		}
	}

	roots := []attemptKey{{legacy: true}}
	if clusters, err := os.ReadDir(filepath.Join(a.dataDir, "clusters")); err == nil {
		for _, c := range clusters {
			if c.IsDir() && validClusterID(c.Name()) {
				roots = append(roots, attemptKey{cluster: c.Name()})
			}
		}
	}
	for _, k := range roots {
		root := clusterRoot(a.dataDir, k)
		if !a.confirmed {
			break
		}
		a.removeStaleCheckpoints(root, now)
		if a.isCurrent(k) {
			// Its skeleton stays: an attempt may be starting in it.
			continue
		}
		for _, sub := range []string{"jobs", "checkpoints"} {
			_ = removeIfEmpty(filepath.Join(root, sub))
		}
		if !k.legacy {
			_ = removeIfEmpty(root)
		}
	}
	_ = removeIfEmpty(filepath.Join(a.dataDir, "clusters"))
}

// removable reports whether an attempt's directory may go.
func (a *Agent) removable(f foundAttempt, now time.Time) bool {
	rec, ok := readStatus(f.dir)
	if !ok || now.Sub(rec.EndTime) < a.keepFinished {
		return false
	}
	if exists(filepath.Join(f.dir, fileStopped)) && !exists(filepath.Join(f.dir, fileStoppedAcked)) {
		return false
	}
	if a.isCurrent(f.key) {
		return exists(filepath.Join(f.dir, fileAcked)) && exists(filepath.Join(f.dir, fileShipped))
	}
	// Another cluster's end has nobody to report to; a cluster not yet known may be its own.
	return a.confirmed
}

// removeStaleCheckpoints removes the node-local checkpoints of jobs whose last attempt
// directory went more than KeepCheckpoints ago, with the job's directory.
func (a *Agent) removeStaleCheckpoints(root string, now time.Time) {
	jobs, _ := os.ReadDir(filepath.Join(root, "jobs"))
	for _, j := range jobs {
		if _, err := strconv.ParseInt(j.Name(), 10, 64); err != nil || !j.IsDir() {
			continue
		}
		jobDir := filepath.Join(root, "jobs", j.Name())
		if hasAttempts(jobDir) || now.Sub(lastRemoved(jobDir)) < a.keepCheckpoints {
			continue
		}
		ckpt := filepath.Join(root, "checkpoints", j.Name())
		if err := os.RemoveAll(ckpt); err != nil {
			a.logger.Warn("remove old checkpoints", "dir", ckpt, "err", err)
			continue
		}
		if err := os.RemoveAll(jobDir); err != nil {
			a.logger.Warn("remove a finished job", "dir", jobDir, "err", err)
		}
	}
	// Checkpoints of a job with no directory at all: left by something else, go by age.
	ckpts, _ := os.ReadDir(filepath.Join(root, "checkpoints"))
	for _, c := range ckpts {
		if _, err := strconv.ParseInt(c.Name(), 10, 64); err != nil || exists(filepath.Join(root, "jobs", c.Name())) {
			continue
		}
		if fi, err := c.Info(); err == nil && now.Sub(fi.ModTime()) >= a.keepCheckpoints {
			_ = os.RemoveAll(filepath.Join(root, "checkpoints", c.Name()))
		}
	}
}

// hasAttempts reports whether a job's directory holds an attempt directory.
func hasAttempts(jobDir string) bool {
	ents, err := os.ReadDir(jobDir)
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err == nil && e.IsDir() {
			return true
		}
	}
	return false
}

// lastRemoved is when a job's last attempt directory was removed; without a record, when
// its directory last changed.
func lastRemoved(jobDir string) time.Time {
	if data, err := os.ReadFile(filepath.Join(jobDir, fileLastRemoved)); err == nil {
		if t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(data))); err == nil {
			return t
		}
	}
	if fi, err := os.Stat(jobDir); err == nil {
		return fi.ModTime()
	}
	return time.Time{}
}

func removeIfEmpty(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) > 0 {
		return err
	}
	return os.Remove(dir)
}
