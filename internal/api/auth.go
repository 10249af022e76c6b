package api

import "time"

// Authentication and membership. People and scripts send "Authorization: Bearer <token>";
// agents join once with a join token and then authenticate with their node certificate.

// JoinRequest is the body of POST /api/v1/join: an agent asking to join the cluster. The
// agent reaches the server over TLS pinned to the CA fingerprint in the join token.
type JoinRequest struct {
	// Token is the join token an admin printed with `rota admin join-token`.
	Token string `json:"token"`
	// Node is the name the agent joins as; it must equal the CSR's common name.
	Node string `json:"node"`
	// CSR is the PEM certificate request for the agent's key.
	CSR string `json:"csr"`
	// Hostname is the machine's host name, for the audit trail.
	Hostname string `json:"hostname,omitempty"`
}

// JoinResponse is the answer to a join or a renewal: the node certificate and the
// cluster's CA certificate, which the agent pins from then on.
type JoinResponse struct {
	ClusterID string `json:"cluster_id"`
	// Certificate is the node's PEM client certificate.
	Certificate string `json:"certificate"`
	// CA is the cluster's PEM CA certificate.
	CA       string    `json:"ca"`
	NotAfter time.Time `json:"not_after"`
}

// RenewRequest is the body of POST /api/v1/agents/{node}/renew, which an agent sends over
// mutual TLS with its current certificate before that certificate expires. It is answered
// with a JoinResponse.
type RenewRequest struct {
	// CSR is the PEM certificate request for the key the new certificate is for.
	CSR string `json:"csr"`
}

// User is a person or a script the server knows.
type User struct {
	Name string `json:"name"`
	// Role is admin, operator, member or viewer.
	Role string `json:"role"`
	// UnixUser is the account the user's jobs run as on the nodes (empty: same as Name).
	UnixUser string `json:"unix_user,omitempty"`
	// AllowRoot lets the user's jobs run as root; only an admin may set it.
	AllowRoot bool      `json:"allow_root,omitempty"`
	Created   time.Time `json:"created"`
	// Teams the user belongs to (API only, from the teams' members).
	Teams []string `json:"teams,omitempty"`
	// Notify lists webhooks told of the events of every job of the user; the user may set
	// them (PUT /api/v1/users/{name}/notify), as may an admin.
	Notify []Notify `json:"notify,omitempty"`
}

// UserList is the answer to GET /api/v1/users.
type UserList struct {
	Users []User `json:"users"`
}

// TokenInfo describes an API token; the token itself is shown only once, in NewToken.
type TokenInfo struct {
	// ID is the token's short, non-secret handle: how lists name it and how to revoke it.
	ID          string     `json:"id"`
	User        string     `json:"user"`
	Description string     `json:"description,omitempty"`
	Created     time.Time  `json:"created"`
	Expires     *time.Time `json:"expires,omitempty"`
	Revoked     *time.Time `json:"revoked,omitempty"`
	LastUsed    *time.Time `json:"last_used,omitempty"`
}

// TokenList is the answer to GET /api/v1/tokens.
type TokenList struct {
	Tokens []TokenInfo `json:"tokens"`
}

// TokenRequest is the body of POST /api/v1/tokens.
type TokenRequest struct {
	// User the token acts as (empty: the caller).
	User        string `json:"user,omitempty"`
	Description string `json:"description,omitempty"`
	// TTLSeconds is how long the token is valid; 0 means it does not expire.
	TTLSeconds int64 `json:"ttl_s,omitempty"`
}

// NewToken is the answer to POST /api/v1/tokens.
type NewToken struct {
	TokenInfo
	// Token is the secret; it is shown here once and cannot be retrieved again.
	Token string `json:"token"`
}

// JoinTokenRequest is the body of POST /api/v1/join-tokens.
type JoinTokenRequest struct {
	// TTLSeconds is how long the token may be used (0: the server's default).
	TTLSeconds int64 `json:"ttl_s,omitempty"`
	// Uses is how many agents may join with it (0: one).
	Uses int `json:"uses,omitempty"`
	// Node, when set, is the only node name that may join with the token.
	Node string `json:"node,omitempty"`
}

// JoinTokenInfo describes a join token; its secret is shown only once, in NewJoinToken.
type JoinTokenInfo struct {
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
	// Uses is how many joins the token allows, Used how many it has served.
	Uses int    `json:"uses"`
	Used int    `json:"used"`
	Node string `json:"node,omitempty"`
}

// JoinTokenList is the answer to GET /api/v1/join-tokens: every join token, expired and
// used ones included.
type JoinTokenList struct {
	JoinTokens []JoinTokenInfo `json:"join_tokens"`
}

// NewJoinToken is the answer to POST /api/v1/join-tokens.
type NewJoinToken struct {
	JoinTokenInfo
	// Token is the join token; it is shown here once and cannot be retrieved again.
	Token string `json:"token"`
	// Command is the `rota agent` command line to run on the new node.
	Command string `json:"command"`
}

// Whoami is the answer to GET /api/v1/whoami: who the server takes the caller for.
type Whoami struct {
	User string `json:"user"`
	Role string `json:"role"`
	// Kind is how the caller authenticated: token or unix (agents cannot call whoami).
	Kind string `json:"kind"`
	// Node is set for agents.
	Node string `json:"node,omitempty"`
	// TokenID is set when the caller used an API token.
	TokenID string   `json:"token_id,omitempty"`
	Teams   []string `json:"teams,omitempty"`
	// Notify is the caller's default webhooks (rota notify list).
	Notify []Notify `json:"notify,omitempty"`
}
