package server

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"time"
)

// Logs kept for a while: with Config.LogRetention set, every server removes from its own
// data dir the logs of jobs that ended longer ago than that, so that the disk under logs/
// follows the jobs of the window rather than every job ever run. A standby does too: it
// keeps the logs that arrived while it led, and would otherwise keep them for as long as
// it never leads again.

const (
	// logSweepEvery is how often a server looks for logs past the retention.
	logSweepEvery = time.Hour
	// jobReadTimeout bounds a standby's read of a job from the store for the sweep.
	jobReadTimeout = 10 * time.Second
)

// sweepLogsLoop removes expired logs every logSweepEvery until ctx ends.
func (s *Server) sweepLogsLoop(ctx context.Context) {
	if s.cfg.LogRetention <= 0 {
		return
	}
	t := time.NewTicker(logSweepEvery)
	defer t.Stop()
	for {
		s.sweepLogs(ctx, s.cfg.Clock.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sweepLogs removes the log directory of every job that is not waiting or running and
// whose logs were last written before now less LogRetention, and returns how many it
// removed. A job's logs stop growing when it ends, so their age is how long ago it
// ended; a running job that has printed nothing for that long keeps its logs.
func (s *Server) sweepLogs(ctx context.Context, now time.Time) int {
	cutoff := now.Add(-s.cfg.LogRetention)
	dirs, err := fs.ReadDir(s.logs.FS(), ".")
	if err != nil {
		s.log.Warn("list the logs for their retention", "err", err)
		return 0
	}
	removed := 0
	for _, d := range dirs {
		id, err := strconv.ParseInt(d.Name(), 10, 64)
		if err != nil || !d.IsDir() || !s.logsOlder(d.Name(), cutoff) {
			continue
		}
		done, err := s.jobDone(ctx, id)
		if err != nil {
			// The store is out of reach: the rest would wait on it as long.
			s.log.Warn("kept expired logs: the store could not say whether their jobs ended; the next sweep tries again", "job", id, "err", err)
			break
		}
		if !done {
			continue
		}
		// With every write held, so that no chunk is written into the directory as it goes.
		s.logLocks.sweep.Lock()
		err = s.logs.RemoveAll(d.Name())
		s.logLocks.sweep.Unlock()
		if err != nil {
			s.log.Warn("remove an expired job's logs", "job", id, "err", err)
			continue
		}
		removed++
	}
	if removed > 0 {
		s.log.Info("removed the logs of jobs that ended before the retention", "jobs", removed, "retention", s.cfg.LogRetention)
	}
	return removed
}

// jobDone reports whether job id is neither waiting nor running (or is unknown), for
// the retention: the leader reads its memory, where ended jobs may have been evicted; a
// standby, whose memory is not kept up to date, reads the store.
func (s *Server) jobDone(ctx context.Context, id int64) (bool, error) {
	if s.isLeader() {
		s.mu.Lock()
		defer s.mu.Unlock()
		j, ok := s.state.Job(id)
		return !ok || j.State.Terminal(), nil
	}
	ctx, cancel := context.WithTimeout(ctx, jobReadTimeout)
	defer cancel()
	j, _, ok, err := s.store.Job(ctx, id)
	if err != nil {
		return false, err
	}
	return !ok || j.State.Terminal(), nil
}

// logsOlder reports whether every log in the job directory dir was last written before
// cutoff.
func (s *Server) logsOlder(dir string, cutoff time.Time) bool {
	files, err := fs.ReadDir(s.logs.FS(), dir)
	if err != nil {
		return false
	}
	for _, f := range files {
		fi, err := f.Info()
		if err != nil || !fi.ModTime().Before(cutoff) {
			return false
		}
	}
	return true
}

// expiredLog says why an ended job's log is gone from this server when its retention
// has passed; "" otherwise.
func (s *Server) expiredLog(ended *time.Time, now time.Time) string {
	if s.cfg.LogRetention <= 0 || ended == nil || now.Sub(*ended) <= s.cfg.LogRetention {
		return ""
	}
	return fmt.Sprintf("this server removes the logs of jobs that ended more than %s ago (rota server --log-retention), and this one ended %s",
		s.cfg.LogRetention, ended.UTC().Format(time.RFC3339))
}
