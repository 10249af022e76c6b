package fuzztest

import (
	"math/rand/v2"
	"slices"
)

// Mutations returns n inputs derived from seeds by a fixed-seed mutator: bit flips, bytes
// and tokens inserted or overwritten, ranges cut or doubled, and splices of two seeds. The
// default `go test` runs each fuzz target's body on them, so it explores a little beyond
// the seed corpus without the fuzzing engine; scripts/fuzz runs the engine itself. The
// same seeds give the same inputs on every run, so a failure here reproduces.
func Mutations(seeds, tokens []string, n int) []string {
	r := rand.New(rand.NewPCG(0xf022, uint64(len(seeds))))
	out := make([]string, 0, n)
	for len(out) < n {
		b := []byte(seeds[r.IntN(len(seeds))])
		for range 1 + r.IntN(3) {
			b = mutate(r, b, seeds, tokens)
		}
		out = append(out, string(b))
	}
	return out
}

// interesting are bytes that end numbers, fields and lines in the formats under test.
var interesting = []byte("0 19-,:%.\n\r\"'\\{}[]#_=\x00\xff\t")

func mutate(r *rand.Rand, b []byte, seeds, tokens []string) []byte {
	switch op := r.IntN(8); {
	case op == 0 && len(b) > 0:
		b[r.IntN(len(b))] ^= 1 << r.IntN(8)
	case op == 1 && len(b) > 0:
		b[r.IntN(len(b))] = interesting[r.IntN(len(interesting))]
	case op == 2:
		b = slices.Insert(b, r.IntN(len(b)+1), interesting[r.IntN(len(interesting))])
	case op == 3 && len(tokens) > 0:
		b = slices.Insert(b, r.IntN(len(b)+1), []byte(tokens[r.IntN(len(tokens))])...)
	case op == 4 && len(b) > 0:
		i := r.IntN(len(b))
		b = slices.Delete(b, i, i+1+r.IntN(min(len(b)-i, 8)))
	case op == 5 && len(b) > 0:
		i := r.IntN(len(b))
		j := i + 1 + r.IntN(min(len(b)-i, 16))
		b = slices.Insert(b, j, slices.Clone(b[i:j])...)
	case op == 6:
		b = b[:r.IntN(len(b)+1)]
	default:
		other := seeds[r.IntN(len(seeds))]
		i := r.IntN(len(b) + 1)
		b = append(b[:i:i], other[r.IntN(len(other)+1):]...)
	}
	return b
}
