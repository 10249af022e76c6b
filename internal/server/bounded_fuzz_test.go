package server

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/rotahq/rota/internal/fuzztest"
)

// TestFuzzMutations is the bounded fuzz run of the default tests: each fuzz target's body
// on inputs the fixed-seed mutators derive from its seeds. scripts/fuzz runs the fuzzing
// engine for longer.
func TestFuzzMutations(t *testing.T) {
	t.Run("ParseArray", func(t *testing.T) {
		for _, in := range fuzztest.Mutations(arraySeeds, []string{"-", ",", ":", "%", "999999", "1000000"}, 2000) {
			checkParseArray(t, in)
		}
	})
	t.Run("ValidateSpec", func(t *testing.T) {
		for _, in := range append(fuzztest.Mutations(specSeeds, specTokens, 1500), specMutations(1500)...) {
			checkValidateSpec(t, []byte(in))
		}
	})
	t.Run("ValidateHeartbeat", func(t *testing.T) {
		for _, in := range fuzztest.Mutations(heartbeatSeeds, heartbeatTokens, 3000) {
			checkValidateHeartbeat(t, []byte(in))
		}
	})
	t.Run("TopQuery", func(t *testing.T) {
		target := &topTarget{}
		defer target.close()
		for _, in := range fuzztest.Mutations(topQuerySeeds, []string{"nodes=", "jobs=", "all", "&", "-", "0", "100", "101", "%"}, 600) {
			target.check(t, in)
		}
	})
	t.Run("NodeList", func(t *testing.T) {
		target := &nodeListTarget{}
		defer target.close()
		for _, in := range fuzztest.Mutations(nodeQuerySeeds, []string{"limit=", "after=", "before=", "rack-", "node-", "&", "a", "z", "1", "%", ",", "true", "jobs=true", "state=READY", "problems=true"}, 600) {
			target.check(t, in)
		}
	})
	t.Run("JobList", func(t *testing.T) {
		target := &jobListTarget{}
		defer target.close()
		for _, in := range fuzztest.Mutations(jobQuerySeeds, []string{"limit=", "after=", "before=", "arrays=collapse", "&", "1", "2", "9", "%", ",", "state=", "pending", "held", "running"}, 600) {
			target.check(t, in)
		}
	})
	t.Run("SubmitAPI", func(t *testing.T) {
		target := &submitTarget{}
		defer target.close()
		bodies := append(fuzztest.Mutations(specSeeds, specTokens, 60), specMutations(190)...)
		keys := fuzztest.Mutations(submitKeySeeds, nil, len(bodies))
		for i, in := range bodies {
			if i%4 != 0 {
				keys[i] = "" // most clients send none, and most mutated keys are refused
			}
			target.check(t, []byte(in), keys[i])
		}
	})
}

// specValues are values for each field of a submit body, valid and not, that the
// structured mutator sets: bytes flipped in JSON mostly make a syntax error, which the
// decoder refuses before validation starts.
var specValues = map[string][]any{
	"name":           {"", "ft", "-bad", strings.Repeat("n", 129)},
	"queue":          {"", "batch", "train", "inference", "interactive", "urgent", "maintenance", "nope"},
	"team":           {"", "nlp", "default", "nope"},
	"user":           {"", "admin", "bob", "bad user"},
	"command":        {[]string{"x"}, []string{"python", "t.py"}, []string{}, []string{" "}, []string{"a\x00b"}, nil},
	"workdir":        {"", "/data", "rel"},
	"env":            {map[string]string{}, map[string]string{"A": "1"}, map[string]string{"ROTA_X": "1"}},
	"gpus":           {0, 1, 2, 4, 8, 9, 12, 16, -1, 4097},
	"gpus_per_node":  {0, 1, 4, 8, 65},
	"nodes":          {0, 1, 2, 3, 513},
	"gpu_model":      {"", "A100", "h100", "nvidia", "V100"},
	"cpus":           {0, 1, 8, 64, 65, 8193, -1},
	"memory_mb":      {0, 1024, 524288, 524289, -1, int64(1) << 40},
	"time_limit_s":   {0, 60, 3600, 86400, 604801, -1},
	"signal":         {"", "term", "SIGKILL", "usr1", "SEGV"},
	"grace_s":        {0, 30, 120, 3601, -1},
	"after":          {[]int{}, []int{1}, []int{99}, []int{0}},
	"after_ok":       {[]int{}, []int{1}, []int{99}},
	"array":          {"", "0-9%2", "0-3", "1,3,5", "0-299", "0-9999", "1,1", "9-0", "0-10:3%1"},
	"hold":           {true, false},
	"nice":           {0, 5, -5, 10001},
	"restart_policy": {"", "never", "on-failure", "always", "x"},
	"retries":        {nil, 0, 3, 100, 101, -1},
}

// specMutations returns n submit bodies derived from the seeds that are JSON objects by
// setting and deleting fields, with the fixed-seed generator of mutations.
func specMutations(n int) []string {
	r := rand.New(rand.NewPCG(0xf022, 0x5bec))
	var objects []map[string]any
	for _, s := range specSeeds {
		var m map[string]any
		if json.Unmarshal([]byte(s), &m) == nil && m != nil {
			objects = append(objects, m)
		}
	}
	// The first seeds are valid requests: start from one of them most of the time, so
	// that most bodies differ from a valid one in a field or two.
	const valid = 7
	keys := make([]string, 0, len(specValues))
	for k := range specValues {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]string, 0, n)
	for len(out) < n {
		m := map[string]any{}
		base := objects[r.IntN(len(objects))]
		if r.IntN(4) > 0 {
			base = objects[r.IntN(valid)]
		}
		for k, v := range base {
			m[k] = v
		}
		for range 1 + r.IntN(3) {
			k := keys[r.IntN(len(keys))]
			if r.IntN(5) == 0 {
				delete(m, k)
				continue
			}
			vs := specValues[k]
			m[k] = vs[r.IntN(len(vs))]
		}
		data, err := json.Marshal(m)
		if err != nil {
			panic(err)
		}
		out = append(out, string(data))
	}
	return out
}
