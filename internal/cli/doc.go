// Package cli holds rota's client verbs — submit, queue, show, cancel, logs, nodes — and
// Client, the HTTP client of the REST API they share with end-to-end tests.
//
// Every verb parses its own flags (plus --server and -o table|json, accepted by all), talks
// to the server only through api's wire types, and returns an exit code: ExitOK, ExitError
// when the server refused, failed or could not be reached, ExitUsage for bad arguments (in
// which case nothing was sent). Human output is aligned tables; -o json prints the API's
// objects indented: submit and cancel the job (cancel of several IDs an array), queue an
// api.JobList with every page, show an api.JobDetail, nodes an api.NodeList. logs always
// prints the raw log bytes.
//
// The package must not import the server, store or cluster: it knows the server only by
// its HTTP API. Everything it reads from the outside world (clock, environment, working
// directory, HTTP client) comes through Config, so output can be tested byte for byte.
package cli
