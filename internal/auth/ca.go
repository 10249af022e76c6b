package auth

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/rotahq/rota/internal/atomicfile"
)

const (
	caCertFile   = "ca.crt"
	caKeyFile    = "ca.key"
	caCommonName = "rota cluster CA"
	caYears      = 10

	// backdate starts every certificate's validity an hour early, so that a node whose
	// clock runs somewhat behind the server's can use a certificate issued just now.
	backdate = time.Hour

	// maxNodeName bounds node names as the server's API does.
	maxNodeName = 253
)

// CA is the cluster's certificate authority: it signs the agents' client certificates and
// the server's serving certificate. It never changes once made, so it is safe to share.
type CA struct {
	cert      *x509.Certificate
	certPEM   []byte
	key       crypto.Signer
	pool      *x509.CertPool // holds cert alone
	clusterID string
}

// LoadOrCreateCA loads the CA kept in dir (ca.crt and ca.key), or creates one there when
// neither file exists, and reports whether it created it. clusterID names the cluster the
// CA belongs to; it is recorded as the CA's organisation and must match a CA that exists.
// An empty clusterID accepts any existing CA, and gives a new one a fresh ID.
func LoadOrCreateCA(dir, clusterID string) (*CA, bool, error) {
	if clusterID != "" && !ValidClusterID(clusterID) {
		return nil, false, fmt.Errorf("cluster ID %q is not 16 lower-case hex characters", clusterID)
	}
	certPath, keyPath := filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile)
	certPEM, certErr := os.ReadFile(certPath)
	keyPEM, keyErr := readPrivateFile(keyPath)
	certMissing, keyMissing := errors.Is(certErr, fs.ErrNotExist), errors.Is(keyErr, fs.ErrNotExist)
	switch {
	case certMissing && keyMissing:
		ca, err := createCA(dir, clusterID, time.Now())
		if err != nil {
			return nil, false, fmt.Errorf("creating the cluster CA in %s: %w", dir, err)
		}
		return ca, true, nil
	case keyMissing:
		// createCA writes the certificate first, so this is what a crash during the first
		// start leaves behind, or what losing the key does: either way only a new CA helps.
		return nil, false, fmt.Errorf("%s exists but %s does not: the CA's key is lost or its creation was interrupted; "+
			"remove %s to create a new CA, after which every agent must join again", certPath, keyPath, certPath)
	case certMissing:
		return nil, false, fmt.Errorf("%s exists but %s does not: restore the certificate from a backup", keyPath, certPath)
	case certErr != nil:
		return nil, false, certErr
	case keyErr != nil:
		return nil, false, keyErr
	}
	ca, err := parseCA(certPEM, keyPEM)
	if err != nil {
		return nil, false, fmt.Errorf("cluster CA in %s: %w", dir, err)
	}
	if clusterID != "" && ca.clusterID != clusterID {
		return nil, false, fmt.Errorf("the CA in %s belongs to cluster %s, not %s", dir, ca.clusterID, clusterID)
	}
	return ca, false, nil
}

func createCA(dir, clusterID string, now time.Time) (*CA, error) {
	if clusterID == "" {
		clusterID = NewClusterID()
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: caCommonName, Organization: []string{clusterID}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.AddDate(caYears, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true, // it signs leaves only
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	keyPEM, err := encodeKeyPEM(key)
	if err != nil {
		return nil, err
	}
	certPEM := encodeCertPEM(der)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// The certificate first: then the only half-written state a crash can leave is a
	// certificate without a key, whose remedy is always the same (a new CA).
	if err := atomicfile.Write(filepath.Join(dir, caCertFile), certPEM, 0o644, true); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(filepath.Join(dir, caKeyFile), keyPEM, 0o600, true); err != nil {
		return nil, err
	}
	return parseCA(certPEM, keyPEM)
}

func parseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", caCertFile, err)
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", caKeyFile, err)
	}
	if pub, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(key.Public()) {
		return nil, fmt.Errorf("%s does not belong to %s", caKeyFile, caCertFile)
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("%s is not a CA certificate", caCertFile)
	}
	if len(cert.Subject.Organization) != 1 || !ValidClusterID(cert.Subject.Organization[0]) {
		return nil, fmt.Errorf("%s does not name a cluster ID as its organisation", caCertFile)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{cert: cert, certPEM: certPEM, key: key, pool: pool, clusterID: cert.Subject.Organization[0]}, nil
}

// ClusterID returns the ID of the cluster the CA belongs to.
func (ca *CA) ClusterID() string { return ca.clusterID }

// CertPEM returns the CA's certificate, which agents pin.
func (ca *CA) CertPEM() []byte { return bytes.Clone(ca.certPEM) }

// Fingerprint returns "sha256:" and the hex SHA-256 of the CA certificate: what a join
// token carries and what a client may pin.
func (ca *CA) Fingerprint() string { return fingerprint(ca.cert.Raw) }

// PEMFingerprint is Fingerprint of the first certificate in certPEM: what a client pins
// for the CA whose certificate file it has.
func PEMFingerprint(certPEM []byte) (string, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return "", errors.New("no PEM certificate")
	}
	return fingerprint(block.Bytes), nil
}

func fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return fingerprintPrefix + hex.EncodeToString(sum[:])
}

const fingerprintPrefix = "sha256:"

// IssueNodeCert signs a client certificate for the agent of node from its certificate
// request, valid from now for validity (or until the CA expires, if sooner). It returns the
// certificate, its serial number in lower-case hex (for revocation) and its expiry.
//
// Of the request it keeps only the public key: the name is checked against node, and
// everything else the certificate says is decided here, so an agent cannot ask for more.
func (ca *CA) IssueNodeCert(csrPEM []byte, node string, validity time.Duration) (certPEM []byte, serial string, notAfter time.Time, err error) {
	if err := checkNodeName(node); err != nil {
		return nil, "", time.Time{}, err
	}
	if validity <= 0 {
		return nil, "", time.Time{}, fmt.Errorf("certificate validity must be positive, got %s", validity)
	}
	csr, err := parseCSR(csrPEM)
	if err != nil {
		return nil, "", time.Time{}, err
	}
	if csr.Subject.CommonName != node {
		return nil, "", time.Time{}, fmt.Errorf("the certificate request names node %q, not %q", csr.Subject.CommonName, node)
	}
	now := time.Now()
	return ca.issueNode(node, csr.PublicKey, now.Add(-backdate), now.Add(validity))
}

// issueNode signs a node certificate for pub valid between the two times (notAfter capped
// at the CA's own expiry).
func (ca *CA) issueNode(node string, pub crypto.PublicKey, notBefore, notAfter time.Time) ([]byte, string, time.Time, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: node, Organization: []string{ca.clusterID}},
		URIs:                  []*url.URL{nodeURI(node)},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := ca.sign(tmpl, pub)
	if err != nil {
		return nil, "", time.Time{}, err
	}
	return encodeCertPEM(der), tmpl.SerialNumber.Text(16), tmpl.NotAfter, nil
}

// sign gives tmpl a random serial number, caps its expiry at the CA's and signs it. The
// times are cut to whole seconds in UTC first, as the certificate records them, so that
// tmpl.NotAfter is exactly the expiry the certificate states.
func (ca *CA) sign(tmpl *x509.Certificate, pub crypto.PublicKey) ([]byte, error) {
	tmpl.SerialNumber = randomSerial()
	tmpl.NotBefore = tmpl.NotBefore.UTC().Truncate(time.Second)
	tmpl.NotAfter = tmpl.NotAfter.UTC().Truncate(time.Second)
	if tmpl.NotAfter.After(ca.cert.NotAfter) {
		tmpl.NotAfter = ca.cert.NotAfter
	}
	return x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
}

func parseCSR(csrPEM []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(csrPEM)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("the certificate request is not a PEM block of type CERTIFICATE REQUEST")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("reading the certificate request: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("the certificate request's signature does not verify: %w", err)
	}
	if err := checkPublicKey(csr.PublicKey); err != nil {
		return nil, err
	}
	return csr, nil
}

func checkPublicKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey, ed25519.PublicKey:
		return nil
	case *rsa.PublicKey:
		if n := k.N.BitLen(); n < 2048 {
			return fmt.Errorf("the certificate request's RSA key has %d bits; use 2048 or more, or ECDSA", n)
		}
		return nil
	}
	return fmt.Errorf("the certificate request has a %T key; use ECDSA, Ed25519 or RSA", pub)
}

// ServerCertificate makes a serving certificate for the server, with a new key held only
// in memory, for the given host names and IP addresses. Its chain holds the CA certificate
// after the leaf, so that a client pinning the CA's fingerprint finds it in the handshake.
func (ca *CA) ServerCertificate(hosts []string, validity time.Duration) (tls.Certificate, error) {
	if validity <= 0 {
		return tls.Certificate{}, fmt.Errorf("certificate validity must be positive, got %s", validity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "rota server", Organization: []string{ca.clusterID}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	for _, h := range hosts {
		switch ip := net.ParseIP(h); {
		case ip != nil:
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		case h == "":
			return tls.Certificate{}, errors.New("empty host name for the server certificate")
		default:
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := ca.sign(tmpl, key.Public())
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

// randomSerial returns a random 128-bit serial number, as the baseline requirements ask
// (at least 64 random bits) with room to spare.
func randomSerial() *big.Int {
	b := make([]byte, 16)
	rand.Read(b)
	return new(big.Int).SetBytes(b)
}

// NewClusterID returns a random cluster ID: 16 lower-case hex characters.
func NewClusterID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// ValidClusterID reports whether s has the shape NewClusterID gives.
func ValidClusterID(s string) bool { return len(s) == 16 && isLowerHex(s) }

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// checkNodeName holds node names to the rule of the server's API (letters, digits and
// ._@+-, starting with a letter or digit), which also makes them safe in a URI path.
func checkNodeName(node string) error {
	ok := node != "" && len(node) <= maxNodeName && isAlnum(node[0])
	for i := 1; ok && i < len(node); i++ {
		c := node[i]
		ok = isAlnum(c) || c == '.' || c == '_' || c == '@' || c == '+' || c == '-'
	}
	if !ok {
		return fmt.Errorf("%q is not a valid node name: use up to %d letters, digits and ._@+-, starting with a letter or digit", node, maxNodeName)
	}
	return nil
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// nodeURI is the URI a node certificate carries besides its common name.
func nodeURI(node string) *url.URL { return &url.URL{Scheme: "rota", Host: "node", Path: "/" + node} }
