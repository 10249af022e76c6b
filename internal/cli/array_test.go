package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

func TestArrayActions(t *testing.T) {
	for _, tc := range []struct {
		verb    string
		args    []string
		code    int
		out     string
		errOut  string
		actions []string
	}{
		{"cancel", []string{"60"}, ExitOK,
			"Array 60 (5 jobs): cancelled 2 jobs, cancel requested for 2 jobs still running, 1 job had already ended\n", "",
			[]string{"POST /api/v1/arrays/60/cancel"}},
		{"cancel", []string{"60_4"}, ExitOK, "Cancel requested for job 62 (running on node-a)\n", "",
			[]string{"POST /api/v1/jobs/62/cancel"}},
		{"cancel", []string{"60_0", "60_8"}, ExitOK, "Job 60 had already ended: SUCCEEDED\nCancelled job 64\n", "",
			[]string{"POST /api/v1/jobs/60/cancel", "POST /api/v1/jobs/64/cancel"}},
		{"cancel", []string{"61"}, ExitOK, "Cancel requested for job 61 (running on node-b)\n", "",
			[]string{"POST /api/v1/jobs/61/cancel"}},
		{"cancel", []string{"60_3"}, ExitError, "", "rota: job 60_3: array 60 has no index 3 (its indices are 0-8:2%2)\n", nil},
		{"cancel", []string{"61_2"}, ExitError, "", "rota: job 61_2: job 61 is index 2 of array 60; name it 60_2\n", nil},
		{"cancel", []string{"43_1"}, ExitError, "", "rota: job 43_1: job 43 is not an array\n", nil},
		{"hold", []string{"60"}, ExitOK, "Array 60 (5 jobs): held 2 jobs, 3 jobs had already started or ended\n", "",
			[]string{"POST /api/v1/arrays/60/hold"}},
		{"release", []string{"#60"}, ExitOK, "Array 60 (5 jobs): released 2 jobs, 3 jobs had already started or ended\n", "",
			[]string{"POST /api/v1/arrays/60/release"}},
		{"release", []string{"44"}, ExitOK, "Array 44 (1 job): 1 job still held by dependencies or a begin time\n", "",
			[]string{"POST /api/v1/arrays/44/release"}},
	} {
		srv := newFakeServer(t)
		code, out, errOut := run(t, srv.URL, tc.verb, tc.args...)
		if code != tc.code || out != tc.out || errOut != tc.errOut {
			t.Errorf("%s %q: exit %d\nstdout %q\nwant   %q\nstderr %q\nwant   %q", tc.verb, tc.args, code, out, tc.out, errOut, tc.errOut)
		}
		if !slices.Equal(srv.actions, tc.actions) {
			t.Errorf("%s %q: the server was asked %q, want %q", tc.verb, tc.args, srv.actions, tc.actions)
		}
	}

	srv := newFakeServer(t)
	code, out, _ := run(t, srv.URL, "cancel", "-o", "json", "60")
	var list api.JobList
	if err := json.Unmarshal([]byte(out), &list); code != ExitOK || err != nil || len(list.Jobs) != 5 {
		t.Errorf("cancel -o json of an array: exit %d, %v\n%s", code, err, out)
	}
}

// TestArrayElementChecksTheJob: the job where the spec puts an element must say it is
// that element, or nothing is done.
func TestArrayElementChecksTheJob(t *testing.T) {
	var posted []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		spec := api.JobSpec{Command: []string{"true"}, Array: "0-2"}
		switch r.PathValue("id") {
		case "70":
			writeJSON(w, http.StatusOK, api.JobDetail{Job: api.Job{ID: 70, Spec: spec, ArrayID: 70, ArrayIndex: intp(0)}})
		case "71": // another array's job, where 70_1 should be
			writeJSON(w, http.StatusOK, api.JobDetail{Job: api.Job{ID: 71, Spec: spec, ArrayID: 71, ArrayIndex: intp(0)}})
		default:
			writeJSON(w, http.StatusNotFound, api.Error{Code: api.CodeNotFound, Message: "no job " + r.PathValue("id")})
		}
	})
	mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		posted = append(posted, r.URL.Path)
	})
	url := newHTTPServer(t, mux)
	code, _, errOut := run(t, url, "cancel", "70_1")
	if code != ExitError || errOut != "rota: job 70_1: array 70 has no index 1: job 71 is not it\n" || posted != nil {
		t.Errorf("exit %d, stderr %q, posted %q", code, errOut, posted)
	}
	code, _, errOut = run(t, url, "cancel", "70_2")
	if code != ExitError || errOut != "rota: job 70_2: index 2 of array 70: no job 72\n" || posted != nil {
		t.Errorf("exit %d, stderr %q, posted %q", code, errOut, posted)
	}
}

func TestQueueFoldsArrays(t *testing.T) {
	srv := newFakeServer(t)
	_, out, _ := run(t, srv.URL, "queue")
	if !strings.Contains(out, "\n60_[0-8]  lr-sweep ") || strings.Contains(out, "\n62") || !strings.Contains(out, "2 running (1 idle), 2 pending, 1 succeeded") {
		t.Errorf("array 60 is not one line:\n%s", out)
	}
	_, out, _ = run(t, srv.URL, "queue", "--expand")
	for _, id := range []string{"60_0", "60_2", "60_4", "60_6", "60_8", "44_0"} {
		if !strings.Contains(out, "\n"+id+" ") {
			t.Errorf("--expand lacks %s:\n%s", id, out)
		}
	}
}

func TestParseJobRef(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want jobRef
	}{
		{"42", jobRef{id: 42}},
		{"#42", jobRef{id: 42}},
		{"40_3", jobRef{id: 40, element: true, index: 3}},
		{"#40_0", jobRef{id: 40, element: true, index: 0}},
	} {
		if got, err := parseJobRef(tc.in); err != nil || got != tc.want {
			t.Errorf("parseJobRef(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "x", "0", "-1", "40_", "_3", "40_x", "40_-1", "40_3_1", "40_1000000"} {
		if got, err := parseJobRef(in); err == nil {
			t.Errorf("parseJobRef(%q) = %+v, want an error", in, got)
		}
	}
}

// rota show of an array's ID shows the whole array, its jobs counted by state with their
// indices; ARRAY_INDEX and a plain job's ID still show one job.
func TestShowArray(t *testing.T) {
	srv := newFakeServer(t)
	code, out, errOut := run(t, srv.URL, "show", "60")
	if code != ExitOK || errOut != "" {
		t.Fatalf("show 60: exit %d, stderr %q", code, errOut)
	}
	t.Log("\n" + out)
	for _, want := range []string{
		"Array:       60 (0-8:2%2, 5 jobs)\n",
		"States:      2 running (1 idle), 2 pending, 1 succeeded\n",
		"Request:     1 GPU per job\n",
		"At once:     2\n",
		"  RUNNING    2     2,4\n",
		"  PENDING    2     6,8\n",
		"  SUCCEEDED  1     0\n",
		"rota show 60_N shows the job of index N",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show 60 lacks %q:\n%s", want, out)
		}
	}
	// Not all have ended, so the array has not: no Ended line.
	if strings.Contains(out, "Ended:") || strings.Contains(out, "Attempts:") {
		t.Errorf("show 60 shows an end or one job's attempts:\n%s", out)
	}

	code, out, _ = run(t, srv.URL, "show", "-o", "json", "60")
	var list api.JobList
	if err := json.Unmarshal([]byte(out), &list); code != ExitOK || err != nil || len(list.Jobs) != 5 || list.Jobs[4].ID != 64 {
		t.Errorf("show -o json 60: exit %d, %v\n%s", code, err, out)
	}

	// One element: the job's own detail, not the array's.
	code, out, _ = run(t, srv.URL, "show", "60_0")
	if code != ExitOK || !strings.Contains(out, "ID:") || !strings.Contains(out, "index 0 of array 60") || strings.Contains(out, "Jobs by state") {
		t.Errorf("show 60_0: exit %d\n%s", code, out)
	}
	// An element's own ID is that job, not an array.
	code, out, _ = run(t, srv.URL, "show", "62")
	if code != ExitOK || strings.Contains(out, "Jobs by state") || !strings.Contains(out, "index 4 of array 60") {
		t.Errorf("show 62: exit %d\n%s", code, out)
	}
}

// An array whose jobs have all ended shows when the last ended, and its time limit.
func TestShowArrayEnded(t *testing.T) {
	var jobs []api.Job
	for i, state := range []api.JobState{api.StateSucceeded, api.StateFailed, api.StateSucceeded, api.StateCancelled} {
		j := arrayJob(60+int64(i), 2*i, state, func(j *api.Job) {
			j.StartTime, j.EndTime = at(time.Duration(-50+i)*time.Minute), at(time.Duration(-20-i)*time.Minute)
			j.Spec.TimeLimit = 1800
		})
		jobs = append(jobs, j)
	}
	var out bytes.Buffer
	printArrayDetail(Config{Stdout: &out, Now: func() time.Time { return testNow }, Location: time.UTC}, jobs[0], jobs)
	for _, want := range []string{
		"States:      2 succeeded, 1 failed, 1 cancelled\n",
		"Time limit:  30m00s per job\n",
		"Started:     " + formatTimeRel(at(-50*time.Minute), testNow, time.UTC) + "\n",
		"Ended:       " + formatTimeRel(at(-20*time.Minute), testNow, time.UTC) + "\n",
		"  SUCCEEDED  2     0,4\n",
		"  FAILED     1     2\n",
		"  CANCELLED  1     6\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("lacks %q:\n%s", want, out.String())
		}
	}
}
