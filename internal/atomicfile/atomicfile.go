// Package atomicfile replaces files in one step: a reader, or the machine after a crash,
// finds the old content or the new, never a part of either. The cluster CA, node identities,
// the first admin token and the agent's attempt records are all written this way.
//
// It does no I/O but on the files it is given, and imports nothing of rota's.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data and mode perm, whatever the umask. The data goes to a
// temporary file in the same directory (created 0600, so a key is never readable by others
// even while it is written) and is renamed over path. With durable set, the data and then
// the directory entry are synced before Write returns, so the file survives a crash.
func Write(path string, data []byte, perm os.FileMode, durable bool) (err error) {
	dir, base := filepath.Split(path)
	f, err := os.CreateTemp(dir, "."+base+".tmp-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if durable {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	if durable {
		return SyncDir(dir)
	}
	return nil
}

// SyncDir syncs a directory, so that the entries created or renamed in it last.
func SyncDir(dir string) error {
	if dir == "" {
		dir = "."
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
