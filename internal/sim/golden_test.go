package sim

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// goldenRuns are rota sim command lines whose output testdata/golden holds byte for byte.
var goldenRuns = []struct {
	name string
	args string
}{
	{"philly_excerpt.txt", "--trace testdata/philly_excerpt.csv --format philly"},
	{"alibaba_excerpt.json", "--trace testdata/alibaba_pods.csv --format alibaba-gpu2023 --cluster testdata/alibaba_nodes.csv -o json"},
	{"alibaba_fill.txt", "--trace testdata/alibaba_pods.csv --format alibaba-gpu2023 --cluster testdata/alibaba_nodes.csv --fill 1.3 --seed 42"},
	{"philly_failures.csv", "--trace testdata/philly_excerpt.csv --format philly --cluster testdata/cluster.yaml --node-mtbf 24h --node-repair 2h --seed 7 -o csv"},
	{"fifo_sjf.txt", "--trace testdata/scenarios/fifo_sjf.csv --format rota --cluster testdata/scenarios/one_gpu.yaml --policy fifo,sjf"},
	{"backfill.txt", "--trace testdata/scenarios/backfill.csv --format rota --cluster testdata/scenarios/four_gpus.yaml --policy fifo,fifo+greedy"},
	{"preempt.txt", "--trace testdata/scenarios/preempt.csv --format rota --cluster testdata/scenarios/preempt.yaml --policy default --checkpoint 40m"},
}

func runMain(t *testing.T, args string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(context.Background(), strings.Fields(args), &out, &errOut)
	return out.String(), errOut.String(), code
}

// TestGolden holds rota sim's output fixed: the same trace, flags and seed must give
// byte-identical output. Run with -update after a deliberate change and review the diff.
func TestGolden(t *testing.T) {
	for _, g := range goldenRuns {
		t.Run(g.name, func(t *testing.T) {
			out, stderr, code := runMain(t, g.args)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			path := filepath.Join("testdata", "golden", g.name)
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if out != string(want) {
				t.Errorf("output differs from %s (go test -update rewrites it):\n%s", path, out)
			}
		})
	}
}

// TestDeterminism runs the same replay twice, with the policies concurrently and one at a
// time, and wants the same bytes each time.
func TestDeterminism(t *testing.T) {
	args := "--trace testdata/philly_excerpt.csv --format philly --cluster testdata/cluster.yaml --node-mtbf 12h --seed 3 -o json"
	first, _, _ := runMain(t, args)
	second, _, _ := runMain(t, args)
	if first != second {
		t.Fatal("two runs of the same command differ")
	}
	var singles []string
	for _, p := range DefaultPolicies {
		out, _, _ := runMain(t, args+" --policy "+p)
		singles = append(singles, out)
	}
	for i, p := range DefaultPolicies {
		key := `"policy": "` + p + `"`
		if !strings.Contains(first, key) || !strings.Contains(singles[i], key) {
			t.Fatalf("policy %s missing from output", p)
		}
		if policyBlock(first, p) != policyBlock(singles[i], p) {
			t.Errorf("policy %s alone gives a different result than side by side", p)
		}
	}
	other, _, _ := runMain(t, strings.Replace(args, "--seed 3", "--seed 4", 1))
	if other == first {
		t.Error("another seed gave the same node failures")
	}
}

// policyBlock returns the JSON metrics object of one policy.
func policyBlock(out, policy string) string {
	i := strings.Index(out, `"policy": "`+policy+`"`)
	if i < 0 {
		return ""
	}
	rest := out[i:]
	j := strings.Index(rest, "}")
	return rest[:j]
}
