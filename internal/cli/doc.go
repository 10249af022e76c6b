// Package cli holds rota's client verbs — submit, queue, show, why, cancel, hold, release,
// logs, nodes, and admin with its commands for queues, teams, node drains, reservations
// and config files — and Client, the HTTP client of the REST API they share with
// end-to-end tests.
//
// Every verb parses its own flags (plus --server and -o table|json, accepted by all), talks
// to the server only through api's wire types, and returns an exit code: ExitOK, ExitError
// when the server refused, failed or could not be reached, ExitUsage for bad arguments (in
// which case nothing was sent). Human output is aligned tables; -o json prints the API's
// objects indented: submit the job (of an array, the first), cancel, hold and release the
// job (of several IDs an array), queue an api.JobList with every page, show an
// api.JobDetail, why an api.Why, nodes an api.NodeList; admin queue list an
// api.QueueList, team list an api.TeamList, reservations an api.ReservationList, queue
// set and team set the object as stored, drain and resume the node (of several an array),
// reserve the reservation, apply the api.Config as applied. The deleting commands print
// nothing under -o json: their exit code says how it went. logs always prints the raw log
// bytes.
//
// The package must not import the server, store or cluster: it knows the server only by
// its HTTP API. Everything it reads from the outside world (clock, environment, working
// directory, HTTP client) comes through Config, so output can be tested byte for byte.
package cli
