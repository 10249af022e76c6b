package server

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rotahq/rota/internal/api"
)

// Scenario tests replay a person-readable story from testdata/scenarios through the real
// server: its API, its scheduling loop and its state machine, with fake agents that run each
// job for the time the story gives, in virtual time.

type scenario struct {
	Description string         `yaml:"description"`
	Nodes       []scenarioNode `yaml:"nodes"`
	Config      api.Config     `yaml:"config"`
	Steps       []scenarioStep `yaml:"steps"`
}

type scenarioNode struct {
	Name   string            `yaml:"name"`
	GPUs   int               `yaml:"gpus"`
	Model  string            `yaml:"model"`
	Labels map[string]string `yaml:"labels"`
	Driver string            `yaml:"driver"`
	Count  int               `yaml:"count"`
}

type scenarioStep struct {
	At     time.Duration `yaml:"at"`
	Submit *scenarioJob  `yaml:"submit"`
	Cancel string        `yaml:"cancel"`
	// Reserve makes a reservation by GPU count, its window given from the scenario's start.
	Reserve *scenarioReserve `yaml:"reserve"`
	Expect  *scenarioCheck   `yaml:"expect"`
}

type scenarioJob struct {
	api.JobSpec `yaml:",inline"`
	// Runs is how long the fake process runs before it exits 0 (0: until stopped).
	Runs time.Duration `yaml:"runs"`
	// StopsAfter is how long the process takes to checkpoint and exit once signalled;
	// 0 means it ignores the signal and is killed at the end of its grace.
	StopsAfter time.Duration `yaml:"stops_after"`
	Time       time.Duration `yaml:"time"`
}

type scenarioCheck struct {
	State     map[string]string   `yaml:"state"`
	Reason    map[string]string   `yaml:"reason"`
	Attempts  map[string]int      `yaml:"attempts"`
	On        map[string][]string `yaml:"on"`
	Borrowing []string            `yaml:"borrowing"`
	// Before lists pairs [a, b]: a started (its current attempt) no later than b.
	Before [][2]string `yaml:"started_before"`
}

type scenarioReserve struct {
	Team  string        `yaml:"team"`
	GPUs  int           `yaml:"gpus"`
	Model string        `yaml:"model"`
	Pool  string        `yaml:"pool"`
	From  time.Duration `yaml:"from"`
	Until time.Duration `yaml:"until"`
}

// fakeTask is a job process as a fake agent pretends to run it.
type fakeTask struct {
	task     api.Task
	start    time.Time
	runs     time.Duration
	stopsIn  time.Duration
	stopAt   time.Time
	stopping string
	done     *api.TaskStatus
}

type fakeNode struct {
	name  string
	inv   api.Inventory
	tasks map[api.TaskRef]*fakeTask
}

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/scenarios/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) { runScenario(t, f) })
	}
}

func runScenario(t *testing.T, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var sc scenario
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&sc); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	h := newHarness(t)
	var nodes []*fakeNode
	for _, n := range sc.Nodes {
		for i := range max(n.Count, 1) {
			name := n.Name
			if n.Count > 1 {
				name = fmt.Sprintf("%s%02d", n.Name, i+1)
			}
			fn := &fakeNode{name: name, tasks: map[api.TaskRef]*fakeTask{}, inv: api.Inventory{
				CPUs: 128, MemoryMB: 1 << 20, DeviceSource: "fake", Labels: n.Labels, DriverVersion: n.Driver}}
			for g := range n.GPUs {
				fn.inv.GPUs = append(fn.inv.GPUs, api.GPU{Index: g, UUID: fmt.Sprintf("GPU-%s-%d", name, g), Model: n.Model, MemoryMB: 81559, Healthy: true})
			}
			nodes = append(nodes, fn)
		}
	}
	if len(sc.Config.Queues)+len(sc.Config.Teams) > 0 {
		cfg, _ := yaml.Marshal(sc.Config)
		h.srv.mu.Lock()
		_, e := h.srv.applyConfig(t.Context(), cfg, api.Event{Actor: "scenario"})
		h.srv.mu.Unlock()
		if e != nil {
			t.Fatalf("scenario config: %s", e.Message)
		}
	}
	ids := map[string]int64{}
	jobs := map[int64]*scenarioJob{}
	start := h.clock.Now()
	tick := func() {
		for _, n := range nodes {
			h.fakeBeat(n, jobs)
		}
		h.cycle()
		for _, n := range nodes {
			h.fakeBeat(n, jobs)
		}
	}
	const step = 5 * time.Second
	for _, st := range sc.Steps {
		for h.clock.Now().Before(start.Add(st.At)) {
			h.clock.Add(min(step, start.Add(st.At).Sub(h.clock.Now())))
			tick()
		}
		switch {
		case st.Submit != nil:
			spec := st.Submit.JobSpec
			spec.TimeLimit = int64(st.Submit.Time / time.Second)
			if len(spec.Command) == 0 {
				spec.Command = []string{"train.py"}
			}
			var j api.Job
			var e api.Error
			if code := h.do("POST", "/api/v1/jobs", spec, &j); code != 201 {
				h.do("POST", "/api/v1/jobs", spec, &e)
				t.Fatalf("at %s: submit %s: %d %s", st.At, st.Submit.Name, code, e.Message)
			}
			ids[st.Submit.Name] = j.ID
			jobs[j.ID] = st.Submit
			tick()
		case st.Reserve != nil:
			r := st.Reserve
			var e api.Error
			if code := h.do("POST", "/api/v1/reservations", api.Reservation{Team: r.Team, GPUs: r.GPUs, Model: r.Model, Pool: r.Pool,
				Start: start.Add(r.From), End: start.Add(r.Until)}, &e); code != 201 {
				t.Fatalf("at %s: reserve: %d %s", st.At, code, e.Message)
			}
			tick()
		case st.Cancel != "":
			h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", ids[st.Cancel]), nil, nil)
			tick()
		case st.Expect != nil:
			checkScenario(t, h, st, ids)
		}
	}
}

// fakeBeat sends one heartbeat for the node, then acts on the answer as an agent would.
func (h *harness) fakeBeat(n *fakeNode, jobs map[int64]*scenarioJob) {
	now := h.clock.Now()
	var statuses []api.TaskStatus
	refs := make([]api.TaskRef, 0, len(n.tasks))
	for ref := range n.tasks {
		refs = append(refs, ref)
	}
	sort.Slice(refs, func(a, b int) bool { return refs[a].JobID < refs[b].JobID })
	for _, ref := range refs {
		ft := n.tasks[ref]
		if ft.done == nil {
			switch {
			case ft.stopping != "" && !now.Before(ft.stopAt):
				st, reason := api.StateFailed, ft.stopping
				switch ft.stopping {
				case api.ReasonCancelled:
					st = api.StateCancelled
				case api.ReasonTimeout:
					st = api.StateTimeout
				}
				code := 143
				ft.done = &api.TaskStatus{JobID: ref.JobID, Attempt: ref.Attempt, State: st, Reason: reason, ExitCode: &code, EndTime: &now}
			case ft.runs > 0 && !now.Before(ft.start.Add(ft.runs)):
				code := 0
				ft.done = &api.TaskStatus{JobID: ref.JobID, Attempt: ref.Attempt, State: api.StateSucceeded, ExitCode: &code, EndTime: &now}
			case ft.stopping == "" && !ft.task.TimeLimitEnd.IsZero() && !now.Before(ft.task.TimeLimitEnd):
				ft.stop(api.ReasonTimeout, now)
			}
		}
		if ft.done != nil {
			statuses = append(statuses, *ft.done)
			continue
		}
		s := ft.start
		statuses = append(statuses, api.TaskStatus{JobID: ref.JobID, Attempt: ref.Attempt, State: api.StateRunning, StartTime: &s, PID: 1000 + int(ref.JobID)})
	}
	var resp api.HeartbeatResponse
	if code := h.do("POST", "/api/v1/agents/"+n.name+"/heartbeat", api.Heartbeat{Node: n.name, Inventory: n.inv, Tasks: statuses,
		Instance: "agent-" + n.name, ClusterID: h.srv.ClusterID(), Synced: true}, &resp); code != 200 {
		h.t.Fatalf("heartbeat of %s: %d", n.name, code)
	}
	for _, ref := range resp.Acked {
		delete(n.tasks, ref)
	}
	want := map[api.TaskRef]bool{}
	for _, task := range resp.Tasks {
		ref := api.TaskRef{JobID: task.JobID, Attempt: task.Attempt}
		want[ref] = true
		ft := n.tasks[ref]
		if ft == nil {
			sj := jobs[task.JobID]
			ft = &fakeTask{task: task, start: now}
			if sj != nil {
				ft.runs, ft.stopsIn = sj.Runs, sj.StopsAfter
			}
			n.tasks[ref] = ft
		}
		if task.Stop && ft.stopping == "" && ft.done == nil {
			ft.task.GraceSeconds = task.GraceSeconds
			ft.stop(task.StopReason, now)
		}
	}
	for ref, ft := range n.tasks {
		if !want[ref] && ft.done == nil && ft.stopping == "" {
			ft.stop(api.ReasonCancelled, now)
		}
	}
}

// stop begins stopping: the process exits after it checkpoints, or is killed after grace.
func (ft *fakeTask) stop(reason string, now time.Time) {
	ft.stopping = reason
	grace := time.Duration(ft.task.GraceSeconds) * time.Second
	if ft.stopsIn > 0 && ft.stopsIn < grace {
		grace = ft.stopsIn
	}
	ft.stopAt = now.Add(grace)
}

func checkScenario(t *testing.T, h *harness, st scenarioStep, ids map[string]int64) {
	t.Helper()
	get := func(name string) api.JobDetail {
		id, ok := ids[name]
		if !ok {
			t.Fatalf("at %s: the scenario names job %q, which it never submitted", st.At, name)
		}
		return h.job(id)
	}
	e := st.Expect
	for _, name := range sortedNames(e.State) {
		if j := get(name); string(j.State) != e.State[name] {
			t.Errorf("at %s: %s is %s (%s: %s); want %s", st.At, name, j.State, j.Reason, j.Message, e.State[name])
		}
	}
	for _, name := range sortedNames(e.Reason) {
		if j := get(name); j.Reason != e.Reason[name] {
			t.Errorf("at %s: %s has reason %q (%s); want %q", st.At, name, j.Reason, j.Message, e.Reason[name])
		}
	}
	for _, name := range sortedNames(e.Attempts) {
		if j := get(name); j.Attempts != e.Attempts[name] {
			t.Errorf("at %s: %s is at attempt %d; want %d", st.At, name, j.Attempts, e.Attempts[name])
		}
	}
	for _, name := range sortedNames(e.On) {
		j := get(name)
		got := slices.Clone(j.Nodes)
		slices.Sort(got)
		want := slices.Clone(e.On[name])
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("at %s: %s is on %v; want %v", st.At, name, got, want)
		}
	}
	for _, name := range e.Borrowing {
		if j := get(name); !j.Borrowing {
			t.Errorf("at %s: %s is not marked borrowing", st.At, name)
		}
	}
	for _, pair := range e.Before {
		a, b := get(pair[0]), get(pair[1])
		if a.StartTime == nil || b.StartTime != nil && b.StartTime.Before(*a.StartTime) {
			t.Errorf("at %s: %s (start %v) did not start before %s (start %v)", st.At, pair[0], a.StartTime, pair[1], b.StartTime)
		}
	}
}

func sortedNames[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
