// Package api holds the wire types of rota's REST API and agent protocol. They are also the
// domain records the store persists. It has no behaviour beyond small helpers and imports
// nothing of rota's: the server, the agent, the store and the CLI all build against it.
package api
