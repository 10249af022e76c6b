package server

import (
	"net/http"

	"github.com/rotahq/rota/internal/api"
)

// DefaultQueue is where a job goes when it names none.
const DefaultQueue = "train"

const (
	hour = 3600
	day  = 24 * hour
)

// DefaultQueues are the queues a new cluster starts with (DESIGN.md, "Domain model").
// Tiers leave gaps so admins can slot their own queues in between.
func DefaultQueues() []api.Queue {
	return []api.Queue{
		{Name: "batch", Tier: 20, Preemptible: true, DefaultTimeLimit: 4 * hour, MaxTimeLimit: 3 * day, Grace: 60},
		{Name: "inference", Tier: 70, Preemptible: false, DefaultTimeLimit: 0, MaxTimeLimit: 0, Grace: 30},
		{Name: "interactive", Tier: 60, Preemptible: false, DefaultTimeLimit: hour, MaxTimeLimit: 8 * hour, Grace: 30},
		{Name: "maintenance", Tier: 100, Preemptible: false, DefaultTimeLimit: 4 * hour, MaxTimeLimit: day, Grace: 30},
		{Name: "train", Tier: 40, Preemptible: false, DefaultTimeLimit: day, MaxTimeLimit: 7 * day, Grace: 120},
		{Name: "urgent", Tier: 80, Preemptible: false, DefaultTimeLimit: day, MaxTimeLimit: 3 * day, Grace: 120},
	}
}

func (s *Server) handleQueues(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	qs := s.state.Queues()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, api.QueueList{Queues: qs})
}
