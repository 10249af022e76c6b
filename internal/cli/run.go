package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
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
cancels the job. If the server goes away (a restart, an upgrade, a failover), rota run
says so and attaches again once it is back, for up to 2 minutes, and the session goes on;
keys typed meanwhile are held and sent then. Past that, rota attach JOB reconnects before
the server's attach grace (default 1m) runs out, after which the job is cancelled.
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
// job. Losing the server (a restart, an upgrade, a failover) does not: the terminal stays
// as it is and the stream is opened again, for up to followRetry (see reattach).
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
	link := &termLink{ctx: ctx, conn: conn}
	defer link.detach()
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
	if f := windowFrame(fd); f != nil {
		link.send(f)
	}

	// What ends the session: the stream (job ended, taken over, server lost), or this
	// terminal going away. shown says whether the stream brought any output.
	streamEnd := make(chan error, 1)
	var shown atomic.Bool
	readStream := func(conn *websocket.Conn) {
		for {
			_, msg, err := conn.Read(ctx)
			if err != nil {
				streamEnd <- err
				return
			}
			if len(msg) > 1 && msg[0] == api.FrameData {
				shown.Store(true)
				if _, err := cfg.Stdout.Write(msg[1:]); err != nil {
					streamEnd <- &terminalGone{err}
					return
				}
			}
		}
	}
	go readStream(conn)
	inEnd := make(chan error, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := in.Read(buf)
			if n > 0 {
				link.send(append([]byte{api.FrameData}, buf[:n]...))
			}
			if err != nil {
				inEnd <- err
				return
			}
		}
	}()

	// While the server is lost, reattach looks for it; stopReattach ends the looking
	// when the session ends first.
	var (
		back         <-chan reattached
		stopReattach = func() {}
	)
	defer func() { stopReattach() }()
	hangUp := func(why string) int {
		stopReattach()
		unraw()
		fmt.Fprintf(cfg.Stderr, "\r\nrota: %s; cancelling job %d\n", why, id)
		link.close()
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
			if back != nil {
				continue // the server is lost: reattach is asking it
			}
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
					link.send(f)
				}
			case syscall.SIGHUP:
				return hangUp("the terminal hung up")
			default:
				name := strings.TrimPrefix(unix.SignalName(sig.(syscall.Signal)), "SIG")
				link.send(append([]byte{api.FrameSignal}, name...))
			}
		case err := <-inEnd:
			return hangUp(fmt.Sprintf("the terminal went away (%v)", err))
		case r := <-back:
			back, stopReattach = nil, func() {}
			if r.err != nil {
				unraw()
				var ae *APIError
				if errors.As(r.err, &ae) && ae.StatusCode == http.StatusConflict {
					if d, gerr := c.GetJob(ctx, id); gerr == nil && d.Job.State.Terminal() {
						fmt.Fprintf(cfg.Stderr, "\r\nrota: job %d ended while the server was away; rota logs %d has its output\n", id, id)
						return jobExit(cfg, d.Job)
					}
				}
				fmt.Fprintf(cfg.Stderr, "\r\nrota: could not reach job %d's terminal again (%v); rota attach %d reconnects before the server cancels it\n", id, r.err, id)
				return ExitError
			}
			c.BaseURL = r.base
			fmt.Fprintf(cfg.Stderr, "\r\nrota: reconnected to job %d; its recent output follows\r\n", id)
			link.attach(r.conn, windowFrame(fd))
			go readStream(r.conn)
		case err := <-streamEnd:
			var gone *terminalGone
			if errors.As(err, &gone) {
				return hangUp(fmt.Sprintf("the terminal went away (%v)", gone.err))
			}
			if streamLost(err) {
				link.detach()
				fmt.Fprintf(cfg.Stderr, "\r\nrota: lost the server%s; trying again for up to %s, and job %d keeps running\r\n",
					lostWhy(err), strings.TrimSuffix(followRetry.String(), "0s"), id)
				rctx, cancel := context.WithCancel(ctx)
				back, stopReattach = reattach(rctx, c, id), cancel
				continue
			}
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

// terminalGone is this terminal failing under the output the stream brought.
type terminalGone struct{ err error }

func (e *terminalGone) Error() string { return e.err.Error() }

// streamLost reports whether a terminal's stream ended because the server went away (it
// stopped, its connection broke, a proxy lost it) rather than because the server closed
// it with a word of its own: the job's terminal closed, another terminal took over, a
// frame was refused.
func streamLost(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	switch websocket.CloseStatus(err) {
	case -1, websocket.StatusGoingAway, websocket.StatusAbnormalClosure, websocket.StatusInternalError,
		websocket.StatusServiceRestart, websocket.StatusTryAgainLater, websocket.StatusBadGateway:
		return true
	}
	return false
}

// lostWhy is what a lost stream's error adds to the news: nothing where the connection
// just closed, which is all a stopped server says.
func lostWhy(err error) string {
	if websocket.CloseStatus(err) == -1 && errors.Is(err, io.EOF) {
		return ""
	}
	return " (" + err.Error() + ")"
}

// reattached is reattach's outcome: a new stream and the server that opened it, or why
// there is none.
type reattached struct {
	conn *websocket.Conn
	base string
	err  error
}

// reattach opens job id's terminal stream again, asking every emptyPause for up to
// followRetry while the server cannot be reached or answers that it cannot serve yet (a
// restart, an election): with several servers it asks each in turn, the leader a standby
// names first. Any other refusal (the job ended, the caller may not attach) ends it. It
// asks through a copy of c, whose BaseURL it moves: c stays the caller's.
func reattach(ctx context.Context, c *Client, id int64) <-chan reattached {
	out := make(chan reattached, 1)
	c = new(*c)
	go func() {
		deadline := time.Now().Add(followRetry)
		for {
			select {
			case <-ctx.Done():
				out <- reattached{err: ctx.Err()}
				return
			case <-time.After(emptyPause):
			}
			conn, err := c.Attach(ctx, id)
			if err == nil && ctx.Err() != nil {
				conn.CloseNow() // the session ended meanwhile
				err = ctx.Err()
			}
			if err == nil {
				out <- reattached{conn: conn, base: c.BaseURL}
				return
			}
			if ctx.Err() != nil || !serverLost(err) || time.Now().After(deadline) {
				out <- reattached{err: err}
				return
			}
			c.moveOn(err)
		}
	}()
	return out
}

// moveOn points a Client of several servers at the one to try after err from the
// current one: the leader a standby's answer named, if it is one of them, else the next.
func (c *Client) moveOn(err error) {
	if len(c.Servers) < 2 {
		return
	}
	if l := c.leaderNamed(err); l != "" && l != c.BaseURL {
		c.BaseURL = l
		return
	}
	i := slices.Index(c.Servers, strings.TrimRight(c.BaseURL, "/"))
	c.BaseURL = c.Servers[(i+1)%len(c.Servers)]
}

// termLink is an attached terminal's way to its stream, which a lost server replaces.
// While there is none, what the terminal sends is held: its keys and signals, up to
// attachHeld bytes (as the server holds keys for an agent that is away), and its latest
// window size; they go, the size first, once a stream is open again.
type termLink struct {
	ctx context.Context

	mu   sync.Mutex // guards the fields below, and orders the writes
	conn *websocket.Conn
	held [][]byte
	n    int    // bytes in held
	size []byte // a resize frame, held
}

// attachHeld is how much a terminal's keys and signals termLink holds while no stream is
// open.
const attachHeld = 4 << 10

// send writes frame to the stream, or holds it while there is none. A frame whose write
// fails is held too: the stream is breaking, and the next one takes it.
func (l *termLink) send(frame []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil && l.write(frame) == nil {
		return
	}
	l.hold(frame)
}

// write writes frame to the stream. Callers hold l.mu.
func (l *termLink) write(frame []byte) error {
	wctx, cancel := context.WithTimeout(l.ctx, 10*time.Second)
	defer cancel()
	return l.conn.Write(wctx, websocket.MessageBinary, frame)
}

// hold keeps frame for the next stream. Callers hold l.mu.
func (l *termLink) hold(frame []byte) {
	switch {
	case len(frame) > 0 && frame[0] == api.FrameResize:
		l.size = frame
	case l.n+len(frame) <= attachHeld:
		l.held = append(l.held, frame)
		l.n += len(frame)
	}
}

// detach closes the stream, after which frames are held.
func (l *termLink) detach() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		l.conn.CloseNow()
		l.conn = nil
	}
}

// attach makes conn the stream and sends it what was held, with the window's size now
// (a resize frame; nil: the one held, if any) first.
func (l *termLink) attach(conn *websocket.Conn, size []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.conn = conn
	if size != nil {
		l.size = size
	}
	held := l.held
	if l.size != nil {
		held = append([][]byte{l.size}, held...)
	}
	l.held, l.n, l.size = nil, 0, nil
	for i, f := range held {
		if l.write(f) != nil {
			for _, f := range held[i:] {
				l.hold(f)
			}
			return
		}
	}
}

// close ends the stream with a normal close, as a terminal that is done.
func (l *termLink) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		l.conn.Close(websocket.StatusNormalClosure, "terminal gone")
		l.conn = nil
	}
}
