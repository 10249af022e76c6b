package sim

import (
	"os"
	"testing"

	"github.com/rotahq/rota/internal/fuzztest"
)

// TestFuzzMutations is the bounded fuzz run of the default tests: each fuzz target's body
// on inputs the fixed-seed mutator derives from its seeds. scripts/fuzz runs the fuzzing
// engine for longer.
func TestFuzzMutations(t *testing.T) {
	tokens := []string{",", "\n", "\r\n", `"`, ",,", "-1", "0", "315360000000", "315360000001", "9223372036854775807",
		"1e9", "NaN", "0.0005", "2025-01-06T00:00:00Z", "2017-10-09 07:01:55", "A100", "SUCCEEDED", "\ufeff"}
	for _, tc := range []struct {
		format string
		files  []string
		n      int
		check  func(*testing.T, []byte)
	}{
		{"philly", []string{"philly_excerpt.csv", "philly_bad.csv"}, 3000, nil},
		{"alibaba-gpu2023", []string{"alibaba_pods.csv"}, 3000, nil},
		{"rota", []string{"rota_bad.csv"}, 3000, nil},
		{"alibaba-nodes", []string{"alibaba_nodes.csv"}, 2000, checkAlibabaNodes},
	} {
		t.Run(tc.format, func(t *testing.T) {
			seeds := traceSeeds[tc.format]
			for _, name := range tc.files {
				data, err := os.ReadFile("testdata/" + name)
				if err != nil {
					t.Fatal(err)
				}
				seeds = append(seeds, string(data))
			}
			check := tc.check
			if check == nil {
				check = func(t *testing.T, data []byte) { checkTrace(t, tc.format, data) }
			}
			for _, in := range fuzztest.Mutations(seeds, tokens, tc.n) {
				check(t, []byte(in))
			}
		})
	}
}
