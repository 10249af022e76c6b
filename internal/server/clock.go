package server

import (
	"fmt"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
)

// A node's clock is its own. The times an agent reports (a rank's start and end) are read
// on it, and the time limit a task carries (Task.TimeLimitEnd, ROTA_TIME_LIMIT_END) is
// kept by its supervisor against it. A node whose clock is an hour ahead would so stop
// every job of a shorter limit the moment it starts, one an hour behind would run each an
// hour past its limit, and either would put its jobs' starts and ends an hour off, and
// their GPU-hours with them.
//
// So the server measures each node's clock against its own from the time every heartbeat
// carries (Heartbeat.AgentTime): the difference, less the heartbeat's time in flight. As
// the time in flight only ever adds, the smallest difference among the last few
// heartbeats is the best reading. Where the offset is more than clockTolerance, the
// server converts: the times the node reports into its own clock, and the time limits it
// hands the node into the node's. Agents of every release send the time, so every node is
// converted, and nothing changes for a node whose clock agrees.

const (
	// clockTolerance is the offset below which a node's clock is taken to agree with the
	// server's: a heartbeat's time in flight, and NTP's errors, stay far below it.
	clockTolerance = 2 * time.Second
	// clockSamples is how many heartbeats the offset is the least of: a clock that moves
	// ahead is followed at once, one that falls behind within as many heartbeats.
	clockSamples = 8
	// clockNotable is how far the offset moves before the server says so again.
	clockNotable = time.Minute
	// clockSettle is how many heartbeats of a node are read before its offset is said:
	// one slow heartbeat of a node just come (a cluster's agents all joining at once)
	// would otherwise be said to be a clock some seconds behind.
	clockSettle = 3
)

// nodeClock is what the server knows of one node's clock: the offsets its last heartbeats
// measured (the server's time at the heartbeat less the node's), and the offset applied.
type nodeClock struct {
	samples [clockSamples]time.Duration
	n, next int
	// applied is the offset the server converts the node's times by: zero within
	// clockTolerance, else the best reading rounded to the second. told is the one the
	// log and the node's events last said.
	applied, told time.Duration
}

// observe records one heartbeat's reading and returns the offset to apply.
func (c *nodeClock) observe(d time.Duration) time.Duration {
	c.samples[c.next] = d
	c.next = (c.next + 1) % clockSamples
	c.n = min(c.n+1, clockSamples)
	best := c.samples[0]
	for _, s := range c.samples[1:c.n] {
		best = min(best, s)
	}
	c.applied = 0
	if best.Abs() >= clockTolerance {
		c.applied = best.Round(time.Second)
	}
	return c.applied
}

// observeClock takes node name's clock reading from a heartbeat: the server's time as it
// arrived less the agent's as it was sent (none where the agent sent no time). It says in
// the log and the node's events when the offset applied begins, ends, or moves by
// clockNotable, once the node's first clockSettle heartbeats have been read. It returns
// the offset to convert the heartbeat's times by. Callers hold s.mu.
func (s *Server) observeClock(b *store.Batch, name string, reading time.Duration, none bool, now time.Time) time.Duration {
	if none {
		return s.clockOffset(name)
	}
	c := s.clocks[name]
	if c == nil {
		if s.clocks == nil {
			s.clocks = map[string]*nodeClock{}
		}
		c = &nodeClock{}
		s.clocks[name] = c
	}
	off := c.observe(reading)
	if c.n < clockSettle || off == c.told || off != 0 && c.told != 0 && (off-c.told).Abs() < clockNotable {
		return off
	}
	c.told = off
	msg := fmt.Sprintf("node %s's clock agrees with the server's again", name)
	if off != 0 {
		msg = fmt.Sprintf("node %s's clock is %s; the server converts the times its agent reports and the time limits it keeps", name, clockText(off))
		s.log.Warn("a node's clock is off", "node", name, "offset", off, "note", "set it right (NTP): jobs there see the wrong time")
	} else {
		s.log.Info("a node's clock agrees with the server's again", "node", name)
	}
	b.Events = append(b.Events, api.Event{Time: now, Actor: "node:" + name, Kind: api.EventNode, Node: name, Message: msg})
	return off
}

// clockOffset is the offset node name's times are converted by (the server's clock less
// the node's). Callers hold s.mu.
func (s *Server) clockOffset(name string) time.Duration {
	if c := s.clocks[name]; c != nil {
		return c.applied
	}
	return 0
}

// clockText says a node's offset in words: "1h0m0s behind the server's".
func clockText(off time.Duration) string {
	if off > 0 {
		return off.String() + " behind the server's"
	}
	return (-off).String() + " ahead of the server's"
}

// fromNode is a time a node reported, t, in the server's clock: converted by off, and
// never before notBefore (when set) nor after now (a rank starts after it was assigned, and what a node reports
// has happened).
func fromNode(t time.Time, off time.Duration, notBefore, now time.Time) time.Time {
	t = t.Add(off)
	if t.After(now) {
		t = now
	}
	if !notBefore.IsZero() && t.Before(notBefore) {
		t = notBefore
	}
	return t
}
