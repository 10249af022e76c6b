package cli

import (
	"context"
	"time"
)

const logsUsage = `rota logs [-f] [--attempt N] JOB

Prints a job's combined stdout and stderr, of the latest attempt unless --attempt says
otherwise. -f follows the log until the attempt ends; Ctrl-C stops following. The log is
printed as raw bytes whatever -o says.`

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
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return cfg.usageError("logs", "want exactly one job ID, got %d arguments", len(pos))
	}
	id, err := parseJobID(pos[0])
	if err != nil {
		return cfg.usageError("logs", "%v", err)
	}
	if *attempt < 0 {
		return cfg.usageError("logs", "--attempt must be 1 or more, got %d", *attempt)
	}

	c := cfg.client(g)
	opts := LogOptions{Attempt: *attempt}
	if *follow {
		opts.Wait = followWait
	}
	for {
		chunk, err := c.Logs(ctx, id, opts, cfg.Stdout)
		opts.Offset += chunk.N
		if ctx.Err() != nil {
			return ExitOK // Ctrl-C while following is how a person stops.
		}
		if err != nil {
			return cfg.fail(ctx, err)
		}
		if !*follow || chunk.Done {
			return ExitOK
		}
		// Stay on the attempt we started with: should the job be requeued, the offset
		// would mean nothing in the next attempt's log.
		if opts.Attempt == 0 && chunk.Attempt > 0 {
			opts.Attempt = chunk.Attempt
		}
		if chunk.N == 0 {
			select {
			case <-ctx.Done():
				return ExitOK
			case <-time.After(emptyPause):
			}
		}
	}
}
