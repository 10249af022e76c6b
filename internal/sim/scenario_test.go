package sim

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/sched"
)

// replay runs a rota trace of testdata/scenarios on a cluster file there.
func replay(t *testing.T, trace, clusterFile string, cfg Config, policies ...string) map[string]*Result {
	t.Helper()
	tr, err := LoadTrace("testdata/scenarios/"+trace, "rota", true)
	if err != nil {
		t.Fatal(err)
	}
	c, err := LoadCluster("testdata/scenarios/" + clusterFile)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Prepare(tr, c, true)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), w, cfg, policies)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*Result{}
	for _, r := range res {
		out[r.Policy] = r
	}
	return out
}

func hm(h, m int) time.Duration { return time.Duration(h)*time.Hour + time.Duration(m)*time.Minute }

// TestFIFOvsSJF: five 1-GPU jobs on one GPU, submitted a minute apart:
//
//	A 00:00 4h, B 00:01 1h, C 00:02 3h, D 00:03 2h, E 00:04 30m.
//
// A starts at once under both policies; the others wait for it.
//
//	FIFO: A 0–4h, B 4h–5h, C 5h–8h, D 8h–10h, E 10h–10h30.
//	      JCT 4h, 4h59m, 7h58m, 9h57m, 10h26m: sum 37h20m, mean 7h28m, p50 7h58m.
//	      waits 0, 3h59m, 4h58m, 7h57m, 9h56m: mean 5h22m.
//	SJF:  at 4h the shortest goes first: E 4h–4h30, B –5h30, D –7h30, C –10h30.
//	      JCT 4h, 4h26m, 5h29m, 7h27m, 10h28m: sum 31h50m, mean 6h22m, p50 5h29m.
//	      waits 0, 3h56m, 4h29m, 5h27m, 7h28m: mean 4h16m.
//
// The makespan is 10h30m either way, and the GPU is never idle.
func TestFIFOvsSJF(t *testing.T) {
	res := replay(t, "fifo_sjf.csv", "one_gpu.yaml", DefaultConfig(), "fifo", "sjf")
	for _, c := range []struct {
		policy          string
		meanJCT, p50JCT time.Duration
		meanWait        time.Duration
	}{
		{"fifo", hm(7, 28), hm(7, 58), hm(5, 22)},
		{"sjf", hm(6, 22), hm(5, 29), hm(4, 16)},
	} {
		r := res[c.policy]
		if r.JCT.Mean != c.meanJCT || r.JCT.P50 != c.p50JCT || r.Wait.Mean != c.meanWait {
			t.Errorf("%s: JCT mean %v p50 %v, wait mean %v; want %v, %v, %v", c.policy,
				r.JCT.Mean, r.JCT.P50, r.Wait.Mean, c.meanJCT, c.p50JCT, c.meanWait)
		}
		if r.Makespan != hm(10, 30) || r.Utilisation != 1 || r.Succeeded != 5 {
			t.Errorf("%s: makespan %v, utilisation %v, succeeded %d; want 10h30m, 1, 5", c.policy, r.Makespan, r.Utilisation, r.Succeeded)
		}
	}
}

// TestBackfill: one node of 4 GPUs, time limits equal to durations.
//
//	A 00:00 2 GPUs 2h; B 00:01 4 GPUs 1h; C 00:02 2 GPUs 1h; D 00:03 2 GPUs 3h.
//
// A starts at 0. B needs the whole node and gets a reservation at 2h, when A's limit ends.
// C fits the two free GPUs and ends (1h02m) before 2h, so it is backfilled at 00:02. D
// would run past 2h and delay B, so it waits.
//
//	FIFO with backfill: A 0–2h, C 0:02–1:02, B 2h–3h, D 3h–6h.
//	                    JCT 2h, 1h, 2h59m, 5h57m: mean 2h59m.
//	Greedy (no reservations): D takes C's GPUs at 1:02 and B waits for both A and D:
//	                    A 0–2h, C 0:02–1:02, D 1:02–4:02, B 4:02–5:02.
//	                    JCT 2h, 1h, 3h59m, 5h01m: mean 3h00m.
func TestBackfill(t *testing.T) {
	res := replay(t, "backfill.csv", "four_gpus.yaml", DefaultConfig(), "fifo", "fifo+greedy")
	for _, c := range []struct {
		policy   string
		meanJCT  time.Duration
		p95JCT   time.Duration
		meanWait time.Duration
	}{
		// waits: 0, 1h59m (B), 0 (C), 2h57m (D): mean 1h14m.
		{"fifo", hm(2, 59), hm(5, 57), hm(1, 14)},
		// waits: 0, 4h01m (B), 0 (C), 59m (D): mean 1h15m.
		{"fifo+greedy", hm(3, 0), hm(5, 1), hm(1, 15)},
	} {
		r := res[c.policy]
		if r.JCT.Mean != c.meanJCT || r.JCT.P95 != c.p95JCT || r.Wait.Mean != c.meanWait {
			t.Errorf("%s: JCT mean %v p95 %v, wait mean %v; want %v, %v, %v", c.policy,
				r.JCT.Mean, r.JCT.P95, r.Wait.Mean, c.meanJCT, c.p95JCT, c.meanWait)
		}
	}
}

// TestPreemption: one GPU; L (batch, preemptible, 3h) starts at 0; U (urgent, a higher
// tier, 1h) arrives at 1h. Jobs checkpoint every 40 minutes.
//
//	default: at 1h L is preempted; it saved its work at 40m, so 20 GPU-minutes are lost
//	         (0.33 GPU-hours) and 2h20m remain. U runs 1h–2h, L 2h–4h20m.
//	         JCT U 1h, L 4h20m: mean 2h40m; one preemption; makespan 4h20m.
func TestPreemption(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Checkpoint = 40 * time.Minute
	r := replay(t, "preempt.csv", "preempt.yaml", cfg, "default")["default"]
	if r.Preemptions != 1 || r.JCT.Mean != hm(2, 40) || r.JCT.P50 != hm(1, 0) || r.Makespan != hm(4, 20) {
		t.Errorf("preemptions %d, JCT mean %v p50 %v, makespan %v; want 1, 2h40m, 1h, 4h20m",
			r.Preemptions, r.JCT.Mean, r.JCT.P50, r.Makespan)
	}
	if got, want := r.PreemptionGPUHours, 20.0/60; got < want-1e-9 || got > want+1e-9 {
		t.Errorf("GPU-hours lost to preemption %v, want %v", got, want)
	}
	if r.Utilisation != 1 {
		t.Errorf("utilisation %v, want 1: the GPU is never idle", r.Utilisation)
	}
}

// TestGangPreemption: two nodes of 8 GPUs; B1 and B2 (batch, 8 GPUs, 3h) start at 0 on one
// node each; U (urgent, a gang of 2 × 8 GPUs, 1h) arrives at 1h. Jobs checkpoint every 40
// minutes.
//
//	default: at 1h both batch jobs are preempted in one plan, for one claim over both
//	         nodes; each saved its work at 40m, so 2 × 8 GPUs × 20 minutes are lost (5.33
//	         GPU-hours) and 2h20m remain. U runs 1h–2h on the claimed nodes; B1 and B2
//	         2h–4h20m. JCT U 1h, B1 and B2 4h20m: mean 3h13m20s; makespan 4h20m.
//	nopreempt: U waits for the batch jobs: 3h–4h. JCT 3h each; makespan 4h.
func TestGangPreemption(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Checkpoint = 40 * time.Minute
	res := replay(t, "gang_preempt.csv", "two_nodes.yaml", cfg, "default", "nopreempt")
	r := res["default"]
	if r.Preemptions != 2 || r.JCT.Mean != hm(3, 13)+20*time.Second || r.JCT.P50 != hm(4, 20) || r.Makespan != hm(4, 20) {
		t.Errorf("default: preemptions %d, JCT mean %v p50 %v, makespan %v; want 2, 3h13m20s, 4h20m, 4h20m",
			r.Preemptions, r.JCT.Mean, r.JCT.P50, r.Makespan)
	}
	if got, want := r.PreemptionGPUHours, 2*8*20.0/60; got < want-1e-9 || got > want+1e-9 {
		t.Errorf("GPU-hours lost to preemption %v, want %v", got, want)
	}
	if r := res["nopreempt"]; r.Preemptions != 0 || r.JCT.Mean != hm(3, 0) || r.Makespan != hm(4, 0) {
		t.Errorf("nopreempt: preemptions %d, JCT mean %v, makespan %v; want 0, 3h, 4h", r.Preemptions, r.JCT.Mean, r.Makespan)
	}
}

// TestClaimsCarried: the engine passes a plan's claims back in the next snapshot while
// their jobs wait, as the server does, and drops them once the jobs start.
func TestClaimsCarried(t *testing.T) {
	tr, err := LoadTrace("testdata/scenarios/gang_preempt.csv", "rota", true)
	if err != nil {
		t.Fatal(err)
	}
	c, err := LoadCluster("testdata/scenarios/two_nodes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	w, err := Prepare(tr, c, true)
	if err != nil {
		t.Fatal(err)
	}
	inner, err := plannerFor("default")
	if err != nil {
		t.Fatal(err)
	}
	type call struct {
		in     []sched.Claim
		placed []int64
		out    []sched.Claim
	}
	var calls []call
	plan := func(s *sched.Snapshot, now time.Time) sched.Plan {
		in := slices.Clone(s.Claims)
		p := inner(s, now)
		cl := call{in: in, out: p.Claims}
		for _, pl := range p.Placements {
			cl.placed = append(cl.placed, pl.JobID)
		}
		calls = append(calls, cl)
		return p
	}
	if _, err := runWith(context.Background(), w, DefaultConfig(), []string{"default"}, []planFunc{plan}); err != nil {
		t.Fatal(err)
	}
	// U is job 3: one plan claims both nodes for it, the next is given the claim and
	// starts it there, and no later plan sees a claim.
	k := slices.IndexFunc(calls, func(c call) bool { return len(c.out) > 0 })
	if k < 0 || k+1 >= len(calls) || len(calls[k].out) != 1 || calls[k].out[0].JobID != 3 || len(calls[k].out[0].Allocs) != 2 {
		t.Fatalf("no plan claimed two nodes for job 3: %+v", calls)
	}
	next := calls[k+1]
	if !reflect.DeepEqual(next.in, calls[k].out) || !slices.Contains(next.placed, 3) {
		t.Errorf("the next plan got claims %+v and placed %v; want the claim, and job 3 placed", next.in, next.placed)
	}
	for _, c := range calls[k+2:] {
		if len(c.in) > 0 {
			t.Errorf("a claim outlived its job's start: %+v", c.in)
		}
	}
}

// TestTimeLimit: with a fixed 90-minute limit the longer jobs end in TIMEOUT at 90 minutes.
func TestTimeLimit(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TimeLimit = "90m"
	r := replay(t, "fifo_sjf.csv", "one_gpu.yaml", cfg, "fifo")["fifo"]
	// A (4h), C (3h) and D (2h) time out at 1h30m; B (1h) and E (30m) finish.
	//   A 0–1:30, B 1:30–2:30, C 2:30–4:00, D 4:00–5:30, E 5:30–6:00.
	if r.TimedOut != 3 || r.Succeeded != 2 || r.Makespan != hm(6, 0) {
		t.Errorf("timed out %d, succeeded %d, makespan %v; want 3, 2, 6h", r.TimedOut, r.Succeeded, r.Makespan)
	}
}

// TestScale: doubling the arrival rate halves every submit offset: E arrives at 00:02.
func TestScale(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Scale = 2
	r := replay(t, "fifo_sjf.csv", "one_gpu.yaml", cfg, "fifo")["fifo"]
	// FIFO as above, with arrivals at 0, 30s, 60s, 90s and 120s: the ends are 4h, 5h, 8h,
	// 10h and 10h30m, so the JCT sum is 37h30m less 5 minutes of offsets: mean 7h29m.
	if r.JCT.Mean != hm(7, 29) {
		t.Errorf("JCT mean %v, want 7h29m", r.JCT.Mean)
	}
}

// TestFill: the FGD paper's workload takes every job once, topped up with draws until the
// GPU requests (fractions kept) reach the target, in an order fixed by the seed, and the jobs
// never end; each placement allocates no more than the cluster has.
func TestFill(t *testing.T) {
	tr := mustLoad(t, "testdata/alibaba_pods.csv", "alibaba-gpu2023")
	c, err := LoadCluster("testdata/alibaba_nodes.csv")
	if err != nil {
		t.Fatal(err)
	}
	w, err := Prepare(tr, c, true)
	if err != nil {
		t.Fatal(err)
	}
	a, err := FillWorkload(w, 1.3, 42)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := FillWorkload(w, 1.3, 42)
	var milli int64
	names := map[string]bool{}
	for i, j := range a.Jobs {
		milli += gpuRequest(j)
		names[j.Name] = true
		if j.Name != b.Jobs[i].Name || j.Duration != 0 || j.Submit != a.Jobs[0].Submit.Add(time.Duration(i)*time.Second) {
			t.Fatalf("job %d: %+v (other draw %s)", i, j, b.Jobs[i].Name)
		}
	}
	// 30 GPUs × 1.3 = 39,000 milli-GPU: the last job is the one that reaches it.
	if last := gpuRequest(a.Jobs[len(a.Jobs)-1]); milli < 39000 || milli-last >= 39000 {
		t.Errorf("requested %d milli-GPU, last job %d; want the last to reach 39000", milli, last)
	}
	// The trace's 19 jobs request less than 39 GPUs: all of them come, and draws on top.
	if len(names) != 19 {
		t.Errorf("%d distinct jobs of 19", len(names))
	}
	res, err := RunFill(context.Background(), a, []Placement{PlacementFGD, PlacementBestFit, PlacementPacking}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Jobs != len(a.Jobs) || r.NeverStarted+r.Unfinished != len(a.Jobs) || r.FillAllocEnd <= 0 || r.FillAllocEnd > 1 ||
			r.FillAlloc100 > r.FillAllocEnd {
			t.Errorf("%s: fill result %+v", r.Policy, r)
		}
	}
}
