package api

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// NewIdempotencyKey is a fresh Idempotency-Key for a submit made at now: 32 hex digits,
// the milliseconds since 1970 in the first 12 and 80 random bits in the rest, so no two
// submits share one and keys made later sort later (as a UUIDv7 does). The server keeps
// each key in an index for a day; keys that arrive in order are written to the index's
// last pages, which one commit of many submits then shares, where random keys would
// each dirty a page of their own.
func NewIdempotencyKey(now time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16)
	rand.Read(b[6:]) // never fails; see its documentation
	return hex.EncodeToString(b[:])
}
