//go:build !linux

package auth

import (
	"errors"
	"fmt"
	"net"
)

// PeerCred is implemented on Linux only, where the server's local socket identifies its
// callers; elsewhere it always fails.
func PeerCred(c net.Conn) (uid, gid, pid int, err error) {
	return 0, 0, 0, fmt.Errorf("peer credentials of a Unix socket: %w on this system", errors.ErrUnsupported)
}
