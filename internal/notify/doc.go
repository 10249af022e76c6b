// Package notify delivers webhooks: a bounded in-memory queue of JSON POSTs, a few
// workers that send them signed, and retries with backoff for the failures worth
// retrying.
//
// It knows nothing of jobs or of the server: a caller hands it finished bodies and the
// URLs to send them to. It must never block its caller: Enqueue drops (and counts) what
// does not fit. Nothing is persisted; what is queued when the process stops is lost.
package notify
