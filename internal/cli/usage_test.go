package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// showText is what rota show prints for d.
func showText(d api.JobDetail) string {
	var out bytes.Buffer
	printJobDetail(Config{Stdout: &out, Now: func() time.Time { return testNow }, Location: time.UTC}, d)
	return out.String()
}

func TestShowUsageAndImage(t *testing.T) {
	running := func(edit func(*api.JobDetail)) api.JobDetail {
		d := api.JobDetail{Job: api.Job{ID: 7, Spec: api.JobSpec{Command: []string{"x"}, GPUs: 1}, State: api.StateRunning,
			SubmitTime: *at(-time.Hour), StartTime: at(-30 * time.Minute), Attempts: 1}}
		edit(&d)
		return d
	}
	someUsage := func() *api.Usage {
		return &api.Usage{Samples: 3, GPUUtilPct: api.Stat{Mean: 50, P95: 60, Last: 40},
			GPUMemoryMB: api.Stat{Mean: 1024, P95: 2048, Max: 3072}, CPUPct: api.Stat{Mean: 250, P95: 300, Last: 100},
			MemoryMB: api.Stat{Mean: 512, P95: 600, Max: 60 << 10}}
	}
	gpuError := api.Attempt{N: 1, State: api.StateFailed, Reason: api.ReasonGPUError,
		Placements: []api.Placement{{Node: "n1", Message: "GPU 3 failed: XID 79\n\x1b[31m(fallen off the bus)"}}}
	for _, tc := range []struct {
		name      string
		d         api.JobDetail
		want, not []string
	}{
		{"running without usage", running(func(d *api.JobDetail) {}), []string{"\nUsage: no telemetry yet\n"}, []string{"GPU util"}},
		{"running with no samples", running(func(d *api.JobDetail) { d.Usage = &api.Usage{} }), []string{"\nUsage: no telemetry yet\n"}, nil},
		{"assigned", running(func(d *api.JobDetail) { d.State, d.StartTime = api.StateAssigned, nil }), []string{"Usage: no telemetry yet"}, nil},
		{"ended without telemetry", running(func(d *api.JobDetail) { d.State, d.EndTime = api.StateSucceeded, at(-time.Minute) }),
			[]string{"\nUsage: no telemetry was recorded\n"}, nil},
		{"cancelled before it started", running(func(d *api.JobDetail) { d.State, d.StartTime, d.Attempts = api.StateCancelled, nil, 0 }),
			nil, []string{"Usage"}},
		{"pending", running(func(d *api.JobDetail) { d.State, d.StartTime, d.Attempts = api.StatePending, nil, 0 }), nil, []string{"Usage", "Idle"}},
		{"figures", running(func(d *api.JobDetail) { d.Usage = someUsage() }),
			[]string{"\nUsage (attempt 1, 3 samples):\n", "  GPU util:    mean 50%, p95 60%, last 40%\n",
				"  GPU memory:  mean 1G, p95 2G, peak 3G\n", "  CPUs busy:   mean 2.5, p95 3, last 1\n", "  Memory:      mean 512M, p95 600M, peak 60G\n"},
			nil},
		{"a CPU job has no GPU lines", running(func(d *api.JobDetail) { d.Spec.GPUs, d.Usage = 0, someUsage() }),
			[]string{"  CPUs busy:"}, []string{"GPU util", "GPU memory"}},
		{"the cgroup's peak beats the readings'", running(func(d *api.JobDetail) {
			d.Usage = someUsage()
			d.Usage.PeakMemoryMB = 70 << 10
		}), []string{"peak 70G\n"}, []string{"peak 60G"}},
		{"idle, not yet warned", running(func(d *api.JobDetail) { d.IdleSince = at(-12 * time.Minute) }),
			[]string{"Idle:        since 2026-03-01 11:48:00 UTC (12m00s ago)\n"}, []string{"warned"}},
		{"image, digest not yet known", running(func(d *api.JobDetail) {
			d.Spec.Image = "ubuntu:24.04"
			d.AttemptList = []api.Attempt{{N: 1, State: api.StateRunning, Placements: []api.Placement{{Node: "n1"}}}}
		}), []string{"Image:       ubuntu:24.04\n"}, []string{"Image digest"}},
		{"ranks ran different digests", running(func(d *api.JobDetail) {
			d.Spec.Image = "ubuntu:24.04"
			d.AttemptList = []api.Attempt{{N: 1, State: api.StateRunning, Placements: []api.Placement{
				{Node: "n1", ImageDigest: "sha256:aa"}, {Node: "n2"}, {Node: "n3", ImageDigest: "sha256:bb"}}}}
		}), []string{"Image digest:  sha256:aa (rank 0), sha256:bb (rank 2)\n"}, nil},
		{"ranks ran one digest", running(func(d *api.JobDetail) {
			d.Spec.Image = "ubuntu:24.04"
			d.AttemptList = []api.Attempt{{N: 1, State: api.StateRunning, Placements: []api.Placement{
				{Node: "n1", ImageDigest: "sha256:aa"}, {Node: "n2", ImageDigest: "sha256:aa"}}}}
		}), []string{"Image digest:  sha256:aa\n"}, []string{"rank 0"}},
		{"a GPU error's message, cleaned", running(func(d *api.JobDetail) {
			d.State, d.Reason, d.Message = api.StateFailed, api.ReasonGPUError, "GPU 3 failed\nnext line"
			d.AttemptList = []api.Attempt{gpuError}
		}), []string{"Message:     GPU 3 failed next line\n", "  attempt 1, gpu_error: GPU 3 failed: XID 79 \\x1b[31m(fallen off the bus)\n"}, nil},
		{"a rank without telemetry among ranks with it", running(func(d *api.JobDetail) {
			d.Spec.GPUs = 0
			d.AttemptList = []api.Attempt{{N: 1, State: api.StateRunning, Placements: []api.Placement{
				{Node: "n1", Usage: someUsage()}, {Node: "n2", Usage: &api.Usage{}}}}}
		}), []string{"\nUsage by rank of attempt 1:\n  RANK  NODE  CPUS MEAN/P95/LAST  MEM MEAN/P95/PEAK\n" +
			"  0     n1    2.5/3/1             512M/600M/60G\n  1     n2    no telemetry\n"}, []string{"UTIL MEAN"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := showText(tc.d)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out, n) {
					t.Errorf("output has %q:\n%s", n, out)
				}
			}
			if strings.ContainsRune(out, '\x1b') {
				t.Errorf("output has an escape character:\n%s", out)
			}
		})
	}
}

func TestQueueStateIdle(t *testing.T) {
	for _, tc := range []struct {
		j    api.Job
		want string
	}{
		{api.Job{State: api.StateRunning}, "RUNNING"},
		{api.Job{State: api.StateRunning, IdleSince: at(-34*time.Minute - 5*time.Second)}, "RUNNING (idle 34m05s)"},
		// A job that ended while idle is no longer flagged in the queue.
		{api.Job{State: api.StateFailed, Reason: api.ReasonIdle, IdleSince: at(-time.Hour)}, "FAILED"},
	} {
		if got := jobState(tc.j, testNow); got != tc.want {
			t.Errorf("jobState(%s, idle since %v) = %q, want %q", tc.j.State, tc.j.IdleSince, got, tc.want)
		}
	}
}
