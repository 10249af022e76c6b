package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
)

// submitEnv is a real server on SQLite for the submit fuzz target, called through its
// handler with the first admin's token. Unlike the harness it outlives one test: the
// fuzzing engine calls the target many times in one process, and a server per input
// would spend its time in migrations.
type submitEnv struct {
	dir   string
	st    store.Store
	srv   *Server
	h     http.Handler
	token string
	clock *fakeClock
	// jobs is what the store held after the last call: every job, by ID.
	jobs []api.Job
}

// maxPendingFuzz bounds the jobs one submit may add (through the pending limit), so an
// array of ten thousand costs one refusal rather than ten thousand rows.
const maxPendingFuzz = 100

// queryTarget is the server of a fuzz target that only reads: made, with setup, on the
// first input, and kept for the rest.
type queryTarget struct{ env *submitEnv }

func (q *queryTarget) close() {
	if q.env != nil {
		q.env.close()
	}
}

// ready returns the target's server, making it with setup on the first call.
func (q *queryTarget) ready(t *testing.T, setup func(*submitEnv) error) *submitEnv {
	t.Helper()
	if q.env == nil {
		env, err := newSubmitEnv()
		if err != nil {
			t.Fatal(err)
		}
		q.env = env
		if err := setup(env); err != nil {
			t.Fatal(err)
		}
	}
	return q.env
}

// submitAll submits each JSON spec as the admin.
func (e *submitEnv) submitAll(specs ...string) error {
	for _, spec := range specs {
		if code, body := e.post("/api/v1/jobs", spec); code != http.StatusCreated {
			return fmt.Errorf("submit %s: %d %s", spec, code, body)
		}
	}
	return nil
}

func newSubmitEnv() (*submitEnv, error) {
	dir, err := os.MkdirTemp("", "rota-fuzz-")
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	env := &submitEnv{dir: dir, clock: &fakeClock{t: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}}
	if env.st, err = store.Open(ctx, "sqlite://"+filepath.Join(dir, "rota.db"), nil); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if env.srv, err = New(ctx, Config{DataDir: dir, Clock: env.clock}, env.st, nil); err != nil {
		env.close()
		return nil, err
	}
	env.srv.mu.Lock()
	_, e := env.srv.applyConfig(ctx, fmt.Appendf(nil, "teams: [{name: nlp, weight: 1}]\nlimits: {max_pending_per_user: %d, submits_per_second: 1000000, submit_burst: 1000000}\n", maxPendingFuzz), api.Event{Actor: "fuzz"})
	env.srv.mu.Unlock()
	if e != nil {
		env.close()
		return nil, fmt.Errorf("config: %s", e.Message)
	}
	tok, err := os.ReadFile(filepath.Join(dir, "admin-token"))
	if err != nil {
		env.close()
		return nil, err
	}
	env.token, env.h = strings.TrimSpace(string(tok)), env.srv.Handler()
	// Two nodes, through the in-process agent connection, so that checkFits has
	// something to judge by.
	for _, n := range []struct {
		name, model string
		gpus        int
	}{{"node-a", "NVIDIA H100 80GB HBM3", 8}, {"node-b", "NVIDIA A100-SXM4-40GB", 4}} {
		if err := env.beat(n.name, n.model, n.gpus, nil); err != nil {
			env.close()
			return nil, err
		}
	}
	if env.jobs, err = env.st.LoadJobs(ctx); err != nil {
		env.close()
		return nil, err
	}
	return env, nil
}

// beat registers or refreshes node name, with gpus GPUs of model and the labels, through
// the in-process agent connection.
func (env *submitEnv) beat(name, model string, gpus int, labels map[string]string) error {
	hb := api.Heartbeat{Node: name, Instance: "agent-" + name, ClusterID: env.srv.ClusterID(), Synced: true,
		Inventory: api.Inventory{CPUs: 64, MemoryMB: 512 << 10, DeviceSource: "fake", Labels: labels}}
	for i := range gpus {
		hb.Inventory.GPUs = append(hb.Inventory.GPUs, api.GPU{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", name, i), Model: model, MemoryMB: 81559, Healthy: true})
	}
	body, _ := json.Marshal(hb)
	r := httptest.NewRequest("POST", "/api/v1/agents/"+name+"/heartbeat", bytes.NewReader(body))
	r = r.WithContext(context.WithValue(r.Context(), connKey{}, connInfo{local: true}))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	env.h.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		return fmt.Errorf("heartbeat %s: %d %s", name, w.Code, w.Body)
	}
	return nil
}

// get asks path with the raw query as the admin, and returns the status and the answer.
func (env *submitEnv) get(path, query string) (int, []byte) {
	r := httptest.NewRequest("GET", path, nil)
	r.URL.RawQuery = query
	r.Header.Set("Authorization", "Bearer "+env.token)
	w := httptest.NewRecorder()
	env.h.ServeHTTP(w, r)
	return w.Code, w.Body.Bytes()
}

// post sends a JSON body to path as the admin, and returns the status and the answer.
func (env *submitEnv) post(path, body string) (int, []byte) {
	r := httptest.NewRequest("POST", path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+env.token)
	w := httptest.NewRecorder()
	env.h.ServeHTTP(w, r)
	return w.Code, w.Body.Bytes()
}

func (env *submitEnv) close() {
	if env.srv != nil {
		env.srv.Close()
	}
	if env.st != nil {
		env.st.Close()
	}
	os.RemoveAll(env.dir)
}

// submitTarget is the body of FuzzSubmitAPI with the server it runs against, which it
// replaces with a fresh one when the pending jobs near the limit.
type submitTarget struct {
	env *submitEnv
}

func (s *submitTarget) close() {
	if s.env != nil {
		s.env.close()
	}
}

// FuzzSubmitAPI posts fuzzed submit bodies, with a fuzzed Idempotency-Key, to a real server
// on SQLite. Oracle: never a 5xx; after any answer but 201 the store's jobs are unchanged;
// after a 201 exactly the announced jobs were added (one, or one per array index, with
// consecutive IDs from the one answered), each holding the spec answered.
func FuzzSubmitAPI(f *testing.F) {
	for i, s := range specSeeds {
		f.Add([]byte(s), submitKeySeeds[i%len(submitKeySeeds)])
	}
	target := &submitTarget{}
	f.Cleanup(target.close)
	f.Fuzz(target.check)
}

// submitKeySeeds are Idempotency-Keys: none, good ones, a repeat, and bad ones.
var submitKeySeeds = []string{"", "", "k1", "k1", "retry-7f3a", "", "bad key", strings.Repeat("k", 129), "", "é"}

func (s *submitTarget) check(t *testing.T, body []byte, key string) {
	if s.env == nil || len(s.env.jobs) > maxPendingFuzz/2 {
		s.close()
		env, err := newSubmitEnv()
		if err != nil {
			t.Fatal(err)
		}
		s.env = env
	}
	env := s.env
	env.clock.Add(time.Second)
	r := httptest.NewRequest("POST", "/api/v1/jobs", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+env.token)
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	env.h.ServeHTTP(w, r)

	before := env.jobs
	after, err := env.st.LoadJobs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	env.jobs = after
	switch {
	case w.Code >= 500:
		t.Fatalf("POST %q (key %q): %d %s", body, key, w.Code, w.Body)
	case w.Code != http.StatusCreated:
		if !sameJobs(before, after) {
			t.Fatalf("POST %q (key %q): %d %s, yet the store's jobs changed from %d to %d", body, key, w.Code, w.Body, len(before), len(after))
		}
		return
	}
	var job api.Job
	if err := json.Unmarshal(w.Body.Bytes(), &job); err != nil {
		t.Fatalf("POST %q: 201 with %q: %v", body, w.Body, err)
	}
	n, indices := 1, []int(nil)
	if job.Spec.Array != "" {
		var e *api.Error
		if indices, _, e = parseArray(job.Spec.Array); e != nil {
			t.Fatalf("POST %q: 201 with array %q, which parseArray refuses: %s", body, job.Spec.Array, e.Message)
		}
		n = len(indices)
	}
	if len(after) < len(before) || !sameJobs(after[:len(before)], before) {
		t.Fatalf("POST %q: 201, and jobs stored before changed", body)
	}
	added := after[len(before):]
	if len(added) != n {
		t.Fatalf("POST %q: 201 announcing %d jobs from %d, but %d were stored", body, n, job.ID, len(added))
	}
	for i, j := range added {
		switch {
		case j.ID != job.ID+int64(i):
			t.Fatalf("POST %q: job %d of the submit has ID %d, want %d", body, i, j.ID, job.ID+int64(i))
		case !reflect.DeepEqual(j.Spec, job.Spec):
			t.Fatalf("POST %q: job %d stored with spec\n%+v\nbut answered with\n%+v", body, j.ID, j.Spec, job.Spec)
		case indices != nil && (j.ArrayID != job.ID || j.ArrayIndex == nil || *j.ArrayIndex != indices[i]):
			t.Fatalf("POST %q: job %d is not index %d of array %d", body, j.ID, indices[i], job.ID)
		case indices == nil && (j.ArrayID != 0 || j.ArrayIndex != nil):
			t.Fatalf("POST %q: job %d of no array has array fields", body, j.ID)
		case j.State != api.StatePending && j.State != api.StateHeld:
			t.Fatalf("POST %q: job %d stored %s", body, j.ID, j.State)
		}
	}
}

// sameJobs is reflect.DeepEqual that takes no list for an empty one.
func sameJobs(a, b []api.Job) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}
