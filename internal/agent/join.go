package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
)

// Joining and renewing the node's certificate.
const (
	joinTimeout = 30 * time.Second
	// joinBackoffMax bounds the wait between tries while the server is unreachable.
	joinBackoffMax = time.Minute
	// renewCheck is how often a renewal is reconsidered; renewGap keeps a certificate
	// issued with little validity from being renewed over and over.
	renewCheck = time.Hour
	renewGap   = time.Minute
)

// credentials are how the agent proves to the server which node it is: nothing (plain
// http, or a client given as is), or the node identity it obtained by joining.
type credentials struct {
	dataDir string
	node    string
	servers *serverSet
	https   bool
	// given is set when Config.HTTPClient is used as is.
	given bool
	// token is set while the node has to join with it.
	token *auth.JoinToken
	raw   string

	mu sync.Mutex // guards id
	id *auth.NodeIdentity
}

// loadCredentials finds the node's identity in the data directory, or prepares to join.
func loadCredentials(cfg Config, node, dataDir, scheme string, servers *serverSet) (*credentials, error) {
	c := &credentials{dataDir: dataDir, node: node, servers: servers, https: scheme == "https"}
	if cfg.HTTPClient != nil {
		c.given = true
		return c, nil
	}
	var tok *auth.JoinToken
	if cfg.Join != "" {
		t, err := auth.ParseJoinToken(cfg.Join)
		if err != nil {
			return nil, fmt.Errorf("--join: %w", err)
		}
		tok, c.raw = &t, cfg.Join
	}
	id, found, err := auth.LoadNodeIdentity(dataDir)
	if err != nil {
		return nil, fmt.Errorf("%w; to join again, move it away and pass --join with a new token", err)
	}
	switch {
	case found && id.Node != node:
		return nil, fmt.Errorf("the identity in %s is node %q's, not %q: give each node its own --data-dir, or run it as --name %s", dataDir, id.Node, node, id.Node)
	case found && (tok == nil || tok.ClusterID == id.ClusterID):
		// A restart: the identity is all the node needs; a join token is not used again.
		c.id = &id
	case tok != nil:
		// Not joined, or joining another cluster: the identity will be replaced.
		if !c.https {
			return nil, fmt.Errorf("--join: the server URL %s must be https: joining needs TLS", cfg.ServerURL)
		}
		c.token = tok
	case c.https:
		return nil, fmt.Errorf("server %s uses https but this node has not joined the cluster: pass --join with a token from `rota admin join-token`", cfg.ServerURL)
	}
	return c, nil
}

// clusterID is the cluster the node's identity (or the token it joins with) names.
func (c *credentials) clusterID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.id != nil:
		return c.id.ClusterID
	case c.token != nil:
		return c.token.ClusterID
	}
	return ""
}

func (c *credentials) joining() bool { return c.token != nil && c.identity() == nil }

func (c *credentials) renewable() bool {
	return c.https && !c.given && (c.identity() != nil || c.token != nil)
}

func (c *credentials) identity() *auth.NodeIdentity {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.id
}

// client is the HTTP client for the node's requests: mutual TLS with its certificate
// over https, plain otherwise.
func (c *credentials) client() (*http.Client, error) {
	id := c.identity()
	if !c.https || id == nil {
		return &http.Client{}, nil
	}
	cert, err := id.TLSCertificate()
	if err != nil {
		return nil, fmt.Errorf("node certificate: %w", err)
	}
	cfg, err := auth.ClientTLSConfig(id.Pin(), &cert)
	if err != nil {
		return nil, err
	}
	return tlsClient(cfg), nil
}

func tlsClient(cfg *tls.Config) *http.Client {
	// Idle connections time out, so those of a client a renewal replaced do not linger.
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, IdleConnTimeout: 90 * time.Second, ForceAttemptHTTP2: true}}
}

// join obtains the node's certificate with the join token, retrying while the server is
// unreachable. A refusal is final: a resend would be refused too.
func (a *Agent) join(ctx context.Context) error {
	c := a.creds
	backoff := time.Second
	for {
		err := c.join(ctx)
		if err == nil {
			client, err := c.client()
			if err != nil {
				return err
			}
			a.setClient(client)
			id := c.identity()
			a.logger.Info("joined the cluster", "cluster", id.ClusterID, "certificate_expires", id.NotAfter())
			return nil
		}
		var refused *refusedError
		if errors.As(err, &refused) || ctx.Err() != nil {
			return fmt.Errorf("join the cluster: %w", err)
		}
		a.logger.Warn("cannot join the cluster yet; retrying", "err", err, "in", backoff)
		if !sleep(ctx, backoff) {
			return nil
		}
		backoff = min(2*backoff, joinBackoffMax)
	}
}

func (c *credentials) join(ctx context.Context) error {
	keyPEM, err := auth.NewNodeKey()
	if err != nil {
		return fmt.Errorf("node key: %w", err)
	}
	csr, err := auth.NodeCSR(keyPEM, c.node)
	if err != nil {
		return fmt.Errorf("certificate request: %w", err)
	}
	cfg, err := auth.ClientTLSConfig(c.token.Pin(), nil)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	var resp api.JoinResponse
	req := api.JoinRequest{Token: c.raw, Node: c.node, CSR: string(csr), Hostname: host}
	server := c.servers.current()
	if err := postJSON(ctx, tlsClient(cfg), server+"/api/v1/join", req, &resp); err != nil {
		c.servers.moveOn(server, nil) // a standby, or a server down: the next try goes on
		return err
	}
	if resp.ClusterID != c.token.ClusterID {
		return &refusedError{msg: fmt.Sprintf("the server answered for cluster %s, but the join token is for %s", resp.ClusterID, c.token.ClusterID)}
	}
	return c.save(auth.NodeIdentity{ClusterID: resp.ClusterID, Node: c.node, CAPEM: []byte(resp.CA), CertPEM: []byte(resp.Certificate), KeyPEM: keyPEM})
}

// save keeps a new identity (key mode 0600) and uses it from now on.
func (c *credentials) save(id auth.NodeIdentity) error {
	if err := auth.SaveNodeIdentity(c.dataDir, id); err != nil {
		return fmt.Errorf("save the node identity: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.id = &id
	c.token = nil
	return nil
}

// renewAt is when the identity's certificate is due for renewal: once less than a third
// of its validity is left.
func renewAt(id *auth.NodeIdentity) time.Time {
	block, _ := pem.Decode(id.CertPEM)
	if block == nil {
		return time.Time{}
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return time.Time{}
	}
	return cert.NotAfter.Add(-cert.NotAfter.Sub(cert.NotBefore) / 3)
}

// renewals renews the node's certificate before it expires, for as long as Run runs.
func (a *Agent) renewals(ctx context.Context) {
	var last time.Time
	backoff := renewGap
	for {
		id := a.creds.identity()
		if id == nil {
			return
		}
		wait := time.Until(renewAt(id))
		if wait <= 0 && time.Since(last) < renewGap {
			wait = renewGap - time.Since(last)
		}
		if wait > 0 {
			if !sleep(ctx, min(wait, renewCheck)) {
				return
			}
			continue
		}
		last = time.Now()
		if err := a.renew(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			a.logger.Error("cannot renew the node certificate; retrying", "err", err, "expires", id.NotAfter(), "in", backoff)
			if !sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, renewCheck)
			continue
		}
		backoff = renewGap
		a.logger.Info("renewed the node certificate", "expires", a.creds.identity().NotAfter())
	}
}

// renew asks the server, over mutual TLS with the current certificate, for a new one for
// a new key, saves it and uses it for every later request.
func (a *Agent) renew(ctx context.Context) error {
	c := a.creds
	old := c.identity()
	keyPEM, err := auth.NewNodeKey()
	if err != nil {
		return fmt.Errorf("node key: %w", err)
	}
	csr, err := auth.NodeCSR(keyPEM, c.node)
	if err != nil {
		return fmt.Errorf("certificate request: %w", err)
	}
	var resp api.JoinResponse
	server := c.servers.current()
	u := server + "/api/v1/agents/" + url.PathEscape(c.node) + "/renew"
	if err := postJSON(ctx, a.httpClient(), u, api.RenewRequest{CSR: string(csr)}, &resp); err != nil {
		c.servers.moveOn(server, nil)
		return err
	}
	ca := old.CAPEM
	if resp.CA != "" {
		ca = []byte(resp.CA)
	}
	if err := c.save(auth.NodeIdentity{ClusterID: old.ClusterID, Node: c.node, CAPEM: ca, CertPEM: []byte(resp.Certificate), KeyPEM: keyPEM}); err != nil {
		return err
	}
	client, err := c.client()
	if err != nil {
		return err
	}
	prev := a.httpClient()
	a.setClient(client)
	prev.CloseIdleConnections()
	return nil
}

// postJSON posts v and decodes the answer into out. A 4xx answer is a refusedError.
func postJSON(ctx context.Context, client *http.Client, u string, v, out any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	switch {
	case resp.StatusCode/100 == 4 && resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests:
		return &refusedError{status: resp.StatusCode, msg: httpError(resp.StatusCode, data)}
	case resp.StatusCode/100 != 2:
		return errors.New(httpError(resp.StatusCode, data))
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	return nil
}
