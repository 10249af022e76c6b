package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// The page and its files: the right types, the security headers on every answer, and
// nothing else served outside /api/.
func TestUIServesPageAndAssets(t *testing.T) {
	h := newHarness(t)
	for _, c := range []struct {
		path, ctype string
		status      int
	}{
		{"/", "text/html; charset=utf-8", 200},
		{"/ui/app.js", "text/javascript; charset=utf-8", 200},
		{"/ui/app.css", "text/css; charset=utf-8", 200},
		{"/ui/favicon.svg", "image/svg+xml", 200},
		{"/ui/nope.js", "", 404},
		{"/ui/", "", 404},
		{"/ui/.hidden", "", 404},
		{"/index.html", "", 404},
		{"/no/such/page", "", 404},
	} {
		t.Run(c.path, func(t *testing.T) {
			resp, err := http.Get(h.http.URL + c.path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Fatalf("GET %s: %d; want %d", c.path, resp.StatusCode, c.status)
			}
			if c.status != 200 {
				return
			}
			if got := resp.Header.Get("Content-Type"); got != c.ctype {
				t.Errorf("GET %s: Content-Type %q; want %q", c.path, got, c.ctype)
			}
			for k, want := range map[string]string{
				"Content-Security-Policy": "default-src 'self'",
				"X-Content-Type-Options":  "nosniff",
				"Referrer-Policy":         "no-referrer",
			} {
				if got := resp.Header.Get(k); !strings.Contains(got, want) {
					t.Errorf("GET %s: %s %q; want it to hold %q", c.path, k, got, want)
				}
			}
			if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe-inline") {
				t.Errorf("GET %s: Content-Security-Policy %q; want frame-ancestors 'none' and nothing inline", c.path, csp)
			}
			if c.path == "/" {
				// The policy forbids inline script: every script must come from a file.
				if !bytes.Contains(body, []byte(`<script src="/ui/app.js"`)) || bytes.Contains(body, []byte("<script>")) {
					t.Errorf("the page must load its script from /ui/app.js and have none inline:\n%s", body)
				}
			}
		})
	}
	// The API's own 404 still answers under /api/.
	code, e := h.call(h.token, "GET", "/api/v1/nope", "", nil)
	if code != 404 || e.Code != api.CodeNotFound {
		t.Errorf("GET /api/v1/nope: %d %+v; want the API's 404", code, e)
	}
}

// uiLink asks for a link with token and returns it.
func (h *harness) uiLink(token string) api.UILink {
	h.t.Helper()
	var l api.UILink
	if code := h.doAs(token, "POST", "/api/v1/ui/links", nil, &l); code != http.StatusCreated {
		h.t.Fatalf("POST /api/v1/ui/links: %d", code)
	}
	return l
}

// uiSession trades a link's code and returns the status and the token.
func (h *harness) uiSession(code string) (int, api.NewToken) {
	h.t.Helper()
	var tok api.NewToken
	status := h.doAs("", "POST", "/api/v1/ui/session", api.UISessionRequest{Code: code}, &tok)
	return status, tok
}

func linkCode(t *testing.T, l api.UILink) string {
	t.Helper()
	code, ok := strings.CutPrefix(l.Path, "/#login=")
	if !ok || len(code) < 40 {
		t.Fatalf("link path %q; want /#login= and a long code", l.Path)
	}
	return code
}

// A link logs in once, within a minute, as whoever asked for it; the session is an
// ordinary token of theirs: it works on the API, is listed, and revocable.
func TestUILinkToSession(t *testing.T) {
	h := newHarness(t)
	mia := h.addUser("mia", "member")
	now := h.clock.Now()

	l := h.uiLink(mia)
	if !l.Expires.Equal(now.Add(time.Minute)) {
		t.Errorf("link expires %s; want a minute from now (%s)", l.Expires, now.Add(time.Minute))
	}
	if want := h.http.URL + l.Path; l.URL != want {
		t.Errorf("link URL %q; want the address the request came in on: %q", l.URL, want)
	}
	code := linkCode(t, l)
	status, tok := h.uiSession(code)
	if status != http.StatusCreated || tok.Token == "" || tok.User != "mia" {
		t.Fatalf("exchange: %d %+v; want 201 with a token of mia", status, tok)
	}
	if tok.Expires == nil || !tok.Expires.Equal(now.Add(12*time.Hour)) {
		t.Errorf("session token expires %v; want in 12 hours", tok.Expires)
	}
	if status, _ := h.uiSession(code); status != http.StatusUnauthorized {
		t.Errorf("the same code again: %d; want 401", status)
	}

	var who api.Whoami
	if code := h.doAs(tok.Token, "GET", "/api/v1/whoami", nil, &who); code != 200 || who.User != "mia" || who.Role != "member" || who.TokenID != tok.ID {
		t.Fatalf("whoami with the session token: %d %+v; want mia, member, token %s", code, who, tok.ID)
	}
	var list api.TokenList
	h.doAs(mia, "GET", "/api/v1/tokens", nil, &list)
	found := false
	for _, ti := range list.Tokens {
		found = found || ti.ID == tok.ID
	}
	if !found {
		t.Errorf("the session token %s is not among mia's tokens: %+v", tok.ID, list.Tokens)
	}
	var audit api.EventList
	h.do("GET", "/api/v1/audit", nil, &audit)
	audited := false
	for _, ev := range audit.Events {
		audited = audited || (ev.Kind == api.EventToken && strings.Contains(ev.Message, tok.ID) && ev.Actor == "mia")
	}
	if !audited {
		t.Errorf("no audit event records the session token %s", tok.ID)
	}

	if code := h.doAs(tok.Token, "DELETE", "/api/v1/tokens/"+tok.ID, nil, nil); code != http.StatusNoContent {
		t.Fatalf("revoking the session token with itself: %d", code)
	}
	if code := h.doAs(tok.Token, "GET", "/api/v1/whoami", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("whoami with the revoked session token: %d; want 401", code)
	}

	// The session expires with its token.
	l = h.uiLink(mia)
	_, tok = h.uiSession(linkCode(t, l))
	h.clock.Add(12 * time.Hour)
	if code := h.doAs(tok.Token, "GET", "/api/v1/whoami", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("whoami with a 12-hour-old session token: %d; want 401", code)
	}
}

func TestUILinkRefusals(t *testing.T) {
	h := newHarness(t)

	// Expired.
	l := h.uiLink(h.token)
	h.clock.Add(time.Minute)
	if status, _ := h.uiSession(linkCode(t, l)); status != http.StatusUnauthorized {
		t.Errorf("a code a minute old: %d; want 401", status)
	}

	// A code whose user went away meanwhile.
	ghost := h.addUser("ghost", "member")
	l = h.uiLink(ghost)
	if code := h.do("DELETE", "/api/v1/users/ghost", nil, nil); code != http.StatusNoContent {
		t.Fatalf("delete user ghost: %d", code)
	}
	if status, _ := h.uiSession(linkCode(t, l)); status != http.StatusUnauthorized {
		t.Errorf("a code of a deleted user: %d; want 401", status)
	}

	// Without credentials there is no link; a malformed body is 400.
	if code := h.doAs("", "POST", "/api/v1/ui/links", nil, nil); code != http.StatusUnauthorized {
		t.Errorf("a link without credentials: %d; want 401", code)
	}
	if code, _ := h.call("", "POST", "/api/v1/ui/session", "application/json", []byte("{")); code != http.StatusBadRequest {
		t.Errorf("a malformed exchange: %d; want 400", code)
	}
}

// Wrong codes are counted per source: after uiMaxFailures in a minute even a good code
// waits, and the count clears with the window.
func TestUISessionRateLimit(t *testing.T) {
	h := newHarness(t)
	h.clock.Add(time.Second) // fresh window
	for i := range uiMaxFailures {
		if status, _ := h.uiSession("wrong-code"); status != http.StatusUnauthorized {
			t.Fatalf("wrong code %d: %d; want 401", i+1, status)
		}
	}
	good := linkCode(t, h.uiLink(h.token))
	req, _ := http.NewRequest("POST", h.http.URL+"/api/v1/ui/session", strings.NewReader(`{"code":"`+good+`"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a code after %d wrong ones: %d (Retry-After %q); want 429 with Retry-After", uiMaxFailures, resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	h.clock.Add(uiFailureWindow)
	good = linkCode(t, h.uiLink(h.token))
	if status, _ := h.uiSession(good); status != http.StatusCreated {
		t.Errorf("a good code once the window passed: %d; want 201", status)
	}
}

// On the local socket the server knows no address for the browser unless told one, and
// only a caller with a rota user can have a link (the session is a token of that user).
func TestUILinkOnSocket(t *testing.T) {
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
	link := func() (int, api.UILink, api.Error) {
		resp, err := client.Post("http://rota/api/v1/ui/links", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var l api.UILink
		var e api.Error
		json.Unmarshal(data, &l)
		json.Unmarshal(data, &e)
		return resp.StatusCode, l, e
	}
	me, err := user.Current()
	if err != nil {
		t.Skip(err)
	}
	// The harness's first admin is "admin": this account is admin on the socket, but has
	// no rota user to hold a token.
	if code, _, e := link(); code != http.StatusForbidden || !strings.Contains(e.Message, "rota admin user add "+me.Username) {
		t.Fatalf("a link for an account without a rota user: %d %+v; want 403 saying how to add one", code, e)
	}
	if code := h.do("PUT", "/api/v1/users/"+me.Username, api.User{Role: "admin"}, nil); code != 200 {
		t.Skipf("cannot add a rota user named %s: %d", me.Username, code)
	}
	code, l, _ := link()
	if code != http.StatusCreated || l.URL != "" {
		t.Fatalf("a link on the socket: %d %+v; want 201 without a URL (the server was not told its address)", code, l)
	}
	h.srv.SetURL("http://127.0.0.1:7070/")
	code, l, _ = link()
	if code != http.StatusCreated || l.URL != "http://127.0.0.1:7070"+l.Path {
		t.Fatalf("a link once the server knows its address: %d %+v", code, l)
	}
	if status, tok := h.uiSession(linkCode(t, l)); status != http.StatusCreated || tok.User != me.Username {
		t.Errorf("exchange of a socket link: %d %+v; want a token of %s", status, tok, me.Username)
	}
}

// One user's links waiting to be used are bounded, so that a user asking for links in a
// loop cannot spend the links every other user's `rota ui` needs: past the bound that
// user waits (429 naming them), another user still gets links, and the user's own
// links free up as they are used or expire.
func TestUILinksPerUser(t *testing.T) {
	h := newHarness(t)
	mia := h.addUser("mia", "member")
	ned := h.addUser("ned", "member")
	var first api.UILink
	for i := range uiMaxLinksPerUser {
		l := h.uiLink(mia)
		if i == 0 {
			first = l
		}
	}
	code, e := h.call(mia, "POST", "/api/v1/ui/links", "", nil)
	if code != http.StatusTooManyRequests || e.Code != api.CodeRateLimited || !strings.Contains(e.Message, "mia has 10 web UI links waiting") {
		t.Fatalf("a link past the bound: %d %+v; want 429 naming mia's links", code, e)
	}
	h.uiLink(ned) // fails the test unless ned gets one
	if status, _ := h.uiSession(linkCode(t, first)); status != http.StatusCreated {
		t.Fatalf("using one of mia's links: %d", status)
	}
	h.uiLink(mia) // the used link made room
	if code, _ := h.call(mia, "POST", "/api/v1/ui/links", "", nil); code != http.StatusTooManyRequests {
		t.Errorf("past the bound again: %d; want 429", code)
	}
	h.clock.Add(uiLinkTTL)
	h.uiLink(mia) // expired links made room
}
