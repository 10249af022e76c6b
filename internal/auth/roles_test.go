package auth

import (
	"context"
	"strings"
	"testing"
)

func TestParseRole(t *testing.T) {
	for _, r := range Roles() {
		got, err := ParseRole(string(r))
		if err != nil || got != r {
			t.Errorf("ParseRole(%q) = %q, %v", r, got, err)
		}
	}
	for _, bad := range []string{"", "Admin", "root", " admin"} {
		_, err := ParseRole(bad)
		if err == nil {
			t.Errorf("ParseRole(%q) accepted it", bad)
			continue
		}
		for _, r := range Roles() {
			if !strings.Contains(err.Error(), string(r)) {
				t.Errorf("ParseRole(%q) error %q does not name the allowed role %s", bad, err, r)
			}
		}
	}
}

func TestRoleAtLeast(t *testing.T) {
	order := []Role{RoleViewer, RoleMember, RoleOperator, RoleAdmin}
	for i, r := range order {
		for j, other := range order {
			if got, want := r.AtLeast(other), i >= j; got != want {
				t.Errorf("%s.AtLeast(%s) = %v, want %v", r, other, got, want)
			}
		}
		if r.AtLeast("superuser") || Role("superuser").AtLeast(r) || Role("").AtLeast(r) {
			t.Errorf("an unknown role compares with %s", r)
		}
	}
}

func TestRolesIsACopy(t *testing.T) {
	Roles()[0] = "viewer"
	if Roles()[0] != RoleAdmin {
		t.Fatal("changing the slice Roles returns changed the roles")
	}
}

func TestIdentityContext(t *testing.T) {
	if _, ok := FromContext(context.Background()); ok {
		t.Fatal("an empty context has an identity")
	}
	want := Identity{User: "ana", Role: RoleMember, Kind: KindToken, TokenID: "abcdefgh", Source: "10.0.0.1:5000"}
	got, ok := FromContext(WithIdentity(context.Background(), want))
	if !ok || got != want {
		t.Errorf("FromContext = %+v, %v; want %+v", got, ok, want)
	}
}
