package auth

import (
	"strings"
	"testing"
)

const (
	testCluster = "0123456789abcdef"
	testFPHex   = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	testJoinID  = "abcd2345"
	testSecret  = "mysecretmysecretmysecretmysecret"
)

func TestNewJoinToken(t *testing.T) {
	tok, err := NewJoinToken(testCluster, "sha256:"+testFPHex)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok.ID) != 8 || len(tok.Secret) != 32 || !isBase32(tok.ID+tok.Secret) {
		t.Errorf("ID %q and secret %q are not 8 and 32 base32 characters", tok.ID, tok.Secret)
	}
	parsed, err := ParseJoinToken(tok.String())
	if err != nil || parsed != tok {
		t.Errorf("ParseJoinToken(String()) = %+v, %v; want %+v", parsed, err, tok)
	}
	if p := tok.Pin(); p.Fingerprint != "sha256:"+testFPHex {
		t.Errorf("Pin() = %+v", p)
	}
	if other, _ := NewJoinToken(testCluster, "sha256:"+testFPHex); other.Secret == tok.Secret || other.ID == tok.ID {
		t.Error("two join tokens share their ID or secret")
	}

	for _, bad := range [][2]string{
		{"", "sha256:" + testFPHex},
		{"0123456789ABCDEF", "sha256:" + testFPHex},
		{testCluster, testFPHex},
		{testCluster, "sha256:" + testFPHex[:62]},
	} {
		if _, err := NewJoinToken(bad[0], bad[1]); err == nil {
			t.Errorf("NewJoinToken(%q, %q) accepted them", bad[0], bad[1])
		}
	}
}

func TestJoinTokenSecretHash(t *testing.T) {
	tok := JoinToken{Secret: testSecret}
	// From `printf mysecretmysecretmysecretmysecret | sha256sum`.
	const want = "d90f0d88baf3323748cfe2f799fa758f67e731704ba3e3f03a8fcd19de901e23"
	if got := tok.SecretHash(); got != want {
		t.Errorf("SecretHash() = %s, want %s", got, want)
	}
	if !tok.SecretMatches(want) {
		t.Error("SecretMatches refuses the secret's own hash")
	}
	if tok.SecretMatches(HashToken(testSecret+"x")) || tok.SecretMatches("") {
		t.Error("SecretMatches accepts another hash")
	}
}

func TestParseJoinToken(t *testing.T) {
	join := func(parts ...string) string { return strings.Join(parts, ".") }
	good := join("rotajoin1", testCluster, testFPHex, testJoinID, testSecret)
	tests := []struct {
		name, in string
		wantErr  string // empty: accepted
	}{
		{"valid", good, ""},
		{"empty", "", "should start with rotajoin1"},
		{"API token", "rota_abcdefghijklmnopqrstuvwxyz234567", "should start with rotajoin1"},
		{"other version", join("rotajoin2", testCluster, testFPHex, testJoinID, testSecret), "should start with rotajoin1"},
		{"upper-case prefix", strings.ToUpper(good[:9]) + good[9:], "should start with rotajoin1"},
		{"leading space", " " + good, "should start with rotajoin1"},
		{"secret missing", join("rotajoin1", testCluster, testFPHex, testJoinID), "4 dot-separated parts"},
		{"extra part", good + ".x", "6 dot-separated parts"},
		{"trailing newline", good + "\n", "secret (part 5) has 33 characters"},
		{"too long", good + strings.Repeat("a", 300), "a join token has 133"},
		{"short cluster ID", join("rotajoin1", testCluster[1:], testFPHex, testJoinID, testSecret), "cluster ID (part 2) has 15"},
		{"upper-case cluster ID", join("rotajoin1", strings.ToUpper(testCluster), testFPHex, testJoinID, testSecret), "cluster ID (part 2)"},
		{"fingerprint with prefix", join("rotajoin1", testCluster, "sha256:"+testFPHex, testJoinID, testSecret), "CA fingerprint (part 3) has 71"},
		{"upper-case fingerprint", join("rotajoin1", testCluster, strings.ToUpper(testFPHex), testJoinID, testSecret), "CA fingerprint (part 3)"},
		{"short fingerprint", join("rotajoin1", testCluster, testFPHex[2:], testJoinID, testSecret), "CA fingerprint (part 3) has 62"},
		{"short ID", join("rotajoin1", testCluster, testFPHex, testJoinID[1:], testSecret), "ID (part 4) has 7"},
		{"ID with a 1", join("rotajoin1", testCluster, testFPHex, "abcd2341", testSecret), "ID (part 4)"},
		{"short secret", join("rotajoin1", testCluster, testFPHex, testJoinID, testSecret[1:]), "secret (part 5) has 31"},
		{"long secret", join("rotajoin1", testCluster, testFPHex, testJoinID, testSecret+"m"), "secret (part 5) has 33"},
		{"upper-case secret", join("rotajoin1", testCluster, testFPHex, testJoinID, strings.ToUpper(testSecret)), "secret (part 5)"},
		{"secret with a 0", join("rotajoin1", testCluster, testFPHex, testJoinID, testSecret[:31]+"0"), "secret (part 5)"},
		{"secret and ID swapped", join("rotajoin1", testCluster, testFPHex, testSecret, testJoinID), "ID (part 4) has 32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := ParseJoinToken(tt.in)
			if tt.wantErr == "" {
				want := JoinToken{ClusterID: testCluster, CAFingerprint: "sha256:" + testFPHex, ID: testJoinID, Secret: testSecret}
				if err != nil || tok != want {
					t.Fatalf("ParseJoinToken = %+v, %v; want %+v", tok, err, want)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted %q as %+v", tt.in, tok)
			}
			if tok != (JoinToken{}) {
				t.Errorf("returned %+v with the error", tok)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.wantErr) {
				t.Errorf("error %q does not say %q", msg, tt.wantErr)
			}
			// Neither the secret nor any sizeable piece of it, in any case.
			for _, s := range []string{testSecret[:10], strings.ToUpper(testSecret[:10]), testSecret[20:]} {
				if strings.Contains(msg, s) {
					t.Errorf("error %q reveals the secret", msg)
				}
			}
		})
	}
}

// FuzzParseJoinToken holds that ParseJoinToken never panics, that what it accepts renders
// back to exactly the input, and that an error never quotes a long part of the input.
func FuzzParseJoinToken(f *testing.F) {
	good := strings.Join([]string{"rotajoin1", testCluster, testFPHex, testJoinID, testSecret}, ".")
	f.Add(good)
	f.Add(good + ".")
	f.Add(strings.ToUpper(good))
	f.Add("rotajoin1....")
	f.Add("rotajoin1")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseJoinToken(s)
		if err == nil {
			if got := tok.String(); got != s {
				t.Fatalf("accepted %q, which renders as %q", s, got)
			}
			if again, err := ParseJoinToken(tok.String()); err != nil || again != tok {
				t.Fatalf("re-parsing %q gives %+v, %v", s, again, err)
			}
			return
		}
		// The messages have no run of 16 or more letters and digits, so any such part of
		// the input found in one was copied from the input.
		for _, part := range strings.Split(s, ".") {
			if len(part) >= 16 && strings.Contains(err.Error(), part) {
				t.Fatalf("error %q quotes the input part %q", err, part)
			}
		}
	})
}
