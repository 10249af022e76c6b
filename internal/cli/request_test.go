package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// requestServer answers the request routes as the server would, and records what it got.
type requestServer struct {
	mu    sync.Mutex
	paths []string // method, path and query of each call
	got   api.Request
	note  string
}

func newRequestServer(t *testing.T) *httptest.Server {
	rs := &requestServer{}
	mux := http.NewServeMux()
	record := func(r *http.Request) {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		p := r.Method + " " + r.URL.Path
		if r.URL.RawQuery != "" {
			p += "?" + r.URL.RawQuery
		}
		rs.paths = append(rs.paths, p)
	}
	mux.HandleFunc("POST /api/v1/requests", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		var req api.Request
		json.NewDecoder(r.Body).Decode(&req)
		rs.mu.Lock()
		rs.got = req
		rs.mu.Unlock()
		req.ID, req.User, req.State = 4, "mia", api.RequestPending
		if req.Team == "" {
			req.Team = "ml"
		}
		req.Created, req.Expires = testNow, testNow.Add(72*time.Hour)
		writeJSON(w, http.StatusCreated, req)
	})
	mux.HandleFunc("GET /api/v1/requests", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		end := testNow.Add(48 * time.Hour)
		writeJSON(w, http.StatusOK, api.RequestList{Requests: []api.Request{
			{ID: 4, Kind: api.RequestQuota, User: "mia", Team: "ml", State: api.RequestPending, GPUModel: "H100", Limit: 12, For: 172800,
				Reason: "paper deadline", Created: testNow, Expires: testNow.Add(72 * time.Hour)},
			{ID: 5, Kind: api.RequestQueue, User: "mia", Team: "ml", State: api.RequestApproved, Queue: "urgent", For: 86400,
				Reason: "prod down", Created: testNow, Expires: testNow.Add(72 * time.Hour), End: &end, DecidedBy: "olga"},
		}})
	})
	decide := func(w http.ResponseWriter, r *http.Request) {
		record(r)
		var d api.Decision
		json.NewDecoder(r.Body).Decode(&d)
		rs.mu.Lock()
		rs.note = d.Note
		rs.mu.Unlock()
		if r.PathValue("id") == "9" {
			writeJSON(w, http.StatusConflict, api.Error{Code: api.CodeConflict, Field: "id", Message: "request 9 is already denied by olga"})
			return
		}
		state := api.RequestDenied
		if strings.HasSuffix(r.URL.Path, "/approve") {
			state = api.RequestApproved
		}
		writeJSON(w, http.StatusOK, api.Request{ID: 4, Kind: api.RequestQuota, User: "mia", Team: "ml", State: state, GPUModel: "H100",
			Limit: 12, For: 172800, DecidedBy: "admin", Message: "limit raised from 8 to 12"})
	}
	mux.HandleFunc("POST /api/v1/requests/{id}/approve", decide)
	mux.HandleFunc("POST /api/v1/requests/{id}/deny", decide)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	requestServers.Store(srv.URL, rs)
	return srv
}

// requestServers finds the recorder of a server by its URL.
var requestServers sync.Map

func recorder(url string) *requestServer {
	v, _ := requestServers.Load(url)
	return v.(*requestServer)
}

func TestRequestVerbs(t *testing.T) {
	srv := newRequestServer(t)
	rs := recorder(srv.URL)

	code, out, errOut := run(t, srv.URL, "request", "quota", "--team", "ml", "--gpu-model", "H100", "--limit", "12", "--for", "2d", "--reason", "paper deadline")
	if code != ExitOK || lastLine(out) != "4" || !strings.Contains(out, "Request 4 filed: raise team ml's H100 limit to 12 GPUs for 2d") {
		t.Errorf("quota: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	if rs.got.Kind != api.RequestQuota || rs.got.Team != "ml" || rs.got.Limit != 12 || rs.got.For != 172800 || rs.got.Reason != "paper deadline" {
		t.Errorf("quota sent %+v", rs.got)
	}

	code, _, errOut = run(t, srv.URL, "request", "queue", "urgent", "--for", "24h", "--reason", "prod down")
	if code != ExitOK || rs.got.Kind != api.RequestQueue || rs.got.Queue != "urgent" || rs.got.For != 86400 {
		t.Errorf("queue: exit %d, stderr %q, sent %+v", code, errOut, rs.got)
	}

	code, _, errOut = run(t, srv.URL, "request", "reservation", "--gpus", "16", "--gpu-model", "H100", "--pool", "train", "--start", "+1h", "--end", "4h", "--reason", "eval")
	if code != ExitOK || rs.got.GPUs != 16 || rs.got.GPUModel != "H100" || rs.got.Pool != "train" || rs.got.Start == nil || !rs.got.Start.Equal(testNow.Add(time.Hour)) ||
		rs.got.End == nil || !rs.got.End.Equal(testNow.Add(5*time.Hour)) {
		t.Errorf("reservation: exit %d, stderr %q, sent %+v", code, errOut, rs.got)
	}

	code, out, _ = run(t, srv.URL, "admin", "requests", "--state", "pending")
	if code != ExitOK || !strings.Contains(out, "raise team ml's H100 limit to 12 GPUs for 2d") || !strings.Contains(out, "olga") ||
		!strings.HasPrefix(out, "ID") {
		t.Errorf("admin requests: exit %d\n%s", code, out)
	}
	code, out, _ = run(t, srv.URL, "request", "list", "-o", "json")
	var list api.RequestList
	if code != ExitOK || json.Unmarshal([]byte(out), &list) != nil || len(list.Requests) != 2 {
		t.Errorf("request list -o json: exit %d\n%s", code, out)
	}

	code, out, _ = run(t, srv.URL, "admin", "requests", "approve", "4", "--note", "ok")
	if code != ExitOK || out != "Approved request 4 of mia: raise team ml's H100 limit to 12 GPUs for 2d (limit raised from 8 to 12)\n" || rs.note != "ok" {
		t.Errorf("approve: exit %d, stdout %q, note %q", code, out, rs.note)
	}
	code, out, _ = run(t, srv.URL, "admin", "requests", "deny", "4", "--note", "full this week")
	if code != ExitOK || !strings.HasPrefix(out, "Denied request 4") || rs.note != "full this week" {
		t.Errorf("deny: exit %d, stdout %q, note %q", code, out, rs.note)
	}
	code, _, errOut = run(t, srv.URL, "admin", "requests", "deny", "9", "--note", "again")
	if code != ExitError || !strings.Contains(errOut, "request 9 is already denied by olga") {
		t.Errorf("deny a decided request: exit %d, stderr %q", code, errOut)
	}

	want := []string{"POST /api/v1/requests", "POST /api/v1/requests", "POST /api/v1/requests", "GET /api/v1/requests?state=pending",
		"GET /api/v1/requests", "POST /api/v1/requests/4/approve", "POST /api/v1/requests/4/deny", "POST /api/v1/requests/9/deny"}
	if strings.Join(rs.paths, "\n") != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant\n%s", strings.Join(rs.paths, "\n"), strings.Join(want, "\n"))
	}
}

// Bad flags are refused before anything reaches the server.
func TestRequestVerbsUsage(t *testing.T) {
	srv := newRequestServer(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"request", "quota", "--team", "ml", "--gpu-model", "H100", "--limit", "12"}, "--reason is required"},
		{[]string{"request", "quota", "--gpu-model", "H100", "--limit", "12", "--reason", "x"}, "--team is required"},
		{[]string{"request", "quota", "--team", "ml", "--limit", "12", "--reason", "x"}, "--gpu-model is required"},
		{[]string{"request", "quota", "--team", "ml", "--gpu-model", "H100", "--reason", "x"}, "--limit must be 1 or more"},
		{[]string{"request", "quota", "--team", "ml", "--gpu-model", "H100", "--limit", "2", "--for", "soon", "--reason", "x"}, "--for: invalid duration"},
		{[]string{"request", "queue", "--reason", "x"}, "name one queue"},
		{[]string{"request", "reservation", "--gpus", "4", "--start", "+1h", "--reason", "x"}, "--start and --end are required"},
		{[]string{"request", "reservation", "--gpus", "4", "--start", "+2h", "--end", "+1h", "--reason", "x"}, "is not after --start"},
		{[]string{"request", "reservation", "--gpus", "4", "--start", "+1h", "--end", "2h", "--for", "2h", "--reason", "x"}, "--for is for a quota or a queue"},
		{[]string{"request", "gpus"}, `unknown kind "gpus"`},
		{[]string{"request", "queue", "urgent", "--pool", "train", "--reason", "x"}, "--pool is for a reservation"},
		{[]string{"admin", "requests", "deny", "4"}, "--note is required to deny"},
		{[]string{"admin", "requests", "approve", "x"}, `invalid request ID "x"`},
		{[]string{"admin", "requests", "approve"}, "name one request ID"},
	} {
		code, _, errOut := run(t, srv.URL, c.args[0], c.args[1:]...)
		if code != ExitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want usage error with %q", c.args, code, errOut, c.want)
		}
	}
	if n := len(recorder(srv.URL).paths); n != 0 {
		t.Errorf("%d calls reached the server", n)
	}
}
