package sim

import (
	"strings"
	"testing"
)

func TestMainUsage(t *testing.T) {
	for _, c := range []struct {
		args   string
		code   int
		stderr string
	}{
		{"--trace x --format philly --frobnicate", 2, "flag provided but not defined: -frobnicate"},
		{"--format philly", 2, "--trace is required"},
		{"--trace x", 2, "--format is required"},
		{"--trace x --format helios", 2, `--format "helios": want one of alibaba-gpu2023, philly, rota`},
		{"--trace x --format philly -o yaml", 2, `-o "yaml": want table, json or csv`},
		{"--trace x --format philly --policy fifo,best", 2, `unknown policy "best"`},
		{"--trace x --format philly --scale 0", 2, "--scale 0: want a positive number"},
		{"--trace x --format philly --time-limit soon", 2, `time limit "soon"`},
		{"--trace x --format philly extra", 2, `unexpected argument "extra"`},
		{"--trace testdata/missing.csv --format philly", 1, "no such file"},
		{"--trace testdata/philly_no_gpus_column.csv --format philly", 1, "lacks column(s) num_gpus"},
		{"--trace testdata/scenarios/fifo_sjf.csv --format rota", 1, "a rota trace needs --cluster"},
		{"--trace testdata/philly_bad.csv --format philly --strict", 1, "bad trace row: line 3: bad timestamp"},
	} {
		_, stderr, code := runMain(t, c.args)
		if code != c.code || !strings.Contains(stderr, c.stderr) {
			t.Errorf("rota sim %s: exit %d, stderr %q; want %d and %q", c.args, code, stderr, c.code, c.stderr)
		}
	}
}

// TestMainReportsSkippedRows: a run on bad input says how many rows were loaded and lists
// the skipped ones by line with the reason.
func TestMainReportsSkippedRows(t *testing.T) {
	out, stderr, code := runMain(t, "--trace testdata/philly_bad.csv --format philly --policy fifo")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := `rota sim: testdata/philly_bad.csv: 8 rows, 2 jobs loaded, 6 skipped
  skipped line 3: bad timestamp "2017-13-09 07:01:55": want YYYY-MM-DD HH:MM:SS
  skipped line 4: bad duration: negative duration -5 s
  skipped line 5: bad num_gpus "0": want a whole number from 1 to 4096
  skipped line 6: has 4 fields, header has 5
  skipped line 8: bad duration: "abc" is not a number of seconds
  skipped line 9: no set of nodes can ever run it: needs 512 nodes with 8 GPUs each, 300 have that
`
	if stderr != want {
		t.Errorf("stderr:\n%s\nwant:\n%s", stderr, want)
	}
	if !strings.Contains(out, "8 rows, 2 jobs replayed, 6 skipped") {
		t.Errorf("table header does not count the skipped rows:\n%s", out)
	}
}

func TestMainAddNodes(t *testing.T) {
	out, stderr, code := runMain(t, "--trace testdata/scenarios/fifo_sjf.csv --format rota --cluster testdata/scenarios/one_gpu.yaml --add-nodes 4xA100:1 --policy fifo -o csv")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// Five GPUs for five jobs: nobody waits.
	if !strings.Contains(out, "\nwait_mean_s,0\n") {
		t.Errorf("with 4 more GPUs the jobs still wait:\n%s", out)
	}
}
