package auth

import (
	"strings"
	"testing"
)

func TestNewToken(t *testing.T) {
	tok := NewToken()
	if len(tok.Plain) != 37 || !strings.HasPrefix(tok.Plain, "rota_") {
		t.Fatalf("token %q does not have the rota_ form", tok.Plain)
	}
	id, ok := TokenID(tok.Plain)
	if !ok || id != tok.ID || len(id) != 8 || !strings.HasPrefix(tok.Plain, "rota_"+id) {
		t.Errorf("TokenID(%q) = %q, %v; token says ID %q", tok.Plain, id, ok, tok.ID)
	}
	if tok.Hash != HashToken(tok.Plain) {
		t.Errorf("Hash %q is not HashToken of the plain token", tok.Hash)
	}
	if other := NewToken(); other.Plain == tok.Plain || other.ID == tok.ID {
		t.Errorf("two tokens share their secret or ID: %q %q", tok.Plain, other.Plain)
	}
}

func TestHashToken(t *testing.T) {
	// From `printf rota_ | sha256sum`: the whole plain token is hashed, in lower-case hex.
	const want = "f1e9e2ebc8a09200bb030a40646317b354c8dea934b1710abd6378e5d8ce5a63"
	if got := HashToken("rota_"); got != want {
		t.Errorf("HashToken(rota_) = %s, want %s", got, want)
	}
}

func TestTokenID(t *testing.T) {
	const random = "abcdefghijklmnopqrstuvwxyz234567"
	tests := []struct {
		name, plain string
		wantID      string // empty: refused
	}{
		{"valid", "rota_" + random, "abcdefgh"},
		{"all sevens", "rota_" + strings.Repeat("7", 32), "77777777"},
		{"empty", "", ""},
		{"prefix only", "rota_", ""},
		{"no prefix", random, ""},
		{"other prefix", "rot__" + random, ""},
		{"upper-case prefix", "ROTA_" + random, ""},
		{"one short", "rota_" + random[:31], ""},
		{"one long", "rota_" + random + "a", ""},
		{"upper case", "rota_" + strings.ToUpper(random), ""},
		{"digit 1 is not base32", "rota_1" + random[1:], ""},
		{"digit 8 is not base32", "rota_" + random[:31] + "8", ""},
		{"padding", "rota_" + random[:31] + "=", ""},
		{"space", "rota_" + random[:31] + " ", ""},
		{"bearer scheme kept", "Bearer rota_" + random, ""},
		{"non-ASCII", "rota_" + random[:30] + "é", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, ok := TokenID(tt.plain)
			if ok != (tt.wantID != "") || id != tt.wantID {
				t.Errorf("TokenID(%q) = %q, %v; want %q", tt.plain, id, ok, tt.wantID)
			}
		})
	}
}

// FuzzTokenID holds that TokenID never panics and that what it accepts is a token exactly:
// its random part decodes to 20 bytes that encode back to it.
func FuzzTokenID(f *testing.F) {
	f.Add(NewToken().Plain)
	f.Add("rota_abcdefghijklmnopqrstuvwxyz234567")
	f.Add("rota_abcdefghijklmnopqrstuvwxyz23456=")
	f.Add("rota_")
	f.Add("")
	f.Fuzz(func(t *testing.T, plain string) {
		id, ok := TokenID(plain)
		if !ok {
			if id != "" {
				t.Fatalf("refused %q but returned ID %q", plain, id)
			}
			return
		}
		random := strings.TrimPrefix(plain, "rota_")
		b, err := b32.DecodeString(random)
		if err != nil || len(b) != 20 {
			t.Fatalf("accepted %q whose random part does not decode to 20 bytes: %v", plain, err)
		}
		if again := "rota_" + b32.EncodeToString(b); again != plain {
			t.Fatalf("accepted %q, which re-renders as %q", plain, again)
		}
		if id != random[:8] {
			t.Fatalf("ID of %q is %q", plain, id)
		}
	})
}

// BenchmarkTokenLookupKey is the work on every token-authenticated request before the
// store lookup.
func BenchmarkTokenLookupKey(b *testing.B) {
	plain := NewToken().Plain
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := TokenID(plain); !ok {
			b.Fatal("refused")
		}
		HashToken(plain)
	}
}
