package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// fixedEnviron stands for the submitter's environment in these tests.
var fixedEnviron = []string{
	"PATH=/opt/conda/envs/ml/bin:/usr/bin:/bin", "CONDA_PREFIX=/opt/conda/envs/ml",
	"HOME=/home/alice", "USER=alice", "PWD=/home/alice/proj", "SHLVL=2", "_=/usr/bin/rota",
	"SSH_AUTH_SOCK=/tmp/ssh-x/agent.1", "DISPLAY=:0", "ROTA_TOKEN=rota_secret", "TERM=xterm",
	"CUDA_VISIBLE_DEVICES=0", "LANG=C.UTF-8",
}

// testEnviron is the submitter's environment submitOnce gives rota submit: empty unless a
// test sets one, so that what a submit sends does not depend on where the tests run.
var testEnviron []string

// withEnviron makes env the submitter's environment for the test.
func withEnviron(t *testing.T, env []string) {
	t.Helper()
	old := testEnviron
	testEnviron = env
	t.Cleanup(func() { testEnviron = old })
}

// submitOnce runs rota submit against a recorder and returns the exit code, the spec it
// sent (zero when none) and stderr.
func submitOnce(t *testing.T, args ...string) (int, api.JobSpec, string) {
	t.Helper()
	rec := &submitRecorder{}
	var out, errOut bytes.Buffer
	env := map[string]string{"ROTA_SERVER": "http://127.0.0.1:7070", "ROTA_TOKEN": "rota_test"}
	cfg := Config{
		Stdout: &out, Stderr: &errOut,
		Now:       func() time.Time { return testNow },
		Location:  time.UTC,
		Getenv:    func(k string) string { return env[k] },
		ConfigDir: filepath.Join(t.TempDir(), "none"),
		Getwd:     func() (string, error) { return "/home/alice/proj", nil },
		Environ:   func() []string { return testEnviron },
		HTTP:      &http.Client{Transport: rec},
	}
	code := cfg.Run(context.Background(), "submit", args)
	var spec api.JobSpec
	if len(rec.bodies) > 0 {
		if err := json.Unmarshal(rec.bodies[0], &spec); err != nil {
			t.Fatal(err)
		}
	}
	return code, spec, errOut.String()
}

// TestScriptGolden submits each script of testdata/scripts and compares the spec sent
// and the warnings with script_NAME.golden.
func TestScriptGolden(t *testing.T) {
	withEnviron(t, fixedEnviron)
	paths, err := filepath.Glob("testdata/scripts/*")
	if err != nil || len(paths) < 8 {
		t.Fatalf("corpus: %v, %d scripts", err, len(paths))
	}
	for _, p := range paths {
		name := filepath.Base(p)
		t.Run(name, func(t *testing.T) {
			code, spec, stderr := submitOnce(t, p, "--lr", "0.1")
			if code != ExitOK {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			js, _ := json.MarshalIndent(spec, "", "  ")
			got := string(js) + "\n--- stderr:\n" + stderr
			checkGolden(t, "script_"+strings.TrimSuffix(name, filepath.Ext(name))+".golden", got)
		})
	}
}

func TestScriptGresAndTime(t *testing.T) {
	withEnviron(t, nil)
	code, spec, stderr := submitOnce(t, "testdata/scripts/gres_time.sh")
	if code != ExitOK || spec.GPUs != 2 || spec.TimeLimit != 600 {
		t.Fatalf("exit %d, %d GPUs, limit %ds, want 2 GPUs, 600s; %s", code, spec.GPUs, spec.TimeLimit, stderr)
	}
	text, _ := os.ReadFile("testdata/scripts/gres_time.sh")
	if want := []string{"/bin/bash", "-c", string(text), "gres_time.sh"}; !reflect.DeepEqual(spec.Command, want) {
		t.Errorf("command %q, want %q", spec.Command, want)
	}
}

func TestScriptFlagsOverrideDirectives(t *testing.T) {
	withEnviron(t, nil)
	code, spec, stderr := submitOnce(t, "--gpus", "1", "-t", "5", "-J", "mine", "testdata/scripts/resnet_a100.sh", "--gpus", "8")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if spec.GPUs != 1 || spec.TimeLimit != 300 || spec.Name != "mine" || spec.Queue != "gpu" || spec.GPUModel != "a100" {
		t.Errorf("got %d GPUs of %q, %ds, name %q, queue %q; want 1 of a100, 300s, mine, gpu", spec.GPUs, spec.GPUModel, spec.TimeLimit, spec.Name, spec.Queue)
	}
	if n := len(spec.Command); spec.Command[n-2] != "--gpus" || spec.Command[n-1] != "8" {
		t.Errorf("arguments after the script go to it: %q", spec.Command[n-2:])
	}
}

func TestScriptDashDashStaysACommand(t *testing.T) {
	withEnviron(t, nil)
	code, spec, _ := submitOnce(t, "--", "testdata/scripts/gres_time.sh", "x")
	if code != ExitOK || !reflect.DeepEqual(spec.Command, []string{"testdata/scripts/gres_time.sh", "x"}) || spec.GPUs != 0 {
		t.Errorf("exit %d, command %q, %d GPUs: after -- the file is a command as before", code, spec.Command, spec.GPUs)
	}
}

func TestScriptErrors(t *testing.T) {
	withEnviron(t, nil)
	for _, tc := range []struct {
		name, script string
		args         []string
		want         string
	}{
		{"unknown ROTA", "#!/bin/bash\n#ROTA --gpus 1\n#ROTA --gpuz 2\ntrue\n", nil, "job.sh:3: #ROTA: flag provided but not defined: -gpuz"},
		{"bad ROTA value", "#!/bin/bash\n#ROTA --time soon\n", nil, "job.sh:2: #ROTA: --time: invalid duration"},
		{"ROTA word", "#!/bin/bash\n#ROTA --gpus 1 python\n", nil, `job.sh:2: #ROTA: "python" is not a flag`},
		{"bad SBATCH time", "#!/bin/bash\n\n#SBATCH -t 10m\n", nil, "job.sh:3: #SBATCH --time=10m: want minutes"},
		{"bad SBATCH gres", "#!/bin/bash\n#SBATCH --gres=gpu:two\n", nil, `job.sh:2: #SBATCH --gres=gpu:two: invalid GPU request "gpu:two"`},
		{"bad SBATCH mem", "#!/bin/bash\n#SBATCH --mem=lots\n", nil, "job.sh:2: #SBATCH --mem=lots: want a size"},
		{"bad dependency", "#!/bin/bash\n#SBATCH --dependency=after:5\n", nil, "job.sh:2: #SBATCH --dependency: --dependency: invalid dependency"},
		{"node range", "#!/bin/bash\n#SBATCH -N 2-4\n", nil, "job.sh:2: #SBATCH --nodes=2-4: rota takes an exact number"},
		{"missing value", "#!/bin/bash\n#SBATCH --time\n", nil, "job.sh:2: #SBATCH --time: needs a value"},
		{"quote", "#!/bin/bash\n#SBATCH -J 'x\n", nil, "job.sh:2: #SBATCH: unterminated ' quote"},
		{"strict", "#!/bin/bash\n#SBATCH --qos=high\n", []string{"--strict"}, "--strict: job.sh:2: #SBATCH --qos has no rota equivalent"},
		{"strict directive", "#!/bin/bash\n#ROTA --strict\n#SBATCH -o out.log\n", nil, "--strict: job.sh:3: #SBATCH --output: rota keeps"},
		{"gres and gpus", "#!/bin/bash\n#ROTA --gres gpu:2 --gpus 2\n", nil, "job.sh:2: #ROTA: --gres gives the GPUs per node already"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "job.sh")
			if err := os.WriteFile(p, []byte(tc.script), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Chdir(dir)
			code, _, stderr := submitOnce(t, append(tc.args, "job.sh")...)
			if code != ExitUsage || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, stderr, tc.want)
			}
		})
	}
}

func TestSbatchAfterCommandWarns(t *testing.T) {
	ds, warns, err := parseDirectives("#!/bin/bash\n#SBATCH -t 5\necho hi\n#SBATCH --gpus=8\n")
	if err != nil || len(ds) != 1 || len(warns) != 1 || warns[0].line != 4 {
		t.Fatalf("directives %v, warnings %v, err %v", ds, warns, err)
	}
}

func TestScriptCommand(t *testing.T) {
	for _, tc := range []struct {
		text string
		want []string
	}{
		{"#!/bin/bash -l\necho\n", []string{"/bin/bash", "-l", "-c", "#!/bin/bash -l\necho\n", "s.sh", "a"}},
		{"#!/usr/bin/env zsh\n", []string{"/usr/bin/env", "zsh", "-c", "#!/usr/bin/env zsh\n", "s.sh", "a"}},
		{"echo\n", []string{"/bin/bash", "-c", "echo\n", "s.sh", "a"}},
	} {
		if got := scriptCommand("dir/s.sh", tc.text, []string{"a"}); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: got %q, want %q", tc.text, got, tc.want)
		}
	}
	got := scriptCommand("s.py", "#!/usr/bin/env python3\nprint(1)\n", []string{"a"})
	if got[0] != "/bin/sh" || got[3] != "s.py" || got[4] != "#!/usr/bin/env python3\nprint(1)\n" || got[5] != "a" ||
		!strings.Contains(got[2], "exec /usr/bin/env python3 /dev/fd/3") {
		t.Errorf("python: %q", got)
	}
}

// TestScriptCommandRuns runs a python-less interpreter script through the /bin/sh wrapper
// here, as a node would: the text reaches the interpreter and the file is gone.
func TestScriptCommandRuns(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("no /proc")
	}
	t.Setenv("TMPDIR", t.TempDir())
	cmd := scriptCommand("s.awk", "#!/usr/bin/awk -f\nBEGIN { print ARGV[1] }\n", []string{"hello"})
	out, err := exec.Command(cmd[0], cmd[1:]...).Output()
	if err != nil || string(out) != "hello\n" {
		t.Fatalf("%q: output %q, %v", cmd, out, err)
	}
	if left, _ := filepath.Glob(filepath.Join(os.Getenv("TMPDIR"), "rota-script.*")); len(left) > 0 {
		t.Errorf("left %v behind", left)
	}
}

func TestExportEnv(t *testing.T) {
	for _, tc := range []struct {
		spec    string
		want    map[string]string
		warn    string
		wantErr string
	}{
		{"", map[string]string{"PATH": "/opt/conda/envs/ml/bin:/usr/bin:/bin", "CONDA_PREFIX": "/opt/conda/envs/ml", "LANG": "C.UTF-8"}, "", ""},
		{"NONE", map[string]string{}, "", ""},
		{"PATH,FOO=bar", map[string]string{"PATH": "/opt/conda/envs/ml/bin:/usr/bin:/bin", "FOO": "bar"}, "", ""},
		{"ALL,LANG=C", map[string]string{"PATH": "/opt/conda/envs/ml/bin:/usr/bin:/bin", "CONDA_PREFIX": "/opt/conda/envs/ml", "LANG": "C"}, "", ""},
		{"PATH,MISSING", map[string]string{"PATH": "/opt/conda/envs/ml/bin:/usr/bin:/bin"}, "MISSING is not set here", ""},
		{"PATH,PATH=/x", nil, "", "PATH is named twice"},
		{"SSH_AUTH_SOCK", nil, "", "SSH_AUTH_SOCK is never exported: it belongs to your login session"},
		{"ROTA_TOKEN=x", nil, "", "ROTA_TOKEN is never exported"},
		{"NONE,PATH", nil, "", "NONE stands alone"},
		{"1BAD", nil, "", `"1BAD" is not a variable name`},
	} {
		got, warns, err := exportEnv(tc.spec, fixedEnviron)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want %q", tc.spec, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.spec, err)
		case !reflect.DeepEqual(got, tc.want):
			t.Errorf("%q: got %v, want %v", tc.spec, got, tc.want)
		case tc.warn != "" && (len(warns) != 1 || !strings.Contains(warns[0], tc.warn)):
			t.Errorf("%q: warnings %q, want %q", tc.spec, warns, tc.warn)
		}
	}
}

func TestExportThroughSubmit(t *testing.T) {
	withEnviron(t, fixedEnviron)
	code, spec, stderr := submitOnce(t, "--env", "CONDA_PREFIX=/other", "--", "true")
	if code != ExitOK || spec.Env["PATH"] != "/opt/conda/envs/ml/bin:/usr/bin:/bin" || spec.Env["CONDA_PREFIX"] != "/other" || spec.Env["HOME"] != "" || spec.Env["ROTA_TOKEN"] != "" {
		t.Errorf("exit %d, env %v; %s", code, spec.Env, stderr)
	}
	withEnviron(t, []string{"BIG=" + strings.Repeat("x", maxExportBytes)})
	code, _, stderr = submitOnce(t, "--", "true")
	if code != ExitUsage || !strings.Contains(stderr, "--export: the job's environment would be") || !strings.Contains(stderr, "BIG (") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
	code, spec, _ = submitOnce(t, "--export", "NONE", "--", "true")
	if code != ExitOK || len(spec.Env) != 0 {
		t.Errorf("--export NONE: exit %d, env %v", code, spec.Env)
	}
}

func TestSlurmAliasesOnCommandLine(t *testing.T) {
	withEnviron(t, nil)
	code, spec, stderr := submitOnce(t, "-N", "2", "--gres", "gpu:H100:4", "-p", "train", "-A", "nlp", "--dependency", "afterok:7:8,afterany:9", "--workdir", "sub", "--", "x")
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := api.JobSpec{Command: []string{"x"}, Nodes: 2, GPUsPerNode: 4, GPUs: 8, GPUModel: "H100", Queue: "train", Team: "nlp",
		After: []int64{9}, AfterOK: []int64{7, 8}, WorkDir: "/home/alice/proj/sub"}
	if !reflect.DeepEqual(spec, want) {
		t.Errorf("got %+v\nwant %+v", spec, want)
	}
}

func TestSubmitASharedGPU(t *testing.T) {
	withEnviron(t, nil)
	code, spec, stderr := submitOnce(t, "--gpus", "0.5", "--workdir", "/w", "--", "x")
	if code != ExitOK || spec.GPUs != 1 || spec.GPUShare != 0.5 || spec.GPUMemoryMB != 0 {
		t.Fatalf("--gpus 0.5: exit %d %s spec %+v", code, stderr, spec)
	}
	code, spec, stderr = submitOnce(t, "--gpu-mem", "20G", "--workdir", "/w", "--", "x")
	if code != ExitOK || spec.GPUs != 1 || spec.GPUMemoryMB != 20<<10 || spec.GPUShare != 0 {
		t.Fatalf("--gpu-mem 20G: exit %d %s spec %+v", code, stderr, spec)
	}
	code, spec, _ = submitOnce(t, "--gpus", "2", "--workdir", "/w", "--", "x")
	if code != ExitOK || spec.GPUs != 2 || spec.GPUShare != 0 {
		t.Fatalf("--gpus 2: exit %d spec %+v", code, spec)
	}
	for _, bad := range []struct {
		args []string
		says string
	}{
		{[]string{"--gpus", "1.5"}, "below 1"},
		{[]string{"--gpus", "0.0001"}, "thousandths"},
		{[]string{"--gpus", "half"}, "not a number of GPUs"},
		{[]string{"--gpus", "0.5", "--gpu-mem", "20G"}, "give one"},
		{[]string{"--gpu-mem", "0"}, "more than 0"},
	} {
		code, _, stderr := submitOnce(t, append(bad.args, "--", "x")...)
		if code == ExitOK || !strings.Contains(stderr, bad.says) {
			t.Errorf("%v: exit %d %q; want an error saying %q", bad.args, code, stderr, bad.says)
		}
	}
}

// --deadline takes a time relative to now, RFC 3339 or local, in a #ROTA line as on the
// command line, and --deadline-kind start turns it into a start-by deadline.
func TestSubmitDeadline(t *testing.T) {
	withEnviron(t, nil)
	dir := t.TempDir()
	script := filepath.Join(dir, "eval.sh")
	os.WriteFile(script, []byte("#!/bin/bash\n#ROTA --gpus 1 --time 2h --deadline +6h\npython eval.py\n"), 0o644)
	code, spec, stderr := submitOnce(t, script)
	if code != ExitOK || spec.Deadline == nil || !spec.Deadline.Equal(testNow.Add(6*time.Hour)) || spec.DeadlineKind != "" {
		t.Fatalf("#ROTA --deadline +6h: exit %d, deadline %v kind %q; want %v, kind left to the server; %s", code, spec.Deadline, spec.DeadlineKind, testNow.Add(6*time.Hour), stderr)
	}
	code, spec, stderr = submitOnce(t, "--deadline", "2026-03-02T08:00:00Z", "--deadline-kind", "Start", script)
	if code != ExitOK || !spec.Deadline.Equal(time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)) || spec.DeadlineKind != api.DeadlineStart {
		t.Errorf("--deadline RFC 3339 --deadline-kind Start: exit %d, %v %q; want 2026-03-02T08:00:00Z start; %s", code, spec.Deadline, spec.DeadlineKind, stderr)
	}
	code, _, stderr = submitOnce(t, "--deadline", "soonish", script)
	if code != ExitUsage || !strings.Contains(stderr, `--deadline: invalid time "soonish"`) {
		t.Errorf("--deadline soonish: exit %d, stderr %q; want a usage error naming the flag", code, stderr)
	}
}

func TestDescribeSharedGPUs(t *testing.T) {
	for _, c := range []struct {
		spec api.JobSpec
		want string
	}{
		{api.JobSpec{GPUs: 1, GPUShare: 0.5}, "0.5 of a GPU"},
		{api.JobSpec{GPUs: 1, GPUMemoryMB: 20 << 10}, "20G of a GPU"},
		{api.JobSpec{GPUs: 2}, "2 GPUs"},
	} {
		if got := describeGPUs(c.spec); got != c.want {
			t.Errorf("%+v: %q; want %q", c.spec, got, c.want)
		}
		if cell, _, _ := strings.Cut(c.want, " "); gpusCell(c.spec) != cell {
			t.Errorf("%+v: queue cell %q; want %q", c.spec, gpusCell(c.spec), cell)
		}
	}
}
