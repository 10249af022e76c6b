package report

import (
	"slices"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// Input is what the accounting reads: a copy of the server's records. Nothing in it is
// shared with live state; Compute only reads it.
type Input struct {
	// Jobs and their Attempts, in any order; an attempt is matched to its job by JobID,
	// and one whose job is not given is left out.
	Jobs     []api.Job
	Attempts []api.Attempt
	// Events are the jobs' checkpoint and preempt events; other kinds are ignored.
	Events []api.Event
	// Nodes give each placed GPU its model (by node and index) and the capacity.
	Nodes []api.Node
	// Prices per GPU-hour by model; "*" prices the models without their own.
	Prices []api.Price
	// Now ends the attempts still running. The package reads no clock.
	Now time.Time
}

// Rank is the part of an attempt on one node.
type Rank struct {
	Node string
	// Model is the GPU model of the node's inventory at the rank's first GPU index, else
	// the model the job asked for, else "unknown".
	Model string
	// GPUs is what the rank holds: whole GPUs, or its share of one (0.25).
	GPUs float64
	// UtilPct is the rank's measured mean GPU utilisation; nil without telemetry.
	UtilPct *float64
}

// AttemptUsage is the accounting record of one attempt. GPU-seconds are GPUs × seconds.
type AttemptUsage struct {
	JobID             int64
	N                 int
	Team, User, Queue string
	// Project is the job's project of its team; "" for none.
	Project string
	Ranks   []Rank
	GPUs    float64
	// Assign is when the attempt was given its GPUs; from then they are held.
	Assign time.Time
	Start  *time.Time
	// End is when the attempt ended, or Now while it runs (Running is then set).
	End     time.Time
	Running bool
	State   api.JobState
	// ExitCode is the attempt's, where it has one.
	ExitCode *int
	// Category is why an ended attempt did not succeed, as api's Reason* constants say:
	// exit_code, oom, preempted, ...; "" for a success or a running attempt.
	Category string
	// WaitSeconds is from submit (attempt 1) or the previous attempt's end (a requeued
	// attempt) to Assign. RunSeconds is from Start to End, zero if it never started.
	WaitSeconds float64
	RunSeconds  float64
	// AllocatedGPUSeconds is GPUs × (End − Assign). MeasuredGPUSeconds is the part of it
	// on ranks with telemetry, EffectiveGPUSeconds that part × the measured utilisation.
	AllocatedGPUSeconds float64
	MeasuredGPUSeconds  float64
	EffectiveGPUSeconds float64
	// Preempted attempts lose the work since their last checkpoint before End (nil:
	// none, so everything since Start is lost): WasteGPUSeconds.
	Preempted       bool
	LastCheckpoint  *time.Time
	WasteGPUSeconds float64
	// IdleFrom is when the job was flagged idle during this attempt, IdleGPUSeconds the
	// GPU time held from then to End.
	//
	// The server keeps only the job's current idle flag (Job.IdleSince): it is cleared
	// when the job works again or is requeued. So idle holding is known only for a job's
	// current (or last) attempt, and only its last idle spell; earlier spells, and idle
	// time of earlier attempts, are not counted. The figure is a lower bound.
	IdleFrom       *time.Time
	IdleGPUSeconds float64
}

// Account returns the accounting record of every attempt of in, ordered by job and
// attempt number.
func Account(in Input) []AttemptUsage {
	jobs := make(map[int64]*api.Job, len(in.Jobs))
	for i := range in.Jobs {
		jobs[in.Jobs[i].ID] = &in.Jobs[i]
	}
	byJob := map[int64][]*api.Attempt{}
	for i := range in.Attempts {
		a := &in.Attempts[i]
		byJob[a.JobID] = append(byJob[a.JobID], a)
	}
	ev := indexEvents(in.Events)
	models := gpuModels(in.Nodes)
	ids := make([]int64, 0, len(byJob))
	for id := range byJob {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	// Records are made in order rather than sorted after: they are large to move.
	out := make([]AttemptUsage, 0, len(in.Attempts))
	for _, id := range ids {
		j, ok := jobs[id]
		if !ok {
			continue
		}
		list := byJob[id]
		slices.SortFunc(list, func(a, b *api.Attempt) int { return a.N - b.N })
		for i, a := range list {
			var prev *api.Attempt
			if i > 0 {
				prev = list[i-1]
			}
			out = append(out, account(j, a, prev, ev, models, in.Now))
		}
	}
	return out
}

// account makes the record of attempt a of job j; prev is the attempt before it, if any.
func account(j *api.Job, a, prev *api.Attempt, ev events, models map[string]map[int]string, now time.Time) AttemptUsage {
	u := AttemptUsage{JobID: j.ID, N: a.N, Team: j.Spec.Team, Project: j.Spec.Project, User: j.Spec.User, Queue: j.Spec.Queue,
		Assign: a.AssignTime, Start: a.StartTime, State: a.State, ExitCode: a.ExitCode}
	u.End, u.Running = now, a.EndTime == nil
	if a.EndTime != nil {
		u.End = *a.EndTime
	}
	if u.End.Before(u.Assign) {
		u.End = u.Assign // a clock that stepped back; nothing was held
	}
	for _, p := range a.Placements {
		r := Rank{Node: p.Node, Model: rankModel(models, p, j.Spec.GPUModel), GPUs: p.GPUs()}
		if p.Usage != nil && p.Usage.Samples > 0 {
			util := p.Usage.GPUUtilPct.Mean
			r.UtilPct = &util
		}
		u.Ranks = append(u.Ranks, r)
		u.GPUs += r.GPUs
	}

	// Wait: a requeued attempt waited from its predecessor's end.
	waitFrom := j.SubmitTime
	if prev != nil && prev.EndTime != nil {
		waitFrom = *prev.EndTime
	}
	u.WaitSeconds = max(0, u.Assign.Sub(waitFrom).Seconds())
	if u.Start != nil && u.End.After(*u.Start) {
		u.RunSeconds = u.End.Sub(*u.Start).Seconds()
	}

	held := u.End.Sub(u.Assign).Seconds()
	for _, r := range u.Ranks {
		gs := float64(r.GPUs) * held
		u.AllocatedGPUSeconds += gs
		if r.UtilPct != nil {
			u.MeasuredGPUSeconds += gs
			u.EffectiveGPUSeconds += gs * *r.UtilPct / 100
		}
	}

	if !u.Running {
		u.Preempted = preempted(a, ev.preempted[attemptKey{j.ID, a.N}])
		u.Category = category(a, u.Preempted)
	}
	if u.Preempted {
		u.LastCheckpoint = lastCheckpoint(j, a, ev, u.End)
		from := u.Assign
		if u.Start != nil {
			from = *u.Start
		}
		if u.LastCheckpoint != nil && u.LastCheckpoint.After(from) {
			from = *u.LastCheckpoint
		}
		if u.End.After(from) {
			u.WasteGPUSeconds = float64(u.GPUs) * u.End.Sub(from).Seconds()
		}
	}

	// Idle holding: the job's flag belongs to its current attempt only (see IdleFrom).
	if j.IdleSince != nil && a.N == j.Attempts {
		from := *j.IdleSince
		if from.Before(u.Assign) {
			from = u.Assign
		}
		if u.End.After(from) {
			u.IdleFrom = &from
			u.IdleGPUSeconds = float64(u.GPUs) * u.End.Sub(from).Seconds()
		}
	}
	return u
}

// preempted reports whether an ended attempt was preempted, as the server decides when
// it ends one: its stop reason says so, or the scheduler chose it as a victim (a preempt
// event) and nothing that ranks first (success, a cancel, the node's loss) ended it.
func preempted(a *api.Attempt, victim bool) bool {
	if a.State == api.StateSucceeded {
		return false
	}
	if a.Reason == api.ReasonPreempted {
		return true
	}
	switch a.Reason {
	case api.ReasonNodeLost, api.ReasonNodeShutdown, api.ReasonCancelled, api.ReasonIdle:
		return false
	}
	return victim
}

// category is why an ended attempt did not succeed: its reason, or, where it has none,
// what its state and exit code say.
func category(a *api.Attempt, preempted bool) string {
	switch {
	case a.State == api.StateSucceeded:
		return ""
	case preempted:
		return api.ReasonPreempted
	case a.Reason != "":
		return a.Reason
	case a.State == api.StateTimeout:
		return api.ReasonTimeout
	case a.State == api.StateCancelled:
		return api.ReasonCancelled
	case a.ExitCode != nil && *a.ExitCode != 0:
		return api.ReasonExitCode
	}
	return "unknown"
}

// attemptKey names one attempt of one job.
type attemptKey struct {
	job int64
	n   int
}

// events are the checkpoint and preempt events, indexed for account.
type events struct {
	// checkpoints by job, in any order.
	checkpoints map[int64][]api.Event
	// preempted is set for the attempts the scheduler chose as victims.
	preempted map[attemptKey]bool
}

func indexEvents(list []api.Event) events {
	ev := events{checkpoints: map[int64][]api.Event{}, preempted: map[attemptKey]bool{}}
	for _, e := range list {
		switch e.Kind {
		case api.EventCheckpoint:
			ev.checkpoints[e.JobID] = append(ev.checkpoints[e.JobID], e)
		case api.EventPreempt:
			ev.preempted[attemptKey{e.JobID, e.Attempt}] = true
		}
	}
	return ev
}

// lastCheckpoint is the attempt's last checkpoint at or before end: the latest of its
// checkpoint events and, when it falls inside the attempt, the job's LastCheckpoint
// (which may be the only record of it when the events were not given). Attempts of one
// job never overlap, so a checkpoint inside an attempt's time is that attempt's.
func lastCheckpoint(j *api.Job, a *api.Attempt, ev events, end time.Time) *time.Time {
	var last *time.Time
	consider := func(t time.Time) {
		if t.Before(a.AssignTime) || t.After(end) {
			return
		}
		if last == nil || t.After(*last) {
			last = &t
		}
	}
	for _, e := range ev.checkpoints[j.ID] {
		if e.Attempt == 0 || e.Attempt == a.N {
			consider(e.Time)
		}
	}
	if j.LastCheckpoint != nil {
		consider(*j.LastCheckpoint)
	}
	return last
}

// gpuModels maps node and GPU index to the GPU's model.
func gpuModels(nodes []api.Node) map[string]map[int]string {
	out := make(map[string]map[int]string, len(nodes))
	for _, n := range nodes {
		m := make(map[int]string, len(n.GPUs))
		for _, g := range n.GPUs {
			m[g.Index] = g.Model
		}
		out[n.Name] = m
	}
	return out
}

// rankModel is the model of a placement's GPUs: the node's inventory says it by index;
// a node that is gone leaves the model the job asked for, or "unknown".
func rankModel(models map[string]map[int]string, p api.Placement, asked string) string {
	for _, i := range p.GPUIndices {
		if m := models[p.Node][i]; m != "" {
			return m
		}
	}
	switch asked {
	case "", "*", "any":
		return "unknown"
	}
	return asked
}
