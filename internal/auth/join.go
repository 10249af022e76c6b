package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// A join token reads rotajoin1.<cluster ID>.<CA fingerprint hex>.<ID>.<secret>. It carries
// all an agent needs to join safely: which cluster, how to recognise the server (its CA's
// fingerprint), and the one-time secret that proves an admin let it in.
const (
	joinPrefix    = "rotajoin1"
	joinIDLen     = 8  // base32 characters: 5 random bytes
	joinSecretLen = 32 // base32 characters: 20 random bytes
	// maxJoinToken is longer than any valid token; longer input is refused unread.
	maxJoinToken = 256
	joinTokenLen = len(joinPrefix) + 1 + 16 + 1 + 64 + 1 + joinIDLen + 1 + joinSecretLen
)

// JoinToken lets one agent (or a few, as the server allows) obtain a node certificate.
type JoinToken struct {
	ClusterID string
	// CAFingerprint is "sha256:" and the hex SHA-256 of the cluster's CA certificate.
	CAFingerprint string
	// ID names the token in lists and in the server's store.
	ID string
	// Secret is what the server checks, through SecretHash.
	Secret string
}

// NewJoinToken makes a join token for the cluster whose CA has the given fingerprint.
func NewJoinToken(clusterID, caFingerprint string) (JoinToken, error) {
	if !ValidClusterID(clusterID) {
		return JoinToken{}, fmt.Errorf("cluster ID %q is not 16 lower-case hex characters", clusterID)
	}
	if !validFingerprint(caFingerprint) {
		return JoinToken{}, fmt.Errorf("CA fingerprint %q is not %s followed by 64 lower-case hex digits", caFingerprint, fingerprintPrefix)
	}
	return JoinToken{
		ClusterID:     clusterID,
		CAFingerprint: caFingerprint,
		ID:            randomBase32(5),
		Secret:        randomBase32(20),
	}, nil
}

// String renders the token as the admin passes it to `rota agent --join`.
func (t JoinToken) String() string {
	return strings.Join([]string{joinPrefix, t.ClusterID, strings.TrimPrefix(t.CAFingerprint, fingerprintPrefix), t.ID, t.Secret}, ".")
}

// ParseJoinToken reads what String renders. Its errors say which part is wrong and never
// quote the input, which holds the secret.
func ParseJoinToken(s string) (JoinToken, error) {
	if len(s) > maxJoinToken {
		return JoinToken{}, fmt.Errorf("join token is %d characters long; a join token has %d", len(s), joinTokenLen)
	}
	parts := strings.Split(s, ".")
	if parts[0] != joinPrefix {
		return JoinToken{}, errors.New("not a rota join token: it should start with " + joinPrefix + ".")
	}
	if len(parts) != 5 {
		return JoinToken{}, fmt.Errorf("join token has %d dot-separated parts, not 5: is it complete?", len(parts))
	}
	t := JoinToken{ClusterID: parts[1], CAFingerprint: fingerprintPrefix + parts[2], ID: parts[3], Secret: parts[4]}
	switch {
	case !ValidClusterID(t.ClusterID):
		return JoinToken{}, fmt.Errorf("join token's cluster ID (part 2) has %d characters; it must be 16 lower-case hex digits", len(parts[1]))
	case len(parts[2]) != 64 || !isLowerHex(parts[2]):
		return JoinToken{}, fmt.Errorf("join token's CA fingerprint (part 3) has %d characters; it must be 64 lower-case hex digits", len(parts[2]))
	case len(t.ID) != joinIDLen || !isBase32(t.ID):
		return JoinToken{}, fmt.Errorf("join token's ID (part 4) has %d characters; it must be %d of a-z and 2-7", len(t.ID), joinIDLen)
	case len(t.Secret) != joinSecretLen || !isBase32(t.Secret):
		return JoinToken{}, fmt.Errorf("join token's secret (part 5) has %d characters; it must be %d of a-z and 2-7", len(t.Secret), joinSecretLen)
	}
	return t, nil
}

// SecretHash is the hex SHA-256 of the secret: what the server stores instead of it.
func (t JoinToken) SecretHash() string {
	sum := sha256.Sum256([]byte(t.Secret))
	return hex.EncodeToString(sum[:])
}

// SecretMatches reports whether the token's secret is the one whose SecretHash the server
// stored. The server finds the stored hash by the token's ID, so here, unlike for API
// tokens, hashes are compared; in constant time, which costs nothing and spares everyone
// the argument for why leaking a hash prefix would be harmless.
func (t JoinToken) SecretMatches(storedHash string) bool {
	return subtle.ConstantTimeCompare([]byte(t.SecretHash()), []byte(storedHash)) == 1
}

// Pin is how the joining agent recognises the cluster's server.
func (t JoinToken) Pin() Pin { return Pin{Fingerprint: t.CAFingerprint} }
