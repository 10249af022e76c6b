package server

import (
	"sync"
	"sync/atomic"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/store"
)

// Every agent request reads two things before its handler runs: the serial of its node's
// certificate, to authenticate it, and the body-size limit, to read its body; every user's
// read also reads the read budget's limits (limits.go). Each read
// took the server's lock, so a heartbeat took it three times; at 10,000 nodes the waits
// for those two short reads were most of the time heartbeats spent waiting for the lock
// (a block profile of the scale suite), and every wait a hand-off between goroutines.
// authView keeps both beside the state, readable without the server's lock, and
// follows the state wherever it changes (applyState, load).
//
// A user's request read its token and its user under the server's lock too: two map
// reads, but each a place in the line for the lock, behind cycles and commits. With 64
// clients submitting at 10,000 nodes, the mutex profile put 71% of the waits for the lock
// on those reads. And a caller with no valid token could make the server take its lock
// for each guess. So the view holds the tokens and users as well.
type authView struct {
	mu      sync.RWMutex
	serials map[string]string // node -> the serial of its current certificate
	limits  atomic.Pointer[api.Limits]
	ids     atomic.Pointer[identities]
}

// identities is what authenticating a token or a Unix account reads: every token by the
// hash of its secret, and every user by name. Tokens and users change rarely (a user or
// a token made, revoked or deleted), so a change replaces the whole of it, and readers
// take no lock at all.
type identities struct {
	tokens map[string]store.TokenRecord
	users  map[string]api.User
}

// token returns the token whose secret hashes to hash, and its user.
func (v *authView) token(hash string) (rec store.TokenRecord, found bool, u api.User, hasUser bool) {
	ids := v.ids.Load()
	if ids == nil {
		return rec, false, u, false
	}
	if rec, found = ids.tokens[hash]; found {
		u, hasUser = ids.users[rec.User]
	}
	return rec, found, u, hasUser
}

// user returns the user with the given name.
func (v *authView) user(name string) (api.User, bool) {
	ids := v.ids.Load()
	if ids == nil {
		return api.User{}, false
	}
	u, ok := ids.users[name]
	return u, ok
}

// setIdentities takes the tokens and users from state. Callers hold s.mu.
func (v *authView) setIdentities(state *cluster.State) {
	ids := &identities{tokens: map[string]store.TokenRecord{}, users: map[string]api.User{}}
	for _, t := range state.Tokens(nil) {
		ids.tokens[t.Hash] = t
	}
	for _, u := range state.Users() {
		u.Teams = nil // as State.User has it: membership is the teams'
		ids.users[u.Name] = u
	}
	v.ids.Store(ids)
}

// maxBody is the limit in force on a request's body.
func (v *authView) maxBody() int64 { return v.limits.Load().MaxBodyBytes }

// serial returns the serial of node's current certificate.
func (v *authView) serial(node string) (string, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	serial, ok := v.serials[node]
	return serial, ok
}

// reset makes the view that of state, read whole. Callers hold s.mu.
func (v *authView) reset(state *cluster.State) {
	serials := state.NodeCertSerials()
	v.mu.Lock()
	v.serials = serials
	v.mu.Unlock()
	v.setLimits(state)
	v.setIdentities(state)
}

// follow brings the view up to date with batch b, which state has just applied. Callers
// hold s.mu.
func (v *authView) follow(state *cluster.State, b *store.Batch) {
	if len(b.NodeCerts)+len(b.DeleteNodes) > 0 {
		v.mu.Lock()
		for _, name := range b.DeleteNodes {
			delete(v.serials, name)
		}
		for _, c := range b.NodeCerts {
			if cur, ok := state.NodeCert(c.Node); ok {
				v.serials[c.Node] = cur.Serial
			}
		}
		v.mu.Unlock()
	}
	if len(b.Settings) > 0 {
		v.setLimits(state)
	}
	if len(b.Tokens)+len(b.DeleteTokens)+len(b.Users)+len(b.DeleteUsers) > 0 {
		v.setIdentities(state)
	}
}

// setLimits takes the limits in force from state. Callers hold s.mu.
func (v *authView) setLimits(state *cluster.State) {
	l := state.Limits()
	v.limits.Store(&l)
}

// applyState applies a batch the store holds (or, for agent reports, will hold: see
// writequeue.go) to memory: the state and what follows it. Callers hold s.mu.
func (s *Server) applyState(b *store.Batch) {
	s.noteBatch(b)
	s.state.Apply(b)
	s.followBatch()
	s.view.follow(s.state, b)
	if len(b.DeleteTokens) > 0 {
		s.lastUsed.forget(b.DeleteTokens)
	}
}
