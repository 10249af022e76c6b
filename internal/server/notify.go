package server

import (
	"net/http"

	"github.com/rotahq/rota/internal/store"
)

// Webhook notifications (issue 10): placeholders the notification work replaces.

// notifyCommitted queues the notifications a committed batch calls for. It never blocks.
// Callers hold s.mu.
func (s *Server) notifyCommitted(b *store.Batch) {}

// handlePutUserNotify sets a user's default webhooks: the user themself or an admin.
func (s *Server) handlePutUserNotify(w http.ResponseWriter, r *http.Request) { notBuilt(w) }

// notifier delivers webhooks in the background.
type notifier struct{}

func newNotifier(s *Server) *notifier { return &notifier{} }

// close stops the deliveries.
func (n *notifier) close() {}
