package server

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"time"
)

// Logs kept for a while: with Config.LogRetention set, the leader removes the logs of
// jobs that ended longer ago than that, so that the disk under logs/ follows the jobs of
// the window rather than every job ever run.

// logSweepEvery is how often the leader looks for logs past the retention.
const logSweepEvery = time.Hour

// sweepLogsLoop removes expired logs every logSweepEvery until ctx ends, while this
// server leads (a standby's memory does not say which jobs still run).
func (s *Server) sweepLogsLoop(ctx context.Context) {
	if s.cfg.LogRetention <= 0 {
		return
	}
	t := time.NewTicker(logSweepEvery)
	defer t.Stop()
	for {
		if s.isLeader() {
			s.sweepLogs(s.cfg.Clock.Now())
		}
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
func (s *Server) sweepLogs(now time.Time) int {
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
		s.mu.Lock()
		j, ok := s.state.Job(id)
		active := ok && !j.State.Terminal()
		s.mu.Unlock()
		if active {
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
