package sched

import (
	"testing"

	"github.com/rotahq/rota/internal/fuzztest"
)

// TestFuzzMutations is the bounded fuzz run of the default tests: FuzzSchedule's body on
// inputs the fixed-seed mutator derives from its seeds. scripts/fuzz runs the fuzzing
// engine for longer.
func TestFuzzMutations(t *testing.T) {
	for _, in := range fuzztest.Mutations(scheduleSeeds, []string{"\x00\x00\x00\x00", "\x01\x01\x01", "\xff\xff", "\x05\x05\x05\x05"}, 100) {
		checkSchedule(t, []byte(in))
	}
}
