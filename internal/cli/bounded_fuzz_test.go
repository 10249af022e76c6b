package cli

import (
	"testing"

	"github.com/rotahq/rota/internal/fuzztest"
)

// TestFuzzMutations is the bounded fuzz run of the default tests: each fuzz target's body
// on inputs the fixed-seed mutator derives from its seeds. scripts/fuzz runs the fuzzing
// engine for longer.
func TestFuzzMutations(t *testing.T) {
	for _, tc := range []struct {
		name  string
		seeds []string
		n     int
		check func(*testing.T, string)
	}{
		{"ParseSize", sizeSeeds, 3000, checkParseSize},
		{"ParseDuration", durationSeeds, 3000, checkParseDuration},
		{"ParseArray", arraySeeds, 3000, checkParseArray},
		{"ParseJobRef", jobRefSeeds, 3000, checkParseJobRef},
		{"Printable", printableSeeds, 3000, checkPrintable},
		{"DecodeLikeEncodingJSON", decodeSeeds(), 1500, checkDecodeLikeEncodingJSON},
		{"SpecFile", specFileSeeds, 600, func(t *testing.T, s string) { checkSpecFile(t, []byte(s)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, in := range fuzztest.Mutations(tc.seeds, submitTokens, tc.n) {
				tc.check(t, in)
			}
		})
	}
	t.Run("SubmitFlags", func(t *testing.T) {
		args := fuzztest.Mutations(submitArgSeeds, submitTokens, 600)
		files := fuzztest.Mutations(specFileSeeds, submitTokens, len(args))
		for i := range args {
			if i%4 != 0 {
				files[i] = "" // most submits name no file, as most people's do
			}
			checkSubmitFlags(t, args[i], files[i])
		}
	})
}
