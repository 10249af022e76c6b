//go:build linux

package auth

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestPeerCred(t *testing.T) {
	// A listening socket and a dialled one: the path the server's local socket takes.
	path := filepath.Join(t.TempDir(), "rota.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()

	for name, c := range map[string]net.Conn{"accepted": server, "dialled": client} {
		uid, gid, pid, err := PeerCred(c)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if uid != os.Getuid() || gid != os.Getgid() || pid != os.Getpid() {
			t.Errorf("%s: PeerCred = uid %d gid %d pid %d; this process is uid %d gid %d pid %d",
				name, uid, gid, pid, os.Getuid(), os.Getgid(), os.Getpid())
		}
	}
}

func TestPeerCredNeedsUnixConn(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, _, _, err := PeerCred(a); err == nil {
		t.Error("PeerCred of a pipe succeeded")
	}
}
