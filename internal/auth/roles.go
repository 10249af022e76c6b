package auth

import (
	"context"
	"fmt"
	"strings"
)

// Role is what a user may do. Each role may do everything the roles below it may.
type Role string

// The roles, from the most to the least powerful. What each may do is the server's
// policy; this package only orders them.
const (
	RoleAdmin    Role = "admin"
	RoleOperator Role = "operator"
	RoleMember   Role = "member"
	RoleViewer   Role = "viewer"
)

// roles holds every role from the most to the least powerful; a role's rank is its
// distance from the end, so an unknown role ranks below them all.
var roles = []Role{RoleAdmin, RoleOperator, RoleMember, RoleViewer}

// Roles lists the roles from the most to the least powerful.
func Roles() []Role { return append([]Role(nil), roles...) }

// ParseRole returns the role s names.
func ParseRole(s string) (Role, error) {
	for _, r := range roles {
		if string(r) == s {
			return r, nil
		}
	}
	names := make([]string, len(roles))
	for i, r := range roles {
		names[i] = string(r)
	}
	return "", fmt.Errorf("unknown role %q: use one of %s", s, strings.Join(names, ", "))
}

// AtLeast reports whether r may do what other may. It fails closed: an unknown role on
// either side is never at least anything.
func (r Role) AtLeast(other Role) bool {
	rr, or := r.rank(), other.rank()
	return rr > 0 && or > 0 && rr >= or
}

func (r Role) rank() int {
	for i, known := range roles {
		if r == known {
			return len(roles) - i
		}
	}
	return 0
}

// How a caller proved who it is: the values of Identity.Kind.
const (
	KindToken = "token" // an API token in "Authorization: Bearer"
	KindUnix  = "unix"  // the Unix account of a caller on the server's local socket
	KindNode  = "node"  // an agent's client certificate
	KindLocal = "local" // the server itself, e.g. the agent of `rota up` in the same process
)

// Identity is who made a request, as the server established it.
type Identity struct {
	User string
	Role Role
	// Kind is one of the Kind* constants.
	Kind string
	// Node is the node name of an agent (Kind "node").
	Node string
	// TokenID is the ID of the API token used (Kind "token").
	TokenID string
	// Source is the remote address of the connection.
	Source string
}

type identityKey struct{}

// WithIdentity returns a context that carries id.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// FromContext returns the identity WithIdentity put in ctx, and false when there is none.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}
