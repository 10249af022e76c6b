package server

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// A node's heartbeat answer lists every task it should run, and 10,000 agents ask every
// 2 s. Building each task (its environment above all) and encoding it again at every
// heartbeat was a third of what a heartbeat allocated, though a task changes only when its
// job, its attempt or the configuration does. So each node keeps its last answer's tasks
// encoded, each with the state sequence it was made at, and a task is made again only
// when something it is made of changed since.

// cachedTask is one task of a node's last answer, encoded.
type cachedTask struct {
	job int64
	seq uint64 // the state's sequence when it was made
	// master is the node whose host name the task names ("" for none): a change of that
	// node changes the task.
	master string
	// clock is the offset of the node's clock the task was made with (its time limit
	// is on the node's clock).
	clock time.Duration
	data  json.RawMessage
}

// current reports whether nothing the task was made of changed since. Callers hold s.mu.
func (s *Server) current(c *cachedTask) bool {
	return !s.state.JobChangedSince(c.job, c.seq) && !s.state.ConfigChangedSince(c.seq) &&
		(c.master == "" || !s.state.NodeChangedSince(c.master, c.seq))
}

// desiredAnswer is desiredTasks encoded, from the node's kept tasks where they are
// current. Callers hold s.mu.
func (s *Server) desiredAnswer(node string) []json.RawMessage {
	ids := s.state.ActiveOnNode(node)
	kept := s.tasks[node]
	fresh := make([]cachedTask, 0, len(ids))
	out := make([]json.RawMessage, 0, len(ids))
	k := 0
	for _, id := range ids {
		for k < len(kept) && kept[k].job < id {
			k++
		}
		if k < len(kept) && kept[k].job == id && s.current(&kept[k]) && kept[k].clock == s.clockOffset(node) {
			fresh = append(fresh, kept[k])
			out = append(out, kept[k].data)
			continue
		}
		t, master, ok := s.taskFor(id, node)
		if !ok {
			continue
		}
		data, err := json.Marshal(t)
		if err != nil {
			// A task is plain data and always encodes; should one not, the node is told
			// nothing of it rather than given half an answer.
			s.log.Error("heartbeat: a task would not encode", "job", id, "err", err)
			continue
		}
		c := cachedTask{job: id, seq: s.state.Seq(), master: master, clock: s.clockOffset(node), data: data}
		fresh = append(fresh, c)
		out = append(out, data)
	}
	if len(fresh) == 0 {
		delete(s.tasks, node)
	} else {
		if s.tasks == nil {
			s.tasks = map[string][]cachedTask{}
		}
		s.tasks[node] = fresh
	}
	return out
}

// heartbeatAnswer is api.HeartbeatResponse with its tasks already encoded: the same JSON
// (TestHeartbeatAnswerEncodesAsTheAPIType holds the two together).
type heartbeatAnswer struct {
	Tasks []json.RawMessage `json:"tasks"`
	answerRest
}

// answerRest is the answer less its tasks: the fields appendJSON has encoding/json write.
type answerRest struct {
	Acked            []api.TaskRef `json:"acked"`
	StoppedAcked     []api.TaskRef `json:"stopped_acked,omitempty"`
	ClusterID        string        `json:"cluster_id"`
	HeartbeatSeconds float64       `json:"heartbeat_s"`
	SyncEpoch        uint64        `json:"sync_epoch,omitempty"`
	InventoryHash    string        `json:"inventory_hash,omitempty"`
	LogsFollowed     []api.TaskRef `json:"logs_followed,omitempty"`
	LogSizes         bool          `json:"log_sizes,omitempty"`
	DataDirProblems  bool          `json:"data_dir_problems,omitempty"`
}

// appendJSON appends the answer's JSON to buf, the bytes json.Marshal gives, but with
// the kept tasks copied as they are: encoding/json checks and compacts a RawMessage byte
// by byte, which cost a fifth of what handling a heartbeat took, for tasks it encoded
// itself.
func (a *heartbeatAnswer) appendJSON(buf []byte) ([]byte, error) {
	rest, err := json.Marshal(a.answerRest)
	if err != nil {
		return buf, err
	}
	need := len(`{"tasks":[],`) + len(rest) + len(a.Tasks) + 1 // the 1: the newline a writer adds
	for _, t := range a.Tasks {
		need += len(t)
	}
	buf = slices.Grow(buf, need)
	buf = append(buf, `{"tasks":`...)
	if a.Tasks == nil {
		buf = append(buf, "null"...)
	} else {
		buf = append(buf, '[')
		for i, t := range a.Tasks {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = append(buf, t...)
		}
		buf = append(buf, ']')
	}
	// rest is an object with at least acked, cluster_id and heartbeat_s: its members
	// follow the tasks.
	buf = append(buf, ',')
	return append(buf, rest[1:]...), nil
}
