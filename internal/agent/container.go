package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Running a task in its container image through the node's runtime: podman or docker (a
// client that runs the container and forwards signals to it, --sig-proxy) or apptainer
// (which runs the command as a process of the caller, in the image's file system).

// Container runtimes rota knows.
const (
	runtimePodman    = "podman"
	runtimeDocker    = "docker"
	runtimeApptainer = "apptainer"
)

// containerRuntime is the runtime image tasks run through; Name is empty where the node
// has none.
type containerRuntime struct {
	Name string `json:"name,omitempty"`
	Path string `json:"path,omitempty"`
}

// runtimeProbeTimeout bounds `docker version`, which waits on an unreachable daemon.
const runtimeProbeTimeout = 5 * time.Second

// detectContainerRuntime picks the runtime from the agent's setting: "" detects podman,
// then docker (only with a daemon that answers), then apptainer on PATH; "none" disables
// containers; a name or an absolute path forces that runtime. Without one it returns the
// reason, for the log.
func detectContainerRuntime(setting string) (containerRuntime, string) {
	switch setting {
	case "none":
		return containerRuntime{}, "container runtime disabled in the agent's configuration (none)"
	case "":
		var tried []string
		for _, name := range []string{runtimePodman, runtimeDocker, runtimeApptainer} {
			rt, why := forceRuntime(name)
			if rt.Name != "" {
				return rt, ""
			}
			tried = append(tried, why)
		}
		return containerRuntime{}, "no container runtime found: " + strings.Join(tried, "; ")
	}
	return forceRuntime(setting)
}

// forceRuntime finds the runtime a setting names: podman, docker or apptainer, by name on
// PATH or by absolute path.
func forceRuntime(setting string) (containerRuntime, string) {
	name := filepath.Base(setting)
	if !slices.Contains([]string{runtimePodman, runtimeDocker, runtimeApptainer}, name) {
		return containerRuntime{}, fmt.Sprintf("container runtime %q: must be podman, docker, apptainer, a path to one of them, or none", setting)
	}
	if strings.Contains(setting, "/") && !filepath.IsAbs(setting) {
		return containerRuntime{}, fmt.Sprintf("container runtime %q: a path must be absolute", setting)
	}
	path, err := exec.LookPath(setting)
	if err != nil {
		return containerRuntime{}, fmt.Sprintf("%s: not found (%v)", setting, err)
	}
	if name == runtimeDocker {
		ctx, cancel := context.WithTimeout(context.Background(), runtimeProbeTimeout)
		defer cancel()
		if out, err := exec.CommandContext(ctx, path, "version").CombinedOutput(); err != nil {
			return containerRuntime{}, fmt.Sprintf("%s: the docker daemon does not answer (%s)", path, lastLine(out, err))
		}
	}
	return containerRuntime{Name: name, Path: path}, ""
}

// containerJob is what a container run needs to know of the task.
type containerJob struct {
	name    string // the container's name (podman, docker)
	image   string // what to run: an image reference, an image ID, or a .sif file
	command []string
	workDir string
	// mounts are host directories bound at the same path inside.
	mounts []string
	// env is the job's environment inside the container: the task's and rota's variables,
	// not the node's.
	env    map[string]string
	uid    int
	gid    int
	groups []uint32
	// gpus are the task's GPUs as CDI names them (UUIDs, else indices); realGPUs says
	// whether the node has NVIDIA devices to pass.
	gpus     []string
	realGPUs bool
	limits   limitPlan
}

// clientKeys are variables the runtime client needs for itself: the job's values of these
// go on the command line instead of through the client's environment.
var clientKeys = []string{"PATH", "HOME", "TMPDIR", "XDG_RUNTIME_DIR", "DOCKER_HOST", "CONTAINERS_CONF"}

// containerCommand is the runtime's command line and the client's environment for c. The
// job's variables reach podman and docker through the client's environment (-e KEY), so
// their values (secrets, tokens) never show in the process list; apptainer takes them as
// APPTAINERENV_KEY.
func containerCommand(rt containerRuntime, c containerJob, clientEnv []string) (argv, env []string) {
	keys := make([]string, 0, len(c.env))
	for k := range c.env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	mounts := slices.Clone(c.mounts)
	sort.Strings(mounts)
	mounts = slices.Compact(mounts)

	if rt.Name == runtimeApptainer {
		argv = []string{rt.Path, "exec", "--cleanenv", "--pwd", c.workDir}
		for _, m := range mounts {
			argv = append(argv, "--bind", m+":"+m)
		}
		if c.realGPUs {
			argv = append(argv, "--nv")
		}
		env = slices.Clone(clientEnv)
		for _, k := range keys {
			env = append(env, "APPTAINERENV_"+k+"="+c.env[k])
		}
		return append(append(argv, apptainerImage(c.image)), c.command...), env
	}

	argv = []string{rt.Path, "run", "--rm", "--name", c.name, "--pull=never", "--init", "--sig-proxy=true",
		// A multi-node job reaches its peers (MASTER_ADDR) on the host's network.
		"--network", "host",
		"--user", fmt.Sprintf("%d:%d", c.uid, c.gid), "-w", c.workDir}
	for _, g := range c.groups {
		if int(g) != c.gid {
			argv = append(argv, "--group-add", strconv.FormatUint(uint64(g), 10))
		}
	}
	for _, m := range mounts {
		argv = append(argv, "-v", m+":"+m)
	}
	var passed []string
	for _, k := range keys {
		if !slices.Contains(clientKeys, k) {
			passed = append(passed, k)
		}
	}
	env = withoutKeys(clientEnv, passed)
	for _, k := range keys {
		if slices.Contains(clientKeys, k) {
			argv = append(argv, "-e", k+"="+c.env[k])
			continue
		}
		argv = append(argv, "-e", k)
		env = append(env, k+"="+c.env[k])
	}
	if m := c.limits.memoryBytes; m > 0 {
		// No swap beyond the limit, as under the attempt's own cgroup.
		argv = append(argv, "--memory", strconv.FormatInt(m, 10), "--memory-swap", strconv.FormatInt(m, 10))
	}
	if c.limits.cpus > 0 {
		argv = append(argv, "--cpus", strconv.Itoa(c.limits.cpus))
	}
	if c.realGPUs && len(c.gpus) > 0 {
		if rt.Name == runtimeDocker {
			argv = append(argv, "--gpus", `"device=`+strings.Join(c.gpus, ",")+`"`)
		} else {
			for _, g := range c.gpus {
				argv = append(argv, "--device", "nvidia.com/gpu="+g)
			}
		}
	}
	return append(append(argv, c.image), c.command...), env
}

// apptainerImage is what apptainer runs: a local image file as it is, a registry image
// through docker://.
func apptainerImage(image string) string {
	if strings.HasSuffix(image, ".sif") || filepath.IsAbs(image) || strings.Contains(image, "://") {
		return image
	}
	return "docker://" + image
}

func withoutKeys(env, keys []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(keys, k) {
			out = append(out, kv)
		}
	}
	return out
}

// containerName names an attempt's container: rota-<cluster8>-<job>-<attempt>-<rank>.
func containerName(cluster string, job int64, attempt, rank int) string {
	c := []byte(cluster)
	if len(c) > 8 {
		c = c[:8]
	}
	for i, ch := range c {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9') {
			c[i] = '_'
		}
	}
	if len(c) == 0 {
		c = []byte("local")
	}
	return fmt.Sprintf("rota-%s-%d-%d-%d", c, job, attempt, rank)
}

// containerGPUs is how the runtime names the task's GPUs: by UUID where the task has
// them, else by index.
func containerGPUs(indices []int, uuids []string) []string {
	if len(uuids) == len(indices) && len(uuids) > 0 && !slices.Contains(uuids, "") {
		return slices.Clone(uuids)
	}
	out := make([]string, len(indices))
	for i, g := range indices {
		out[i] = strconv.Itoa(g)
	}
	return out
}

// nvidiaPresent reports whether the node has real NVIDIA devices a container can be given:
// a /dev/nvidia0 node, or a CDI specification naming nvidia.com/gpu.
func nvidiaPresent(devDir string, cdiDirs []string) bool {
	if exists(filepath.Join(devDir, "nvidia0")) {
		return true
	}
	for _, dir := range cdiDirs {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err == nil && bytes.Contains(data, []byte("nvidia.com/gpu")) {
				return true
			}
		}
	}
	return false
}

var cdiDirs = []string{"/etc/cdi", "/var/run/cdi"}

// imageRef is an image as the runtime found it: its ID, to run exactly that, and its
// digest, to record.
type imageRef struct {
	id, digest string
}

// inspectImageArgs asks the runtime for an image's ID and digest. Docker has a digest
// only for an image pulled from a registry; a local one is known by its ID.
func inspectImageArgs(rt containerRuntime, image string) []string {
	format := "{{.Id}} {{.Digest}}"
	if rt.Name == runtimeDocker {
		format = "{{.Id}} {{if .RepoDigests}}{{index .RepoDigests 0}}{{end}}"
	}
	return []string{rt.Path, "image", "inspect", "--format", format, image}
}

// parseInspect reads inspectImageArgs' answer.
func parseInspect(out string) (imageRef, error) {
	f := strings.Fields(strings.TrimSpace(out))
	if len(f) == 0 {
		return imageRef{}, errors.New("the runtime named no image")
	}
	ref := imageRef{id: f[0], digest: f[0]}
	if len(f) > 1 {
		d := f[1]
		if _, after, ok := strings.Cut(d, "@"); ok {
			d = after
		}
		ref.digest = d
	}
	if !strings.Contains(ref.digest, ":") {
		ref.digest = "sha256:" + ref.digest
	}
	return ref, nil
}

// removeContainerArgs removes a container at once, running or not.
func removeContainerArgs(rt containerRuntime, name string) []string {
	if rt.Name == runtimePodman {
		return []string{rt.Path, "rm", "--force", "--time", "0", name}
	}
	return []string{rt.Path, "rm", "--force", name}
}

// removeContainer removes an attempt's container, if it is there; errors are for the log.
func removeContainer(rt containerRuntime, name string) error {
	if rt.Path == "" || name == "" || rt.Name == runtimeApptainer {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	argv := removeContainerArgs(rt, name)
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil && !bytes.Contains(bytes.ToLower(out), []byte("no such container")) && !bytes.Contains(out, []byte("no container with")) {
		return fmt.Errorf("remove container %s: %s", name, lastLine(out, err))
	}
	return nil
}

// errStopped is a stop that came while the supervisor was preparing the container.
type errStopped struct{ reason string }

func (e errStopped) Error() string { return "stopped (" + e.reason + ") while preparing the container" }

// runtimeStep runs one command of the runtime's (inspect, pull) to its end and returns
// its output. A stop meanwhile kills it and returns errStopped, so a long pull never
// holds a stop up.
func (s *supervisor) runtimeStep(argv []string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	poll := time.NewTicker(supervisorPoll)
	defer poll.Stop()
	for {
		var stop string
		select {
		case err := <-done:
			if err != nil {
				return stdout.String(), fmt.Errorf("%s: %s", strings.Join(argv[1:3], " "), tail(stderr.Bytes(), err))
			}
			return stdout.String(), nil
		case sig := <-s.sigs:
			switch sig {
			case syscall.SIGTERM:
				stop = reasonNodeShutdown
			case syscall.SIGUSR1:
				stop, _ = s.readStop()
			}
		case <-poll.C:
			stop, _ = s.readStop()
		}
		if stop != "" {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			return "", errStopped{stop}
		}
	}
}

// pullImage makes sure the image is on the node, pulling it if not, and says which
// image it is.
func (s *supervisor) pullImage(rt containerRuntime, image string) (imageRef, error) {
	out, err := s.runtimeStep(inspectImageArgs(rt, image))
	if errors.As(err, new(errStopped)) {
		return imageRef{}, err
	}
	if err != nil {
		s.logger.Info("pulling the image", "image", image)
		if _, err := s.runtimeStep([]string{rt.Path, "pull", image}); err != nil {
			if errors.As(err, new(errStopped)) {
				return imageRef{}, err
			}
			return imageRef{}, fmt.Errorf("pull image %s: %w", image, err)
		}
		if out, err = s.runtimeStep(inspectImageArgs(rt, image)); err != nil {
			return imageRef{}, fmt.Errorf("inspect image %s: %w", image, err)
		}
	}
	return parseInspect(out)
}

// tailBytes is how much of a runtime's error output a start error quotes.
const tailBytes = 1000

// tail is the end of a command's error output, or its error where it printed nothing.
func tail(out []byte, err error) string {
	out = bytes.TrimSpace(out)
	if len(out) == 0 {
		return err.Error()
	}
	if len(out) > tailBytes {
		out = append([]byte("..."), out[len(out)-tailBytes:]...)
	}
	return string(out)
}

func lastLine(out []byte, err error) string {
	out = bytes.TrimSpace(out)
	if i := bytes.LastIndexByte(out, '\n'); i >= 0 {
		out = out[i+1:]
	}
	return tail(out, err)
}
