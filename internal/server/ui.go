package server

import "net/http"

// The web UI (issue 10): placeholders the web UI work replaces.

// mountUI serves the web UI at /.
func (s *Server) mountUI(mux *http.ServeMux) {}

func (s *Server) handleUILink(w http.ResponseWriter, r *http.Request)    { notBuilt(w) }
func (s *Server) handleUISession(w http.ResponseWriter, r *http.Request) { notBuilt(w) }
