package server

import (
	"net/http"

	"github.com/rotahq/rota/internal/api"
)

// Accounting routes (issue 10): placeholders the accounting work replaces.

func (s *Server) handleUsage(w http.ResponseWriter, r *http.Request)       { notBuilt(w) }
func (s *Server) handlePrices(w http.ResponseWriter, r *http.Request)      { notBuilt(w) }
func (s *Server) handlePutPrice(w http.ResponseWriter, r *http.Request)    { notBuilt(w) }
func (s *Server) handleDeletePrice(w http.ResponseWriter, r *http.Request) { notBuilt(w) }

// notBuilt answers a route whose work is not done yet.
func notBuilt(w http.ResponseWriter) {
	writeError(w, http.StatusNotImplemented, &api.Error{Code: api.CodeInternal, Message: "not built yet"})
}
