package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/sched"
)

// speedCluster is one H100 node and one T4 node of one GPU each, the T4 at a quarter of
// the H100's speed, with a preemptible and a non-preemptible queue.
const speedCluster = `
nodes:
  - {name: h100, gpus: 1, gpu_model: H100, cpus: 8, memory_mb: 65536}
  - {name: t4, gpus: 1, gpu_model: T4, cpus: 8, memory_mb: 65536}
queues:
  - {name: batch, tier: 0, preemptible: true}
  - {name: urgent, tier: 100, preemptible: false}
speeds: {H100: 1.0, T4: 0.25}
`

var speedT0 = time.Date(2025, 1, 6, 9, 0, 0, 0, time.UTC)

// speedEngine replays jobs on the cluster file under the default policy and returns the
// engine after the replay, for its per-job state. observe, if set, sees every snapshot.
func speedEngine(t *testing.T, clusterYAML string, cfg Config, jobs []Job, observe func(*sched.Snapshot, time.Time)) *engine {
	t.Helper()
	c, err := ParseCluster([]byte(clusterYAML))
	if err != nil {
		t.Fatal(err)
	}
	for i := range jobs {
		jobs[i].Line = i + 2
		jobs[i].CPUs, jobs[i].MemoryMB = 1, 1024
	}
	w, err := Prepare(&Trace{Format: "synthetic", Jobs: jobs}, c, true)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := plannerFor("default")
	if err != nil {
		t.Fatal(err)
	}
	e, err := newEngine(w, cfg, "default", func(s *sched.Snapshot, now time.Time) sched.Plan {
		if observe != nil {
			observe(s, now)
		}
		return plan(s, now)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return e
}

// A job's trace duration is its work at speed 1: an hour of work takes four hours on a T4 of
// speed 0.25 and one on the H100; a job's own speeds override the cluster's table.
func TestSpeedsStretchRunTime(t *testing.T) {
	jobs := []Job{
		{Submit: speedT0, Duration: time.Hour, TimeLimit: 10 * time.Hour, GPUs: 1, GPUModel: "T4"},
		{Submit: speedT0, Duration: time.Hour, TimeLimit: 10 * time.Hour, GPUs: 1, GPUModel: "H100"},
		{Submit: speedT0.Add(5 * time.Hour), Duration: time.Hour, TimeLimit: 10 * time.Hour, GPUs: 1, GPUModel: "T4",
			Speeds: map[string]float64{"T4": 0.5, "H100": 3}},
		{Submit: speedT0.Add(5 * time.Hour), Duration: time.Hour, TimeLimit: 10 * time.Hour, GPUs: 1, GPUModel: "H100",
			Speeds: map[string]float64{"T4": 0.5}},
	}
	e := speedEngine(t, speedCluster, DefaultConfig(), jobs, nil)
	for i, want := range []time.Duration{4 * time.Hour, time.Hour, 2 * time.Hour, time.Hour} {
		j := &e.jobs[i]
		if j.state != api.StateSucceeded || time.Duration(j.end-j.start) != want || j.progress != time.Hour {
			t.Errorf("job %d: %s, ran %v, work %v; want SUCCEEDED, %v, 1h", i+1, j.state, time.Duration(j.end-j.start), j.progress, want)
		}
	}
	// Without speeds the cluster replays as before: an hour is an hour on either model.
	plain := strings.Replace(speedCluster, "speeds: {H100: 1.0, T4: 0.25}\n", "", 1)
	e = speedEngine(t, plain, DefaultConfig(), jobs[:2], nil)
	for i := range 2 {
		if j := &e.jobs[i]; time.Duration(j.end-j.start) != time.Hour {
			t.Errorf("no speeds: job %d ran %v, want 1h", i+1, time.Duration(j.end-j.start))
		}
	}
}

// Time limits are wall time: a job slowed past its limit times out, having done the work
// its speed allowed.
func TestSpeedsTimeLimitInWallTime(t *testing.T) {
	// The "hour" rule gives an hour of work an hour's limit; on the T4 it needs four.
	jobs := []Job{{Submit: speedT0, Duration: time.Hour, GPUs: 1, GPUModel: "T4"}}
	e := speedEngine(t, speedCluster, DefaultConfig(), jobs, nil)
	j := &e.jobs[0]
	if j.state != api.StateTimeout || time.Duration(j.end-j.start) != time.Hour || j.progress != 15*time.Minute {
		t.Errorf("T4 job: %s after %v with %v of work done; want TIMEOUT after 1h with 15m", j.state, time.Duration(j.end-j.start), j.progress)
	}
}

// A job preempted on a slow GPU keeps the work it did, not the wall time it ran: two hours
// of work at speed 0.5, preempted after an hour (checkpointing every 30 minutes), has done
// half an hour and has an hour and a half left, three hours on the same GPU.
func TestSpeedsPreemptionKeepsWork(t *testing.T) {
	const half = `
nodes:
  - {name: t4, gpus: 1, gpu_model: T4, cpus: 8, memory_mb: 65536}
queues:
  - {name: batch, tier: 0, preemptible: true}
  - {name: urgent, tier: 100, preemptible: false}
speeds: {T4: 0.5}
`
	jobs := []Job{
		{Submit: speedT0, Duration: 2 * time.Hour, TimeLimit: 10 * time.Hour, GPUs: 1, Queue: "batch"},
		{Submit: speedT0.Add(time.Hour), Duration: time.Hour, TimeLimit: 10 * time.Hour, GPUs: 1, Queue: "urgent"},
	}
	cfg := DefaultConfig()
	cfg.Checkpoint = 30 * time.Minute
	var requeued []time.Duration // the remaining work job 1 is pending with, after a preemption
	e := speedEngine(t, half, cfg, jobs, func(s *sched.Snapshot, now time.Time) {
		for _, p := range s.Pending {
			if p.ID == 1 && now.After(speedT0) {
				requeued = append(requeued, p.Duration)
			}
		}
	})
	if e.stats.preemptions != 1 {
		t.Fatalf("%d preemptions, want 1", e.stats.preemptions)
	}
	if len(requeued) == 0 || requeued[0] != 90*time.Minute {
		t.Errorf("job 1 requeued with %v of work left, want 1h30m", requeued)
	}
	// Job 2 runs 1h–3h (an hour of work at 0.5); job 1 then needs 3h: it ends at 6h.
	j1, j2 := &e.jobs[0], &e.jobs[1]
	if j2.state != api.StateSucceeded || j2.start != int64(time.Hour) || j2.end != int64(3*time.Hour) {
		t.Errorf("job 2: %s from %v to %v; want SUCCEEDED 1h–3h", j2.state, time.Duration(j2.start), time.Duration(j2.end))
	}
	if j1.state != api.StateSucceeded || j1.end != int64(6*time.Hour) || j1.progress != 2*time.Hour || j1.attempts != 2 {
		t.Errorf("job 1: %s, ended at %v, work %v, %d attempts; want SUCCEEDED at 6h, 2h, 2", j1.state, time.Duration(j1.end), j1.progress, j1.attempts)
	}
}

func TestClusterSpeedsValidation(t *testing.T) {
	base := "nodes:\n  - {name: n, gpus: 1, gpu_model: \"Tesla T4\", cpus: 1, memory_mb: 1}\n  - {name: c, gpus: 0, cpus: 1, memory_mb: 1}\n"
	for _, c := range []struct{ speeds, want string }{
		{`{"Tesla T4": 0}`, `"Tesla T4": speed 0: must be positive`},
		{`{"Tesla T4": -1}`, `"Tesla T4": speed -1: must be positive`},
		{`{"Tesla T4": .nan}`, `"Tesla T4": speed NaN is not a finite number`},
		{`{"Tesla T4": .inf}`, `"Tesla T4": speed +Inf is not a finite number`},
		{`{"Tesla T4": 101}`, `"Tesla T4": speed 101: at most 100`},
		{`{"Tesla T4": 1, A100: 2}`, `"A100": no node of the cluster has that GPU model`},
		{`{"": 1}`, `"": no node of the cluster has that GPU model`},
		{`{"Tesla T4": fast}`, `cannot unmarshal`},
	} {
		_, err := ParseCluster([]byte(base + "speeds: " + c.speeds + "\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("speeds %s: error %v, want one containing %q", c.speeds, err, c.want)
		}
	}
	cl, err := ParseCluster([]byte(base + "speeds: {\"Tesla T4\": 0.25}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cl.Speed(nil, "Tesla T4") != 0.25 || cl.Speed(nil, "H100") != 1 || cl.Speed(map[string]float64{"Tesla T4": 0.5}, "Tesla T4") != 0.5 {
		t.Errorf("Speed: %v %v", cl.Speed(nil, "Tesla T4"), cl.Speed(nil, "H100"))
	}
	// --add-nodes keeps the table valid.
	if err := cl.AddNodes("2xH100"); err != nil {
		t.Fatal(err)
	}
}

func TestRotaSpeedsColumn(t *testing.T) {
	data := "submit,gpus,duration_s,speeds\n" +
		"2025-01-06T00:00:00Z,1,600,H100=1;T4=0.3\n" +
		"2025-01-06T00:00:00Z,1,600, NVIDIA H100 80GB HBM3 = 2 ; \n" +
		"2025-01-06T00:00:00Z,1,600,\n" +
		"2025-01-06T00:00:00Z,1,600,T4=0\n" +
		"2025-01-06T00:00:00Z,1,600,T4\n" +
		"2025-01-06T00:00:00Z,1,600,=1\n" +
		"2025-01-06T00:00:00Z,1,600,T4=x\n" +
		"2025-01-06T00:00:00Z,1,600,T4=NaN\n" +
		"2025-01-06T00:00:00Z,1,600,T4=1;T4=2\n" +
		"2025-01-06T00:00:00Z,1,600,T4=1e400\n" +
		"2025-01-06T00:00:00Z,1,600,;\n" +
		"2025-01-06T00:00:00Z,1,600,T4=101\n"
	tr, err := ReadTrace(strings.NewReader(data), "rota", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Jobs) != 3 {
		t.Fatalf("%d jobs, want 3; skipped %v", len(tr.Jobs), tr.Skipped)
	}
	if s := tr.Jobs[0].Speeds; len(s) != 2 || s["H100"] != 1 || s["T4"] != 0.3 {
		t.Errorf("job 1 speeds %v", s)
	}
	if s := tr.Jobs[1].Speeds; len(s) != 1 || s["NVIDIA H100 80GB HBM3"] != 2 {
		t.Errorf("job 2 speeds %v", s)
	}
	if tr.Jobs[2].Speeds != nil {
		t.Errorf("job 3 speeds %v, want none", tr.Jobs[2].Speeds)
	}
	if len(tr.Skipped) != 9 {
		t.Fatalf("skipped %v, want 9 rows", tr.Skipped)
	}
	for k, b := range tr.Skipped {
		if b.Line != k+5 || !strings.Contains(b.Reason, "bad speeds") {
			t.Errorf("skipped %v, want line %d with bad speeds", b, k+5)
		}
	}
	if _, err := ReadTrace(strings.NewReader(data), "rota", true); err == nil || !strings.Contains(err.Error(), "line 5") {
		t.Errorf("strict load: %v, want line 5 refused", err)
	}
}

// The report's header and JSON show the speed table; without one they are as before.
func TestReportShowsSpeeds(t *testing.T) {
	c, err := ParseCluster([]byte(speedCluster))
	if err != nil {
		t.Fatal(err)
	}
	jobs := []Job{
		{Line: 2, Submit: speedT0, Duration: time.Hour, GPUs: 1, Speeds: map[string]float64{"T4": 0.5}},
		{Line: 3, Submit: speedT0, Duration: time.Hour, GPUs: 1},
	}
	w, err := Prepare(&Trace{Format: "synthetic", Jobs: jobs}, c, true)
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{Workload: w, Config: DefaultConfig()}
	head := strings.Join(rep.header(), "\n")
	if want := "speeds:  H100 1, T4 0.25 (relative; other models 1); 1 jobs give their own per model"; !strings.Contains(head, want) {
		t.Errorf("header:\n%s\nwant a line with %q", head, want)
	}
	var b bytes.Buffer
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Cluster struct{ Speeds map[string]float64 } `json:"cluster"`
	}
	if err := json.Unmarshal(b.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if out.Cluster.Speeds["T4"] != 0.25 {
		t.Errorf("JSON cluster speeds %v", out.Cluster.Speeds)
	}
	c.Speeds = nil
	w.Jobs[0].Speeds = nil
	if head := strings.Join(rep.header(), "\n"); strings.Contains(head, "speeds") {
		t.Errorf("header without speeds:\n%s", head)
	}
}

// A job that lists models runs on the fastest of them that can start it: with both free,
// the H100 (an hour); with the H100 taken, the T4 (four hours) rather than waiting.
func TestListedModelsTakeTheFastest(t *testing.T) {
	jobs := []Job{
		{Submit: speedT0, Duration: time.Hour, TimeLimit: 10 * time.Hour, GPUs: 1, GPUModels: []string{"T4", "H100"}},
		{Submit: speedT0.Add(time.Minute), Duration: time.Hour, TimeLimit: 10 * time.Hour, GPUs: 1, GPUModels: []string{"T4", "H100"}},
	}
	e := speedEngine(t, speedCluster, DefaultConfig(), jobs, nil)
	for i, want := range []time.Duration{time.Hour, 4 * time.Hour} {
		if j := &e.jobs[i]; j.state != api.StateSucceeded || time.Duration(j.end-j.start) != want {
			t.Errorf("job %d: %s, ran %v; want SUCCEEDED in %v", i+1, j.state, time.Duration(j.end-j.start), want)
		}
	}
}

// A rota trace's gpu_model "A100,H100" is a list, as rota submit --gpu-model takes it.
func TestRotaTraceModelList(t *testing.T) {
	csv := "id,submit,duration_s,gpus,gpu_model\n1,2025-01-06T09:00:00Z,60,1,\"T4,H100\"\n"
	tr, err := ReadTrace(strings.NewReader(csv), "rota", true)
	if err != nil {
		t.Fatal(err)
	}
	if j := tr.Jobs[0]; j.GPUModel != "" || strings.Join(j.GPUModels, "|") != "T4|H100" {
		t.Fatalf("job %+v: want the list T4, H100", j)
	}
	if _, err := ReadTrace(strings.NewReader("id,submit,duration_s,gpus,gpu_model\n1,2025-01-06T09:00:00Z,60,1,\"T4,,H100\"\n"), "rota", true); err == nil {
		t.Fatal("an empty name in a model list was accepted")
	}
}
