package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
)

// Authentication: who a request comes from. Four ways, in this order:
//
//  1. an API token in "Authorization: Bearer", on any connection;
//  2. an agent's client certificate on a TLS connection (the node it names);
//  3. the caller's Unix account, on the server's local socket (SO_PEERCRED): on a
//     workstation running `rota up` nobody needs a token;
//  4. the in-process connection of the agent inside `rota up`.
//
// Anything else is anonymous, which only public routes admit.

// connKey carries what the server learnt about a connection when it was accepted.
type connKey struct{}

type connInfo struct {
	// local marks the in-process connection of `rota up`'s agent.
	local bool
	// unix is set for connections on the local socket, with the peer's uid.
	unix    bool
	uid     int
	credErr error
	// cert is set for TLS connections: the node their client certificate names.
	cert *certNode
}

// certNode is what a TLS connection's client certificate says, read at the first request
// that needs it. A connection keeps the certificate it was opened with, so reading it
// again at every request, as 5,000 heartbeats a second did, found the same answer each
// time. Whether the certificate is still the node's current one is asked at every
// request (nodeIdentity): a renewal, a new join or the node's removal ends it at once,
// on open connections too.
type certNode struct {
	once   sync.Once
	node   string
	serial string
	ok     bool
	user   string // "node:" and the node
}

// read is auth.NodeFromState of cs, worked out once per connection.
func (c *certNode) read(cs *tls.ConnectionState, clusterID string) *certNode {
	c.once.Do(func() {
		c.node, c.serial, c.ok = auth.NodeFromState(*cs, clusterID)
		c.user = "node:" + c.node
	})
	return c
}

// ConnContext records what a connection says about its caller; set it as the
// http.Server's ConnContext on every listener the server's Handler serves.
func (s *Server) ConnContext(ctx context.Context, c net.Conn) context.Context {
	switch c := c.(type) {
	case *localConn:
		return context.WithValue(ctx, connKey{}, connInfo{local: true})
	case *net.UnixConn:
		uid, _, _, err := auth.PeerCred(c)
		return context.WithValue(ctx, connKey{}, connInfo{unix: true, uid: uid, credErr: err})
	case *tls.Conn:
		return context.WithValue(ctx, connKey{}, connInfo{cert: &certNode{}})
	}
	return ctx
}

// authenticate establishes who made r. It returns an anonymous identity (Kind "") with a
// nil error when the request carries no credentials at all, and a 401 for credentials
// that are not valid: a bad token is never silently treated as no token.
func (s *Server) authenticate(r *http.Request) (auth.Identity, *api.Error) {
	info, _ := r.Context().Value(connKey{}).(connInfo)
	id := auth.Identity{Source: r.RemoteAddr}
	if info.unix {
		id.Source = "unix:uid=" + strconv.Itoa(info.uid)
	}
	if h := r.Header.Get("Authorization"); h != "" {
		return s.tokenIdentity(h, id.Source)
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		cert := info.cert
		if cert == nil {
			// A TLS connection the server did not accept itself (a test's, or one
			// whose ConnContext was not set): read the certificate for this request.
			cert = &certNode{}
		}
		return s.nodeIdentity(cert.read(r.TLS, s.clusterID), id.Source)
	}
	switch {
	case info.local:
		id.Kind, id.User = auth.KindLocal, "rota-up-agent"
		return id, nil
	case info.unix:
		return s.unixIdentity(info, id.Source)
	}
	return id, nil
}

func unauthorized(format string, args ...any) *api.Error {
	return &api.Error{Code: api.CodeUnauthorized, Message: fmt.Sprintf(format, args...)}
}

func (s *Server) tokenIdentity(header, source string) (auth.Identity, *api.Error) {
	scheme, plain, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return auth.Identity{}, unauthorized(`the Authorization header must be "Bearer TOKEN"`)
	}
	plain = strings.TrimSpace(plain)
	if _, ok := auth.TokenID(plain); !ok {
		return auth.Identity{}, unauthorized("that is not a rota API token (they look like rota_…)")
	}
	now := s.cfg.Clock.Now()
	rec, found, u, hasUser := s.view.token(auth.HashToken(plain))
	switch {
	case !found:
		return auth.Identity{}, unauthorized("the API token is not known to this server")
	case rec.Revoked != nil:
		return auth.Identity{}, unauthorized("API token %s was revoked at %s", rec.ID, rec.Revoked.Format(time.RFC3339))
	case rec.Expires != nil && !now.Before(*rec.Expires):
		return auth.Identity{}, unauthorized("API token %s expired at %s", rec.ID, rec.Expires.Format(time.RFC3339))
	case !hasUser:
		return auth.Identity{}, unauthorized("API token %s belongs to user %s, who no longer exists", rec.ID, rec.User)
	}
	s.lastUsed.note(rec.ID, now)
	return auth.Identity{User: u.Name, Role: auth.Role(u.Role), Kind: auth.KindToken, TokenID: rec.ID, Source: source}, nil
}

// nodeIdentity accepts a client certificate only if it is the one the node may use now: a
// later join or renewal, or the node's removal, ends the old one at once.
func (s *Server) nodeIdentity(cert *certNode, source string) (auth.Identity, *api.Error) {
	if !cert.ok {
		return auth.Identity{}, unauthorized("the client certificate is not a node certificate of this cluster (%s)", s.clusterID)
	}
	node, serial := cert.node, cert.serial
	current, found := s.view.serial(node)
	switch {
	case !found:
		return auth.Identity{}, unauthorized("node %s has no certificate on this server (it was removed); join it again with a new join token", node)
	case current != serial:
		return auth.Identity{}, unauthorized("this certificate of node %s (serial %s) was superseded by a later join or renewal (serial %s)", node, serial, current)
	}
	return auth.Identity{User: cert.user, Kind: auth.KindNode, Node: node, Source: source}, nil
}

func (s *Server) unixIdentity(info connInfo, source string) (auth.Identity, *api.Error) {
	if info.credErr != nil {
		return auth.Identity{}, unauthorized("cannot tell who is calling on the local socket: %v", info.credErr)
	}
	u, err := user.LookupId(strconv.Itoa(info.uid))
	if err != nil {
		return auth.Identity{}, unauthorized("uid %d has no account name on the server's machine", info.uid)
	}
	id := auth.Identity{User: u.Username, Kind: auth.KindUnix, Source: source}
	rec, known := s.view.user(u.Username)
	switch {
	case known:
		id.Role = auth.Role(rec.Role)
	case info.uid == os.Geteuid() || info.uid == 0:
		// The account the server runs as, and root, own the server's data already.
		id.Role = auth.RoleAdmin
	case s.cfg.LocalUsersAreMembers:
		id.Role = auth.RoleMember
	default:
		return auth.Identity{}, unauthorized("no rota user is named %s; an admin can add one with: rota admin user add %s", u.Username, u.Username)
	}
	return id, nil
}

// lastUse remembers when each token was last used. It is kept in memory only: a write per
// request would cost more than the answer is worth, and a restart loses nothing that matters.
type lastUse struct {
	mu sync.Mutex // guards at
	at map[string]time.Time
}

func (l *lastUse) note(id string, t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.at == nil {
		l.at = map[string]time.Time{}
	}
	l.at[id] = t
}

// forget drops what it holds of the tokens ids, which are gone.
func (l *lastUse) forget(ids []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		delete(l.at, id)
	}
}

func (l *lastUse) get(id string) *time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.at[id]; ok {
		return &t
	}
	return nil
}

// localConn is one end of an in-process connection (see LocalListener).
type localConn struct{ net.Conn }

// LocalListener is a listener whose connections never leave the process: the agent inside
// `rota up` reaches its server through it, and tests use it to play agents. Only code in
// the server's own process can dial it, which is what makes its connections trusted.
type LocalListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

// NewLocalListener returns a listener to serve with an http.Server whose ConnContext is
// the server's.
func NewLocalListener() *LocalListener {
	return &LocalListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

var errListenerClosed = errors.New("local listener closed")

// Accept waits for the next in-process connection.
func (l *LocalListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, errListenerClosed
	}
}

// Close stops accepting; connections already made stay open.
func (l *LocalListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

// Addr names the listener.
func (l *LocalListener) Addr() net.Addr { return localAddr{} }

// DialContext makes a connection to the listener; it is an http.Transport's DialContext.
func (l *LocalListener) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- &localConn{server}:
		return client, nil
	case <-l.closed:
		client.Close()
		server.Close()
		return nil, errListenerClosed
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
}

// Client returns an HTTP client whose requests go to the listener, whatever their URL's
// host says.
func (l *LocalListener) Client() *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: l.DialContext, MaxIdleConnsPerHost: 64}}
}

type localAddr struct{}

func (localAddr) Network() string { return "local" }
func (localAddr) String() string  { return "in-process" }
