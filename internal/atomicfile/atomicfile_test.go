package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// A write replaces the file whole, with the mode asked whatever the umask, and leaves no
// temporary file behind; a write that cannot happen leaves the old file as it was.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	for _, tc := range []struct {
		data    string
		perm    os.FileMode
		durable bool
	}{{"first", 0o600, true}, {"second, longer", 0o644, false}} {
		if err := Write(path, []byte(tc.data), tc.perm, tc.durable); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != tc.data {
			t.Fatalf("read %q, %v; want %q", got, err, tc.data)
		}
		if fi, _ := os.Stat(path); fi.Mode().Perm() != tc.perm {
			t.Fatalf("mode %v; want %v", fi.Mode().Perm(), tc.perm)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("%d entries in the directory; want only the file", len(entries))
	}
	if err := Write(filepath.Join(dir, "missing", "key"), []byte("x"), 0o600, true); err == nil {
		t.Fatal("a write into a missing directory succeeded")
	}
	if got, _ := os.ReadFile(path); string(got) != "second, longer" {
		t.Fatalf("the failed write changed the file: %q", got)
	}
}
