package cli

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// The Client's calls about identity, access and the audit trail.

// Whoami says who the server takes the caller for.
func (c *Client) Whoami(ctx context.Context) (api.Whoami, error) {
	var w api.Whoami
	err := c.do(ctx, http.MethodGet, "/api/v1/whoami", nil, nil, &w)
	return w, err
}

// Users lists the users the server knows.
func (c *Client) Users(ctx context.Context) (api.UserList, error) {
	var list api.UserList
	err := c.do(ctx, http.MethodGet, "/api/v1/users", nil, nil, &list)
	return list, err
}

// SetUser creates user.Name or replaces it whole, and returns it as stored.
func (c *Client) SetUser(ctx context.Context, user api.User) (api.User, error) {
	var out api.User
	err := c.do(ctx, http.MethodPut, namePath("/api/v1/users/", user.Name), nil, user, &out)
	return out, err
}

// DeleteUser removes a user; the user's tokens stop working.
func (c *Client) DeleteUser(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, namePath("/api/v1/users/", name), nil, nil, nil)
}

// Tokens lists API tokens: of user when not empty, else every token the caller may see
// (an admin all, anyone else their own).
func (c *Client) Tokens(ctx context.Context, user string) (api.TokenList, error) {
	q := url.Values{}
	if user != "" {
		q.Set("user", user)
	}
	var list api.TokenList
	err := c.do(ctx, http.MethodGet, "/api/v1/tokens", q, nil, &list)
	return list, err
}

// CreateToken makes an API token. Its answer is the only time the token is shown.
func (c *Client) CreateToken(ctx context.Context, req api.TokenRequest) (api.NewToken, error) {
	var out api.NewToken
	err := c.do(ctx, http.MethodPost, "/api/v1/tokens", nil, req, &out)
	return out, err
}

// RevokeToken revokes the API token with the ID id.
func (c *Client) RevokeToken(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, namePath("/api/v1/tokens/", id), nil, nil, nil)
}

// CreateJoinToken makes a token with which agents join the cluster. Its answer is the only
// time the token is shown.
func (c *Client) CreateJoinToken(ctx context.Context, req api.JoinTokenRequest) (api.NewJoinToken, error) {
	var out api.NewJoinToken
	err := c.do(ctx, http.MethodPost, "/api/v1/join-tokens", nil, req, &out)
	return out, err
}

// JoinTokens lists the join tokens that have not expired or been revoked.
func (c *Client) JoinTokens(ctx context.Context) ([]api.JoinTokenInfo, error) {
	var list api.JoinTokenList
	err := c.do(ctx, http.MethodGet, "/api/v1/join-tokens", nil, nil, &list)
	return list.JoinTokens, err
}

// RevokeJoinToken revokes the join token with the ID id.
func (c *Client) RevokeJoinToken(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, namePath("/api/v1/join-tokens/", id), nil, nil, nil)
}

// AuditOptions filters GET /api/v1/audit. Zero values mean no filter.
type AuditOptions struct {
	Since, Until time.Time
	Actor, Kind  string
	// Limit is the page size; 0 leaves it to the server.
	Limit int
	// After is the cursor from a previous page's Next.
	After string
}

// Audit returns one page of the audit trail, oldest first.
func (c *Client) Audit(ctx context.Context, opts AuditOptions) (api.EventList, error) {
	q := url.Values{}
	for k, t := range map[string]time.Time{"since": opts.Since, "until": opts.Until} {
		if !t.IsZero() {
			q.Set(k, t.UTC().Format(time.RFC3339))
		}
	}
	for k, v := range map[string]string{"actor": opts.Actor, "kind": opts.Kind, "after": opts.After} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	var list api.EventList
	err := c.do(ctx, http.MethodGet, "/api/v1/audit", q, nil, &list)
	return list, err
}

// RemoveNode forgets a node and revokes its certificate; its agent must join again. A
// node that runs or is assigned jobs is refused unless force, which ends those jobs as on a
// lost node (requeued when they may be).
func (c *Client) RemoveNode(ctx context.Context, name string, force bool) error {
	var q url.Values
	if force {
		q = url.Values{"force": {"true"}}
	}
	return c.do(ctx, http.MethodDelete, namePath("/api/v1/nodes/", name), q, nil, nil)
}
