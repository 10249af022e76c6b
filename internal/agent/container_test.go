package agent

import (
	"archive/tar"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// fakeRuntime writes an executable named name into a directory of its own that exits
// with code (0 or 1).
func fakeRuntime(t *testing.T, name string, code int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	script := fmt.Sprintf("#!/bin/sh\necho 'Cannot connect to the daemon' >&2\nexit %d\n", code)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestDetectContainerRuntime(t *testing.T) {
	podman := fakeRuntime(t, "podman", 0)
	brokenDocker := fakeRuntime(t, "docker", 1)
	apptainer := fakeRuntime(t, "apptainer", 0)

	// Only a docker without its daemon and an apptainer on PATH: apptainer it is.
	t.Setenv("PATH", filepath.Dir(brokenDocker)+":"+filepath.Dir(apptainer))
	if rt, why := detectContainerRuntime(""); rt.Name != runtimeApptainer || rt.Path != apptainer || why != "" {
		t.Errorf("detect = %+v %q, want apptainer at %s", rt, why, apptainer)
	}
	t.Setenv("PATH", filepath.Dir(podman)+":"+filepath.Dir(brokenDocker))
	if rt, _ := detectContainerRuntime(""); rt.Name != runtimePodman {
		t.Errorf("detect = %+v, want podman first", rt)
	}
	t.Setenv("PATH", filepath.Dir(brokenDocker))
	if rt, why := detectContainerRuntime(""); rt.Name != "" || !strings.Contains(why, "daemon does not answer") {
		t.Errorf("docker without a daemon: %+v %q", rt, why)
	}

	tests := []struct {
		setting, name, why string
	}{
		{"none", "", "disabled"},
		{podman, runtimePodman, ""},
		{brokenDocker, "", "daemon does not answer"},
		{"runc", "", "must be podman, docker, apptainer"},
		{"bin/podman", "", "must be absolute"},
		{"/no/such/podman", "", "not found"},
		{"apptainer", "", "not found"}, // not on this PATH
	}
	for _, tt := range tests {
		rt, why := detectContainerRuntime(tt.setting)
		if rt.Name != tt.name || (tt.why == "") != (why == "") || !strings.Contains(why, tt.why) {
			t.Errorf("detect(%q) = %+v %q, want %q saying %q", tt.setting, rt, why, tt.name, tt.why)
		}
	}
}

func TestContainerCommand(t *testing.T) {
	c := containerJob{
		name: "rota-01234567-7-2-0", image: "sha256:abc", command: []string{"python", "train.py"},
		workDir: "/work", mounts: []string{"/work", "/ckpt", "/work"},
		env: map[string]string{"ROTA_JOB_ID": "7", "SECRET": "hunter2", "PATH": "/opt/bin"},
		uid: 1000, gid: 100, groups: []uint32{100, 44},
		gpus: []string{"GPU-a", "GPU-b"}, realGPUs: true, limits: planLimits(64, 2),
	}
	clientEnv := []string{"PATH=/usr/bin", "SECRET=old"}
	argv, env := containerCommand(containerRuntime{Name: runtimePodman, Path: "/usr/bin/podman"}, c, clientEnv)
	line := strings.Join(argv, " ")
	for _, want := range []string{
		"/usr/bin/podman run --rm --name rota-01234567-7-2-0 --pull=never --init --sig-proxy=true --network host --user 1000:100 -w /work",
		"--group-add 44", "-v /ckpt:/ckpt -v /work:/work -e PATH=/opt/bin -e ROTA_JOB_ID -e SECRET",
		"--memory 67108864 --memory-swap 67108864 --cpus 2",
		"--device nvidia.com/gpu=GPU-a --device nvidia.com/gpu=GPU-b sha256:abc python train.py",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("podman command lacks %q:\n%s", want, line)
		}
	}
	if strings.Contains(line, "hunter2") || strings.Contains(line, "--group-add 100") {
		t.Errorf("a secret on the command line, or the primary group added again:\n%s", line)
	}
	// The client keeps its own PATH; the job's variables reach it through its environment.
	if !slices.Contains(env, "PATH=/usr/bin") || !slices.Contains(env, "SECRET=hunter2") || slices.Contains(env, "SECRET=old") {
		t.Errorf("client environment %v", env)
	}

	argv, _ = containerCommand(containerRuntime{Name: runtimeDocker, Path: "/usr/bin/docker"}, c, nil)
	if line := strings.Join(argv, " "); !strings.Contains(line, `--gpus "device=GPU-a,GPU-b"`) {
		t.Errorf("docker command: %s", line)
	}
	// No real GPUs (fake devices): no device flags at all.
	c.realGPUs = false
	argv, _ = containerCommand(containerRuntime{Name: runtimePodman, Path: "podman"}, c, nil)
	if line := strings.Join(argv, " "); strings.Contains(line, "nvidia") || strings.Contains(line, "--gpus") {
		t.Errorf("devices passed without GPUs: %s", line)
	}

	c.realGPUs = true
	c.image = "ghcr.io/org/img:1"
	argv, env = containerCommand(containerRuntime{Name: runtimeApptainer, Path: "/bin/apptainer"}, c, []string{"HOME=/home/u"})
	if got, want := strings.Join(argv, " "), "/bin/apptainer exec --cleanenv --pwd /work --bind /ckpt:/ckpt --bind /work:/work --nv docker://ghcr.io/org/img:1 python train.py"; got != want {
		t.Errorf("apptainer command\n got %s\nwant %s", got, want)
	}
	if !slices.Contains(env, "APPTAINERENV_SECRET=hunter2") || !slices.Contains(env, "HOME=/home/u") {
		t.Errorf("apptainer environment %v", env)
	}
	if got := apptainerImage("/images/x.sif"); got != "/images/x.sif" {
		t.Errorf("a .sif file runs as %q", got)
	}
}

func TestContainerNames(t *testing.T) {
	if got := containerName("0123456789abcdef", 42, 3, 1); got != "rota-01234567-42-3-1" {
		t.Errorf("name %q", got)
	}
	if got := containerName("", 1, 1, 0); got != "rota-local-1-1-0" {
		t.Errorf("name without a cluster %q", got)
	}
	if got := containerGPUs([]int{1, 3}, []string{"GPU-x", "GPU-y"}); !slices.Equal(got, []string{"GPU-x", "GPU-y"}) {
		t.Errorf("GPUs by UUID: %v", got)
	}
	if got := containerGPUs([]int{1, 3}, nil); !slices.Equal(got, []string{"1", "3"}) {
		t.Errorf("GPUs by index: %v", got)
	}
}

func TestParseInspect(t *testing.T) {
	tests := []struct {
		out, id, digest string
		err             bool
	}{
		{"7ab0 sha256:134c\n", "7ab0", "sha256:134c", false},
		{"sha256:7ab0 docker.io/library/busybox@sha256:feed\n", "sha256:7ab0", "sha256:feed", false},
		{"7ab0\n", "7ab0", "sha256:7ab0", false}, // docker, a local image: its ID
		{"  \n", "", "", true},
	}
	for _, tt := range tests {
		ref, err := parseInspect(tt.out)
		if ref.id != tt.id || ref.digest != tt.digest || (err != nil) != tt.err {
			t.Errorf("parseInspect(%q) = %+v, %v", tt.out, ref, err)
		}
	}
}

func TestNvidiaPresent(t *testing.T) {
	dev, cdi := t.TempDir(), t.TempDir()
	if nvidiaPresent(dev, []string{cdi, "/no/such"}) {
		t.Error("found GPUs on a node without any")
	}
	os.WriteFile(filepath.Join(cdi, "nvidia.yaml"), []byte("kind: nvidia.com/gpu\n"), 0o644)
	if !nvidiaPresent(dev, []string{cdi}) {
		t.Error("a CDI specification for nvidia.com/gpu was not seen")
	}
	os.WriteFile(filepath.Join(dev, "nvidia0"), nil, 0o644)
	if !nvidiaPresent(dev, nil) {
		t.Error("/dev/nvidia0 was not seen")
	}
}

// A node without a runtime fails an image task at once, saying so.
func TestRunnerImageWithoutRuntime(t *testing.T) {
	r := newTestRunner(t)
	task := shTask(1, "true")
	task.Image = "localhost/whatever:1"
	st := waitEnd(t, startTask(t, r, task))
	if st.State != api.StateFailed || st.Reason != api.ReasonStartError || !strings.Contains(st.Message, "node has no container runtime") {
		t.Errorf("got %s %q (%s), want FAILED start_error: node has no container runtime", st.State, st.Reason, st.Message)
	}
}

// testImage is a busybox image the podman tests build once.
const testImage = "localhost/rota-test-busybox:1"

var buildImage struct {
	once sync.Once
	err  error
}

// needPodman skips where podman cannot run containers here, and builds the test image
// from the node's static busybox.
func needPodman(t *testing.T) containerRuntime {
	t.Helper()
	rt, why := detectContainerRuntime(runtimePodman)
	if rt.Name == "" {
		t.Skipf("no podman: %s", why)
	}
	if os.Geteuid() != 0 {
		t.Skip("the podman tests run rootful podman: they need root")
	}
	buildImage.once.Do(func() { buildImage.err = buildBusyboxImage(rt, t.TempDir()) })
	if buildImage.err != nil {
		t.Skipf("cannot build the test image: %v", buildImage.err)
	}
	return rt
}

func buildBusyboxImage(rt containerRuntime, dir string) error {
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		return err
	}
	data, err := os.ReadFile(busybox)
	if err != nil {
		return err
	}
	tarPath := filepath.Join(dir, "rootfs.tar")
	f, err := os.Create(tarPath)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	tw.WriteHeader(&tar.Header{Name: "bin/", Mode: 0o755, Typeflag: tar.TypeDir})
	tw.WriteHeader(&tar.Header{Name: "tmp/", Mode: 0o1777, Typeflag: tar.TypeDir})
	tw.WriteHeader(&tar.Header{Name: "bin/busybox", Mode: 0o755, Size: int64(len(data))})
	tw.Write(data)
	for _, cmd := range []string{"sh", "echo", "cat", "sleep", "id", "env", "touch"} {
		tw.WriteHeader(&tar.Header{Name: "bin/" + cmd, Linkname: "busybox", Typeflag: tar.TypeSymlink, Mode: 0o777})
	}
	if err := tw.Close(); err != nil {
		return err
	}
	f.Close()
	out, err := exec.Command(rt.Path, "import", "--change", "ENV PATH=/bin", tarPath, testImage).CombinedOutput()
	if err != nil {
		return fmt.Errorf("podman import: %v: %s", err, out)
	}
	return nil
}

func containerGone(t *testing.T, rt containerRuntime, name string) bool {
	out, err := exec.Command(rt.Path, "ps", "-a", "--filter", "name=^"+name+"$", "--format", "{{.Names}}").Output()
	if err != nil {
		t.Fatalf("podman ps: %v", err)
	}
	return strings.TrimSpace(string(out)) == ""
}

// A task with an image runs in it through podman: its variables, working directory and
// exit code come through, and the digest it ran is recorded.
func TestPodmanTask(t *testing.T) {
	rt := needPodman(t)
	r := newTestRunner(t)
	r.runtime = rt
	wd := t.TempDir()
	tests := []struct {
		name   string
		script string
		state  api.JobState
		code   int
	}{
		{"succeeds", `echo "job=$ROTA_JOB_ID attempt=$ROTA_ATTEMPT"; echo "wd=$(pwd)"; echo hi > out.txt; echo ckpt > "$ROTA_CHECKPOINT_DIR/c"; echo "{\"x\": 1}" >> "$ROTA_EVENTS_FILE"`, api.StateSucceeded, 0},
		{"exit 3", `exit 3`, api.StateFailed, 3},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			task := api.Task{JobID: int64(900 + i), Attempt: 1, Command: []string{"/bin/sh", "-c", tt.script}, WorkDir: wd, Image: testImage}
			a := startTask(t, r, task)
			st := waitEnd(t, a)
			if st.State != tt.state || st.ExitCode == nil || *st.ExitCode != tt.code {
				t.Fatalf("got %s exit %v (%s %s), want %s exit %d\n%s", st.State, st.ExitCode, st.Reason, st.Message, tt.state, tt.code, readFile(t, a.logPath))
			}
			if !strings.HasPrefix(st.ImageDigest, "sha256:") || statusOf(t, a).ImageDigest != st.ImageDigest {
				t.Errorf("digest %q, status.json %q", st.ImageDigest, statusOf(t, a).ImageDigest)
			}
			if tt.code != 0 {
				return
			}
			log := readFile(t, a.logPath)
			for _, want := range []string{"job=900 attempt=1\n", "wd=" + wd + "\n"} {
				if !strings.Contains(log, want) {
					t.Errorf("log lacks %q:\n%s", want, log)
				}
			}
			if got := readFile(t, filepath.Join(wd, "out.txt")); got != "hi\n" {
				t.Errorf("out.txt in the working directory = %q", got)
			}
			if got := a.events.peek(); len(got) != 1 || got[0]["x"] != float64(1) {
				t.Errorf("events from the container: %v", got)
			}
			if !containerGone(t, rt, containerName(testCluster, task.JobID, 1, 0)) {
				t.Error("the container was not removed")
			}
		})
	}
}

// A cancelled container task is killed after its grace, and its container removed.
func TestPodmanTaskCancel(t *testing.T) {
	rt := needPodman(t)
	r := newTestRunner(t)
	r.runtime = rt
	task := api.Task{JobID: 910, Attempt: 1, Command: []string{"/bin/sh", "-c", `trap "" TERM; echo ready; while :; do sleep 1; done`}, Image: testImage, GraceSeconds: 1}
	a := startTask(t, r, task)
	waitLog(t, a, "ready")
	if st, _ := a.snapshot(); st.ImageDigest == "" {
		t.Error("a running container task reports no digest")
	}
	a.stop(api.ReasonCancelled)
	st := waitEnd(t, a)
	if st.State != api.StateCancelled {
		t.Errorf("got %s (%s), want CANCELLED", st.State, st.Message)
	}
	name := containerName(testCluster, 910, 1, 0)
	eventually(t, 10*time.Second, "container "+name+" to be gone", func() bool { return containerGone(t, rt, name) })
}

// An image that does not exist anywhere fails the task to start, quoting the runtime.
func TestPodmanMissingImage(t *testing.T) {
	rt := needPodman(t)
	r := newTestRunner(t)
	r.runtime = rt
	task := api.Task{JobID: 920, Attempt: 1, Command: []string{"true"}, Image: "localhost/rota-no-such-image:1"}
	st := waitEnd(t, startTask(t, r, task))
	if st.State != api.StateFailed || st.Reason != api.ReasonStartError || !strings.Contains(st.Message, "rota-no-such-image") {
		t.Errorf("got %s %q (%s), want FAILED start_error naming the image", st.State, st.Reason, st.Message)
	}
}
