// Package auth holds rota's security primitives: API tokens and their hashes, roles and the
// Identity a request carries, the cluster's certificate authority, the TLS configurations of
// the server, the agents and the CLI, join tokens, the agent's identity files, and the Unix
// peer credentials of callers on the server's local socket.
//
// It is a library: it decides nothing about who may do what beyond ordering roles, keeps no
// state besides the files it is asked to read and write, and never logs a secret. The
// server and the agent wire it in.
//
// It must not import any rota package but internal/api and internal/atomicfile: not the
// server, store, cluster, agent or CLI. cmd/rota's TestImportDirections holds that rule. Its only dependency outside the standard library
// is golang.org/x/sys/unix, for SO_PEERCRED.
package auth
