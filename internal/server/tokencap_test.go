package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// A user's tokens are bounded: past the bound, creating one is refused naming the user,
// whether the member asks, an admin asks for them, or a web UI login would make one.
// Tokens revoked or expired a day ago are forgotten when the next is made, live ones
// never; what is forgotten is gone after a restart too, and the bound still holds then.
func TestTokensPerUserAreBounded(t *testing.T) {
	defer func(n int) { maxTokensPerUser = n }(maxTokensPerUser)
	maxTokensPerUser = 4
	h := newHarness(t)
	mia := h.addUser("mia", "member") // her first token
	create := func(token string, req api.TokenRequest) (int, api.NewToken, api.Error) {
		t.Helper()
		r, _ := http.NewRequest("POST", h.http.URL+"/api/v1/tokens", bytes.NewReader(mustJSON(t, req)))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var tok api.NewToken
		var e api.Error
		if resp.StatusCode == http.StatusCreated {
			json.Unmarshal(data, &tok)
		} else {
			json.Unmarshal(data, &e)
		}
		return resp.StatusCode, tok, e
	}
	ids := func() []string {
		t.Helper()
		var list api.TokenList
		if code := h.doAs(mia, "GET", "/api/v1/tokens", nil, &list); code != 200 {
			t.Fatalf("list mia's tokens: %d", code)
		}
		var out []string
		for _, ti := range list.Tokens {
			out = append(out, ti.ID)
		}
		return out
	}
	var made []api.NewToken
	for i := range 2 {
		code, tok, e := create(mia, api.TokenRequest{})
		if code != http.StatusCreated {
			t.Fatalf("token %d: %d %s", i+2, code, e.Message)
		}
		made = append(made, tok)
	}
	// The fourth, with a TTL of a minute, by an admin for her.
	code, short, e := create(h.token, api.TokenRequest{User: "mia", TTLSeconds: 60})
	if code != http.StatusCreated {
		t.Fatalf("an admin's token for mia: %d %s", code, e.Message)
	}
	for _, who := range []string{mia, h.token} {
		code, _, e := create(who, api.TokenRequest{User: "mia"})
		if code != http.StatusConflict || e.Code != api.CodeConflict || e.Field != "user" || !strings.Contains(e.Message, "mia has 4 API tokens") {
			t.Errorf("a fifth token: %d %+v; want 409 naming mia's 4 tokens", code, e)
		}
	}
	// A web UI login would make a fifth: refused the same way.
	if status, _ := h.uiSession(linkCode(t, h.uiLink(mia))); status != http.StatusConflict {
		t.Errorf("a web UI login past the bound: %d; want 409", status)
	}
	// Revoking does not make room at once: the revoked token stays listed for a day.
	if code := h.doAs(mia, "DELETE", "/api/v1/tokens/"+made[0].ID, nil, nil); code != http.StatusNoContent {
		t.Fatalf("revoke: %d", code)
	}
	h.clock.Add(23 * time.Hour)
	if code, _, _ := create(mia, api.TokenRequest{}); code != http.StatusConflict {
		t.Errorf("a token 23 hours after one was revoked: %d; want 409", code)
	}
	before := ids()
	// A day after the revocation, and after the minute token's expiry, both are
	// forgotten as the next is made.
	h.clock.Add(time.Hour + time.Minute)
	code, next, e := create(mia, api.TokenRequest{})
	if code != http.StatusCreated {
		t.Fatalf("a token a day after one was revoked: %d %s", code, e.Message)
	}
	after := ids()
	if slices.Contains(after, made[0].ID) || slices.Contains(after, short.ID) || !slices.Contains(after, next.ID) || len(after) != len(before)-1 {
		t.Errorf("tokens before %v, after %v: want %s and %s forgotten and %s added", before, after, made[0].ID, short.ID, next.ID)
	}
	// Live tokens are never forgotten, however old, and still work.
	if code := h.doAs(made[1].Token, "GET", "/api/v1/whoami", nil, nil); code != 200 {
		t.Errorf("a live token after the forgetting: %d", code)
	}
	h.restart()
	if got := ids(); !slices.Equal(got, after) {
		t.Errorf("after a restart mia has tokens %v; want %v", got, after)
	}
	if code, _, _ := create(mia, api.TokenRequest{}); code != http.StatusCreated {
		t.Errorf("a fourth token after the restart: %d", code)
	}
	if code, _, _ := create(mia, api.TokenRequest{}); code != http.StatusConflict {
		t.Errorf("a fifth token after the restart: %d; want 409", code)
	}
	// Another user has a bound of their own.
	ned := h.addUser("ned", "viewer")
	if code, _, e := create(ned, api.TokenRequest{}); code != http.StatusCreated {
		t.Errorf("another user's token: %d %s", code, e.Message)
	}
}
