package agent

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/rotahq/rota/internal/api"
)

// An interactive attempt (Task.TTY) runs its job on a pseudo-terminal the supervisor
// opens. The supervisor holds the master: what the job writes goes to output.log, as any
// job's output does, and to the one connection on attach.sock, the Unix socket in the
// attempt's directory (mode 0600: only the agent's account reaches it). Frames on the
// socket are api.WriteFrame's: keystrokes, window sizes and signals from the agent, output
// to it. A new connection replaces the previous one and first gets the last ttyReplay
// bytes of output, so a terminal that attaches late still sees the prompt.

// fileAttachSock is the socket of an interactive attempt's terminal.
const fileAttachSock = "attach.sock"

// ttyReplay is how much recent output a new connection gets first.
const ttyReplay = 16 << 10

// shortSocketPath names the file name in dir by a path short enough for a Unix socket
// (108 bytes), through /proc/self/fd and d, an open descriptor of dir.
func shortSocketPath(d *os.File, name string) string {
	return fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), name)
}

// attachSignals are the signals an attached terminal may send (api.AttachSignals).
var attachSignals = map[string]syscall.Signal{
	"INT": syscall.SIGINT, "TERM": syscall.SIGTERM, "QUIT": syscall.SIGQUIT, "TSTP": syscall.SIGTSTP,
	"CONT": syscall.SIGCONT, "HUP": syscall.SIGHUP, "USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2,
	"WINCH": syscall.SIGWINCH,
}

// ttyJob is the supervisor's side of an interactive job's terminal.
type ttyJob struct {
	master *os.File
	output io.Writer
	logger *slog.Logger
	// pgid is the job's process group: where signals go when the terminal has no
	// foreground group.
	pgid int

	dir *os.File
	ln  net.Listener
	// copied is closed once the job's output has all been read (the terminal closed).
	copied chan struct{}

	mu     sync.Mutex
	conn   net.Conn
	recent []byte
}

// openTTY opens the job's pseudo-terminal with a 24x80 window, owned by uid where it is
// not -1. The slave becomes the job's stdin, stdout and stderr.
func openTTY(uid int) (master, slave *os.File, err error) {
	master, slave, err = pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	if err := pty.Setsize(master, &pty.Winsize{Rows: 24, Cols: 80}); err != nil {
		master.Close()
		slave.Close()
		return nil, nil, fmt.Errorf("size the pseudo-terminal: %w", err)
	}
	if uid >= 0 {
		if err := os.Chown(slave.Name(), uid, -1); err != nil {
			master.Close()
			slave.Close()
			return nil, nil, fmt.Errorf("give the pseudo-terminal to the job's account: %w", err)
		}
	}
	return master, slave, nil
}

// serveTTY starts relaying the job's terminal: output to the log and to attach.sock.
func serveTTY(attemptDir string, master *os.File, output io.Writer, pgid int, logger *slog.Logger) (*ttyJob, error) {
	d, err := os.Open(attemptDir)
	if err != nil {
		return nil, err
	}
	sock := shortSocketPath(d, fileAttachSock)
	_ = os.Remove(filepath.Join(attemptDir, fileAttachSock))
	ln, err := net.Listen("unix", sock)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("listen on %s: %w", fileAttachSock, err)
	}
	if err := os.Chmod(filepath.Join(attemptDir, fileAttachSock), 0o600); err != nil {
		ln.Close()
		d.Close()
		return nil, err
	}
	t := &ttyJob{master: master, output: output, logger: logger, pgid: pgid, dir: d, ln: ln, copied: make(chan struct{})}
	go t.copyOut()
	go t.accept()
	return t, nil
}

// copyOut reads the job's output until the terminal closes.
func (t *ttyJob) copyOut() {
	defer close(t.copied)
	buf := make([]byte, 32<<10)
	for {
		n, err := t.master.Read(buf)
		if n > 0 {
			out := buf[:n]
			if _, werr := t.output.Write(out); werr != nil {
				t.logger.Warn("write the job's output to its log", "err", werr)
			}
			t.mu.Lock()
			t.recent = append(t.recent, out...)
			if len(t.recent) > ttyReplay {
				t.recent = append([]byte(nil), t.recent[len(t.recent)-ttyReplay:]...)
			}
			if t.conn != nil {
				if err := api.WriteFrame(t.conn, api.FrameData, out); err != nil {
					t.conn.Close()
					t.conn = nil
				}
			}
			t.mu.Unlock()
		}
		if err != nil {
			// EIO once every process holding the terminal has closed it.
			return
		}
	}
}

func (t *ttyJob) accept() {
	for {
		c, err := t.ln.Accept()
		if err != nil {
			return
		}
		t.mu.Lock()
		if t.conn != nil {
			t.conn.Close()
		}
		t.conn = c
		if len(t.recent) > 0 {
			if err := api.WriteFrame(c, api.FrameData, t.recent); err != nil {
				c.Close()
				t.conn = nil
			}
		}
		t.mu.Unlock()
		go t.readIn(c)
	}
}

// readIn carries out what the agent sends on c.
func (t *ttyJob) readIn(c net.Conn) {
	defer func() {
		t.mu.Lock()
		if t.conn == c {
			t.conn = nil
		}
		t.mu.Unlock()
		c.Close()
	}()
	for {
		kind, p, err := api.ReadFrame(c)
		if err != nil {
			return
		}
		switch kind {
		case api.FrameData:
			if _, err := t.master.Write(p); err != nil {
				return
			}
		case api.FrameResize:
			rows, cols, err := api.ParseResize(p)
			if err != nil {
				t.logger.Warn("bad resize frame", "err", err)
				continue
			}
			// The kernel sends SIGWINCH to the terminal's foreground group.
			if err := pty.Setsize(t.master, &pty.Winsize{Rows: rows, Cols: cols}); err != nil {
				t.logger.Warn("resize the terminal", "err", err)
			}
		case api.FrameSignal:
			sig, ok := attachSignals[string(p)]
			if !ok {
				t.logger.Warn("bad signal frame", "signal", string(p))
				continue
			}
			t.signal(sig)
		}
	}
}

// signal sends sig to the terminal's foreground process group (the command a shell in the
// job runs now), or to the job's group where the terminal has none.
func (t *ttyJob) signal(sig syscall.Signal) {
	pg, err := unix.IoctlGetInt(int(t.master.Fd()), unix.TIOCGPGRP)
	if err != nil || pg <= 0 {
		pg = t.pgid
	}
	if err := unix.Kill(-pg, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		t.logger.Warn("signal the job", "signal", sig, "err", err)
	}
}

// ttyLinger is how long an ended job's terminal waits for the agent's relay, when none is
// connected, so that the output of a job quicker than the relay still reaches the server.
const ttyLinger = 3 * time.Second

// close waits a moment for the job's last output, and for a relay to take it where none is
// connected, then closes the terminal and its socket, which ends the agent's relay.
func (t *ttyJob) close() {
	select {
	case <-t.copied:
	case <-time.After(2 * time.Second):
	}
	for end := time.Now().Add(ttyLinger); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		t.mu.Lock()
		connected := t.conn != nil
		t.mu.Unlock()
		if connected {
			break
		}
	}
	t.ln.Close()
	t.mu.Lock()
	if t.conn != nil {
		t.conn.Close()
		t.conn = nil
	}
	t.mu.Unlock()
	t.master.Close()
	t.dir.Close()
}
