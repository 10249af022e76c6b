package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
)

const runCmdUsage = `rota run [submit flags] -- CMD ARGS...

Runs CMD as an interactive job: submits it (to the queue "interactive" unless --queue or
-p says otherwise), waits for it to start, and connects this terminal to it through a
pseudo-terminal on its node, like srun --pty. Keys, Ctrl-C included, reach the job; the
window size follows this terminal's; SIGINT, SIGTERM, SIGQUIT and SIGTSTP sent to rota run
go to the job. rota run exits with the job's exit code. Closing the terminal (hang-up)
cancels the job; if the connection breaks instead, rota attach JOB reconnects before the
server's attach grace (default 1m) runs out, after which the job is cancelled.
  Without a terminal on stdin (piped, or < /dev/null) the job gets no pseudo-terminal and
no input; its output is streamed here, and Ctrl-C cancels it.

  rota run --gpus 1 -- bash`

const attachUsage = `rota attach JOB

Connects this terminal to a running interactive job (one started by rota run from a
terminal). Only the job's owner or an admin may attach. One terminal is attached at a
time: attaching takes the job over, and the terminal attached before is told so and let
go. Closing this terminal cancels the job, as it does for rota run.`

// defaultRunQueue is the queue rota run submits to unless told otherwise.
const defaultRunQueue = "interactive"

// runPoll is how often rota run asks whether its job has started or ended.
const runPoll = 250 * time.Millisecond

// attachCheck is how often an attached terminal asks whether the job has ended.
const attachCheck = 2 * time.Second

func runRun(ctx context.Context, cfg Config, args []string) int {
	fs, g := newFlagSet(cfg, "run", runCmdUsage)
	f := submitFlags{env: envFlag{}}
	f.register(fs, true)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if !checkOutput(fs, g) {
		return ExitUsage
	}
	if fs.NArg() == 0 {
		return cfg.usageError("run", "give the command to run after --, e.g. rota run --gpus 1 -- bash")
	}
	spec, warns, err := buildSpec(cfg, fs, f, nil, fs.Args())
	for _, w := range warns {
		fmt.Fprintf(cfg.Stderr, "rota run: warning: %s\n", w)
	}
	if err != nil {
		return cfg.usageError("run", "%v", err)
	}
	if spec.Queue == "" {
		spec.Queue = defaultRunQueue
	}
	if spec.Array != "" {
		return cfg.usageError("run", "--array: an interactive job is one job; submit arrays with rota submit")
	}
	in, tty := terminalIn(cfg)
	spec.TTY = tty

	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	// Interrupts are rota run's to handle from here: they cancel or reach the job.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGWINCH)
	defer signal.Stop(sigs)
	bg := context.WithoutCancel(ctx)
	job, err := c.Submit(bg, spec)
	if err != nil {
		return cfg.fail(bg, err)
	}
	fmt.Fprintf(cfg.Stderr, "rota run: job %d submitted to queue %s; waiting for it to start (Ctrl-C cancels it)\n", job.ID, job.Spec.Queue)
	code, started, ended := waitStarted(bg, cfg, c, job.ID, sigs)
	if ended {
		// It ran and ended between two looks: its output, in its log, is still to show.
		if err := copyLog(bg, c, job.ID, LogOptions{}, cfg.Stdout); err != nil {
			return cfg.fail(bg, err)
		}
	}
	if !started {
		return code
	}
	if !tty {
		return streamRun(bg, cfg, c, job.ID, sigs)
	}
	return attachTerminal(bg, cfg, c, job.ID, in, sigs)
}

func runAttach(ctx context.Context, cfg Config, args []string) int {
	fs, g := newFlagSet(cfg, "attach", attachUsage)
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return cfg.usageError("attach", "want exactly one job ID, got %d arguments", len(pos))
	}
	ref, err := parseJobRef(pos[0])
	if err != nil {
		return cfg.usageError("attach", "%v", err)
	}
	in, tty := terminalIn(cfg)
	if !tty {
		return cfg.usageError("attach", "stdin is not a terminal: rota attach connects a terminal; follow the output with rota logs -f %s", pos[0])
	}
	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	id, err := c.jobID(ctx, ref)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGWINCH)
	defer signal.Stop(sigs)
	return attachTerminal(context.WithoutCancel(ctx), cfg, c, id, in, sigs)
}

// terminalIn returns stdin and whether it is a terminal.
func terminalIn(cfg Config) (*os.File, bool) {
	f, ok := cfg.Stdin.(*os.File)
	if !ok || f == nil {
		return nil, false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return f, err == nil
}

// signalExit is the exit code of a process killed by sig, as shells report it.
func signalExit(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return ExitError
}

// waitStarted waits until the job runs. An interrupt meanwhile cancels it; started is
// false when the job will not run, with the code rota run exits with, and ended is set
// when it has run and ended already.
func waitStarted(ctx context.Context, cfg Config, c *Client, id int64, sigs <-chan os.Signal) (code int, started, ended bool) {
	t := time.NewTicker(runPoll)
	defer t.Stop()
	for {
		d, err := c.GetJob(ctx, id)
		switch {
		case err != nil:
			return cfg.fail(ctx, err), false, false
		case d.Job.State.Terminal():
			return jobExit(cfg, d.Job), false, d.Job.StartTime != nil
		case d.Job.State == api.StateRunning:
			return 0, true, false
		}
		select {
		case sig := <-sigs:
			switch sig {
			case syscall.SIGWINCH, syscall.SIGTSTP:
				continue
			}
			fmt.Fprintf(cfg.Stderr, "rota run: %s; cancelling job %d\n", sig, id)
			if _, err := c.Cancel(ctx, id); err != nil {
				return cfg.fail(ctx, err), false, false
			}
			return signalExit(sig), false, false
		case <-t.C:
		}
	}
}

// jobExit is the exit code of an ended job: its own, or 1 where it has none (cancelled
// before it ran, failed to start), said on stderr.
func jobExit(cfg Config, j api.Job) int {
	if j.ExitCode != nil && j.State != api.StateCancelled {
		return *j.ExitCode
	}
	if j.State == api.StateSucceeded {
		return ExitOK
	}
	msg := string(j.State)
	if j.Message != "" {
		msg += ": " + j.Message
	}
	fmt.Fprintf(cfg.Stderr, "rota: job %d %s\n", j.ID, msg)
	if j.ExitCode != nil && *j.ExitCode != 0 {
		return *j.ExitCode
	}
	return ExitError
}

// waitEnded waits until the job has ended and returns its exit code.
func waitEnded(ctx context.Context, cfg Config, c *Client, id int64) int {
	for {
		d, err := c.GetJob(ctx, id)
		if err != nil {
			return cfg.fail(ctx, err)
		}
		if d.Job.State.Terminal() {
			return jobExit(cfg, d.Job)
		}
		time.Sleep(runPoll)
	}
}

// streamRun is rota run without a terminal: the job's output is followed, an interrupt
// cancels it, and the job's exit code is returned.
func streamRun(ctx context.Context, cfg Config, c *Client, id int64, sigs <-chan os.Signal) int {
	done := make(chan error, 1)
	go func() { done <- copyLog(ctx, c, id, LogOptions{Wait: followWait}, cfg.Stdout) }()
	for {
		select {
		case err := <-done:
			if err != nil {
				return cfg.fail(ctx, err)
			}
			return waitEnded(ctx, cfg, c, id)
		case sig := <-sigs:
			switch sig {
			case syscall.SIGWINCH, syscall.SIGTSTP:
				continue
			}
			fmt.Fprintf(cfg.Stderr, "rota run: %s; cancelling job %d\n", sig, id)
			if _, err := c.Cancel(ctx, id); err != nil {
				var ae *APIError
				if !errors.As(err, &ae) || ae.StatusCode != http.StatusConflict {
					return cfg.fail(ctx, err)
				}
			}
		}
	}
}

// Attach opens the attach stream of job id (GET /api/v1/jobs/{id}/attach): binary
// WebSocket messages, each one frame of api/attach.go.
func (c *Client) Attach(ctx context.Context, id int64) (*websocket.Conn, error) {
	base := strings.TrimRight(c.BaseURL, "/")
	target, err := c.requestBase(base)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	if c.Token != "" {
		h.Set("Authorization", "Bearer "+c.Token)
	}
	conn, resp, err := websocket.Dial(ctx, target+jobPath(id)+"/attach", &websocket.DialOptions{HTTPClient: auth.HTTP1Only(c.httpClient(base)), HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.Body != nil {
			e := readAPIError(resp)
			e.Server = base
			return nil, e
		}
		return nil, &UnreachableError{URL: base, Err: err}
	}
	conn.SetReadLimit(api.MaxFrame + 1)
	return conn, nil
}

// rawMode puts the terminal fd in raw mode and returns what restores it.
func rawMode(fd int) (func(), error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, err
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}

// windowFrame is a resize frame of the terminal fd's size; nil where it has none.
func windowFrame(fd int) []byte {
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil || ws.Row == 0 || ws.Col == 0 {
		return nil
	}
	return api.ResizeFrame(ws.Row, ws.Col)
}

// attachTerminal connects the terminal in to job id until the job's terminal closes, and
// returns the job's exit code. Losing the terminal (hang-up, end of input) cancels the
// job; a broken connection leaves it to be re-attached.
func attachTerminal(ctx context.Context, cfg Config, c *Client, id int64, in *os.File, sigs <-chan os.Signal) int {
	conn, err := c.Attach(ctx, id)
	if err != nil {
		var ae *APIError
		if errors.As(err, &ae) && ae.StatusCode == http.StatusConflict {
			if d, gerr := c.GetJob(ctx, id); gerr == nil && d.Job.State.Terminal() {
				// It ended before the terminal could attach: show what it wrote.
				if err := copyLog(ctx, c, id, LogOptions{}, cfg.Stdout); err != nil {
					return cfg.fail(ctx, err)
				}
				return jobExit(cfg, d.Job)
			}
		}
		return cfg.fail(ctx, err)
	}
	defer conn.CloseNow()
	fd := int(in.Fd())
	restore, err := rawMode(fd)
	if err != nil {
		return cfg.fail(ctx, fmt.Errorf("put the terminal in raw mode: %w", err))
	}
	restored := false
	unraw := func() {
		if !restored {
			restored = true
			restore()
		}
	}
	defer unraw()
	send := func(frame []byte) error {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return conn.Write(wctx, websocket.MessageBinary, frame)
	}
	if f := windowFrame(fd); f != nil {
		_ = send(f)
	}

	// What ends the session: the stream (job ended, taken over, connection lost), or this
	// terminal going away. shown says whether the stream brought any output.
	streamEnd := make(chan error, 1)
	var shown atomic.Bool
	go func() {
		for {
			_, msg, err := conn.Read(ctx)
			if err != nil {
				streamEnd <- err
				return
			}
			if len(msg) > 1 && msg[0] == api.FrameData {
				shown.Store(true)
				if _, err := cfg.Stdout.Write(msg[1:]); err != nil {
					streamEnd <- err
					return
				}
			}
		}
	}()
	inEnd := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := in.Read(buf)
			if n > 0 {
				if werr := send(append([]byte{api.FrameData}, buf[:n]...)); werr != nil {
					return // the stream's end is reported by its reader
				}
			}
			if err != nil {
				inEnd <- err
				return
			}
		}
	}()

	hangUp := func(why string) int {
		unraw()
		fmt.Fprintf(cfg.Stderr, "\r\nrota: %s; cancelling job %d\n", why, id)
		conn.Close(websocket.StatusNormalClosure, "terminal gone")
		if _, err := c.Cancel(ctx, id); err != nil {
			var ae *APIError
			if !errors.As(err, &ae) || ae.StatusCode != http.StatusConflict {
				return cfg.fail(ctx, err)
			}
		}
		return signalExit(syscall.SIGHUP)
	}
	// A job whose terminal never reached the server (its agent was cut off) ends without
	// the stream saying so: the job itself is looked at now and then.
	check := time.NewTicker(attachCheck)
	defer check.Stop()
	endedSeen := false
	for {
		select {
		case <-check.C:
			d, err := c.GetJob(ctx, id)
			if err != nil || !d.Job.State.Terminal() {
				continue
			}
			if endedSeen {
				unraw()
				fmt.Fprintf(cfg.Stderr, "\r\nrota: job %d ended without its terminal closing here; rota logs %d has its output\n", id, id)
				return jobExit(cfg, d.Job)
			}
			endedSeen = true // the stream's own end is usually a moment away
		case sig := <-sigs:
			switch sig {
			case syscall.SIGWINCH:
				if f := windowFrame(fd); f != nil {
					_ = send(f)
				}
			case syscall.SIGHUP:
				return hangUp("the terminal hung up")
			default:
				name := strings.TrimPrefix(unix.SignalName(sig.(syscall.Signal)), "SIG")
				_ = send(append([]byte{api.FrameSignal}, name...))
			}
		case err := <-inEnd:
			return hangUp(fmt.Sprintf("the terminal went away (%v)", err))
		case err := <-streamEnd:
			unraw()
			switch websocket.CloseStatus(err) {
			case websocket.StatusNormalClosure:
				code := waitEnded(ctx, cfg, c, id)
				if !shown.Load() {
					// The job's terminal closed before any of its output reached this one
					// (a job quicker than the relay): its log, complete once it has
					// ended, has what it wrote.
					if err := copyLog(ctx, c, id, LogOptions{}, cfg.Stdout); err != nil {
						return cfg.fail(ctx, err)
					}
				}
				return code
			case 4001:
				fmt.Fprintf(cfg.Stderr, "\r\nrota: another terminal attached to job %d; this one is detached and the job keeps running\n", id)
				return ExitError
			}
			fmt.Fprintf(cfg.Stderr, "\r\nrota: the connection to job %d broke (%v); rota attach %d reconnects before the server cancels it\n", id, err, id)
			return ExitError
		}
	}
}
