package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
)

// An API token is "rota_" followed by 20 random bytes in lower-case base32. 20 bytes are
// exactly 32 base32 characters, so every string of that alphabet and length is a token and
// renders back to itself; no padding is needed.
const (
	tokenPrefix   = "rota_"
	tokenRandLen  = 32 // base32 characters of the random part
	tokenIDLen    = 8
	tokenPlainLen = len(tokenPrefix) + tokenRandLen
)

// b32 is base32 in lower case: tokens are read aloud and pasted into shells, and lower
// case is easier on both than the standard alphabet.
var b32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Token is a new API token. The store keeps ID and Hash; Plain is shown once, to its owner.
type Token struct {
	// Plain is the secret, as the user passes it in "Authorization: Bearer".
	Plain string
	// ID is a short handle for lists and revocation. It is not secret: it is only the
	// first characters of the random part, far too few to guess the rest from.
	ID string
	// Hash is the hex SHA-256 of Plain.
	Hash string
}

// NewToken makes a token from 20 random bytes.
func NewToken() Token {
	plain := tokenPrefix + randomBase32(20)
	return Token{Plain: plain, ID: plain[len(tokenPrefix):][:tokenIDLen], Hash: HashToken(plain)}
}

// HashToken is what the store keeps of a token and looks it up by.
//
// The server finds a token by this hash, never by comparing secrets, so a lookup's timing
// tells an attacker about hashes of their guesses, not about any stored token: no
// constant-time comparison is needed. A plain SHA-256 without salt is enough because a
// token carries 160 random bits; there is no dictionary to defend against.
func HashToken(plain string) string {
	sum := sha256.Sum256([]byte(plain))
	return hex.EncodeToString(sum[:])
}

// TokenID returns the ID of a string that has the shape of a token, and false for anything
// else. It checks the shape only, before any hashing or lookup, so that malformed input is
// refused cheaply and never reaches the store.
func TokenID(plain string) (string, bool) {
	if len(plain) != tokenPlainLen || plain[:len(tokenPrefix)] != tokenPrefix {
		return "", false
	}
	random := plain[len(tokenPrefix):]
	if !isBase32(random) {
		return "", false
	}
	return random[:tokenIDLen], true
}

// randomBase32 renders n random bytes in lower-case base32. crypto/rand.Read never fails
// (since Go 1.24 it crashes the program rather than return short), so neither does this.
func randomBase32(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return b32.EncodeToString(b)
}

// isBase32 reports whether s is made only of b32's alphabet.
func isBase32(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '2' <= c && c <= '7') {
			return false
		}
	}
	return true
}
