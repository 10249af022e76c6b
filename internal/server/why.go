package server

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/sched"
)

// handleWhy answers "why is my job where it is" in plain sentences with the numbers.
func (s *Server) handleWhy(w http.ResponseWriter, r *http.Request) {
	id, ok := s.jobID(w, r)
	if !ok {
		return
	}
	who := caller(r)
	job, _, found, err := s.lookupJob(r.Context(), id)
	if err != nil {
		storeError(w, "reading the job", err)
		return
	}
	s.mu.Lock()
	var e *api.Error
	if found {
		e = s.mayRead(who, &job)
	}
	var ahead int
	var node string
	var hints []string
	budget := ""
	if found && !job.State.Terminal() && job.Reason != reasonBudget {
		budget = s.budgetWarning(&job.Spec)
	}
	if found && job.State == api.StatePending {
		ahead = s.aheadOf(job)
		node = s.endingOn(s.bestNodeOf(id), job.EstimatedStart)
		hints = s.nodeHints(&job)
	}
	s.mu.Unlock()
	if !found {
		notFound(w, id)
		return
	}
	if e != nil {
		writeError(w, http.StatusForbidden, e)
		return
	}
	why := explain(job, ahead)
	if warn := deadlineWarning(&job, s.cfg.Clock.Now()); warn != "" {
		why.Reasons = append(why.Reasons, "Warning: "+warn+".")
	}
	if budget != "" {
		why.Reasons = append(why.Reasons, "Warning: "+budget+".")
	}
	if node != "" {
		why.Reasons = append(why.Reasons[:1], append([]string{node}, why.Reasons[1:]...)...)
	}
	if len(hints) > 0 {
		// Right after the reason they explain, before the priority breakdown.
		why.Reasons = append(why.Reasons[:1], append(hints, why.Reasons[1:]...)...)
	}
	writeJSON(w, http.StatusOK, why)
}

// endingOn says when the jobs on the node that came closest end, by their time limits: the
// other half of "best is gpu-07 with 3 free".
func (s *Server) endingOn(node string, est *time.Time) string {
	u := s.state.NodeUsage(node)
	if node == "" || u == nil {
		return ""
	}
	now := s.cfg.Clock.Now()
	var ends []time.Time
	for _, id := range u.Jobs {
		j, _ := s.state.Job(id)
		a, _ := s.state.CurrentAttempt(id)
		if j.Spec.TimeLimit > 0 {
			ends = append(ends, a.AssignTime.Add(time.Duration(j.Spec.TimeLimit)*time.Second))
		}
	}
	if len(ends) == 0 {
		return fmt.Sprintf("The %d jobs on %s have no time limit, so when they end cannot be known.", len(u.Jobs), node)
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	horizon := ends[0]
	if est != nil && est.After(horizon) {
		horizon = *est
	}
	n := 0
	for _, e := range ends {
		if !e.After(horizon) {
			n++
		}
	}
	return fmt.Sprintf("%d of the %d jobs on %s end within %s by their time limits.", n, len(u.Jobs), node, horizon.Sub(now).Round(time.Minute))
}

// aheadOf counts the pending jobs that the scheduler considers before this one.
func (s *Server) aheadOf(job api.Job) int {
	if job.Priority == nil {
		return 0
	}
	n := 0
	for _, id := range s.state.PendingIDs() {
		o, _ := s.state.Job(id)
		if o.ID == job.ID || o.Priority == nil {
			continue
		}
		p, q := o.Priority, job.Priority
		if p.Tier > q.Tier || p.Tier == q.Tier && (p.Score > q.Score || p.Score == q.Score && o.SubmitTime.Before(job.SubmitTime)) {
			n++
		}
	}
	return n
}

func explain(job api.Job, ahead int) api.Why {
	why := api.Why{JobID: job.ID, State: job.State, EstimatedStart: job.EstimatedStart}
	add := func(format string, args ...any) { why.Reasons = append(why.Reasons, fmt.Sprintf(format, args...)) }
	switch {
	case job.State == api.StatePending:
		if job.Message != "" {
			add("%s.", strings.TrimSuffix(job.Message, "."))
		} else {
			add("The job waits for the next scheduling cycle.")
		}
		if ahead > 0 && job.Reason != string(sched.ReasonPriority) {
			add("%d jobs of higher priority are ahead of it.", ahead)
		}
		if p := job.Priority; p != nil {
			if p.Deadline != 0 {
				add("Its priority: queue %s tier %d, score %.2f = fair share %.2f + age %.2f + size %.2f + deadline %.2f - nice %.2f.",
					job.Spec.Queue, p.Tier, p.Score, p.FairShare, p.Age, p.Size, p.Deadline, p.Nice)
			} else {
				add("Its priority: queue %s tier %d, score %.2f = fair share %.2f + age %.2f + size %.2f - nice %.2f.",
					job.Spec.Queue, p.Tier, p.Score, p.FairShare, p.Age, p.Size, p.Nice)
			}
		}
		// The estimated start travels in its own field; clients print it in the reader's zone.
		if job.EstimatedStart == nil && waitsForResources(job.Reason) {
			add("No start can be estimated yet: running jobs without time limits hold what it needs, or it can never fit.")
		}
	case job.State == api.StateHeld:
		add("The job is held: %s.", strings.TrimSuffix(job.Message, "."))
	case job.State.Active():
		add("The job is %s on %s with GPUs %s.", strings.ToLower(string(job.State)), strings.Join(job.Nodes, ", "), strings.Join(job.GPUIDs, ", "))
		if job.Borrowing {
			add("It borrows GPUs beyond team %s's guaranteed quota, so in-quota work may reclaim them.", job.Spec.Team)
		}
		if job.BorrowingInTeam {
			add("It borrows GPUs beyond project %s's guaranteed quota from team %s's unused guarantee, so in-quota work of the team may reclaim them.", job.Spec.Project, job.Spec.Team)
		}
		if job.CancelRequested {
			add("A cancel was requested; the agent is stopping it.")
		}
		if job.PreemptRequested {
			add("It is being preempted and will be requeued as attempt %d.", job.Attempts+1)
		}
	default:
		add("The job ended %s: %s.", job.State, strings.TrimSuffix(job.Message, "."))
	}
	return why
}

// maxHints bounds the sentences about nodes that take no new work: on a large cluster
// with many failing nodes, the first few say what the rest would.
const maxHints = 3

// nodeHints says, for a pending job that waits for resources, what keeps nodes it could
// use from taking new work: no container runtime for its image anywhere, a drain for
// version drift, a failed health check, GPUs held by leftover processes or unhealthy. Only
// nodes the job could otherwise run on are named: in its queue's pools, with a runtime for
// an image, with GPUs of its model, with versions in its ranges. The scheduler's reason gives the numbers; these sentences give the causes and
// what ends them.
func (s *Server) nodeHints(job *api.Job) []string {
	if !waitsForResources(job.Reason) && job.Reason != string(sched.ReasonNoNodeMatches) {
		return nil
	}
	q, _ := s.state.Queue(job.Spec.Queue)
	nodes := s.state.Nodes()
	cuda, _ := sched.ParseVersionRange(job.Spec.CUDA)
	driver, _ := sched.ParseVersionRange(job.Spec.Driver)
	versionsFit := func(n *api.Node) bool { return cuda.Match(n.CUDAVersion) && driver.Match(n.DriverVersion) }
	var hints []string
	if job.Spec.Image != "" && !slices.ContainsFunc(nodes, func(n api.Node) bool { return n.ContainerRuntime != "" }) {
		hints = append(hints, fmt.Sprintf("The job runs in container image %s, and no node has a container runtime "+
			"(podman, docker or apptainer) to run it: install one on a node and restart its agent, or submit without an image.",
			truncateName(job.Spec.Image)))
	}
	for i := range nodes {
		if len(hints) >= maxHints {
			break
		}
		n := &nodes[i]
		if n.State == api.NodeLost || !mayRunOn(job, q, n) || !versionsFit(n) {
			continue
		}
		if n.DriftDrain && (n.State == api.NodeDraining || n.State == api.NodeDrained) && n.Maintenance == nil {
			hints = append(hints, fmt.Sprintf("Node %s takes no new work: it drained on its own because its versions drift (%s), "+
				"until they are back in range or an operator resumes it.", n.Name, driftText(n.Drift)))
			continue
		}
		if m := n.Maintenance; m != nil && (n.State == api.NodeDraining || n.State == api.NodeDrained) {
			until := "until an operator resumes it"
			if m.End != nil {
				until = "until " + m.End.UTC().Format(time.RFC3339)
			}
			hints = append(hints, fmt.Sprintf("Node %s takes no new work: it is drained for maintenance (%s) %s.", n.Name, m.Reason, until))
			continue
		}
		if n.DataDirProblem != "" {
			hints = append(hints, fmt.Sprintf("Node %s takes no new work: its agent cannot run attempts: %s.", n.Name, n.DataDirProblem))
			continue
		}
		if hc := n.HealthCheck; hc != nil && !hc.OK {
			hints = append(hints, fmt.Sprintf("Node %s takes no new work: its health check failed (exit status %d)%s.",
				n.Name, hc.ExitCode, outputTail(hc.Output)))
			continue
		}
		if h := heldGPUsHint(job, n); h != "" {
			hints = append(hints, h)
		}
	}
	return hints
}

// mayRunOn reports whether node n could run the job were everything free: in the queue's
// pools, with a container runtime for an image, with GPUs of the model it asks for.
func mayRunOn(job *api.Job, q api.Queue, n *api.Node) bool {
	if len(q.Pools) > 0 && !slices.Contains(q.Pools, n.Labels["pool"]) {
		return false
	}
	if job.Spec.Image != "" && n.ContainerRuntime == "" {
		return false
	}
	return job.Spec.GPUs == 0 || slices.ContainsFunc(n.GPUs, func(g api.GPU) bool {
		return takesModel(job.Spec.GPUModel, g.Model)
	})
}

// heldGPUsHint names the GPUs of node n, of the job's model, that take no new work:
// those leftover processes hold and those that are unhealthy or gone. "" when none.
func heldGPUsHint(job *api.Job, n *api.Node) string {
	if job.Spec.GPUs == 0 {
		return ""
	}
	var held, sick []int
	for _, g := range n.GPUs {
		switch {
		case !takesModel(job.Spec.GPUModel, g.Model):
		case !g.Healthy || g.Missing:
			sick = append(sick, g.Index)
		case slices.Contains(n.HeldGPUs, g.Index):
			held = append(held, g.Index)
		}
	}
	var parts []string
	if len(held) > 0 {
		parts = append(parts, fmt.Sprintf("%s held by processes of no live job, until they exit", gpuList(held)))
	}
	if len(sick) > 0 {
		parts = append(parts, fmt.Sprintf("%s unhealthy", gpuList(sick)))
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("On node %s, %s: they take no new work.", n.Name, strings.Join(parts, ", and "))
}

// gpuList names GPUs by index: "GPU 3 is", "GPUs 0, 4 are".
func gpuList(idx []int) string {
	if len(idx) == 1 {
		return fmt.Sprintf("GPU %d is", idx[0])
	}
	s := make([]string, len(idx))
	for i, x := range idx {
		s[i] = fmt.Sprint(x)
	}
	return "GPUs " + strings.Join(s, ", ") + " are"
}

// outputTail is ": " and the last line of a health check's output, cut short and made
// printable, or "" when it printed nothing.
func outputTail(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if last == "" {
		return ""
	}
	return ": " + truncateName(last)
}

// waitsForResources tells the reasons for which a start could be estimated from running
// jobs' time limits.
func waitsForResources(reason string) bool {
	switch sched.ReasonCode(reason) {
	case sched.ReasonResources, sched.ReasonFragmented, sched.ReasonPriority, sched.ReasonReserved, sched.ReasonMaintenance:
		return true
	}
	return false
}

// bestNode is a pending job and the node that came closest to taking it in the last
// cycle.
type bestNode struct {
	job  int64
	node string
}

// bestNodeOf returns the node that came closest to taking pending job id in the last
// cycle, or "". Callers hold s.mu.
func (s *Server) bestNodeOf(id int64) string {
	for _, b := range s.bestNodes {
		if b.job == id {
			return b.node
		}
	}
	return ""
}
