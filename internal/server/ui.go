package server

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
	"github.com/rotahq/rota/internal/store"
	"github.com/rotahq/rota/web"
)

// The web UI (web/) is static files that read the API with a token, like any client. This
// file serves them, and lets `rota ui` log a browser in without a token being typed: the
// caller asks for a one-time link (POST /api/v1/ui/links), the page trades its code for
// an ordinary API token of the caller (POST /api/v1/ui/session), which is stored hashed,
// audited and revocable like every other, and expires in uiSessionTTL.

const (
	uiLinkTTL    = time.Minute
	uiSessionTTL = 12 * time.Hour
	// uiMaxLinks bounds the codes outstanding at once, so no caller can fill memory, and
	// uiMaxLinksPerUser one user's, so no caller can spend the others' links.
	uiMaxLinks        = 1024
	uiMaxLinksPerUser = 10
	// A source may fail uiMaxFailures exchanges per uiFailureWindow; then it waits. The
	// codes carry 256 random bits, so this is hygiene against noise, not the defence.
	uiMaxFailures   = 10
	uiFailureWindow = time.Minute
	// uiMaxSources bounds the failure counters kept.
	uiMaxSources = 4096
)

// mountUI serves the web UI at / and its files under web.AssetPrefix. Other paths outside
// /api/ are not the UI's: they are 404, not the page.
func (s *Server) mountUI(mux *http.ServeMux) {
	h := web.Handler()
	mux.Handle("GET /{$}", h)
	mux.Handle("GET "+web.AssetPrefix, h)
}

// SetURL tells the server the address browsers reach it at (http://127.0.0.1:7070), for
// the links `rota ui` opens. Without it a link names the address its request came in on,
// and a request on the local socket gets a path only.
func (s *Server) SetURL(u string) {
	l := s.uiLinks()
	l.mu.Lock()
	l.url = strings.TrimRight(u, "/")
	l.mu.Unlock()
}

// uiLinkStore holds the one-time codes and the failed exchanges, in memory only: a code
// lives a minute, and a restart losing them costs a new `rota ui`.
type uiLinkStore struct {
	mu sync.Mutex // guards the fields below
	// codes maps the SHA-256 of each outstanding code to its user and expiry.
	codes map[string]uiCode
	// failures counts failed exchanges per source in the current window.
	failures map[string]uiFailures
	url      string
}

type uiCode struct {
	user    string
	expires time.Time
}

type uiFailures struct {
	since time.Time
	n     int
}

func newUILinkStore() *uiLinkStore {
	return &uiLinkStore{codes: map[string]uiCode{}, failures: map[string]uiFailures{}}
}

func (s *Server) uiLinks() *uiLinkStore { return s.ui }

func hashCode(code string) string {
	sum := sha256.Sum256([]byte(code))
	return hex.EncodeToString(sum[:])
}

// handleUILink makes a one-time link for the caller. Only a rota user can have one: the
// session it opens is an API token, and tokens belong to users.
func (s *Server) handleUILink(w http.ResponseWriter, r *http.Request) {
	id := caller(r)
	s.mu.Lock()
	_, known := s.state.User(id.User)
	s.mu.Unlock()
	if !known {
		writeError(w, http.StatusForbidden, forbidden(id, "rota-user",
			"the web UI logs in with an API token, and %s has no rota user to hold one; an admin adds one with: rota admin user add %s", id.User, id.User))
		return
	}
	var raw [32]byte
	rand.Read(raw[:])
	code := base64.RawURLEncoding.EncodeToString(raw[:])
	now := s.cfg.Clock.Now()
	l := s.uiLinks()
	l.mu.Lock()
	l.prune(now)
	mine := 0
	for _, c := range l.codes {
		if c.user == id.User {
			mine++
		}
	}
	if mine >= uiMaxLinksPerUser || len(l.codes) >= uiMaxLinks {
		l.mu.Unlock()
		msg := "too many web UI links are waiting to be used; try again in a minute"
		if mine >= uiMaxLinksPerUser {
			msg = fmt.Sprintf("%s has %d web UI links waiting to be used, the most one user may; use one, or try again in a minute", id.User, mine)
		}
		w.Header().Set("Retry-After", strconv.Itoa(int(uiLinkTTL/time.Second)))
		writeError(w, http.StatusTooManyRequests, &api.Error{Code: api.CodeRateLimited, Message: msg})
		return
	}
	link := api.UILink{Path: "/#login=" + code, Expires: now.Add(uiLinkTTL)}
	l.codes[hashCode(code)] = uiCode{user: id.User, expires: link.Expires}
	base := l.url
	l.mu.Unlock()
	if base == "" {
		base = requestBase(r)
	}
	if base != "" {
		link.URL = base + link.Path
	}
	writeJSON(w, http.StatusCreated, link)
}

// requestBase is the scheme and host a TCP request came in on; empty for the local socket
// and the in-process listener, whose host names nothing a browser can reach.
func requestBase(r *http.Request) string {
	info, _ := r.Context().Value(connKey{}).(connInfo)
	if info.unix || info.local || r.Host == "" {
		return ""
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// prune drops expired codes and failure windows that have passed. Callers hold l.mu.
func (l *uiLinkStore) prune(now time.Time) {
	for h, c := range l.codes {
		if !now.Before(c.expires) {
			delete(l.codes, h)
		}
	}
	for src, f := range l.failures {
		if now.Sub(f.since) >= uiFailureWindow {
			delete(l.failures, src)
		}
	}
}

// handleUISession trades a one-time code for a new API token of the code's user, expiring
// in uiSessionTTL. The code is spent whatever happens next.
func (s *Server) handleUISession(w http.ResponseWriter, r *http.Request) {
	var req api.UISessionRequest
	if status, e := s.decodeJSON(w, r, &req); e != nil {
		writeError(w, status, e)
		return
	}
	now := s.cfg.Clock.Now()
	src := sourceHost(r)
	l := s.uiLinks()
	l.mu.Lock()
	l.prune(now)
	if f := l.failures[src]; f.n >= uiMaxFailures {
		l.mu.Unlock()
		wait := f.since.Add(uiFailureWindow).Sub(now)
		w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
		writeError(w, http.StatusTooManyRequests, &api.Error{Code: api.CodeRateLimited,
			Message: "too many wrong web UI login codes from here; wait a minute, then run rota ui again"})
		return
	}
	h := hashCode(req.Code)
	c, ok := l.codes[h]
	delete(l.codes, h)
	if !ok {
		f := l.failures[src]
		if f.n == 0 {
			f.since = now
		}
		f.n++
		if len(l.failures) < uiMaxSources || f.n > 1 {
			l.failures[src] = f
		}
		l.mu.Unlock()
		writeError(w, http.StatusUnauthorized, unauthorized("that login link is unknown, used already or expired (links work once, within a minute); run rota ui for a new one"))
		return
	}
	l.mu.Unlock()

	s.mu.Lock()
	defer s.mu.Unlock()
	u, known := s.state.User(c.user)
	if !known {
		writeError(w, http.StatusUnauthorized, unauthorized("the login link was made for user %s, who no longer exists", c.user))
		return
	}
	forget, e := s.tokenRoom(u.Name, now)
	if e != nil {
		writeError(w, http.StatusConflict, e)
		return
	}
	tok := auth.NewToken()
	exp := now.Add(uiSessionTTL)
	info := api.TokenInfo{ID: tok.ID, User: u.Name, Description: "web UI session from a one-time link", Created: now, Expires: &exp}
	ev := api.Event{Time: now, Actor: u.Name, Role: u.Role, Source: r.RemoteAddr, Kind: api.EventToken,
		Message: "created web UI session token " + tok.ID + " for " + u.Name + " from a one-time link"}
	s.adminCommit(w, r, &store.Batch{Tokens: []store.TokenRecord{{TokenInfo: info, Hash: tok.Hash}}, DeleteTokens: forget, Events: []api.Event{ev}},
		http.StatusCreated, api.NewToken{TokenInfo: info, Token: tok.Plain})
}

// sourceHost is who failed exchanges are counted against: the remote IP, without its port.
func sourceHost(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}
