package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rotahq/rota/internal/api"
)

// submitArgSeeds are argument lists of `rota submit`, one argument a line: the documented
// forms and the ones the usage tests refuse.
var submitArgSeeds = []string{
	"--gpus\n2\n--gpu-model\nH100\n--cpus\n16\n--mem\n64G\n--time\n2h30m\n--queue\ntrain\n--name\nft\n--team\nnlp\n--workdir\n/data\n--env\nA=1\n--env\nB=x=y\n--signal\nusr1\n--grace\n2m\n--\npython\ntrain.py\n--lr\n0.1",
	"--\nnvidia-smi",
	"--gpus=1\n./run.sh\n--gpus\n8",
	"--after\n40,41\n--after-ok\n#39\n--array\n0-99%8\n--hold\n--nice\n5\n--\npython\nsweep.py",
	"--restart-policy\non-failure\n--retries\n5\n--user\ncarol\n--\ntrain.sh",
	"--gpus\n16\n--nodes\n2\n--gpus-per-node\n8\n--retries\n0\n--\ntorchrun\nt.py",
	"-o\njson\n--array\n1,3,5%2\n--time\n1-12:00:00\n--mem\n1.5T\n--\nx",
	"--time\n90\n--grace\n30\n--mem\n512\n--signal\n9\n--\nx",
	"--mem\n-1G\n--\ntrue",
	"--time\n-1h\n--\ntrue",
	"--time\n999999999-23:59:59\n--\ntrue",
	"--time\n2562047h\n--\ntrue",
	"--grace\n-5\n--\ntrue",
	"--array\n0-999999\n--\ntrue",
	"--array\n9-0\n--\ntrue",
	"--env\n=x\n--\ntrue",
	"--restart-policy\nnever\n--retries\n3\n--\nx",
	"--restart-policy\nsometimes\n--\nx",
	"--after\n0\n--\nx",
	"--after-ok\n\n--\nx",
	"--after\n9223372036854775808\n--\nx",
	"--gpus\n-1\n--\nx",
	"--gpus\n99999999999999999999\n--\nx",
	"--nice\nlow\n--\nx",
	"--server\nhttp://example.com\n--\nx",
	"--image\nregistry.example.com/ml/train:1.2\n--\npython\nt.py",
	"--image\nubuntu 22.04\n--\nx",
	"-o\nyaml\n--\nx",
	"-h",
	"--bogus\n--\nx",
	"--gpus\n1",
	"--\n",
	"",
}

// specFileSeeds are YAML job specs for -f; "" means no file.
var specFileSeeds = []string{
	"",
	"name: from-file\nqueue: batch\ngpus: 4\ncpus: 8\nmemory_mb: 2048\ntime_limit_s: 3600\nenv:\n  A: \"1\"\n  B: \"2\"\ncommand: [python, file.py]\n",
	"command:\n  - bash\n  - -c\n  - echo hi\nnodes: 2\ngpus_per_node: 8\nrestart_policy: on-failure\nretries: 2\nafter: [1, 2]\nafter_ok: [3]\narray: 0-9%2\nhold: true\nnice: -3\n",
	"gpus: -1\ncommand: [x]\n",
	"retries: -3\ncommand: [x]\n",
	"memory_mb: 9223372036854775807\ncommand: [x]\n",
	"restart_policy: sometimes\ncommand: [x]\n",
	"restart_policy: never\nretries: 1\ncommand: [x]\n",
	"after: [0]\ncommand: [x]\n",
	"array: '0-99%0'\ncommand: [x]\n",
	"env: {A: 1, B: [x]}\ncommand: [x]\n",
	"name: x\ngpus: 1\ngpu: 2\ncommand: [true]\n",
	"gpus: many\ncommand: [true]\n",
	"command: []\n",
	"---\n",
	"a: &a [*a]\n",
	"command: !!binary AAAA\n",
	"- x\n- y\n",
	"command: [x]\n---\ngpus: 1\n",
	"image: registry.example.com/ml/train:1.2\ncommand: [x]\n",
	"image: \"a\\tb\"\ncommand: [x]\n",
}

// submitTokens are what the mutator inserts into argument lists and spec files.
var submitTokens = []string{
	"\n--gpus\n", "\n--mem\n", "\n--time\n", "\n--grace\n", "\n--array\n", "\n--after\n", "\n--retries\n",
	"\n--restart-policy\n", "\n--env\n", "\n--\n", "=", "-1", "99999999999999999999", "0-9:2%3",
	"1-00:00:00", "2562047h", "G", "T", "iB", "\ngpus: ", "\ncommand: [", "\nretries: ", "null", "~",
}

// submitAnswer is the ID the fake server gives every submitted job.
const submitAnswer = 4242

// submitRecorder is an http.RoundTripper that stands for the server: it keeps the body of
// every submit and answers it as created, so the fuzz target sees exactly what the CLI
// would send, without a network.
type submitRecorder struct {
	mu     sync.Mutex // guards bodies
	bodies [][]byte
}

func (s *submitRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body.Close()
	}
	if r.Method != http.MethodPost || r.URL.Path != "/api/v1/jobs" {
		return &http.Response{StatusCode: http.StatusNotFound, Body: io.NopCloser(strings.NewReader(`{"code":"not_found","message":"not the submit route"}`)), Request: r}, nil
	}
	s.mu.Lock()
	s.bodies = append(s.bodies, body)
	s.mu.Unlock()
	var spec api.JobSpec
	json.Unmarshal(body, &spec)
	out, _ := json.Marshal(api.Job{ID: submitAnswer, Spec: spec, State: api.StatePending})
	return &http.Response{StatusCode: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader(out)), Request: r}, nil
}

// namesSpecFile reports whether arg sets -f. The target supplies the file itself: a
// fuzzed path could name /dev/zero or any file of the machine.
func namesSpecFile(arg string) bool {
	name, ok := strings.CutPrefix(arg, "-")
	if !ok {
		return false
	}
	name = strings.TrimPrefix(name, "-")
	name, _, _ = strings.Cut(name, "=")
	return name == "f"
}

func isHelp(arg string) bool {
	switch arg {
	case "-h", "--h", "-help", "--help":
		return true
	}
	return false
}

// FuzzSubmitFlags runs `rota submit` on a fuzzed argument list (one argument a line) and
// a fuzzed spec file. Oracle: a usage error sends nothing and says why; a submit sends a
// spec that passes the client's own checks, with a command and a working directory, and
// prints the ID (or with -o json the job) the server gave; nothing else sends anything.
func FuzzSubmitFlags(f *testing.F) {
	for i, a := range submitArgSeeds {
		f.Add(a, specFileSeeds[i%len(specFileSeeds)])
	}
	f.Fuzz(checkSubmitFlags)
}

func checkSubmitFlags(t *testing.T, argLines, specFile string) {
	var args []string
	if argLines != "" {
		args = strings.Split(argLines, "\n")
	}
	for _, a := range args {
		if namesSpecFile(a) {
			return // the target names the spec file
		}
	}
	if specFile != "" {
		path := filepath.Join(t.TempDir(), "spec.yaml")
		if err := os.WriteFile(path, []byte(specFile), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"-f", path}, args...)
	}
	rec := &submitRecorder{}
	var out, errOut bytes.Buffer
	env := map[string]string{"ROTA_SERVER": "http://127.0.0.1:7070", "ROTA_TOKEN": "rota_fuzz"}
	cfg := Config{
		Stdout: &out, Stderr: &errOut, Stdin: strings.NewReader(""),
		Now:       func() time.Time { return testNow },
		Location:  time.UTC,
		Getenv:    func(k string) string { return env[k] },
		ConfigDir: filepath.Join(t.TempDir(), "none"),
		Getwd:     func() (string, error) { return "/home/alice/proj", nil },
		HTTP:      &http.Client{Transport: rec},
	}
	code := cfg.Run(context.Background(), "submit", args)
	sent := rec.bodies
	switch {
	case len(sent) > 1:
		t.Fatalf("args %q: %d submits sent, want at most one", args, len(sent))
	case len(sent) == 0:
		switch code {
		case ExitUsage, ExitError:
			if errOut.Len() == 0 {
				t.Fatalf("args %q: exit %d without a word on stderr", args, code)
			}
			if code == ExitUsage && out.Len() > 0 {
				t.Fatalf("args %q: usage error printed %q to stdout", args, out.String())
			}
		case ExitOK:
			if !slices.ContainsFunc(args, isHelp) {
				t.Fatalf("args %q: exit 0 without a submit or -h; stderr %q", args, errOut.String())
			}
		default:
			t.Fatalf("args %q: exit %d", args, code)
		}
		return
	}
	if code != ExitOK {
		t.Fatalf("args %q: sent a submit the server took, then exit %d; stderr %q", args, code, errOut.String())
	}
	var spec api.JobSpec
	dec := json.NewDecoder(bytes.NewReader(sent[0]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		t.Fatalf("args %q: sent %s, which the server's decoder refuses: %v", args, sent[0], err)
	}
	if err := checkSpec(spec); err != nil {
		t.Fatalf("args %q: sent a spec its own checks refuse: %v\n%s", args, err, sent[0])
	}
	if len(spec.Command) == 0 || spec.WorkDir == "" {
		t.Fatalf("args %q: sent a spec without a command or working directory: %s", args, sent[0])
	}
	// A table prints the ID on the last line, -o json the job.
	var job api.Job
	if lastLine(out.String()) != strconv.Itoa(submitAnswer) && (json.Unmarshal(out.Bytes(), &job) != nil || job.ID != submitAnswer) {
		t.Fatalf("args %q: printed %q, neither the job ID %d last nor the job", args, out.String(), submitAnswer)
	}
}

// FuzzSpecFile reads a fuzzed YAML job spec. Oracle: an error names the file; an accepted
// spec written back as YAML reads back the same (up to empty versus absent lists and maps).
func FuzzSpecFile(f *testing.F) {
	for _, s := range specFileSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(checkSpecFile)
}

func checkSpecFile(t *testing.T, data []byte) {
	dir := t.TempDir()
	path := filepath.Join(dir, "spec.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	spec, err := readSpecFile(path)
	if err != nil {
		if !strings.Contains(err.Error(), path) {
			t.Fatalf("error %q does not name the file", err)
		}
		return
	}
	again, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatalf("accepted %q, but cannot write it back: %v", data, err)
	}
	back := filepath.Join(dir, "back.yaml")
	if err := os.WriteFile(back, again, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := readSpecFile(back)
	if err != nil {
		t.Fatalf("accepted %q, written back as %q, which reads as an error: %v", data, again, err)
	}
	if a, b := normalSpec(spec), normalSpec(got); !reflect.DeepEqual(a, b) {
		t.Fatalf("%q reads as\n%+v\nwritten back as %q it reads as\n%+v", data, a, again, b)
	}
}

// normalSpec makes empty lists and maps nil, which YAML cannot tell apart from absent ones.
func normalSpec(s api.JobSpec) api.JobSpec {
	if len(s.Command) == 0 {
		s.Command = nil
	}
	if len(s.Env) == 0 {
		s.Env = nil
	}
	if len(s.After) == 0 {
		s.After = nil
	}
	if len(s.AfterOK) == 0 {
		s.AfterOK = nil
	}
	if len(s.Notify) == 0 {
		s.Notify = nil
	}
	return s
}

// FuzzDirectives reads a fuzzed script's header. Oracle: an error starts with the number
// of a line of the script; every directive and warning names a line of the script, each
// directive at or before the header's end; and applying the directives never panics.
func FuzzDirectives(f *testing.F) {
	paths, _ := filepath.Glob("testdata/scripts/*")
	for _, p := range paths {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(string(data))
		}
	}
	for _, s := range []string{
		"", "#!/bin/bash\n", "#SBATCH\n", "#ROTA\n", "#SBATCH -t\n", "#SBATCH --gres=gpu:a:b:c\n",
		"#ROTA --gpus 1 --env A=1 --\n", "#SBATCH -J \"a \\\"b\\\"\" # c\n", "#SBATCH -N2 -c4 -t1-0\n",
		"#SBATCH --signal=B:USR1@\n", "#SBATCH --dependency=afterok:1?afterany:2\n", "\r\n#SBATCH --mem=1T\r\n",
		"#SBATCH --array=0-9%2 --export=ALL,A=1\n", "#ROTA --strict\n#SBATCH --frob x y\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		lines := strings.Count(text, "\n") + 1
		ds, warns, err := parseDirectives(text)
		if err != nil {
			n, _, ok := strings.Cut(err.Error(), ":")
			if l, convErr := strconv.Atoi(n); !ok || convErr != nil || l < 1 || l > lines {
				t.Fatalf("error %q does not start with a line of the script (1-%d)", err, lines)
			}
			return
		}
		for _, d := range ds {
			if d.line < 1 || d.line > lines || len(d.args) == 0 {
				t.Fatalf("directive %+v: line out of 1-%d or no arguments", d, lines)
			}
		}
		for _, w := range warns {
			if w.line < 1 || w.line > lines || w.msg == "" {
				t.Fatalf("warning %+v: line out of 1-%d or empty", w, lines)
			}
		}
		s := &batchScript{name: "job.sh", text: text, directives: ds, warnings: warns}
		fs := flag.NewFlagSet("submit", flag.ContinueOnError)
		fl := submitFlags{env: envFlag{}}
		fl.register(fs, true)
		cfg := Config{Getwd: func() (string, error) { return "/home/alice/proj", nil }}
		spec, _, err := buildSpec(cfg, fs, fl, s, nil)
		if err == nil && (len(spec.Command) == 0 || checkSpec(spec) != nil) {
			t.Fatalf("accepted %q as %+v", text, spec)
		}
	})
}
