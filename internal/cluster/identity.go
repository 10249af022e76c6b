package cluster

import (
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/batch"
)

// Names of the settings the store keeps.
const (
	SettingCluster   = "cluster"
	SettingLimits    = "limits"
	SettingExecution = "execution"
	SettingPools     = "pools"
)

// identity is the part of the state that says who may do what: users, API tokens, join
// tokens, the certificate each node may use, the settings, and recent idempotency keys.
// It changes through Apply like everything else, so a revoked token stops working the
// moment its revocation is durable.
type identity struct {
	users    map[string]api.User
	tokens   map[string]batch.TokenRecord // by hash
	tokenIDs map[string]string            // ID -> hash
	// userTokens holds each user's token IDs, for the server's bound on them.
	userTokens map[string]map[string]bool
	joins      map[string]batch.JoinTokenRecord
	certs      map[string]batch.NodeCert
	settings   map[string]json.RawMessage
	idempotent map[idemKey]batch.IdempotencyRecord
	// oldestIdem is when the oldest of idempotent was created (zero: none), kept as
	// records come and found again after a prune. Every submit with a key asks for it,
	// and there may be a day's keys: walking them all at every submit was a sixteenth of
	// the server's CPU while submits flowed.
	oldestIdem time.Time
	// limits and execution are the settings of those names, decoded once as they are
	// applied (they are read on every request and every heartbeat answer).
	limits    api.Limits
	execution api.Execution
	// pools are the pool settings by name.
	pools map[string]api.Pool
	// requests are the request settings decoded (see requests.go), by ID; open holds the
	// IDs of those pending or approved, which the scheduling loop checks every cycle.
	requests map[int64]api.Request
	open     map[int64]bool
}

type idemKey struct{ user, key string }

func newIdentity() identity {
	return identity{
		users:      map[string]api.User{},
		tokens:     map[string]batch.TokenRecord{},
		tokenIDs:   map[string]string{},
		userTokens: map[string]map[string]bool{},
		joins:      map[string]batch.JoinTokenRecord{},
		certs:      map[string]batch.NodeCert{},
		settings:   map[string]json.RawMessage{},
		idempotent: map[idemKey]batch.IdempotencyRecord{},
		limits:     api.DefaultLimits(),
		requests:   map[int64]api.Request{},
		open:       map[int64]bool{},
	}
}

func (s *State) applyIdentity(b *batch.Batch) {
	id := &s.id
	for _, st := range b.Settings {
		id.settings[st.Name] = st.Data
		// Settings are validated before they are stored; one that does not decode
		// leaves the defaults.
		switch st.Name {
		case SettingLimits:
			var l api.Limits
			_ = json.Unmarshal(st.Data, &l)
			id.limits = l.OrDefaults()
		case SettingExecution:
			id.execution = api.Execution{}
			_ = json.Unmarshal(st.Data, &id.execution)
		case SettingPools:
			var pools []api.Pool
			_ = json.Unmarshal(st.Data, &pools)
			id.pools = map[string]api.Pool{}
			for _, p := range pools {
				id.pools[p.Name] = p
			}
		default:
			id.applyRequest(st)
		}
	}
	for _, u := range b.Users {
		u.Teams = nil
		id.users[u.Name] = u
	}
	for _, name := range b.DeleteUsers {
		delete(id.users, name)
	}
	for _, t := range b.Tokens {
		if old, ok := id.tokenIDs[t.ID]; ok && old != t.Hash {
			delete(id.tokens, old)
		}
		id.tokens[t.Hash] = t
		id.tokenIDs[t.ID] = t.Hash
		if id.userTokens[t.User] == nil {
			id.userTokens[t.User] = map[string]bool{}
		}
		id.userTokens[t.User][t.ID] = true
	}
	for _, tid := range b.DeleteTokens {
		hash, ok := id.tokenIDs[tid]
		if !ok {
			continue
		}
		user := id.tokens[hash].User
		delete(id.userTokens[user], tid)
		if len(id.userTokens[user]) == 0 {
			delete(id.userTokens, user)
		}
		delete(id.tokens, hash)
		delete(id.tokenIDs, tid)
	}
	for _, j := range b.JoinTokens {
		id.joins[j.ID] = j
	}
	for _, c := range b.NodeCerts {
		id.certs[c.Node] = c
	}
	for _, name := range b.DeleteNodes {
		delete(id.certs, name)
		if n, ok := s.nodes[name]; ok {
			s.indexNode(n, false)
			s.nodeNames = nil
		}
		delete(s.nodes, name)
	}
	for _, r := range b.Idempotency {
		id.idempotent[idemKey{r.User, r.Key}] = r
		if id.oldestIdem.IsZero() || r.Created.Before(id.oldestIdem) {
			id.oldestIdem = r.Created
		}
	}
	if !b.PruneIdempotency.IsZero() {
		id.oldestIdem = time.Time{}
		for k, r := range id.idempotent {
			switch {
			case r.Created.Before(b.PruneIdempotency):
				delete(id.idempotent, k)
			case id.oldestIdem.IsZero() || r.Created.Before(id.oldestIdem):
				id.oldestIdem = r.Created
			}
		}
	}
}

// User returns the named user.
func (s *State) User(name string) (api.User, bool) {
	u, ok := s.id.users[name]
	return u, ok
}

// Users returns every user, ordered by name, with Teams filled in from team membership.
func (s *State) Users() []api.User {
	out := make([]api.User, 0, len(s.id.users))
	for _, u := range s.id.users {
		u.Teams = s.TeamsOf(u.Name)
		out = append(out, u)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// CountUsers counts the users keep accepts (all of them for a nil keep).
func (s *State) CountUsers(keep func(*api.User) bool) int {
	n := 0
	for _, u := range s.id.users {
		if keep == nil || keep(&u) {
			n++
		}
	}
	return n
}

// TeamsOf returns the teams that list user as a member, ordered by name.
func (s *State) TeamsOf(user string) []string {
	var out []string
	for _, t := range s.teams {
		if slices.Contains(t.Members, user) {
			out = append(out, t.Name)
		}
	}
	slices.Sort(out)
	return out
}

// TokenByHash returns the token record with the given hash.
func (s *State) TokenByHash(hash string) (batch.TokenRecord, bool) {
	t, ok := s.id.tokens[hash]
	return t, ok
}

// Token returns the token record with the given ID.
func (s *State) Token(id string) (batch.TokenRecord, bool) {
	h, ok := s.id.tokenIDs[id]
	if !ok {
		return batch.TokenRecord{}, false
	}
	return s.id.tokens[h], true
}

// TokensOf returns user's token records, live or not, in no order.
func (s *State) TokensOf(user string) []batch.TokenRecord {
	out := make([]batch.TokenRecord, 0, len(s.id.userTokens[user]))
	for tid := range s.id.userTokens[user] {
		out = append(out, s.id.tokens[s.id.tokenIDs[tid]])
	}
	return out
}

// Tokens returns the token records accepted by keep, ordered by ID.
func (s *State) Tokens(keep func(*batch.TokenRecord) bool) []batch.TokenRecord {
	var out []batch.TokenRecord
	for _, t := range s.id.tokens {
		if keep == nil || keep(&t) {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out
}

// JoinToken returns the join token record with the given ID.
func (s *State) JoinToken(id string) (batch.JoinTokenRecord, bool) {
	j, ok := s.id.joins[id]
	return j, ok
}

// JoinTokens returns every join token record, ordered by ID.
func (s *State) JoinTokens() []batch.JoinTokenRecord {
	out := make([]batch.JoinTokenRecord, 0, len(s.id.joins))
	for _, j := range s.id.joins {
		out = append(out, j)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out
}

// NodeCert returns the certificate the named node may use.
func (s *State) NodeCert(node string) (batch.NodeCert, bool) {
	c, ok := s.id.certs[node]
	return c, ok
}

// NodeCertSerials returns the serial of each node's certificate, by node, in a map of
// the caller's.
func (s *State) NodeCertSerials() map[string]string {
	out := make(map[string]string, len(s.id.certs))
	for node, c := range s.id.certs {
		out[node] = c.Serial
	}
	return out
}

// Setting returns a named setting as stored.
func (s *State) Setting(name string) (json.RawMessage, bool) {
	d, ok := s.id.settings[name]
	return d, ok
}

// Limits returns the limits in force: the stored ones, with defaults for what they leave
// zero.
func (s *State) Limits() api.Limits { return s.id.limits }

// Execution returns the execution settings in force.
func (s *State) Execution() api.Execution { return s.id.execution }

// Pools returns the pool settings by name; a pool it does not name has none (no sharing,
// open to every queue). The map is the state's: read it only.
func (s *State) Pools() map[string]api.Pool { return s.id.pools }

// PoolList returns the pool settings in name order.
func (s *State) PoolList() []api.Pool {
	out := make([]api.Pool, 0, len(s.id.pools))
	for _, p := range s.id.pools {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b api.Pool) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Idempotency returns what a submit with the user's key created, if it is remembered.
func (s *State) Idempotency(user, key string) (batch.IdempotencyRecord, bool) {
	r, ok := s.id.idempotent[idemKey{user, key}]
	return r, ok
}

// OldestIdempotency returns when the oldest remembered key was created (zero: none).
func (s *State) OldestIdempotency() time.Time { return s.id.oldestIdem }
