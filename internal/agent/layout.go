package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/atomicfile"
	"golang.org/x/sys/unix"
)

// The data directory:
//
//	agent.lock                       flock held by the live agent; holds its pid
//	instance                         the last agent process's random instance ID
//	cluster                          the cluster learned from a server (agents that did not join)
//	identity/                        the node's key and certificate (joined agents)
//	clusters/<cluster>/jobs/<job>/<attempt>/   one attempt (files below)
//	clusters/<cluster>/checkpoints/<job>/      node-local checkpoints of a job
//	jobs/, checkpoints/              the layout of agents before clusters: another cluster
//
// An attempt's directory. The agent writes task.json, attempt.json and stop.json before
// or while the supervisor runs, and the ack markers after; the supervisor writes the rest.
// Everything but job/ belongs to the agent's account, so a job cannot forge its own end.
const (
	fileTask          = "task.json"             // the api.Task
	fileMeta          = "attempt.json"          // attemptMeta
	fileStop          = "stop.json"             // stopRequest; SIGUSR1 tells the supervisor
	fileSupervisorPID = "supervisor.pid"        // written once its signal handlers are in place
	fileSupervisorLog = "supervisor.log"        // the supervisor's own diagnostics
	fileCgroup        = "cgroup"                // the attempt's cgroup v2 leaf, before the job starts
	fileJob           = "job.json"              // jobRecord, once the job has started
	fileOutput        = "output.log"            // the job's stdout and stderr
	fileStatus        = "status.json"           // endRecord: the attempt is over
	fileStatusReserve = ".status.json.reserved" // the disk space status.json will take (reserveStatus)
	fileAcked         = "acked"                 // the server recorded the end
	fileStopped       = "stopped.json"          // api.StoppedTask: the agent stopped it on its own
	fileStoppedAcked  = "stopped.acked"         // the server recorded that report
	fileShipped       = "shipped"               // the whole log is on the server (or never will be)
	fileEventsOffset  = "events.offset"         // how far the server has the events file
	dirJob            = "job"                   // the job's own: its default cwd, events and notice
	fileEvents        = "events.jsonl"
	fileNotice        = "notice.json"
)

// Legacy-layout files: an agent before supervisors kept the job's process group in "pid"
// and the job's files next to it.
const legacyPIDFile = "pid"

// attemptKey names one attempt of one job of one cluster. The legacy layout has cluster ""
// and legacy set.
type attemptKey struct {
	cluster string
	legacy  bool
	job     int64
	attempt int
}

func (k attemptKey) String() string {
	c := k.cluster
	if k.legacy {
		c = "(legacy)"
	}
	return fmt.Sprintf("%s/%d/%d", c, k.job, k.attempt)
}

// attemptMeta is what the supervisor needs beyond the task.
type attemptMeta struct {
	ClusterID string `json:"cluster_id"`
	// LocalCheckpointDir is the node-local checkpoint directory, used when the task names
	// no shared one.
	LocalCheckpointDir string `json:"local_checkpoint_dir"`
	// NoCgroup makes the supervisor track the job by process group even where it could
	// make a cgroup, as on nodes without cgroup v2.
	NoCgroup bool `json:"no_cgroup,omitempty"`
	// Runtime is the node's container runtime, for a task with an image.
	Runtime containerRuntime `json:"runtime"`
	// MPS is set where an MPS control daemon ran when the attempt was written: a task
	// that shares a GPU then gets MPS's limits too.
	MPS bool `json:"mps,omitempty"`
	// MaxLogSize is the most of the job's output the supervisor writes to output.log, in
	// bytes; 0 (attempts written before there was a limit, or --max-log-size off) keeps it all.
	MaxLogSize int64 `json:"max_log_size,omitempty"`
}

// stopRequest is stop.json.
type stopRequest struct {
	Reason string `json:"reason"`
}

// Tracking methods: how a supervisor holds the attempt's processes.
const (
	// trackCgroup: a cgroup v2 leaf holds every process; cgroup.kill ends them all.
	trackCgroup = "cgroup"
	// trackProcessGroup: the job's process group, and the supervisor as child subreaper
	// so that descendants that leave the group still come back to it.
	trackProcessGroup = "process_group"
)

// jobRecord is job.json.
type jobRecord struct {
	PID       int       `json:"pid"`
	PGID      int       `json:"pgid"`
	StartTime time.Time `json:"start_time"`
	Tracking  string    `json:"tracking"`
	Cgroup    string    `json:"cgroup,omitempty"`
	// Cgroups1 are the attempt's cgroup v1 leaves (limits and accounting where cgroup v2
	// has no controllers).
	Cgroups1 []string `json:"cgroups1,omitempty"`
	// Container and ImageDigest name the container a task with an image runs in and
	// the image's digest.
	Container   string `json:"container,omitempty"`
	ImageDigest string `json:"image_digest,omitempty"`
}

// endRecord is status.json: how the attempt ended.
type endRecord struct {
	State     api.JobState `json:"state"`
	Reason    string       `json:"reason,omitempty"`
	Message   string       `json:"message,omitempty"`
	ExitCode  *int         `json:"exit_code,omitempty"`
	StartTime *time.Time   `json:"start_time,omitempty"`
	EndTime   time.Time    `json:"end_time"`
	LeaderPID int          `json:"leader_pid,omitempty"`
	Tracking  string       `json:"tracking,omitempty"`
	// RecordedBy is "supervisor", or "agent" for an attempt whose supervisor never ran or died.
	RecordedBy string `json:"recorded_by"`
	// PeakMemoryMB is the peak of the attempt's memory cgroup; Limits says which limits
	// were enforced and how; ImageDigest is the container image that ran.
	PeakMemoryMB int64  `json:"peak_memory_mb,omitempty"`
	Limits       string `json:"limits,omitempty"`
	ImageDigest  string `json:"image_digest,omitempty"`
}

func (e endRecord) taskStatus(k attemptKey) api.TaskStatus {
	end := e.EndTime
	return api.TaskStatus{
		JobID: k.job, Attempt: k.attempt, State: e.State, PID: e.LeaderPID,
		StartTime: e.StartTime, EndTime: &end, ExitCode: e.ExitCode, Reason: e.Reason, Message: e.Message,
		PeakMemoryMB: e.PeakMemoryMB, ImageDigest: e.ImageDigest,
	}
}

// clusterIDPattern keeps a cluster ID usable as one path component and in a cgroup name.
var clusterIDPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`) })

func validClusterID(id string) bool { return clusterIDPattern().MatchString(id) }

// clusterRoot holds a cluster's jobs and checkpoints; the legacy layout's is the data dir.
func clusterRoot(dataDir string, k attemptKey) string {
	if k.legacy {
		return dataDir
	}
	return filepath.Join(dataDir, "clusters", k.cluster)
}

func attemptDir(dataDir string, k attemptKey) string {
	return filepath.Join(clusterRoot(dataDir, k), "jobs", strconv.FormatInt(k.job, 10), strconv.Itoa(k.attempt))
}

func localCheckpointDir(dataDir string, k attemptKey) string {
	return filepath.Join(clusterRoot(dataDir, k), "checkpoints", strconv.FormatInt(k.job, 10))
}

// eventsPath and noticePath are where a job finds ROTA_EVENTS_FILE and ROTA_NOTICE_FILE.
func eventsPath(dir string, legacy bool) string {
	if legacy {
		return filepath.Join(dir, fileEvents)
	}
	return filepath.Join(dir, dirJob, fileEvents)
}

func noticePath(dir string) string { return filepath.Join(dir, dirJob, fileNotice) }

// foundAttempt is an attempt directory on disk.
type foundAttempt struct {
	key attemptKey
	dir string
}

// scanAttempts lists every attempt directory under dataDir, of every cluster and of the
// legacy layout.
func scanAttempts(dataDir string) ([]foundAttempt, error) {
	var out []foundAttempt
	add := func(k attemptKey) error {
		jobsDir := filepath.Join(clusterRoot(dataDir, k), "jobs")
		jobs, err := os.ReadDir(jobsDir)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("scan %s: %w", jobsDir, err)
		}
		for _, j := range jobs {
			job, err := strconv.ParseInt(j.Name(), 10, 64)
			if err != nil || !j.IsDir() {
				continue
			}
			atts, err := os.ReadDir(filepath.Join(jobsDir, j.Name()))
			if err != nil {
				return fmt.Errorf("scan %s: %w", jobsDir, err)
			}
			for _, a := range atts {
				n, err := strconv.Atoi(a.Name())
				if err != nil || !a.IsDir() {
					continue
				}
				ak := attemptKey{cluster: k.cluster, legacy: k.legacy, job: job, attempt: n}
				out = append(out, foundAttempt{key: ak, dir: attemptDir(dataDir, ak)})
			}
		}
		return nil
	}
	if err := add(attemptKey{legacy: true}); err != nil {
		return nil, err
	}
	clusters, err := os.ReadDir(filepath.Join(dataDir, "clusters"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("scan clusters: %w", err)
	}
	for _, c := range clusters {
		if c.IsDir() && validClusterID(c.Name()) {
			if err := add(attemptKey{cluster: c.Name()}); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func writeJSONAtomic(path string, v any, perm os.FileMode, durable bool) error {
	data, err := jsonLine(v)
	if err != nil {
		return err
	}
	return atomicfile.Write(path, data, perm, durable)
}

func jsonLine(v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	return append(data, '\n'), nil
}

// readJSON reads path into v; ok is false when the file does not exist.
func readJSON(path string, v any) (ok bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	return true, nil
}

// readStatus reads status.json; ok is false while the attempt has no recorded end.
func readStatus(dir string) (endRecord, bool) {
	var rec endRecord
	ok, err := readJSON(filepath.Join(dir, fileStatus), &rec)
	if err != nil || !ok || rec.State == "" {
		return endRecord{}, false
	}
	return rec, true
}

// writeStatus records the attempt's end in status.json, in one step. It writes into the
// space reserveStatus set aside when the attempt began, where there is such: an attempt
// that ends on a full disk (its job's checkpoints filled it, say) is then still recorded
// with its own outcome, not taken for one whose supervisor died and run again.
func writeStatus(dir string, rec endRecord) error {
	data, err := jsonLine(rec)
	if err != nil {
		return fmt.Errorf("record the attempt's end: %w", err)
	}
	if err := writeReserved(filepath.Join(dir, fileStatusReserve), filepath.Join(dir, fileStatus), data); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		// The space set aside could not be used: write the end as any file is.
		_ = os.Remove(filepath.Join(dir, fileStatusReserve))
	}
	if err := atomicfile.Write(filepath.Join(dir, fileStatus), data, 0o644, true); err != nil {
		return fmt.Errorf("record the attempt's end: %w", err)
	}
	return nil
}

// statusReserve is the space set aside for an attempt's end record: far more than one
// takes (the longest message is a container runtime's last words, a few hundred bytes).
const statusReserve = 64 << 10

// reserveStatus sets aside the disk space status.json will take, before the attempt
// runs. Failing that (the disk is full already) the end is written as any file is.
func reserveStatus(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, fileStatusReserve), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	err = unix.Fallocate(int(f.Fd()), 0, 0, statusReserve)
	if errors.Is(err, unix.EOPNOTSUPP) {
		// A file system that cannot allocate ahead gets the blocks written.
		_, err = f.Write(make([]byte, statusReserve))
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// writeReserved writes data over the start of the reserved file, whose blocks are
// allocated already, cuts it to data's length and renames it to path: a write that needs
// no free block, and as atomic as atomicfile.Write.
func writeReserved(reserved, path string, data []byte) error {
	f, err := os.OpenFile(reserved, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt(data, 0); err != nil {
		return err
	}
	if err := f.Truncate(int64(len(data))); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := os.Rename(reserved, path); err != nil {
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(path))
}

func readInt(path string) (int, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	return n, err == nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// mark writes an empty marker file durably: markers record acknowledgements a restarted
// agent must not repeat.
func mark(path string) error { return atomicfile.Write(path, nil, 0o644, true) }
