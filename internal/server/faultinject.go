//go:build rotafault

package server

import (
	"net/http"
	"os"
	"time"
)

// Fault injection, built only with -tags rotafault, for the end-to-end test of a wedged
// server (cmd/rota/wedge_e2e_test.go). A binary built without the tag, as every release
// is, has neither the route nor the setting.
//
//   - POST /api/v1/debug/panic-holding-lock (admins): the handler takes the server's lock
//     and panics, as a bug between a lock and its unlock would.
//   - ROTA_FAULT_WEDGED_AFTER: Config.WedgedAfter's default, so that the test need not
//     wait the 30 s a real server waits.
//   - ROTA_FAULT_LOG_MAKE_DELAY: how long making each shipped log takes, on top of the
//     disk's own time: a disk slow to make files (cmd/rota/logslow_e2e_test.go).
func init() {
	routes = append(routes, route{"POST", "/api/v1/debug/panic-holding-lock", ruleAdmin, noBody, (*Server).handlePanicHoldingLock})
	if d, err := time.ParseDuration(os.Getenv("ROTA_FAULT_WEDGED_AFTER")); err == nil && d > 0 {
		defaultWedgedAfter = d
	}
	if d, err := time.ParseDuration(os.Getenv("ROTA_FAULT_LOG_MAKE_DELAY")); err == nil && d > 0 {
		defaultOpeningLog = func(string) { time.Sleep(d) }
	}
}

func (s *Server) handlePanicHoldingLock(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	panic("fault injection: a handler panics holding the server's lock")
}
