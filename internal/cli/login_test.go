package cli

import (
	"crypto/tls"
	"errors"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rotahq/rota/internal/auth"
)

func TestResolveOrder(t *testing.T) {
	dir := t.TempDir()
	configDir := filepath.Join(dir, "config")
	saved := savedLogin{Server: "https://saved.example:7443", Token: "saved-token", CAFingerprint: "sha256:5a"}
	if err := (Config{ConfigDir: configDir}).saveLogin(saved); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(dir, "data")
	home := filepath.Join(dir, "home")
	for _, d := range []string{dataDir, filepath.Join(home, ".rota")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("unix", filepath.Join(d, "rota.sock"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
	}
	everything := map[string]string{"ROTA_SERVER": "https://env.example", "ROTA_TOKEN": "env-token",
		"ROTA_CA_FINGERPRINT": "sha256:e0", "ROTA_DATA_DIR": dataDir, "HOME": home}

	for _, tc := range []struct {
		name      string
		flags     Endpoint
		env       map[string]string
		configDir string // "" here means no saved login
		want      Endpoint
	}{
		{"flags first", Endpoint{Server: "https://flag.example/", Token: "flag-token", CAFingerprint: "sha256:f0"}, everything, configDir,
			Endpoint{Server: "https://flag.example", Token: "flag-token", CAFingerprint: "sha256:f0"}},
		{"then the environment", Endpoint{}, everything, configDir,
			Endpoint{Server: "https://env.example", Token: "env-token", CAFingerprint: "sha256:e0"}},
		{"then the saved login", Endpoint{}, map[string]string{"ROTA_DATA_DIR": dataDir}, configDir, Endpoint(saved)},
		{"the saved token goes to the saved server alone", Endpoint{Server: "https://other.example"}, nil, configDir,
			Endpoint{Server: "https://other.example"}},
		{"the saved server named again keeps its token", Endpoint{Server: "https://saved.example:7443/"}, nil, configDir, Endpoint(saved)},
		{"a token from the environment with the saved server", Endpoint{}, map[string]string{"ROTA_TOKEN": "env-token"}, configDir,
			Endpoint{Server: saved.Server, Token: "env-token", CAFingerprint: saved.CAFingerprint}},
		{"then the data directory's socket", Endpoint{}, map[string]string{"ROTA_DATA_DIR": dataDir, "HOME": home}, "",
			Endpoint{Server: "unix://" + filepath.Join(dataDir, "rota.sock")}},
		{"which is ~/.rota by default", Endpoint{}, map[string]string{"HOME": home}, "",
			Endpoint{Server: "unix://" + filepath.Join(home, ".rota", "rota.sock")}},
		{"a data directory without a socket", Endpoint{}, map[string]string{"ROTA_DATA_DIR": configDir}, "",
			Endpoint{Server: DefaultServer}},
		{"then the default", Endpoint{}, nil, "", Endpoint{Server: DefaultServer}},
		{"a bare host:port is http", Endpoint{Server: "gpu-head:7070"}, nil, "", Endpoint{Server: "http://gpu-head:7070"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Getenv: func(k string) string { return tc.env[k] }, ConfigDir: tc.configDir}
			if tc.configDir == "" {
				cfg.ConfigDir = filepath.Join(dir, "nothing-saved")
			}
			got, err := cfg.resolve(tc.flags)
			if err != nil || got != tc.want {
				t.Errorf("resolve = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestLoginLogoutWhoami(t *testing.T) {
	srv := newFakeServer(t)
	configDir := filepath.Join(t.TempDir(), "rota")
	tr := testRun{configDir: configDir, stdin: memberToken + "\n"}
	code, out, errOut := tr.run(t, "login", "--server", srv.URL+"/")
	if want := "Logged in to " + srv.URL + " as bob (member)\n"; code != ExitOK || out != want {
		t.Fatalf("login: exit %d, stdout %q, want %q; stderr %q", code, out, want, errOut)
	}
	path := filepath.Join(configDir, "config.yaml")
	for p, mode := range map[string]fs.FileMode{configDir: 0o700 | fs.ModeDir, path: 0o600} {
		if fi, err := os.Stat(p); err != nil || fi.Mode() != mode {
			t.Errorf("%s: %v, %v; want mode %v", p, fi.Mode(), err, mode)
		}
	}
	if got := readSaved(t, path); got != (savedLogin{Server: srv.URL, Token: memberToken}) {
		t.Errorf("saved %+v", got)
	}

	// Every verb now finds the server and the token without being told.
	code, out, errOut = tr.run(t, "whoami")
	want := "User:    bob\nRole:    member\nTeams:   nlp,vision\nVia:     API token bbbb2222\nServer:  " + srv.URL + "\n"
	if code != ExitOK || out != want {
		t.Errorf("whoami: exit %d\nstdout %q\nwant   %q\nstderr %q", code, out, want, errOut)
	}

	code, out, _ = tr.run(t, "logout")
	if want := "Logged out of " + srv.URL + ": the saved token is forgotten\n"; code != ExitOK || out != want {
		t.Errorf("logout: exit %d, stdout %q, want %q", code, out, want)
	}
	if got := readSaved(t, path); got != (savedLogin{Server: srv.URL}) {
		t.Errorf("saved after logout %+v", got)
	}
	code, _, errOut = tr.run(t, "whoami")
	if want := "rota: not logged in or token not valid: missing or unknown API token (rota login --server " + srv.URL + ")\n"; code != ExitError || errOut != want {
		t.Errorf("whoami after logout: exit %d, stderr %q, want %q", code, errOut, want)
	}
}

func readSaved(t *testing.T, path string) savedLogin {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var l savedLogin
	if err := yaml.Unmarshal(data, &l); err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLoginRefusesWithoutSaving(t *testing.T) {
	srv := newFakeServer(t)
	configDir := filepath.Join(t.TempDir(), "rota")
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		code  int
		want  string
	}{
		{"bad token", "", []string{"--server", srv.URL, "--token", "rota_wrong"}, ExitError,
			"rota: not logged in or token not valid: missing or unknown API token (rota login --server " + srv.URL + ")\n"},
		{"bad token on stdin", "rota_wrong\n", []string{"--server", srv.URL}, ExitError, "rota: not logged in or token not valid"},
		{"no token", "", []string{"--server", srv.URL}, ExitUsage, "rota login: no token on standard input: give --token TOKEN"},
		{"no server", "", []string{"--token", adminToken}, ExitUsage, "rota login: --server URL is required"},
		{"socket", "", []string{"--server", "unix:///run/rota.sock", "--token", adminToken}, ExitUsage, "no login is needed"},
		{"plain http elsewhere", "", []string{"--server", "http://rota.example:7070", "--token", adminToken}, ExitError,
			"rota: refusing to send the API token to http://rota.example:7070 over plain http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := testRun{configDir: configDir, stdin: tc.stdin}.run(t, "login", tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) || out != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and %q", code, out, errOut, tc.code, tc.want)
			}
			if _, err := os.Stat(configDir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a refused login saved something: %v", err)
			}
		})
	}
}

// recordingTransport answers every request with an empty node list and keeps the
// requests, so a test can see what would have gone over the network.
type recordingTransport struct {
	mu   sync.Mutex // guards reqs
	reqs []*http.Request
}

func (rt *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	rt.mu.Lock()
	rt.reqs = append(rt.reqs, r)
	rt.mu.Unlock()
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"nodes": []}`)), Request: r}, nil
}

func TestTokenNeverSentOverPlainHTTPElsewhere(t *testing.T) {
	for _, tc := range []struct {
		server, token string
		sent          bool
	}{
		{"http://rota.example:7070", adminToken, false},
		{"http://10.1.2.3:7070", adminToken, false},
		{"rota.example:7070", adminToken, false},
		{"http://rota.example:7070", "", true},
		{"http://127.0.0.1:7070", adminToken, true},
		{"http://[::1]:7070", adminToken, true},
		{"http://localhost:7070", adminToken, true},
		{"https://rota.example:7443", adminToken, true},
	} {
		rt := &recordingTransport{}
		tr := testRun{env: map[string]string{"ROTA_SERVER": tc.server, "ROTA_TOKEN": tc.token}, http: &http.Client{Transport: rt}}
		code, _, errOut := tr.run(t, "nodes")
		if !tc.sent {
			if code != ExitError || len(rt.reqs) != 0 || !strings.Contains(errOut, "over plain http, where anyone on the network path could read it; use the server's https:// URL") {
				t.Errorf("%s with a token: exit %d, %d requests, stderr %q; want a refusal and nothing sent", tc.server, code, len(rt.reqs), errOut)
			}
			continue
		}
		if code != ExitOK || len(rt.reqs) != 1 {
			t.Errorf("%s: exit %d, %d requests, stderr %q", tc.server, code, len(rt.reqs), errOut)
			continue
		}
		want := ""
		if tc.token != "" {
			want = "Bearer " + tc.token
		}
		if got := rt.reqs[0].Header.Get("Authorization"); got != want {
			t.Errorf("%s: Authorization %q, want %q", tc.server, got, want)
		}
	}
}

func TestUnixSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "rota.sock")
	srv := newFakeServerWith(t, func(s *httptest.Server) {
		l, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		s.Listener.Close()
		s.Listener = l
		s.Start()
	})
	code, out, errOut := testRun{env: map[string]string{"ROTA_SERVER": "unix://" + sock}}.run(t, "whoami")
	want := "User:    alice\nRole:    admin\nTeams:   -\nVia:     Unix account, through the server's local socket\nServer:  unix://" + sock + "\n"
	if code != ExitOK || out != want {
		t.Errorf("whoami: exit %d\nstdout %q\nwant   %q\nstderr %q", code, out, want, errOut)
	}
	// Found without being named, in the data directory.
	code, out, errOut = testRun{env: map[string]string{"ROTA_DATA_DIR": dir}}.run(t, "queue")
	if code != ExitOK || !strings.Contains(out, "\n42 ") {
		t.Errorf("queue: exit %d, stderr %q\n%s", code, errOut, out)
	}
	// Submitting, with a body, works through it too.
	code, _, errOut = testRun{env: map[string]string{"ROTA_DATA_DIR": dir}}.run(t, "submit", "--", "true")
	if code != ExitOK {
		t.Errorf("submit: exit %d, stderr %q", code, errOut)
	}
	for _, a := range srv.auth {
		if a != "" {
			t.Errorf("a token went through the socket: %q", a)
		}
	}
}

func TestHTTPSPinnedCA(t *testing.T) {
	ca, _, err := auth.LoadOrCreateCA(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.ServerCertificate([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	srv := newFakeServerWith(t, func(s *httptest.Server) {
		s.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		s.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
		s.StartTLS()
	})
	env := map[string]string{"ROTA_SERVER": srv.URL, "ROTA_TOKEN": adminToken, "ROTA_CA_FINGERPRINT": ca.Fingerprint()}
	code, out, errOut := testRun{env: env}.run(t, "whoami")
	if code != ExitOK || !strings.HasPrefix(out, "User:    alice\n") {
		t.Errorf("pinned: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	wrong := "sha256:" + strings.Repeat("0", 64)
	code, _, errOut = testRun{env: env}.run(t, "whoami", "--ca-fingerprint", wrong)
	if code != ExitError || !strings.Contains(errOut, "differs from the pinned "+wrong) {
		t.Errorf("pinned to another CA: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = testRun{env: env}.run(t, "whoami", "--ca-fingerprint", "sha256:nothex")
	if code != ExitError || !strings.Contains(errOut, `CA fingerprint "sha256:nothex"`) {
		t.Errorf("a malformed pin: exit %d, stderr %q", code, errOut)
	}
	delete(env, "ROTA_CA_FINGERPRINT")
	code, _, errOut = testRun{env: env}.run(t, "whoami")
	if code != ExitError || !strings.Contains(errOut, "certificate") {
		t.Errorf("unpinned against the system's roots: exit %d, stderr %q", code, errOut)
	}
}

func TestRefusalsReadAsSentences(t *testing.T) {
	srv := newFakeServer(t)
	for _, tc := range []struct {
		token string
		verb  string
		args  []string
		want  string
	}{
		{"rota_wrong", "queue", nil, "rota: not logged in or token not valid: missing or unknown API token (rota login --server " + srv.URL + ")\n"},
		{"", "nodes", nil, "rota: not logged in or token not valid: missing or unknown API token (rota login --server " + srv.URL + ")\n"},
		{memberToken, "admin", []string{"user", "list"}, "rota: permission denied: only admins may do this (role member, rule users.manage)\n"},
		{viewerToken, "submit", []string{"--", "true"}, "rota: permission denied: role viewer may only read (rule read-only)\n"},
		{memberToken, "submit", []string{"--user", "carol", "--", "true"},
			"rota: permission denied: only an admin may submit as another user (role member, rule submit.on-behalf)\n"},
		{viewerToken, "cancel", []string{"43"}, "rota: job 43: permission denied: role viewer may only read (rule read-only)\n"},
		{adminToken, "submit", []string{"--name", "flood", "--", "true"}, "rota: too many requests; try again in 7 s\n"},
	} {
		env := map[string]string{"ROTA_SERVER": srv.URL, "ROTA_TOKEN": tc.token}
		code, out, errOut := testRun{env: env}.run(t, tc.verb, tc.args...)
		if code != ExitError || errOut != tc.want || out != "" {
			t.Errorf("%s %q as %q: exit %d, stdout %q\nstderr %q\nwant   %q", tc.verb, tc.args, tc.token, code, out, errOut, tc.want)
		}
	}
	// A refusal is an answer: no submit was sent again. (The viewer's was refused before
	// it reached the route.)
	if len(srv.submitKeys) != 2 {
		t.Errorf("%d submits reached the route, want 2", len(srv.submitKeys))
	}
}
