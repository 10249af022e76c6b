package sched

import (
	"strings"
	"testing"
	"time"
)

// A maintenance window planned on one of two nodes: a job whose time limit ends before the
// window opens still starts there, one whose limit would cross the start goes to the other
// node, and a job without a time limit never starts on the node once a window is planned.
func TestMaintenanceWindowBackfill(t *testing.T) {
	nodes := []Node{gpuNode("gpu-01", "H100", 8)}
	win := []Maintenance{{Node: "gpu-01", Reason: "BIOS update", Start: t0.Add(2 * time.Hour)}}

	short := job(1, 4, "H100") // one hour: ends before +2h
	s := snapshot(nodes, nil, short)
	s.Maintenance = win
	p := mustSchedule(s, Options{})
	if _, ok := placementOf(p, 1); !ok {
		t.Fatalf("a job ending before the window did not start: %+v", p.Pending)
	}

	long := job(2, 4, "H100")
	long.TimeLimit = 3 * time.Hour // would run into the window
	s = snapshot(nodes, nil, long)
	s.Maintenance = win
	p = mustSchedule(s, Options{})
	pj, ok := pendingOf(p, 2)
	if !ok {
		t.Fatalf("a job crossing the window's start was placed: %+v", p.Placements)
	}
	if pj.Reason.Code != ReasonMaintenance || pj.Reason.BestNode != "gpu-01" ||
		!strings.Contains(pj.Reason.Message, "goes into maintenance at 2025-01-06 11:00:00") || !strings.Contains(pj.Reason.Message, "BIOS update") {
		t.Errorf("reason %+v; want Maintenance on gpu-01 naming the start and the reason", pj.Reason)
	}
	// An open-ended window never ends: no estimate can be made.
	if !pj.EstimatedStart.IsZero() {
		t.Errorf("estimated start %v behind an open-ended window; want none", pj.EstimatedStart)
	}

	unlimited := job(3, 1, "H100")
	unlimited.TimeLimit = 0
	s = snapshot(nodes, nil, unlimited)
	s.Maintenance = []Maintenance{{Node: "gpu-01", Start: t0.Add(30 * 24 * time.Hour), End: t0.Add(31 * 24 * time.Hour)}}
	p = mustSchedule(s, Options{})
	if pj, ok := pendingOf(p, 3); !ok || pj.Reason.Code != ReasonMaintenance || !strings.Contains(pj.Reason.Message, "no time limit") {
		t.Errorf("a job without a time limit on a node with a window a month ahead: %+v; want pending, Maintenance, naming the missing limit", pj)
	}

	// With a second node free of maintenance, the long job goes there.
	s = snapshot([]Node{gpuNode("gpu-01", "H100", 8), gpuNode("gpu-02", "H100", 8)}, nil, long)
	s.Maintenance = win
	p = mustSchedule(s, Options{})
	if pl, ok := placementOf(p, 2); !ok || pl.Allocs[0].Node != "gpu-02" {
		t.Errorf("long job: %+v; want it on gpu-02, away from the window", pl)
	}
}

// A window with an end: a blocked job's estimated start is the window's end, the window
// holds every team's jobs alike (unlike a reservation), and once the end has passed the
// node takes work again.
func TestMaintenanceWindowEnd(t *testing.T) {
	nodes := []Node{gpuNode("gpu-01", "H100", 8)}
	win := []Maintenance{{Node: "gpu-01", Reason: "PSU swap", Start: t0.Add(30 * time.Minute), End: t0.Add(4 * time.Hour)}}
	other := job(1, 8, "H100")
	other.Team = "nlp"
	s := snapshot(nodes, nil, other)
	s.Maintenance = win
	p := mustSchedule(s, Options{})
	pj, ok := pendingOf(p, 1)
	if !ok || pj.Reason.Code != ReasonMaintenance || !pj.EstimatedStart.Equal(t0.Add(4*time.Hour)) {
		t.Errorf("job during the window's approach: %+v; want Maintenance, estimated at the window's end (+4h)", pj)
	}
	if len(p.Reservations) != 1 || !p.Reservations[0].Start.Equal(t0.Add(4*time.Hour)) {
		t.Errorf("reservations %+v; want one at +4h", p.Reservations)
	}

	// Inside the window: nothing starts, whatever its limit.
	tiny := job(2, 1, "H100")
	tiny.TimeLimit = time.Minute
	s = snapshot(nodes, nil, tiny)
	s.Maintenance = win
	p, _ = ScheduleWith(s, t0.Add(time.Hour), Options{})
	if pj, ok := pendingOf(p, 2); !ok || !strings.Contains(pj.Reason.Message, "is in maintenance (PSU swap)") {
		t.Errorf("a one-minute job inside the window: %+v; want pending, in maintenance", pj)
	}

	// After the end: the node is back.
	p, _ = ScheduleWith(s, t0.Add(4*time.Hour), Options{})
	if _, ok := placementOf(p, 2); !ok {
		t.Errorf("after the window's end the job did not start: %+v", p.Pending)
	}
}

// A gang never takes a node whose window its run would cross, and the window's node does
// not count towards the gang's estimate until it ends.
func TestMaintenanceWindowGang(t *testing.T) {
	nodes := []Node{gpuNode("gpu-01", "H100", 8), gpuNode("gpu-02", "H100", 8), gpuNode("gpu-03", "H100", 8)}
	g := job(1, 16, "H100")
	g.Request.Nodes, g.Request.GPUsPerNode = 2, 8
	g.TimeLimit = 2 * time.Hour
	s := snapshot(nodes, nil, g)
	s.Maintenance = []Maintenance{{Node: "gpu-01", Start: t0.Add(time.Hour), End: t0.Add(3 * time.Hour)}}
	p := mustSchedule(s, Options{})
	pl, ok := placementOf(p, 1)
	if !ok {
		t.Fatalf("gang not placed on the two nodes without a window: %+v", p.Pending)
	}
	for _, a := range pl.Allocs {
		if a.Node == "gpu-01" {
			t.Errorf("gang placed on gpu-01, whose window opens during its run: %+v", pl.Allocs)
		}
	}
}
