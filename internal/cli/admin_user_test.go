package cli

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/rotahq/rota/internal/api"
)

func TestUserAdd(t *testing.T) {
	bob := fixtureUsers().Users[1]
	for _, tc := range []struct {
		name string
		args []string
		want api.User
		out  string
	}{
		{"new: member unless given", []string{"carol", "--unix-user", "csmith"},
			api.User{Name: "carol", Role: "member", UnixUser: "csmith"}, "Added user carol\n"},
		{"new with a role", []string{"--role", "viewer", "dan", "--allow-root"},
			api.User{Name: "dan", Role: "viewer", AllowRoot: true}, "Added user dan\n"},
		{"existing: only the flags given change", []string{"bob", "--role", "operator"},
			api.User{Name: "bob", Role: "operator", UnixUser: "bsmith", Created: bob.Created}, "Updated user bob\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeServer(t)
			code, out, errOut := run(t, srv.URL, "admin", append([]string{"user", "add"}, tc.args...)...)
			if code != ExitOK {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			if !reflect.DeepEqual(srv.user, tc.want) {
				t.Errorf("server got\n%+v\nwant\n%+v", srv.user, tc.want)
			}
			if !strings.HasPrefix(out, tc.out+"NAME ") {
				t.Errorf("stdout %q, want %q and the user's table", out, tc.out)
			}
		})
	}
}

func TestTokenCreate(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want api.TokenRequest
		out  string
	}{
		{[]string{"--user", "bob", "--description", "CI"}, api.TokenRequest{User: "bob", Description: "CI", TTLSeconds: 30 * 86400},
			"Created token eeee5555 for bob (expires 2026-03-31 12:00:00 UTC):\n"},
		{[]string{"--ttl", "1d12h"}, api.TokenRequest{TTLSeconds: 36 * 3600},
			"Created token eeee5555 for alice (expires 2026-03-03 00:00:00 UTC):\n"},
		{[]string{"--ttl", "0"}, api.TokenRequest{}, "Created token eeee5555 for alice (never expires):\n"},
	} {
		srv := newFakeServer(t)
		code, out, errOut := run(t, srv.URL, "admin", append([]string{"token", "create"}, tc.args...)...)
		want := tc.out + "rota_eeee5555secretsecretsecretsecre\n" +
			"It will not be shown again: keep it where you keep secrets, or run rota login --server " + srv.URL + " and paste it.\n"
		if code != ExitOK || out != want {
			t.Errorf("%q: exit %d\nstdout %q\nwant   %q\nstderr %q", tc.args, code, out, want, errOut)
		}
		if srv.tokenReq != tc.want {
			t.Errorf("%q: server got %+v, want %+v", tc.args, srv.tokenReq, tc.want)
		}
	}
	srv := newFakeServer(t)
	code, out, _ := run(t, srv.URL, "admin", "token", "create", "-o", "json")
	var tok api.NewToken
	if err := json.Unmarshal([]byte(out), &tok); code != ExitOK || err != nil || tok.Token == "" || tok.ID != "eeee5555" {
		t.Errorf("token create -o json: exit %d, %v\n%s", code, err, out)
	}
}

func TestJoinToken(t *testing.T) {
	srv := newFakeServer(t)
	code, out, errOut := run(t, srv.URL, "admin", "join-token", "--node", "gpu-07")
	want := "Created join token jt03 (1 use, for node gpu-07 alone, expires 2026-03-01 13:00:00 UTC (in 1h00m)):\n" +
		"rotajoin_jt03secret\n" +
		"Run this on the new node:\n" +
		"  rota agent --join rotajoin_jt03secret --server https://rota.example:7443\n" +
		"The token will not be shown again.\n"
	if code != ExitOK || out != want {
		t.Errorf("exit %d\nstdout %q\nwant   %q\nstderr %q", code, out, want, errOut)
	}
	if want := (api.JoinTokenRequest{TTLSeconds: 3600, Uses: 1, Node: "gpu-07"}); srv.joinReq != want {
		t.Errorf("server got %+v, want %+v", srv.joinReq, want)
	}
	code, _, _ = run(t, srv.URL, "admin", "join-token", "--ttl", "2d", "--uses", "10")
	if want := (api.JoinTokenRequest{TTLSeconds: 2 * 86400, Uses: 10}); code != ExitOK || srv.joinReq != want {
		t.Errorf("exit %d, server got %+v, want %+v", code, srv.joinReq, want)
	}
}

func TestAudit(t *testing.T) {
	srv := newFakeServer(t)
	code, _, errOut := run(t, srv.URL, "admin", "audit")
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	want := []string{"since=2026-02-28T12%3A00%3A00Z", "after=102&since=2026-02-28T12%3A00%3A00Z"}
	if !slices.Equal(srv.auditQuery, want) {
		t.Errorf("queries %q, want %q", srv.auditQuery, want)
	}

	srv = newFakeServer(t)
	code, out, errOut := run(t, srv.URL, "admin", "audit", "--since", "2026-03-01T09:00:00Z", "--until", "1h",
		"--actor", "alice", "--kind", "queue", "--limit", "1", "-o", "json")
	want = []string{"actor=alice&kind=queue&limit=1&since=2026-03-01T09%3A00%3A00Z&until=2026-03-01T11%3A00%3A00Z"}
	if code != ExitOK || !slices.Equal(srv.auditQuery, want) {
		t.Errorf("exit %d, stderr %q, queries %q, want %q", code, errOut, srv.auditQuery, want)
	}
	var list api.EventList
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Events) != 1 || list.Events[0].ID != 101 {
		t.Errorf("audit -o json --limit 1: %v\n%s", err, out)
	}
}

func TestDescribeChange(t *testing.T) {
	for _, tc := range []struct{ before, after, want string }{
		{`{"tier":1,"pools":["a"],"grace_s":30}`, `{"grace_s":30,"pools":["a","b"],"tier":2}`, `pools: ["a"] → ["a","b"], tier: 1 → 2`},
		{`{"a":{"x":1,"y":2}}`, `{"a":{"y":2,"x":1}}`, "no change"},
		{`{"weight":1}`, `{"weight":1,"members":["eve"]}`, `members: - → ["eve"]`},
		{``, `{"name":"carol"}`, `- → {"name":"carol"}`},
		{`8`, `16`, `8 → 16`},
		{``, ``, ``},
	} {
		if got := describeChange(json.RawMessage(tc.before), json.RawMessage(tc.after)); got != tc.want {
			t.Errorf("describeChange(%s, %s) = %q, want %q", tc.before, tc.after, got, tc.want)
		}
	}
}

func TestAdminRemovesAndRevokes(t *testing.T) {
	srv := newFakeServer(t)
	for _, tc := range []struct {
		args []string
		out  string
	}{
		{[]string{"user", "remove", "carol"}, "Removed user carol\n"},
		{[]string{"token", "revoke", "bbbb2222"}, "Revoked token bbbb2222\n"},
		{[]string{"join-token", "revoke", "jt01"}, "Revoked join token jt01\n"},
		{[]string{"node", "remove", "ws-1"}, "Removed node ws-1\n"},
	} {
		code, out, errOut := run(t, srv.URL, "admin", tc.args...)
		if code != ExitOK || out != tc.out {
			t.Errorf("%q: exit %d, stdout %q, want %q; stderr %q", tc.args, code, out, tc.out, errOut)
		}
	}
	want := []string{"/api/v1/users/carol", "/api/v1/tokens/bbbb2222", "/api/v1/join-tokens/jt01", "/api/v1/nodes/ws-1"}
	if !slices.Equal(srv.deleted, want) {
		t.Errorf("deleted %q, want %q", srv.deleted, want)
	}
	code, out, errOut := run(t, srv.URL, "admin", "node", "remove", "node-a")
	if code != ExitError || out != "" || errOut != "rota: node node-a runs job 42; drain it and wait for its jobs to end\n" {
		t.Errorf("node remove of a busy node: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// --force, before or after the name, asks the server to remove it all the same.
	for _, args := range [][]string{{"node", "remove", "node-a", "--force"}, {"node", "remove", "--force", "node-a"}} {
		srv.deleted = nil
		code, out, errOut = run(t, srv.URL, "admin", args...)
		if code != ExitOK || out != "Removed node node-a\n" || !slices.Equal(srv.deleted, []string{"/api/v1/nodes/node-a?force=true"}) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q, deleted %q", args, code, out, errOut, srv.deleted)
		}
	}
}

func TestTokenListFilter(t *testing.T) {
	srv := newFakeServer(t)
	code, out, errOut := run(t, srv.URL, "admin", "token", "list", "--user", "bob", "-o", "json")
	var list api.TokenList
	if err := json.Unmarshal([]byte(out), &list); code != ExitOK || err != nil || len(list.Tokens) != 2 {
		t.Errorf("exit %d, %v, stderr %q\n%s", code, err, errOut, out)
	}
}

func TestAdminAuthUsage(t *testing.T) {
	srv := newFakeServer(t)
	for _, tc := range []struct {
		args []string
		code int
		want string // in stderr
	}{
		{[]string{"user"}, ExitUsage, "rota admin user: want list, add or remove"},
		{[]string{"token"}, ExitUsage, "rota admin token: want list, create or revoke"},
		{[]string{"user", "add"}, ExitUsage, "want exactly one name, got 0 arguments"},
		{[]string{"user", "add", "x", "--role", "boss"}, ExitUsage, `--role: unknown role "boss": use one of admin, operator, member, viewer`},
		{[]string{"token", "revoke"}, ExitUsage, "rota admin token revoke: want exactly one ID, got 0 arguments"},
		{[]string{"token", "create", "--ttl", "soon"}, ExitUsage, `--ttl: invalid duration "soon"`},
		{[]string{"token", "create", "extra"}, ExitUsage, `unexpected argument "extra"`},
		{[]string{"join-token", "bogus"}, ExitUsage, `rota admin join-token: unexpected argument "bogus"`},
		{[]string{"join-token", "--uses", "0"}, ExitUsage, "--uses must be 1 or more, got 0"},
		{[]string{"join-token", "--ttl", "0"}, ExitUsage, "a join token must expire"},
		{[]string{"audit", "--kind", "bogus"}, ExitUsage, `--kind: unknown kind "bogus": want one of submit, transition`},
		{[]string{"audit", "--since", "yesterday"}, ExitUsage, `--since: invalid time "yesterday"`},
		{[]string{"audit", "--since", "1h", "--until", "2h"}, ExitUsage, "--until is not after --since"},
		{[]string{"audit", "--limit", "-1"}, ExitUsage, "--limit must be 1 or more"},
		{[]string{"node", "remove"}, ExitUsage, "want exactly one name"},
		{[]string{"node", "remove", "--force"}, ExitUsage, "want exactly one name"},
		{[]string{"node", "remove", "n1", "--force=maybe"}, ExitUsage, "--force"},
		{[]string{"node"}, ExitUsage, "rota admin node: want remove"},
	} {
		code, out, errOut := run(t, srv.URL, "admin", tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("admin %q: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.args, code, out, errOut, tc.code, tc.want)
		}
	}
	if srv.user.Name != "" || srv.tokenReq != (api.TokenRequest{}) || srv.joinReq != (api.JoinTokenRequest{}) || srv.auditQuery != nil || srv.deleted != nil {
		t.Errorf("a usage error reached the server")
	}
}
