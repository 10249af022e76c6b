// Package fuzztest derives inputs for bounded fuzz runs in the default tests. It is
// imported only by tests: each package's fuzz targets run their bodies on Mutations of
// their seed corpora, a little beyond the seeds without the fuzzing engine, which
// scripts/fuzz runs.
package fuzztest
