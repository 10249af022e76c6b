package sched

import (
	"strings"
	"testing"
	"time"
)

func withVersions(n Node, driver, cuda string) Node {
	n.DriverVersion, n.CUDAVersion = driver, cuda
	return n
}

func versionJob(id int64, gpus int, cuda, driver string) Job {
	j := job(id, gpus, "")
	j.Request.CUDA, j.Request.Driver = cuda, driver
	return j
}

func TestVersionConstraintsPlacement(t *testing.T) {
	t.Run("skips nodes outside the range", func(t *testing.T) {
		// Best fit would take a (4 GPUs, exactly the job); its CUDA is too old.
		s := snapshot([]Node{withVersions(gpuNode("a", "H100", 4), "535.104.05", "12.2"), withVersions(gpuNode("b", "H100", 8), "550.54.15", "12.4")},
			nil, versionJob(1, 4, ">=12.4", ""), job(2, 4, ""))
		p := mustSchedule(s, Options{})
		checkPlan(t, s, p)
		if pl, ok := placementOf(p, 1); !ok || pl.Allocs[0].Node != "b" {
			t.Errorf("CUDA >=12.4 job placed %+v; want on b", pl)
		}
		if pl, ok := placementOf(p, 2); !ok || pl.Allocs[0].Node != "a" {
			t.Errorf("plain job placed %+v; want on a, the best fit", pl)
		}
	})
	t.Run("driver range", func(t *testing.T) {
		s := snapshot([]Node{withVersions(gpuNode("a", "H100", 8), "535.104.05", "12.4"), withVersions(gpuNode("b", "H100", 8), "550.54.15", "12.4")},
			nil, versionJob(1, 2, "", ">=550,<560"))
		p := mustSchedule(s, Options{})
		if pl, ok := placementOf(p, 1); !ok || pl.Allocs[0].Node != "b" {
			t.Errorf("driver >=550,<560 job placed %+v; want on b", pl)
		}
	})
	t.Run("a node that reports no version satisfies no constraint", func(t *testing.T) {
		s := snapshot([]Node{withVersions(gpuNode("a", "H100", 8), "", "")}, nil, versionJob(1, 1, ">=0", ""), versionJob(2, 1, "", ""))
		p := mustSchedule(s, Options{})
		if _, ok := placementOf(p, 1); ok {
			t.Errorf("job with a CUDA range placed on a node that reports no CUDA version")
		}
		if _, ok := placementOf(p, 2); !ok {
			t.Errorf("job without a range not placed")
		}
		pj, _ := pendingOf(p, 1)
		if pj.Reason.Code != ReasonNoNodeMatches || pj.Reason.Message != "needs CUDA >=0; nodes report no version (1 node)" {
			t.Errorf("reason %+v", pj.Reason)
		}
	})
	t.Run("gangs and CPU-only jobs too", func(t *testing.T) {
		g := versionJob(1, 8, ">=12.4", "")
		g.Request.Nodes, g.Request.GPUsPerNode = 2, 4
		cpu := versionJob(2, 0, "<12.3", "")
		nodes := []Node{withVersions(gpuNode("a", "H100", 4), "550", "12.2"), withVersions(gpuNode("b", "H100", 4), "550", "12.4"),
			withVersions(gpuNode("c", "H100", 4), "550", "12.2"), withVersions(gpuNode("d", "H100", 4), "550", "12.4")}
		s := snapshot(nodes, nil, g, cpu)
		p := mustSchedule(s, Options{})
		checkPlan(t, s, p)
		if pl, ok := placementOf(p, 1); !ok || pl.Allocs[0].Node != "b" || pl.Allocs[1].Node != "d" {
			t.Errorf("gang placed %+v; want on b and d", pl)
		}
		if pl, ok := placementOf(p, 2); !ok || (pl.Allocs[0].Node != "a" && pl.Allocs[0].Node != "c") {
			t.Errorf("CPU-only job placed %+v; want on a or c", pl)
		}
	})
	t.Run("shared GPUs too", func(t *testing.T) {
		a, b := withVersions(gpuNode("a", "H100", 1), "550", "12.2"), withVersions(gpuNode("b", "H100", 1), "550", "12.4")
		a.Sharing, b.Sharing = true, true
		j := versionJob(1, 1, ">=12.4", "")
		j.Request.GPUShare = 500
		s := snapshot([]Node{a, b}, nil, j)
		p := mustSchedule(s, Options{})
		checkPlan(t, s, p)
		if pl, ok := placementOf(p, 1); !ok || pl.Allocs[0].Node != "b" {
			t.Errorf("shared job placed %+v; want on b", pl)
		}
		s = snapshot([]Node{a}, nil, j)
		pj, _ := pendingOf(mustSchedule(s, Options{}), 1)
		if pj.Reason.Code != ReasonNoNodeMatches || pj.Reason.Message != "no node that allows GPU sharing reports CUDA >=12.4" {
			t.Errorf("reason %+v", pj.Reason)
		}
	})
}

func TestVersionConstraintsReason(t *testing.T) {
	nodes := func() []Node {
		var out []Node
		for _, name := range []string{"a", "b", "c", "d"} {
			out = append(out, withVersions(gpuNode(name, "H100", 8), "535.104.05", "12.2"))
		}
		return append(out, withVersions(gpuNode("e", "H100", 2), "550.54.15", "12.4"))
	}
	for _, tc := range []struct {
		name string
		job  Job
		code ReasonCode
		want string
	}{
		{"CUDA no node reports", versionJob(1, 1, ">=12.8", ""), ReasonNoNodeMatches,
			"needs CUDA >=12.8; nodes report 12.2 (4 nodes), 12.4 (1 node)"},
		{"driver no node reports", versionJob(1, 1, "", ">=560"), ReasonNoNodeMatches,
			"needs driver >=560; nodes report 535.104.05 (4 nodes), 550.54.15 (1 node)"},
		{"both, never together", versionJob(1, 1, "<12.3", ">=550"), ReasonNoNodeMatches,
			"needs CUDA <12.3 and driver >=550 on one node; no node reports both (nodes report CUDA 12.2 (4 nodes), 12.4 (1 node); driver 535.104.05 (4 nodes), 550.54.15 (1 node))"},
		{"too large where the versions fit", versionJob(1, 4, ">=12.4", ""), ReasonNoNodeMatches,
			"no node has 4 GPUs; the largest has 2 among the nodes with CUDA >=12.4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pj, ok := pendingOf(mustSchedule(snapshot(nodes(), nil, tc.job), Options{}), 1)
			if !ok || pj.Reason.Code != tc.code || pj.Reason.Message != tc.want {
				t.Errorf("reason %+v\nwant %s: %s", pj.Reason, tc.code, tc.want)
			}
		})
	}
	t.Run("busy where the versions fit", func(t *testing.T) {
		s := snapshot(nodes(), []Running{busy(9, "e", time.Hour, 0, 1)}, versionJob(1, 2, ">=12.4", ""))
		p := mustSchedule(s, Options{})
		checkPlan(t, s, p)
		pj, _ := pendingOf(p, 1)
		if pj.Reason.Code != ReasonResources || pj.Reason.BestNode != "e" || pj.EstimatedStart != t0.Add(time.Hour) {
			t.Errorf("reason %+v, estimate %v; want Resources on e, from when its job ends", pj.Reason, pj.EstimatedStart)
		}
	})
	t.Run("unschedulable where the versions fit", func(t *testing.T) {
		ns := nodes()
		ns[4].Schedulable = false
		pj, _ := pendingOf(mustSchedule(snapshot(ns, nil, versionJob(1, 2, ">=12.4", "")), Options{}), 1)
		if pj.Reason.Code != ReasonResources || !strings.Contains(pj.Reason.Message, "no schedulable node with CUDA >=12.4 has 2 GPUs") {
			t.Errorf("reason %+v", pj.Reason)
		}
	})
	t.Run("a range the server would refuse", func(t *testing.T) {
		pj, _ := pendingOf(mustSchedule(snapshot(nodes(), nil, versionJob(1, 1, ">=13,<12", "")), Options{}), 1)
		if pj.Reason.Code != ReasonNoNodeMatches || !strings.Contains(pj.Reason.Message, "matches no version") {
			t.Errorf("reason %+v", pj.Reason)
		}
	})
}
