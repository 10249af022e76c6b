package sched

import (
	"strings"
	"testing"
	"time"
)

// shareNode is gpuNode in a pool that allows sharing.
func shareNode(name string, n int) Node {
	nd := gpuNode(name, "H100", n)
	nd.Sharing = true
	return nd
}

// shareJob asks for milli of one GPU.
func shareJob(id int64, milli int) Job {
	j := job(id, 1, "")
	j.Request.GPUShare = milli
	return j
}

// sliceJob asks for a memory slice of one GPU.
func sliceJob(id int64, mb int64) Job {
	j := job(id, 1, "")
	j.Request.GPUMemoryMB = mb
	return j
}

// tenantOf is a running job holding milli of GPU idx of node until end after t0.
func tenantOf(id int64, node string, idx, milli int, end time.Duration) Running {
	r := busy(id, node, end, idx)
	r.Allocs[0].GPUShare = milli
	r.Allocs[0].GPUMemoryMB = int64(milli) * (80 << 10) / MilliGPU
	return r
}

func allocOf(t *testing.T, p Plan, id int64) Alloc {
	t.Helper()
	pl, ok := placementOf(p, id)
	if !ok {
		pj, _ := pendingOf(p, id)
		t.Fatalf("job %d not placed: %s %s", id, pj.Reason.Code, pj.Reason.Message)
	}
	return pl.Allocs[0]
}

func TestShareTwoHalvesShareOneGPU(t *testing.T) {
	for _, placement := range []string{SharePlacementFGD, SharePlacementBestFit, SharePlacementPacking} {
		t.Run(placement, func(t *testing.T) {
			p := mustSchedule(snapshot([]Node{shareNode("gpu-01", 2)}, nil, shareJob(1, 500), shareJob(2, 500), shareJob(3, 500)),
				Options{SharePlacement: placement})
			a1, a2, a3 := allocOf(t, p, 1), allocOf(t, p, 2), allocOf(t, p, 3)
			if a1.GPUIndices[0] != a2.GPUIndices[0] {
				t.Errorf("two halves went to GPUs %v and %v; want one GPU", a1.GPUIndices, a2.GPUIndices)
			}
			if a3.GPUIndices[0] == a1.GPUIndices[0] {
				t.Errorf("a third half went to the full GPU %v", a3.GPUIndices)
			}
			if a1.GPUShare != 500 || a1.GPUMemoryMB != 40<<10 {
				t.Errorf("alloc %+v: want share 500 and a 40 GB slice", a1)
			}
		})
	}
}

func TestShareWholeGPUJobsNeverLandOnTenants(t *testing.T) {
	// GPU 0 has a tenant with room left; the whole-GPU job takes GPU 1, and a 2-GPU job
	// cannot start although "room" is left on GPU 0.
	s := snapshot([]Node{shareNode("gpu-01", 2)}, []Running{tenantOf(90, "gpu-01", 0, 250, time.Hour)}, job(1, 1, ""), job(2, 1, ""))
	p := mustSchedule(s, Options{})
	if a := allocOf(t, p, 1); a.GPUIndices[0] != 1 {
		t.Fatalf("whole-GPU job got %v; want GPU 1, the one without tenants", a.GPUIndices)
	}
	if _, ok := placementOf(p, 2); ok {
		t.Fatal("a second whole-GPU job was placed on the GPU with a tenant")
	}
	// And a tenant never joins a GPU a whole-GPU job holds.
	s = snapshot([]Node{shareNode("gpu-01", 2)}, []Running{busy(90, "gpu-01", time.Hour, 0)}, shareJob(1, 100))
	if a := allocOf(t, mustSchedule(s, Options{}), 1); a.GPUIndices[0] != 1 {
		t.Fatalf("tenant got %v; want GPU 1", a.GPUIndices)
	}
}

func TestShareMemorySlices(t *testing.T) {
	// 20 GB of an 80 GB GPU is a quarter: four fit on one GPU, the fifth takes another.
	var jobs []Job
	for i := int64(1); i <= 5; i++ {
		jobs = append(jobs, sliceJob(i, 20<<10))
	}
	p := mustSchedule(snapshot([]Node{shareNode("gpu-01", 2)}, nil, jobs...), Options{SharePlacement: SharePlacementBestFit})
	count := map[int]int{}
	for i := int64(1); i <= 5; i++ {
		a := allocOf(t, p, i)
		if a.GPUShare != 250 || a.GPUMemoryMB != 20<<10 {
			t.Errorf("job %d: alloc %+v, want share 250 and 20 GB", i, a)
		}
		count[a.GPUIndices[0]]++
	}
	if count[0] != 4 || count[1] != 1 {
		t.Errorf("tenants per GPU %v; want 4 on GPU 0 and 1 on GPU 1", count)
	}
}

func TestShareRefusedWhereNotAllowed(t *testing.T) {
	plain := gpuNode("gpu-01", "H100", 8)
	p := mustSchedule(snapshot([]Node{plain}, nil, shareJob(1, 500)), Options{})
	pj, ok := pendingOf(p, 1)
	if !ok || pj.Reason.Code != ReasonNoNodeMatches || !strings.Contains(pj.Reason.Message, "allows GPU sharing") {
		t.Fatalf("on a pool without sharing: %+v", pj.Reason)
	}
	// A slice larger than any GPU.
	p = mustSchedule(snapshot([]Node{shareNode("gpu-01", 2)}, nil, sliceJob(1, 100<<10)), Options{})
	pj, _ = pendingOf(p, 1)
	if pj.Reason.Code != ReasonNoNodeMatches || !strings.Contains(pj.Reason.Message, "100 GB") || !strings.Contains(pj.Reason.Message, "80 GB") {
		t.Fatalf("slice larger than any GPU: %+v", pj.Reason)
	}
	// Several GPUs or nodes with a share.
	bad := shareJob(1, 500)
	bad.Request.GPUs = 2
	p = mustSchedule(snapshot([]Node{shareNode("gpu-01", 2)}, nil, bad), Options{})
	if pj, _ = pendingOf(p, 1); pj.Reason.Code != ReasonNoNodeMatches {
		t.Fatalf("share with 2 GPUs: %+v", pj.Reason)
	}
}

func TestShareFragmentedReason(t *testing.T) {
	// Three GPUs each have 20 GB free; a 40 GB slice fits none of them.
	var running []Running
	for i := range 3 {
		running = append(running, tenantOf(int64(90+i), "gpu-01", i, 750, time.Hour))
	}
	p := mustSchedule(snapshot([]Node{shareNode("gpu-01", 3)}, running, sliceJob(1, 40<<10)), Options{})
	pj, _ := pendingOf(p, 1)
	if pj.Reason.Code != ReasonFragmented || pj.Reason.Message != "fragmented: 3 GPUs with room, the most 20 GB free, but none has 40 GB" {
		t.Fatalf("reason %s %q", pj.Reason.Code, pj.Reason.Message)
	}
	if len(p.Preemptions) != 0 || len(p.Reservations) != 0 {
		t.Fatalf("a shared request preempted or reserved: %+v %+v", p.Preemptions, p.Reservations)
	}
}

func TestSharePlacementsDiffer(t *testing.T) {
	// gpu-01 has one GPU with a 0.6 tenant; gpu-02 is empty. A 0.3 request: packing and
	// best fit join the tenant (tightest). A 0.5 request cannot join (room 0.4), so it
	// takes a fresh GPU: packing takes gpu-01's free GPU (node in use), FGD likewise
	// keeps gpu-02 whole.
	nodes := []Node{shareNode("gpu-01", 2), shareNode("gpu-02", 2)}
	running := []Running{tenantOf(90, "gpu-01", 0, 600, time.Hour)}
	for _, placement := range []string{SharePlacementFGD, SharePlacementBestFit, SharePlacementPacking} {
		p := mustSchedule(snapshot(nodes, running, shareJob(1, 300)), Options{SharePlacement: placement})
		if a := allocOf(t, p, 1); a.Node != "gpu-01" || a.GPUIndices[0] != 0 {
			t.Errorf("%s: 0.3 went to %s %v; want the tenant's GPU gpu-01/0", placement, a.Node, a.GPUIndices)
		}
		p = mustSchedule(snapshot(nodes, running, shareJob(1, 500)), Options{SharePlacement: placement})
		if a := allocOf(t, p, 1); a.Node != "gpu-01" || a.GPUIndices[0] != 1 {
			t.Errorf("%s: 0.5 went to %s %v; want gpu-01/1", placement, a.Node, a.GPUIndices)
		}
	}
}

func TestShareFGDAvoidsStrandingRoom(t *testing.T) {
	// The mix is mostly half-GPU requests. GPU 0 of gpu-01 has 0.5 room, GPU 1 has 0.7
	// room (0.3 tenant). A 0.2 request: best fit takes GPU 0 (tightest: 0.3 left, which no
	// 0.5 can use); FGD takes GPU 1 (0.5 left, which a 0.5 can use).
	nodes := []Node{shareNode("gpu-01", 2)}
	running := []Running{tenantOf(90, "gpu-01", 0, 500, time.Hour), tenantOf(91, "gpu-01", 1, 300, time.Hour)}
	pending := []Job{shareJob(1, 200)}
	for i := int64(2); i < 12; i++ {
		j := shareJob(i, 500)
		j.Queue = "batch" // lower tier: served after job 1
		pending = append(pending, j)
	}
	p := mustSchedule(snapshot(nodes, running, pending...), Options{SharePlacement: SharePlacementBestFit})
	if a := allocOf(t, p, 1); a.GPUIndices[0] != 0 {
		t.Errorf("best fit: 0.2 went to GPU %v; want 0", a.GPUIndices)
	}
	p = mustSchedule(snapshot(nodes, running, pending...), Options{SharePlacement: SharePlacementFGD})
	if a := allocOf(t, p, 1); a.GPUIndices[0] != 1 {
		t.Errorf("fgd: 0.2 went to GPU %v; want 1", a.GPUIndices)
	}
	// FGD then fits a 0.5 on each GPU; best fit only on GPU 1.
	placedHalves := func(p Plan) int {
		n := 0
		for _, pl := range p.Placements {
			if pl.JobID >= 2 {
				n++
			}
		}
		return n
	}
	if n := placedHalves(mustSchedule(snapshot(nodes, running, pending...), Options{SharePlacement: SharePlacementFGD})); n != 2 {
		t.Errorf("fgd placed %d halves; want 2", n)
	}
	if n := placedHalves(mustSchedule(snapshot(nodes, running, pending...), Options{SharePlacement: SharePlacementBestFit})); n != 1 {
		t.Errorf("best fit placed %d halves; want 1", n)
	}
}

func TestShareQuotaChargesTheShare(t *testing.T) {
	s := snapshot([]Node{shareNode("gpu-01", 4)}, nil, shareJob(1, 500), shareJob(2, 500), shareJob(3, 500))
	s.Teams = map[string]Team{"vision": {Name: "vision", Weight: 1, Quota: map[string]Quota{"": {Guaranteed: 1, Limit: 1}}}}
	p := mustSchedule(s, Options{})
	allocOf(t, p, 1)
	allocOf(t, p, 2)
	pj, _ := pendingOf(p, 3)
	if pj.Reason.Code != ReasonQuotaExceeded || !strings.Contains(pj.Reason.Message, "uses 1 of its 1-GPU limit; this job needs 0.5") {
		t.Fatalf("third half: %s %q", pj.Reason.Code, pj.Reason.Message)
	}
	// Running tenants count as their share too.
	s = snapshot([]Node{shareNode("gpu-01", 4)}, []Running{tenantOf(90, "gpu-01", 0, 250, time.Hour)}, shareJob(1, 750), shareJob(2, 100))
	s.Teams = map[string]Team{"vision": {Name: "vision", Weight: 1, Quota: map[string]Quota{"": {Guaranteed: 1, Limit: 1}}}}
	p = mustSchedule(s, Options{})
	allocOf(t, p, 1)
	if pj, _ := pendingOf(p, 2); pj.Reason.Code != ReasonQuotaExceeded {
		t.Fatalf("0.1 beyond a full quota: %+v", pj.Reason)
	}
}

func TestShareTenantsAreNotVictims(t *testing.T) {
	// Every GPU holds a tenant of a preemptible queue; an urgent whole-GPU job waits
	// rather than stopping tenants, which would free no whole GPU.
	var running []Running
	for i := range 2 {
		r := tenantOf(int64(90+i), "gpu-01", i, 500, time.Hour)
		r.Queue = "batch"
		running = append(running, r)
	}
	j := job(1, 1, "")
	j.Queue = "urgent"
	p := mustSchedule(snapshot([]Node{shareNode("gpu-01", 2)}, running, j), Options{})
	if len(p.Preemptions) != 0 {
		t.Fatalf("tenants were preempted: %+v", p.Preemptions)
	}
	if _, ok := pendingOf(p, 1); !ok {
		t.Fatal("the urgent job was placed on a GPU with tenants")
	}
}

func TestShareGPUComesFreeWithItsLastTenant(t *testing.T) {
	// GPU 0 holds two tenants, ending in 1 h and 3 h; GPU 1 a whole job ending in 2 h. A
	// 2-GPU job reserves its start at 3 h, when the last tenant leaves.
	running := []Running{tenantOf(90, "gpu-01", 0, 300, time.Hour), tenantOf(91, "gpu-01", 0, 300, 3*time.Hour),
		busy(92, "gpu-01", 2*time.Hour, 1)}
	p := mustSchedule(snapshot([]Node{shareNode("gpu-01", 2)}, running, job(1, 2, "")), Options{})
	pj, _ := pendingOf(p, 1)
	if !pj.EstimatedStart.Equal(t0.Add(3 * time.Hour)) {
		t.Fatalf("estimated start %v; want %v", pj.EstimatedStart, t0.Add(3*time.Hour))
	}
	// A tenant that would hold GPU 0 past 3 h delays that reservation: it does not join.
	// One that ends within the hour joins.
	long, short := shareJob(2, 100), shareJob(3, 100)
	long.Queue, short.Queue = "batch", "batch"
	long.TimeLimit, short.TimeLimit = 5*time.Hour, 30*time.Minute
	p = mustSchedule(snapshot([]Node{shareNode("gpu-01", 2)}, running, job(1, 2, ""), long, short), Options{})
	if _, ok := placementOf(p, 2); ok {
		t.Error("a tenant ending after the reserved start joined the GPU")
	}
	if a := allocOf(t, p, 3); a.GPUIndices[0] != 0 {
		t.Errorf("short tenant on %v; want GPU 0", a.GPUIndices)
	}
}

func TestShareUserCapChargesTheShare(t *testing.T) {
	q := queues()
	tr := q["train"]
	tr.UserGPULimit = 1
	q["train"] = tr
	s := snapshot([]Node{shareNode("gpu-01", 4)}, nil, shareJob(1, 500), shareJob(2, 500), shareJob(3, 500))
	s.Queues = q
	p := mustSchedule(s, Options{})
	allocOf(t, p, 1)
	allocOf(t, p, 2)
	if pj, _ := pendingOf(p, 3); pj.Reason.Code != ReasonUserLimit {
		t.Fatalf("third half: %+v", pj.Reason)
	}
}

func TestShareUnknownPlacementRefused(t *testing.T) {
	if _, err := ScheduleWith(snapshot(nil, nil), t0, Options{SharePlacement: "random"}); err == nil || !strings.Contains(err.Error(), "fgd, bestfit or packing") {
		t.Fatalf("err %v", err)
	}
}

func TestExclusivePool(t *testing.T) {
	inf := gpuNode("inf-01", "H100", 8)
	inf.Labels = map[string]string{"pool": "inference"}
	inf.ExclusivePool = true
	q := queues()
	iq := q["inference"]
	iq.Pools = []string{"inference"}
	q["inference"] = iq
	svc := job(3, 1, "")
	svc.Queue = "inference"
	s := snapshot([]Node{inf, gpuNode("gpu-01", "H100", 2)}, nil, job(1, 2, ""), job(2, 1, ""), svc, job(4, 8, ""))
	s.Queues = q
	p := mustSchedule(s, Options{})
	if a := allocOf(t, p, 1); a.Node != "gpu-01" {
		t.Errorf("train job on %s; want gpu-01", a.Node)
	}
	if a := allocOf(t, p, 3); a.Node != "inf-01" {
		t.Errorf("inference job on %s; want inf-01", a.Node)
	}
	if _, ok := placementOf(p, 2); ok {
		t.Error("a train job landed in the exclusive pool")
	}
	pj, _ := pendingOf(p, 4)
	if pj.Reason.Code != ReasonNoNodeMatches || !strings.HasSuffix(pj.Reason.Message, "; pool inference is reserved for queue inference") {
		t.Errorf("8 GPUs outside the pool: %s %q", pj.Reason.Code, pj.Reason.Message)
	}
	// No preemption reaches into the pool for other queues either.
	urgent := job(5, 1, "")
	urgent.Queue = "urgent"
	s = snapshot([]Node{inf, gpuNode("gpu-01", "H100", 1)}, []Running{busy(90, "gpu-01", time.Hour, 0)}, urgent)
	s.Queues = q
	s.Running[0].Queue = "batch"
	p = mustSchedule(s, Options{})
	for _, pl := range p.Placements {
		if pl.Allocs[0].Node == "inf-01" {
			t.Fatal("an urgent job landed in the exclusive pool")
		}
	}
}

func TestShareMixKeepsTypicalKinds(t *testing.T) {
	// 19 halves and one 0.3: the 0.3 is the rarest 5% and left out; the halves weigh 1.
	var pending []Job
	for i := range 19 {
		pending = append(pending, shareJob(int64(i+1), 500))
	}
	pending = append(pending, shareJob(20, 300))
	m := newShareMix(snapshot(nil, nil, pending...))
	if len(m.kinds) != 1 || m.kinds[0].milli != 500 || m.kinds[0].share != 1 {
		t.Fatalf("mix %+v; want the halves alone, weighing 1", m.kinds)
	}
	// With one more 0.3 the halves are below 95%: both kinds stay, by their shares.
	pending = append(pending, shareJob(21, 300))
	m = newShareMix(snapshot(nil, nil, pending...))
	if len(m.kinds) != 2 || m.kinds[0].milli != 300 || m.kinds[0].share != 2.0/21 {
		t.Fatalf("mix %+v; want 0.3 at 2/21 and 0.5 at 19/21", m.kinds)
	}
	// A node whose free room only the rare kind could use counts it fragmented.
	rooms := []int{300, 0}
	if f := m.frag(rooms); f <= 0 {
		t.Fatalf("frag %v with both kinds", f)
	}
}
