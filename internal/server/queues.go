package server

import (
	"net/http"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cluster"
)

// DefaultQueue is where a job goes when it names none.
const DefaultQueue = cluster.DefaultQueue

const (
	hour = 3600
	day  = 24 * hour
)

// DefaultQueues are the queues a new cluster starts with.
func DefaultQueues() []api.Queue { return cluster.DefaultQueues() }

func (s *Server) handleQueues(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	qs := s.state.Queues()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, api.QueueList{Queues: qs})
}
