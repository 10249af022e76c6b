package server

import (
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/store"
)

const maxNodeName = 253

// handleHeartbeat registers or refreshes the node, records what its tasks did, and answers
// with the node's desired state. Reports are applied in one commit before the answer, so an
// ended task is acknowledged to the agent only once its end is durable.
func (s *Server) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("node")
	if name == "" || len(name) > maxNodeName || !nameRE.MatchString(name) {
		writeError(w, http.StatusBadRequest, invalid("node", "%q is not a valid node name: use letters, digits and ._@+-", name))
		return
	}
	var hb api.Heartbeat
	if status, e := decodeJSON(w, r, &hb); e != nil {
		writeError(w, status, e)
		return
	}
	if hb.Node != "" && hb.Node != name {
		writeError(w, http.StatusBadRequest, invalid("node", "body names node %q but the URL names %q", hb.Node, name))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Clock.Now()
	b := &store.Batch{}
	s.refreshNode(b, name, hb.Inventory, now)
	acked := s.recordTasks(b, name, hb.Tasks, now)
	if err := s.commit(r.Context(), b); err != nil {
		s.log.Error("heartbeat: commit failed", "node", name, "err", err)
		writeError(w, http.StatusInternalServerError, &api.Error{Code: api.CodeInternal, Message: "could not record the heartbeat: " + err.Error()})
		return
	}
	s.state.SetLastHeartbeat(name, now)
	if len(b.Jobs) > 0 || len(b.Nodes) > 0 {
		s.wake()
	}
	if acked == nil {
		acked = []api.TaskRef{}
	}
	writeJSON(w, http.StatusOK, api.HeartbeatResponse{
		Tasks: s.desiredTasks(name), Acked: acked, HeartbeatSeconds: s.cfg.HeartbeatInterval.Seconds(),
	})
}

// refreshNode adds a new node, or records a changed inventory or a node that came back. A
// heartbeat that changes nothing writes nothing.
func (s *Server) refreshNode(b *store.Batch, name string, inv api.Inventory, now time.Time) {
	old, known := s.state.Node(name)
	n := old
	n.Name, n.Inventory, n.LastHeartbeat = name, inv, now
	if !known || n.State == api.NodeNotReady || n.State == api.NodeLost || n.State == "" {
		n.State = api.NodeReady
	}
	switch {
	case !known:
		b.Events = append(b.Events, api.Event{Time: now, Actor: name, Kind: api.EventNode, Node: name,
			Message: fmt.Sprintf("node %s registered: %d GPUs (%s), %d CPUs, %d MB", name, len(inv.GPUs), inv.DeviceSource, inv.CPUs, inv.MemoryMB)})
	case old.State != n.State:
		b.Events = append(b.Events, api.Event{Time: now, Actor: name, Kind: api.EventNode, Node: name,
			Message: fmt.Sprintf("node %s: %s -> %s: heartbeat received", name, old.State, n.State)})
	case reflect.DeepEqual(old.Inventory, inv):
		return
	default:
		b.Events = append(b.Events, api.Event{Time: now, Actor: name, Kind: api.EventNode, Node: name,
			Message: fmt.Sprintf("node %s inventory changed: %d GPUs, %d CPUs, %d MB", name, len(inv.GPUs), inv.CPUs, inv.MemoryMB)})
	}
	b.Nodes = append(b.Nodes, n)
}

// recordTasks applies the agent's task reports to b and returns the ended tasks the agent may
// forget. A report about an attempt that is not the job's current one on this node is stale
// (the job was requeued or cancelled meanwhile): it changes nothing and is acknowledged.
func (s *Server) recordTasks(b *store.Batch, node string, tasks []api.TaskStatus, now time.Time) []api.TaskRef {
	var acked []api.TaskRef
	for _, st := range tasks {
		ref := api.TaskRef{JobID: st.JobID, Attempt: st.Attempt}
		ended := st.State.Terminal()
		job, ok := s.state.Job(st.JobID)
		a, hasAttempt := s.state.CurrentAttempt(st.JobID)
		current := ok && hasAttempt && job.State.Active() && a.N == st.Attempt && placedOn(a, node)
		if !current {
			if ended {
				acked = append(acked, ref)
			}
			continue
		}
		checkpointed := false
		for _, e := range st.Events {
			if ev, ok := reportEvent(e, job, node, now); ok {
				b.Events = append(b.Events, ev)
				t := now
				job.LastCheckpoint, checkpointed = &t, true
			}
		}
		switch {
		case ended:
			a, ev, err := s.endAttempt(&job, st, now, node)
			if err != nil {
				s.log.Error("task report", "job", job.ID, "err", err)
				continue
			}
			b.Jobs, b.Attempts, b.Events = append(b.Jobs, job), append(b.Attempts, a), append(b.Events, ev)
			acked = append(acked, ref)
		case st.State == api.StateRunning && job.State == api.StateAssigned:
			start := now
			if st.StartTime != nil {
				start = *st.StartTime
			}
			a.State, a.StartTime = api.StateRunning, &start
			job.StartTime = &start
			ev, err := cluster.Transition(&job, api.StateRunning, "", fmt.Sprintf("started on %s (pid %d)", node, st.PID), node, now)
			if err != nil {
				s.log.Error("task report", "job", job.ID, "err", err)
				continue
			}
			b.Jobs, b.Attempts, b.Events = append(b.Jobs, job), append(b.Attempts, a), append(b.Events, ev)
		case checkpointed:
			b.Jobs = append(b.Jobs, job)
		}
	}
	return acked
}

// reportEvent keeps the checkpoints a job reports: they decide which job loses least when one
// must be preempted. Progress lines are frequent and only interesting live, so they are not stored.
func reportEvent(e map[string]any, job api.Job, node string, now time.Time) (api.Event, bool) {
	cp, ok := e["checkpoint"]
	if !ok {
		return api.Event{}, false
	}
	return api.Event{Time: now, Actor: node, Kind: "checkpoint", JobID: job.ID, Attempt: job.Attempts, Node: node,
		Message: fmt.Sprint(cp)}, true
}

func placedOn(a api.Attempt, node string) bool {
	for _, p := range a.Placements {
		if p.Node == node {
			return true
		}
	}
	return false
}

// desiredTasks lists what the node should run: every active job placed on it, with a stop
// order where the job is to be cancelled.
func (s *Server) desiredTasks(node string) []api.Task {
	tasks := []api.Task{}
	for _, id := range s.state.ActiveIDs() {
		job, _ := s.state.Job(id)
		a, ok := s.state.CurrentAttempt(id)
		if !ok {
			continue
		}
		for rank, p := range a.Placements {
			if p.Node != node {
				continue
			}
			t := api.Task{
				JobID: id, Attempt: a.N, Command: job.Spec.Command, WorkDir: job.Spec.WorkDir,
				Env: s.taskEnv(job, a, rank), GPUIndices: p.GPUIndices, GPUIDs: p.GPUIDs,
				CPUs: p.CPUs, MemoryMB: p.MemoryMB, Signal: job.Spec.Signal, GraceSeconds: job.Spec.Grace,
			}
			if job.Spec.TimeLimit > 0 {
				t.TimeLimitEnd = a.AssignTime.Add(time.Duration(job.Spec.TimeLimit) * time.Second)
			}
			switch {
			case job.CancelRequested:
				t.Stop, t.StopReason = true, api.ReasonCancelled
			case job.PreemptRequested:
				t.Stop, t.StopReason = true, api.ReasonPreempted
			}
			tasks = append(tasks, t)
		}
	}
	return tasks
}

// taskEnv is the job contract's environment for one node of an attempt; the agent adds the
// node-local parts (CUDA_VISIBLE_DEVICES, checkpoint, events and notice paths).
func (s *Server) taskEnv(job api.Job, a api.Attempt, rank int) map[string]string {
	env := map[string]string{}
	for k, v := range job.Spec.Env {
		env[k] = v
	}
	env[api.EnvJobID] = strconv.FormatInt(job.ID, 10)
	env[api.EnvAttempt] = strconv.Itoa(a.N)
	env[api.EnvQueue] = job.Spec.Queue
	if job.Spec.TimeLimit > 0 {
		env[api.EnvTimeLimitEnd] = a.AssignTime.Add(time.Duration(job.Spec.TimeLimit) * time.Second).Format(time.RFC3339)
	}
	var names []string
	for _, p := range a.Placements {
		names = append(names, p.Node)
	}
	env[api.EnvNodeList] = strings.Join(names, ",")
	if len(a.Placements) > 1 {
		master := a.Placements[0].Node
		if n, ok := s.state.Node(master); ok && n.Hostname != "" {
			master = n.Hostname
		}
		perNode := len(a.Placements[rank].GPUIndices)
		env[api.EnvMasterAddr] = master
		// A port derived from the job ID keeps two jobs sharing a master node apart.
		env[api.EnvMasterPort] = strconv.FormatInt(29500+job.ID%1000, 10)
		env[api.EnvNNodes] = strconv.Itoa(len(a.Placements))
		env[api.EnvNodeRank] = strconv.Itoa(rank)
		env[api.EnvNProcPerNode] = strconv.Itoa(perNode)
		env[api.EnvWorldSize] = strconv.Itoa(perNode * len(a.Placements))
	}
	return env
}
