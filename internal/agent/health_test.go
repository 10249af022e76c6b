package agent

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// dropFault writes a fault file for the fake GPUs, whole, as a test on another machine
// would.
func dropFault(t *testing.T, dir, name, body string) {
	t.Helper()
	tmp := filepath.Join(dir, "faults", "."+name)
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "faults", name)); err != nil {
		t.Fatal(err)
	}
}

func gpuOf(inv api.Inventory, index int) api.GPU {
	for _, g := range inv.GPUs {
		if g.Index == index {
			return g
		}
	}
	return api.GPU{Index: -1}
}

func TestGPUFaultStopsItsTasks(t *testing.T) {
	s := newFakeServer(t)
	logs := &lockedBuffer{}
	cfg := agentConfig(t, s, t.TempDir())
	cfg.TelemetryInterval = 20 * time.Millisecond
	loop := `trap 'echo got-term; exit 0' TERM; echo ready; while :; do sleep 0.05; done`
	onGPU0, onGPU1 := taskKey{1, 1}, taskKey{2, 1}
	s.setDesired(
		api.Task{JobID: 1, Attempt: 1, GPUIndices: []int{0}, GraceSeconds: 5, Command: []string{"sh", "-c", loop}},
		api.Task{JobID: 2, Attempt: 1, GPUIndices: []int{1}, GraceSeconds: 5, Command: []string{"sh", "-c", loop}},
	)
	a := launch(t, cfg, testLoggerTo(t, logs))
	running := func(k taskKey) bool {
		st, ok := s.lastReported(k)
		return ok && st.State == api.StateRunning
	}
	eventually(t, 10*time.Second, "both tasks to run", func() bool { return running(onGPU0) && running(onGPU1) })
	eventually(t, 10*time.Second, "the jobs' logs", func() bool { return strings.Contains(s.logOf(onGPU1), "ready") })

	// An application's own XID is logged and changes nothing.
	if err := a.devices.(*FakeDevices).Inject(HealthEvent{GPU: 1, Kind: HealthXID, Code: 13}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the non-fatal fault to be logged", func() bool {
		return strings.Contains(logs.String(), "non-fatal GPU fault")
	})
	n := s.beatCount()
	eventually(t, 10*time.Second, "later heartbeats", func() bool { return s.beatCount() > n+3 })
	hb, _ := s.lastBeat()
	if g := gpuOf(hb.Inventory, 1); !g.Healthy || g.Health != "" {
		t.Errorf("after XID 13 GPU 1 is %+v, want it healthy", g)
	}
	if !running(onGPU1) {
		t.Error("a non-fatal XID stopped the task on its GPU")
	}

	// XID 79: GPU 1 is unusable, its task ends gpu_error, GPU 0's runs on.
	dropFault(t, fakeDir(t, a.Agent), "xid79.json", `{"gpu":1,"xid":79}`)
	eventually(t, 10*time.Second, "GPU 1 reported unhealthy", func() bool {
		hb, _ := s.lastBeat()
		return !gpuOf(hb.Inventory, 1).Healthy
	})
	hb, _ = s.lastBeat()
	g := gpuOf(hb.Inventory, 1)
	if !strings.HasPrefix(g.Health, "XID 79 at ") || !strings.HasSuffix(g.Health, ": GPU has fallen off the bus") || g.Missing {
		t.Errorf("GPU 1 health %q missing %v, want the XID, its time and meaning, not missing", g.Health, g.Missing)
	}
	if g0 := gpuOf(hb.Inventory, 0); !g0.Healthy {
		t.Errorf("GPU 0 is %+v, want it healthy", g0)
	}
	var st api.TaskStatus
	eventually(t, 20*time.Second, "the task on GPU 1 to end", func() bool {
		var ok bool
		st, ok = s.finalOf(onGPU1)
		return ok
	})
	if st.State != api.StateFailed || st.Reason != api.ReasonGPUError {
		t.Errorf("task on GPU 1 ended %s (%s), want FAILED gpu_error", st.State, st.Reason)
	}
	eventually(t, 10*time.Second, "the job's log to say why", func() bool {
		return strings.Contains(s.logOf(onGPU1), "rota: stopping the job: GPU 1 (GPU-") &&
			strings.Contains(s.logOf(onGPU1), "got-term")
	})
	n = s.beatCount()
	eventually(t, 10*time.Second, "later heartbeats", func() bool { return s.beatCount() > n+3 })
	if !running(onGPU0) {
		t.Error("the task on GPU 0 stopped too")
	}
	if _, ended := s.finalOf(onGPU0); ended {
		t.Error("the task on GPU 0 ended")
	}
	if c := strings.Count(logs.String(), "GPU unhealthy"); c != 1 {
		t.Errorf("the fault was logged %d times, want once", c)
	}
}

func TestMarkUnhealthy(t *testing.T) {
	logs := &lockedBuffer{}
	gpus := []api.GPU{{Index: 0, UUID: "GPU-0", Healthy: true}, {Index: 1, UUID: "GPU-1", Healthy: true}}
	a := &Agent{logger: testLoggerTo(t, logs), mon: newMonitor(0, false), wake: make(chan struct{}, 1),
		inventory: api.Inventory{GPUs: gpus}}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

	a.markUnhealthy(xidEvent(1, 79), at)
	if !gpus[1].Healthy {
		t.Error("the inventory a heartbeat may be encoding was changed in place")
	}
	want := api.GPU{Index: 1, UUID: "GPU-1", Health: "XID 79 at 2026-11-30T12:00:00Z: GPU has fallen off the bus"}
	if g := gpuOf(a.inventory, 1); g.Health != want.Health || g.Healthy || g.Missing {
		t.Errorf("after XID 79: %+v, want %+v", g, want)
	}
	// A later fatal fault keeps the first reason; a vanishing is worse news.
	a.markUnhealthy(eccEvent(1, 2), at.Add(time.Minute))
	if g := gpuOf(a.inventory, 1); g.Health != want.Health {
		t.Errorf("after an ECC error: %q, want the first reason %q", g.Health, want.Health)
	}
	a.markUnhealthy(vanishEvent(1), at.Add(2*time.Minute))
	if g := gpuOf(a.inventory, 1); !g.Missing || g.Health != "vanished at 2026-11-30T12:02:00Z: GPU is lost (fallen off the bus)" {
		t.Errorf("after vanishing: %+v, want missing with the reason", g)
	}
	// A GPU the node does not have is said once.
	a.markUnhealthy(xidEvent(7, 79), at)
	a.markUnhealthy(xidEvent(7, 79), at)
	if c := strings.Count(logs.String(), "GPU this node does not have"); c != 1 {
		t.Errorf("an unknown GPU was logged %d times, want once", c)
	}
	if g := gpuOf(a.inventory, 0); !g.Healthy {
		t.Errorf("GPU 0 is %+v, want it untouched", g)
	}
}

func TestHealthText(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		ev   HealthEvent
		want string
	}{
		{xidEvent(1, 79), "XID 79 at 2026-11-30T12:00:00Z: GPU has fallen off the bus"},
		{xidEvent(1, 62), "XID 62 at 2026-11-30T12:00:00Z: GPU fault"},
		{HealthEvent{Kind: HealthXID, Code: 150}, "XID 150 at 2026-11-30T12:00:00Z"},
		{eccEvent(1, 3), "3 uncorrectable ECC errors at 2026-11-30T12:00:00Z"},
		{HealthEvent{Kind: HealthECC}, "uncorrectable ECC errors at 2026-11-30T12:00:00Z"},
		{HealthEvent{Kind: HealthVanished}, "vanished at 2026-11-30T12:00:00Z: NVML cannot reach it"},
		{HealthEvent{Kind: "thermal", Message: strings.Repeat("x", 300)}, `fault "thermal" at 2026-11-30T12:00:00Z: ` + strings.Repeat("x", maxHealthText) + "…"},
	}
	for _, tt := range tests {
		if got := healthText(tt.ev, at); got != tt.want {
			t.Errorf("healthText(%+v) = %q, want %q", tt.ev, got, tt.want)
		}
	}
}

func TestRunHealthCheck(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		command string
		timeout time.Duration
		ok      bool
		code    int
		output  string // a substring of the output
	}{
		{"passes", "echo all good", 10 * time.Second, true, 0, "all good\n"},
		{"fails", "echo 'disk /scratch full' >&2; exit 1", 10 * time.Second, false, 1, "disk /scratch full\n"},
		{"not found", "/no/such/check", 10 * time.Second, false, 127, "/no/such/check"},
		{"times out", `sleep 60 & echo $! > ` + filepath.Join(dir, "child") + `; echo started; wait`, 300 * time.Millisecond, false, -1,
			"started\n\nrota: the health check ran past its timeout of 300ms and was killed\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runHealthCheck(context.Background(), tt.command, tt.timeout)
			if res.OK != tt.ok || res.ExitCode != tt.code || !strings.Contains(res.Output, tt.output) || res.Time.IsZero() {
				t.Errorf("result %+v, want ok %v, exit code %d, output with %q", res, tt.ok, tt.code, tt.output)
			}
		})
	}
	// The timeout killed the check's whole process group, its background child too.
	child := readPID(t, filepath.Join(dir, "child"))
	eventually(t, 10*time.Second, "the check's child to be killed", func() bool { return !processAlive(child) })
}

func TestHealthCheckKeepsTheEndOfItsOutput(t *testing.T) {
	res := runHealthCheck(context.Background(), `head -c 10000 /dev/zero | tr '\0' a; echo; echo last words; exit 3`, 10*time.Second)
	if res.OK || res.ExitCode != 3 || len(res.Output) != maxHealthOutput || !strings.HasSuffix(res.Output, "a\nlast words\n") {
		t.Errorf("result ok %v code %d, output of %d bytes ending %q; want the last %d bytes",
			res.OK, res.ExitCode, len(res.Output), res.Output[max(0, len(res.Output)-20):], maxHealthOutput)
	}
}

func TestTailBuffer(t *testing.T) {
	b := &tailBuffer{max: 5}
	for _, w := range []string{"ab", "cd", "efg", "", "hijklmnop", "q"} {
		b.Write([]byte(w))
	}
	if got := b.String(); got != "mnopq" {
		t.Errorf("tail = %q, want %q", got, "mnopq")
	}
	// A character cut in half at the start is dropped.
	b = &tailBuffer{max: 3}
	b.Write([]byte("xé!"))
	if got := b.String(); got != "é!" {
		t.Errorf("tail = %q, want %q", got, "é!")
	}
	b = &tailBuffer{max: 2}
	b.Write([]byte("é!"))
	if got := b.String(); got != "!" {
		t.Errorf("tail = %q, want %q", got, "!")
	}
}

// The health check's result, a failure and a timeout alike, goes with the heartbeats.
func TestAgentReportsHealthCheck(t *testing.T) {
	tests := []struct {
		name    string
		command string
		timeout time.Duration
		code    int
		output  string
	}{
		{"fails", "echo broken; exit 1", 10 * time.Second, 1, "broken\n"},
		{"times out", "echo hanging; sleep 60", 300 * time.Millisecond, -1, "ran past its timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newFakeServer(t)
			logs := &lockedBuffer{}
			cfg := agentConfig(t, s, t.TempDir())
			cfg.HealthCheck, cfg.HealthCheckInterval, cfg.HealthCheckTimeout = tt.command, 50*time.Millisecond, tt.timeout
			launch(t, cfg, testLoggerTo(t, logs))
			var hc *api.HealthCheck
			eventually(t, 10*time.Second, "a heartbeat with the health check", func() bool {
				hb, _ := s.lastBeat()
				hc = hb.HealthCheck
				return hc != nil
			})
			if hc.OK || hc.ExitCode != tt.code || !strings.Contains(hc.Output, tt.output) || hc.Time.IsZero() {
				t.Errorf("health check %+v, want failed with exit code %d and output %q", hc, tt.code, tt.output)
			}
			// It runs again and again; the failure is logged once.
			eventually(t, 10*time.Second, "more runs", func() bool {
				hb, _ := s.lastBeat()
				return hb.HealthCheck != nil && hb.HealthCheck.Time.After(hc.Time)
			})
			if c := strings.Count(logs.String(), "health check fails"); c != 1 {
				t.Errorf("the failure was logged %d times, want once", c)
			}
		})
	}
}

func TestStopOnFailedGPUsOnlyOnce(t *testing.T) {
	dir := t.TempDir()
	a := &Agent{logger: testLogger(t), inventory: api.Inventory{GPUs: []api.GPU{{Index: 0, Healthy: true}, {Index: 1, Health: "XID 79"}}}}
	att := &attempt{key: taskKey{1, 1}.in(testCluster), dir: dir, logPath: filepath.Join(dir, fileOutput), logger: testLogger(t), exited: make(chan struct{})}
	other := &attempt{key: taskKey{2, 1}.in(testCluster), dir: t.TempDir(), logger: testLogger(t), exited: make(chan struct{})}
	live := []*liveTask{{key: att.key, att: att, gpus: []int{0, 1}}, {key: other.key, att: other, gpus: []int{0}}}
	a.stopOnFailedGPUs(live)
	a.stopOnFailedGPUs(live)
	if att.stopReason != api.ReasonGPUError || other.stopReason != "" {
		t.Errorf("stop reasons %q and %q, want gpu_error for the task on GPU 1 only", att.stopReason, other.stopReason)
	}
	var req stopRequest
	if ok, err := readJSON(filepath.Join(dir, fileStop), &req); !ok || err != nil || req.Reason != api.ReasonGPUError {
		t.Errorf("stop request %+v (%v, %v), want reason gpu_error", req, ok, err)
	}
	if lines := strings.Split(strings.TrimSpace(readFile(t, att.logPath)), "\n"); len(lines) != 1 || !slices.ContainsFunc(lines, func(l string) bool {
		return strings.HasPrefix(l, "rota: stopping the job: GPU 1 () failed: XID 79")
	}) {
		t.Errorf("job log %q, want one line naming GPU 1 and its fault", lines)
	}
}

// Against a server that keeps inventory hashes the agent sends its inventory only when
// the server does not hold it: first, after a change, and after a failed heartbeat.
// Against one that keeps none it always sends it, and never the hash.
func TestAgentSendsItsInventoryOnlyWhenTheServerLacksIt(t *testing.T) {
	s := newFakeServer(t)
	s.keepHashes = true
	a := startAgent(t, s, testLogger(t))
	eventually(t, 10*time.Second, "heartbeats", func() bool { return s.beatCount() >= 5 })
	beats := s.heartbeats()
	if reflect.ValueOf(beats[0].Inventory).IsZero() || beats[0].InventoryHash != "" {
		t.Fatalf("first heartbeat: inventory %+v hash %q; want the inventory whole and no hash, as to any server", beats[0].Inventory, beats[0].InventoryHash)
	}
	full := api.InventoryHash(beats[0].Inventory)
	for i, hb := range beats[1:] {
		if !reflect.ValueOf(hb.Inventory).IsZero() || hb.InventoryHash != full {
			t.Fatalf("heartbeat %d: inventory left out %v, hash %q; want it left out with %q", i+1, reflect.ValueOf(hb.Inventory).IsZero(), hb.InventoryHash, full)
		}
	}

	// A GPU that fails changes the inventory: it goes whole once, then is left out again.
	if err := a.devices.(*FakeDevices).Inject(HealthEvent{GPU: 1, Kind: HealthXID, Code: 79}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the changed inventory", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return !gpuOf(s.held, 1).Healthy
	})
	n := s.beatCount()
	eventually(t, 10*time.Second, "later heartbeats", func() bool { return s.beatCount() > n+3 })
	s.mu.Lock()
	changed, last := api.InventoryHash(s.held), s.beats[len(s.beats)-1]
	s.mu.Unlock()
	if !reflect.ValueOf(last.Inventory).IsZero() || last.InventoryHash != changed || changed == full {
		t.Errorf("after the change: inventory left out %v, hash %q; want it left out with the new hash %q", reflect.ValueOf(last.Inventory).IsZero(), last.InventoryHash, changed)
	}

	// A failed heartbeat: the next one carries the inventory whole, whatever the server.
	s.mu.Lock()
	s.refuse, s.refuseMsg = http.StatusInternalServerError, "store down"
	s.mu.Unlock()
	eventually(t, 10*time.Second, "a refused heartbeat", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.refused > 0
	})
	s.mu.Lock()
	s.refuse = 0
	before := len(s.beats)
	s.mu.Unlock()
	eventually(t, 10*time.Second, "a heartbeat after the failure", func() bool { return s.beatCount() > before })
	if hb := s.heartbeats()[before]; reflect.ValueOf(hb.Inventory).IsZero() {
		t.Error("the first heartbeat after a failed one left the inventory out")
	}

	// A server that keeps no hashes gets the inventory every time, and no hash.
	old := newFakeServer(t)
	startAgent(t, old, testLogger(t))
	eventually(t, 10*time.Second, "heartbeats", func() bool { return old.beatCount() >= 4 })
	for i, hb := range old.heartbeats() {
		if reflect.ValueOf(hb.Inventory).IsZero() || hb.InventoryHash != "" {
			t.Fatalf("heartbeat %d to a server without hashes: inventory left out %v, hash %q", i, reflect.ValueOf(hb.Inventory).IsZero(), hb.InventoryHash)
		}
	}
}
