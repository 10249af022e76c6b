package sched

import (
	"reflect"
	"testing"
	"time"
)

func gangJob(id int64, nodes, perNode int, model string) Job {
	j := job(id, nodes*perNode, model)
	j.Request.Nodes, j.Request.GPUsPerNode = nodes, perNode
	return j
}

func labelled(name, model, driver, rack, sw string) Node {
	n := gpuNode(name, model, 8)
	n.DriverVersion = driver
	n.Labels = map[string]string{"rack": rack, "switch": sw}
	return n
}

func TestGang(t *testing.T) {
	nodesOf := func(p Plan, id int64) []string {
		pl, ok := placementOf(p, id)
		if !ok {
			return nil
		}
		var out []string
		for _, a := range pl.Allocs {
			if len(a.GPUIndices) != 8 {
				t.Errorf("job %d got %d GPUs on %s", id, len(a.GPUIndices), a.Node)
			}
			out = append(out, a.Node)
		}
		return out
	}
	t.Run("prefers one switch, then one rack", func(t *testing.T) {
		nodes := []Node{
			labelled("n1", "H100", "550", "r1", "s1"),
			labelled("n2", "H100", "550", "r1", "s2"),
			labelled("n3", "H100", "550", "r2", "s3"),
			labelled("n4", "H100", "550", "r2", "s3"),
			labelled("n5", "H100", "550", "r1", "s4"),
		}
		p := mustSchedule(snapshot(nodes, nil, gangJob(1, 2, 8, "H100"), gangJob(2, 3, 8, "H100")), Options{})
		if got := nodesOf(p, 1); !reflect.DeepEqual(got, []string{"n3", "n4"}) {
			t.Errorf("job 1 on %v, want the switch s3", got)
		}
		if got := nodesOf(p, 2); !reflect.DeepEqual(got, []string{"n1", "n2", "n5"}) {
			t.Errorf("job 2 on %v, want rack r1", got)
		}
	})
	t.Run("one model and one driver", func(t *testing.T) {
		nodes := []Node{
			labelled("n1", "H100", "550", "r1", "s1"),
			labelled("n2", "H100", "535", "r1", "s1"),
			labelled("n3", "A100", "550", "r1", "s1"),
		}
		p := mustSchedule(snapshot(nodes, nil, gangJob(1, 2, 8, "")), Options{})
		if len(p.Placements) != 0 {
			t.Errorf("gang mixed models or drivers: %+v", p.Placements)
		}
		pj, _ := pendingOf(p, 1)
		if pj.Reason.Code != ReasonResources || pj.Reason.Missing["nodes"] != 1 {
			t.Errorf("reason %+v", pj.Reason)
		}
	})
	t.Run("never half placed, and reserved when blocked", func(t *testing.T) {
		nodes := []Node{labelled("n1", "H100", "550", "r1", "s1"), labelled("n2", "H100", "550", "r1", "s1")}
		running := []Running{busy(90, "n2", 2*time.Hour, 0), busy(91, "n1", time.Hour, 0)}
		p := mustSchedule(snapshot(nodes, running, gangJob(1, 2, 8, "H100"), job(2, 7, "H100")), Options{})
		if _, ok := placementOf(p, 1); ok {
			t.Errorf("gang placed with one GPU short: %+v", p.Placements)
		}
		pj, _ := pendingOf(p, 1)
		if !pj.EstimatedStart.Equal(t0.Add(2*time.Hour)) || !reflect.DeepEqual(p.Reservations[0].Nodes, []string{"n1", "n2"}) {
			t.Errorf("gang estimate %v, reservations %+v", pj.EstimatedStart.Sub(t0), p.Reservations)
		}
		// Job 2 runs one hour, which ends before the gang's reservation at +2h.
		if pj2, ok := pendingOf(p, 2); ok {
			t.Errorf("job 2 should backfill before the gang's reservation: %+v", pj2.Reason)
		}
	})
}

func TestNVLink(t *testing.T) {
	// Two NVLink islands: {0,1,2,3} fully linked, {4,5,6,7} fully linked; GPU 0 busy.
	n := gpuNode("gpu-01", "H100", 8)
	for i := range n.GPUs {
		base := i / 4 * 4
		for j := base; j < base+4; j++ {
			if j != i {
				n.GPUs[i].NVLinkPeers = append(n.GPUs[i].NVLinkPeers, j)
			}
		}
	}
	p := mustSchedule(snapshot([]Node{n}, []Running{busy(90, "gpu-01", time.Hour, 0)}, job(1, 4, "H100"), job(2, 3, "H100")), Options{})
	if pl, _ := placementOf(p, 1); !reflect.DeepEqual(pl.Allocs[0].GPUIndices, []int{4, 5, 6, 7}) {
		t.Errorf("4-GPU job got %v, want the free island 4-7", pl.Allocs[0].GPUIndices)
	}
	if pl, _ := placementOf(p, 2); !reflect.DeepEqual(pl.Allocs[0].GPUIndices, []int{1, 2, 3}) {
		t.Errorf("3-GPU job got %v", pl.Allocs[0].GPUIndices)
	}
	free := []int{0, 1, 2, 3, 4, 5, 6, 7}
	link := make([][]bool, 8)
	for i := range link {
		link[i] = make([]bool, 8)
		for j := range link[i] {
			link[i][j] = i/4 == j/4 && i != j
		}
	}
	if got := greedySet(free[1:], 4, link[1:]); len(got) != 4 {
		t.Errorf("greedy set %v", got)
	}
}

func TestWindowEstimate(t *testing.T) {
	s := snapshot([]Node{gpuNode("gpu-01", "H100", 8)}, nil, job(1, 8, "H100"))
	s.Reservations = []Reservation{{Name: "demo", Team: "nlp", Nodes: []string{"gpu-01"}, Start: t0.Add(30 * time.Minute), End: t0.Add(3 * time.Hour)}}
	p := mustSchedule(s, Options{})
	pj, _ := pendingOf(p, 1)
	if pj.Reason.Code != ReasonReserved || !pj.EstimatedStart.Equal(t0.Add(3*time.Hour)) {
		t.Errorf("job of another team: %+v at %v, want Reserved until +3h", pj.Reason, pj.EstimatedStart.Sub(t0))
	}
	s.Pending[0].TimeLimit = 20 * time.Minute // ends before the window opens
	if p := mustSchedule(s, Options{}); len(p.Placements) != 1 {
		t.Errorf("a job that ends before the window should start: %+v", p)
	}
	s.Pending[0].Team = "nlp"
	s.Pending[0].TimeLimit = 10 * time.Hour
	if p := mustSchedule(s, Options{}); len(p.Placements) != 1 {
		t.Errorf("the reserving team's job should start: %+v", p)
	}
}
