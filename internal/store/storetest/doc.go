// Package storetest helps tests that need a real database: it starts a throwaway
// PostgreSQL server, so that the store's conformance suite and the server's end-to-end
// tests run against PostgreSQL the same way. It is imported only by tests.
package storetest
