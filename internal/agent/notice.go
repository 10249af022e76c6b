package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// Notices: the server may warn a running job through its task's Notice (today: it holds
// GPUs it does not use, and will be stopped if it goes on). The agent writes the warning to
// the job's ROTA_NOTICE_FILE once per distinct text, as {"reason": "idle", "message": ...},
// and takes it back when the server stops sending it. A stop notice (reason and deadline,
// written by the supervisor) always wins: the agent never replaces one.

// noticeReasonIdle is the reason of the notices the server sends: they are all about GPUs
// held idle.
const noticeReasonIdle = "idle"

// maxNoticeRead bounds what is read of a notice file the job could have replaced.
const maxNoticeRead = 64 << 10

// jobNotice is a warning in ROTA_NOTICE_FILE.
type jobNotice struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

// deliverNotice writes a task's notice text to its notice file when it changed since the
// last one written. Callers hold a.mu.
func (a *Agent) deliverNotice(att *attempt, text string) {
	k := att.key
	if text == a.notices[k] || att.stopReason != "" || isClosed(att.exited) {
		return
	}
	if st, _ := att.snapshot(); st.State != api.StateRunning {
		// The job's directory is made as it starts; the next heartbeat tries again.
		return
	}
	jobDir := filepath.Join(att.dir, dirJob)
	path := filepath.Join(jobDir, fileNotice)
	a.notices[k] = text
	prev, err := readNoticeFile(path)
	if err != nil {
		att.logger.Warn("unreadable notice file; replacing it", "err", err)
	}
	if !prev.Deadline.IsZero() {
		// The job is being stopped: that notice is the one it must read.
		return
	}
	if text == "" {
		if prev.Reason == noticeReasonIdle {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				att.logger.Warn("take the notice back", "err", err)
			}
		}
		return
	}
	if err := writeJobNotice(jobDir, jobNotice{Reason: noticeReasonIdle, Message: text}); err != nil {
		att.logger.Warn("write the notice", "err", err)
		return
	}
	att.logger.Info("notice written to the job", "notice", text)
}

// noticeFile is what the agent needs to know of the notice file already there.
type noticeFile struct {
	Reason   string    `json:"reason"`
	Deadline time.Time `json:"deadline"`
}

// readNoticeFile reads the notice in the job's directory, which the job may have replaced
// with anything: a link is not followed, a FIFO not waited on, and only a bounded regular
// file read. No file reads as the zero notice.
func readNoticeFile(path string) (noticeFile, error) {
	var n noticeFile
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, os.ErrNotExist) {
		return n, nil
	}
	if err != nil {
		return n, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return n, err
	}
	if !fi.Mode().IsRegular() {
		return n, fmt.Errorf("%s is not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxNoticeRead))
	if err != nil {
		return n, err
	}
	if err := json.Unmarshal(data, &n); err != nil {
		return noticeFile{}, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}

// writeJobNotice replaces the notice in one step, as writeNotice does for stops.
func writeJobNotice(jobDir string, n jobNotice) error { return writeNotice(jobDir, n) }
