package cli

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestLogsOfEveryRank(t *testing.T) {
	srv := newFakeServer(t)
	code, out, errOut := run(t, srv.URL, "logs", "47")
	want := "[rank 0 node-a] step 1 loss 2.31\n[rank 0 node-a] step 2 loss 2.17\n[rank 0 node-a] saved checkpoint\n" +
		"[rank 1 node-b] step 1 loss 2.30\n[rank 1 node-b] step 2 loss nan\n[rank 1 node-b] Traceback: loss is NaN\n"
	if code != ExitOK || out != want {
		t.Errorf("logs 47: exit %d\nstdout %q\nwant   %q\nstderr %q", code, out, want, errOut)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rank", "1"}, "step 1 loss 2.30\nstep 2 loss nan\nTraceback: loss is NaN"},
		{[]string{"--node", "node-a"}, "step 1 loss 2.31\nstep 2 loss 2.17\nsaved checkpoint\n"},
		{[]string{"--rank", "0"}, "step 1 loss 2.31\nstep 2 loss 2.17\nsaved checkpoint\n"},
	} {
		code, out, errOut := run(t, srv.URL, "logs", append(tc.args, "47")...)
		if code != ExitOK || out != tc.want {
			t.Errorf("logs %q 47: exit %d, stdout %q, want %q; stderr %q", tc.args, code, out, tc.want, errOut)
		}
	}

	// Following, the ranks' lines arrive as they come, but whole and in order per rank.
	code, out, errOut = run(t, srv.URL, "logs", "-f", "47")
	if code != ExitOK {
		t.Fatalf("logs -f 47: exit %d, stderr %q", code, errOut)
	}
	got := strings.SplitAfter(out, "\n")
	for _, rank := range []string{"[rank 0 node-a] ", "[rank 1 node-b] "} {
		var mine, wantMine []string
		for _, l := range got {
			if strings.HasPrefix(l, rank) {
				mine = append(mine, l)
			}
		}
		for _, l := range strings.SplitAfter(want, "\n") {
			if strings.HasPrefix(l, rank) {
				wantMine = append(wantMine, l)
			}
		}
		if !slices.Equal(mine, wantMine) {
			t.Errorf("logs -f: the lines of %q are %q, want %q", rank, mine, wantMine)
		}
	}
	if len(out) != len(want) {
		t.Errorf("logs -f printed %q, want the lines of %q in any order of ranks", out, want)
	}
}

func TestFormatIndices(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{nil, ""}, {[]int{3}, "3"}, {[]int{0, 1}, "0,1"}, {[]int{0, 1, 2, 3, 4, 5, 6, 7}, "0-7"},
		{[]int{2, 3, 4, 6}, "2-4,6"}, {[]int{0, 2, 4}, "0,2,4"}, {[]int{0, 1, 3, 4, 5}, "0,1,3-5"},
	} {
		if got := formatIndices(tc.in); got != tc.want {
			t.Errorf("formatIndices(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestLinePrefixer(t *testing.T) {
	var out bytes.Buffer
	p := &linePrefixer{out: &out, prefix: "> "}
	for _, w := range []string{"a", "b\nc", "\n\nd"} {
		if n, err := p.Write([]byte(w)); n != len(w) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", w, n, err)
		}
	}
	if got := out.String(); got != "> ab\n> c\n> \n" {
		t.Errorf("before Flush: %q", got)
	}
	p.Flush()
	if got := out.String(); got != "> ab\n> c\n> \n> d\n" {
		t.Errorf("after Flush: %q", got)
	}
	// A line that never ends comes out once it is long.
	out.Reset()
	p.Write(bytes.Repeat([]byte("x"), maxPartialLine))
	if got := out.Len(); got != len("> ")+maxPartialLine+1 {
		t.Errorf("a long unfinished line: %d bytes out, want it all", got)
	}
}

func TestShowStopping(t *testing.T) {
	srv := newFakeServer(t)
	code, out, errOut := run(t, srv.URL, "show", "48")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{
		"\nState:         RUNNING\nStopping:      the other ranks are being stopped: rank 1 on node-b exited with status 1\n",
		"\n  0     node-a  0-7   RUNNING  -     -\n",
		"\n  1     node-b  0-7   FAILED   1     exited with status 1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show 48 lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "Retry:") {
		t.Errorf("a running job shows a retry's backoff:\n%s", out)
	}
}

func TestLogsUsage(t *testing.T) {
	srv := newFakeServer(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--rank", "1", "--node", "node-a", "47"}, "--rank and --node exclude each other"},
		{[]string{"--rank", "-1", "47"}, "--rank must be 0 or more, got -1"},
		{[]string{"47_x"}, `invalid job "47_x"`},
	} {
		code, _, errOut := run(t, srv.URL, "logs", tc.args...)
		if code != ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("logs %q: exit %d, stderr %q; want %q", tc.args, code, errOut, tc.want)
		}
	}
}
