package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// Bounds on what the fake set reads from its state directory, which any user can write:
// a flood of files or a huge one costs a Sample little.
const (
	maxFakeStateFile  = 64 << 10
	maxFakeStateFiles = 4096
	maxFakeUses       = maxFakeGPUs
)

// fakeUse is one process's use of one fake GPU, as read from its registration.
type fakeUse struct {
	gpu      int
	pid      int
	memoryMB int64
	utilPct  float64
	command  string
}

// fakeUseFile is one entry of a registration file.
type fakeUseFile struct {
	GPU            json.RawMessage `json:"gpu"`
	MemoryMB       int64           `json:"memory_mb"`
	UtilizationPct float64         `json:"utilization_pct"`
}

// fakeFaultFile is a fault file.
type fakeFaultFile struct {
	GPU    json.RawMessage `json:"gpu"`
	XID    int64           `json:"xid"`
	ECC    int64           `json:"ecc"`
	Vanish bool            `json:"vanish"`
}

// ensureDir creates Dir with procs/ and faults/ in it, open to every user, once; a failure
// is logged and retried at the next call. The caller holds f.mu.
func (f *FakeDevices) ensureDir() {
	if f.dirReady || f.Dir == "" {
		return
	}
	for _, dir := range []string{f.Dir, filepath.Join(f.Dir, "procs"), filepath.Join(f.Dir, "faults")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			f.logger().Warn("fake GPUs: cannot create the state directory", "dir", dir, "err", err)
			return
		}
		// The sticky bit lets every user add files and remove only their own; Chmod
		// because MkdirAll's mode passes through the umask.
		if err := os.Chmod(dir, 0o777|fs.ModeSticky); err != nil {
			f.logger().Warn("fake GPUs: cannot open the state directory to jobs", "dir", dir, "err", err)
			return
		}
	}
	f.dirReady = true
}

// readRegistrations reads procs/: the uses of the processes alive, in PID order. It
// removes the files of dead processes and counts the malformed ones. The caller holds f.mu.
func (f *FakeDevices) readRegistrations() []fakeUse {
	if f.Dir == "" {
		return nil
	}
	f.ensureDir()
	dir := filepath.Join(f.Dir, "procs")
	names := f.stateFiles(dir)
	seenBad := map[string]bool{}
	var uses []fakeUse
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 || strconv.Itoa(pid) != name {
			f.countBad(seenBad, dir, name, errors.New("the name is not a process id"))
			continue
		}
		path := filepath.Join(dir, name)
		if !pidAlive(pid) {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				f.logger().Warn("fake GPUs: cannot remove a dead process's registration", "file", path, "err", err)
			}
			continue
		}
		data, err := readStateFile(path)
		if err == nil && len(bytes.TrimSpace(data)) == 0 {
			continue // being written
		}
		var got []fakeUse
		if err == nil {
			got, err = f.parseUses(pid, data)
		}
		if err != nil {
			f.countBad(seenBad, dir, name, err)
			continue
		}
		uses = append(uses, got...)
	}
	f.badFiles = seenBad
	return uses
}

// stateFiles lists the files of dir to read, in order, leaving out dot files (being
// written) and any beyond maxFakeStateFiles.
func (f *FakeDevices) stateFiles(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			f.logger().Warn("fake GPUs: cannot read the state directory", "dir", dir, "err", err)
		}
		return nil
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if len(names) == maxFakeStateFiles {
			f.logger().Warn("fake GPUs: too many files; reading the first ones", "dir", dir, "max", maxFakeStateFiles)
			break
		}
		names = append(names, e.Name())
	}
	sort.Slice(names, func(i, j int) bool {
		a, errA := strconv.Atoi(names[i])
		b, errB := strconv.Atoi(names[j])
		if errA == nil && errB == nil {
			return a < b
		}
		return names[i] < names[j]
	})
	return names
}

// countBad counts a malformed registration file unless it was counted as it is now.
func (f *FakeDevices) countBad(seen map[string]bool, dir, name string, why error) {
	key := name
	if info, err := os.Lstat(filepath.Join(dir, name)); err == nil {
		key = fmt.Sprintf("%s\x00%d\x00%d", name, info.Size(), info.ModTime().UnixNano())
	}
	seen[key] = true
	if f.badFiles[key] {
		return
	}
	f.malformed++
	f.logger().Warn("fake GPUs: skipping a malformed registration", "file", filepath.Join(dir, name), "err", why)
}

// parseUses reads a registration: one object or a list of them.
func (f *FakeDevices) parseUses(pid int, data []byte) ([]fakeUse, error) {
	var entries []fakeUseFile
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '{' {
		entries = make([]fakeUseFile, 1)
		if err := strictJSON(data, &entries[0]); err != nil {
			return nil, err
		}
	} else if err := strictJSON(data, &entries); err != nil {
		return nil, err
	}
	if len(entries) == 0 || len(entries) > maxFakeUses {
		return nil, fmt.Errorf("%d entries; want 1 to %d", len(entries), maxFakeUses)
	}
	command := processCommand(pid)
	uses := make([]fakeUse, 0, len(entries))
	for i, e := range entries {
		gpu, err := f.gpuIndex(e.GPU)
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		mem, err := f.memoryOf(gpu)
		switch {
		case err != nil:
			return nil, fmt.Errorf("entry %d: %w", i, err)
		case e.MemoryMB < 0 || e.MemoryMB > mem:
			return nil, fmt.Errorf("entry %d: memory_mb %d is out of range; want 0 to %d", i, e.MemoryMB, mem)
		case e.UtilizationPct < 0 || e.UtilizationPct > 100:
			return nil, fmt.Errorf("entry %d: utilization_pct %v is out of range; want 0 to 100", i, e.UtilizationPct)
		}
		uses = append(uses, fakeUse{gpu: gpu, pid: pid, memoryMB: e.MemoryMB, utilPct: e.UtilizationPct, command: command})
	}
	return uses, nil
}

// memoryOf is the memory of device gpu, a number gpuIndex returned. A GPU in MIG mode
// runs nothing itself: its MIG devices do.
func (f *FakeDevices) memoryOf(gpu int) (int64, error) {
	if gpu < len(f.GPUs) {
		if instances, on := f.mig[gpu]; on && len(instances) > 0 {
			return 0, fmt.Errorf("gpu %d is in MIG mode; name one of its MIG devices, %v", gpu, f.migDeviceIndices(gpu))
		}
		return f.GPUs[gpu].MemoryMB, nil
	}
	p, _ := migParentOf(gpu)
	for _, m := range f.mig[p] {
		if migIndex(p, m.n) == gpu {
			return m.memoryMB, nil
		}
	}
	return 0, fmt.Errorf("gpu %d is no device of this node", gpu)
}

// gpuIndex resolves a GPU or MIG device named by number or UUID to one of the set that
// has not vanished.
func (f *FakeDevices) gpuIndex(raw json.RawMessage) (int, error) {
	if len(raw) == 0 {
		return 0, errors.New("gpu is missing; want an index or a UUID")
	}
	var index int
	var uuid string
	switch {
	case json.Unmarshal(raw, &index) == nil:
		if !f.known(index) {
			return 0, fmt.Errorf("gpu %d is out of range; want 0 to %d, or a MIG device's number", index, len(f.GPUs)-1)
		}
	case json.Unmarshal(raw, &uuid) == nil:
		index = -1
		for _, g := range f.GPUs {
			if g.UUID == uuid {
				index = g.Index
			}
			for _, m := range f.mig[g.Index] {
				if m.uuid == uuid {
					index = migIndex(g.Index, m.n)
				}
			}
		}
		if index < 0 {
			return 0, fmt.Errorf("gpu %q is no GPU of this node; want an index or one of its UUIDs", uuid)
		}
	default:
		return 0, errors.New("gpu is neither an index nor a UUID")
	}
	if f.vanished[index] {
		return 0, fmt.Errorf("gpu %d has vanished", index)
	}
	return index, nil
}

// readFaultFiles reads and removes the fault files. A malformed one is removed too, and
// counted. The caller holds f.mu.
func (f *FakeDevices) readFaultFiles() []HealthEvent {
	if f.Dir == "" {
		return nil
	}
	f.ensureDir()
	dir := filepath.Join(f.Dir, "faults")
	var events []HealthEvent
	for _, name := range f.stateFiles(dir) {
		path := filepath.Join(dir, name)
		data, err := readStateFile(path)
		if rmErr := os.Remove(path); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
			// Reading it again at every call would repeat the fault for ever.
			f.logger().Warn("fake GPUs: cannot remove a fault file; ignoring it", "file", path, "err", rmErr)
			continue
		}
		var ev HealthEvent
		if err == nil {
			ev, err = f.parseFault(data)
		}
		if err != nil {
			f.malformed++
			f.logger().Warn("fake GPUs: skipping a malformed fault file", "file", path, "err", err)
			continue
		}
		events = append(events, ev)
	}
	return events
}

// parseFault reads a fault file.
func (f *FakeDevices) parseFault(data []byte) (HealthEvent, error) {
	var ff fakeFaultFile
	if err := strictJSON(data, &ff); err != nil {
		return HealthEvent{}, err
	}
	gpu, err := f.gpuIndex(ff.GPU)
	if err != nil {
		return HealthEvent{}, err
	}
	return faultEvent("fault", gpu, ff.XID, ff.ECC, ff.Vanish)
}

// strictJSON decodes one JSON value without unknown fields or trailing data.
func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON value")
	}
	return nil
}

// readStateFile reads a small regular file of the state directory. Any user can write
// there, so it follows no link (which could point at a secret of the agent's user) and
// opens nothing that could block (a FIFO).
func readStateFile(path string) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	file := os.NewFile(uintptr(fd), path)
	defer file.Close()
	info, err := file.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(file, maxFakeStateFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFakeStateFile {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxFakeStateFile)
	}
	return data, nil
}

// pidAlive says whether process pid runs: it exists and is no zombie.
func pidAlive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may hold any
	// character, ")" included.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return true
	}
	state := stat[i+2]
	return state != 'Z' && state != 'X'
}

// processCommand is the command name of process pid, or "" when it cannot be read.
func processCommand(pid int) string {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(comm))
}
