package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/rotahq/rota/internal/api"
)

const logsUsage = `rota logs [-f] [--attempt N] [--rank R | --node NAME] JOB

Prints a job's combined stdout and stderr, of the latest attempt unless --attempt says
otherwise. Of a multi-node attempt it prints every rank, rank by rank, each line led by
"[rank R NODE] "; --rank or --node picks one rank, printed as it is. -f follows the log
until the attempt ends, every rank of it at once; Ctrl-C stops following. A follow that
loses the server (a restart, an upgrade) says so and goes on once it is back, for up to
2 minutes. The log is printed as raw bytes whatever -o says.`

// followWait is how long each long poll of `logs -f` lets the server hold the request.
const followWait = 30 * time.Second

// emptyPause is how long `logs -f` waits before asking again when the server answered
// at once with nothing new, as a server that ignores wait would.
const emptyPause = time.Second

func runLogs(ctx context.Context, cfg Config, args []string) int {
	fs, g := newFlagSet(cfg, "logs", logsUsage)
	follow := fs.Bool("f", false, "follow the log until the attempt ends")
	fs.BoolVar(follow, "follow", false, "same as -f")
	attempt := fs.Int("attempt", 0, "attempt `number` (default: the latest)")
	rank := fs.Int("rank", 0, "print only `rank` R of a multi-node attempt")
	node := fs.String("node", "", "print only the rank on `node` NAME")
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return cfg.usageError("logs", "want exactly one job ID, got %d arguments", len(pos))
	}
	ref, err := parseJobRef(pos[0])
	if err != nil {
		return cfg.usageError("logs", "%v", err)
	}
	if *attempt < 0 {
		return cfg.usageError("logs", "--attempt must be 1 or more, got %d", *attempt)
	}
	oneRank := isSet(fs, "rank") || *node != ""
	switch {
	case *rank < 0:
		return cfg.usageError("logs", "--rank must be 0 or more, got %d", *rank)
	case isSet(fs, "rank") && *node != "":
		return cfg.usageError("logs", "--rank and --node exclude each other")
	}

	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	id, err := c.jobID(ctx, ref)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	opts := LogOptions{Attempt: *attempt, Rank: *rank, Node: *node}
	if *follow {
		opts.Wait = followWait
	}
	var ranks []api.Placement
	n := 0
	if !oneRank {
		if ranks, n, err = logRanks(ctx, c, id, *attempt); err != nil {
			return cfg.fail(ctx, err)
		}
	}
	if len(ranks) > 1 {
		opts.Attempt = n // every rank of the one attempt, should the job be requeued meanwhile
		err = copyRanks(ctx, c, id, opts, ranks, cfg.Stdout)
	} else {
		err = copyLog(ctx, c, id, opts, cfg.Stdout)
	}
	if ctx.Err() != nil {
		return ExitOK // Ctrl-C while following is how a person stops.
	}
	if err != nil {
		return cfg.fail(ctx, err)
	}
	return ExitOK
}

// isSet reports whether the flag name was given.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// logRanks returns the ranks of the attempt whose log is wanted (0: the latest) and that
// attempt's number; no ranks for a job that has not started.
func logRanks(ctx context.Context, c *Client, id int64, attempt int) ([]api.Placement, int, error) {
	d, err := c.GetJob(ctx, id)
	if err != nil {
		return nil, attempt, err
	}
	for i := len(d.AttemptList) - 1; i >= 0; i-- {
		if a := d.AttemptList[i]; attempt == 0 || a.N == attempt {
			return a.Placements, a.N, nil
		}
	}
	return nil, attempt, nil
}

// copyLog copies one rank's log from opts.Offset to w; with opts.Wait set it follows the
// log until the attempt ends or ctx is done. Without it, it copies what the log holds
// now: an answer carries a bounded piece (2 MiB), so a longer log takes several.
//
// A follow outlives a server it loses for up to followRetry (a restart, an upgrade, a
// failover): it asks again every emptyPause, saying so once through c.Waiting, and goes
// on from the offset it reached, so no line is lost or printed twice.
func copyLog(ctx context.Context, c *Client, id int64, opts LogOptions, w io.Writer) error {
	var lost time.Time // when the server was lost, while it is
	fullSaid := false  // whether the reader was told the server keeps no more of the log
	heldSaid := false  // whether the reader was told the server's disk holds the rest back
	for {
		chunk, err := c.Logs(ctx, id, opts, w)
		opts.Offset += chunk.N
		// Stay on the attempt we started with: should the job be requeued, the offset
		// would mean nothing in the next attempt's log.
		if opts.Attempt == 0 && chunk.Attempt > 0 {
			opts.Attempt = chunk.Attempt
		}
		if ctx.Err() != nil {
			return err
		}
		if err != nil && opts.Wait > 0 && serverLost(err) {
			if lost.IsZero() {
				lost = time.Now()
				if c.Waiting != nil {
					c.Waiting(emptyPause, fmt.Sprintf("following job %d: %v", id, err))
				}
			}
			if time.Since(lost) < followRetry {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(emptyPause):
				}
				continue
			}
			return fmt.Errorf("gave up following after %s without the server: %w", followRetry, err)
		}
		if err != nil {
			return err
		}
		lost = time.Time{}
		if chunk.Done && chunk.Incomplete != "" {
			return fmt.Errorf("the log of job %d is incomplete: %s", id, chunk.Incomplete)
		}
		if chunk.Done {
			return nil
		}
		if chunk.Full != "" && !fullSaid && chunk.Size >= 0 && opts.Offset >= chunk.Size && c.Notice != nil {
			// Said once the follow has caught up with the server's copy, after the
			// output, which is all that will come until the task ends.
			fullSaid = true
			c.Notice(fmt.Sprintf("job %d's log: %s", id, chunk.Full))
		}
		if chunk.Held == "" {
			heldSaid = false
		} else if !heldSaid && chunk.Size >= 0 && opts.Offset >= chunk.Size && c.Notice != nil {
			// Said once caught up, and again should the disk fill once more.
			heldSaid = true
			c.Notice(fmt.Sprintf("job %d's log: %s", id, chunk.Held))
		}
		if opts.Wait == 0 && (chunk.N == 0 || chunk.Size < 0 || opts.Offset >= chunk.Size) {
			return nil // all there is now
		}
		if chunk.N == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(emptyPause):
			}
		}
	}
}

// followRetry is how long a follow goes on asking a server it has lost.
const followRetry = 2 * time.Minute

// serverLost reports whether err says the server could not be reached or answer, rather
// than that it refused the request: a follow asks again after the one, not the other.
func serverLost(err error) bool {
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		switch apiErr.StatusCode {
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
		return false
	}
	return !errors.Is(err, context.Canceled)
}

// copyRanks copies the log of every rank to w, each line led by its rank and node: rank
// by rank, or with opts.Wait set all at once as the lines come, until every rank is done.
// The first rank that fails stops the others.
func copyRanks(ctx context.Context, c *Client, id int64, opts LogOptions, ranks []api.Placement, w io.Writer) error {
	out := &lockedWriter{w: w}
	copyRank := func(ctx context.Context, r int) error {
		pw := &linePrefixer{out: out, prefix: fmt.Sprintf("[rank %d %s] ", r, ranks[r].Node)}
		o := opts
		o.Rank, o.Node = r, ""
		err := copyLog(ctx, c, id, o, pw)
		if ferr := pw.Flush(); err == nil {
			err = ferr
		}
		if err != nil {
			return fmt.Errorf("rank %d on %s: %w", r, ranks[r].Node, err)
		}
		return nil
	}
	if opts.Wait == 0 {
		for r := range ranks {
			if err := copyRank(ctx, r); err != nil {
				return err
			}
		}
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(ranks))
	for r := range ranks {
		go func() {
			err := copyRank(ctx, r)
			errs <- err // before cancel, so that the cause is read before what it caused
			if err != nil {
				cancel()
			}
		}()
	}
	var first error
	for range ranks {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// lockedWriter lets several goroutines write to w, one Write at a time.
type lockedWriter struct {
	mu sync.Mutex // guards w
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// maxPartialLine bounds the unfinished line a linePrefixer holds, so that output without
// newlines (a progress bar redrawn with \r) still comes out.
const maxPartialLine = 64 << 10

// linePrefixer writes whole lines to out, each led by prefix, and the lines of one Write
// in one Write of out: lines written through different linePrefixers to one lockedWriter
// never mix. It holds an unfinished line until its end arrives or Flush.
type linePrefixer struct {
	out     io.Writer
	prefix  string
	partial []byte
}

func (p *linePrefixer) Write(b []byte) (int, error) {
	p.partial = append(p.partial, b...)
	end := bytes.LastIndexByte(p.partial, '\n') + 1
	if end == 0 && len(p.partial) < maxPartialLine {
		return len(b), nil
	}
	if end == 0 {
		end = len(p.partial)
	}
	var buf bytes.Buffer
	for rest := p.partial[:end]; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line = rest[:i+1]
		}
		buf.WriteString(p.prefix)
		buf.Write(line)
		rest = rest[len(line):]
	}
	if buf.Bytes()[buf.Len()-1] != '\n' {
		buf.WriteByte('\n')
	}
	p.partial = append(p.partial[:0], p.partial[end:]...)
	if _, err := p.out.Write(buf.Bytes()); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Flush writes the unfinished line, ended with a newline so that the next line of
// another rank starts on a line of its own.
func (p *linePrefixer) Flush() error {
	if len(p.partial) == 0 {
		return nil
	}
	line := append([]byte(p.prefix), p.partial...)
	p.partial = p.partial[:0]
	_, err := p.out.Write(append(line, '\n'))
	return err
}
