package auth

import (
	"bytes"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// joinAs does what an agent does to join: a key, a request, a certificate from ca.
func joinAs(t *testing.T, ca *CA, node string) NodeIdentity {
	t.Helper()
	key, err := NewNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := NodeCSR(key, node)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, _, err := ca.IssueNodeCert(csr, node, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return NodeIdentity{ClusterID: ca.ClusterID(), Node: node, CAPEM: ca.CertPEM(), CertPEM: certPEM, KeyPEM: key}
}

func identityEqual(a, b NodeIdentity) bool {
	return a.ClusterID == b.ClusterID && a.Node == b.Node &&
		bytes.Equal(a.CAPEM, b.CAPEM) && bytes.Equal(a.CertPEM, b.CertPEM) && bytes.Equal(a.KeyPEM, b.KeyPEM)
}

// identityDirs lists the identity directories in dir.
func identityDirs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "identity.") {
			names = append(names, e.Name())
		}
	}
	return names
}

func TestNodeIdentityRoundTrip(t *testing.T) {
	ca := newTestCA(t)
	dir := filepath.Join(t.TempDir(), "agent")
	if _, found, err := LoadNodeIdentity(dir); found || err != nil {
		t.Fatalf("before joining: found %v, %v", found, err)
	}
	id := joinAs(t, ca, "gpu-01")
	if err := SaveNodeIdentity(dir, id); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{"identity": 0o700, "identity/node.key": 0o600, "identity/node.crt": 0o644, "identity/ca.crt": 0o644, "identity/cluster": 0o644} {
		if m := fileMode(t, filepath.Join(dir, name)); m != want {
			t.Errorf("%s has mode %04o, want %04o", name, m, want)
		}
	}
	got, found, err := LoadNodeIdentity(dir)
	if err != nil || !found || !identityEqual(got, id) {
		t.Fatalf("LoadNodeIdentity = %+v, %v, %v", got, found, err)
	}
	if na := got.NotAfter(); !na.Equal(mustParseCert(t, id.CertPEM).NotAfter) || na.Before(time.Now()) {
		t.Errorf("NotAfter() = %s", na)
	}
	if pin := got.Pin(); !bytes.Equal(pin.CAPEM, ca.CertPEM()) {
		t.Error("Pin() does not hold the CA")
	}
	cert, err := got.TLSCertificate()
	if err != nil || cert.Leaf == nil || cert.Leaf.Subject.CommonName != "gpu-01" {
		t.Fatalf("TLSCertificate = %v, %v", cert.Leaf, err)
	}

	// A renewal replaces the whole identity and leaves no old one behind.
	renewed := joinAs(t, ca, "gpu-01")
	if err := SaveNodeIdentity(dir, renewed); err != nil {
		t.Fatal(err)
	}
	if got, _, err := LoadNodeIdentity(dir); err != nil || !identityEqual(got, renewed) {
		t.Fatalf("after renewal: %v; the old identity is still there: %v", err, identityEqual(got, id))
	}
	if dirs := identityDirs(t, dir); len(dirs) != 1 {
		t.Errorf("identity directories after renewal: %v", dirs)
	}
}

func TestSaveNodeIdentityRefuses(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	good := joinAs(t, ca, "gpu-01")
	otherKey, err := NewNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	foreign := joinAs(t, other, "gpu-01")
	twin, _, err := LoadOrCreateCA(t.TempDir(), ca.ClusterID()) // same names, another key
	if err != nil {
		t.Fatal(err)
	}
	forged := joinAs(t, twin, "gpu-01")
	tests := []struct {
		name    string
		mutate  func(*NodeIdentity)
		wantErr string
	}{
		{"another key", func(id *NodeIdentity) { id.KeyPEM = otherKey }, "node.key"},
		{"another node", func(id *NodeIdentity) { id.Node = "gpu-02" }, `for node "gpu-01", not "gpu-02"`},
		{"another cluster ID", func(id *NodeIdentity) { id.ClusterID = other.ClusterID() }, "not the CA of cluster"},
		{"malformed cluster ID", func(id *NodeIdentity) { id.ClusterID = "../x" }, "cluster ID"},
		{"CA of another cluster", func(id *NodeIdentity) { id.CAPEM = other.CertPEM() }, "not the CA of cluster"},
		{"certificate of another CA", func(id *NodeIdentity) {
			id.CertPEM, id.KeyPEM = foreign.CertPEM, foreign.KeyPEM
		}, "not a node certificate of cluster"},
		{"certificate of a CA with the same names", func(id *NodeIdentity) {
			id.CertPEM, id.KeyPEM = forged.CertPEM, forged.KeyPEM
		}, "not signed by ca.crt"},
		{"the CA as the certificate", func(id *NodeIdentity) { id.CertPEM = ca.CertPEM() }, "node.crt"},
		{"no key", func(id *NodeIdentity) { id.KeyPEM = nil }, "node.key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := SaveNodeIdentity(dir, good); err != nil {
				t.Fatal(err)
			}
			bad := good
			tt.mutate(&bad)
			err := SaveNodeIdentity(dir, bad)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
			}
			if got, _, err := LoadNodeIdentity(dir); err != nil || !identityEqual(got, good) {
				t.Errorf("the refused save changed the saved identity: %v", err)
			}
		})
	}
}

func TestSaveNodeIdentityAfterCrash(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	if err := SaveNodeIdentity(dir, joinAs(t, ca, "gpu-01")); err != nil {
		t.Fatal(err)
	}
	// What a crash during the next save could leave: a half-written directory, and the
	// new link not yet renamed into place.
	if err := os.Mkdir(filepath.Join(dir, "identity.123"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "identity.123", "node.key"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("identity.123", filepath.Join(dir, "identity.new")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadNodeIdentity(dir); err != nil {
		t.Fatalf("the leftovers disturb loading: %v", err)
	}
	id := joinAs(t, ca, "gpu-01")
	if err := SaveNodeIdentity(dir, id); err != nil {
		t.Fatal(err)
	}
	if got, _, err := LoadNodeIdentity(dir); err != nil || !identityEqual(got, id) {
		t.Fatalf("LoadNodeIdentity after the save: %v", err)
	}
	if dirs := identityDirs(t, dir); len(dirs) != 1 || dirs[0] == "identity.123" {
		t.Errorf("identity directories: %v", dirs)
	}
}

func TestLoadNodeIdentityRefuses(t *testing.T) {
	ca := newTestCA(t)
	tests := []struct {
		name    string
		damage  func(t *testing.T, dir string)
		wantErr string
	}{
		{"readable key", func(t *testing.T, dir string) {
			if err := os.Chmod(filepath.Join(dir, "identity", "node.key"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "chmod 600"},
		{"missing certificate", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "identity", "node.crt")); err != nil {
				t.Fatal(err)
			}
		}, "node.crt"},
		{"other cluster file", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "identity", "cluster"), []byte("ffffffffffffffff\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "not the CA of cluster ffffffffffffffff"},
		{"dangling link", func(t *testing.T, dir string) {
			for _, d := range identityDirs(t, dir) {
				if err := os.RemoveAll(filepath.Join(dir, d)); err != nil {
					t.Fatal(err)
				}
			}
		}, "ca.crt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := SaveNodeIdentity(dir, joinAs(t, ca, "gpu-01")); err != nil {
				t.Fatal(err)
			}
			tt.damage(t, dir)
			_, found, err := LoadNodeIdentity(dir)
			if !found || err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("LoadNodeIdentity: found %v, error %v; want one saying %q", found, err, tt.wantErr)
			}
		})
	}
}

func TestExpiredNodeIdentityLoads(t *testing.T) {
	now := time.Now()
	ca, err := createCA(t.TempDir(), "", now.Add(-72*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	key, err := NewNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := parseKeyPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, _, err := ca.issueNode("gpu-01", signer.Public(), now.Add(-48*time.Hour), now.Add(-24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := SaveNodeIdentity(dir, NodeIdentity{ClusterID: ca.ClusterID(), Node: "gpu-01", CAPEM: ca.CertPEM(), CertPEM: certPEM, KeyPEM: key}); err != nil {
		t.Fatal(err)
	}
	id, found, err := LoadNodeIdentity(dir)
	if err != nil || !found {
		t.Fatalf("an expired identity does not load: %v", err)
	}
	if !id.NotAfter().Before(now) {
		t.Errorf("NotAfter() = %s, not in the past", id.NotAfter())
	}
}

func TestNodeCSR(t *testing.T) {
	key, err := NewNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	csrPEM, err := NodeCSR(key, "gpu-01")
	if err != nil {
		t.Fatal(err)
	}
	csr, err := parseCSR(csrPEM)
	if err != nil || csr.Subject.CommonName != "gpu-01" {
		t.Fatalf("parseCSR = %v, %v", csr, err)
	}
	if _, err := NodeCSR(key, "gpu 01"); err == nil {
		t.Error("made a request for an invalid node name")
	}
	if _, err := NodeCSR([]byte("not a key"), "gpu-01"); err == nil {
		t.Error("made a request without a key")
	}
	// The key of the identity is the key of the request.
	pair, err := tls.X509KeyPair(joinAs(t, newTestCA(t), "gpu-01").CertPEM, key)
	if err == nil {
		t.Errorf("a certificate for another key matches this one: %v", pair.Leaf.Subject)
	}
}

func TestSaveNodeIdentityLeavesForeignDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "identity"), 0o700); err != nil {
		t.Fatal(err)
	}
	err := SaveNodeIdentity(dir, joinAs(t, newTestCA(t), "gpu-01"))
	if err == nil || !strings.Contains(err.Error(), "move it away") {
		t.Fatalf("error %v, want one saying to move the directory away", err)
	}
	if dirs := identityDirs(t, dir); len(dirs) != 0 {
		t.Errorf("the refused save left %v", dirs)
	}
}
