package sched

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"
)

// byteSource hands out the fuzz input a byte at a time. Past the end it gives zeros, so
// every input decodes to some scenario; the decoder reads zero as the common case or as
// "no more", so a short input is a small, ordinary cluster.
type byteSource struct{ b []byte }

func (s *byteSource) byte() byte {
	if len(s.b) == 0 {
		return 0
	}
	c := s.b[0]
	s.b = s.b[1:]
	return c
}

func (s *byteSource) intn(n int) int { return int(s.byte()) % n }

// choose returns one of vs; zero picks the first.
func choose[T any](s *byteSource, vs ...T) T { return vs[s.intn(len(vs))] }

// scenario is a snapshot and what happens between the cycles planned on it.
type scenario struct {
	s     *Snapshot
	steps []step
}

// step is a change between two cycles, as the server or simulator would see one.
type step struct {
	kind     int // see applyStep
	a, b, c  int // which node, GPU or job
	advance  time.Duration
	newJobID int64
}

var (
	fuzzTeams  = []string{"vision", "nlp", "speech", "robotics"}
	fuzzUsers  = []string{"ada", "bo", "cy"}
	fuzzModels = []string{"H100", "A100"}
)

// decodeScenario turns fuzz bytes into a snapshot at t0 (nodes with their GPUs, health,
// leftovers, health checks, container runtimes and NVLink islands, running jobs and gangs,
// pending jobs and gangs, some with images, queues, team quotas, reservation windows) and
// up to four later steps. Snapshots keep what the server
// guarantees of its own: unique node names, distinct GPU indices per node, no GPU held by
// two running jobs, job IDs unique, a gang's GPUs equal to its nodes times GPUs per node.
// Claims come from the cycles themselves, as they do in the server.
func decodeScenario(data []byte) scenario {
	src := &byteSource{b: data}
	s := &Snapshot{Queues: queues()}
	for i := range 1 + src.intn(8) {
		flags := src.byte()
		model := fuzzModels[flags>>3&1]
		n := Node{Name: fmt.Sprintf("node-%02d", i), Schedulable: flags%8 != 1, HealthFailed: flags%8 == 2, CPUs: 4 + src.intn(64),
			MemoryMB: int64(8+src.intn(512)) << 10, DriverVersion: choose(src, "550", "535"), CUDAVersion: []string{"12.4", "12.2", ""}[i%3],
			Labels: map[string]string{"pool": "train", "rack": fmt.Sprintf("r%d", i/2), "switch": fmt.Sprintf("s%d", i/4)}}
		if flags&0x20 != 0 {
			n.Labels["pool"] = "inference"
		}
		if flags&0x10 == 0 {
			n.ContainerRuntime = "podman"
		}
		idx := 0
		for g := range src.intn(9) {
			m := model
			if flags&0x40 != 0 && g%2 == 1 {
				m = fuzzModels[1-flags>>3&1] // a node of mixed models
			}
			health := src.intn(8) // 7: unhealthy; 6: held by leftover processes
			n.GPUs = append(n.GPUs, GPU{Index: idx, ID: fmt.Sprintf("%s-%d", n.Name, idx), Model: m, MemoryMB: 80 << 10,
				Healthy: health != 7, Held: health == 6})
			idx += 1 + src.intn(4)/3 // now and then a gap, as when a GPU is gone
		}
		if flags&0x80 != 0 {
			for g := range n.GPUs { // NVLink islands of four
				for h := range n.GPUs {
					if h != g && h/4 == g/4 {
						n.GPUs[g].NVLinkPeers = append(n.GPUs[g].NVLinkPeers, n.GPUs[h].Index)
					}
				}
			}
		}
		s.Nodes = append(s.Nodes, n)
	}
	// Nodes come in any order.
	for range src.intn(4) {
		i, j := src.intn(len(s.Nodes)), src.intn(len(s.Nodes))
		s.Nodes[i], s.Nodes[j] = s.Nodes[j], s.Nodes[i]
	}

	id := int64(1)
	free := make([][]int, len(s.Nodes)) // GPU indices no running job holds, by node
	for i, n := range s.Nodes {
		for _, g := range n.GPUs {
			free[i] = append(free[i], g.Index)
		}
	}
	take := func(ni, k int) []int {
		got := slices.Clone(free[ni][:k])
		free[ni] = free[ni][k:]
		return got
	}
	running := func(allocs []Alloc) Running {
		r := Running{ID: id, Queue: choose(src, "train", "batch", "inference", "interactive"), Team: choose(src, fuzzTeams...),
			User: choose(src, fuzzUsers...), Start: t0.Add(-time.Duration(src.intn(256)) * time.Minute), Allocs: allocs,
			Borrowing: src.intn(4) == 1, Preempting: src.intn(16) == 1}
		if d := src.intn(256); d > 0 {
			r.End = t0.Add(time.Duration(d-16) * 5 * time.Minute) // some overdue
		}
		if c := src.intn(64); c > 0 {
			r.LastCheckpoint = t0.Add(-time.Duration(c) * time.Minute)
		}
		// Service, in GPU-seconds, from this attempt and perhaps earlier ones; now and then
		// an attempt the starvation guard started.
		gpus := 0
		for _, a := range allocs {
			gpus += len(a.GPUIndices)
		}
		r.AttainedService = float64(gpus) * t0.Sub(r.Start).Seconds() * float64(1+src.intn(4))
		if l := src.intn(16); l > 0 {
			r.LastRun = time.Duration(l) * 10 * time.Minute
			r.Requeued = r.Start.Add(-time.Duration(src.intn(256)) * 10 * time.Minute)
		}
		id++
		return r
	}
	for ni := range s.Nodes {
		for src.intn(3) == 2 {
			k := src.intn(len(free[ni]) + 1)
			a := Alloc{Node: s.Nodes[ni].Name, GPUIndices: take(ni, k), CPUs: src.intn(9), MemoryMB: int64(src.intn(65)) << 10}
			s.Running = append(s.Running, running([]Alloc{a}))
		}
	}
	for src.intn(4) == 1 { // a running gang on two nodes
		a, b, g := src.intn(len(s.Nodes)), src.intn(len(s.Nodes)), 1+src.intn(8)
		if a == b || len(free[a]) < g || len(free[b]) < g {
			continue
		}
		if s.Nodes[a].Name > s.Nodes[b].Name {
			a, b = b, a
		}
		cpus, mem := src.intn(9), int64(src.intn(65))<<10
		s.Running = append(s.Running, running([]Alloc{
			{Node: s.Nodes[a].Name, GPUIndices: take(a, g), CPUs: cpus, MemoryMB: mem},
			{Node: s.Nodes[b].Name, GPUIndices: take(b, g), CPUs: cpus, MemoryMB: mem}}))
	}

	for range src.intn(32) {
		s.Pending = append(s.Pending, decodeJob(src, id))
		id++
	}

	if src.intn(2) == 1 {
		s.Teams = map[string]Team{}
		for _, name := range fuzzTeams {
			t := Team{Name: name, Weight: float64(1 + src.intn(4)), Usage: float64(src.intn(256)) * 1e4}
			if m := src.intn(4); m > 0 {
				t.Quota = map[string]Quota{[]string{"", "H100", "A100"}[m-1]: {Guaranteed: src.intn(17), Limit: src.intn(33)}}
			}
			s.Teams[name] = t
		}
	}
	if src.intn(2) == 1 {
		q := s.Queues["inference"]
		q.Pools = []string{"inference"}
		s.Queues["inference"] = q
	}
	if u := src.intn(8); u > 0 {
		q := s.Queues["train"]
		q.UserGPULimit = u
		s.Queues["train"] = q
	}
	for w := 0; src.intn(4) == 1; w++ {
		start := t0.Add(time.Duration(src.intn(64)-16) * 15 * time.Minute)
		r := Reservation{Name: fmt.Sprintf("w%d", w), Team: choose(src, fuzzTeams...), Start: start,
			End: start.Add(time.Duration(1+src.intn(64)) * 15 * time.Minute), Nodes: []string{s.Nodes[src.intn(len(s.Nodes))].Name}}
		if n := s.Nodes[src.intn(len(s.Nodes))].Name; !slices.Contains(r.Nodes, n) {
			r.Nodes = append(r.Nodes, n)
		}
		s.Reservations = append(s.Reservations, r)
	}

	sc := scenario{s: s}
	for range src.intn(5) {
		st := step{kind: src.intn(6), a: int(src.byte()), b: int(src.byte()), c: int(src.byte()),
			advance: time.Duration(src.intn(64)) * time.Minute, newJobID: id}
		id++
		sc.steps = append(sc.steps, st)
	}
	return sc
}

// decodeJob is a pending job: one node or a gang, any model or one, in a known queue or not.
func decodeJob(src *byteSource, id int64) Job {
	j := Job{ID: id, Queue: choose(src, "train", "interactive", "batch", "urgent", "inference", "nope"),
		Team: choose(src, fuzzTeams...), User: choose(src, fuzzUsers...),
		SubmitTime: t0.Add(-time.Duration(src.intn(256)) * 5 * time.Minute),
		TimeLimit:  time.Duration(src.intn(256)) * 5 * time.Minute, // zero: unlimited
		Request: Request{GPUs: choose(src, 1, 2, 4, 8, 0, 3, 16), GPUModel: choose(src, "", "H100", "A100", "V100"),
			CPUs: src.intn(17), MemoryMB: int64(src.intn(129)) << 10},
		Nice: choose(src, 0, 5, -5, 100, -100), Duration: time.Duration(src.intn(256)) * time.Minute,
		AttainedService: float64(src.intn(256)) * 3600}
	if l := src.intn(8); l > 0 && j.AttainedService > 0 {
		j.LastRun = time.Duration(l) * 15 * time.Minute
		j.Requeued = t0.Add(-time.Duration(src.intn(256)) * 10 * time.Minute)
	}
	if src.intn(6) == 5 {
		j.Request.Nodes, j.Request.GPUsPerNode = 2+src.intn(3), 1+src.intn(8)
		j.Request.GPUs = j.Request.Nodes * j.Request.GPUsPerNode
	}
	if src.intn(4) == 3 {
		j.Image = "registry.example.com/ml/train:1"
	}
	// From the ID, not the source, so that the corpus means what it meant before.
	j.Request.CUDA = []string{"", "", ">=12.4", "<12.3"}[id%4]
	return j
}

// applyStep changes the world between two cycles: time passes and jobs end at their
// limits, and then victims stop, a GPU fails, a node drains or a job arrives.
func applyStep(w *world, st step) {
	w.now = w.now.Add(time.Minute + st.advance)
	w.endFinished()
	switch st.kind {
	case 1, 2:
		w.endStopping()
	case 3:
		n := &w.s.Nodes[st.a%len(w.s.Nodes)]
		if len(n.GPUs) > 0 {
			n.GPUs[st.b%len(n.GPUs)].Healthy = false
			w.s.NodesVersion++
		}
	case 4:
		w.s.Nodes[st.a%len(w.s.Nodes)].Schedulable = st.b%2 == 0
		w.s.NodesVersion++
	case 5:
		j := decodeJob(&byteSource{b: []byte{byte(st.a), byte(st.b), byte(st.c), byte(st.a ^ st.c), byte(st.b + st.c)}}, st.newJobID)
		j.SubmitTime = w.now
		w.s.Pending = append(w.s.Pending, j)
		w.jobs[j.ID] = j
	}
}

// scheduleSeeds are inputs: empty, a small cluster written by hand, and long ones from a
// fixed-seed generator, which decode to busy clusters with every feature at once.
var scheduleSeeds = func() []string {
	seeds := []string{
		"",
		"\x08\x20\x40\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x01\x02\x00\x01\x01\x05\x05\x05",
	}
	r := rand.New(rand.NewPCG(0x5ced, 1))
	for i := range 10 {
		b := make([]byte, 200+100*i)
		for k := range b {
			b[k] = byte(r.Uint32())
		}
		seeds = append(seeds, string(b))
	}
	return seeds
}()

// FuzzSchedule decodes a fuzzed scenario and plans it cycle after cycle under every named
// policy, applying each plan as the server does (world). Oracle: checkPlanAt, the invariant
// checker of the property tests, holds of every plan; the Planner agrees with ScheduleWith
// (world.cycle); the first plan does not depend on the failure cache; Schedule is the
// default policy.
func FuzzSchedule(f *testing.F) {
	for _, s := range scheduleSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(checkSchedule)
}

func checkSchedule(t *testing.T, data []byte) {
	for _, name := range PolicyNames() {
		opts, err := OptionsFor(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := decodeScenario(data)
		if name == "default" {
			if a, b := Schedule(sc.s, t0), mustSchedule(sc.s, opts); !reflect.DeepEqual(a, b) {
				t.Fatalf("input %q: Schedule differs from the default policy", data)
			}
		}
		o, _ := opts.withDefaults()
		c := newCycle(sc.s, t0, o, newState(sc.s, t0.UnixNano()), nil)
		c.noCache = true
		if p, q := mustSchedule(sc.s, opts), c.run(); !reflect.DeepEqual(decisions(p), decisions(q)) {
			t.Fatalf("input %q, policy %s: the failure cache changed the plan", data, name)
		}
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, sc.s, opts)
			w.cycle()
			for _, st := range sc.steps {
				applyStep(w, st)
				w.cycle()
			}
		})
	}
}
