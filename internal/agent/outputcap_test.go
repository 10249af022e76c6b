package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCappedOutput(t *testing.T) {
	const limit = 300
	notice := string(newCappedOutput(mustTemp(t), limit, testLogger(t)).notice)
	for _, tc := range []struct {
		name   string
		before string   // in the file before the job's output
		writes []string // the job's output, write by write
		want   string
	}{
		{"under the limit", "", []string{"a\n", "b\n"}, "a\nb\n"},
		{"just under", "", []string{strings.Repeat("x", limit-len(notice))}, strings.Repeat("x", limit-len(notice))},
		{"one byte over", "", []string{strings.Repeat("x", limit-len(notice)+1)}, strings.Repeat("x", limit-len(notice)) + notice},
		{"a write that straddles", "", []string{strings.Repeat("x", 100), strings.Repeat("y", 500), "z"},
			strings.Repeat("x", 100) + strings.Repeat("y", limit-len(notice)-100) + notice},
		{"counting what the file held", strings.Repeat("w", 100), []string{strings.Repeat("x", 500)},
			strings.Repeat("w", 100) + strings.Repeat("x", limit-len(notice)-100) + notice},
		{"a file already past the room", strings.Repeat("w", limit-10), []string{"x"}, strings.Repeat("w", limit-10) + notice[:10]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := mustTemp(t)
			f.WriteString(tc.before)
			c := newCappedOutput(f, limit, testLogger(t))
			for _, w := range tc.writes {
				if n, err := c.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write of %d bytes = %d, %v; want all taken", len(w), n, err)
				}
			}
			got, _ := os.ReadFile(f.Name())
			if string(got) != tc.want {
				t.Errorf("file holds %q (%d bytes), want %q (%d)", got, len(got), tc.want, len(tc.want))
			}
			if len(got) > limit {
				t.Errorf("file holds %d bytes, past the limit %d", len(got), limit)
			}
		})
	}

	// A disk that refuses every write costs the output, never the job: every write is taken.
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("no /dev/full: %v", err)
	}
	defer full.Close()
	var logs lockedBuffer
	c := newCappedOutput(full, 0, testLoggerTo(t, &logs))
	for range 3 {
		if n, err := c.Write([]byte("lost\n")); n != 5 || err != nil {
			t.Fatalf("Write to a full disk = %d, %v; want all taken", n, err)
		}
	}
	if n := strings.Count(logs.String(), "cannot write the job's output"); n != 1 {
		t.Errorf("the failing writes were logged %d times, want once:\n%s", n, logs.String())
	}
}

func mustTemp(t *testing.T) *os.File {
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "output.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// Output that could not be written while the disk was full is counted, and the first
// write that succeeds after says how much was dropped there, and why.
func TestCappedOutputSaysWhatAFullDiskDropped(t *testing.T) {
	dir := mountTmpfs(t, "size=1m")
	f, err := os.OpenFile(filepath.Join(dir, "output.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := newCappedOutput(f, 0, testLogger(t))
	before := strings.Repeat("b", 4095) + "\n" // a whole page: the next byte needs a new one
	c.Write([]byte(before))
	filler := fillDisk(t, dir)
	for range 4 {
		c.Write([]byte("lost\n")) // 20 bytes, none of them written
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("after\n"))
	got, _ := os.ReadFile(f.Name())
	want := before + "\nrota: 20 bytes of the job's output were dropped here: the log could not be written (write " + f.Name() + ": no space left on device)\nafter\n"
	if string(got) != want {
		t.Errorf("log %q, want %q", got, want)
	}
}
