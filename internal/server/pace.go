package server

import (
	"math"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// Every agent reports at the interval the server's last answer named (heartbeat_s). At
// 10,000 nodes a 2 s interval is 5,000 heartbeats a second, each a TLS request the server
// reads, decodes, records and answers: most of two cores on a small server, taken from
// submits and queries, to learn each second what the agents would tell at once anyway (a
// task that ends is reported at once, and new work reaches an agent through its watch).
// So, as Nomad paces its clients' heartbeats, the server names a longer interval as the
// cluster grows, to keep all heartbeats together under Config.MaxHeartbeatsPerSecond:
// the interval is the larger of HeartbeatInterval and nodes ÷ that rate. The silence
// after which a node is not ready, and lost, grows with the interval each node was told
// (silenceLimits), so a longer interval never makes a live node look silent.

// defaultMaxHeartbeatsPerSecond keeps heartbeats to about a sixth of a core (about 150 µs
// of the server's CPU each): the 2 s interval up to 2,000 nodes, 10 s at 10,000.
const defaultMaxHeartbeatsPerSecond = 1000

// beatInterval is the interval the server names to every agent of a cluster of nodes
// nodes: base, or longer where nodes heartbeats at base would be more than rate a second,
// rounded up to a tenth of a second. A rate of 0 or less sets no bound.
func beatInterval(base time.Duration, rate float64, nodes int) time.Duration {
	if rate <= 0 {
		return base
	}
	need := time.Duration(math.Ceil(float64(nodes)/rate*10)) * (time.Second / 10)
	return max(base, need)
}

// paceHeartbeats sets the interval answers name from the nodes that may report: those
// not lost. It logs the interval when it has moved by a second or more since it last
// did, or is back at the base: a cluster that grows by a node at a time moves it by a
// tenth of a second at a time. Callers hold s.mu.
func (s *Server) paceHeartbeats(nodes int) {
	s.beatEvery = beatInterval(s.cfg.HeartbeatInterval, s.cfg.MaxHeartbeatsPerSecond, nodes)
	moved := s.beatEvery - s.beatLogged
	if moved.Abs() < time.Second && (s.beatEvery != s.cfg.HeartbeatInterval || moved == 0) {
		return
	}
	s.beatLogged = s.beatEvery
	notReady, lost := s.silencesAt(s.beatEvery)
	s.log.Info("heartbeat interval", "every", s.beatEvery, "nodes", nodes, "max_per_second", s.cfg.MaxHeartbeatsPerSecond,
		"not_ready_after", notReady, "lost_after", lost)
}

// reportingNodes counts the nodes not lost. Callers hold s.mu.
func (s *Server) reportingNodes() int {
	n := 0
	s.state.NodesWhere(func(node *api.Node) bool {
		if node.State != api.NodeLost {
			n++
		}
		return false
	})
	return n
}

// toldInterval notes the interval node name's answer names, and returns it. Callers
// hold s.mu.
func (s *Server) toldInterval(name string) time.Duration {
	if s.told[name] != s.beatEvery {
		if s.told == nil {
			s.told = map[string]time.Duration{}
		}
		s.told[name] = s.beatEvery
	}
	return s.beatEvery
}

// silenceLimits is how long node name may be silent before it takes no new work
// (notReady) and before its jobs are given up (lost): silencesAt the interval now named
// or the one its last answer named, whichever is longer. Callers hold s.mu.
func (s *Server) silenceLimits(name string) (notReady, lost time.Duration) {
	return s.silencesAt(max(s.beatEvery, s.told[name]))
}

// silencesAt is the not-ready and lost silences of a node told to report every every.
// Both are the server's settings at HeartbeatInterval; at a longer interval, notReady
// grows in proportion (NotReadyAfter is 7.5 intervals by default) and lost by as much.
func (s *Server) silencesAt(every time.Duration) (notReady, lost time.Duration) {
	notReady, lost = s.cfg.NotReadyAfter, s.cfg.LostAfter
	if every <= s.cfg.HeartbeatInterval {
		return notReady, lost
	}
	scaled := time.Duration(float64(notReady) * (float64(every) / float64(s.cfg.HeartbeatInterval)))
	return scaled, lost + scaled - notReady
}
