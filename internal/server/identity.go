package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/atomicfile"
	"github.com/rotahq/rota/internal/auth"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/store"
)

// Bounds on identity objects.
const (
	certValidity       = 365 * 24 * time.Hour
	defaultJoinTTL     = time.Hour
	maxJoinTTL         = 7 * 24 * time.Hour
	maxJoinUses        = 10_000
	maxTokenTTL        = 10 * 365 * 24 * time.Hour
	maxDescription     = 256
	adminTokenFileName = "admin-token"
)

// unixNameRE is what a Unix account name may be on common systems.
var unixNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z_][a-z0-9_.-]{0,31}\$?$`) })

type clusterSetting struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
}

// loadIdentity adds the identity records to the batch that load applies.
func (s *Server) loadIdentity(ctx context.Context, b *store.Batch) error {
	var err error
	settings, err := s.store.LoadSettings(ctx)
	if err != nil {
		return fmt.Errorf("server: load settings: %w", err)
	}
	for name, data := range settings {
		b.Settings = append(b.Settings, store.Setting{Name: name, Data: data})
	}
	if b.Users, err = s.store.LoadUsers(ctx); err != nil {
		return fmt.Errorf("server: load users: %w", err)
	}
	if b.Tokens, err = s.store.LoadTokens(ctx); err != nil {
		return fmt.Errorf("server: load tokens: %w", err)
	}
	if b.JoinTokens, err = s.store.LoadJoinTokens(ctx); err != nil {
		return fmt.Errorf("server: load join tokens: %w", err)
	}
	if b.NodeCerts, err = s.store.LoadNodeCerts(ctx); err != nil {
		return fmt.Errorf("server: load node certificates: %w", err)
	}
	if b.Idempotency, err = s.store.LoadIdempotency(ctx, s.cfg.Clock.Now().Add(-idempotencyWindow)); err != nil {
		return fmt.Errorf("server: load idempotency keys: %w", err)
	}
	return nil
}

// bootstrap gives a new cluster what it needs on its first start, in one commit: its ID,
// the default queues, and the first admin with a token in DataDir/admin-token. On every
// start it loads (or, the first time, creates) the CA in DataDir/ca.
func (s *Server) bootstrap(ctx context.Context) error {
	now := s.cfg.Clock.Now()
	b := &store.Batch{}
	if data, ok := s.state.Setting(cluster.SettingCluster); ok {
		var c clusterSetting
		if err := json.Unmarshal(data, &c); err != nil || !auth.ValidClusterID(c.ID) {
			return fmt.Errorf("server: the store's cluster setting is damaged: %s", data)
		}
		s.clusterID = c.ID
	} else {
		s.clusterID = auth.NewClusterID()
		data, _ := json.Marshal(clusterSetting{ID: s.clusterID, Created: now})
		b.Settings = append(b.Settings, store.Setting{Name: cluster.SettingCluster, Data: data})
		b.Events = append(b.Events, api.Event{Time: now, Actor: "system", Kind: api.EventConfig, Message: "new cluster " + s.clusterID})
	}
	// Replicas of one cluster must share its CA, or agents and clients that trust one
	// would refuse the others: a replica joining an existing cluster does not make its own.
	if s.cfg.Lease != nil && len(b.Settings) == 0 {
		if _, err := os.Stat(filepath.Join(s.cfg.DataDir, "ca")); errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("server: the store holds cluster %s but %s has no CA: copy the ca directory from the data dir of the server that created the cluster (docs/ha.md)",
				s.clusterID, filepath.Join(s.cfg.DataDir, "ca"))
		}
	}
	ca, created, err := auth.LoadOrCreateCA(filepath.Join(s.cfg.DataDir, "ca"), s.clusterID)
	if err != nil {
		return fmt.Errorf("server: cluster CA: %w", err)
	}
	if ca.ClusterID() != s.clusterID {
		return fmt.Errorf("server: the CA in %s belongs to cluster %s but the store holds cluster %s: a data dir and a store of different clusters were put together",
			filepath.Join(s.cfg.DataDir, "ca"), ca.ClusterID(), s.clusterID)
	}
	s.ca = ca
	if created {
		s.log.Info("created the cluster CA", "dir", filepath.Join(s.cfg.DataDir, "ca"), "fingerprint", ca.Fingerprint())
	}
	if !s.isLeader() {
		return nil // a standby writes nothing; the leader has made, or will make, the rest
	}
	if len(s.state.Queues()) == 0 {
		b.Queues = DefaultQueues()
		for _, q := range b.Queues {
			b.Events = append(b.Events, api.Event{Time: now, Actor: "system", Kind: api.EventQueue, Message: "created default queue " + q.Name})
		}
		if _, set := s.state.Setting(cluster.SettingPools); !set {
			data, _ := json.Marshal(cluster.DefaultPools())
			b.Settings = append(b.Settings, store.Setting{Name: cluster.SettingPools, Data: data})
			b.Events = append(b.Events, api.Event{Time: now, Actor: "system", Kind: api.EventConfig, Message: "created default pool settings: pool inference is exclusive to queue inference"})
		}
	}
	var token auth.Token
	if s.state.CountUsers(nil) == 0 {
		name := s.cfg.BootstrapAdmin
		b.Users = append(b.Users, api.User{Name: name, Role: string(auth.RoleAdmin), AllowRoot: s.cfg.BootstrapAllowRoot, Created: now})
		token = auth.NewToken()
		b.Tokens = append(b.Tokens, store.TokenRecord{Hash: token.Hash,
			TokenInfo: api.TokenInfo{ID: token.ID, User: name, Description: "first admin token, created at the first start", Created: now}})
		b.Events = append(b.Events, api.Event{Time: now, Actor: "system", Kind: api.EventUser, Message: "created the first admin, " + name},
			api.Event{Time: now, Actor: "system", Kind: api.EventToken, Message: "created admin token " + token.ID + " for " + name})
		// The file is written before the commit: a token in the store that nobody can
		// read would lock the admin out.
		path := filepath.Join(s.cfg.DataDir, adminTokenFileName)
		if err := atomicfile.Write(path, []byte(token.Plain+"\n"), 0o600, true); err != nil {
			return fmt.Errorf("server: write the first admin token: %w", err)
		}
	}
	if err := s.commit(ctx, b); err != nil {
		return fmt.Errorf("server: first start: %w", err)
	}
	if token.Plain != "" {
		s.log.Info("created the first admin token: use it with ROTA_TOKEN=$(cat "+filepath.Join(s.cfg.DataDir, adminTokenFileName)+") or rota login",
			"user", s.cfg.BootstrapAdmin, "file", filepath.Join(s.cfg.DataDir, adminTokenFileName))
	}
	return nil
}

// ClusterID names the cluster this server runs.
func (s *Server) ClusterID() string { return s.clusterID }

// CA is the cluster's certificate authority.
func (s *Server) CA() *auth.CA { return s.ca }

// audit returns an event recording a change made through the API by r's caller.
func audit(r *http.Request, now time.Time, kind string, format string, args ...any) api.Event {
	id := caller(r)
	return api.Event{Time: now, Actor: id.User, Role: string(id.Role), Source: id.Source, Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// withChange adds a setting's values before and after to ev; a nil side is left out.
func withChange(ev api.Event, before, after any) api.Event {
	ev.Before, ev.After = changeJSON(before), changeJSON(after)
	return ev
}

// changeJSON is one side of a change as JSON: nothing for nil, a nil pointer or a nil
// slice or map included, whose JSON null the audit log's schema does not allow.
func changeJSON(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	data, err := json.Marshal(v)
	if err != nil || string(data) == "null" {
		return nil
	}
	return data
}

func (s *Server) handleWhoami(w http.ResponseWriter, r *http.Request) {
	id := caller(r)
	s.mu.Lock()
	teams := s.state.TeamsOf(id.User)
	u, _ := s.state.User(id.User)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, api.Whoami{User: id.User, Role: string(id.Role), Kind: id.Kind, Node: id.Node, TokenID: id.TokenID,
		Teams: teams, Notify: u.Notify})
}

func (s *Server) handleUsers(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	users := s.state.Users()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, api.UserList{Users: users})
}

// admins counts the users with the admin role.
func (s *Server) admins() int {
	return s.state.CountUsers(func(u *api.User) bool { return u.Role == string(auth.RoleAdmin) })
}

func (s *Server) handlePutUser(w http.ResponseWriter, r *http.Request) {
	var u api.User
	if status, e := s.decodeJSON(w, r, &u); e != nil {
		writeError(w, status, e)
		return
	}
	name := r.PathValue("name")
	if u.Name == "" {
		u.Name = name
	}
	if u.Name != name {
		writeError(w, http.StatusBadRequest, invalid("name", "body names user %q but the URL names %q", u.Name, name))
		return
	}
	if u.Role == "" {
		u.Role = string(auth.RoleMember)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.validName("name", u.Name); e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	if _, err := auth.ParseRole(u.Role); err != nil {
		writeError(w, http.StatusBadRequest, invalid("role", "%v", err))
		return
	}
	if u.UnixUser != "" && !unixNameRE().MatchString(u.UnixUser) {
		writeError(w, http.StatusBadRequest, invalid("unix_user", "%q is not a Unix account name: lower-case letters, digits, _ . - and at most 32 characters", u.UnixUser))
		return
	}
	if e := validateNotify("notify", u.Notify, notifySettings(s.state).URLPrefixes); e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	now := s.cfg.Clock.Now()
	old, existed := s.state.User(name)
	if existed && old.Role == string(auth.RoleAdmin) && u.Role != string(auth.RoleAdmin) && s.admins() == 1 {
		writeError(w, http.StatusConflict, &api.Error{Code: api.CodeConflict, Field: "role", Message: fmt.Sprintf("%s is the last admin; make another user admin first", name)})
		return
	}
	u.Created, u.Teams = now, nil
	var before any
	if existed {
		u.Created = old.Created
		before = old
	}
	ev := withChange(audit(r, now, api.EventUser, "set user %s (role %s)", name, u.Role), before, u)
	s.adminCommit(w, r, &store.Batch{Users: []api.User{u}, Events: []api.Event{ev}}, http.StatusOK, u)
}

func (s *Server) handleDeleteUser(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.state.User(name)
	switch {
	case !ok:
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Field: "name", Message: "no user " + name})
		return
	case u.Role == string(auth.RoleAdmin) && s.admins() == 1:
		writeError(w, http.StatusConflict, &api.Error{Code: api.CodeConflict, Field: "name", Message: fmt.Sprintf("%s is the last admin and cannot be removed; make another user admin first", name)})
		return
	}
	now := s.cfg.Clock.Now()
	b := &store.Batch{DeleteUsers: []string{name}}
	// Their tokens go with them: a user added again later must not find old tokens working.
	for _, t := range s.state.Tokens(func(t *store.TokenRecord) bool { return t.User == name && t.Revoked == nil }) {
		t.Revoked = &now
		b.Tokens = append(b.Tokens, t)
	}
	b.Events = append(b.Events, withChange(audit(r, now, api.EventUser, "removed user %s and revoked %d tokens", name, len(b.Tokens)), u, nil))
	s.adminCommit(w, r, b, http.StatusNoContent, nil)
}

func (s *Server) tokenInfo(t store.TokenRecord) api.TokenInfo {
	info := t.TokenInfo
	info.LastUsed = s.lastUsed.get(t.ID)
	return info
}

func (s *Server) handleTokens(w http.ResponseWriter, r *http.Request) {
	id := caller(r)
	want := r.URL.Query().Get("user")
	if id.Role != auth.RoleAdmin {
		if want != "" && want != id.User {
			writeError(w, http.StatusForbidden, forbidden(id, string(ruleAdmin), "only admins list other users' tokens"))
			return
		}
		want = id.User
	}
	s.mu.Lock()
	recs := s.state.Tokens(func(t *store.TokenRecord) bool { return want == "" || t.User == want })
	s.mu.Unlock()
	list := api.TokenList{Tokens: []api.TokenInfo{}}
	for _, t := range recs {
		list.Tokens = append(list.Tokens, s.tokenInfo(t))
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) handleCreateToken(w http.ResponseWriter, r *http.Request) {
	var req api.TokenRequest
	if status, e := s.decodeJSON(w, r, &req); e != nil {
		writeError(w, status, e)
		return
	}
	id := caller(r)
	if req.User == "" {
		req.User = id.User
	}
	switch {
	case req.User != id.User && id.Role != auth.RoleAdmin:
		writeError(w, http.StatusForbidden, forbidden(id, string(ruleAdmin), "only admins create tokens for other users"))
		return
	case req.TTLSeconds < 0 || time.Duration(req.TTLSeconds)*time.Second > maxTokenTTL:
		writeError(w, http.StatusBadRequest, invalid("ttl_s", "must be 0 (no expiry) or up to %d seconds (10 years)", int64(maxTokenTTL/time.Second)))
		return
	case len(req.Description) > maxDescription || strings.ContainsFunc(req.Description, isControl):
		writeError(w, http.StatusBadRequest, invalid("description", "must be at most %d printable characters", maxDescription))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.state.User(req.User); !ok {
		writeError(w, http.StatusBadRequest, invalid("user", "no rota user is named %s; an admin adds one with rota admin user add %s", req.User, req.User))
		return
	}
	now := s.cfg.Clock.Now()
	forget, e := s.tokenRoom(req.User, now)
	if e != nil {
		writeError(w, http.StatusConflict, e)
		return
	}
	tok := auth.NewToken()
	info := api.TokenInfo{ID: tok.ID, User: req.User, Description: req.Description, Created: now}
	if req.TTLSeconds > 0 {
		exp := now.Add(time.Duration(req.TTLSeconds) * time.Second)
		info.Expires = &exp
	}
	ev := audit(r, now, api.EventToken, "created token %s for %s", tok.ID, req.User)
	s.adminCommit(w, r, &store.Batch{Tokens: []store.TokenRecord{{TokenInfo: info, Hash: tok.Hash}}, DeleteTokens: forget, Events: []api.Event{ev}},
		http.StatusCreated, api.NewToken{TokenInfo: info, Token: tok.Plain})
}

// A user's API tokens are bounded, so that no caller can grow the server's memory and
// store without end by creating them (a web UI login creates one too): at most
// maxTokensPerUser on record, live or not. A token revoked or expired tokenForgetAfter
// ago is forgotten when its user's next token is created; the audit trail keeps its
// creation and revocation.
var maxTokensPerUser = 1000

const tokenForgetAfter = 24 * time.Hour

// tokenRoom returns the IDs of user's tokens to forget in the batch that creates a new
// one, or the refusal when, those forgotten, the user has as many as they may. Callers
// hold s.mu.
func (s *Server) tokenRoom(user string, now time.Time) ([]string, *api.Error) {
	toks := s.state.TokensOf(user)
	var forget []string
	for _, t := range toks {
		if dead, ok := tokenDeadSince(t.TokenInfo, now); ok && now.Sub(dead) >= tokenForgetAfter {
			forget = append(forget, t.ID)
		}
	}
	if kept := len(toks) - len(forget); kept >= maxTokensPerUser {
		return nil, &api.Error{Code: api.CodeConflict, Field: "user", Message: fmt.Sprintf(
			"%s has %d API tokens, the most a user may have (live ones, and those revoked or expired within the last day); revoke the ones no longer used (rota admin token revoke ID): a token is forgotten a day after it is revoked or expires",
			user, kept)}
	}
	slices.Sort(forget)
	return forget, nil
}

// tokenDeadSince returns when t stopped working, if it has by now: revoked, or expired.
func tokenDeadSince(t api.TokenInfo, now time.Time) (time.Time, bool) {
	switch {
	case t.Revoked != nil && (t.Expires == nil || t.Revoked.Before(*t.Expires)):
		return *t.Revoked, true
	case t.Expires != nil && !t.Expires.After(now):
		return *t.Expires, true
	}
	return time.Time{}, false
}

func (s *Server) handleRevokeToken(w http.ResponseWriter, r *http.Request) {
	id := caller(r)
	tid := r.PathValue("id")
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.state.Token(tid)
	switch {
	case !ok:
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Field: "id", Message: "no token " + tid})
		return
	case t.User != id.User && id.Role != auth.RoleAdmin:
		writeError(w, http.StatusForbidden, forbidden(id, string(ruleAdmin), "token %s belongs to %s; only admins revoke other users' tokens", tid, t.User))
		return
	case t.Revoked != nil:
		w.WriteHeader(http.StatusNoContent)
		return
	}
	now := s.cfg.Clock.Now()
	t.Revoked = &now
	ev := audit(r, now, api.EventToken, "revoked token %s of %s", tid, t.User)
	s.adminCommit(w, r, &store.Batch{Tokens: []store.TokenRecord{t}, Events: []api.Event{ev}}, http.StatusNoContent, nil)
}

func (s *Server) handleJoinTokens(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	recs := s.state.JoinTokens()
	s.mu.Unlock()
	out := api.JoinTokenList{JoinTokens: []api.JoinTokenInfo{}}
	for _, j := range recs {
		out.JoinTokens = append(out.JoinTokens, j.JoinTokenInfo)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) handleCreateJoinToken(w http.ResponseWriter, r *http.Request) {
	var req api.JoinTokenRequest
	if status, e := s.decodeJSON(w, r, &req); e != nil {
		writeError(w, status, e)
		return
	}
	ttl := time.Duration(req.TTLSeconds) * time.Second
	switch {
	case req.TTLSeconds == 0:
		ttl = defaultJoinTTL
	case req.TTLSeconds < 0 || ttl > maxJoinTTL:
		writeError(w, http.StatusBadRequest, invalid("ttl_s", "must be between 1 and %d seconds (7 days); 0 means an hour", int64(maxJoinTTL/time.Second)))
		return
	}
	if req.Uses == 0 {
		req.Uses = 1
	}
	if req.Uses < 0 || req.Uses > maxJoinUses {
		writeError(w, http.StatusBadRequest, invalid("uses", "must be between 1 and %d", maxJoinUses))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.Node != "" {
		if e := s.validName("node", req.Node); e != nil {
			writeError(w, http.StatusBadRequest, e)
			return
		}
	}
	tok, err := auth.NewJoinToken(s.clusterID, s.ca.Fingerprint())
	if err != nil {
		writeError(w, http.StatusInternalServerError, &api.Error{Code: api.CodeInternal, Message: "make a join token: " + err.Error()})
		return
	}
	now := s.cfg.Clock.Now()
	info := api.JoinTokenInfo{ID: tok.ID, Created: now, Expires: now.Add(ttl), Uses: req.Uses, Node: req.Node}
	ev := withChange(audit(r, now, api.EventJoin, "created join token %s (%d uses, expires %s)", tok.ID, req.Uses, info.Expires.Format(time.RFC3339)), nil, info)
	name := "--name NODE"
	if req.Node != "" {
		name = "--name " + req.Node
	}
	server := s.cfg.AdvertiseURL
	if server == "" {
		server = "https://" + r.Host
	}
	command := fmt.Sprintf("rota agent --server %s %s --join %s", server, name, tok.String())
	s.adminCommit(w, r, &store.Batch{JoinTokens: []store.JoinTokenRecord{{JoinTokenInfo: info, Hash: tok.SecretHash()}}, Events: []api.Event{ev}},
		http.StatusCreated, api.NewJoinToken{JoinTokenInfo: info, Token: tok.String(), Command: command})
}

func (s *Server) handleRevokeJoinToken(w http.ResponseWriter, r *http.Request) {
	jid := r.PathValue("id")
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.state.JoinToken(jid)
	if !ok {
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Field: "id", Message: "no join token " + jid})
		return
	}
	now := s.cfg.Clock.Now()
	if j.Expires.After(now) {
		j.Expires = now
	}
	ev := audit(r, now, api.EventJoin, "revoked join token %s", jid)
	s.adminCommit(w, r, &store.Batch{JoinTokens: []store.JoinTokenRecord{j}, Events: []api.Event{ev}}, http.StatusNoContent, nil)
}

// handleJoin gives a node its certificate in exchange for a join token: the one route an
// agent calls before it has credentials. The token is its credential, once.
func (s *Server) handleJoin(w http.ResponseWriter, r *http.Request) {
	var req api.JoinRequest
	if status, e := s.decodeJSON(w, r, &req); e != nil {
		writeError(w, status, e)
		return
	}
	tok, err := auth.ParseJoinToken(req.Token)
	if err != nil {
		writeError(w, http.StatusUnauthorized, unauthorized("join token: %v", err))
		return
	}
	if tok.ClusterID != s.clusterID {
		writeError(w, http.StatusUnauthorized, unauthorized("the join token is for cluster %s; this server runs cluster %s", tok.ClusterID, s.clusterID))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Clock.Now()
	rec, ok := s.state.JoinToken(tok.ID)
	switch {
	case !ok || !tok.SecretMatches(rec.Hash):
		writeError(w, http.StatusUnauthorized, unauthorized("the join token is not valid on this server"))
		return
	case !now.Before(rec.Expires):
		writeError(w, http.StatusUnauthorized, unauthorized("join token %s expired at %s; an admin makes a new one with rota admin join-token", rec.ID, rec.Expires.Format(time.RFC3339)))
		return
	case rec.Used >= rec.Uses:
		writeError(w, http.StatusUnauthorized, unauthorized("join token %s has been used already (%d of %d uses)", rec.ID, rec.Used, rec.Uses))
		return
	case rec.Node != "" && rec.Node != req.Node:
		writeError(w, http.StatusForbidden, &api.Error{Code: api.CodeForbidden, Field: "node", Rule: "join-token-node",
			Message: fmt.Sprintf("join token %s is for node %s only, not %s", rec.ID, rec.Node, req.Node)})
		return
	}
	if e := s.validName("node", req.Node); e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	if e := s.nodeTaken(req.Node, "", now); e != nil {
		writeError(w, http.StatusConflict, e)
		return
	}
	certPEM, serial, notAfter, err := s.ca.IssueNodeCert([]byte(req.CSR), req.Node, certValidity)
	if err != nil {
		writeError(w, http.StatusBadRequest, invalid("csr", "%v", err))
		return
	}
	rec.Used++
	ev := api.Event{Time: now, Actor: "node:" + req.Node, Kind: api.EventJoin, Node: req.Node, Source: r.RemoteAddr,
		Message: fmt.Sprintf("node %s joined with join token %s (host %s); certificate %s valid until %s", req.Node, rec.ID, printable(req.Hostname), serial, notAfter.Format(time.RFC3339))}
	b := &store.Batch{JoinTokens: []store.JoinTokenRecord{rec}, Events: []api.Event{ev},
		NodeCerts: []store.NodeCert{{Node: req.Node, Serial: serial, Issued: now, NotAfter: notAfter, JoinToken: rec.ID}}}
	if err := s.commit(r.Context(), b); err != nil {
		commitError(w, "the join could not be stored", err)
		return
	}
	writeJSON(w, http.StatusOK, api.JoinResponse{ClusterID: s.clusterID, Certificate: string(certPEM), CA: string(s.ca.CertPEM()), NotAfter: notAfter})
}

// handleRenew replaces a node's certificate before it expires.
func (s *Server) handleRenew(w http.ResponseWriter, r *http.Request) {
	id := caller(r)
	if id.Kind != auth.KindNode {
		writeError(w, http.StatusBadRequest, invalid("", "only an agent with a node certificate renews it"))
		return
	}
	var req api.RenewRequest
	if status, e := s.decodeJSON(w, r, &req); e != nil {
		writeError(w, status, e)
		return
	}
	certPEM, serial, notAfter, err := s.ca.IssueNodeCert([]byte(req.CSR), id.Node, certValidity)
	if err != nil {
		writeError(w, http.StatusBadRequest, invalid("csr", "%v", err))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.cfg.Clock.Now()
	ev := api.Event{Time: now, Actor: id.User, Kind: api.EventNode, Node: id.Node, Source: id.Source,
		Message: fmt.Sprintf("node %s renewed its certificate: serial %s valid until %s", id.Node, serial, notAfter.Format(time.RFC3339))}
	b := &store.Batch{Events: []api.Event{ev}, NodeCerts: []store.NodeCert{{Node: id.Node, Serial: serial, Issued: now, NotAfter: notAfter}}}
	if err := s.commit(r.Context(), b); err != nil {
		commitError(w, "the renewal could not be stored", err)
		return
	}
	writeJSON(w, http.StatusOK, api.JoinResponse{ClusterID: s.clusterID, Certificate: string(certPEM), CA: string(s.ca.CertPEM()), NotAfter: notAfter})
}

// nodeTaken refuses a second agent for a node whose agent is live: heard from within
// NotReadyAfter, or longer where the heartbeat interval is (silenceLimits). instance is the claimant's agent instance ("" for a join). A node that is
// not live may be taken over: its old agent is gone, or will be refused when it returns.
func (s *Server) nodeTaken(name, instance string, now time.Time) *api.Error {
	n, ok := s.state.Node(name)
	if !ok || n.Agent == nil || n.Agent.Instance == instance || n.State == api.NodeLost {
		return nil
	}
	silent := now.Sub(n.LastHeartbeat)
	notReady, _ := s.silenceLimits(name)
	if silent >= notReady {
		return nil
	}
	return &api.Error{Code: api.CodeConflict, Field: "node", Message: fmt.Sprintf(
		"node %s is already served by a live agent (instance %s, pid %d, from %s, host %s, heard %s ago); stop that agent, give this one another --name, or, if that machine is gone, wait %s for it to go quiet",
		name, n.Agent.Instance, n.Agent.PID, n.Agent.Address, orDash(n.Hostname), silent.Round(time.Millisecond), (notReady - silent).Round(time.Second))}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// handleDeleteNode forgets a node, its inventory, its telemetry and its certificate. A node
// that runs or is assigned work is refused (409) unless force=true: then the ranks there end
// as a lost node's do (node_lost, requeued when the job may be, else failed), in the same
// commit that removes the node. An agent that reports again afterwards registers as a new
// node, syncing until it has stopped what the server no longer lists.
func (s *Server) handleDeleteNode(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	force, e := queryBool(r.URL.Query(), "force")
	if e != nil {
		writeError(w, http.StatusBadRequest, e)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.state.Node(name)
	if !ok {
		writeError(w, http.StatusNotFound, &api.Error{Code: api.CodeNotFound, Field: "name", Message: "no node " + name})
		return
	}
	now := s.cfg.Clock.Now()
	b := &store.Batch{DeleteNodes: []string{name}}
	var ended []string
	if u := s.state.NodeUsage(name); u != nil {
		if !force {
			writeError(w, http.StatusConflict, &api.Error{Code: api.CodeConflict, Field: "name", Message: fmt.Sprintf(
				"node %s still runs or is assigned jobs %v; drain it and wait for them to end, or remove it with force to requeue them as if the node were lost", name, u.Jobs)})
			return
		}
		ended = s.endRanksOn(b, name, now)
	}
	msg := fmt.Sprintf("removed node %s (was %s); its certificate no longer works", name, n.State)
	if len(ended) > 0 {
		msg += "; forced: ended its ranks of jobs " + strings.Join(ended, ", ")
	}
	ev := audit(r, now, api.EventNode, "%s", msg)
	ev.Node = name
	b.Events = append(b.Events, ev)
	if err := s.commit(r.Context(), b); err != nil {
		commitError(w, "the change could not be stored", err)
		return
	}
	s.pruneTelemetry(now)
	delete(s.told, name)
	delete(s.clocks, name)
	s.wake()
	w.WriteHeader(http.StatusNoContent)
}

// endRanksOn ends, in b, every rank of an active attempt placed on node, as checkNodes ends
// those of a lost node, and returns the IDs of the jobs it touched. Callers hold s.mu.
func (s *Server) endRanksOn(b *store.Batch, node string, now time.Time) []string {
	var ids []string
	for _, id := range s.state.ActiveIDs() {
		job, _ := s.state.Job(id)
		a, ok := s.state.CurrentAttempt(id)
		if !ok || !placedOn(a, node) {
			continue
		}
		a.Placements = slices.Clone(a.Placements)
		var evs []api.Event
		changed := false
		for rank := range a.Placements {
			p := &a.Placements[rank]
			if p.Node != node || p.State.Terminal() {
				continue
			}
			end := now
			p.State, p.Reason, p.EndTime = api.StateFailed, api.ReasonNodeLost, &end
			p.Message = "node " + node + " was removed by an administrator while the rank ran there"
			s.endRankUsage(p, rankKey{id, a.N, rank}, 0, now)
			changed = true
			evs = append(evs, s.rankEnded(&job, &a, rank, now)...)
			if job.State.Terminal() || job.State == api.StatePending {
				break
			}
		}
		if changed {
			b.Jobs, b.Attempts, b.Events = append(b.Jobs, job), append(b.Attempts, a), append(b.Events, evs...)
			ids = append(ids, strconv.FormatInt(id, 10))
		}
	}
	return ids
}

// queryBool reads a true/false query parameter; absent is false.
func queryBool(q url.Values, name string) (bool, *api.Error) {
	switch q.Get(name) {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	}
	return false, invalid(name, "%q is not true or false", truncateName(q.Get(name)))
}

// auditKinds are the kinds `rota admin audit` lists when no kind is asked for: changes made
// through the API, not the state changes of jobs.
var auditKinds = []string{api.EventSubmit, api.EventCancel, api.EventHold, api.EventRelease, api.EventQuota, api.EventQueue,
	api.EventTeam, api.EventUser, api.EventToken, api.EventJoin, api.EventNode, api.EventDrain, api.EventReservation,
	api.EventConfig, api.EventBudget, api.EventAdmin}

const (
	defaultAuditPage = 1000
	maxAuditPage     = 10_000
	// maxAuditActor bounds the actor and kind asked for (api/openapi.yaml: maxLength).
	maxAuditActor = 256
)

func (s *Server) handleAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.EventFilter{}
	var e *api.Error
	for _, read := range []func() *api.Error{
		func() (e *api.Error) { f.Since, e = queryTime(q, "since"); return },
		func() (e *api.Error) { f.Until, e = queryTime(q, "until"); return },
		func() (e *api.Error) { f.Actor, e = queryString(q, "actor", maxAuditActor); return },
		func() (e *api.Error) { f.Kind, e = queryString(q, "kind", maxAuditActor); return },
		func() *api.Error {
			n, e := queryInt(q, "limit", 1, maxAuditPage, defaultAuditPage)
			f.Limit = int(n)
			return e
		},
		func() (e *api.Error) { f.AfterID, e = queryInt(q, "after", 0, math.MaxInt64, 0); return },
	} {
		if e = read(); e != nil {
			writeError(w, http.StatusBadRequest, e)
			return
		}
	}
	if f.Kind != "" && !slices.Contains(api.EventKinds(), f.Kind) {
		writeError(w, http.StatusBadRequest, invalid("kind", "unknown kind %q; kinds are %s", truncateName(f.Kind), strings.Join(api.EventKinds(), ", ")))
		return
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		writeError(w, http.StatusBadRequest, invalid("until", "must be after since"))
		return
	}
	// Without a kind, the trail's changes are read a page at a time and the job
	// transitions between them skipped, until the page is full or the trail ends.
	list := api.EventList{Events: []api.Event{}}
	limit := f.Limit
	for {
		evs, err := s.store.Events(r.Context(), f)
		if err != nil {
			writeError(w, http.StatusInternalServerError, &api.Error{Code: api.CodeInternal, Message: "reading the audit trail: " + err.Error()})
			return
		}
		for _, ev := range evs {
			if f.Kind != "" || slices.Contains(auditKinds, ev.Kind) {
				list.Events = append(list.Events, ev)
			}
			if len(list.Events) == limit {
				list.Next = strconv.FormatInt(ev.ID, 10)
				writeJSON(w, http.StatusOK, list)
				return
			}
		}
		if len(evs) < f.Limit {
			break
		}
		f.AfterID = evs[len(evs)-1].ID
	}
	writeJSON(w, http.StatusOK, list)
}

// isControl reports a control character, C0 or C1: either can drive a terminal (U+009B
// starts an escape sequence on many).
func isControl(r rune) bool { return unicode.IsControl(r) }

// printable drops control characters, so a value a client chose cannot break a log line
// or a terminal.
func printable(s string) string {
	s = strings.Map(func(r rune) rune {
		if isControl(r) {
			return -1
		}
		return r
	}, s)
	if len(s) > maxDescription {
		s = s[:maxDescription]
	}
	return s
}
