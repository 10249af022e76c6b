package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// newTestCA creates a CA in a fresh directory.
func newTestCA(t testing.TB) *CA {
	t.Helper()
	ca, created, err := LoadOrCreateCA(t.TempDir(), "")
	if err != nil || !created {
		t.Fatalf("LoadOrCreateCA = %v, created %v", err, created)
	}
	return ca
}

// csrFor makes a PEM certificate request for key with the given common name.
func csrFor(t testing.TB, key crypto.Signer, cn string) []byte {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: cn}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

func mustParseCert(t testing.TB, certPEM []byte) *x509.Certificate {
	t.Helper()
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestLoadOrCreateCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data") // does not exist yet
	before := time.Now()
	ca, created, err := LoadOrCreateCA(dir, "")
	if err != nil || !created {
		t.Fatalf("LoadOrCreateCA = %v, created %v", err, created)
	}
	if !ValidClusterID(ca.ClusterID()) {
		t.Errorf("new CA has cluster ID %q", ca.ClusterID())
	}
	if m := fileMode(t, filepath.Join(dir, "ca.key")); m != 0o600 {
		t.Errorf("ca.key has mode %04o, want 0600", m)
	}
	if m := fileMode(t, filepath.Join(dir, "ca.crt")); m != 0o644 {
		t.Errorf("ca.crt has mode %04o, want 0644", m)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("the data directory holds %d entries, want ca.crt and ca.key alone", len(entries))
	}

	onDisk, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil || string(onDisk) != string(ca.CertPEM()) {
		t.Fatalf("ca.crt differs from CertPEM(): %v", err)
	}
	cert := mustParseCert(t, onDisk)
	sum := sha256.Sum256(cert.Raw)
	if want := "sha256:" + hex.EncodeToString(sum[:]); ca.Fingerprint() != want {
		t.Errorf("Fingerprint() = %s, want %s", ca.Fingerprint(), want)
	}
	if _, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || cert.PublicKey.(*ecdsa.PublicKey).Curve != elliptic.P256() {
		t.Errorf("CA key is %T, want ECDSA P-256", cert.PublicKey)
	}
	switch {
	case !cert.IsCA || !cert.BasicConstraintsValid:
		t.Error("CA certificate is not a CA")
	case cert.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign:
		t.Errorf("CA key usage %b", cert.KeyUsage)
	case cert.Subject.CommonName != "rota cluster CA" || !slices.Equal(cert.Subject.Organization, []string{ca.ClusterID()}):
		t.Errorf("CA subject %s", cert.Subject)
	case cert.CheckSignatureFrom(cert) != nil:
		t.Error("CA certificate is not self-signed")
	case cert.NotAfter.Before(before.AddDate(10, 0, -1)) || cert.NotAfter.After(time.Now().AddDate(10, 0, 1)):
		t.Errorf("CA expires %s, not in 10 years", cert.NotAfter)
	case cert.NotBefore.After(before):
		t.Errorf("CA valid only from %s", cert.NotBefore)
	}

	again, created, err := LoadOrCreateCA(dir, ca.ClusterID())
	if err != nil || created {
		t.Fatalf("reloading: %v, created %v", err, created)
	}
	if again.Fingerprint() != ca.Fingerprint() || again.ClusterID() != ca.ClusterID() {
		t.Errorf("reloaded CA %s of %s differs from %s of %s", again.Fingerprint(), again.ClusterID(), ca.Fingerprint(), ca.ClusterID())
	}
	// The reloaded key signs for the same certificate.
	certPEM, _, _, err := again.IssueNodeCert(csrFor(t, mustECKey(t), "gpu-01"), "gpu-01", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := mustParseCert(t, certPEM).CheckSignatureFrom(cert); err != nil {
		t.Errorf("the reloaded CA signs with another key: %v", err)
	}

	_, _, err = LoadOrCreateCA(dir, "ffffffffffffffff")
	if err == nil || !strings.Contains(err.Error(), ca.ClusterID()) || !strings.Contains(err.Error(), "ffffffffffffffff") {
		t.Errorf("loading with another cluster ID: %v", err)
	}
}

func TestLoadOrCreateCAUsesClusterID(t *testing.T) {
	ca, created, err := LoadOrCreateCA(t.TempDir(), "00000000000000aa")
	if err != nil || !created || ca.ClusterID() != "00000000000000aa" {
		t.Fatalf("got %v, created %v, err %v", ca, created, err)
	}
	for _, bad := range []string{"xyz", "00000000000000AA", "00000000000000aa0"} {
		if _, _, err := LoadOrCreateCA(t.TempDir(), bad); err == nil {
			t.Errorf("accepted cluster ID %q", bad)
		}
	}
}

func TestLoadCARefusesReadableKey(t *testing.T) {
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620} {
		dir := t.TempDir()
		if _, _, err := LoadOrCreateCA(dir, ""); err != nil {
			t.Fatal(err)
		}
		keyPath := filepath.Join(dir, "ca.key")
		if err := os.Chmod(keyPath, mode); err != nil {
			t.Fatal(err)
		}
		_, _, err := LoadOrCreateCA(dir, "")
		if err == nil {
			t.Errorf("loaded a CA key of mode %04o", mode)
			continue
		}
		if !strings.Contains(err.Error(), "chmod 600 "+keyPath) {
			t.Errorf("mode %04o: error %q does not say how to fix it", mode, err)
		}
	}
}

func TestLoadCAHalfPresent(t *testing.T) {
	tests := []struct{ remove, want string }{
		{"ca.key", "remove "},
		{"ca.crt", "restore the certificate"},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		if _, _, err := LoadOrCreateCA(dir, ""); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(dir, tt.remove)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := LoadOrCreateCA(dir, ""); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("without %s: error %v, want one saying %q", tt.remove, err, tt.want)
		}
	}
}

func TestLoadCAKeyOfAnotherCA(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	for _, d := range []string{dir, other} {
		if _, _, err := LoadOrCreateCA(d, ""); err != nil {
			t.Fatal(err)
		}
	}
	key, err := os.ReadFile(filepath.Join(other, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrCreateCA(dir, ""); err == nil || !strings.Contains(err.Error(), "does not belong") {
		t.Errorf("loaded a CA with another CA's key: %v", err)
	}
}

func mustECKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func TestIssueNodeCert(t *testing.T) {
	ca := newTestCA(t)
	// Whatever else the request asks for is ignored.
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: "gpu-01", Organization: []string{"ffffffffffffffff"}},
		DNSNames: []string{"server.example"},
	}, mustECKey(t))
	if err != nil {
		t.Fatal(err)
	}
	csr := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	before := time.Now()
	certPEM, serial, notAfter, err := ca.IssueNodeCert(csr, "gpu-01", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert := mustParseCert(t, certPEM)
	switch {
	case cert.Subject.CommonName != "gpu-01" || !slices.Equal(cert.Subject.Organization, []string{ca.ClusterID()}):
		t.Errorf("subject %s", cert.Subject)
	case len(cert.URIs) != 1 || cert.URIs[0].String() != "rota://node/gpu-01":
		t.Errorf("URIs %v", cert.URIs)
	case len(cert.DNSNames) != 0 || len(cert.IPAddresses) != 0:
		t.Errorf("copied the request's names: %v %v", cert.DNSNames, cert.IPAddresses)
	case !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) || len(cert.UnknownExtKeyUsage) != 0:
		t.Errorf("extended key usage %v", cert.ExtKeyUsage)
	case cert.KeyUsage != x509.KeyUsageDigitalSignature:
		t.Errorf("key usage %b", cert.KeyUsage)
	case cert.IsCA:
		t.Error("a node certificate is a CA")
	case serial != cert.SerialNumber.Text(16) || serial != strings.ToLower(serial):
		t.Errorf("serial %q, certificate has %x", serial, cert.SerialNumber)
	case cert.SerialNumber.BitLen() < 100: // 128 random bits: below 100 with odds 2^-28
		t.Errorf("serial %x is too short to be random", cert.SerialNumber)
	case !notAfter.Equal(cert.NotAfter):
		t.Errorf("returned expiry %s, certificate has %s", notAfter, cert.NotAfter)
	case notAfter.Before(before.Add(24*time.Hour-time.Second)) || notAfter.After(time.Now().Add(24*time.Hour)):
		t.Errorf("expires %s, not in 24h", notAfter)
	case cert.NotBefore.After(before):
		t.Errorf("valid only from %s", cert.NotBefore)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("node certificate does not verify: %v", err)
	}
	longPEM, _, long, err := ca.IssueNodeCert(csr, "gpu-01", 100*365*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if caCert := mustParseCert(t, ca.CertPEM()); !long.Equal(caCert.NotAfter) || !mustParseCert(t, longPEM).NotAfter.Equal(caCert.NotAfter) {
		t.Errorf("a certificate asked for 100 years expires %s, not with the CA at %s", long, caCert.NotAfter)
	}
	_, serial2, _, _ := ca.IssueNodeCert(csr, "gpu-01", time.Hour)
	if serial2 == serial {
		t.Error("two certificates share a serial number")
	}
}

func TestIssueNodeCertKeys(t *testing.T) {
	ca := newTestCA(t)
	rsa1024, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	rsa2048, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		key     crypto.Signer
		wantErr string
	}{
		{"ECDSA P-256", mustECKey(t), ""},
		{"ECDSA P-384", p384, ""},
		{"Ed25519", ed, ""},
		{"RSA 2048", rsa2048, ""},
		{"RSA 1024", rsa1024, "1024 bits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, _, err := ca.IssueNodeCert(csrFor(t, tt.key, "gpu-01"), "gpu-01", time.Hour)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
			}
		})
	}
}

func TestIssueNodeCertRefuses(t *testing.T) {
	ca := newTestCA(t)
	key := mustECKey(t)
	good := csrFor(t, key, "gpu-01")
	block, _ := pem.Decode(good)
	tampered := slices.Clone(block.Bytes)
	tampered[len(tampered)-1] ^= 1 // in the signature
	tests := []struct {
		name     string
		csr      []byte
		node     string
		validity time.Duration
		wantErr  string
	}{
		{"CN of another node", csrFor(t, key, "gpu-02"), "gpu-01", time.Hour, `names node "gpu-02", not "gpu-01"`},
		{"empty CN", csrFor(t, key, ""), "gpu-01", time.Hour, `names node "", not "gpu-01"`},
		{"bad signature", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: tampered}), "gpu-01", time.Hour, "signature"},
		{"not PEM", block.Bytes, "gpu-01", time.Hour, "PEM"},
		{"a certificate, not a request", ca.CertPEM(), "gpu-01", time.Hour, "CERTIFICATE REQUEST"},
		{"garbage in PEM", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte("nope")}), "gpu-01", time.Hour, "reading the certificate request"},
		{"invalid node name", csrFor(t, key, "gpu 01"), "gpu 01", time.Hour, "not a valid node name"},
		{"node name with a slash", csrFor(t, key, "a/../b"), "a/../b", time.Hour, "not a valid node name"},
		{"zero validity", good, "gpu-01", 0, "validity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			certPEM, _, _, err := ca.IssueNodeCert(tt.csr, tt.node, tt.validity)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one saying %q", err, tt.wantErr)
			}
			if certPEM != nil {
				t.Error("returned a certificate with the error")
			}
		})
	}
}

func TestServerCertificate(t *testing.T) {
	ca := newTestCA(t)
	sc, err := ca.ServerCertificate([]string{"localhost", "127.0.0.1", "::1", "rota.example"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Certificate) != 2 || string(sc.Certificate[1]) != string(mustParseCert(t, ca.CertPEM()).Raw) {
		t.Fatalf("chain of %d certificates does not end with the CA", len(sc.Certificate))
	}
	leaf, err := x509.ParseCertificate(sc.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, ip := range leaf.IPAddresses {
		ips = append(ips, ip.String())
	}
	switch {
	case !slices.Equal(leaf.DNSNames, []string{"localhost", "rota.example"}):
		t.Errorf("DNS names %v", leaf.DNSNames)
	case !slices.Equal(ips, []string{"127.0.0.1", "::1"}):
		t.Errorf("IP addresses %v", ips)
	case !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}):
		t.Errorf("extended key usage %v", leaf.ExtKeyUsage)
	case leaf.IsCA:
		t.Error("the serving certificate is a CA")
	case sc.Leaf == nil || !sc.Leaf.Equal(leaf):
		t.Error("Leaf is not the chain's leaf")
	}
	if _, ok := sc.PrivateKey.(*ecdsa.PrivateKey); !ok {
		t.Errorf("serving key is %T", sc.PrivateKey)
	}
	if _, err := ca.ServerCertificate([]string{"localhost", ""}, time.Hour); err == nil {
		t.Error("accepted an empty host name")
	}
}

// The fingerprint read from the CA's certificate file is the one the CA gives, so a
// client pinning it from the file trusts that CA; anything but a certificate is refused.
func TestPEMFingerprint(t *testing.T) {
	ca := newTestCA(t)
	got, err := PEMFingerprint(ca.CertPEM())
	if err != nil || got != ca.Fingerprint() {
		t.Errorf("PEMFingerprint = %q, %v; want %q", got, err, ca.Fingerprint())
	}
	if other := newTestCA(t); got == other.Fingerprint() {
		t.Error("two CAs have one fingerprint")
	}
	for _, bad := range []string{"", "not PEM", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"} {
		if fp, err := PEMFingerprint([]byte(bad)); err == nil {
			t.Errorf("PEMFingerprint(%q) = %q, want an error", bad, fp)
		}
	}
}
