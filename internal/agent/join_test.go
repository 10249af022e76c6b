package agent

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
)

// newFakeTLSServer is the fake server behind TLS with the cluster's CA: nodes join with
// token and then present their certificates.
func newFakeTLSServer(t *testing.T, token string) *fakeServer {
	ca, _, err := auth.LoadOrCreateCA(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	s := newFakeState()
	s.ca, s.clusterID, s.joinToken, s.joinValidity = ca, ca.ClusterID(), token, 24*time.Hour
	mux := s.mux()
	mux.HandleFunc("POST /api/v1/join", s.join)
	mux.HandleFunc("POST /api/v1/agents/{node}/renew", s.renew)
	serving, err := ca.ServerCertificate([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s.srv = httptest.NewUnstartedServer(s.unlessDown(mux))
	s.srv.TLS = auth.ServerTLSConfig(ca, serving)
	s.srv.StartTLS()
	t.Cleanup(s.srv.Close)
	return s
}

func (s *fakeServer) join(w http.ResponseWriter, r *http.Request) {
	var req api.JoinRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.Token != s.joinToken {
		w.WriteHeader(http.StatusUnauthorized)
		json.NewEncoder(w).Encode(api.Error{Code: api.CodeUnauthorized, Message: "the join token is not valid on this server"})
		return
	}
	s.joins++
	s.issue(w, req.CSR, req.Node, s.joinValidity)
}

func (s *fakeServer) renew(w http.ResponseWriter, r *http.Request) {
	var req api.RenewRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if node, _, ok := auth.NodeFromState(*r.TLS, s.clusterID); !ok || node != r.PathValue("node") {
		w.WriteHeader(http.StatusUnauthorized)
		json.NewEncoder(w).Encode(api.Error{Code: api.CodeUnauthorized, Message: "renew needs the node's certificate"})
		return
	}
	s.renewals++
	s.issue(w, req.CSR, r.PathValue("node"), 24*time.Hour)
}

func (s *fakeServer) issue(w http.ResponseWriter, csr, node string, validity time.Duration) {
	cert, _, notAfter, err := s.ca.IssueNodeCert([]byte(csr), node, validity)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	json.NewEncoder(w).Encode(api.JoinResponse{ClusterID: s.ca.ClusterID(), Certificate: string(cert), CA: string(s.ca.CertPEM()), NotAfter: notAfter})
}

// lastCert is the serial of the certificate of the latest heartbeat.
func (s *fakeServer) lastCert() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.certs) == 0 {
		return ""
	}
	return s.certs[len(s.certs)-1]
}

// An agent joins with a token once: it keeps the identity it gets and authenticates with
// it from then on, for heartbeats and logs alike; a restart needs no token and does not
// use one again.
func TestAgentJoins(t *testing.T) {
	s := newFakeTLSServer(t, "")
	tok, err := auth.NewJoinToken(s.ca.ClusterID(), s.ca.Fingerprint())
	if err != nil {
		t.Fatal(err)
	}
	s.joinToken = tok.String()
	s.setDesired(api.Task{JobID: 1, Attempt: 1, Command: []string{"echo", "over mTLS"}})
	dir := t.TempDir()
	cfg := agentConfig(t, s, dir)
	cfg.Join = tok.String()

	first := launch(t, cfg, testLogger(t))
	eventually(t, 10*time.Second, "a heartbeat with the node's certificate, and the job's log", func() bool {
		return s.lastCert() != "" && s.logOf(taskKey{1, 1}) == "over mTLS\n"
	})
	id, found, err := auth.LoadNodeIdentity(dir)
	if err != nil || !found || id.Node != "node-1" || id.ClusterID != s.ca.ClusterID() {
		t.Fatalf("saved identity: %+v found %v err %v", id, found, err)
	}
	key, err := os.Stat(filepath.Join(dir, "identity", "node.key"))
	if err != nil || key.Mode().Perm() != 0o600 {
		t.Errorf("node key: %v mode %v, want 0600", err, key.Mode().Perm())
	}
	if hb, _ := s.lastBeat(); hb.ClusterID != s.ca.ClusterID() {
		t.Errorf("heartbeat of cluster %q, want %q from the identity", hb.ClusterID, s.ca.ClusterID())
	}
	first.stop(t)

	// A restart, with the token and without: the identity is all it takes.
	for _, join := range []string{"", tok.String()} {
		cfg.Join = join
		n := s.beatCount()
		next := launch(t, cfg, testLogger(t))
		eventually(t, 10*time.Second, "heartbeats of the restarted agent", func() bool { return s.beatCount() > n+2 })
		next.stop(t)
	}
	s.mu.Lock()
	joins := s.joins
	s.mu.Unlock()
	if joins != 1 {
		t.Errorf("joined %d times, want once", joins)
	}

	cfg.Name = "node-2"
	if a, err := New(cfg, testLogger(t)); err == nil || !strings.Contains(err.Error(), `node "node-1"'s, not "node-2"`) {
		if a != nil {
			a.Close()
		}
		t.Errorf("New as another node on the identity: %v, want an error naming both", err)
	}
}

// A certificate with less than a third of its validity left is renewed, and the agent
// authenticates with the new one from then on.
func TestAgentRenewsCertificate(t *testing.T) {
	s := newFakeTLSServer(t, "")
	tok, _ := auth.NewJoinToken(s.ca.ClusterID(), s.ca.Fingerprint())
	s.joinToken = tok.String()
	// Issued certificates start an hour early; two minutes ahead is deep in the last third.
	s.joinValidity = 2 * time.Minute
	cfg := agentConfig(t, s, t.TempDir())
	cfg.Join = tok.String()
	launch(t, cfg, testLogger(t))
	var joined string
	eventually(t, 10*time.Second, "a heartbeat with the joined certificate", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.certs) > 0 {
			joined = s.certs[0]
		}
		return joined != ""
	})
	eventually(t, 10*time.Second, "a heartbeat with a renewed certificate", func() bool {
		c := s.lastCert()
		return c != "" && c != joined
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.renewals != 1 {
		t.Errorf("renewed %d times, want once", s.renewals)
	}
}
