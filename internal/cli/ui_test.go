package cli

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// uiLinkServer answers POST /api/v1/ui/links with link, recording the Authorization it got.
func uiLinkServer(link api.UILink, auth *string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/ui/links" {
			http.NotFound(w, r)
			return
		}
		*auth = r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(link)
	})
}

func TestUIPrintsTheLink(t *testing.T) {
	link := api.UILink{Path: "/#login=abc", Expires: testNow.Add(time.Minute)}
	var auth string
	srv := httptest.NewServer(uiLinkServer(link, &auth))
	defer srv.Close()
	env := map[string]string{"ROTA_SERVER": srv.URL, "ROTA_TOKEN": adminToken}

	// The server gave no URL: the link is the path on the server the CLI talks to.
	code, out, errOut := testRun{env: env}.run(t, "ui", "--no-open")
	if code != ExitOK || strings.TrimSpace(out) != srv.URL+"/#login=abc" {
		t.Fatalf("rota ui --no-open: exit %d, stdout %q, stderr %q; want the server's URL and the path", code, out, errOut)
	}
	if auth != "Bearer "+adminToken {
		t.Errorf("the link was asked for with Authorization %q; want the token", auth)
	}
	if !strings.Contains(errOut, "once, within 1m0s") {
		t.Errorf("stderr %q; want how long the link lasts", errOut)
	}

	// -o json prints the link with its whole URL.
	code, out, _ = testRun{env: env}.run(t, "ui", "-o", "json")
	var got api.UILink
	if code != ExitOK || json.Unmarshal([]byte(out), &got) != nil || got.URL != srv.URL+"/#login=abc" || got.Path != link.Path {
		t.Errorf("rota ui -o json: exit %d %s", code, out)
	}

	// No opener: the link is printed, and stderr says to open it by hand.
	t.Setenv("PATH", t.TempDir())
	code, out, errOut = testRun{env: env}.run(t, "ui")
	if code != ExitOK || strings.TrimSpace(out) != srv.URL+"/#login=abc" || !strings.Contains(errOut, "open the link above yourself") {
		t.Errorf("rota ui without xdg-open: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestUIOnSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "rota.sock")
	serve := func(link api.UILink) func() {
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		var auth string
		hs := &http.Server{Handler: uiLinkServer(link, &auth)}
		go hs.Serve(ln)
		return func() { hs.Close() }
	}
	env := map[string]string{"ROTA_SERVER": "unix://" + sock}

	// The server knows its address: its URL is printed.
	stop := serve(api.UILink{Path: "/#login=abc", URL: "http://127.0.0.1:7070/#login=abc", Expires: testNow.Add(time.Minute)})
	code, out, errOut := testRun{env: env}.run(t, "ui", "--no-open")
	stop()
	if code != ExitOK || strings.TrimSpace(out) != "http://127.0.0.1:7070/#login=abc" {
		t.Fatalf("rota ui on the socket: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// It does not: the path is printed with what to do with it.
	stop = serve(api.UILink{Path: "/#login=abc", Expires: testNow.Add(time.Minute)})
	defer stop()
	code, out, errOut = testRun{env: env}.run(t, "ui", "--no-open")
	if code != ExitOK || strings.TrimSpace(out) != "/#login=abc" || !strings.Contains(errOut, "did not say where browsers reach it") {
		t.Errorf("rota ui on a socket without a URL: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

func TestUIRejectsArguments(t *testing.T) {
	if code, _, errOut := (testRun{}).run(t, "ui", "extra"); code != ExitUsage || !strings.Contains(errOut, "unexpected argument") {
		t.Errorf("rota ui extra: exit %d %q; want a usage error", code, errOut)
	}
}
