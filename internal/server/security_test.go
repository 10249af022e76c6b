package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
)

// addUser creates a user with a role and returns a token for them.
func (h *harness) addUser(name, role string, teams ...string) string {
	h.t.Helper()
	if code := h.do("PUT", "/api/v1/users/"+name, api.User{Role: role}, nil); code != 200 {
		h.t.Fatalf("add user %s: %d", name, code)
	}
	var tok api.NewToken
	if code := h.do("POST", "/api/v1/tokens", api.TokenRequest{User: name}, &tok); code != 201 || tok.Token == "" {
		h.t.Fatalf("token for %s: %d", name, code)
	}
	for _, team := range teams {
		h.srv.mu.Lock()
		t, _ := h.srv.state.Team(team)
		h.srv.mu.Unlock()
		t.Name = team
		t.Members = append(t.Members, name)
		if code := h.do("PUT", "/api/v1/teams/"+team, t, nil); code != 200 {
			h.t.Fatalf("add %s to team %s: %d", name, team, code)
		}
	}
	return tok.Token
}

// call makes a request with a token, a body and its content type, and returns the status
// and the error body, if any.
func (h *harness) call(token, method, path, contentType string, body []byte) (int, api.Error) {
	h.t.Helper()
	client, base := http.DefaultClient, h.http.URL
	if token == "local" {
		client, base, token = h.agent, "http://rota-up", ""
	}
	req, _ := http.NewRequest(method, base+path, bytes.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	var e api.Error
	data, _ := io.ReadAll(resp.Body)
	json.Unmarshal(data, &e)
	return resp.StatusCode, e
}

// TestAccessTable calls every route in every role and checks the answer against this
// table, written out route by route so that a change of policy shows here.
func TestAccessTable(t *testing.T) {
	want := map[string]string{ // route -> the least role that may call it
		"POST /api/v1/jobs":                               "member",
		"GET /api/v1/jobs":                                "viewer",
		"GET /api/v1/jobs/{id}":                           "viewer",
		"POST /api/v1/jobs/{id}/cancel":                   "member",
		"GET /api/v1/jobs/{id}/logs":                      "member",
		"POST /api/v1/jobs/{id}/hold":                     "member",
		"POST /api/v1/jobs/{id}/release":                  "member",
		"GET /api/v1/jobs/{id}/why":                       "viewer",
		"GET /api/v1/arrays/{id}":                         "viewer",
		"POST /api/v1/arrays/{id}/cancel":                 "member",
		"POST /api/v1/arrays/{id}/hold":                   "member",
		"POST /api/v1/arrays/{id}/release":                "member",
		"GET /api/v1/nodes":                               "viewer",
		"GET /api/v1/top":                                 "viewer",
		"GET /api/v1/nodes/{name}/telemetry":              "viewer",
		"GET /api/v1/jobs/{id}/telemetry":                 "viewer",
		"POST /api/v1/nodes/{name}/drain":                 "operator",
		"POST /api/v1/nodes/{name}/resume":                "operator",
		"DELETE /api/v1/nodes/{name}":                     "admin",
		"GET /api/v1/queues":                              "viewer",
		"PUT /api/v1/queues/{name}":                       "operator",
		"DELETE /api/v1/queues/{name}":                    "operator",
		"GET /api/v1/teams":                               "viewer",
		"PUT /api/v1/teams/{name}":                        "admin",
		"DELETE /api/v1/teams/{name}":                     "admin",
		"GET /api/v1/reservations":                        "viewer",
		"POST /api/v1/reservations":                       "admin",
		"DELETE /api/v1/reservations/{id}":                "admin",
		"PUT /api/v1/config":                              "admin",
		"GET /api/v1/history":                             "viewer",
		"GET /api/v1/whoami":                              "viewer",
		"GET /api/v1/users":                               "admin",
		"PUT /api/v1/users/{name}":                        "admin",
		"DELETE /api/v1/users/{name}":                     "admin",
		"GET /api/v1/tokens":                              "viewer",
		"POST /api/v1/tokens":                             "viewer",
		"DELETE /api/v1/tokens/{id}":                      "viewer",
		"GET /api/v1/join-tokens":                         "admin",
		"POST /api/v1/join-tokens":                        "admin",
		"DELETE /api/v1/join-tokens/{id}":                 "admin",
		"GET /api/v1/audit":                               "admin",
		"GET /api/v1/status":                              "viewer",
		"GET /api/v1/usage":                               "viewer",
		"GET /api/v1/prices":                              "viewer",
		"PUT /api/v1/prices/{model}":                      "admin",
		"DELETE /api/v1/prices/{model}":                   "admin",
		"PUT /api/v1/users/{name}/notify":                 "viewer",
		"POST /api/v1/ui/links":                           "viewer",
		"POST /api/v1/ui/session":                         "public",
		"POST /api/v1/join":                               "public",
		"POST /api/v1/agents/{node}/heartbeat":            "agent",
		"GET /api/v1/agents/{node}/watch":                 "agent",
		"POST /api/v1/agents/{node}/logs":                 "agent",
		"POST /api/v1/agents/{node}/logs/{job}/{attempt}": "agent",
		"POST /api/v1/agents/{node}/renew":                "agent",

		// Requests: members file and read their own; operators and admins decide.
		"POST /api/v1/requests":              "member",
		"GET /api/v1/requests":               "member",
		"GET /api/v1/requests/{id}":          "member",
		"POST /api/v1/requests/{id}/approve": "operator",
		"POST /api/v1/requests/{id}/deny":    "operator",

		// Interactive jobs: the owner's (or an admin's) terminal, the node's agent.
		"GET /api/v1/jobs/{id}/attach":                     "member",
		"GET /api/v1/agents/{node}/attach/{job}/{attempt}": "agent",
	}
	h := newHarness(t)
	tokens := map[string]string{
		"admin":    h.token,
		"operator": h.addUser("olga", "operator"),
		"member":   h.addUser("mia", "member"),
		"viewer":   h.addUser("vic", "viewer"),
	}
	rank := map[string]int{"viewer": 1, "member": 2, "operator": 3, "admin": 4}
	fill := strings.NewReplacer("{id}", "999", "{name}", "ghost", "{model}", "H100", "{node}", "n1", "{job}", "999", "{attempt}", "1")
	for _, rt := range routes {
		key := rt.method + " " + rt.path
		least, ok := want[key]
		if !ok {
			t.Errorf("route %s is missing from the access table", key)
			continue
		}
		path := fill.Replace(rt.path)
		ct, body := "", []byte(nil)
		switch rt.body {
		case jsonBody:
			ct, body = "application/json", []byte("{}")
		case yamlBody:
			ct, body = "application/yaml", []byte("queues: []\n")
		case bytesBody:
			ct = "application/octet-stream"
		}
		callers := []string{"admin", "operator", "member", "viewer", "anonymous", "local"}
		for _, who := range callers {
			t.Run(fmt.Sprintf("%s/%s", key, who), func(t *testing.T) {
				token := tokens[who]
				if who == "local" {
					token = "local"
				}
				code, e := h.call(token, rt.method, path, ct, body)
				var allowed bool
				switch {
				case least == "public":
					allowed = true
				case least == "agent":
					allowed = who == "local"
				case who == "anonymous" || who == "local":
					allowed = false
				default:
					allowed = rank[who] >= rank[least]
				}
				refused := code == http.StatusUnauthorized || code == http.StatusForbidden
				if least == "public" {
					// The join's own credential is its join token: a bad one is a 401
					// about the token, never a demand for other credentials.
					refused = code == http.StatusForbidden || strings.Contains(e.Message, "credentials needed")
				}
				switch {
				case allowed && refused:
					t.Errorf("%s %s as %s: %d %s; want it allowed", rt.method, path, who, code, e.Message)
				case !allowed && !refused:
					t.Errorf("%s %s as %s: %d; want 401 or 403", rt.method, path, who, code)
				case !allowed && who == "anonymous" && code != http.StatusUnauthorized:
					t.Errorf("%s %s without credentials: %d; want 401", rt.method, path, code)
				case !allowed && code == http.StatusForbidden && (e.Rule == "" || e.Role == "" || e.Code != api.CodeForbidden):
					t.Errorf("%s %s as %s: a 403 must name the role and rule: %+v", rt.method, path, who, e)
				}
			})
		}
	}
}

// Teams keep their jobs to themselves: a member sees its own and its teams' jobs, reads
// only its own logs and environment, and acts only on its own jobs.
func TestCrossTeamIsolation(t *testing.T) {
	h := newHarness(t)
	h.do("PUT", "/api/v1/teams/vision", api.Team{}, nil)
	h.do("PUT", "/api/v1/teams/nlp", api.Team{}, nil)
	alice := h.addUser("alice", "member", "vision")
	carol := h.addUser("carol", "member", "vision")
	bob := h.addUser("bob", "member", "nlp")
	viewer := h.addUser("vic", "viewer")
	op := h.addUser("olga", "operator")
	h.beat("n1", 1)

	var j api.Job
	body, _ := json.Marshal(api.JobSpec{GPUs: 1, Command: []string{"train"}, Env: map[string]string{"WANDB_KEY": "s3cret"}})
	if code := h.doRaw(alice, "POST", "/api/v1/jobs", body, &j); code != 201 || j.Spec.User != "alice" || j.Spec.Team != "vision" {
		t.Fatalf("alice's submit: %d user %q team %q", code, j.Spec.User, j.Spec.Team)
	}
	if j.Spec.Env["WANDB_KEY"] != "s3cret" {
		t.Errorf("the owner's own answer hides her environment: %v", j.Spec.Env)
	}
	h.cycle()
	path := fmt.Sprintf("/api/v1/jobs/%d", j.ID)

	for _, tc := range []struct {
		who, token    string
		read, logs    int
		env           string
		act           int
		seesInListing bool
	}{
		{"bob (other team)", bob, 403, 403, "", 403, false},
		{"carol (same team)", carol, 200, 403, redacted, 403, true},
		{"viewer", viewer, 200, 403, redacted, 403, true},
		{"operator", op, 200, 200, redacted, 200, true},
		{"alice (owner)", alice, 200, 200, "s3cret", 200, true},
	} {
		t.Run(tc.who, func(t *testing.T) {
			var d api.JobDetail
			if code := h.doRaw(tc.token, "GET", path, nil, &d); code != tc.read {
				t.Fatalf("read: %d; want %d", code, tc.read)
			}
			if tc.read == 200 && d.Spec.Env["WANDB_KEY"] != tc.env {
				t.Errorf("environment value %q; want %q", d.Spec.Env["WANDB_KEY"], tc.env)
			}
			if code := h.doRaw(tc.token, "GET", path+"/logs", nil, nil); code != tc.logs {
				t.Errorf("logs: %d; want %d", code, tc.logs)
			}
			var list api.JobList
			h.doRaw(tc.token, "GET", "/api/v1/jobs", nil, &list)
			seen := slices.ContainsFunc(list.Jobs, func(x api.Job) bool { return x.ID == j.ID })
			if seen != tc.seesInListing {
				t.Errorf("sees the job in the listing: %v; want %v", seen, tc.seesInListing)
			}
			for _, x := range list.Jobs {
				if x.ID == j.ID && x.Spec.Env["WANDB_KEY"] != tc.env {
					t.Errorf("listing shows the environment value %q", x.Spec.Env["WANDB_KEY"])
				}
			}
			if tc.act != 200 {
				if code := h.doRaw(tc.token, "POST", path+"/cancel", nil, nil); code != tc.act {
					t.Errorf("cancel: %d; want %d", code, tc.act)
				}
			}
		})
	}
	// Only the owner (or an operator) ended it: the refused cancels changed nothing.
	if got := h.job(j.ID); got.CancelRequested {
		t.Fatal("a refused cancel went through")
	}
	// Bob cannot submit as alice, into alice's team, or with a negative nice.
	for _, tc := range []struct {
		spec api.JobSpec
		rule string
	}{
		{api.JobSpec{Command: []string{"x"}, User: "alice"}, "on-behalf"},
		{api.JobSpec{Command: []string{"x"}, Team: "vision"}, "team-member"},
		{api.JobSpec{Command: []string{"x"}, Nice: -10}, "negative-nice"},
	} {
		body, _ := json.Marshal(tc.spec)
		var e api.Error
		if code := h.doRaw(bob, "POST", "/api/v1/jobs", body, &e); code != 403 || e.Rule != tc.rule {
			t.Errorf("bob submits %+v: %d rule %q; want 403 rule %s", tc.spec, code, e.Rule, tc.rule)
		}
	}
	// An admin may submit on alice's behalf; the job says who did.
	var onBehalf api.Job
	body, _ = json.Marshal(api.JobSpec{Command: []string{"x"}, User: "alice"})
	if code := h.doRaw(h.token, "POST", "/api/v1/jobs", body, &onBehalf); code != 201 || onBehalf.Spec.User != "alice" || onBehalf.SubmittedBy != "admin" {
		t.Fatalf("admin on behalf of alice: %d user %q by %q", code, onBehalf.Spec.User, onBehalf.SubmittedBy)
	}
}

// doRaw calls the API with a token and a raw JSON body.
func (h *harness) doRaw(token, method, path string, body []byte, out any) int {
	h.t.Helper()
	req, _ := http.NewRequest(method, h.http.URL+path, bytes.NewReader(body))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode
}

// Tokens: missing, malformed, unknown, expired and revoked are all 401, and revocation
// takes effect at once.
func TestTokens(t *testing.T) {
	h := newHarness(t)
	mia := h.addUser("mia", "member")
	if code, _ := h.call(mia, "GET", "/api/v1/whoami", "", nil); code != 200 {
		t.Fatalf("whoami with a good token: %d", code)
	}
	var short api.NewToken
	body, _ := json.Marshal(api.TokenRequest{TTLSeconds: 60})
	if code := h.doRaw(mia, "POST", "/api/v1/tokens", body, &short); code != 201 || short.Expires == nil {
		t.Fatalf("a member makes herself a token: %d %+v", code, short)
	}
	body, _ = json.Marshal(api.TokenRequest{User: "admin"})
	if code := h.doRaw(mia, "POST", "/api/v1/tokens", body, nil); code != 403 {
		t.Fatalf("a member makes a token for the admin: %d; want 403", code)
	}
	var list api.TokenList
	h.doRaw(mia, "GET", "/api/v1/tokens", nil, &list)
	for _, tok := range list.Tokens {
		if tok.User != "mia" {
			t.Errorf("a member sees %s's token %s", tok.User, tok.ID)
		}
	}
	h.clock.Add(61 * time.Second)
	for name, tc := range map[string]struct{ header, want string }{
		"missing":   {"", "credentials needed"},
		"malformed": {"Bearer nonsense", "not a rota API token"},
		"scheme":    {"Basic dXNlcjpwYXNz", "Bearer TOKEN"},
		"unknown":   {"Bearer " + auth.NewToken().Plain, "not known"},
		"expired":   {"Bearer " + short.Token, "expired"},
	} {
		req, _ := http.NewRequest("GET", h.http.URL+"/api/v1/whoami", nil)
		if tc.header != "" {
			req.Header.Set("Authorization", tc.header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e api.Error
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != 401 || !strings.Contains(e.Message, tc.want) || strings.Contains(e.Message, short.Token) {
			t.Errorf("%s token: %d %q; want 401 saying %q", name, resp.StatusCode, e.Message, tc.want)
		}
	}
	// Authentication reads tokens and users without the server's lock, from a view
	// that must follow every change at once: a role changed, a token made, a restart.
	ona := h.addUser("ona", "viewer")
	if code, _ := h.call(ona, "GET", "/api/v1/users", "", nil); code != 403 {
		t.Fatalf("a viewer lists the users: %d; want 403", code)
	}
	if code := h.do("PUT", "/api/v1/users/ona", api.User{Role: "admin"}, nil); code != 200 {
		t.Fatalf("make ona an admin: %d", code)
	}
	var who api.Whoami
	if code := h.doRaw(ona, "GET", "/api/v1/whoami", nil, &who); code != 200 || who.Role != "admin" {
		t.Fatalf("whoami just after ona was made admin: %d %+v", code, who)
	}
	if code, _ := h.call(ona, "GET", "/api/v1/users", "", nil); code != 200 {
		t.Fatalf("an admin lists the users: %d", code)
	}
	h.do("PUT", "/api/v1/users/ona", api.User{Role: "viewer"}, nil)
	if code := h.doRaw(ona, "GET", "/api/v1/whoami", nil, &who); code != 200 || who.Role != "viewer" {
		t.Fatalf("whoami just after ona was made a viewer again: %d %+v", code, who)
	}
	h.restart()
	if code := h.doRaw(ona, "GET", "/api/v1/whoami", nil, &who); code != 200 || who.User != "ona" || who.Role != "viewer" {
		t.Fatalf("whoami after a restart: %d %+v", code, who)
	}
	// Revoked: refused on the very next request.
	id, _ := auth.TokenID(mia)
	if code := h.doRaw(mia, "DELETE", "/api/v1/tokens/"+id, nil, nil); code != 204 {
		t.Fatalf("revoke her own token: %d", code)
	}
	if code, e := h.call(mia, "GET", "/api/v1/whoami", "", nil); code != 401 || !strings.Contains(e.Message, "revoked") {
		t.Fatalf("a revoked token: %d %q", code, e.Message)
	}
	// Removing a user revokes their tokens with them.
	nia := h.addUser("nia", "member")
	h.do("DELETE", "/api/v1/users/nia", nil, nil)
	if code, _ := h.call(nia, "GET", "/api/v1/whoami", "", nil); code != 401 {
		t.Fatalf("the token of a removed user: %d", code)
	}
}

// The last admin and the default queues stay.
func TestLastAdminAndDefaultQueues(t *testing.T) {
	h := newHarness(t)
	var e api.Error
	if code := h.do("DELETE", "/api/v1/users/admin", nil, &e); code != 409 || !strings.Contains(e.Message, "last admin") {
		t.Fatalf("remove the last admin: %d %q", code, e.Message)
	}
	if code := h.do("PUT", "/api/v1/users/admin", api.User{Role: "member"}, &e); code != 409 {
		t.Fatalf("demote the last admin: %d", code)
	}
	if code := h.do("DELETE", "/api/v1/queues/train", nil, &e); code != 409 {
		t.Fatalf("delete the default queue: %d", code)
	}
	if code := h.do("PUT", "/api/v1/users/bob", api.User{Role: "superuser"}, &e); code != 400 || e.Field != "role" {
		t.Fatalf("an unknown role: %d %s", code, e.Field)
	}
	if code := h.do("PUT", "/api/v1/users/bob", api.User{UnixUser: "../root"}, &e); code != 400 || e.Field != "unix_user" {
		t.Fatalf("a bad unix user: %d %s", code, e.Field)
	}
	h.addUser("ada", "admin")
	if code := h.do("PUT", "/api/v1/users/admin", api.User{Role: "member"}, nil); code != 200 {
		t.Fatalf("demote an admin who is not the last: %d", code)
	}
}

// JSON routes take only JSON: a form or text/plain post from a web page is refused.
func TestContentTypes(t *testing.T) {
	h := newHarness(t)
	body := []byte(`{"command":["true"]}`)
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""} {
		if code, e := h.call(h.token, "POST", "/api/v1/jobs", ct, body); code != http.StatusUnsupportedMediaType || e.Code != api.CodeUnsupportedMedia {
			t.Errorf("submit as %q: %d; want 415", ct, code)
		}
	}
	if code, _ := h.call(h.token, "POST", "/api/v1/jobs", "application/json; charset=utf-8", body); code != 201 {
		t.Errorf("submit as JSON with a charset: %d", code)
	}
	if code, _ := h.call(h.token, "POST", "/api/v1/jobs/1/cancel", "text/plain", []byte("x")); code != http.StatusUnsupportedMediaType {
		t.Errorf("a text/plain body on a route without one: %d", code)
	}
	var list api.JobList
	h.do("GET", "/api/v1/jobs", nil, &list)
	if len(list.Jobs) != 1 || list.Jobs[0].State != api.StatePending {
		t.Errorf("jobs after the refused posts: %+v", list.Jobs)
	}
}

// Limits an admin sets: submissions per second (429 with Retry-After), jobs waiting per
// user, and request sizes.
func TestLimits(t *testing.T) {
	h := newHarness(t)
	if code, e := h.putConfig("limits:\n  submits_per_second: 1\n  submit_burst: 2\n  max_pending_per_user: 3\n  max_command_bytes: 64\n"); code != 200 {
		t.Fatalf("set limits: %d %s", code, e.Message)
	}
	mia := h.addUser("mia", "member")
	submit := func() (int, http.Header) {
		req, _ := http.NewRequest("POST", h.http.URL+"/api/v1/jobs", strings.NewReader(`{"command":["x"]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+mia)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header
	}
	for i := range 2 {
		if code, _ := submit(); code != 201 {
			t.Fatalf("submit %d within the burst: %d", i, code)
		}
	}
	if code, hdr := submit(); code != 429 || hdr.Get("Retry-After") != "1" {
		t.Fatalf("over the rate: %d Retry-After %q; want 429 and 1", code, hdr.Get("Retry-After"))
	}
	h.clock.Add(time.Second)
	if code, _ := submit(); code != 201 {
		t.Fatalf("after a second: %d", code)
	}
	h.clock.Add(time.Second)
	if code, _ := submit(); code != 429 {
		t.Fatalf("a fourth waiting job: %d; want 429", code)
	}
	var e api.Error
	if code := h.do("POST", "/api/v1/jobs", api.JobSpec{Command: []string{strings.Repeat("x", 100)}}, &e); code != 400 || e.Field != "command" {
		t.Fatalf("a command over the limit: %d %s", code, e.Field)
	}
	if code, e := h.putConfig("limits:\n  submits_per_second: -1\n"); code != 400 || e.Field != "limits.submits_per_second" {
		t.Fatalf("a negative limit: %d %s", code, e.Field)
	}
	if code, _ := h.putConfig(""); code != 400 {
		t.Fatalf("an empty configuration: %d; want 400", code)
	}
	if code, _ := h.putConfig("queues: []\n---\nteams: []\n"); code != 400 {
		t.Fatalf("two YAML documents: %d; want 400", code)
	}
}

// The logs route reads only files of the job's own ranks: a node name from the query is
// matched against the attempt, never joined into a path.
func TestLogsPathTraversal(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 1)
	j := h.submit(api.JobSpec{GPUs: 1, Command: []string{"x"}})
	h.cycle()
	secret := filepath.Join(h.dir, "secret.log")
	os.WriteFile(secret, []byte("root only"), 0o600)
	for _, node := range []string{"../../secret", "../../../../etc/passwd", "n1/../../secret", "n1\x00", strings.Repeat("a", 300)} {
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/api/v1/jobs/%d/logs?node=%s", h.http.URL, j.ID, urlEscape(node)), nil)
		req.Header.Set("Authorization", "Bearer "+h.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 404 || strings.Contains(string(data), "root only") {
			t.Errorf("node %q: %d %q; want 404 without the file", node, resp.StatusCode, data)
		}
	}
	// An agent cannot ship to a path outside the logs either: its node name is checked.
	if code, _ := h.call("local", "POST", fmt.Sprintf("/api/v1/agents/..%%2F..%%2Fx/logs/%d/1?offset=0", j.ID), "application/octet-stream", []byte("x")); code != 400 && code != 404 {
		t.Errorf("shipping as node ../../x: %d", code)
	}
}

func urlEscape(s string) string {
	return strings.NewReplacer("%", "%25", "/", "%2F", "\x00", "%00", "&", "%26").Replace(s)
}

// Every kind of change is in the audit trail with who, in which role, from where, and for
// settings the value before and after.
func TestAuditEveryChange(t *testing.T) {
	h := newHarness(t)
	h.beat("n1", 1)
	h.beat("n2", 1)
	j := h.submit(api.JobSpec{GPUs: 1, Command: []string{"x"}})
	h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/hold", j.ID), nil, nil)
	h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/release", j.ID), nil, nil)
	h.do("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", j.ID), nil, nil)
	h.do("PUT", "/api/v1/teams/vision", api.Team{}, nil)
	h.do("PUT", "/api/v1/teams/vision", api.Team{Quotas: map[string]api.Quota{"*": {Guaranteed: 2}}}, nil)
	h.do("PUT", "/api/v1/queues/gold", api.Queue{Tier: 5}, nil)
	h.addUser("mia", "member")
	h.do("POST", "/api/v1/nodes/n1/drain", nil, nil)
	h.do("POST", "/api/v1/join-tokens", api.JoinTokenRequest{}, nil)
	start := h.clock.Now().Add(time.Hour)
	h.do("POST", "/api/v1/reservations", api.Reservation{Team: "vision", GPUs: 1, Start: start, End: start.Add(time.Hour)}, nil)
	h.putConfig("limits:\n  max_pending_per_user: 50\n")
	h.clock.Add(time.Hour)
	h.srv.checkNodes(context.Background())
	h.do("DELETE", "/api/v1/nodes/n2", nil, nil)

	var list api.EventList
	if code := h.do("GET", "/api/v1/audit", nil, &list); code != 200 {
		t.Fatalf("audit: %d", code)
	}
	byKind := map[string]api.Event{}
	for _, ev := range list.Events {
		if ev.Actor == "admin" {
			byKind[ev.Kind] = ev
		}
	}
	for _, kind := range []string{api.EventSubmit, api.EventCancel, api.EventHold, api.EventRelease, api.EventQuota, api.EventQueue,
		api.EventTeam, api.EventUser, api.EventToken, api.EventNode, api.EventDrain, api.EventReservation, api.EventConfig, api.EventJoin} {
		ev, ok := byKind[kind]
		if !ok {
			t.Errorf("no %s event by admin in the audit trail", kind)
			continue
		}
		if ev.Role != "admin" || ev.Source == "" || ev.Time.IsZero() {
			t.Errorf("%s event lacks role, source or time: %+v", kind, ev)
		}
	}
	compact := func(raw json.RawMessage) string {
		var b bytes.Buffer
		json.Compact(&b, raw)
		return b.String()
	}
	if q := byKind[api.EventQuota]; !strings.Contains(compact(q.Before), `"name":"vision"`) || strings.Contains(compact(q.Before), "quotas") || !strings.Contains(compact(q.After), `"guaranteed":2`) {
		t.Errorf("quota change before %s after %s", q.Before, q.After)
	}
	if c := byKind[api.EventConfig]; !strings.Contains(compact(c.After), `"max_pending_per_user":50`) || !strings.Contains(compact(c.Before), `"max_pending_per_user":100000`) {
		t.Errorf("config change before %s after %s", c.Before, c.After)
	}
	var filtered api.EventList
	h.do("GET", "/api/v1/audit?kind=queue&actor=admin", nil, &filtered)
	for _, ev := range filtered.Events {
		if ev.Kind != api.EventQueue || ev.Actor != "admin" {
			t.Errorf("filtered audit has %s by %s", ev.Kind, ev.Actor)
		}
	}
	if code := h.do("GET", "/api/v1/audit?kind=nonsense", nil, nil); code != 400 {
		t.Errorf("an unknown kind: %d", code)
	}
	for _, ev := range list.Events {
		if ev.Kind == api.EventToken && strings.Contains(ev.Message, "rota_") {
			t.Errorf("a token reached the audit trail: %q", ev.Message)
		}
	}
}

// On the local socket the server knows the caller's Unix account: no token needed.
func TestLocalSocketIdentity(t *testing.T) {
	h := newHarness(t)
	sock := filepath.Join(t.TempDir(), "rota.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h.srv.Handler(), ConnContext: h.srv.ConnContext}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := client.Get("http://rota/api/v1/whoami")
	if err != nil {
		t.Fatal(err)
	}
	var who api.Whoami
	json.NewDecoder(resp.Body).Decode(&who)
	resp.Body.Close()
	me, _ := user.Current()
	if resp.StatusCode != 200 || who.User != me.Username || who.Role != "admin" || who.Kind != auth.KindUnix {
		t.Fatalf("whoami on the socket: %d %+v; want %s as admin (the server's own account)", resp.StatusCode, who, me.Username)
	}
	// Another account: a member on a workstation's `rota up`, refused on a server that
	// does not know it.
	info := connInfo{unix: true, uid: 65534}
	if _, err := user.LookupId("65534"); err != nil {
		t.Skip("no account with uid 65534 on this machine")
	}
	if _, e := h.srv.unixIdentity(info, "unix:uid=65534"); e == nil || !strings.Contains(e.Message, "rota admin user add") {
		t.Errorf("an unknown local account on a server: %v; want refused with how to add it", e)
	}
	h.srv.cfg.LocalUsersAreMembers = true
	if id, e := h.srv.unixIdentity(info, "unix:uid=65534"); e != nil || id.Role != auth.RoleMember {
		t.Errorf("an unknown local account on rota up: %+v %v; want a member", id, e)
	}
}

// The join flow: a join token buys a node certificate once; the node then speaks mTLS and
// only for itself; a later join of the node makes the old certificate useless.
func TestJoinFlow(t *testing.T) {
	h := newHarness(t)
	ts := httptest.NewUnstartedServer(h.srv.Handler())
	cert, err := h.srv.CA().ServerCertificate([]string{"127.0.0.1", "localhost"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ts.TLS = auth.ServerTLSConfig(h.srv.CA(), cert)
	ts.Config.ConnContext = h.srv.ConnContext
	ts.StartTLS()
	t.Cleanup(ts.Close)

	newJoin := func(req api.JoinTokenRequest) string {
		var nj api.NewJoinToken
		if code := h.do("POST", "/api/v1/join-tokens", req, &nj); code != 201 || !strings.Contains(nj.Command, nj.Token) {
			t.Fatalf("join token: %d %+v", code, nj)
		}
		return nj.Token
	}
	pinned, err := auth.ClientTLSConfig(auth.Pin{Fingerprint: h.srv.CA().Fingerprint()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	plain := &http.Client{Transport: &http.Transport{TLSClientConfig: pinned}}
	join := func(token, node string) (int, api.JoinResponse, api.Error, []byte) {
		key, _ := auth.NewNodeKey()
		csr, _ := auth.NodeCSR(key, node)
		body, _ := json.Marshal(api.JoinRequest{Token: token, Node: node, CSR: string(csr)})
		resp, err := plain.Post(ts.URL+"/api/v1/join", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var ok api.JoinResponse
		var e api.Error
		data, _ := io.ReadAll(resp.Body)
		json.Unmarshal(data, &ok)
		json.Unmarshal(data, &e)
		return resp.StatusCode, ok, e, key
	}
	tok := newJoin(api.JoinTokenRequest{})
	code, jr, e, key := join(tok, "gpu-01")
	if code != 200 || jr.ClusterID != h.srv.ClusterID() || jr.Certificate == "" {
		t.Fatalf("join: %d %s", code, e.Message)
	}
	if code, _, e, _ := join(tok, "gpu-02"); code != 401 || !strings.Contains(e.Message, "used already") {
		t.Fatalf("reusing the token: %d %q", code, e.Message)
	}
	parsed, _ := auth.ParseJoinToken(tok)
	wrong := parsed
	wrong.Secret = strings.Repeat("a", len(parsed.Secret))
	if code, _, e, _ := join(wrong.String(), "gpu-02"); code != 401 || strings.Contains(e.Message, wrong.Secret) {
		t.Fatalf("a wrong secret: %d %q", code, e.Message)
	}
	other := parsed
	other.ClusterID = "0123456789abcdef"
	if code, _, _, _ := join(other.String(), "gpu-02"); code != 401 {
		t.Fatalf("another cluster's token: %d", code)
	}
	expiring := newJoin(api.JoinTokenRequest{TTLSeconds: 60})
	h.clock.Add(2 * time.Minute)
	if code, _, e, _ := join(expiring, "gpu-02"); code != 401 || !strings.Contains(e.Message, "expired") {
		t.Fatalf("an expired token: %d %q", code, e.Message)
	}
	only := newJoin(api.JoinTokenRequest{Node: "gpu-03"})
	if code, _, _, _ := join(only, "gpu-04"); code != 403 {
		t.Fatalf("a token for gpu-03 used by gpu-04: %d", code)
	}
	if code, _, _, _ := join(newJoin(api.JoinTokenRequest{}), "../etc"); code != 400 {
		t.Fatalf("joining as ../etc: %d", code)
	}

	// The node speaks mTLS with its certificate, for itself only.
	node := nodeClient(t, jr, "gpu-01", key)
	beat := func(c *http.Client, as string, instance string) (int, api.Error) {
		body, _ := json.Marshal(api.Heartbeat{Node: as, Instance: instance, ClusterID: h.srv.ClusterID(), Inventory: api.Inventory{DeviceSource: "fake"}})
		resp, err := c.Post(ts.URL+"/api/v1/agents/"+as+"/heartbeat", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e api.Error
		json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e
	}
	if code, e := beat(node, "gpu-01", "i1"); code != 200 {
		t.Fatalf("heartbeat over mTLS: %d %s", code, e.Message)
	}
	if n := h.node("gpu-01"); n.Agent == nil || n.Agent.CertSerial == "" {
		t.Fatalf("the node's agent record lacks its certificate: %+v", n.Agent)
	}
	if code, e := beat(node, "gpu-02", "i1"); code != 403 || !strings.Contains(e.Message, "cannot speak for node gpu-02") {
		t.Fatalf("gpu-01's certificate reporting for gpu-02: %d %q", code, e.Message)
	}
	if code, _ := beat(plain, "gpu-01", "i1"); code != 401 && code != 403 {
		t.Fatalf("a heartbeat over TLS without a certificate: %d", code)
	}
	if code, _ := h.call(h.token, "POST", "/api/v1/agents/gpu-01/heartbeat", "application/json", []byte(`{"instance":"x"}`)); code != 403 {
		t.Fatalf("an admin token on an agent route: %d", code)
	}
	// The node renews its certificate over mTLS: the new one works, the old one no longer.
	newKey, _ := auth.NewNodeKey()
	csr, _ := auth.NodeCSR(newKey, "gpu-01")
	body, _ := json.Marshal(api.RenewRequest{CSR: string(csr)})
	resp, err := node.Post(ts.URL+"/api/v1/agents/gpu-01/renew", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var renewed api.JoinResponse
	json.NewDecoder(resp.Body).Decode(&renewed)
	resp.Body.Close()
	if resp.StatusCode != 200 || renewed.Certificate == "" || renewed.Certificate == jr.Certificate {
		t.Fatalf("renew: %d", resp.StatusCode)
	}
	// The connection the renewal came on still carries the old certificate, which the
	// server read when the connection was opened: it is refused there at once, and on a
	// new connection.
	{
		var reused bool
		trace := &httptrace.ClientTrace{GotConn: func(c httptrace.GotConnInfo) { reused = c.Reused }}
		body, _ := json.Marshal(api.Heartbeat{Node: "gpu-01", Instance: "i1", ClusterID: h.srv.ClusterID(), Inventory: api.Inventory{DeviceSource: "fake"}})
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "POST", ts.URL+"/api/v1/agents/gpu-01/heartbeat", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := node.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e api.Error
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if !reused || resp.StatusCode != 401 || !strings.Contains(e.Message, "superseded") {
			t.Fatalf("the certificate before the renewal, on its open connection (reused %v): %d %q", reused, resp.StatusCode, e.Message)
		}
	}
	node.CloseIdleConnections()
	if code, e := beat(node, "gpu-01", "i1"); code != 401 || !strings.Contains(e.Message, "superseded") {
		t.Fatalf("the certificate before the renewal: %d %q", code, e.Message)
	}
	renewedJoin := jr
	renewedJoin.Certificate = renewed.Certificate
	node = nodeClient(t, renewedJoin, "gpu-01", newKey)
	if code, e := beat(node, "gpu-01", "i1"); code != 200 {
		t.Fatalf("heartbeat with the renewed certificate: %d %s", code, e.Message)
	}
	// A renewal for another node, or by a token, is refused.
	if code, _ := h.call(h.token, "POST", "/api/v1/agents/gpu-01/renew", "application/json", body); code != 403 {
		t.Fatalf("renew with an admin token: %d", code)
	}

	// A live node cannot be joined again; once it is quiet it can, and the old
	// certificate stops working.
	if code, _, e, _ := join(newJoin(api.JoinTokenRequest{}), "gpu-01"); code != 409 || !strings.Contains(e.Message, "live agent") {
		t.Fatalf("joining a live node again: %d %q", code, e.Message)
	}
	h.clock.Add(time.Minute)
	if code, _, e, _ := join(newJoin(api.JoinTokenRequest{}), "gpu-01"); code != 200 {
		t.Fatalf("joining a quiet node again: %d %s", code, e.Message)
	}
	node.CloseIdleConnections()
	if code, e := beat(node, "gpu-01", "i1"); code != 401 || !strings.Contains(e.Message, "superseded") {
		t.Fatalf("the old certificate after a new join: %d %q", code, e.Message)
	}
	checkAuthView(t, h.srv)

	// A node removed while its agent keeps its connection open is refused on that
	// connection at its next request.
	code, jr, e, key = join(newJoin(api.JoinTokenRequest{}), "gpu-05")
	if code != 200 {
		t.Fatalf("join gpu-05: %d %s", code, e.Message)
	}
	five := nodeClient(t, jr, "gpu-05", key)
	if code, e := beat(five, "gpu-05", "i5"); code != 200 {
		t.Fatalf("gpu-05's heartbeat: %d %s", code, e.Message)
	}
	checkAuthView(t, h.srv)
	h.clock.Add(time.Hour)
	if code := h.do("DELETE", "/api/v1/nodes/gpu-05?force=true", nil, nil); code/100 != 2 {
		t.Fatalf("remove gpu-05: %d", code)
	}
	if code, e := beat(five, "gpu-05", "i5"); code != 401 || !strings.Contains(e.Message, "no certificate") {
		t.Fatalf("the removed node's heartbeat on its open connection: %d %q", code, e.Message)
	}
	checkAuthView(t, h.srv)
}

// checkAuthView fails t unless what the server authenticates agents by, without its
// lock, is what its state holds.
func checkAuthView(t *testing.T, s *Server) {
	t.Helper()
	s.mu.Lock()
	want, limits := s.state.NodeCertSerials(), s.state.Limits()
	s.mu.Unlock()
	s.view.mu.RLock()
	got := maps.Clone(s.view.serials)
	s.view.mu.RUnlock()
	if !maps.Equal(got, want) {
		t.Errorf("certificate serials the server authenticates by: %v; the state holds %v", got, want)
	}
	if l := *s.view.limits.Load(); l != limits {
		t.Errorf("limits the server reads requests by: %+v; the state's: %+v", l, limits)
	}
}

// A change of the body limit holds from the next request on, and after a restart.
func TestBodyLimitFollowsTheSettings(t *testing.T) {
	h := newHarness(t)
	spec := api.JobSpec{Name: "big", Command: []string{"sleep", "1"}, GPUs: 1, Env: map[string]string{"PAD": strings.Repeat("x", 6000)}}
	if code := h.do("POST", "/api/v1/jobs", spec, nil); code != 201 {
		t.Fatalf("a 6 KB submit under the default limit: %d", code)
	}
	if code, e := h.putConfig("limits:\n  max_body_bytes: 4096\n"); code != 200 {
		t.Fatalf("set max_body_bytes: %d %s", code, e.Message)
	}
	checkAuthView(t, h.srv)
	var e api.Error
	if code := h.do("POST", "/api/v1/jobs", spec, &e); code != 413 || !strings.Contains(e.Message, "4096-byte") {
		t.Fatalf("a 6 KB submit under a 4096-byte limit: %d %q", code, e.Message)
	}
	h.restart()
	checkAuthView(t, h.srv)
	if code := h.do("POST", "/api/v1/jobs", spec, &e); code != 413 {
		t.Fatalf("a 6 KB submit under a 4096-byte limit, after a restart: %d %q", code, e.Message)
	}
	// A limit so small that the change raising it again would not fit is refused.
	h.refusesLimits(map[string]string{"max_body_bytes: 4": "limits.max_body_bytes", "max_body_bytes: 4095": "limits.max_body_bytes",
		"max_body_bytes: -1": "limits.max_body_bytes", "max_body_bytes: 1073741825": "limits.max_body_bytes"})
	if code, e := h.putConfig("limits:\n  max_body_bytes: 0\n"); code != 200 {
		t.Fatalf("reset max_body_bytes: %d %s", code, e.Message)
	}
	if code := h.do("POST", "/api/v1/jobs", spec, nil); code != 201 {
		t.Fatalf("a 6 KB submit with the limit back to its default: %d", code)
	}
	checkAuthView(t, h.srv)
}

// nodeClient is an HTTP client that speaks mTLS as node, with the certificate of join
// answer jr and the node's key.
func nodeClient(t *testing.T, jr api.JoinResponse, node string, key []byte) *http.Client {
	t.Helper()
	id := auth.NodeIdentity{ClusterID: jr.ClusterID, Node: node, CAPEM: []byte(jr.CA), CertPEM: []byte(jr.Certificate), KeyPEM: key}
	cert, err := id.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	mtls, err := auth.ClientTLSConfig(id.Pin(), &cert)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: mtls}}
}
