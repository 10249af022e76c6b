package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// checkGolden compares got with testdata/name, or rewrites the file under -update.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -update rewrites it)\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
}

func TestTablesGolden(t *testing.T) {
	srv := newFakeServer(t)
	for _, tc := range []struct {
		golden string
		verb   string
		args   []string
	}{
		{"queue.golden", "queue", nil},
		{"queue_expand.golden", "queue", []string{"--expand"}},
		{"show_multinode.golden", "show", []string{"47"}},
		{"show.golden", "show", []string{"42"}},
		{"show_pending.golden", "show", []string{"43"}},
		{"show_held.golden", "show", []string{"44_0"}},
		{"show_array.golden", "show", []string{"60"}},
		{"nodes.golden", "nodes", nil},
		{"node_show.golden", "nodes", []string{"node-a"}},
		{"node_show_degraded.golden", "nodes", []string{"node-b"}},
		{"show_oom.golden", "show", []string{"45"}},
		{"why.golden", "why", []string{"43"}},
		{"why_running.golden", "why", []string{"42"}},
		{"queue_list.golden", "admin", []string{"queue", "list"}},
		{"team_list.golden", "admin", []string{"team", "list"}},
		{"reservations.golden", "admin", []string{"reservations"}},
		{"user_list.golden", "admin", []string{"user", "list"}},
		{"token_list.golden", "admin", []string{"token", "list"}},
		{"join_token_list.golden", "admin", []string{"join-token", "list"}},
		{"audit.golden", "admin", []string{"audit"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			code, out, errOut := run(t, srv.URL, tc.verb, tc.args...)
			if code != ExitOK {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			checkGolden(t, tc.golden, out)
		})
	}
}

func TestQueueFiltersAndPages(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // query of the first page
	}{
		{nil, "arrays=collapse"},
		{[]string{"--all"}, "state=all"},
		{[]string{"--state", "pending,Running", "--queue", "train", "--user", "bob"}, "arrays=collapse&queue=train&state=PENDING%2CRUNNING&user=bob"},
		{[]string{"--state", "pending,failed"}, "state=PENDING%2CFAILED"},
		{[]string{"--expand"}, ""},
	} {
		srv := newFakeServer(t)
		code, out, errOut := run(t, srv.URL, "queue", tc.args...)
		if code != ExitOK {
			t.Fatalf("%v: exit %d, stderr %q", tc.args, code, errOut)
		}
		if len(srv.queries) != 2 || srv.queries[0] != tc.want || !strings.Contains(srv.queries[1], "after=page2") {
			t.Errorf("%v: queries %q, want %q then one with after=page2", tc.args, srv.queries, tc.want)
		}
		if !strings.Contains(out, "\n45 ") {
			t.Errorf("%v: the second page's job 45 is missing:\n%s", tc.args, out)
		}
	}
}

func TestJSONOutputParsesBack(t *testing.T) {
	srv := newFakeServer(t)

	_, out, _ := run(t, srv.URL, "queue", "-o", "json")
	var list api.JobList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("queue -o json: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(list.Jobs, fixtureJobs()) {
		t.Errorf("queue -o json lost something:\n%s", out)
	}

	// Flags may follow the job ID.
	_, out, _ = run(t, srv.URL, "show", "42", "--output", "json")
	var d api.JobDetail
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("show -o json: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(d, fixtureDetail()) {
		t.Errorf("show -o json lost something:\n%s", out)
	}
	var keys map[string]any
	json.Unmarshal([]byte(out), &keys)
	// reason is omitempty in api.Job, and job 42 runs without one.
	for _, k := range []string{"id", "state", "nodes", "gpus", "exit_code", "attempts", "attempt_list", "events", "spec"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("show -o json has no %q", k)
		}
	}

	_, out, _ = run(t, srv.URL, "nodes", "-o", "json")
	var nodes api.NodeList
	if err := json.Unmarshal([]byte(out), &nodes); err != nil {
		t.Fatalf("nodes -o json: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(nodes, fixtureNodes()) {
		t.Errorf("nodes -o json lost something:\n%s", out)
	}

	_, out, _ = run(t, srv.URL, "cancel", "-o", "json", "42", "43")
	var cancelled []api.Job
	if err := json.Unmarshal([]byte(out), &cancelled); err != nil || len(cancelled) != 2 {
		t.Fatalf("cancel -o json of two jobs: %v\n%s", err, out)
	}

	for _, tc := range []struct {
		args []string
		into any
		want any
	}{
		{[]string{"why", "43", "-o", "json"}, &api.Why{}, fixtureWhy()},
		{[]string{"admin", "queue", "list", "-o", "json"}, &api.QueueList{}, api.QueueList{Queues: fixtureQueues()}},
		{[]string{"admin", "team", "list", "-o", "json"}, &api.TeamList{}, fixtureTeams()},
		{[]string{"admin", "reservations", "-o", "json"}, &api.ReservationList{}, fixtureReservations()},
	} {
		code, out, errOut := run(t, srv.URL, tc.args[0], tc.args[1:]...)
		if code != ExitOK {
			t.Fatalf("%v: exit %d, stderr %q", tc.args, code, errOut)
		}
		if err := json.Unmarshal([]byte(out), tc.into); err != nil {
			t.Fatalf("%v: %v\n%s", tc.args, err, out)
		}
		// The fixtures' times are UTC, as they come back from JSON.
		if got := reflect.ValueOf(tc.into).Elem().Interface(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%v lost something:\n%s", tc.args, out)
		}
	}
}

func TestSubmitPrintsIDLast(t *testing.T) {
	srv := newFakeServer(t)
	code, out, errOut := run(t, srv.URL, "submit", "--gpus", "2", "--", "python", "train.py")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if !strings.HasPrefix(out, "Submitted job 46 (queue train, 2 GPUs)\n") {
		t.Errorf("first line: %q", out)
	}
	if lastLine(out) != "46" {
		t.Errorf("last line %q, want the ID alone", lastLine(out))
	}

	code, out, _ = run(t, srv.URL, "submit", "--image", "nvcr.io/nvidia/pytorch:24.05-py3", "--", "python", "t.py")
	if code != ExitOK || !strings.HasPrefix(out, "Submitted job 46 (queue train, no GPUs, image nvcr.io/nvidia/pytorch:24.05-py3)\n") {
		t.Errorf("submit --image: exit %d, stdout %q", code, out)
	}

	code, out, _ = run(t, srv.URL, "submit", "-o", "json", "--", "true")
	var job api.Job
	if err := json.Unmarshal([]byte(out), &job); code != ExitOK || err != nil || job.ID != 46 {
		t.Errorf("submit -o json: exit %d, %v\n%s", code, err, out)
	}
}

// A submit whose answer is lost after the request may have reached the server is sent
// once more with the same key and body: whether the connection broke before any answer, or
// the answer was cut short in its body (the decoder must refuse what it read).
func TestSubmitRetriesOnceAfterLostAnswer(t *testing.T) {
	for name, lose := range map[string]func(t *testing.T, w http.ResponseWriter){
		"connection dropped": func(t *testing.T, w http.ResponseWriter) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			conn.Close()
		},
		"answer cut short": func(t *testing.T, w http.ResponseWriter) {
			// Half of the job is sent, then the connection ends before the length declared.
			body := `{"id":46,"state":"PENDING","spec":{"queue":"train","command":["true"]}}`
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, body[:len(body)/2])
		},
	} {
		t.Run(name, func(t *testing.T) {
			var (
				mu     sync.Mutex // guards keys and bodies
				keys   []string
				bodies []string
			)
			mux := http.NewServeMux()
			mux.HandleFunc("POST /api/v1/jobs", func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				mu.Lock()
				keys = append(keys, r.Header.Get("Idempotency-Key"))
				bodies = append(bodies, string(body))
				first := len(keys) == 1
				mu.Unlock()
				if first {
					// The request arrived, and the job would exist; the answer is lost.
					lose(t, w)
					return
				}
				w.Header().Set("Idempotent-Replayed", "true")
				writeJSON(w, http.StatusOK, api.Job{ID: 46, Spec: api.JobSpec{Queue: "train", Command: []string{"true"}}, State: api.StatePending})
			})
			url := newHTTPServer(t, mux)
			code, out, errOut := run(t, url, "submit", "--", "true")
			mu.Lock()
			if code != ExitOK || lastLine(out) != "46" {
				mu.Unlock()
				t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
			}
			if len(keys) != 2 || keys[0] != keys[1] || !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(keys[0]) || bodies[0] != bodies[1] {
				t.Errorf("requests with keys %q and bodies %q; want two alike, with a key of 32 hex digits", keys, bodies)
			}
			mu.Unlock()

			// A second submit is another job, with another key.
			code, _, _ = run(t, url, "submit", "--", "true")
			mu.Lock()
			defer mu.Unlock()
			if code != ExitOK || len(keys) != 3 || keys[2] == keys[0] {
				t.Errorf("exit %d, keys %q; want a third, new key", code, keys)
			}
		})
	}
}

// A standby that forwarded a submit and lost the leader's answer says so with a 502
// forward_failed: the answer was lost, as with a connection broken mid-way, so the submit
// is sent once more with the same key; other requests are not.
func TestSubmitRetriesOnceAfterForwardFailed(t *testing.T) {
	var (
		mu   sync.Mutex // guards keys and gets
		keys []string
		gets int
	)
	lost := api.Error{Code: api.CodeForwardFailed, Message: "this rota server is a standby; it lost the leader's answer"}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		first := len(keys) == 1
		mu.Unlock()
		if first {
			writeJSON(w, http.StatusBadGateway, lost)
			return
		}
		w.Header().Set("Idempotent-Replayed", "true")
		writeJSON(w, http.StatusOK, api.Job{ID: 47, Spec: api.JobSpec{Queue: "train", Command: []string{"true"}}, State: api.StatePending})
	})
	mux.HandleFunc("POST /api/v1/jobs/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		gets++
		mu.Unlock()
		writeJSON(w, http.StatusBadGateway, lost)
	})
	url := newHTTPServer(t, mux)
	code, out, errOut := run(t, url, "submit", "--", "true")
	if code != ExitOK || lastLine(out) != "47" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if len(keys) != 2 || keys[0] != keys[1] || keys[0] == "" {
		t.Errorf("requests with keys %q; want two alike", keys)
	}
	c, err := NewClient(Endpoint{Server: url})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(context.Background(), 47); err == nil || gets != 1 || !strings.Contains(err.Error(), "lost the leader's answer") {
		t.Errorf("cancel after forward_failed: %v after %d requests; want a failure after one request", err, gets)
	}
}

func TestSubmitDoesNotRetryAnswers(t *testing.T) {
	for _, status := range []int{http.StatusBadRequest, http.StatusConflict, http.StatusInternalServerError, http.StatusServiceUnavailable} {
		var calls atomic.Int32
		mux := http.NewServeMux()
		mux.HandleFunc("POST /api/v1/jobs", func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			writeJSON(w, status, api.Error{Code: "x", Message: "no: " + http.StatusText(status)})
		})
		url := newHTTPServer(t, mux)
		code, _, errOut := run(t, url, "submit", "--", "true")
		if want := "rota: no: " + http.StatusText(status) + "\n"; code != ExitError || errOut != want || calls.Load() != 1 {
			t.Errorf("answer %d: exit %d, stderr %q, %d requests; want %q after one", status, code, errOut, calls.Load(), want)
		}
	}
}

func TestSubmitBuildsSpec(t *testing.T) {
	dir := t.TempDir()
	specFile := filepath.Join(dir, "spec.yaml")
	os.WriteFile(specFile, []byte(`name: from-file
queue: batch
gpus: 4
cpus: 8
memory_mb: 2048
time_limit_s: 3600
env:
  A: "1"
  B: "2"
command: [python, file.py]
`), 0o644)
	imageFile := filepath.Join(dir, "image.yaml")
	os.WriteFile(imageFile, []byte("image: registry.example.com/ml/train:1.2\ncommand: [python, t.py]\n"), 0o644)
	versionFile := filepath.Join(dir, "versions.yaml")
	os.WriteFile(versionFile, []byte("cuda: \">=12.4,<13\"\ndriver: \">=550\"\ncommand: [python, t.py]\n"), 0o644)

	for _, tc := range []struct {
		name string
		args []string
		want api.JobSpec
	}{
		{"flags",
			[]string{"--gpus", "2", "--gpu-model", "H100", "--cpus", "16", "--mem", "64G", "--time", "2h30m", "--queue", "train",
				"--name", "ft", "--team", "nlp", "--workdir", "/data", "--env", "A=1", "--env", "B=x=y", "--signal", "usr1", "--grace", "2m",
				"--", "python", "train.py", "--lr", "0.1"},
			api.JobSpec{Name: "ft", Queue: "train", Team: "nlp", Command: []string{"python", "train.py", "--lr", "0.1"},
				WorkDir: "/data", Env: map[string]string{"A": "1", "B": "x=y"}, GPUs: 2, GPUModel: "H100", CPUs: 16, MemoryMB: 64 << 10,
				TimeLimit: 9000, Signal: "SIGUSR1", Grace: 120}},
		{"defaults",
			[]string{"--", "nvidia-smi"},
			api.JobSpec{Command: []string{"nvidia-smi"}, WorkDir: "/home/alice/proj"}},
		{"command without --",
			[]string{"--gpus=1", "./run.sh", "--gpus", "8"},
			api.JobSpec{Command: []string{"./run.sh", "--gpus", "8"}, WorkDir: "/home/alice/proj", GPUs: 1}},
		{"file",
			[]string{"-f", specFile},
			api.JobSpec{Name: "from-file", Queue: "batch", Command: []string{"python", "file.py"}, WorkDir: "/home/alice/proj",
				Env: map[string]string{"A": "1", "B": "2"}, GPUs: 4, CPUs: 8, MemoryMB: 2048, TimeLimit: 3600}},
		{"flags override file",
			[]string{"-f", specFile, "--gpus", "0", "--env", "B=3", "--time", "1-00", "--", "bash", "x.sh"},
			api.JobSpec{Name: "from-file", Queue: "batch", Command: []string{"bash", "x.sh"}, WorkDir: "/home/alice/proj",
				Env: map[string]string{"A": "1", "B": "3"}, GPUs: 0, CPUs: 8, MemoryMB: 2048, TimeLimit: 86400}},
		{"dependencies, array, hold, nice",
			[]string{"--after", "40,41", "--after-ok", "#39", "--array", "0-99%8", "--hold", "--nice", "5", "--", "python", "sweep.py"},
			api.JobSpec{Command: []string{"python", "sweep.py"}, WorkDir: "/home/alice/proj",
				After: []int64{40, 41}, AfterOK: []int64{39}, Array: "0-99%8", Hold: true, Nice: 5}},
		{"restart policy, on behalf of",
			[]string{"--restart-policy", "on-failure", "--retries", "5", "--user", "carol", "--", "train.sh"},
			api.JobSpec{User: "carol", Command: []string{"train.sh"}, WorkDir: "/home/alice/proj", RestartPolicy: api.RestartOnFailure, Retries: intp(5)}},
		{"image",
			[]string{"--image", "registry.example.com/ml/train:1.2", "--", "python", "t.py"},
			api.JobSpec{Command: []string{"python", "t.py"}, WorkDir: "/home/alice/proj", Image: "registry.example.com/ml/train:1.2"}},
		{"image from the file",
			[]string{"-f", imageFile},
			api.JobSpec{Command: []string{"python", "t.py"}, WorkDir: "/home/alice/proj", Image: "registry.example.com/ml/train:1.2"}},
		{"--image overrides the file's; empty runs on the node",
			[]string{"-f", imageFile, "--image", ""},
			api.JobSpec{Command: []string{"python", "t.py"}, WorkDir: "/home/alice/proj"}},
		{"versions",
			[]string{"--cuda", " >=12.4,<13 ", "--driver=>=550", "--", "python", "t.py"},
			api.JobSpec{Command: []string{"python", "t.py"}, WorkDir: "/home/alice/proj", CUDA: ">=12.4,<13", Driver: ">=550"}},
		{"versions from the file, a flag overrides",
			[]string{"-f", versionFile, "--cuda", "=12.2"},
			api.JobSpec{Command: []string{"python", "t.py"}, WorkDir: "/home/alice/proj", CUDA: "=12.2", Driver: ">=550"}},
		{"multi-node",
			[]string{"--gpus", "16", "--nodes", "2", "--gpus-per-node", "8", "--retries", "0", "--", "torchrun", "t.py"},
			api.JobSpec{Command: []string{"torchrun", "t.py"}, WorkDir: "/home/alice/proj", GPUs: 16, Nodes: 2, GPUsPerNode: 8, Retries: intp(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeServer(t)
			code, _, errOut := run(t, srv.URL, "submit", tc.args...)
			if code != ExitOK {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			if !reflect.DeepEqual(srv.spec, tc.want) {
				t.Errorf("server got\n%+v\nwant\n%+v", srv.spec, tc.want)
			}
		})
	}
}

func TestSubmitUsageErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("name: x\ngpus: 1\ngpu: 2\ncommand: [true]\n"), 0o644)
	badType := filepath.Join(dir, "badtype.yaml")
	os.WriteFile(badType, []byte("gpus: many\ncommand: [true]\n"), 0o644)
	badImage := filepath.Join(dir, "badimage.yaml")
	os.WriteFile(badImage, []byte("image: \"ubuntu\\n:22.04\"\ncommand: [true]\n"), 0o644)

	for _, tc := range []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"unknown flag", []string{"--bogus", "--", "true"}, "flag provided but not defined: -bogus"},
		{"bad size", []string{"--mem", "16X", "--", "true"}, `--mem: invalid size "16X"`},
		{"negative size", []string{"--mem", "-1G", "--", "true"}, `--mem: invalid size "-1G": must be 0 or more`},
		{"bad duration", []string{"--time", "soon", "--", "true"}, `--time: invalid duration "soon"`},
		{"negative duration", []string{"--time", "-1h", "--", "true"}, `--time: invalid duration "-1h": must be 0 or more`},
		{"bad grace", []string{"--grace", "later", "--", "true"}, `--grace: invalid duration "later"`},
		{"negative gpus", []string{"--gpus", "-1", "--", "true"}, "--gpus must be 0 or more, got -1"},
		{"negative cpus", []string{"--cpus", "-4", "--", "true"}, "--cpus must be 0 or more, got -4"},
		{"bad env", []string{"--env", "NOVALUE", "--", "true"}, `want KEY=VALUE, got "NOVALUE"`},
		{"bad output", []string{"-o", "yaml", "--", "true"}, `unknown format "yaml"`},
		{"empty command", []string{"--gpus", "1"}, "rota submit: no command: give it after --, e.g. rota submit --gpus 1 -- python train.py"},
		{"empty command after --", []string{"--gpus", "1", "--"}, "no command"},
		{"unknown field", []string{"-f", bad}, `line 3: unknown field "gpu"`},
		{"wrong type", []string{"-f", badType}, "line 1: cannot unmarshal"},
		{"missing file", []string{"-f", filepath.Join(dir, "nope.yaml"), "--", "true"}, "nope.yaml"},
		{"bad after", []string{"--after", "40,x", "--", "true"}, `--after: invalid job ID "x"`},
		{"empty after-ok", []string{"--after-ok", "", "--", "true"}, `--after-ok: invalid job ID ""`},
		{"bad array", []string{"--array", "9-0", "--", "true"}, `--array: invalid array "9-0": "9-0": the range runs backwards`},
		{"huge array", []string{"--array", "0-999999", "--", "true"}, "more than 10000 jobs"},
		{"bad nice", []string{"--nice", "low", "--", "true"}, `invalid value "low" for flag -nice`},
		{"image with a space", []string{"--image", "ubuntu 22.04", "--", "true"},
			`rota submit: --image: invalid image "ubuntu 22.04": an image reference has no spaces or control characters, e.g. registry.example.com/ml/train:1.2`},
		{"image with a newline in the file", []string{"-f", badImage}, `--image: invalid image "ubuntu\n:22.04"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Nothing is sent on a usage error, so no server is needed.
			code, out, errOut := run(t, "http://127.0.0.1:1", "submit", tc.args...)
			if code != ExitUsage {
				t.Errorf("exit %d, want %d; stderr %q", code, ExitUsage, errOut)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr %q does not contain %q", errOut, tc.want)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"512M", 512}, {"512", 512}, {"1024", 1024}, {"512MB", 512}, {"16G", 16384}, {"16g", 16384},
		{"16GiB", 16384}, {"16GB", 16384}, {"1.5G", 1536}, {"1T", 1 << 20}, {"2TiB", 2 << 20}, {"0", 0}, {" 8G ", 8192},
	} {
		got, err := ParseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "G", "16X", "16GG", "16KB", "16 B", "1e3G", "sixteen", "-5", "16iB", "99999999999999999T"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestParseTimeLimit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"90m", 5400}, {"2h30m", 9000}, {"1.5s", 2}, {"0", 0},
		{"30", 1800}, {"10:30", 630}, {"01:30:00", 5400}, {"1-12", 129600},
		{"1-12:30", 131400}, {"2-03:04:05", 2*86400 + 3*3600 + 4*60 + 5},
	} {
		got, err := parseTimeLimit(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("parseTimeLimit(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "soon", "1:2:3:4", "1-", "-1h", "-5", "1d", "9999999999", "1-1:1:1:1"} {
		if got, err := parseTimeLimit(in); err == nil {
			t.Errorf("parseTimeLimit(%q) = %d, want an error", in, got)
		}
	}
}

func TestServerErrors(t *testing.T) {
	srv := newFakeServer(t)
	code, _, errOut := run(t, srv.URL, "submit", "--queue", "nope", "--", "true")
	if code != ExitError || errOut != "rota: no queue \"nope\" (field queue)\n" {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = run(t, srv.URL, "show", "7")
	if code != ExitError || errOut != "rota: no job 7\n" {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	// A body that is no api.Error still says what happened.
	plain := http.NewServeMux()
	plain.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream timed out", http.StatusBadGateway)
	})
	proxy := newHTTPServer(t, plain)
	code, _, errOut = run(t, proxy, "nodes")
	if code != ExitError || errOut != "rota: server answered 502 Bad Gateway: upstream timed out\n" {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

func TestUnreachable(t *testing.T) {
	// A port that was just free: nothing listens there.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	code, _, errOut := run(t, "", "queue", "--server", addr)
	if code != ExitError {
		t.Errorf("exit %d", code)
	}
	for _, want := range []string{"rota: cannot reach the rota server at http://" + addr + ": ", "(is `rota up` or `rota server` running? set --server or ROTA_SERVER)"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr %q does not contain %q", errOut, want)
		}
	}
}

func TestUsage(t *testing.T) {
	srv := newFakeServer(t)
	for _, tc := range []struct {
		verb string
		args []string
		code int
		want string
	}{
		{"bogus", nil, ExitUsage, `rota: unknown command "bogus"`},
		{"show", nil, ExitUsage, "want exactly one job ID"},
		{"show", []string{"abc"}, ExitUsage, `invalid job ID "abc"`},
		{"show", []string{"42", "--verbose"}, ExitUsage, "flag provided but not defined: -verbose"},
		{"cancel", nil, ExitUsage, "no job ID given"},
		{"queue", []string{"--state", "WAITING"}, ExitUsage, `unknown state "WAITING"`},
		{"queue", []string{"--all", "--state", "RUNNING"}, ExitUsage, "--all and --state exclude each other"},
		{"nodes", []string{"node-a", "extra"}, ExitUsage, `rota nodes: unexpected argument "extra": give one node name at most`},
		{"nodes", []string{""}, ExitUsage, "rota nodes: the node name is empty"},
		{"nodes", []string{"node-z"}, ExitError, `rota: no node "node-z" (rota nodes lists them)`},
		{"logs", []string{"--attempt", "-1", "42"}, ExitUsage, "--attempt must be 1 or more"},
		{"nodes", []string{"-h"}, ExitOK, "usage: rota nodes"},
		{"why", nil, ExitUsage, "want exactly one job ID"},
		{"why", []string{"42", "43"}, ExitUsage, "want exactly one job ID, got 2"},
		{"hold", nil, ExitUsage, "rota hold: no job ID given"},
		{"release", []string{"x"}, ExitUsage, `rota release: invalid job ID "x"`},
		{"cancel", []string{"60_x"}, ExitUsage, `rota cancel: invalid job "60_x": index "x" is not a number`},
		{"submit", []string{"--restart-policy", "sometimes", "--", "true"}, ExitUsage,
			`--restart-policy: unknown policy "sometimes": want never, on-failure or always`},
		{"submit", []string{"--restart-policy", "never", "--retries", "2", "--", "true"}, ExitUsage,
			"--retries 2 would never be used: under --restart-policy never no attempt is retried"},
		{"whoami", []string{"extra"}, ExitUsage, `rota whoami: unexpected argument "extra"`},
	} {
		code, _, errOut := run(t, srv.URL, tc.verb, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s %v: exit %d, stderr %q; want exit %d and %q", tc.verb, tc.args, code, errOut, tc.code, tc.want)
		}
	}
}

func TestCancel(t *testing.T) {
	srv := newFakeServer(t)
	code, out, errOut := run(t, srv.URL, "cancel", "43", "42", "45", "99")
	want := "Cancelled job 43\nCancel requested for job 42 (running on node-a)\nJob 45 had already ended: FAILED\n"
	if code != ExitError || out != want || errOut != "rota: job 99: no job 99\n" {
		t.Errorf("exit %d\nstdout %q\nwant   %q\nstderr %q", code, out, want, errOut)
	}
	code, out, _ = run(t, srv.URL, "cancel", "43", "-o", "json")
	var job api.Job
	if err := json.Unmarshal([]byte(out), &job); code != ExitOK || err != nil || job.State != api.StateCancelled {
		t.Errorf("cancel -o json of one job: exit %d, %v\n%s", code, err, out)
	}
}

// logServer serves job 42's log in chunks (see serveChunks), of attempt 2 on one node,
// and records the query of every log request.
func logServer(t *testing.T, chunks []string) (url string, queries func() []string) {
	return logServerFunc(t, func(w http.ResponseWriter, r *http.Request) { serveChunks(t, w, r, chunks, 2) })
}

// logServerFunc serves job 42 and its log through serve, and records the query of every
// log request.
func logServerFunc(t *testing.T, serve http.HandlerFunc) (url string, queries func() []string) {
	var (
		mu   sync.Mutex // guards seen
		seen []string
	)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/jobs/42", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, fixtureDetail())
	})
	mux.HandleFunc("GET /api/v1/jobs/42/logs", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.RawQuery)
		mu.Unlock()
		serve(w, r)
	})
	return newHTTPServer(t, mux), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

func TestLogsFollow(t *testing.T) {
	url, queries := logServer(t, []string{"epoch 1\n", "epoch 2\n", "done\n"})
	code, out, errOut := run(t, url, "logs", "-f", "42")
	if code != ExitOK || out != "epoch 1\nepoch 2\ndone\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	want := []string{"wait=30", "attempt=2&offset=8&wait=30", "attempt=2&offset=16&wait=30"}
	if got := queries(); !reflect.DeepEqual(got, want) {
		t.Errorf("requests %q, want %q", got, want)
	}

	// Without -f one request prints what there is.
	url, queries = logServer(t, []string{"epoch 1\n", "epoch 2\n"})
	code, out, _ = run(t, url, "logs", "42", "--attempt", "1")
	if code != ExitOK || out != "epoch 1\nepoch 2\n" || len(queries()) != 1 || queries()[0] != "attempt=1" {
		t.Errorf("exit %d, stdout %q, requests %q", code, out, queries())
	}
}

// TestLogsReadsALongLogWhole: the server answers a log in pieces of a bounded size, so a
// log longer than one piece takes several requests even without -f, each from where the
// last ended and on the attempt the first was of.
func TestLogsReadsALongLogWhole(t *testing.T) {
	const piece = 1000
	log := strings.Repeat("0123456789abcdefghi\n", 260) // 5,200 bytes: six pieces
	url, queries := logServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
		offset, _ := strconv.Atoi(r.URL.Query().Get("offset"))
		end := min(offset+piece, len(log))
		w.Header().Set("X-Rota-Log-Size", strconv.Itoa(len(log)))
		w.Header().Set("X-Rota-Log-Attempt", "2")
		// A running job's log: never done, so only the size says where it ends now.
		w.Header().Set("X-Rota-Log-Done", "false")
		w.Write([]byte(log[offset:end]))
	})
	code, out, errOut := run(t, url, "logs", "42")
	if code != ExitOK || out != log {
		t.Fatalf("exit %d, stderr %q, stdout %d bytes, want the whole log of %d", code, errOut, len(out), len(log))
	}
	want := []string{""}
	for o := piece; o < len(log); o += piece {
		want = append(want, fmt.Sprintf("attempt=2&offset=%d", o))
	}
	if got := queries(); !reflect.DeepEqual(got, want) {
		t.Errorf("requests %q, want %q", got, want)
	}
}

// A log the server holds only in part, which its node could not send again, is printed
// as far as it goes, with the server's reason on stderr and a failing exit.
func TestLogsSaysWhenTheLogIsIncomplete(t *testing.T) {
	url, _ := logServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Rota-Log-Size", "6")
		w.Header().Set("X-Rota-Log-Done", "true")
		w.Header().Set("X-Rota-Log-Incomplete", "this server holds 6 of the 12 bytes node node-a reported; the node is LOST")
		w.Write([]byte("epoch\n"))
	})
	code, out, errOut := run(t, url, "logs", "42")
	want := "rota: the log of job 42 is incomplete: this server holds 6 of the 12 bytes node node-a reported; the node is LOST"
	if code != ExitError || out != "epoch\n" || errOut != want+"\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, the part, and %q", code, out, errOut, ExitError, want)
	}
}

// A follow of a running task's log that the server keeps no more of says so once, after
// the output, when it has caught up, and follows on to the task's end.
func TestLogsFollowSaysWhenTheServerKeepsNoMore(t *testing.T) {
	full := "this server keeps the first 12 bytes of a rank's log (rota server --max-log-size); the rest stays on node node-a, and no more of it is shown here"
	var requests atomic.Int32
	url, _ := logServerFunc(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Rota-Log-Attempt", "2")
		w.Header().Set("X-Rota-Log-Size", "12")
		switch requests.Add(1) {
		case 1: // the copy so far, which is full
			w.Header().Set("X-Rota-Log-Full", full)
			w.Write([]byte("epoch\nepoch\n"))
		case 2, 3: // caught up: nothing more while the task runs
			w.Header().Set("X-Rota-Log-Full", full)
		default: // the task's end
			w.Header().Set("X-Rota-Log-Done", "true")
			w.Header().Set("X-Rota-Log-Incomplete", "this server keeps the first 12 bytes of a rank's log (rota server --max-log-size); node node-a wrote 40 bytes")
		}
	})
	code, out, errOut := run(t, url, "logs", "-f", "42")
	if code != ExitError || out != "epoch\nepoch\n" {
		t.Errorf("exit %d, stdout %q; want exit %d and the part kept", code, out, ExitError)
	}
	want := "rota: job 42's log: " + full + "\n" +
		"rota: the log of job 42 is incomplete: this server keeps the first 12 bytes of a rank's log (rota server --max-log-size); node node-a wrote 40 bytes\n"
	if errOut != want {
		t.Errorf("stderr %q; want %q", errOut, want)
	}
}

// A follow that loses its server (a restart) says so, asks again, and goes on from where
// it was once the server is back: every line once.
func TestLogsFollowOutlivesAServerRestart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	serve := func(ln net.Listener, logs http.HandlerFunc) *http.Server {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /api/v1/jobs/42", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, fixtureDetail())
		})
		mux.HandleFunc("GET /api/v1/jobs/42/logs", logs)
		srv := &http.Server{Handler: mux}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return srv
	}
	answer := func(w http.ResponseWriter, data string, size int, done bool) {
		w.Header().Set("X-Rota-Log-Size", strconv.Itoa(size))
		w.Header().Set("X-Rota-Log-Attempt", "2")
		w.Header().Set("X-Rota-Log-Done", strconv.FormatBool(done))
		w.Write([]byte(data))
	}
	held := make(chan struct{})
	var once sync.Once
	first := serve(ln, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("offset") == "" {
			answer(w, "epoch 1\n", 8, false)
			return
		}
		once.Do(func() { close(held) })
		<-r.Context().Done() // the long poll the restart cuts
	})
	go func() {
		<-held
		first.Close()
		time.Sleep(1500 * time.Millisecond) // down for a moment
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		serve(ln, func(w http.ResponseWriter, r *http.Request) {
			if q := r.URL.Query(); q.Get("offset") != "8" || q.Get("attempt") != "2" {
				t.Errorf("after the restart the follow asked for %q; want attempt 2 from offset 8", r.URL.RawQuery)
			}
			answer(w, "epoch 2\n", 16, true)
		})
	}()
	code, out, errOut := run(t, "http://"+addr, "logs", "-f", "42")
	if code != ExitOK || out != "epoch 1\nepoch 2\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want both lines once", code, out, errOut)
	}
	if strings.Count(errOut, "following job 42") != 1 {
		t.Errorf("stderr %q; want one line saying the server was lost", errOut)
	}
}

func TestLogsInterrupted(t *testing.T) {
	held := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/jobs/42", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, fixtureDetail())
	})
	mux.HandleFunc("GET /api/v1/jobs/42/logs", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Rota-Log-Size", "6")
		if r.URL.Query().Get("offset") == "" {
			w.Write([]byte("hello\n"))
			return
		}
		close(held)
		<-r.Context().Done() // a long poll that never gets data
	})
	url := newHTTPServer(t, mux)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-held
		cancel() // what Ctrl-C does through signal.NotifyContext
	}()
	done := make(chan struct{})
	var code int
	var out, errOut string
	go func() {
		code, out, errOut = runCtx(t, ctx, url, "logs", "-f", "42")
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("logs -f did not stop when its context was cancelled")
	}
	if code != ExitOK || out != "hello\n" || errOut != "" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestClientQueuesAndHealth(t *testing.T) {
	srv := newFakeServer(t)
	c := &Client{BaseURL: srv.URL + "/", Token: adminToken}
	qs, err := c.Queues(context.Background())
	if err != nil || !reflect.DeepEqual(qs, fixtureQueues()) {
		t.Errorf("Queues: %v, %v", qs, err)
	}
	var apiErr *APIError
	if err := c.Health(context.Background()); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Errorf("Health against a server without /healthz: %v", err)
	}
}

func newHTTPServer(t *testing.T, h http.Handler) string {
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}
