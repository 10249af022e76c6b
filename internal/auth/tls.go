package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// ServerTLSConfig is the server's TLS configuration: it serves with serving and asks for a
// client certificate without requiring one, so that people (with API tokens) and agents
// (with certificates of ca) share one port. A certificate that is presented must verify
// against ca, or the handshake fails; NodeFromState then says which node it names.
func ServerTLSConfig(ca *CA, serving tls.Certificate) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{serving},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    ca.pool,
	}
}

// NodeFromState returns the node whose agent is at the other end of a connection served
// with ServerTLSConfig, and its certificate's serial number (lower-case hex) for checking
// revocation. ok is false unless the client presented a certificate that verified and that
// is a node certificate of the cluster clusterID.
func NodeFromState(cs tls.ConnectionState, clusterID string) (node, serial string, ok bool) {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return "", "", false
	}
	leaf := cs.VerifiedChains[0][0]
	node, ok = nodeFromCert(leaf, clusterID)
	if !ok {
		return "", "", false
	}
	return node, leaf.SerialNumber.Text(16), true
}

// nodeFromCert checks that cert says what IssueNodeCert writes for a node of clusterID. It
// does not check the signature.
func nodeFromCert(cert *x509.Certificate, clusterID string) (string, bool) {
	node := cert.Subject.CommonName
	switch {
	case !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth),
		!slices.Equal(cert.Subject.Organization, []string{clusterID}),
		checkNodeName(node) != nil,
		len(cert.URIs) != 1,
		cert.URIs[0].String() != nodeURI(node).String():
		return "", false
	}
	return node, true
}

// Pin is how a client recognises the cluster's server: by its CA, given either as the CA
// certificate or as its fingerprint ("sha256:" and 64 hex digits, as CA.Fingerprint gives).
// When both are set they must agree.
type Pin struct {
	Fingerprint string
	CAPEM       []byte
}

// ClientTLSConfig is the TLS configuration of agents and the CLI. clientCert, when not nil,
// is the agent's node certificate.
//
// The server is verified against the pinned CA rather than by host name: the CA is
// private to the cluster, so whatever names the server is reached by, a certificate it
// signed for server use is the proof. An agent that renews its certificate builds a new
// configuration.
func ClientTLSConfig(pin Pin, clientCert *tls.Certificate) (*tls.Config, error) {
	root, want, err := pin.resolve()
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Go's own verification would check the chain against the system's roots and the
		// host name, neither of which applies to a private CA. VerifyConnection below does
		// the whole verification instead, and it runs on every handshake, resumed or not.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyPinned(cs.PeerCertificates, root, want, time.Now())
		},
	}
	if clientCert != nil {
		cfg.Certificates = []tls.Certificate{*clientCert}
	}
	return cfg, nil
}

// resolve returns the pinned CA certificate, if the pin holds one, and its fingerprint.
func (p Pin) resolve() (*x509.Certificate, string, error) {
	var root *x509.Certificate
	want := strings.ToLower(p.Fingerprint)
	if want != "" && !validFingerprint(want) {
		return nil, "", fmt.Errorf("CA fingerprint %q is not %s followed by 64 hex digits", p.Fingerprint, fingerprintPrefix)
	}
	if len(p.CAPEM) > 0 {
		cert, err := parseCertPEM(p.CAPEM)
		if err != nil {
			return nil, "", fmt.Errorf("pinned CA: %w", err)
		}
		if !cert.IsCA {
			return nil, "", errors.New("pinned CA: the certificate is not a CA's")
		}
		got := fingerprint(cert.Raw)
		if want != "" && want != got {
			return nil, "", fmt.Errorf("pinned CA certificate has fingerprint %s, not the pinned %s", got, want)
		}
		root, want = cert, got
	}
	if want == "" {
		return nil, "", errors.New("no CA pinned: give the cluster's CA certificate or its fingerprint")
	}
	return root, want, nil
}

func validFingerprint(s string) bool {
	hex, ok := strings.CutPrefix(s, fingerprintPrefix)
	return ok && len(hex) == 64 && isLowerHex(hex)
}

// verifyPinned checks that the server's leaf certificate chains to the pinned CA and is
// meant for serving. root is the pinned CA certificate, or nil to look among the presented
// certificates for the one with fingerprint want.
func verifyPinned(presented []*x509.Certificate, root *x509.Certificate, want string, now time.Time) error {
	if len(presented) == 0 {
		return errors.New("the server presented no certificate")
	}
	// The server's CA, as far as its chain tells: the last certificate it presented.
	got := fingerprint(presented[len(presented)-1].Raw)
	if root == nil {
		for _, c := range presented {
			if fingerprint(c.Raw) == want {
				root = c
				break
			}
		}
	}
	if root == nil {
		return mismatch(got, want, nil)
	}
	roots := x509.NewCertPool()
	roots.AddCert(root)
	intermediates := x509.NewCertPool()
	for _, c := range presented[1:] {
		intermediates.AddCert(c)
	}
	_, err := presented[0].Verify(x509.VerifyOptions{
		Roots:         roots,
		Intermediates: intermediates,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err == nil {
		return nil
	}
	if got != want {
		return mismatch(got, want, err)
	}
	return fmt.Errorf("the server's certificate does not verify against the pinned CA %s: %w", want, err)
}

func mismatch(got, want string, err error) error {
	msg := fmt.Sprintf("the server's CA fingerprint %s differs from the pinned %s: "+
		"this server is not the pinned cluster's, or the cluster's CA was replaced", got, want)
	if err != nil {
		return fmt.Errorf("%s (%w)", msg, err)
	}
	return errors.New(msg)
}

// HTTP1Only is c speaking HTTP/1.1 only, which a WebSocket's upgrade needs (the agent's
// and the CLI's attach streams). A client whose transport is not an *http.Transport is
// returned as it is.
func HTTP1Only(c *http.Client) *http.Client {
	t, ok := c.Transport.(*http.Transport)
	if !ok {
		return c
	}
	t = t.Clone()
	t.ForceAttemptHTTP2 = false
	t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	p := new(http.Protocols)
	p.SetHTTP1(true)
	t.Protocols = p
	out := *c
	out.Transport = t
	return &out
}
