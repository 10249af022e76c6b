// Package cli holds rota's client verbs — submit, queue, show, why, cancel, hold, release,
// logs, nodes, login, logout, whoami, and admin with its commands for users and tokens,
// join tokens, the audit trail, queues, teams, node drains and removal, reservations and
// config files — and Client, the HTTP client of the REST API they share with end-to-end
// tests and `rota history export` (NewClientFromEnv).
//
// Every verb parses its own flags (plus --server, --token, --ca-fingerprint and -o
// table|json, accepted by all), talks to the server only through api's wire types, and
// returns an exit code: ExitOK, ExitError when the server refused, failed or could not be
// reached, ExitUsage for bad arguments (in which case nothing was sent). Human output is
// aligned tables; -o json prints the API's objects indented: submit the job (of an array,
// the first), cancel, hold and release the job (of an array an api.JobList; of several
// IDs an array of those), queue an api.JobList with every page, show an api.JobDetail (of an array's ID an
// api.JobList), why
// an api.Why, nodes an api.NodeList, login and whoami an api.Whoami; admin user list an
// api.UserList, token list an api.TokenList, join-token list {"join_tokens": [...]},
// audit an api.EventList, queue list an api.QueueList, team list an api.TeamList,
// reservations an api.ReservationList, user add, queue set and team set the object as
// stored, token create an api.NewToken, join-token an api.NewJoinToken, drain and resume
// the node (of several an array), reserve the reservation, apply the api.Config as
// applied. The deleting, removing and revoking commands print nothing under -o json:
// their exit code says how it went. logs always prints the raw log bytes.
//
// Which server a verb talks to, and with which token and CA pin, is resolved once (see
// Config.resolve): flags, then the environment, then the login `rota login` saved, then a
// local server's Unix socket, then DefaultServer. A token never leaves for plain http
// beyond the loopback, and a saved token goes to its saved server alone. Refusals (401,
// 403, 429) read as one sentence saying what to do.
//
// The package must not import the server, store or cluster: it knows the server only by
// its HTTP API, and of rota's packages uses only api and auth's client-side primitives.
// Everything it reads from the outside world (clock, environment, configuration
// directory, standard input, working directory, HTTP client) comes through Config, so
// output can be tested byte for byte.
package cli
