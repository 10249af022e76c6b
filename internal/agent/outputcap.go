package agent

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// A job's stdout and stderr are a pipe that its supervisor reads into output.log, not
// the file itself: so the supervisor decides how much of the output the node keeps. A
// job that prints without end (a runaway loop, `yes`) would otherwise fill the disk that
// holds the node's data dir, where every attempt records its end, and on a `rota up`
// machine the server's store too. Past the attempt's limit the supervisor writes one line
// that says so and reads the rest into nothing: the job runs on, never blocked on a full
// pipe. A disk that fills anyway (other files) costs output, not the job: the supervisor
// drops what it cannot write, goes on reading, and says in the log how much it dropped
// once it can write again.

// outputDrainWait is how long, once every process of the attempt is gone, the supervisor
// waits for the rest of the output: a process that escaped the attempt may still hold the
// pipe open, and the attempt's end is not held for it.
const outputDrainWait = 2 * time.Second

// cappedOutput is the job's output as it reaches output.log: at most limit bytes in the
// file (0: no limit), counting what the file already held and the line that says the
// rest was dropped, which ends a cut log. So a node whose limit is the server's ships a
// log the server keeps whole, its last line saying why it ends there. One goroutine
// writes to it.
type cappedOutput struct {
	f       *os.File
	limit   int64
	notice  []byte
	size    int64 // the file's size
	full    bool  // past the limit: the rest is dropped
	failing bool  // the last write failed; logged once until one succeeds
	// dropped counts the bytes lost to failed writes since the log last said so, and
	// lastErr is why: the next write that succeeds begins with a line saying it.
	dropped int64
	lastErr error
	logger  *slog.Logger
}

func newCappedOutput(f *os.File, limit int64, logger *slog.Logger) *cappedOutput {
	c := &cappedOutput{f: f, limit: limit, logger: logger,
		notice: fmt.Appendf(nil, "\nrota: this attempt's output passed %s, the most this node keeps of one attempt's log "+
			"(rota agent --max-log-size); the rest was dropped, and the job runs on\n", api.SizeText(limit))}
	if fi, err := f.Stat(); err == nil {
		c.size = fi.Size()
	}
	return c
}

// Write keeps what fits under the limit and drops the rest. It never fails: the job's
// output is read on whatever becomes of the file.
func (c *cappedOutput) Write(p []byte) (int, error) {
	if c.full {
		return len(p), nil
	}
	gap := c.gapLine()
	room := c.limit - int64(len(c.notice)) - int64(len(gap)) - c.size // for output, the notice kept back
	keep := p
	if c.limit > 0 && int64(len(p)) > room {
		keep = p[:max(0, room)]
	}
	if len(keep) > 0 {
		c.write(gap, keep)
	}
	if len(keep) < len(p) {
		c.full = true
		c.write(nil, c.notice[:min(int64(len(c.notice)), max(0, c.limit-c.size))])
		c.logger.Warn("the job's output passed the node's log limit; the rest is dropped", "limit", c.limit)
	}
	return len(p), nil
}

// write writes the line about output dropped before, if any, then p; what it cannot
// write is counted as dropped.
func (c *cappedOutput) write(gap, p []byte) {
	if len(gap) > 0 {
		n, err := c.f.Write(gap)
		c.size += int64(n)
		if err != nil {
			c.fail(err, len(p))
			return
		}
		c.dropped = 0
	}
	n, err := c.f.Write(p)
	c.size += int64(n)
	switch {
	case err != nil:
		c.fail(err, len(p)-n)
	case c.failing:
		c.failing = false
		c.logger.Info("writing the job's output to its log again")
	}
}

func (c *cappedOutput) fail(err error, lost int) {
	c.dropped += int64(lost)
	c.lastErr = err
	if !c.failing {
		c.failing = true
		c.logger.Error("cannot write the job's output to its log; dropping it until a write succeeds", "err", err)
	}
}

// gapLine says how much output was dropped since the log last said so, and why; nil
// when none was.
func (c *cappedOutput) gapLine() []byte {
	if c.dropped == 0 {
		return nil
	}
	return fmt.Appendf(nil, "\nrota: %d bytes of the job's output were dropped here: the log could not be written (%v)\n", c.dropped, c.lastErr)
}

// copyOutput reads the job's output from r into w until every writer has closed the pipe
// (or r is closed), then closes done.
func copyOutput(r *os.File, w *cappedOutput, done chan<- struct{}) {
	defer close(done)
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			w.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// drainOutput waits for the job's output to be all in its log, once the attempt's
// processes are gone: up to outputDrainWait for a process outside the attempt that
// still holds the pipe, after which the log ends where it is.
func (s *supervisor) drainOutput() {
	if s.outputDone == nil {
		return
	}
	select {
	case <-s.outputDone:
	case <-time.After(outputDrainWait):
		s.logger.Warn("a process outside the attempt holds its output open; the log ends here")
	}
	// Closing the read end ends a copy still blocked on it.
	s.outputPipe.Close()
	<-s.outputDone
}
