package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/atomicfile"
)

// The agent keeps its identity in <data dir>/identity/. That path is a symbolic link to a
// directory written whole (identity.<random>) and never changed afterwards: saving writes
// a new directory and swaps the link with one rename, so a crash during a renewal leaves
// the old identity or the new one, never a new certificate beside an old key.
const (
	identityLink    = "identity"
	identityGenPfx  = "identity."
	identityNewLink = "identity.new"

	idCAFile      = "ca.crt"
	idCertFile    = "node.crt"
	idKeyFile     = "node.key"
	idClusterFile = "cluster"
)

// NodeIdentity is an agent's membership of a cluster: the cluster's CA, which it pins, and
// its node certificate and key, with which it authenticates.
type NodeIdentity struct {
	ClusterID string
	Node      string
	CAPEM     []byte
	CertPEM   []byte
	KeyPEM    []byte
}

// NewNodeKey makes a node's private key (ECDSA P-256), as PEM for NodeCSR and
// NodeIdentity.KeyPEM.
func NewNodeKey() ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return encodeKeyPEM(key)
}

// NodeCSR makes the certificate request an agent sends to join or renew: the public half
// of keyPEM, with node as its common name.
func NodeCSR(keyPEM []byte, node string) ([]byte, error) {
	if err := checkNodeName(node); err != nil {
		return nil, err
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("node key: %w", err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: node}}, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// SaveNodeIdentity writes id to dir/identity, replacing what was there in one step. It
// refuses an identity that LoadNodeIdentity would refuse, except for being expired. The
// agent owning dir is its only writer: concurrent saves to one dir are not supported.
func SaveNodeIdentity(dir string, id NodeIdentity) (err error) {
	if err := id.check(); err != nil {
		return fmt.Errorf("refusing to save the node identity: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	link := filepath.Join(dir, identityLink)
	if fi, err := os.Lstat(link); err == nil && fi.Mode()&fs.ModeSymlink == 0 {
		return fmt.Errorf("%s is not the link rota makes; move it away", link)
	}
	gen, err := os.MkdirTemp(dir, identityGenPfx) // mode 0700
	if err != nil {
		return err
	}
	linked := false
	defer func() {
		if err != nil && !linked {
			os.RemoveAll(gen)
		}
	}()
	files := []struct {
		name string
		data []byte
		perm os.FileMode
	}{
		{idCAFile, id.CAPEM, 0o644},
		{idCertFile, id.CertPEM, 0o644},
		{idKeyFile, id.KeyPEM, 0o600},
		{idClusterFile, []byte(id.ClusterID + "\n"), 0o644},
	}
	for _, f := range files {
		if err := writeFileSync(filepath.Join(gen, f.name), f.data, f.perm); err != nil {
			return err
		}
	}
	if err := atomicfile.SyncDir(gen); err != nil {
		return err
	}
	newLink := filepath.Join(dir, identityNewLink)
	if err := os.Remove(newLink); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	// A relative target keeps the link valid if the whole data directory moves.
	if err := os.Symlink(filepath.Base(gen), newLink); err != nil {
		return err
	}
	if err := os.Rename(newLink, link); err != nil {
		return err
	}
	linked = true
	if err := atomicfile.SyncDir(dir); err != nil {
		return err
	}
	removeOldIdentities(dir, filepath.Base(gen))
	return nil
}

// removeOldIdentities removes the identity directories other than current: the one just
// replaced and any that a crash left behind. Failing is harmless (the next save tries
// again), so errors are ignored.
func removeOldIdentities(dir, current string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), identityGenPfx) && e.Name() != current {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// LoadNodeIdentity reads what SaveNodeIdentity wrote in dir. found is false, with no
// error, when there is no identity (the agent has not joined); an identity that is there
// but unusable is an error, with found true. An expired identity loads: NotAfter tells.
func LoadNodeIdentity(dir string) (id NodeIdentity, found bool, err error) {
	base := filepath.Join(dir, identityLink)
	if _, err := os.Lstat(base); errors.Is(err, fs.ErrNotExist) {
		return NodeIdentity{}, false, nil
	} else if err != nil {
		return NodeIdentity{}, false, err
	}
	fail := func(err error) (NodeIdentity, bool, error) {
		return NodeIdentity{}, true, fmt.Errorf("node identity in %s: %w", base, err)
	}
	if id.CAPEM, err = os.ReadFile(filepath.Join(base, idCAFile)); err != nil {
		return fail(err)
	}
	if id.CertPEM, err = os.ReadFile(filepath.Join(base, idCertFile)); err != nil {
		return fail(err)
	}
	if id.KeyPEM, err = readPrivateFile(filepath.Join(base, idKeyFile)); err != nil {
		return fail(err)
	}
	cluster, err := os.ReadFile(filepath.Join(base, idClusterFile))
	if err != nil {
		return fail(err)
	}
	id.ClusterID = strings.TrimSpace(string(cluster))
	cert, err := parseCertPEM(id.CertPEM)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", idCertFile, err))
	}
	id.Node = cert.Subject.CommonName
	if err := id.check(); err != nil {
		return fail(err)
	}
	return id, true, nil
}

// check verifies that the parts of id belong together: the key to the certificate, the
// certificate to the CA, and both to the cluster and the node. Expiry is not checked.
func (id NodeIdentity) check() error {
	if !ValidClusterID(id.ClusterID) {
		return fmt.Errorf("cluster ID %q is not 16 lower-case hex characters", id.ClusterID)
	}
	ca, err := parseCertPEM(id.CAPEM)
	if err != nil {
		return fmt.Errorf("%s: %w", idCAFile, err)
	}
	if !ca.IsCA || !slices.Equal(ca.Subject.Organization, []string{id.ClusterID}) {
		return fmt.Errorf("%s is not the CA of cluster %s", idCAFile, id.ClusterID)
	}
	pair, err := tls.X509KeyPair(id.CertPEM, id.KeyPEM)
	if err != nil {
		return fmt.Errorf("%s and %s: %w", idCertFile, idKeyFile, err)
	}
	leaf := pair.Leaf
	node, ok := nodeFromCert(leaf, id.ClusterID)
	if !ok {
		return fmt.Errorf("%s is not a node certificate of cluster %s", idCertFile, id.ClusterID)
	}
	if node != id.Node {
		return fmt.Errorf("%s is for node %q, not %q", idCertFile, node, id.Node)
	}
	// The signature alone, not the validity period: an expired identity is still this
	// cluster's, and the agent should hear that it expired rather than that it is foreign.
	if err := leaf.CheckSignatureFrom(ca); err != nil {
		return fmt.Errorf("%s is not signed by %s: %w", idCertFile, idCAFile, err)
	}
	return nil
}

// TLSCertificate returns the node certificate and key for ClientTLSConfig.
func (id NodeIdentity) TLSCertificate() (tls.Certificate, error) {
	return tls.X509KeyPair(id.CertPEM, id.KeyPEM)
}

// NotAfter returns when the node certificate expires, or the zero time if it cannot be read
// (which an identity from LoadNodeIdentity always can).
func (id NodeIdentity) NotAfter() time.Time {
	cert, err := parseCertPEM(id.CertPEM)
	if err != nil {
		return time.Time{}
	}
	return cert.NotAfter
}

// Pin returns the pin for the cluster's server: its CA certificate.
func (id NodeIdentity) Pin() Pin { return Pin{CAPEM: id.CAPEM} }
