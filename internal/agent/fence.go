package agent

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/rotahq/rota/internal/atomicfile"
	"golang.org/x/sys/unix"
)

// Version is the agent's version, sent with every heartbeat. A release build may set it;
// otherwise it comes from the binary's build information.
var Version = buildVersion()

func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v = strings.TrimPrefix(v+"+"+s.Value[:12], "+")
		}
	}
	if v == "" {
		v = "unknown"
	}
	return v
}

// lockDataDir takes the data directory for this process: two agents on one directory
// would each take the other's attempts for their own. The lock lasts as long as the
// returned file stays open; the kernel drops it when the process ends, however it ends.
func lockDataDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "agent.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock data directory: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder := "unknown"
			if pid, ok := readInt(path); ok {
				holder = strconv.Itoa(pid)
			}
			return nil, fmt.Errorf("data directory %s is in use by another agent (pid %s); give each agent its own --data-dir", dir, holder)
		}
		return nil, fmt.Errorf("lock data directory: %w", err)
	}
	// The pid only names the holder to an agent that finds the directory taken.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// newInstance makes this process's instance ID and returns it with the one of the process
// that used the data directory before, which tells the server this is a restart.
func newInstance(dir string) (cur, prev string, err error) {
	path := filepath.Join(dir, "instance")
	if data, err := os.ReadFile(path); err == nil {
		prev = strings.TrimSpace(string(data))
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", "", fmt.Errorf("instance ID: %w", err)
	}
	cur = hex.EncodeToString(b)
	if err := atomicfile.Write(path, []byte(cur+"\n"), 0o644, true); err != nil {
		return "", "", fmt.Errorf("instance ID: %w", err)
	}
	return cur, prev, nil
}

// readClusterFile is the cluster an agent that did not join learned from a server.
func readClusterFile(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, "cluster"))
	if err != nil {
		return ""
	}
	id := strings.TrimSpace(string(data))
	if !validClusterID(id) {
		return ""
	}
	return id
}

func writeClusterFile(dir, id string) error {
	return atomicfile.Write(filepath.Join(dir, "cluster"), []byte(id+"\n"), 0o644, true)
}
