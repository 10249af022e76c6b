package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/rotahq/rota/internal/api"
)

func TestSubmitNotify(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []api.Notify
		err  string
	}{
		{"URL and URL#events, repeated",
			[]string{"--notify", "https://hooks.example.com/a", "--notify", "https://hooks.example.com/b?x=1#started,failed"},
			[]api.Notify{{URL: "https://hooks.example.com/a"}, {URL: "https://hooks.example.com/b?x=1", Events: []string{"started", "failed"}}}, ""},
		{"not http", []string{"--notify", "ftp://hooks.example.com/a"}, nil, "want an http or https URL"},
		{"unknown event", []string{"--notify", "https://hooks.example.com/a#started,exploded"}, nil, `unknown event "exploded"`},
		{"# without events", []string{"--notify", "https://hooks.example.com/a#"}, nil, "no events after #"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeServer(t)
			args := append(append([]string{"--gpus", "1"}, tc.args...), "--", "train")
			code, _, errOut := run(t, srv.URL, "submit", args...)
			if tc.err != "" {
				if code != ExitUsage || !strings.Contains(errOut, tc.err) || !strings.Contains(errOut, "-notify") {
					t.Errorf("exit %d, stderr %q; want a usage error naming --notify and %q", code, errOut, tc.err)
				}
				return
			}
			if code != ExitOK {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			if !reflect.DeepEqual(srv.spec.Notify, tc.want) {
				t.Errorf("sent %+v; want %+v", srv.spec.Notify, tc.want)
			}
		})
	}
}

func TestTeamSetNotify(t *testing.T) {
	srv := newFakeServer(t)
	code, _, errOut := run(t, srv.URL, "admin", "team", "set", "vision", "--notify", "https://hooks.example.com/vision#ended")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	want := []api.Notify{{URL: "https://hooks.example.com/vision", Events: []string{"ended"}}}
	if !reflect.DeepEqual(srv.team.Notify, want) || srv.team.Weight != 1 {
		t.Errorf("sent %+v; want the vision team with %+v", srv.team, want)
	}
	if code, _, _ := run(t, srv.URL, "admin", "team", "set", "vision", "--notify", ""); code != ExitOK || srv.team.Notify != nil {
		t.Errorf("--notify \"\": exit %d, sent %+v; want the webhooks cleared", code, srv.team.Notify)
	}
}

// notifyServer answers whoami (with the caller's webhooks), the admins' user list, and
// PUT of a user's webhooks.
type notifyServer struct {
	*httptest.Server
	mu    sync.Mutex
	users map[string]api.User
	puts  []string // "user: body" of every PUT
}

func newNotifyServer(t *testing.T) *notifyServer {
	s := &notifyServer{users: map[string]api.User{
		"alice": {Name: "alice", Role: "admin", Notify: []api.Notify{{URL: "https://hooks.example.com/alice"}}},
		"bob":   {Name: "bob", Role: "member"},
	}}
	mux := http.NewServeMux()
	who := func(r *http.Request) api.Whoami {
		return fakeTokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
	}
	mux.HandleFunc("GET /api/v1/whoami", func(w http.ResponseWriter, r *http.Request) {
		me := who(r)
		s.mu.Lock()
		me.Notify = s.users[me.User].Notify
		s.mu.Unlock()
		writeJSON(w, 200, me)
	})
	mux.HandleFunc("GET /api/v1/users", func(w http.ResponseWriter, r *http.Request) {
		if who(r).Role != "admin" {
			writeJSON(w, 403, api.Error{Code: api.CodeForbidden, Role: who(r).Role, Rule: "admin", Message: "admins only"})
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		writeJSON(w, 200, api.UserList{Users: []api.User{s.users["alice"], s.users["bob"]}})
	})
	mux.HandleFunc("PUT /api/v1/users/{name}/notify", func(w http.ResponseWriter, r *http.Request) {
		var list []api.Notify
		if err := json.NewDecoder(r.Body).Decode(&list); err != nil || r.Header.Get("Content-Type") != "application/json" {
			writeJSON(w, 400, api.Error{Code: api.CodeInvalid, Message: "want a JSON array"})
			return
		}
		name := r.PathValue("name")
		s.mu.Lock()
		defer s.mu.Unlock()
		raw, _ := json.Marshal(list)
		s.puts = append(s.puts, name+": "+string(raw))
		u := s.users[name]
		u.Notify = list
		if len(list) == 0 {
			u.Notify = nil
		}
		s.users[name] = u
		writeJSON(w, 200, u)
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func TestNotifyVerb(t *testing.T) {
	srv := newNotifyServer(t)
	bob := testRun{env: map[string]string{"ROTA_SERVER": srv.URL, "ROTA_TOKEN": memberToken}}

	code, out, errOut := bob.run(t, "notify", "set", "https://hooks.example.com/bob", "https://chat.example.com/x#failed", "--events", "started,ended")
	if code != ExitOK {
		t.Fatalf("set: exit %d, stderr %q", code, errOut)
	}
	wantPut := `bob: [{"url":"https://hooks.example.com/bob","events":["started","ended"]},{"url":"https://chat.example.com/x","events":["failed"]}]`
	if len(srv.puts) != 1 || srv.puts[0] != wantPut {
		t.Errorf("sent %q; want %q", srv.puts, wantPut)
	}
	wantOut := "URL                            EVENTS\n" +
		"https://hooks.example.com/bob  started,ended\n" +
		"https://chat.example.com/x     failed\n"
	if out != wantOut {
		t.Errorf("stdout\n%s\nwant\n%s", out, wantOut)
	}

	// A member reads their own webhooks through whoami.
	code, out, errOut = bob.run(t, "notify", "list")
	if code != ExitOK || out != wantOut {
		t.Errorf("list as a member: exit %d, stdout %q, stderr %q; want\n%s", code, out, errOut, wantOut)
	}

	code, out, _ = bob.run(t, "notify", "clear")
	if code != ExitOK || out != "No webhooks.\n" || srv.puts[1] != "bob: []" {
		t.Errorf("clear: exit %d, stdout %q, sent %q", code, out, srv.puts)
	}

	code, out, errOut = run(t, srv.URL, "notify", "list", "-o", "json")
	if code != ExitOK || !strings.Contains(out, `"url": "https://hooks.example.com/alice"`) {
		t.Errorf("list as an admin: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	for _, args := range [][]string{{"set"}, {"set", "hooks.example.com"}, {"set", "https://h.example.com/", "--events", "nope"}, {"frob"}, {}} {
		if code, _, _ := bob.run(t, "notify", args...); code != ExitUsage {
			t.Errorf("rota notify %v: exit %d; want a usage error", args, code)
		}
	}
	if len(srv.puts) != 2 {
		t.Errorf("usage errors sent %q", srv.puts[2:])
	}
}
