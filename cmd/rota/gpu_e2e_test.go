package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// The GPU end-to-end tests drive `rota up` with fake GPUs (docs/gpus.md): telemetry a job
// reports through the fake layer reaching `rota show`, a leftover process holding its GPU
// back, an XID failing the job on its GPU, and a job run in a container through podman.

// gpuUpNode is the node name the tests give `rota up`, so the fake layer's directory is
// known: <data dir>/agent/<name>/fake-gpus.
const gpuUpNode = "gpu-e2e"

// upNode is a `rota up` in a throwaway data dir, reached through its local socket.
type upNode struct {
	t    *testing.T
	dir  string
	env  []string
	args []string // rota up's, for a restart
	up   *proc
}

// startUp starts `rota up` with gpus fake GPUs and the extra flags and waits until its
// node is READY, not syncing, with its GPUs.
func startUp(t *testing.T, gpus int, extra ...string) *upNode {
	t.Helper()
	return startUpWith(t, gpus, append([]string{"--fake-gpus", strconv.Itoa(gpus)}, extra...)...)
}

// startUpWith starts `rota up` with the flags, which say what devices it has, and waits
// until its node is READY, not syncing, with gpus devices.
func startUpWith(t *testing.T, gpus int, extra ...string) *upNode {
	t.Helper()
	return startUpFrom(t, rotaBinary(t), gpus, extra...)
}

// startUpFrom is startUpWith with rota up run from binary; clients are the test's build.
func startUpFrom(t *testing.T, binary string, gpus int, extra ...string) *upNode {
	t.Helper()
	rotaBinary(t)
	dir, err := os.MkdirTemp("", "rota-e2e-gpu-")
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs last: after every rota process has been killed.
	t.Cleanup(func() {
		killProcessesUnder(dir)
		os.RemoveAll(dir)
	})
	u := &upNode{t: t, dir: dir,
		env: []string{"ROTA_DATA_DIR=" + dir, "HOME=" + filepath.Join(dir, "home"), "XDG_CONFIG_HOME=" + filepath.Join(dir, "home", ".config")}}
	args := append([]string{"up", "--name", gpuUpNode, "--listen", freePort(t),
		"--heartbeat-interval", "200ms", "--telemetry-interval", "200ms", "--min-runtime", "0s"}, extra...)
	u.args = args
	u.up = startBinary(t, binary, dir, "up", u.env, args...)
	u.waitReady(gpus)
	return u
}

// waitReady waits until the node of rota up is READY, not syncing, with gpus devices.
func (u *upNode) waitReady(gpus int) {
	t := u.t
	t.Helper()
	var last string
	waitForf(t, 30*time.Second, func() string { return "the node of rota up READY with its GPUs; last rota nodes: " + last }, func() bool {
		u.checkUp()
		r := u.rota("nodes", "-o", "json")
		last = r.String()
		var list api.NodeList
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &list) == nil && len(list.Nodes) == 1 &&
			list.Nodes[0].State == api.NodeReady && !list.Nodes[0].Syncing && len(list.Nodes[0].GPUs) == gpus
	})
}

func (u *upNode) checkUp() {
	u.t.Helper()
	if u.up.exited() {
		u.t.Fatalf("rota up exited: %v\n%s", u.up.cmd.ProcessState, tail(u.up.output(), maxShownLog))
	}
}

func (u *upNode) rota(args ...string) cliResult {
	u.t.Helper()
	return runCLI(u.t, u.env, args...)
}

// fakeDir is where the node's fake GPU layer reads registrations (procs/) and faults
// (faults/).
func (u *upNode) fakeDir() string { return filepath.Join(u.dir, "agent", gpuUpNode, "fake-gpus") }

// dropFile writes data into dir/name whole: through a dot file, which the fake layer
// skips, renamed into place.
func (u *upNode) dropFile(dir, name string, data any) {
	u.t.Helper()
	b, err := json.Marshal(data)
	if err != nil {
		u.t.Fatal(err)
	}
	waitFor(u.t, 10*time.Second, "the fake GPU directory "+dir, func() bool {
		_, err := os.Stat(dir)
		return err == nil
	})
	tmp := filepath.Join(dir, fmt.Sprintf(".tmp-%s-%d", name, rand.Int64()))
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		u.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		u.t.Fatal(err)
	}
}

// submit runs `rota submit` with args and returns the job's ID.
func (u *upNode) submit(args ...string) int64 {
	u.t.Helper()
	r := u.rota(append([]string{"submit"}, args...)...)
	if r.code != 0 {
		u.t.Fatalf("rota submit %v: %s", args, r)
	}
	return lastLineID(u.t, r.stdout)
}

// show is `rota show ID -o json`.
func (u *upNode) show(id int64) (api.JobDetail, cliResult) {
	u.t.Helper()
	r := u.rota("show", strconv.FormatInt(id, 10), "-o", "json")
	var d api.JobDetail
	if r.code != 0 {
		return d, r
	}
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		u.t.Fatalf("rota show %d -o json: %v\n%s", id, err, r)
	}
	return d, r
}

// waitJob waits until job id is in one of states, and fails the test when it ends in
// another.
func (u *upNode) waitJob(id int64, d time.Duration, states ...api.JobState) api.JobDetail {
	u.t.Helper()
	var last api.JobDetail
	waitForf(u.t, d, func() string {
		return fmt.Sprintf("job %d in %v (last seen: %s reason %q: %s)", id, states, last.State, last.Reason, last.Message)
	}, func() bool {
		u.checkUp()
		got, r := u.show(id)
		if r.code != 0 {
			return false
		}
		last = got
		if slices.Contains(states, got.State) {
			return true
		}
		if got.State.Terminal() {
			u.t.Fatalf("job %d ended %s (%s: %s); want %v", id, got.State, got.Reason, got.Message, states)
		}
		return false
	})
	return last
}

// node is the one node of `rota nodes -o json`.
func (u *upNode) node() (api.Node, bool) {
	u.t.Helper()
	r := u.rota("nodes", "-o", "json")
	var list api.NodeList
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil || len(list.Nodes) != 1 {
		return api.Node{}, false
	}
	return list.Nodes[0], true
}

// waitNode waits until the node satisfies ok and returns it.
func (u *upNode) waitNode(d time.Duration, what string, ok func(api.Node) bool) api.Node {
	u.t.Helper()
	var last api.Node
	waitForf(u.t, d, func() string {
		b, _ := json.Marshal(last)
		return what + "; last node: " + string(b)
	}, func() bool {
		u.checkUp()
		n, found := u.node()
		if !found {
			return false
		}
		last = n
		return ok(n)
	})
	return last
}

// staysPending checks, for a while, that job id neither starts nor ends.
func (u *upNode) staysPending(id int64, d time.Duration) api.JobDetail {
	u.t.Helper()
	var last api.JobDetail
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		got, r := u.show(id)
		if r.code != 0 {
			u.t.Fatalf("rota show %d: %s", id, r)
		}
		if got.State != api.StatePending {
			u.t.Fatalf("job %d is %s (%s: %s); want it to stay PENDING", id, got.State, got.Reason, got.Message)
		}
		last = got
	}
	return last
}

func TestTelemetryThroughTheBinary(t *testing.T) {
	skipShort(t)
	t.Parallel()
	u := startUp(t, 2)
	id := u.submit("--gpus", "1", "--", "sh", "-c",
		`echo "{\"gpu\": $CUDA_VISIBLE_DEVICES, \"memory_mb\": 300, \"utilization_pct\": 90}" > "$ROTA_FAKE_GPU_DIR/procs/$$"; sleep 3`)
	d := u.waitJob(id, 30*time.Second, api.StateSucceeded)
	usage := d.Usage
	t.Logf("job %d usage: %+v", id, usage)
	if usage == nil || usage.Samples == 0 {
		t.Fatalf("job %d has no usage after it ran 3 s with telemetry every 200ms: %+v", id, usage)
	}
	// A reading taken before the job registered its use counts 0%, so the mean may sit
	// a little below 90; the peak and the last reading are the job's own.
	if m := usage.GPUUtilPct.Mean; m < 50 || m > 90.5 {
		t.Errorf("job %d GPU utilisation mean %.1f%% over %d samples; want near 90%%", id, m, usage.Samples)
	}
	if p := usage.GPUUtilPct.Max; p < 85 || p > 90.5 {
		t.Errorf("job %d GPU utilisation max %.1f%%; want 90%%", id, p)
	}
	if m := usage.GPUMemoryMB.Max; m < 290 || m > 310 {
		t.Errorf("job %d GPU memory max %.0f MB; want 300 MB", id, m)
	}
	if len(d.AttemptList) != 1 || len(d.AttemptList[0].Placements) != 1 {
		t.Fatalf("job %d attempts %+v; want one of one rank", id, d.AttemptList)
	}
	if p := d.AttemptList[0].Placements[0]; p.Usage == nil || p.Usage.Samples == 0 {
		t.Errorf("job %d's rank has no usage recorded on its placement: %+v", id, p)
	}

	r := u.rota("show", strconv.FormatInt(id, 10))
	if r.code != 0 || !strings.Contains(r.stdout, "Usage (attempt 1") || !strings.Contains(r.stdout, "GPU util:") ||
		!strings.Contains(r.stdout, "90%") || !strings.Contains(r.stdout, "GPU memory:") {
		t.Errorf("rota show %d lacks a usage section with the job's 90%% utilisation: %s", id, r)
	}

	n := u.waitNode(10*time.Second, "the node with telemetry", func(n api.Node) bool { return n.Telemetry != nil })
	if len(n.Telemetry.GPUs) != 2 {
		t.Errorf("the node's telemetry has %d GPU readings; want 2: %+v", len(n.Telemetry.GPUs), n.Telemetry)
	}
	if n.DeviceSource != "fake" {
		t.Errorf("device_source %q; want fake", n.DeviceSource)
	}
	for _, g := range n.GPUs {
		if g.PCIBusID == "" || g.UUID == "" || !g.Healthy {
			t.Errorf("GPU %d: uuid %q pci_bus_id %q healthy %v; want a UUID, a bus id and healthy", g.Index, g.UUID, g.PCIBusID, g.Healthy)
		}
	}
	if r := u.rota("nodes"); r.code != 0 || !strings.Contains(r.stdout, gpuUpNode) || !strings.Contains(r.stdout, "UTIL") {
		t.Errorf("rota nodes: %s", r)
	}
}

func TestLeftoverHoldsGPUThroughTheBinary(t *testing.T) {
	skipShort(t)
	t.Parallel()
	u := startUp(t, 2)

	// A process rota did not start, that says it holds memory on GPU 1. Its environment
	// names the cluster's directory, so the cluster's cleanup kills it too.
	sleep := exec.Command("sleep", "60")
	sleep.Env = processEnv("ROTA_E2E_DIR=" + u.dir)
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan struct{})
	go func() {
		sleep.Wait()
		close(reaped)
	}()
	killSleep := func() {
		sleep.Process.Signal(syscall.SIGKILL)
		<-reaped
	}
	t.Cleanup(killSleep)
	pid := sleep.Process.Pid
	u.dropFile(filepath.Join(u.fakeDir(), "procs"), strconv.Itoa(pid), map[string]any{"gpu": 1, "memory_mb": 500, "utilization_pct": 0})

	n := u.waitNode(15*time.Second, fmt.Sprintf("pid %d listed as a leftover holding GPU 1", pid), func(n api.Node) bool {
		return slices.ContainsFunc(n.Leftovers, func(p api.GPUProcess) bool { return p.PID == pid && p.GPU == 1 }) &&
			slices.Equal(n.HeldGPUs, []int{1})
	})
	for _, p := range n.Leftovers {
		if p.PID == pid && (p.MemoryMB != 500 || p.JobID != 0) {
			t.Errorf("leftover %+v; want 500 MB and no job", p)
		}
	}
	if r := u.rota("nodes"); r.code != 0 || !strings.Contains(r.stdout, strconv.Itoa(pid)) {
		t.Errorf("rota nodes does not name the leftover pid %d: %s", pid, r)
	}

	id := u.submit("--gpus", "2", "--", "sh", "-c", "echo both GPUs $CUDA_VISIBLE_DEVICES")
	u.staysPending(id, 2*time.Second)
	r := u.rota("why", strconv.FormatInt(id, 10))
	t.Logf("rota why %d: %s", id, r.stdout)
	if r.code != 0 || !strings.Contains(r.stdout, "GPU 1") || !strings.Contains(strings.ToLower(r.stdout), "held") {
		t.Errorf("rota why %d does not say GPU 1 is held: %s", id, r)
	}

	killSleep()
	d := u.waitJob(id, 20*time.Second, api.StateSucceeded)
	if len(d.AttemptList) != 1 || len(d.AttemptList[0].Placements) != 1 || len(d.AttemptList[0].Placements[0].GPUIndices) != 2 {
		t.Errorf("job %d attempts %+v; want one on both GPUs", id, d.AttemptList)
	}
	u.waitNode(10*time.Second, "the leftover gone", func(n api.Node) bool { return len(n.Leftovers) == 0 && len(n.HeldGPUs) == 0 })
}

func TestXIDFailsTheJobThroughTheBinary(t *testing.T) {
	skipShort(t)
	t.Parallel()
	u := startUp(t, 2)
	id := u.submit("--gpus", "1", "--retries", "0", "--", "sleep", "60")
	d := u.waitJob(id, 20*time.Second, api.StateRunning)
	if len(d.AttemptList) == 0 || len(d.AttemptList[0].Placements) != 1 || len(d.AttemptList[0].Placements[0].GPUIndices) != 1 {
		t.Fatalf("running job %d attempts %+v; want one rank on one GPU", id, d.AttemptList)
	}
	gpu := d.AttemptList[0].Placements[0].GPUIndices[0]
	other := 1 - gpu

	u.dropFile(filepath.Join(u.fakeDir(), "faults"), "xid", map[string]any{"gpu": gpu, "xid": 79})
	d = u.waitJob(id, 20*time.Second, api.StateFailed)
	if d.Reason != api.ReasonGPUError {
		t.Errorf("job %d failed with reason %q (%s); want %s", id, d.Reason, d.Message, api.ReasonGPUError)
	}
	if d.Attempts != 1 {
		t.Errorf("job %d has %d attempts; want 1 (no retries)", id, d.Attempts)
	}

	n := u.waitNode(10*time.Second, fmt.Sprintf("GPU %d unhealthy", gpu), func(n api.Node) bool {
		return gpu < len(n.GPUs) && !n.GPUs[gpu].Healthy
	})
	t.Logf("GPU %d health: %q; node degraded: %v", gpu, n.GPUs[gpu].Health, n.Degraded)
	if g := n.GPUs[gpu]; !strings.Contains(g.Health, "79") || !strings.Contains(strings.ToUpper(g.Health), "XID") {
		t.Errorf("GPU %d health %q; want it to name XID 79", gpu, g.Health)
	}
	if !n.GPUs[other].Healthy {
		t.Errorf("GPU %d is unhealthy too: %q", other, n.GPUs[other].Health)
	}
	if r := u.rota("nodes"); r.code != 0 || !strings.Contains(r.stdout, "79") {
		t.Errorf("rota nodes does not report the XID: %s", r)
	}

	both := u.submit("--gpus", "2", "--", "true")
	one := u.submit("--gpus", "1", "--", "sh", "-c", "echo on $CUDA_VISIBLE_DEVICES")
	d = u.waitJob(one, 20*time.Second, api.StateSucceeded)
	if len(d.AttemptList) != 1 || !slices.Equal(d.AttemptList[0].Placements[0].GPUIndices, []int{other}) {
		t.Errorf("the 1-GPU job ran on %+v; want GPU %d, the healthy one", d.AttemptList, other)
	}
	u.staysPending(both, 1*time.Second)
	if r := u.rota("why", strconv.FormatInt(both, 10)); r.code != 0 || !strings.Contains(r.stdout, "unhealthy") {
		t.Errorf("rota why %d does not say a GPU is unhealthy: %s", both, r)
	}
}

func TestContainerJobThroughTheBinary(t *testing.T) {
	skipShort(t)
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skip("podman is not on PATH: container jobs need a runtime")
	}
	if os.Geteuid() != 0 {
		t.Skip("not running as root: rootless podman needs a setup this test does not make")
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("no busybox to build the test image from")
	}
	t.Parallel()

	// A one-binary image: busybox and the applets the job uses. A tag of its own, so
	// test runs side by side never remove each other's image.
	image := fmt.Sprintf("localhost/rota-e2e-busybox:%d-%d", os.Getpid(), rand.IntN(1e6))
	root := t.TempDir()
	bin := filepath.Join(root, "rootfs", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, applet := range []string{"sh", "echo", "cat", "sleep", "id", "env", "true"} {
		if err := os.Symlink("busybox", filepath.Join(bin, applet)); err != nil {
			t.Fatal(err)
		}
	}
	tarball := filepath.Join(root, "rootfs.tar")
	if out, err := exec.Command("tar", "-C", filepath.Join(root, "rootfs"), "-cf", tarball, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	if out, err := exec.Command("podman", "import", tarball, image).CombinedOutput(); err != nil {
		t.Fatalf("podman import: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("podman", "rmi", "-f", image).Run() })

	u := startUp(t, 1)
	n, _ := u.node()
	if n.ContainerRuntime != "podman" {
		t.Fatalf("the node's container runtime is %q; want podman (rota up's log:\n%s)", n.ContainerRuntime, tail(u.up.output(), maxShownLog))
	}
	id := u.submit("--image", image, "--", "sh", "-c", "echo in-container $ROTA_JOB_ID")
	d := u.waitJob(id, 60*time.Second, api.StateSucceeded)
	r := u.rota("logs", strconv.FormatInt(id, 10))
	if want := fmt.Sprintf("in-container %d", id); r.code != 0 || !strings.Contains(r.stdout, want) {
		t.Errorf("rota logs %d lacks %q: %s", id, want, r)
	}
	if len(d.AttemptList) != 1 || len(d.AttemptList[0].Placements) != 1 ||
		!strings.HasPrefix(d.AttemptList[0].Placements[0].ImageDigest, "sha256:") {
		t.Errorf("job %d records no image digest on its placement: %+v", id, d.AttemptList)
	}

	if r := u.rota("admin", "queue", "set", "train", "--images", "registry.example.com/"); r.code != 0 {
		t.Fatalf("rota admin queue set train --images: %s", r)
	}
	r = u.rota("submit", "--image", image, "--", "true")
	msg := r.stdout + r.stderr
	t.Logf("refused: %s", strings.TrimSpace(msg))
	if r.code == 0 || !strings.Contains(msg, "image") || !strings.Contains(msg, "registry.example.com/") {
		t.Errorf("rota submit of an image off the queue's allow-list: want a refusal naming the image and the allowed prefix, got %s", r)
	}
}
