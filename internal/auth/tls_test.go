package auth

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"
)

// handshake runs one TLS connection over loopback TCP. It returns the server's connection
// state and error, and the client's error from the handshake or from reading the byte the
// server sends after it: under TLS 1.3 a client learns only then that the server refused
// its certificate.
func handshake(t testing.TB, server, client *tls.Config) (tls.ConnectionState, error, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		state tls.ConnectionState
		err   error
	}
	done := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Server(c, server)
		if err := tc.Handshake(); err != nil {
			done <- result{err: err}
			return
		}
		_, err = tc.Write([]byte{1})
		done <- result{state: tc.ConnectionState(), err: err}
	}()
	var clientErr error
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ln.Addr().String(), client)
	if err != nil {
		clientErr = err
	} else {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		_, clientErr = io.ReadFull(c, make([]byte, 1))
		c.Close()
	}
	ln.Close() // unblocks Accept if the client never connected
	r := <-done
	return r.state, r.err, clientErr
}

// testServer is a CA and the TLS configuration rota serves with.
type testServer struct {
	ca  *CA
	cfg *tls.Config
}

func newTestServer(t testing.TB) testServer {
	t.Helper()
	ca := newTestCA(t)
	serving, err := ca.ServerCertificate([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return testServer{ca: ca, cfg: ServerTLSConfig(ca, serving)}
}

// nodeCert issues a node certificate for node from ca, valid for an hour.
func nodeCert(t testing.TB, ca *CA, node string) (tls.Certificate, string) {
	t.Helper()
	key, err := NewNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := NodeCSR(key, node)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, serial, _, err := ca.IssueNodeCert(csr, node, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, key)
	if err != nil {
		t.Fatal(err)
	}
	return pair, serial
}

// expiredNodeCert issues a node certificate for node from ca that expired yesterday.
func expiredNodeCert(t *testing.T, ca *CA, node string) tls.Certificate {
	t.Helper()
	key := mustECKey(t)
	now := time.Now()
	certPEM, _, _, err := ca.issueNode(node, key.Public(), now.Add(-48*time.Hour), now.Add(-24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{mustParseCert(t, certPEM).Raw}, PrivateKey: key}
}

// craftedCert signs a client certificate for node with ca's key but lets mutate change the
// template first: certificates that rota never issues, to show they are not nodes.
func craftedCert(t *testing.T, ca *CA, node string, mutate func(*x509.Certificate)) tls.Certificate {
	t.Helper()
	key := mustECKey(t)
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: node, Organization: []string{ca.ClusterID()}},
		URIs:        []*url.URL{nodeURI(node)},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	mutate(tmpl)
	der, err := ca.sign(tmpl, key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func clientConfig(t testing.TB, pin Pin, cert *tls.Certificate, maxVersion uint16) *tls.Config {
	t.Helper()
	cfg, err := ClientTLSConfig(pin, cert)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxVersion = maxVersion
	return cfg
}

var tlsVersions = []struct {
	name    string
	version uint16
}{{"TLS1.2", tls.VersionTLS12}, {"TLS1.3", tls.VersionTLS13}}

func TestAgentIsIdentified(t *testing.T) {
	srv := newTestServer(t)
	cert, serial := nodeCert(t, srv.ca, "gpu-01")
	pins := map[string]Pin{
		"fingerprint": {Fingerprint: srv.ca.Fingerprint()},
		"upper-case":  {Fingerprint: "sha256:" + strings.ToUpper(strings.TrimPrefix(srv.ca.Fingerprint(), "sha256:"))},
		"CA":          {CAPEM: srv.ca.CertPEM()},
		"both":        {Fingerprint: srv.ca.Fingerprint(), CAPEM: srv.ca.CertPEM()},
	}
	for _, v := range tlsVersions {
		for name, pin := range pins {
			t.Run(v.name+"/"+name, func(t *testing.T) {
				state, serverErr, clientErr := handshake(t, srv.cfg, clientConfig(t, pin, &cert, v.version))
				if serverErr != nil || clientErr != nil {
					t.Fatalf("server: %v; client: %v", serverErr, clientErr)
				}
				node, gotSerial, ok := NodeFromState(state, srv.ca.ClusterID())
				if !ok || node != "gpu-01" || gotSerial != serial {
					t.Errorf("NodeFromState = %q, %q, %v; want gpu-01, %s", node, gotSerial, ok, serial)
				}
				if _, _, ok := NodeFromState(state, "ffffffffffffffff"); ok {
					t.Error("a node of this cluster is a node of another")
				}
			})
		}
	}
}

func TestTokenUserConnectsWithoutCertificate(t *testing.T) {
	srv := newTestServer(t)
	for _, v := range tlsVersions {
		t.Run(v.name, func(t *testing.T) {
			state, serverErr, clientErr := handshake(t, srv.cfg, clientConfig(t, Pin{Fingerprint: srv.ca.Fingerprint()}, nil, v.version))
			if serverErr != nil || clientErr != nil {
				t.Fatalf("server: %v; client: %v", serverErr, clientErr)
			}
			if node, _, ok := NodeFromState(state, srv.ca.ClusterID()); ok {
				t.Errorf("a client without a certificate is node %q", node)
			}
		})
	}
}

func TestClientCertificateRefused(t *testing.T) {
	srv := newTestServer(t)
	other := newTestCA(t)
	foreign, _ := nodeCert(t, other, "gpu-01")
	twin, _, err := LoadOrCreateCA(t.TempDir(), srv.ca.ClusterID()) // same names, another key
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := nodeCert(t, twin, "gpu-01")
	expired := expiredNodeCert(t, srv.ca, "gpu-01")
	notYet := craftedCert(t, srv.ca, "gpu-01", func(c *x509.Certificate) {
		c.NotBefore, c.NotAfter = time.Now().Add(24*time.Hour), time.Now().Add(48*time.Hour)
	})
	serverCert := srv.cfg.Certificates[0] // right CA, but for serving only
	tests := []struct {
		name    string
		cert    tls.Certificate
		wantErr string
	}{
		{"another CA", foreign, "unknown authority"},
		{"another CA with the same names", forged, "verify certificate"},
		{"expired", expired, "expired"},
		{"not yet valid", notYet, "not yet valid"},
		{"serving certificate", serverCert, "usage"},
	}
	for _, v := range tlsVersions {
		for _, tt := range tests {
			t.Run(v.name+"/"+tt.name, func(t *testing.T) {
				cfg := clientConfig(t, Pin{CAPEM: srv.ca.CertPEM()}, nil, v.version)
				// Go's client sends only a certificate whose issuer the server names as
				// acceptable; other clients send whatever they have, so force it.
				cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &tt.cert, nil }
				_, serverErr, clientErr := handshake(t, srv.cfg, cfg)
				if serverErr == nil || !strings.Contains(serverErr.Error(), tt.wantErr) {
					t.Errorf("server error %v, want one saying %q", serverErr, tt.wantErr)
				}
				if clientErr == nil {
					t.Error("the client was not told")
				}
			})
		}
	}
}

func TestNotANode(t *testing.T) {
	srv := newTestServer(t)
	// A certificate of another CA, given to ClientTLSConfig: Go's client does not even send
	// it, since the server names only its own CA as acceptable.
	foreign, _ := nodeCert(t, newTestCA(t), "gpu-01")
	state, serverErr, clientErr := handshake(t, srv.cfg, clientConfig(t, Pin{CAPEM: srv.ca.CertPEM()}, &foreign, 0))
	if serverErr != nil || clientErr != nil {
		t.Fatalf("server: %v; client: %v", serverErr, clientErr)
	}
	if node, _, ok := NodeFromState(state, srv.ca.ClusterID()); ok || len(state.PeerCertificates) != 0 {
		t.Errorf("a certificate of another CA made the client node %q", node)
	}

	tests := []struct {
		name   string
		mutate func(*x509.Certificate)
	}{
		{"another cluster ID", func(c *x509.Certificate) { c.Subject.Organization = []string{"ffffffffffffffff"} }},
		{"no organisation", func(c *x509.Certificate) { c.Subject.Organization = nil }},
		{"two organisations", func(c *x509.Certificate) { c.Subject.Organization = append(c.Subject.Organization, "x") }},
		{"URI of another node", func(c *x509.Certificate) { c.URIs = []*url.URL{nodeURI("gpu-02")} }},
		{"no URI", func(c *x509.Certificate) { c.URIs = nil }},
		{"two URIs", func(c *x509.Certificate) { c.URIs = append(c.URIs, nodeURI("gpu-02")) }},
		{"URI with a query", func(c *x509.Certificate) { c.URIs[0].RawQuery = "x=1" }},
		{"other scheme", func(c *x509.Certificate) { c.URIs[0].Scheme = "spiffe" }},
		{"invalid name", func(c *x509.Certificate) { c.Subject.CommonName = "gpu 01"; c.URIs = nil }},
		{"any usage", func(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageAny} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cert := craftedCert(t, srv.ca, "gpu-01", tt.mutate)
			state, serverErr, clientErr := handshake(t, srv.cfg, clientConfig(t, Pin{CAPEM: srv.ca.CertPEM()}, &cert, 0))
			if serverErr != nil || clientErr != nil {
				t.Fatalf("a certificate of the right CA was refused: server: %v; client: %v", serverErr, clientErr)
			}
			if node, _, ok := NodeFromState(state, srv.ca.ClusterID()); ok {
				t.Errorf("taken for node %q", node)
			}
		})
	}
	// The unmutated template is a node, so each case above fails for its own reason.
	cert := craftedCert(t, srv.ca, "gpu-01", func(*x509.Certificate) {})
	state, _, _ = handshake(t, srv.cfg, clientConfig(t, Pin{CAPEM: srv.ca.CertPEM()}, &cert, 0))
	if _, _, ok := NodeFromState(state, srv.ca.ClusterID()); !ok {
		t.Fatal("the crafted template is not a node to begin with")
	}
}

func TestWrongPinRefused(t *testing.T) {
	srv := newTestServer(t)
	other := newTestCA(t)
	for _, v := range tlsVersions {
		for name, pin := range map[string]Pin{
			"fingerprint": {Fingerprint: other.Fingerprint()},
			"CA":          {CAPEM: other.CertPEM()},
		} {
			t.Run(v.name+"/"+name, func(t *testing.T) {
				_, serverErr, clientErr := handshake(t, srv.cfg, clientConfig(t, pin, nil, v.version))
				if clientErr == nil {
					t.Fatal("the client accepted a server of another CA")
				}
				msg := clientErr.Error()
				if !strings.Contains(msg, "differs from the pinned") || !strings.Contains(msg, srv.ca.Fingerprint()) || !strings.Contains(msg, other.Fingerprint()) {
					t.Errorf("error %q does not name the server's CA fingerprint %s and the pinned %s", msg, srv.ca.Fingerprint(), other.Fingerprint())
				}
				if serverErr == nil {
					t.Error("the server did not see the handshake fail")
				}
			})
		}
	}
}

func TestServerCertificateRefused(t *testing.T) {
	srv := newTestServer(t)
	node, _ := nodeCert(t, srv.ca, "gpu-01")
	node.Certificate = append(node.Certificate, srv.cfg.Certificates[0].Certificate[1])
	expired := craftedCert(t, srv.ca, "server", func(c *x509.Certificate) {
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		c.NotBefore, c.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
	})
	expired.Certificate = append(expired.Certificate, srv.cfg.Certificates[0].Certificate[1])
	tests := []struct {
		name    string
		serving tls.Certificate
		wantErr string
	}{
		{"node certificate as server", node, "usage"},
		{"expired", expired, "expired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ServerTLSConfig(srv.ca, tt.serving)
			_, _, clientErr := handshake(t, cfg, clientConfig(t, Pin{Fingerprint: srv.ca.Fingerprint()}, nil, 0))
			if clientErr == nil || !strings.Contains(clientErr.Error(), tt.wantErr) {
				t.Errorf("client error %v, want one saying %q", clientErr, tt.wantErr)
			}
		})
	}
}

func TestPinLeafOnlyChain(t *testing.T) {
	srv := newTestServer(t)
	leafOnly := srv.cfg.Certificates[0]
	leafOnly.Certificate = leafOnly.Certificate[:1]
	cfg := ServerTLSConfig(srv.ca, leafOnly)
	// A pinned CA certificate needs no help from the chain...
	if _, serverErr, clientErr := handshake(t, cfg, clientConfig(t, Pin{CAPEM: srv.ca.CertPEM()}, nil, 0)); serverErr != nil || clientErr != nil {
		t.Errorf("pinning the CA certificate: server: %v; client: %v", serverErr, clientErr)
	}
	// ...while a fingerprint must find the CA in it.
	_, _, clientErr := handshake(t, cfg, clientConfig(t, Pin{Fingerprint: srv.ca.Fingerprint()}, nil, 0))
	if clientErr == nil || !strings.Contains(clientErr.Error(), srv.ca.Fingerprint()) {
		t.Errorf("pinning the fingerprint with no CA in the chain: %v", clientErr)
	}
}

func TestClientTLSConfigPins(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	leaf, _ := nodeCert(t, ca, "gpu-01")
	tests := []struct {
		name    string
		pin     Pin
		wantErr string
	}{
		{"nothing", Pin{}, "no CA pinned"},
		{"bare hex", Pin{Fingerprint: strings.TrimPrefix(ca.Fingerprint(), "sha256:")}, "not sha256:"},
		{"short", Pin{Fingerprint: ca.Fingerprint()[:20]}, "not sha256:"},
		{"disagreeing", Pin{Fingerprint: other.Fingerprint(), CAPEM: ca.CertPEM()}, "not the pinned"},
		{"not PEM", Pin{CAPEM: []byte("hello")}, "pinned CA"},
		{"a leaf", Pin{CAPEM: encodeCertPEM(leaf.Certificate[0])}, "not a CA"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ClientTLSConfig(tt.pin, nil)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ClientTLSConfig = %v, %v; want an error saying %q", cfg, err, tt.wantErr)
			}
		})
	}
}

// BenchmarkNodeFromState is the work on every agent request.
func BenchmarkNodeFromState(b *testing.B) {
	srv := newTestServer(b)
	cert, _ := nodeCert(b, srv.ca, "gpu-01")
	state, serverErr, clientErr := handshake(b, srv.cfg, clientConfig(b, Pin{CAPEM: srv.ca.CertPEM()}, &cert, 0))
	if serverErr != nil || clientErr != nil {
		b.Fatal(serverErr, clientErr)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok := NodeFromState(state, srv.ca.ClusterID()); !ok {
			b.Fatal("not a node")
		}
	}
}
