//go:build linux

package auth

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// PeerCred returns the user, group and process IDs of the process at the other end of a
// Unix socket connection, as the kernel recorded them when it connected (SO_PEERCRED); the
// peer cannot lie about them. c must be the *net.UnixConn itself, not a wrapper around it.
func PeerCred(c net.Conn) (uid, gid, pid int, err error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, 0, 0, fmt.Errorf("peer credentials need a Unix socket connection, not a %T", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, 0, 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, 0, 0, err
	}
	if credErr != nil {
		return 0, 0, 0, fmt.Errorf("reading SO_PEERCRED: %w", credErr)
	}
	return int(cred.Uid), int(cred.Gid), int(cred.Pid), nil
}
