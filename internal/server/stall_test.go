package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/sched"
)

// stallHarness is a harness whose cycles all count as long (stallAfter), with the
// recompute an hour away, so that only a change makes a cycle due.
func stallHarness(t *testing.T, policy ...sched.Options) *harness {
	t.Helper()
	old := stallAfter
	t.Cleanup(func() { stallAfter = old })
	stallAfter = 0
	h := &harness{t: t, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}, dir: t.TempDir(),
		cfg: func(c *Config) {
			c.RecomputeInterval = time.Hour
			for _, p := range policy {
				c.Policy = p
			}
		}}
	h.open()
	return h
}

// fullNode makes node full with one running job of gpus GPUs and one waiting for as many,
// and runs the cycle that places nothing. It returns the running and the waiting job.
func (h *harness) fullNode(node string, gpus int, spec api.JobSpec) (running, waiting api.Job) {
	h.t.Helper()
	h.beat(node, gpus)
	spec.GPUs = gpus
	running = h.startJob(node, gpus, spec)
	waiting = h.submit(spec)
	h.cycle()
	if st := h.job(waiting.ID).State; st != api.StatePending {
		h.t.Fatalf("second job is %s; want PENDING on a full node", st)
	}
	return running, waiting
}

// wantDue fails the test unless a cycle is due exactly when due says; what says why not.
func (h *harness) wantDue(due bool, what string) {
	h.t.Helper()
	if h.srv.cycleDue() != due {
		h.t.Fatal(what)
	}
}

// cyclePlaces runs a cycle and fails the test unless it assigned job id, named by what.
func (h *harness) cyclePlaces(id int64, what string) {
	h.t.Helper()
	h.cycle()
	if st := h.job(id).State; st != api.StateAssigned {
		h.t.Fatalf("%s is %s after a cycle; want ASSIGNED", what, st)
	}
}

// submitWhilePlanning runs a cycle, submits spec while it plans, and returns the job
// once the cycle has ended.
func (h *harness) submitWhilePlanning(spec api.JobSpec) api.Job {
	h.t.Helper()
	planning, resume, done := h.planPause()
	<-planning
	j := h.submit(spec)
	resume()
	if err := <-done; err != nil {
		h.t.Fatal(err)
	}
	return j
}

// runningOK is the task report of a job running on its first attempt.
func runningOK(id int64) api.TaskStatus {
	return api.TaskStatus{JobID: id, Attempt: 1, State: api.StateRunning}
}

// On a full cluster, after a cycle that placed nothing, jobs that cannot fit anywhere
// make no cycle due: each is told at once why it waits. The first job that might fit, or
// any other change, makes one due again, and the cycle then decides as before.
func TestArrivalsThatCannotStartMakeNoCycleDue(t *testing.T) {
	h := stallHarness(t)
	run, wait := h.fullNode("n1", 8, api.JobSpec{Command: []string{"train"}})
	h.wantDue(false, "a cycle is due right after one, with nothing changed")
	for _, gpus := range []int{8, 1} {
		j := h.submit(api.JobSpec{GPUs: gpus, Command: []string{"train"}})
		h.wantDue(false, fmt.Sprintf("a %d-GPU job on a full cluster made a cycle due", gpus))
		got := h.job(j.ID)
		want := fmt.Sprintf("no node has %d GPU", gpus)
		if got.State != api.StatePending || got.Reason != "Resources" || !strings.HasPrefix(got.Message, want) || !strings.Contains(got.Message, "at most 0 on one node") {
			t.Fatalf("arrival of %d GPUs: %s %q %q; want PENDING, Resources, %q…", gpus, got.State, got.Reason, got.Message, want)
		}
	}
	// An array of 100 such jobs changes nothing either.
	arr := h.submit(api.JobSpec{GPUs: 2, Command: []string{"train"}, Array: "0-99"})
	h.wantDue(false, "an array that cannot start made a cycle due")
	if got := h.job(arr.ID + 99); got.Reason != "Resources" {
		t.Fatalf("last array member: reason %q %q; want Resources", got.Reason, got.Message)
	}
	// A job held for its dependency needs nothing now.
	h.submit(api.JobSpec{GPUs: 1, Command: []string{"eval"}, After: []int64{run.ID}})
	h.wantDue(false, "a held job made a cycle due")
	// The two jobs and the array's 100 were left to the recompute; the held one waits for
	// its dependency, not for GPUs.
	if m := h.scrape(); !strings.Contains(m, "\nrota_scheduler_arrivals_deferred_total 102\n") {
		t.Fatalf("metrics: want rota_scheduler_arrivals_deferred_total 102 in\n%s", grepLines(m, "arrivals_deferred"))
	}
	// A job without GPUs may start on a full node: the next cycle must look.
	cpu := h.submit(api.JobSpec{CPUs: 1, Command: []string{"prep"}})
	h.wantDue(true, "no cycle due after a job that needs no GPU")
	h.cyclePlaces(cpu.ID, "CPU job")
	// The cycle that placed it was fruitful: nothing is deferred after it.
	h.beat("n1", 8, runningOK(run.ID), runningOK(cpu.ID))
	h.cycle()
	// The running job ends: its GPUs are free, and the first waiting job takes them.
	code := 0
	h.beat("n1", 8, api.TaskStatus{JobID: run.ID, Attempt: 1, State: api.StateSucceeded, ExitCode: &code}, runningOK(cpu.ID))
	h.wantDue(true, "no cycle due after a job ended on a full cluster")
	h.cyclePlaces(wait.ID, "the first waiting job")
}

// Each kind of change other than an arrival that cannot start makes a cycle due while
// the stall holds.
func TestChangesEndTheStall(t *testing.T) {
	cases := []struct {
		name   string
		change func(h *harness, run, wait api.Job)
	}{
		{"a waiting job cancelled", func(h *harness, _, wait api.Job) {
			if code := h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", wait.ID), nil, nil); code != http.StatusOK {
				h.t.Fatalf("cancel: %d", code)
			}
		}},
		{"a running job cancelled", func(h *harness, run, _ api.Job) {
			if code := h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", run.ID), nil, nil); code != http.StatusOK {
				h.t.Fatalf("cancel: %d", code)
			}
		}},
		{"a node joins", func(h *harness, _, _ api.Job) { h.beat("n2", 8) }},
		{"a node drained", func(h *harness, _, _ api.Job) {
			if code := h.do("POST", "/api/v1/nodes/n1/drain", api.DrainRequest{Reason: "bios"}, nil); code != http.StatusOK {
				h.t.Fatalf("drain: %d", code)
			}
		}},
		{"a queue added", func(h *harness, _, _ api.Job) {
			if code, e := h.putConfig("queues:\n  - name: gold\n    tier: 10\n"); code != http.StatusOK {
				h.t.Fatalf("config: %d %s", code, e.Message)
			}
		}},
		{"a GPU turns unhealthy", func(h *harness, run, _ api.Job) {
			inv := api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake"}
			for i := range 4 {
				inv.GPUs = append(inv.GPUs, api.GPU{Index: i, UUID: fmt.Sprintf("GPU-n1-%d", i), Model: "H100", MemoryMB: 81559, Healthy: i != 3})
			}
			h.heartbeat("n1", inv, []api.TaskStatus{runningOK(run.ID)})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := stallHarness(t)
			run, wait := h.fullNode("n1", 4, api.JobSpec{Command: []string{"train"}})
			h.submit(api.JobSpec{GPUs: 4, Command: []string{"train"}})
			h.wantDue(false, "an arrival that cannot start made a cycle due")
			c.change(h, run, wait)
			h.wantDue(true, fmt.Sprintf("no cycle due after %s", c.name))
		})
	}
}

// Time still counts while the stall holds: the recompute, and a retried job's backoff.
func TestTheStallKeepsTheRecompute(t *testing.T) {
	h := stallHarness(t)
	h.fullNode("n1", 8, api.JobSpec{Command: []string{"train"}})
	h.submit(api.JobSpec{GPUs: 8, Command: []string{"train"}})
	h.wantDue(false, "an arrival that cannot start made a cycle due")
	h.clock.Add(time.Hour)
	h.wantDue(true, "no cycle due after RecomputeInterval while the stall holds")

	// A job that failed waits out its backoff on the GPU it freed; arrivals that need
	// more make no cycle due, but the backoff's end does.
	h = stallHarness(t)
	h.beat("n1", 8)
	big := h.startJob("n1", 8, api.JobSpec{GPUs: 7, Command: []string{"train"}})
	r := h.submit(api.JobSpec{GPUs: 1, Command: []string{"flaky"}, Retries: intp(1)})
	h.cycle()
	one := 1
	h.beat("n1", 8, runningOK(big.ID), api.TaskStatus{JobID: r.ID, Attempt: 1, State: api.StateFailed, ExitCode: &one})
	h.cycle()
	d := h.job(r.ID)
	if d.State != api.StatePending || d.NotBefore == nil {
		t.Fatalf("retried job is %s, not before %v; want PENDING with a backoff", d.State, d.NotBefore)
	}
	h.submit(api.JobSpec{GPUs: 2, Command: []string{"train"}})
	h.wantDue(false, "a 2-GPU arrival with 1 GPU free made a cycle due during the backoff")
	h.clock.Add(d.NotBefore.Sub(h.clock.Now()))
	h.wantDue(true, "no cycle due once the backoff ended, while the stall holds")
	h.cyclePlaces(r.ID, "retried job")
}

// GPUs that leftover processes held and let go are room, though no batch says so.
func TestLeftoverGoneEndsTheStall(t *testing.T) {
	h := stallHarness(t)
	h.beat("n1", 2)
	run := h.startJob("n1", 2, api.JobSpec{GPUs: 1, Command: []string{"x"}})
	own := h.job(run.ID).AttemptList[0].Placements[0].GPUIndices[0]
	stray := api.GPUProcess{GPU: 1 - own, PID: 4242, MemoryMB: 300, Command: "python leak.py"}
	ownProc := api.GPUProcess{GPU: own, PID: 10, MemoryMB: 900, JobID: run.ID, Attempt: 1}
	for range 3 {
		h.clock.Add(5 * time.Second)
		h.beatFull("n1", 2, withProcesses(h.clock.Now(), ownProc, stray), runningOK(run.ID))
	}
	wait := h.submit(api.JobSpec{GPUs: 1, Command: []string{"y"}})
	h.cycle()
	if st := h.job(wait.ID).State; st != api.StatePending {
		t.Fatalf("job is %s beside a held GPU; want PENDING", st)
	}
	h.submit(api.JobSpec{GPUs: 1, Command: []string{"z"}})
	h.wantDue(false, "an arrival that cannot start made a cycle due")
	h.clock.Add(5 * time.Second)
	h.beatFull("n1", 2, withProcesses(h.clock.Now(), ownProc), runningOK(run.ID))
	h.wantDue(true, "no cycle due after the leftover process went")
	h.cyclePlaces(wait.ID, "job")
}

// Where the stall must not begin: a short cycle, a running job some right may preempt,
// room for an arrival, and an arrival during the cycle that might fit.
func TestWhenTheStallDoesNotBegin(t *testing.T) {
	t.Run("short cycle", func(t *testing.T) {
		h := stallHarness(t)
		stallAfter = time.Hour
		h.fullNode("n1", 8, api.JobSpec{Command: []string{"train"}})
		h.submit(api.JobSpec{GPUs: 8, Command: []string{"train"}})
		h.wantDue(true, "no cycle due after a submit that followed a short cycle")
	})
	t.Run("preemptible running job", func(t *testing.T) {
		h := stallHarness(t)
		if code, e := h.putConfig("queues:\n  - name: default\n  - name: spot\n    preemptible: true\n"); code != http.StatusOK {
			t.Fatalf("config: %d %s", code, e.Message)
		}
		h.fullNode("n1", 8, api.JobSpec{Command: []string{"train"}, Queue: "spot"})
		h.submit(api.JobSpec{GPUs: 8, Command: []string{"train"}})
		h.wantDue(true, "no cycle due after a submit of a higher tier while a preemptible job runs")
	})
	t.Run("room for the arrival", func(t *testing.T) {
		h := stallHarness(t)
		h.beat("n1", 8)
		h.startJob("n1", 8, api.JobSpec{GPUs: 6, Command: []string{"train"}})
		h.submit(api.JobSpec{GPUs: 4, Command: []string{"train"}})
		h.cycle()
		h.wantDue(false, "a cycle is due right after one, with nothing changed")
		h.submit(api.JobSpec{GPUs: 3, Command: []string{"train"}})
		h.wantDue(false, "a 3-GPU arrival with 2 free made a cycle due")
		two := h.submit(api.JobSpec{GPUs: 2, Command: []string{"train"}})
		h.wantDue(true, "no cycle due after a 2-GPU arrival with 2 free")
		h.cyclePlaces(two.ID, "2-GPU job")
	})
	t.Run("arrivals while the cycle plans", func(t *testing.T) {
		for _, c := range []struct {
			gpus int
			due  bool
		}{{8, false}, {0, true}} {
			h := stallHarness(t)
			h.fullNode("n1", 8, api.JobSpec{Command: []string{"train"}})
			h.submit(api.JobSpec{GPUs: 8, Command: []string{"train"}})
			j := h.submitWhilePlanning(api.JobSpec{GPUs: c.gpus, CPUs: 1, Command: []string{"train"}})
			if due := h.srv.cycleDue(); due != c.due {
				t.Fatalf("a %d-GPU arrival while the cycle planned: cycle due %v; want %v", c.gpus, due, c.due)
			}
			if !c.due {
				if got := h.job(j.ID); got.Reason != "Resources" {
					t.Fatalf("arrival while the cycle planned: reason %q %q; want Resources", got.Reason, got.Message)
				}
			}
		}
	})
}

// A state read again from the store ends the stall.
// A running job of a preemptible queue keeps the stall from beginning, or ends it, only
// for an arrival that may preempt it under the policy: one of a higher tier, or of its own
// tier in a preemptible queue under the "las" order; none without preemption.
func TestTheStallWeighsTiers(t *testing.T) {
	const queues = "queues:\n  - name: default\n    tier: 1\n  - name: spot\n    tier: 0\n    preemptible: true\n" +
		"  - name: batch\n    tier: 0\n"
	for _, c := range []struct {
		name   string
		policy sched.Options
		queue  string
		due    bool
	}{
		{"same tier", sched.Options{}, "spot", false},
		{"same tier, a queue that is not preemptible", sched.Options{}, "batch", false},
		{"higher tier", sched.Options{}, "default", true},
		{"same tier under las", sched.Options{Order: sched.OrderLAS}, "spot", true},
		{"same tier under las, a queue that is not preemptible", sched.Options{Order: sched.OrderLAS}, "batch", false},
		{"higher tier under las", sched.Options{Order: sched.OrderLAS}, "default", true},
		{"higher tier without preemption", sched.Options{NoPreemption: true}, "default", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := stallHarness(t, c.policy)
			if code, e := h.putConfig(queues); code != http.StatusOK {
				t.Fatalf("config: %d %s", code, e.Message)
			}
			running, _ := h.fullNode("n1", 8, api.JobSpec{Command: []string{"train"}, Queue: "spot"})
			// A first arrival the spot job cannot be stopped for lets the stall hold, so
			// that the arrival under test meets it holding.
			h.submit(api.JobSpec{GPUs: 8, Command: []string{"train"}, Queue: "batch"})
			h.wantDue(false, "a batch arrival made a cycle due while only spot work runs")
			h.submit(api.JobSpec{GPUs: 8, Command: []string{"train"}, Queue: c.queue})
			h.wantDue(c.due, fmt.Sprintf("a %s arrival: cycle due %v; want %v", c.queue, !c.due, c.due))
			if c.name == "higher tier" {
				// And the cycle it makes due stops the spot job for it, once the job has
				// run past the minimum runtime that protects it.
				h.clock.Add(sched.DefaultMinRuntime)
				h.beat("n1", 8, runningOK(running.ID))
				h.cycle()
				if !h.job(running.ID).PreemptRequested {
					t.Fatalf("the higher-tier arrival did not preempt the spot job: %+v", h.job(running.ID).Job)
				}
			}
		})
	}
	t.Run("cycle before the arrivals", func(t *testing.T) {
		// Arrivals between a cycle's snapshot and its end are weighed when it ends.
		for _, c := range []struct {
			queue string
			due   bool
		}{{"spot", false}, {"default", true}} {
			h := stallHarness(t)
			if code, e := h.putConfig(queues); code != http.StatusOK {
				t.Fatalf("config: %d %s", code, e.Message)
			}
			h.fullNode("n1", 8, api.JobSpec{Command: []string{"train"}, Queue: "spot"})
			h.submit(api.JobSpec{GPUs: 8, Command: []string{"train"}, Queue: "spot"})
			h.submitWhilePlanning(api.JobSpec{GPUs: 8, Command: []string{"train"}, Queue: c.queue})
			h.wantDue(c.due, fmt.Sprintf("a %s arrival while the cycle planned: cycle due %v; want %v", c.queue, !c.due, c.due))
		}
	})
}

// fullNodes gives each spec a node of its own of 8 GPUs (n1, n2, ...), running it on all
// of them, then submits waiting and runs the cycle that places nothing. It returns the
// running jobs, in the order of specs.
func (h *harness) fullNodes(waiting api.JobSpec, specs ...api.JobSpec) []api.Job {
	h.t.Helper()
	for i := range specs {
		h.beat(fmt.Sprintf("n%d", i+1), 8)
	}
	var jobs []api.Job
	for _, spec := range specs {
		spec.GPUs = 8
		j := h.submit(spec)
		h.cycle()
		d := h.job(j.ID)
		if d.State != api.StateAssigned || len(d.Nodes) != 1 {
			h.t.Fatalf("job %d of team %s is %s on %v; want ASSIGNED to a node of its own", j.ID, spec.Team, d.State, d.Nodes)
		}
		h.beat(d.Nodes[0], 8, runningOK(j.ID))
		jobs = append(jobs, j)
	}
	w := h.submit(waiting)
	h.cycle()
	if st := h.job(w.ID).State; st != api.StatePending {
		h.t.Fatalf("a job waiting on the full nodes is %s; want PENDING", st)
	}
	return jobs
}

// Running jobs that borrow stop the stall only for arrivals that could take their GPUs
// back: of another team with some of its guarantee unused, or, for GPUs borrowed inside
// a team, of the team's project with some of its guarantee unused.
func TestTheStallWeighsGuarantees(t *testing.T) {
	// Every queue on one tier and none preemptible: only quotas give a right to preempt.
	const teams = "queues:\n  - name: default\n    tier: 1\n" +
		"teams:\n" +
		"  - name: lender\n    quotas: {\"*\": {guaranteed: 8, limit: 16}}\n" +
		"  - name: borrower\n    quotas: {\"*\": {guaranteed: 0, limit: 16}}\n" +
		"  - name: capped\n    quotas: {\"*\": {limit: 16}}\n" +
		"  - name: partial\n    quotas: {\"*\": {guaranteed: 12, limit: 32}}\n" +
		"  - name: vision\n    quotas: {\"*\": {guaranteed: 16, limit: 32}}\n    projects:\n" +
		"      - name: det\n        quotas: {\"*\": {guaranteed: 8, limit: 24}}\n" +
		"      - name: seg\n        quotas: {\"*\": {guaranteed: 8, limit: 24}}\n"
	spec := func(team, project string) api.JobSpec {
		return api.JobSpec{GPUs: 8, Command: []string{"train"}, Team: team, Project: project}
	}
	setup := func(t *testing.T, policy []sched.Options, running ...api.JobSpec) (*harness, []api.Job) {
		h := stallHarness(t, policy...)
		if code, e := h.putConfig(teams); code != http.StatusOK {
			t.Fatalf("config: %d %s", code, e.Message)
		}
		// A job that waits for a whole node and, last in the queue, has no right to
		// preempt: no reservation it holds stands in an arrival's way.
		return h, h.fullNodes(api.JobSpec{GPUs: 8, Command: []string{"train"}, Team: "capped", Nice: 10000}, running...)
	}
	borrowed := []api.JobSpec{spec("borrower", "")}
	for _, c := range []struct {
		name    string
		policy  []sched.Options
		running []api.JobSpec
		arrival api.JobSpec
		due     bool
	}{
		{"its own team borrows", nil, borrowed, spec("borrower", ""), false},
		{"a team with a limit and no guarantee", nil, borrowed, spec("capped", ""), false},
		// A project's unused guarantee gives no right over its own team's borrowing.
		{"its own team borrows, a project with its guarantee unused", nil, []api.JobSpec{spec("vision", ""), spec("vision", ""), spec("vision", "")}, spec("vision", "seg"), false},
		{"a team with its guarantee unused", nil, borrowed, spec("lender", ""), true},
		{"a team with its guarantee unused, without preemption", []sched.Options{{NoPreemption: true}}, borrowed, spec("lender", ""), false},
		{"a team with its guarantee in use", nil, []api.JobSpec{spec("borrower", ""), spec("lender", "")}, spec("lender", ""), false},
		{"inside the team, a project with its guarantee unused", nil, []api.JobSpec{spec("vision", "det"), spec("vision", "det")}, spec("vision", "seg"), true},
		{"inside the team, the project that borrows", nil, []api.JobSpec{spec("vision", "det"), spec("vision", "det")}, spec("vision", "det"), false},
		{"another team than the one that borrows inside itself", nil, []api.JobSpec{spec("vision", "det"), spec("vision", "det")}, spec("lender", ""), false},
		// partial runs 8 of its 12: room in its guarantee for 4 GPUs, not for 8.
		{"a team with too little of its guarantee unused", nil, []api.JobSpec{spec("borrower", ""), spec("partial", "")}, spec("partial", ""), false},
		{"a team with enough of its guarantee unused", nil, []api.JobSpec{spec("borrower", ""), spec("partial", "")}, api.JobSpec{GPUs: 4, Command: []string{"train"}, Team: "partial"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, jobs := setup(t, c.policy, c.running...)
			// One running job borrows: the one a cycle that acts takes the GPUs of.
			var borrowing []int64
			for _, j := range jobs {
				if d := h.job(j.ID); d.Borrowing || d.BorrowingInTeam {
					borrowing = append(borrowing, j.ID)
				}
			}
			if len(borrowing) != 1 {
				t.Fatalf("running jobs that borrow: %v; want one", borrowing)
			}
			h.wantDue(false, "a cycle is due on full nodes with nothing changed")
			h.submit(c.arrival)
			h.wantDue(c.due, fmt.Sprintf("an arrival of %s/%s: cycle due %v; want %v", c.arrival.Team, c.arrival.Project, !c.due, c.due))
			// A cycle, once the borrowing job has run past the minimum runtime that
			// protects it, takes the borrowed GPUs back for the arrival exactly when the
			// stall let one be due: the stall never holds where the scheduler would act.
			h.clock.Add(sched.DefaultMinRuntime)
			for _, j := range jobs {
				h.beat(h.job(j.ID).Nodes[0], 8, runningOK(j.ID))
			}
			h.cycle()
			for _, j := range jobs {
				if got, want := h.job(j.ID).PreemptRequested, c.due && j.ID == borrowing[0]; got != want {
					t.Fatalf("after the cycle, job %d (team %s) is being preempted: %v; want %v", j.ID, j.Spec.Team, got, want)
				}
			}
		})
	}
	t.Run("cycle before the arrivals", func(t *testing.T) {
		// Arrivals between a cycle's snapshot and its end are weighed when it ends.
		for _, c := range []struct {
			team string
			due  bool
		}{{"borrower", false}, {"lender", true}} {
			h, _ := setup(t, nil, borrowed...)
			h.submitWhilePlanning(spec(c.team, ""))
			h.wantDue(c.due, fmt.Sprintf("an arrival of %s while the cycle planned: cycle due %v; want %v", c.team, !c.due, c.due))
		}
	})
}

func TestResyncEndsTheStall(t *testing.T) {
	h := stallHarness(t)
	h.fullNode("n1", 8, api.JobSpec{Command: []string{"train"}})
	h.submit(api.JobSpec{GPUs: 8, Command: []string{"train"}})
	h.wantDue(false, "an arrival that cannot start made a cycle due")
	h.srv.mu.Lock()
	h.srv.suspect = true
	err := h.srv.resync(context.Background())
	h.srv.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	h.wantDue(true, "no cycle due after the state was read again")
}

// grepLines returns the lines of text that hold sub.
func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Whatever the queues, quotas, policy and running work, an arrival the stall lets wait
// for the recompute is one the cycle would neither place nor preempt for: random
// clusters of full nodes, each case checked by running the cycle anyway.
func TestTheStallNeverHoldsWhereACycleWouldAct(t *testing.T) {
	const config = "queues:\n  - name: default\n    tier: 1\n  - name: spot\n    tier: 0\n    preemptible: true\n  - name: batch\n    tier: 0\n" +
		"teams:\n" +
		"  - name: capped\n    quotas: {\"*\": {limit: 32}}\n" +
		"  - name: a\n    quotas: {\"*\": {guaranteed: %d, limit: 32}}\n" +
		"  - name: b\n    quotas: {\"*\": {guaranteed: %d, limit: 32}}\n" +
		"  - name: vision\n    quotas: {\"*\": {guaranteed: 16, limit: 32}}\n    projects:\n" +
		"      - name: det\n        quotas: {\"*\": {guaranteed: %d, limit: 32}}\n" +
		"      - name: seg\n        quotas: {\"*\": {guaranteed: 8, limit: 32}}\n"
	scopes := [][2]string{{"capped", ""}, {"a", ""}, {"b", ""}, {"vision", ""}, {"vision", "det"}, {"vision", "seg"}}
	queues := []string{"default", "spot", "batch"}
	policies := []sched.Options{{}, {Order: sched.OrderLAS}, {NoPreemption: true}}
	held, due, acted := 0, 0, 0
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 11))
		pick := func(n int) int { return r.IntN(n) }
		spec := func() api.JobSpec {
			sc := scopes[pick(len(scopes))]
			return api.JobSpec{GPUs: 8, Command: []string{"train"}, Team: sc[0], Project: sc[1], Queue: queues[pick(len(queues))]}
		}
		h := stallHarness(t, policies[pick(len(policies))])
		if code, e := h.putConfig(fmt.Sprintf(config, []int{0, 8, 12, 16}[pick(4)], []int{0, 4, 8}[pick(3)], []int{0, 8}[pick(2)])); code != http.StatusOK {
			t.Fatalf("seed %d: config: %d %s", seed, code, e.Message)
		}
		running := make([]api.JobSpec, 2+pick(2))
		for i := range running {
			running[i] = spec()
		}
		// The waiting job can preempt nothing: the lowest tier, a queue that is not
		// preemptible, a team without a guarantee, last in its tier.
		jobs := h.fullNodes(api.JobSpec{GPUs: 8, Command: []string{"train"}, Team: "capped", Queue: "batch", Nice: 10000}, running...)
		// Past the minimum runtime, so that the cycle may stop any of them.
		h.clock.Add(sched.DefaultMinRuntime)
		for _, j := range jobs {
			h.beat(h.job(j.ID).Nodes[0], 8, runningOK(j.ID))
		}
		h.cycle()
		for _, j := range jobs {
			if h.job(j.ID).PreemptRequested {
				t.Fatalf("seed %d: the cycle before any arrival preempts job %d", seed, j.ID)
			}
		}
		arrival := spec()
		arrival.GPUs = []int{4, 8}[pick(2)]
		a := h.submit(arrival)
		if h.srv.cycleDue() {
			// The cycle may act or not: the stall errs only this way. How often it acts
			// says how close the stall's rules come to the scheduler's.
			due++
			h.cycle()
			if h.job(a.ID).State != api.StatePending || slices.ContainsFunc(jobs, func(j api.Job) bool { return h.job(j.ID).PreemptRequested }) {
				acted++
			}
			continue
		}
		held++
		h.cycle()
		if st := h.job(a.ID).State; st != api.StatePending {
			t.Fatalf("seed %d: the stall held for an arrival (%+v) the cycle then made %s", seed, arrival, st)
		}
		for _, j := range jobs {
			if d := h.job(j.ID); d.PreemptRequested {
				t.Fatalf("seed %d: the stall held for an arrival (%s/%s in %s) the cycle then preempted job %d (%s/%s in %s, borrowing %v, inside its team %v) for",
					seed, arrival.Team, arrival.Project, arrival.Queue, j.ID, d.Spec.Team, d.Spec.Project, d.Spec.Queue, d.Borrowing, d.BorrowingInTeam)
			}
		}
	}
	t.Logf("the stall held for %d arrivals; a cycle was due for %d, and acted for %d of them", held, due, acted)
	if held == 0 || due == 0 {
		t.Fatalf("the stall held for %d arrivals and let a cycle be due for %d: both must happen for this to test anything", held, due)
	}
}
