package cli

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
)

const userListUsage = `rota admin user list

Lists the users: ROLE is what they may do, UNIX-USER the account their jobs run as,
ROOT whether those jobs may run as root, TEAMS the teams they belong to. -o json prints
an api.UserList.`

const userAddUsage = `rota admin user add NAME [--role member|viewer|operator|admin] [--unix-user U] [--allow-root]

Adds user NAME from the flags (role member unless given), or changes only the flags
given of an existing user. Their jobs run as the Unix account --unix-user (default:
NAME), never as root unless --allow-root; --allow-root=false takes that back. Each role
may do what the roles after it may: admin, operator, member, viewer. The user then
needs an API token (rota admin token create --user NAME), or an account on the
server's machine to use its socket. -o json prints the user as stored.`

const userRemoveUsage = `rota admin user remove NAME

Removes a user. Their API tokens stop working; their jobs stay as they are.`

const tokenListUsage = `rota admin token list [--user U]

Lists API tokens, of user U with --user; an admin sees everyone's, anyone else their
own. STATE is active, expired or revoked. The tokens themselves are never shown again
after they are made. -o json prints an api.TokenList.`

const tokenCreateUsage = `rota admin token create [--user U] [--ttl 30d] [--description TEXT]

Makes an API token for user U (default: you; only an admin makes tokens for others),
valid for --ttl: a Go duration (12h) or whole days (30d, 1d12h); 0 never expires. The
token is printed once, on a line of its own, and cannot be shown again. -o json prints
the api.NewToken.`

const tokenRevokeUsage = `rota admin token revoke ID

Revokes an API token at once. ID is the short handle rota admin token list shows.`

const joinTokenUsage = `rota admin join-token [--ttl 1h] [--uses N] [--node NAME]

Makes a token with which new nodes join the cluster, valid for --ttl (a Go duration or
whole days) and --uses joins, for the node named --node alone when given. Prints the
token once, and the command to run on the node. -o json prints the api.NewJoinToken.`

const joinTokenListUsage = `rota admin join-token list

Lists the join tokens: USES is how many joins each has served of how many it allows.
-o json prints {"join_tokens": [...]}.`

const joinTokenRevokeUsage = `rota admin join-token revoke ID

Revokes a join token; nodes that joined with it stay.`

func runUserList(ctx context.Context, cfg Config, args []string) int {
	return runList(ctx, cfg, args, "admin user list", userListUsage, nil,
		func(ctx context.Context, c *Client) (api.UserList, error) {
			list, err := c.Users(ctx)
			list.Users = orEmpty(list.Users)
			return list, err
		},
		func(ctx context.Context, l api.UserList) int { return cfg.printUsers(ctx, l.Users) })
}

func (cfg Config) printUsers(ctx context.Context, users []api.User) int {
	loc := cfg.location()
	tw := newTable(cfg.Stdout)
	fmt.Fprintln(tw, "NAME\tROLE\tUNIX-USER\tROOT\tTEAMS\tCREATED")
	for _, u := range users {
		unix := u.UnixUser
		if unix == "" {
			unix = u.Name
		}
		root := "no"
		if u.AllowRoot {
			root = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", u.Name, u.Role, unix, root, joinOrDash(u.Teams), formatTime(&u.Created, loc))
	}
	if err := tw.Flush(); err != nil {
		return cfg.fail(ctx, err)
	}
	return ExitOK
}

func runUserAdd(ctx context.Context, cfg Config, args []string) int {
	const cmd = "admin user add"
	fs, g := newFlagSet(cfg, cmd, userAddUsage)
	role := fs.String("role", string(auth.RoleMember), "`role`: admin, operator, member or viewer")
	unixUser := fs.String("unix-user", "", "Unix `account` the user's jobs run as (default: NAME)")
	allowRoot := fs.Bool("allow-root", false, "let the user's jobs run as root")
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code
	}
	name, ok := cfg.oneArg(cmd, "name", pos)
	if !ok {
		return ExitUsage
	}
	if _, err := auth.ParseRole(*role); err != nil {
		return cfg.usageError(cmd, "--role: %v", err)
	}

	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	list, err := c.Users(ctx)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	u, verb := api.User{Name: name, Role: *role}, "Added"
	for _, have := range list.Users {
		if have.Name == name {
			u, verb = have, "Updated"
		}
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "role":
			u.Role = *role
		case "unix-user":
			u.UnixUser = *unixUser
		case "allow-root":
			u.AllowRoot = *allowRoot
		}
	})
	u.Teams = nil // the teams' members say who belongs; a user does not
	if u, err = c.SetUser(ctx, u); err != nil {
		return cfg.fail(ctx, err)
	}
	if g.output == "json" {
		return cfg.printJSON(u)
	}
	fmt.Fprintf(cfg.Stdout, "%s user %s\n", verb, u.Name)
	return cfg.printUsers(ctx, []api.User{u})
}

func runUserRemove(ctx context.Context, cfg Config, args []string) int {
	return runDelete(ctx, cfg, args, deleteCommand{cmd: "admin user remove", usage: userRemoveUsage,
		arg: "name", done: "Removed user", del: (*Client).DeleteUser})
}

func runTokenList(ctx context.Context, cfg Config, args []string) int {
	var user string
	return runList(ctx, cfg, args, "admin token list", tokenListUsage,
		func(fs *flag.FlagSet) { fs.StringVar(&user, "user", "", "only the tokens of `user`") },
		func(ctx context.Context, c *Client) (api.TokenList, error) {
			list, err := c.Tokens(ctx, user)
			list.Tokens = orEmpty(list.Tokens)
			return list, err
		},
		cfg.printTokens)
}

func (cfg Config) printTokens(ctx context.Context, list api.TokenList) int {
	now, loc := cfg.Now(), cfg.location()
	tw := newTable(cfg.Stdout)
	fmt.Fprintln(tw, "ID\tUSER\tSTATE\tDESCRIPTION\tCREATED\tEXPIRES\tLAST USED")
	for _, t := range list.Tokens {
		expires := "never"
		if t.Expires != nil {
			expires = formatTime(t.Expires, loc)
		}
		lastUsed := "never"
		if t.LastUsed != nil {
			lastUsed = relative(*t.LastUsed, now)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.User, tokenState(t, now),
			orDash(truncate(t.Description, 40)), formatTime(&t.Created, loc), expires, lastUsed)
	}
	if err := tw.Flush(); err != nil {
		return cfg.fail(ctx, err)
	}
	return ExitOK
}

// tokenState is whether a token still works: active, expired or revoked.
func tokenState(t api.TokenInfo, now time.Time) string {
	switch {
	case t.Revoked != nil:
		return "revoked"
	case t.Expires != nil && !t.Expires.After(now):
		return "expired"
	}
	return "active"
}

func runTokenCreate(ctx context.Context, cfg Config, args []string) int {
	const cmd = "admin token create"
	fs, g := newFlagSet(cfg, cmd, tokenCreateUsage)
	user := fs.String("user", "", "`user` the token acts as (default: you)")
	ttl := fs.String("ttl", "30d", "how long the token is valid, a `DURATION` (0: forever)")
	desc := fs.String("description", "", "what the token is for, e.g. `TEXT` \"CI of repo x\"")
	if code, ok := cfg.parseNoArgs(cmd, fs, g, args); !ok {
		return code
	}
	secs, err := parseTTL(*ttl)
	if err != nil {
		return cfg.usageError(cmd, "--ttl: %v", err)
	}

	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	tok, err := c.CreateToken(ctx, api.TokenRequest{User: *user, Description: *desc, TTLSeconds: secs})
	if err != nil {
		return cfg.fail(ctx, err)
	}
	if g.output == "json" {
		return cfg.printJSON(tok)
	}
	expires := "never expires"
	if tok.Expires != nil {
		expires = "expires " + formatTime(tok.Expires, cfg.location())
	}
	fmt.Fprintf(cfg.Stdout, "Created token %s for %s (%s):\n%s\n", tok.ID, tok.User, expires, tok.Token)
	fmt.Fprintf(cfg.Stdout, "It will not be shown again: keep it where you keep secrets, or run rota login --server %s and paste it.\n", c.BaseURL)
	return ExitOK
}

func runTokenRevoke(ctx context.Context, cfg Config, args []string) int {
	return runDelete(ctx, cfg, args, deleteCommand{cmd: "admin token revoke", usage: tokenRevokeUsage,
		arg: "ID", done: "Revoked token", del: (*Client).RevokeToken})
}

func runJoinToken(ctx context.Context, cfg Config, args []string) int {
	const cmd = "admin join-token"
	fs, g := newFlagSet(cfg, cmd, joinTokenUsage)
	ttl := fs.String("ttl", "1h", "how long the token may be used, a `DURATION`")
	uses := fs.Int("uses", 1, "how many `nodes` may join with it")
	node := fs.String("node", "", "the only node `name` that may join with it")
	if code, ok := cfg.parseNoArgs(cmd, fs, g, args); !ok {
		return code
	}
	secs, err := parseTTL(*ttl)
	switch {
	case err != nil:
		return cfg.usageError(cmd, "--ttl: %v", err)
	case secs == 0:
		return cfg.usageError(cmd, "--ttl: a join token must expire; give e.g. 1h or 2d")
	case *uses < 1:
		return cfg.usageError(cmd, "--uses must be 1 or more, got %d", *uses)
	}

	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	jt, err := c.CreateJoinToken(ctx, api.JoinTokenRequest{TTLSeconds: secs, Uses: *uses, Node: *node})
	if err != nil {
		return cfg.fail(ctx, err)
	}
	if g.output == "json" {
		return cfg.printJSON(jt)
	}
	what := plural(jt.Uses, "use", "uses")
	if jt.Node != "" {
		what += ", for node " + jt.Node + " alone"
	}
	fmt.Fprintf(cfg.Stdout, "Created join token %s (%s, expires %s):\n%s\n", jt.ID, what,
		formatTimeRel(&jt.Expires, cfg.Now(), cfg.location()), jt.Token)
	fmt.Fprintf(cfg.Stdout, "Run this on the new node:\n  %s\nThe token will not be shown again.\n", jt.Command)
	return ExitOK
}

func runJoinTokenList(ctx context.Context, cfg Config, args []string) int {
	return runList(ctx, cfg, args, "admin join-token list", joinTokenListUsage, nil,
		func(ctx context.Context, c *Client) (api.JoinTokenList, error) {
			tokens, err := c.JoinTokens(ctx)
			return api.JoinTokenList{JoinTokens: orEmpty(tokens)}, err
		},
		cfg.printJoinTokens)
}

func (cfg Config) printJoinTokens(ctx context.Context, list api.JoinTokenList) int {
	now, loc := cfg.Now(), cfg.location()
	tw := newTable(cfg.Stdout)
	fmt.Fprintln(tw, "ID\tNODE\tUSES\tCREATED\tEXPIRES")
	for _, t := range list.JoinTokens {
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%s\n", t.ID, orDash(t.Node), t.Used, t.Uses,
			formatTime(&t.Created, loc), formatTimeRel(&t.Expires, now, loc))
	}
	if err := tw.Flush(); err != nil {
		return cfg.fail(ctx, err)
	}
	return ExitOK
}

func runJoinTokenRevoke(ctx context.Context, cfg Config, args []string) int {
	return runDelete(ctx, cfg, args, deleteCommand{cmd: "admin join-token revoke", usage: joinTokenRevokeUsage,
		arg: "ID", done: "Revoked join token", del: (*Client).RevokeJoinToken})
}

// parseTTL reads how long a token is valid into seconds: a duration as parseSpan reads it
// (12h, 30d, 1d12h), or 0 for no limit.
func parseTTL(s string) (int64, error) {
	if strings.TrimSpace(s) == "0" {
		return 0, nil
	}
	d, err := parseSpan(strings.TrimSpace(s))
	if err != nil {
		return 0, err
	}
	return ceilSeconds(d), nil
}
