package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestBenchFlags checks that rota bench refuses bad flags before running anything.
func TestBenchFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--suite", "gpu"}, `unknown suite "gpu" (want sched, e2e, sim, scale)`},
		{[]string{"--nodes", "10"}, "are the scale suite's: add --suite scale"},
		{[]string{"--suite", "sched", "--watch=false"}, "are the scale suite's: add --suite scale"},
		{[]string{"--suite", "scale", "--nodes", "-1"}, "--nodes: must be between 1 and 100000, got -1"},
		{[]string{"--suite", "scale", "--nodes", "10", "--running", "100"}, "--running: the running jobs fill the 80 GPUs of 10 nodes"},
		{[]string{"--suite", "scale", "--quick", "--jobs", "100"}, "--jobs: must be at least --running (700)"},
		{[]string{"--suite", "scale", "--heartbeat", "1ms"}, "--heartbeat: must be between 100ms and 1m"},
		{[]string{"-o", "yaml"}, `unknown format "yaml"`},
	} {
		var stdout, stderr bytes.Buffer
		code := runBench(context.Background(), tc.args, &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tc.want) || stdout.Len() != 0 {
			t.Errorf("rota bench %s: exit %d, stderr %q, stdout %q; want exit 2 saying %q and no results",
				strings.Join(tc.args, " "), code, stderr.String(), stdout.String(), tc.want)
		}
	}
}
