package server

import (
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/store"
)

// Bounds on what an agent may report about its machine.
const (
	maxNodeGPUs   = 1024
	maxNodeCPUs   = 1 << 20
	maxNodeMemMB  = 1 << 40
	maxLabels     = 64
	maxInvString  = 128
	maxStopped    = 10_000
	maxEvents     = 1000
	maxTaskReport = 100_000
	maxLogSize    = 1 << 50 // a task's log: a petabyte
)

var (
	// digestRE is what an image digest may be (OCI: algorithm, colon, encoded digest).
	digestRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-fA-F0-9]{32,128}$`)
	})
)

// handleHeartbeat registers or refreshes the node, records what its tasks did, and answers
// with the node's desired state. Reports are applied in one commit before the answer, so an
// ended task is acknowledged to the agent only once its end is durable.
//
// Fencing: one node name has one live agent. A heartbeat from another agent process is
// refused while the node's agent is heard from, unless it took over the same data
// directory (a restart: PreviousInstance names the live one). A node whose agent changed,
// or that comes back after it was declared LOST, is Syncing: it takes no new work until its
// agent reports that nothing runs there that the server does not list.
func (s *Server) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	// Its clock's reading is taken as it arrives: the wait for the lock is no part of
	// the node's clock (clock.go).
	received := s.cfg.Clock.Now()
	name := r.PathValue("node")
	var hb api.Heartbeat
	if status, e := s.decodeJSON(w, r, &hb); e != nil {
		writeError(w, status, e)
		return
	}
	if hb.Node != "" && hb.Node != name {
		writeError(w, http.StatusBadRequest, invalid("node", "body names node %q but the URL names %q", truncateName(hb.Node), name))
		return
	}
	// An inventory left out comes back as the zero value: no real inventory is one (it
	// names its device source, at the least).
	sameInventory := reflect.ValueOf(hb.Inventory).IsZero()
	if sameInventory && hb.InventoryHash == "" {
		writeError(w, http.StatusBadRequest, invalid("inventory", "is required; it may be left out only with inventory_hash, the hash of the inventory the server's last answer said it holds"))
		return
	}
	if e := validateHeartbeat(&hb); e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	resp, last, status, e := s.heartbeat(r, name, &hb, sameInventory, received)
	if e != nil {
		writeError(w, status, e)
		return
	}
	// The answer acknowledges the report and names tasks made from memory: it goes out
	// once the report and everything memory held then are durable (writequeue.go).
	if last != nil {
		if err := last.wait(); err != nil {
			s.log.Error("heartbeat: commit failed", "node", name, "err", err)
			status, e := commitErrorOf("could not record the heartbeat", err)
			writeError(w, status, e)
			return
		}
	}
	// The answer is written after the lock is let go: ten thousand agents' answers
	// encoded under it would hold up every other request.
	buf := answerBufs.Get().(*[]byte)
	defer putAnswerBuf(buf)
	data, err := resp.appendJSON((*buf)[:0])
	if err != nil {
		s.log.Error("heartbeat: cannot encode the answer", "node", name, "err", err)
		writeError(w, http.StatusInternalServerError, &api.Error{Code: api.CodeInternal, Message: "could not encode the heartbeat's answer"})
		return
	}
	*buf = append(data, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(*buf)
}

// answerBufs lends heartbeat answers their buffers: 5,000 answers a second of a few
// kilobytes each would otherwise be as many for the garbage collector.
var answerBufs = sync.Pool{New: func() any { return new([]byte) }}

// putAnswerBuf gives buf back, unless an answer of a node running many tasks made it
// too big to keep for the many that run few.
func putAnswerBuf(buf *[]byte) {
	if cap(*buf) <= 64<<10 {
		answerBufs.Put(buf)
	}
}

// sameAgent reports whether a and b say the same of a node's agent (both nil, or equal).
func sameAgent(a, b *api.AgentInfo) bool {
	return a == b || a != nil && b != nil && *a == *b
}

// heartbeat records heartbeat hb of node name under the server's lock, taken through
// s.beats (combine.go), and returns the answer, or the status and error to refuse it
// with. With sameInventory the agent left its inventory out, saying it is the one the
// server holds. received is when it arrived.
func (s *Server) heartbeat(r *http.Request, name string, hb *api.Heartbeat, sameInventory bool, received time.Time) (ans heartbeatAnswer, w *laterWrite, status int, e *api.Error) {
	s.beats.run(&s.mu, func() { ans, w, status, e = s.heartbeatLocked(r, name, hb, sameInventory, received) })
	return ans, w, status, e
}

// heartbeatLocked is heartbeat with s.mu held.
func (s *Server) heartbeatLocked(r *http.Request, name string, hb *api.Heartbeat, sameInventory bool, received time.Time) (heartbeatAnswer, *laterWrite, int, *api.Error) {
	if e := s.validName("node", name); e != nil {
		return heartbeatAnswer{}, nil, http.StatusBadRequest, e
	}
	now := s.cfg.Clock.Now()
	if e := s.takeOver(name, hb, now); e != nil {
		return heartbeatAnswer{}, nil, http.StatusConflict, e
	}
	if sameInventory {
		held := s.state.PeekNode(name)
		if held == nil {
			return heartbeatAnswer{}, nil, http.StatusBadRequest, invalid("inventory",
				"is required: this server holds no inventory for node %s (it was removed, or never registered); send it whole", name)
		}
		// Whatever the hash the agent gave, the inventory held stays: the answer names
		// its hash, and an agent whose inventory differs sends it whole next time.
		hb.Inventory = held.Inventory
	}
	id := caller(r)
	b := &store.Batch{}
	// The node's times are read on its clock: the health check's and the telemetry's
	// are brought to the server's before they are recorded, the tasks' as they are.
	off := s.observeClock(b, name, received.Sub(hb.AgentTime), hb.AgentTime.IsZero(), now)
	if hc := hb.HealthCheck; hc != nil && !hc.Time.IsZero() {
		hc.Time = fromNode(hc.Time, off, time.Time{}, now)
	}
	if tel := hb.Telemetry; tel != nil && !tel.Time.IsZero() {
		tel.Time = fromNode(tel.Time, off, time.Time{}, now)
	}
	node := s.refreshNode(b, name, hb, sameInventory, id, now)
	// Tasks are of the cluster the agent names; another cluster's attempts mean nothing
	// here, and the agent stops them once it learns this cluster from the answer. The
	// reading goes in first, so a rank that ends now has it in its summary.
	var acked []api.TaskRef
	var rd *nodeReading
	if hb.ClusterID == s.clusterID {
		rd = s.readTelemetry(node, hb.Telemetry, now)
		acked = s.recordTasks(b, name, hb.Tasks, off, now)
	}
	stoppedAcked := s.recordStopped(b, name, hb.Stopped, now)
	if rd != nil {
		s.recordReading(b, node, rd, now)
	}
	// Applied to memory now, written behind the lock; the caller waits for it.
	if w := s.commitLater(b); isDone(w) && w.err != nil {
		if !errors.Is(w.err, errWritesHeld) {
			s.log.Error("heartbeat: commit failed", "node", name, "err", w.err)
		}
		// The agent is alive, whatever the store did with its report, which it sends
		// again: a store that refuses writes for longer than a node may be silent must
		// not have the node declared lost, and its jobs requeued, once it takes them.
		s.state.SetLastHeartbeat(name, now)
		status, e := commitErrorOf("could not record the heartbeat", w.err)
		return heartbeatAnswer{}, nil, status, e
	}
	s.state.SetLastHeartbeat(name, now)
	s.state.SetNodeHealth(name, node.HealthCheck, node.DataDirProblem, node.Degraded)
	s.state.SetNodeClock(name, off)
	if rd != nil {
		s.state.SetNodeLive(name, rd.tel, rd.leftovers, rd.held)
	}
	if len(b.Jobs) > 0 || len(b.Nodes) > 0 {
		s.wake()
	}
	if acked == nil {
		acked = []api.TaskRef{}
	}
	return heartbeatAnswer{Tasks: s.desiredAnswer(name), answerRest: answerRest{
		Acked: acked, StoppedAcked: stoppedAcked, ClusterID: s.clusterID,
		HeartbeatSeconds: s.toldInterval(name).Seconds(), SyncEpoch: node.SyncEpoch,
		InventoryHash: s.inventoryHash(name, node.Inventory, sameInventory),
		LogsFollowed:  s.follows.of(name, now), LogSizes: true, DataDirProblems: true,
	}}, s.lastWrite(), 0, nil
}

// isSHA256Hex reports whether h is a SHA-256 sum in lowercase hex.
func isSHA256Hex(h string) bool {
	if len(h) != 64 {
		return false
	}
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// heldInventory is the hash of the inventory a node's record holds, and the inventory it
// was worked out from.
type heldInventory struct {
	hash string
	inv  api.Inventory
}

// inventoryHash returns the hash of node name's inventory inv, as recorded: worked out
// once per inventory, not per heartbeat. With same, inv is the record's own (the agent
// left it out) and a hash worked out before still holds. The hashes are dropped when the
// state is read again from the store. Callers hold s.mu.
func (s *Server) inventoryHash(name string, inv api.Inventory, same bool) string {
	h, ok := s.invHashes[name]
	if ok && (same || reflect.DeepEqual(h.inv, inv)) {
		return h.hash
	}
	if s.invHashes == nil {
		s.invHashes = map[string]heldInventory{}
	}
	h = heldInventory{hash: api.InventoryHash(inv), inv: inv}
	s.invHashes[name] = h
	return h.hash
}

// validateHeartbeat refuses a report that would put nonsense into the node's record: the
// inventory is shown to every client and feeds the scheduler.
func validateHeartbeat(hb *api.Heartbeat) *api.Error {
	inv := &hb.Inventory
	switch {
	case !isInstanceID(hb.Instance):
		return invalid("instance", "must be the agent's instance ID: 1 to 64 letters, digits, _ and -")
	case hb.PreviousInstance != "" && !isInstanceID(hb.PreviousInstance):
		return invalid("previous_instance", "must be an instance ID: 1 to 64 letters, digits, _ and -")
	case inv.CPUs < 0 || inv.CPUs > maxNodeCPUs:
		return invalid("inventory.cpus", "must be between 0 and %d", maxNodeCPUs)
	case inv.MemoryMB < 0 || inv.MemoryMB > maxNodeMemMB:
		return invalid("inventory.memory_mb", "must be between 0 and %d", int64(maxNodeMemMB))
	case len(inv.GPUs) > maxNodeGPUs:
		return invalid("inventory.gpus", "at most %d GPUs per node", maxNodeGPUs)
	case len(inv.Labels) > maxLabels:
		return invalid("inventory.labels", "at most %d labels", maxLabels)
	case len(hb.Tasks) > maxTaskReport:
		return invalid("tasks", "at most %d tasks in one heartbeat", maxTaskReport)
	case len(hb.Stopped) > maxStopped:
		return invalid("stopped", "at most %d stopped attempts in one heartbeat", maxStopped)
	case hb.InventoryHash != "" && !isSHA256Hex(hb.InventoryHash):
		return invalid("inventory_hash", "must be the SHA-256 of the inventory, as 64 lowercase hex digits")
	}
	if inv.DeviceSource == "" {
		inv.DeviceSource = "none"
	}
	for _, f := range [...]struct{ field, v string }{{"inventory.driver_version", inv.DriverVersion}, {"inventory.cuda_version", inv.CUDAVersion},
		{"inventory.device_source", inv.DeviceSource}, {"inventory.hostname", inv.Hostname}, {"version", hb.Version}, {"cluster_id", hb.ClusterID},
		{"inventory.container_runtime", inv.ContainerRuntime}, {"inventory.limits", inv.Limits}} {
		if !cleanString(f.v) {
			return invalid(f.field, "must be at most %d printable characters", maxInvString)
		}
	}
	seen := map[int]bool{}
	for i, g := range inv.GPUs {
		f := fmt.Sprintf("inventory.gpus[%d]", i)
		switch {
		case g.Index < 0 || g.Index >= maxNodeGPUs || seen[g.Index]:
			return invalid(f+".index", "must be a distinct number from 0 to %d", maxNodeGPUs-1)
		case g.MemoryMB < 0 || g.MemoryMB > maxNodeMemMB:
			return invalid(f+".memory_mb", "must be between 0 and %d", int64(maxNodeMemMB))
		case !cleanString(g.Model) || g.Model == "":
			return invalid(f+".model", "must be 1 to %d printable characters", maxInvString)
		case !cleanString(g.UUID) || g.UUID == "":
			return invalid(f+".uuid", "must be 1 to %d printable characters", maxInvString)
		case len(g.Health) > maxDescription || strings.ContainsFunc(g.Health, isControl):
			return invalid(f+".health", "must be at most %d printable characters", maxDescription)
		case !cleanString(g.PCIBusID) || !cleanString(g.MIGMode):
			return invalid(f, "pci_bus_id and mig_mode must be at most %d printable characters", maxInvString)
		case g.NUMANode != nil && (*g.NUMANode < -1 || *g.NUMANode >= maxNodeGPUs):
			return invalid(f+".numa_node", "must be between -1 and %d", maxNodeGPUs-1)
		case len(g.NVLinkPeers) > maxNodeGPUs:
			return invalid(f+".nvlink_peers", "at most %d peers", maxNodeGPUs)
		case !cleanString(g.MIGProfile):
			return invalid(f+".mig_profile", "must be at most %d printable characters", maxInvString)
		case g.MIGParent != nil && (*g.MIGParent < 0 || *g.MIGParent >= maxNodeGPUs || *g.MIGParent == g.Index):
			return invalid(f+".mig_parent", "must be the index of another GPU, from 0 to %d", maxNodeGPUs-1)
		}
		for _, peer := range g.NVLinkPeers {
			if peer < 0 || peer >= maxNodeGPUs || peer == g.Index {
				return invalid(f+".nvlink_peers", "must be indices of other GPUs, from 0 to %d", maxNodeGPUs-1)
			}
		}
		seen[g.Index] = true
	}
	for k, v := range inv.Labels {
		if !nameRE().MatchString(k) || len(k) > maxInvString || !cleanString(v) {
			return invalid("inventory.labels", "label %q: keys are names (letters, digits, ._@+-), values printable, at most %d characters", truncateName(k), maxInvString)
		}
	}
	for i, t := range hb.Tasks {
		if !t.State.Valid() || t.JobID <= 0 || t.Attempt <= 0 {
			return invalid(fmt.Sprintf("tasks[%d]", i), "needs a positive job_id and attempt and a known state")
		}
		if len(t.Events) > maxEvents {
			return invalid(fmt.Sprintf("tasks[%d].events", i), "at most %d events in one heartbeat", maxEvents)
		}
		if !isReasonCode(t.Reason) {
			return invalid(fmt.Sprintf("tasks[%d].reason", i), "must be a reason code: lower-case letters, digits and _, at most 64")
		}
		if t.PeakMemoryMB < 0 || t.PeakMemoryMB > maxNodeMemMB {
			return invalid(fmt.Sprintf("tasks[%d].peak_memory_mb", i), "must be between 0 and %d", int64(maxNodeMemMB))
		}
		if t.LogSize < 0 || t.LogSize > maxLogSize {
			return invalid(fmt.Sprintf("tasks[%d].log_size", i), "must be between 0 and %d", int64(maxLogSize))
		}
		if t.ImageDigest != "" && !digestRE().MatchString(t.ImageDigest) {
			return invalid(fmt.Sprintf("tasks[%d].image_digest", i), "must be an image digest: ALGORITHM:HEX, such as sha256: and 64 hex digits")
		}
	}
	for i, st := range hb.Stopped {
		if !isReasonCode(st.Reason) || !cleanString(st.ClusterID) {
			return invalid(fmt.Sprintf("stopped[%d]", i), "needs a reason code (lower-case letters, digits and _) and a printable cluster ID")
		}
	}
	return nil
}

// isInstanceID reports whether v is an agent's instance ID: 1 to 64 ASCII letters, digits,
// _ and -. It and isReasonCode are on every heartbeat, where the regular expressions they
// replace cost a microsecond each (FuzzHeartbeatClasses holds them to those).
func isInstanceID(v string) bool {
	return len(v) >= 1 && onlyBytes(v, 64, func(c byte) bool {
		return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
	})
}

// isReasonCode reports whether v may be a reason code an agent reports (exit_code,
// node_shutdown…): at most 64 lower-case ASCII letters, digits and _, or nothing.
func isReasonCode(v string) bool {
	return onlyBytes(v, 64, func(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' })
}

// onlyBytes reports whether v is at most n bytes, each of them one that ok takes.
func onlyBytes(v string, n int, ok func(byte) bool) bool {
	if len(v) > n {
		return false
	}
	for i := range len(v) {
		if !ok(v[i]) {
			return false
		}
	}
	return true
}

// cleanString reports whether v is short and has no control characters, which would break
// tables and terminals.
func cleanString(v string) bool {
	return len(v) <= maxInvString && !strings.ContainsFunc(v, isControl)
}

// takeOver refuses a heartbeat from a second agent process for a live node (see
// handleHeartbeat). A restarted agent names the instance it took over from.
func (s *Server) takeOver(name string, hb *api.Heartbeat, now time.Time) *api.Error {
	n := s.state.PeekNode(name) // read only, as on every heartbeat: no copy
	if n == nil || n.Agent == nil || n.Agent.Instance == hb.Instance {
		return nil
	}
	sameHost := n.Hostname == "" || hb.Inventory.Hostname == "" || n.Hostname == hb.Inventory.Hostname
	if hb.PreviousInstance == n.Agent.Instance && sameHost {
		return nil
	}
	return s.nodeTaken(name, hb.Instance, now)
}

// refreshNode adds a new node, or records a changed inventory, a changed agent, a node
// that came back, or a change of its health. A heartbeat that changes nothing writes
// nothing. It returns the node as the heartbeat leaves it.
func (s *Server) refreshNode(b *store.Batch, name string, hb *api.Heartbeat, sameInventory bool, id auth.Identity, now time.Time) api.Node {
	old, known := s.state.Node(name)
	n := old
	n.Name, n.Inventory, n.LastHeartbeat = name, hb.Inventory, now
	agent := &api.AgentInfo{Instance: hb.Instance, PID: hb.PID, Address: id.Source, Version: hb.Version}
	if id.Kind == auth.KindNode {
		if c, ok := s.state.NodeCert(name); ok {
			agent.CertSerial = c.Serial
		}
	}
	n.Agent = agent
	newAgent := !known || old.Agent == nil || old.Agent.Instance != hb.Instance
	if !known {
		n.SyncEpoch = 1 // every answer carries an epoch the agent can echo
	}
	switch {
	case known && old.Agent != nil && old.Agent.Instance != hb.Instance,
		known && old.State == api.NodeLost,
		hb.ClusterID != s.clusterID:
		// A new agent process, a node back from the dead, or an agent that holds another
		// cluster's attempts: its Synced speaks of an earlier answer than the one it is
		// about to get, which may not list what it runs.
		n.Syncing = true
		n.SyncEpoch++
	case !known && hb.SyncEpoch > 0:
		// An agent that echoes an epoch was answered before by a node of this name that
		// has since been removed, and may still run what that node was given: it syncs
		// to an epoch it has not seen before the node takes work.
		n.SyncEpoch = hb.SyncEpoch + 1
		n.Syncing = true
	case hb.Synced && (hb.SyncEpoch == n.SyncEpoch || hb.SyncEpoch == 0):
		// Only a heartbeat about the current epoch's answers ends syncing: one composed
		// before the node was lost (held up in flight, or sent by a frozen agent) says
		// nothing of what the node was told since. Zero is an agent from before epochs.
		n.Syncing = false
	case !known:
		n.Syncing = true
	}
	if !known || n.State == api.NodeNotReady || n.State == api.NodeLost || n.State == "" {
		n.State = api.NodeReady
	}
	event := func(format string, args ...any) {
		b.Events = append(b.Events, api.Event{Time: now, Actor: id.User, Kind: api.EventNode, Node: name, Source: id.Source, Message: fmt.Sprintf(format, args...)})
	}
	// An inventory the agent left out is the one held (heartbeat), so only one sent whole
	// is compared.
	sameInventory = sameInventory || reflect.DeepEqual(old.Inventory, n.Inventory)
	unchanged := false
	switch {
	case !known:
		event("node %s registered: %d GPUs (%s), %d CPUs, %d MB; agent %s (pid %d) from %s",
			name, len(n.GPUs), n.DeviceSource, n.CPUs, n.MemoryMB, hb.Instance, hb.PID, id.Source)
	case old.State != n.State:
		event("node %s: %s -> %s: heartbeat received from agent %s", name, old.State, n.State, hb.Instance)
	case newAgent && old.Agent != nil:
		event("node %s: agent %s (pid %d) took over from %s (pid %d)", name, hb.Instance, hb.PID, old.Agent.Instance, old.Agent.PID)
	case old.Syncing && !n.Syncing:
		event("node %s synced: nothing runs there that the server does not list; it takes new work again", name)
	case old.Syncing == n.Syncing && sameInventory && sameAgent(old.Agent, n.Agent):
		unchanged = true
	case !sameInventory:
		event("node %s inventory changed: %d GPUs, %d CPUs, %d MB", name, len(n.GPUs), n.CPUs, n.MemoryMB)
	}
	if n.Syncing && !old.Syncing && known {
		event("node %s takes no new work until its agent confirms it stopped every attempt the server does not list", name)
	}
	healthChanged := s.nodeHealth(b, old, known, &n, hb.HealthCheck, hb.DataDirProblem, now)
	if driftChanged := s.refreshDrift(b, old, known, &n, now); unchanged && !healthChanged && !driftChanged {
		return n
	}
	b.Nodes = append(b.Nodes, n)
	return n
}

// recordStopped records what the agent stopped on its own (fencing) and acknowledges it.
func (s *Server) recordStopped(b *store.Batch, node string, stopped []api.StoppedTask, now time.Time) []api.TaskRef {
	var acked []api.TaskRef
	for _, st := range stopped {
		why := "the server does not list it as live"
		if st.Reason == api.StoppedOtherCluster {
			why = "it belongs to cluster " + printable(st.ClusterID) + ", not this one"
		}
		b.Events = append(b.Events, api.Event{Time: now, Actor: "node:" + node, Kind: api.EventNode, Node: node, JobID: st.JobID, Attempt: st.Attempt,
			Reason: printable(st.Reason), Message: fmt.Sprintf("agent on %s stopped attempt %d of job %d because %s: %s", node, st.Attempt, st.JobID, why, printable(st.Message))})
		acked = append(acked, api.TaskRef{JobID: st.JobID, Attempt: st.Attempt, ClusterID: st.ClusterID})
	}
	return acked
}

// rankOn returns the index of the attempt's placement on node, or -1.
func rankOn(a api.Attempt, node string) int {
	for i, p := range a.Placements {
		if p.Node == node {
			return i
		}
	}
	return -1
}

// recordTasks applies the agent's task reports to b and returns the ended tasks the agent may
// forget. A report about an attempt that is not the job's current one on this node is stale
// (the job was requeued or cancelled meanwhile) or unknown: it changes nothing, and the
// agent stops the attempt, which no answer lists. An ended one is acknowledged. The
// node's times are converted by off, its clock's offset (clock.go).
func (s *Server) recordTasks(b *store.Batch, node string, tasks []api.TaskStatus, off time.Duration, now time.Time) []api.TaskRef {
	var acked []api.TaskRef
	for _, st := range tasks {
		ref := api.TaskRef{JobID: st.JobID, Attempt: st.Attempt}
		ended := st.State.Terminal()
		// Read in place: most reports, of ranks running as memory has them, change
		// nothing, and copying each job and attempt on every heartbeat was about a
		// seventh of the time a heartbeat held the lock (a CPU profile of the scale suite).
		held, heldAttempt := s.state.Peek(st.JobID), s.state.PeekAttempt(st.JobID)
		rank := -1
		if held != nil && heldAttempt != nil && held.State.Active() && heldAttempt.N == st.Attempt {
			rank = rankOn(*heldAttempt, node)
		}
		if rank < 0 || heldAttempt.Placements[rank].State.Terminal() {
			if _, evicted := s.state.Evicted(st.JobID); !evicted && (held == nil || heldAttempt == nil || st.Attempt > heldAttempt.N) {
				s.log.Warn("agent reports an attempt this server does not know", "node", node, "job", st.JobID, "attempt", st.Attempt, "state", st.State)
			}
			if ended {
				acked = append(acked, ref)
			}
			continue
		}
		if hp := &heldAttempt.Placements[rank]; !ended && len(st.Events) == 0 && (st.ImageDigest == "" || hp.ImageDigest != "") &&
			(st.State != api.StateRunning || hp.State != "") {
			continue // nothing new: none of the cases below applies
		}
		job, a := *held, *heldAttempt
		// The placements are the state's own until the batch is applied: change a copy.
		a.Placements = slices.Clone(a.Placements)
		checkpointed := false
		for _, e := range st.Events {
			if ev, ok := reportEvent(e, job, node, now); ok {
				b.Events = append(b.Events, ev)
				t := now
				job.LastCheckpoint, checkpointed = &t, true
			}
		}
		p := &a.Placements[rank]
		// The digest of the image the rank runs is recorded with the first report that
		// carries it.
		newDigest := st.ImageDigest != "" && p.ImageDigest == ""
		if newDigest {
			p.ImageDigest = st.ImageDigest
		}
		switch {
		case ended:
			end := now
			if st.EndTime != nil {
				from := a.AssignTime
				if a.StartTime != nil {
					from = *a.StartTime
				}
				end = fromNode(*st.EndTime, off, from, now)
			}
			p.State, p.ExitCode, p.EndTime, p.Reason, p.Message = st.State, st.ExitCode, &end, st.Reason, printable(st.Message)
			p.LogSize = st.LogSize
			if p.Reason == api.ReasonOOM || p.Reason == api.ReasonGPUError || p.Reason == api.ReasonGPUMemoryExceeded {
				// Whatever state the agent gave it, such a rank failed.
				p.State = api.StateFailed
			}
			if p.Reason == api.ReasonOOM && p.Message == "" {
				p.Message = oomMessage(p.MemoryMB, st.PeakMemoryMB)
			}
			if p.Reason == api.ReasonGPUMemoryExceeded && p.Message == "" {
				p.Message = fmt.Sprintf("held more GPU memory than its %d MB slice of the GPU; its log says how much", p.GPUMemoryMB)
			}
			s.endRankUsage(p, rankKey{job.ID, a.N, rank}, st.PeakMemoryMB, now)
			if a.StartTime == nil && st.StartTime != nil {
				start := fromNode(*st.StartTime, off, a.AssignTime, end)
				a.StartTime = &start
			}
			evs := s.rankEnded(&job, &a, rank, now)
			b.Jobs, b.Attempts, b.Events = append(b.Jobs, job), append(b.Attempts, a), append(b.Events, evs...)
			acked = append(acked, ref)
		case st.State == api.StateRunning && p.State == "":
			p.State = api.StateRunning
			if job.State == api.StateAssigned {
				start := now
				if st.StartTime != nil {
					start = fromNode(*st.StartTime, off, a.AssignTime, now)
				}
				a.State, a.StartTime = api.StateRunning, &start
				job.StartTime = &start
				ev, err := cluster.Transition(&job, api.StateRunning, "", fmt.Sprintf("started on %s (pid %d)", node, st.PID), "node:"+node, now)
				if err != nil {
					s.log.Error("task report", "job", job.ID, "err", err)
					continue
				}
				b.Events = append(b.Events, ev)
			}
			b.Jobs, b.Attempts = append(b.Jobs, job), append(b.Attempts, a)
		case checkpointed || newDigest:
			b.Jobs, b.Attempts = append(b.Jobs, job), append(b.Attempts, a)
		}
	}
	return acked
}

// oomMessage says why a rank the kernel killed for its memory ended, when its agent gave
// no message of its own.
func oomMessage(limitMB, peakMB int64) string {
	var figures []string
	if limitMB > 0 {
		figures = append(figures, fmt.Sprintf("limit %d MB", limitMB))
	}
	if peakMB > 0 {
		figures = append(figures, fmt.Sprintf("peak %d MB", peakMB))
	}
	msg := "killed for running out of memory"
	if len(figures) > 0 {
		msg += " (" + strings.Join(figures, ", ") + ")"
	}
	return msg
}

// rankEnded moves the job on after one rank of its attempt ended: when every rank has, the
// attempt ends; when this one failed while others run, they are told to stop (the gang
// ends together) and the attempt ends once they have. It returns the events to record.
func (s *Server) rankEnded(job *api.Job, a *api.Attempt, rank int, now time.Time) []api.Event {
	p := a.Placements[rank]
	if allEnded(a) {
		ev, err := s.endAttempt(job, a, now)
		if err != nil {
			s.log.Error("end attempt", "job", job.ID, "err", err)
			return nil
		}
		return []api.Event{ev}
	}
	if p.State == api.StateSucceeded || job.Stopping != "" || job.CancelRequested || job.PreemptRequested {
		return nil
	}
	job.Stopping = fmt.Sprintf("rank %d on %s %s", rank, p.Node, rankOutcome(p))
	return []api.Event{{Time: now, Actor: "node:" + p.Node, Kind: api.EventTransition, JobID: job.ID, Attempt: a.N, Node: p.Node,
		Reason: p.Reason, Message: job.Stopping + "; stopping the other ranks"}}
}

// rankOutcome says how a rank ended, for messages.
func rankOutcome(p api.Placement) string {
	switch {
	case p.Message != "":
		return "ended: " + p.Message
	case p.ExitCode != nil:
		return fmt.Sprintf("exited with code %d", *p.ExitCode)
	}
	return "ended " + strings.ToLower(string(p.State))
}

func allEnded(a *api.Attempt) bool {
	for _, p := range a.Placements {
		if !p.State.Terminal() {
			return false
		}
	}
	return true
}

// reportEvent keeps the checkpoints a job reports: they decide which job loses least when one
// must be preempted. Progress lines are frequent and only interesting live, so they are not stored.
func reportEvent(e map[string]any, job api.Job, node string, now time.Time) (api.Event, bool) {
	cp, ok := e["checkpoint"]
	if !ok {
		return api.Event{}, false
	}
	msg := fmt.Sprint(cp)
	if len(msg) > 1024 {
		msg = msg[:1024] + "…"
	}
	return api.Event{Time: now, Actor: "node:" + node, Kind: api.EventCheckpoint, JobID: job.ID, Attempt: job.Attempts, Node: node,
		Message: printable(msg)}, true
}

func placedOn(a api.Attempt, node string) bool { return rankOn(a, node) >= 0 }

// desiredTasks lists what the node should run: every rank of an active attempt placed on it
// that has not ended, with a stop order where the job is being stopped. The state's
// per-node index names those jobs, so the answer costs what the node runs.
func (s *Server) desiredTasks(node string) []api.Task {
	tasks := []api.Task{}
	for _, id := range s.state.ActiveOnNode(node) {
		if t, _, ok := s.taskFor(id, node); ok {
			tasks = append(tasks, t)
		}
	}
	return tasks
}

// taskFor is what node should run, or stop, of active job id: false when it has no rank
// there left to run. master is the node whose host name the task names (a gang's first),
// "" when it names none. Callers hold s.mu.
func (s *Server) taskFor(id int64, node string) (t api.Task, master string, ok bool) {
	job, _ := s.state.Job(id)
	a, ok := s.state.CurrentAttempt(id)
	if !ok || !job.State.Active() {
		return api.Task{}, "", false
	}
	rank := rankOn(a, node)
	if rank < 0 || a.Placements[rank].State.Terminal() {
		return api.Task{}, "", false
	}
	p := a.Placements[rank]
	runAs, allowRoot := job.Spec.User, false
	if u, ok := s.state.User(job.Spec.User); ok {
		allowRoot = u.AllowRoot
		if u.UnixUser != "" {
			runAs = u.UnixUser
		}
	}
	t = api.Task{
		JobID: id, Attempt: a.N, Rank: rank, Command: job.Spec.Command, WorkDir: job.Spec.WorkDir,
		Env: s.taskEnv(job, a, rank), GPUIndices: p.GPUIndices, GPUIDs: p.GPUIDs,
		CPUs: p.CPUs, MemoryMB: p.MemoryMB, Signal: job.Spec.Signal, GraceSeconds: job.Spec.Grace,
		RunAs: runAs, AllowRoot: allowRoot, CheckpointDir: s.checkpointDir(&job),
		Image: job.Spec.Image, Notice: s.taskNotice(&job), TTY: job.Spec.TTY,
		GPUShare: p.GPUShare, GPUMemoryLimitMB: p.GPUMemoryMB,
	}
	if job.Spec.TimeLimit > 0 {
		// The node keeps the limit on its own clock (clock.go).
		t.TimeLimitEnd = a.AssignTime.Add(time.Duration(job.Spec.TimeLimit)*time.Second - s.clockOffset(node))
		t.Env[api.EnvTimeLimitEnd] = t.TimeLimitEnd.Format(time.RFC3339) // the job reads the node's clock too
	}
	switch {
	case job.CancelRequested && job.Reason == api.ReasonIdle:
		t.Stop, t.StopReason = true, api.ReasonIdle
	case job.CancelRequested:
		t.Stop, t.StopReason = true, api.ReasonCancelled
	case job.PreemptRequested:
		t.Stop, t.StopReason = true, api.ReasonPreempted
	case job.Stopping != "":
		t.Stop, t.StopReason = true, api.ReasonRankFailed
	}
	if len(a.Placements) > 1 {
		master = a.Placements[0].Node
	}
	return t, master, true
}

// taskEnv is the job contract's environment for one node of an attempt; the agent adds the
// node-local parts (CUDA_VISIBLE_DEVICES, checkpoint, events and notice paths), and taskFor
// the time limit, on the node's clock.
func (s *Server) taskEnv(job api.Job, a api.Attempt, rank int) map[string]string {
	env := map[string]string{}
	for k, v := range job.Spec.Env {
		env[k] = v
	}
	env[api.EnvJobID] = strconv.FormatInt(job.ID, 10)
	env[api.EnvAttempt] = strconv.Itoa(a.N)
	env[api.EnvQueue] = job.Spec.Queue
	if job.ArrayID != 0 && job.ArrayIndex != nil {
		env[api.EnvArrayJobID] = strconv.FormatInt(job.ArrayID, 10)
		env[api.EnvArrayIndex] = strconv.Itoa(*job.ArrayIndex)
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
