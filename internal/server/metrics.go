package server

import (
	"net/http"
	"time"

	"github.com/rotahq/rota/internal/store"
)

// Prometheus metrics (issue 10): placeholders the metrics work replaces.

// instrument wraps a route's handler to measure API request latency.
func (s *Server) instrument(rt route, h http.HandlerFunc) http.HandlerFunc { return h }

// mountMetrics serves /metrics.
func (s *Server) mountMetrics(mux *http.ServeMux) {}

// observeCommit records a store commit's latency and what the batch changed (wait times of
// jobs that started). Callers hold s.mu.
func (s *Server) observeCommit(b *store.Batch, d time.Duration) {}

// observeCycle records a scheduling cycle that began at start. Callers hold s.mu.
func (s *Server) observeCycle(start time.Time) {}

// serverMetrics holds the server's collectors.
type serverMetrics struct{}

func newServerMetrics(s *Server) *serverMetrics { return &serverMetrics{} }
