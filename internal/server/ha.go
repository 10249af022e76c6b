package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
	"github.com/rotahq/rota/internal/cluster"
	"github.com/rotahq/rota/internal/store"
)

// Several servers on one PostgreSQL store elect one leader through a store.Lease (see
// docs/ha.md). The leader loads the state, writes and schedules; the others stand by:
// they forward the API calls they can to the leader (forwardToLeader), answer the others
// but GET /api/v1/status with a 503 naming the leader, and try to take the lease every
// LeaseInterval. A standby that takes it loads the state from the
// store, as a restarting server does, and leads. A leader that loses its lease stops
// scheduling and writing at once: its store refuses every commit from that moment, and a
// commit already under way fails on the term check if a successor has begun.

// errNotLeader answers a change the server can no longer make because it lost the lease.
var errNotLeader = errors.New("this server has just lost the leader lease; send the request to the new leader")

// isLeader reports whether this server may write and schedule: always without a lease.
func (s *Server) isLeader() bool { return s.cfg.Lease == nil || s.leader.Load() }

// stepDown makes this server a standby after its lease was lost. Its store already
// refuses commits; this stops its cycles and sends its callers to the new leader.
func (s *Server) stepDown(err error) {
	if s.leader.Swap(false) {
		s.log.Error("lost the leader lease: no more scheduling or writing here; standing by", "err", err)
		// Callers are not sent back here while the new leader is unknown.
		empty := ""
		s.leaderURL.Store(&empty)
		// Agents waiting on a watch are answered now, and go to the leader.
		s.watch.bumpAll()
		// The lease loop learns who leads now without waiting for its next round.
		select {
		case s.leaseKick <- struct{}{}:
		default:
		}
	}
}

// leaseLoop keeps the lease: it checks it while leading, tries to take it while standing
// by, and announces this server among the replicas. At the end it gives the lease up, so
// a standby takes over at once rather than after the session times out.
func (s *Server) leaseLoop(ctx context.Context) {
	l := s.cfg.Lease
	t := time.NewTicker(s.cfg.LeaseInterval)
	defer t.Stop()
	for {
		s.tendLease(ctx)
		select {
		case <-ctx.Done():
			s.leader.Store(false)
			l.Release()
			wctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := l.Withdraw(wctx); err != nil {
				s.log.Warn("could not remove this server from the replicas", "err", err)
			}
			cancel()
			return
		case <-t.C:
		case <-s.leaseKick:
		}
	}
}

// tendLease does one round of leaseLoop.
func (s *Server) tendLease(ctx context.Context) {
	l := s.cfg.Lease
	failed := false
	if s.leader.Load() {
		if err := l.Check(ctx); err != nil && ctx.Err() == nil {
			s.stepDown(err)
		}
	} else if l.Term() != 0 {
		// Stepped down by a refused commit while the session still stood: let it go, so
		// the term is not kept by a server that no longer acts on it.
		l.Release()
	} else {
		term, err := l.TryAcquire(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.storeFailed(fmt.Errorf("try for the leader lease: %w", err))
			failed = true
		case term > 0:
			s.lead(ctx, term)
		}
	}
	if ctx.Err() != nil {
		return
	}
	if err := l.Announce(ctx); err != nil && ctx.Err() == nil {
		s.storeFailed(fmt.Errorf("announce this server among the replicas: %w", err))
		failed = true
	}
	if st, err := l.Status(ctx, time.Time{}); err == nil {
		s.leaderURL.Store(&st.URL)
	} else if ctx.Err() == nil {
		s.storeFailed(fmt.Errorf("read who leads: %w", err))
		failed = true
	}
	if !failed {
		s.storeReached()
	}
}

// storeOutage is a run of lease rounds that could not reach the store: since the first
// failure, with the latest error; told is when the log last said so.
type storeOutage struct {
	since, told time.Time
	err         error
}

// outageRetell is how often the log says again that the store is still out of reach.
const outageRetell = time.Minute

// storeFailed records that a lease round could not reach the store. The log says so at
// the first failure and then once every outageRetell, not at every round: every server
// of the cluster tries every lease interval, and an hour's outage of the database would
// otherwise write thousands of lines on each.
func (s *Server) storeFailed(err error) {
	now := time.Now()
	o := s.outage.Load()
	switch {
	case o == nil:
		s.outage.Store(&storeOutage{since: now, told: now, err: err})
		s.log.Warn("cannot reach the store; trying again every lease interval", "err", err, "every", s.cfg.LeaseInterval)
	case now.Sub(o.told) >= outageRetell:
		s.outage.Store(&storeOutage{since: o.since, told: now, err: err})
		s.log.Warn("still cannot reach the store", "for", now.Sub(o.since).Round(time.Second), "err", err)
	default:
		s.outage.Store(&storeOutage{since: o.since, told: o.told, err: err})
	}
}

// storeReached ends an outage the lease loop recorded, saying for how long it lasted.
func (s *Server) storeReached() {
	if o := s.outage.Swap(nil); o != nil {
		s.log.Info("reached the store again", "down_for", time.Since(o.since).Round(time.Second))
	}
}

// lead makes this server the leader in term: it reads the whole state from the store,
// as at a restart, applies its config file, and starts scheduling. If the state cannot be
// read the lease is given back for another server to try.
func (s *Server) lead(ctx context.Context, term int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	if err := s.load(ctx); err != nil {
		s.cfg.Lease.Release()
		s.log.Error("took the leader lease but could not read the state; giving it back", "term", term, "err", err)
		return
	}
	s.suspect, s.claims, s.bestNodes = false, nil, nil
	// Writes refused in an earlier term, by a store this server may have lost the
	// connection to, say nothing of the store now: the new term writes at once.
	s.hold = writeHold{}
	s.leader.Store(true)
	if s.cfg.ConfigFile != "" {
		if data, err := os.ReadFile(s.cfg.ConfigFile); err != nil {
			s.log.Error("config file not applied at takeover", "file", s.cfg.ConfigFile, "err", err)
		} else if _, apiErr := s.applyConfig(ctx, data, api.Event{Actor: "config file", Source: s.cfg.ConfigFile}); apiErr != nil {
			s.log.Error("config file not applied at takeover", "file", s.cfg.ConfigFile, "err", apiErr.Message)
		}
	}
	s.watch.bumpAll()
	s.log.Info("took the leader lease: leading", "term", term, "load_time", time.Since(start).Round(time.Millisecond))
	s.wake()
}

// waitForCluster holds a standby's start until the store holds a cluster, which the
// leader creates at its first start; should the lease come free meanwhile, this server
// takes it and creates the cluster itself. Callers do not hold s.mu.
func (s *Server) waitForCluster(ctx context.Context) error {
	for {
		if _, ok := s.state.Setting(cluster.SettingCluster); ok {
			return nil
		}
		s.log.Info("waiting for the leader to create the cluster in the store")
		select {
		case <-ctx.Done():
			return fmt.Errorf("server: waiting for the leader to create the cluster: %w", ctx.Err())
		case <-time.After(s.cfg.LeaseInterval):
		}
		term, err := s.cfg.Lease.TryAcquire(ctx)
		if err != nil {
			return fmt.Errorf("server: leader lease: %w", err)
		}
		if term > 0 {
			s.leader.Store(true)
		}
		if err := s.load(ctx); err != nil {
			return err
		}
		if term > 0 {
			return nil
		}
	}
}

// refuseAsStandby answers a call a standby does not serve: 503, with the leader's URL in
// the Rota-Leader header and the message, so that clients and agents given a list of
// servers go there.
func (s *Server) refuseAsStandby(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	msg := "this rota server is a standby and no leader is serving yet; try again shortly"
	if o := s.outage.Load(); o != nil {
		// Why no server leads, as far as this one knows. The store's own error stays in
		// the server's log: it names the database's host and user, and this answer goes
		// to callers not yet authenticated.
		msg = fmt.Sprintf("no rota server is leading: this one (a standby) has not reached the cluster's store since %s; "+
			"its log says why. Try again shortly", o.since.UTC().Format("2006-01-02 15:04:05 UTC"))
	}
	if u := s.leaderURL.Load(); u != nil && *u != "" {
		w.Header().Set(api.LeaderHeader, *u)
		msg = "this rota server is a standby: send the request to the leader at " + *u
	}
	writeError(w, http.StatusServiceUnavailable, &api.Error{Code: api.CodeUnavailable, Message: msg})
}

// leaderTransport is how a standby reaches the leader: over TLS trusting only the
// cluster's CA, which every server of the cluster shares and which issued every server's
// certificate. It presents no client certificate, so a forwarded request can never pass
// for an agent. Nothing bounds the time to the answer's headers: watches and log streams
// are long by design, and the caller's own hang-up ends them.
func leaderTransport(ca *auth.CA) *http.Transport {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM())
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: 5 * time.Second,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
}

// forwardable reports whether a standby may forward r to the leader. The caller's
// identity must travel inside the request, as an API token does, for the leader to check
// it as if the caller had come straight to it. Identity that belongs to the connection
// cannot be forwarded: an agent's client certificate (the standby cannot present it, and
// the leader trusts no header in its stead), a Unix account on the local socket, the
// in-process agent of `rota up`. Those callers are sent to the leader with a 503, as
// agents expect. A request without credentials is forwarded: it is anonymous on the
// leader too. A request already forwarded is never forwarded again, so two servers that
// each take the other for the leader cannot pass it round.
func forwardable(r *http.Request) bool {
	if r.Header.Get(api.ForwardedByHeader) != "" {
		return false
	}
	if r.Header.Get("Authorization") != "" {
		return true
	}
	info, _ := r.Context().Value(connKey{}).(connInfo)
	if info.local || info.unix {
		return false
	}
	return r.TLS == nil || len(r.TLS.PeerCertificates) == 0
}

// forwardToLeader answers an API call on a standby: it forwards it to the leader as a
// reverse proxy, or refuses it with a 503 naming the leader (refuseAsStandby) when it
// cannot (see forwardable), when no leader is known, or when the leader names this very
// server (the store lags a step-down).
//
// The request is sent once. A client that sees 503 takes it that nothing was done and
// sends the request elsewhere, so 503 is answered only when that is true: the leader was
// not reached, or the method reads. Once a change has been sent the leader may have acted
// on it, so a connection lost before its answer is a 502 (forward_failed), which clients
// do not resend elsewhere; a submit's idempotency key still makes sending it again safe.
func (s *Server) forwardToLeader(w http.ResponseWriter, r *http.Request) {
	leader := ""
	if u := s.leaderURL.Load(); u != nil {
		leader = *u
	}
	target, err := url.Parse(leader)
	if leader == "" || err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" ||
		s.proxy == nil || leader == s.cfg.Lease.URL() || !forwardable(r) {
		s.refuseAsStandby(w)
		return
	}
	var sent atomic.Bool
	ctx := httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{WroteHeaders: func() { sent.Store(true) }})
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Set(api.ForwardedByHeader, s.cfg.Lease.ID())
		},
		Transport: s.proxy,
		// Watches, log streams and attached terminals reach the caller as they come.
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the caller hung up: nobody reads an answer
			}
			s.log.Warn("forwarding to the leader failed", "leader", leader, "method", r.Method, "path", r.URL.Path, "err", err)
			if sent.Load() && r.Method != http.MethodGet && r.Method != http.MethodHead {
				writeError(w, http.StatusBadGateway, &api.Error{Code: api.CodeForwardFailed, Message: "this rota server is a standby; it sent the request to the leader at " +
					leader + " but lost the connection before the answer (" + err.Error() + "): the leader may have acted on it, so check before sending it again"})
				return
			}
			// Not naming the leader: the caller would only find it unreachable too.
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, &api.Error{Code: api.CodeUnavailable,
				Message: "this rota server is a standby and cannot reach the leader at " + leader + " (" + err.Error() + "); nothing was done; try again shortly"})
		},
	}
	p.ServeHTTP(w, r.WithContext(ctx))
}

// replicaSeenWithin is how recently a server must have announced itself to be listed in
// the status: several lease intervals, so one slow round does not drop it.
func (s *Server) replicaSeenWithin() time.Duration { return 5*s.cfg.LeaseInterval + 5*time.Second }

// handleStatus answers GET /api/v1/status: the replicas, the leader, the term and the
// store. Standbys answer it too, from the store, so an operator can ask any server.
func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	out := api.ClusterStatus{Store: store.Kind(s.store), Replicas: []api.Replica{}}
	if p := s.room.problem(); p != "" {
		out.Problems = append(out.Problems, p)
	}
	if p := s.putOff.problem(s.cfg.Clock.Now()); p != "" {
		out.Problems = append(out.Problems, p)
	}
	s.mu.Lock()
	p := s.holdProblem()
	s.mu.Unlock()
	if p != "" {
		out.Problems = append(out.Problems, p)
	}
	l := s.cfg.Lease
	if l == nil {
		links := s.uiLinks()
		links.mu.Lock()
		self := links.url
		links.mu.Unlock()
		out.LeaderURL, out.LeaderHeld, out.AnsweredIsLeader = self, true, true
		out.Answered = self
		out.Replicas = append(out.Replicas, api.Replica{ID: self, URL: self, Started: s.started, Seen: time.Now().UTC(), Leader: true})
		writeJSON(w, http.StatusOK, out)
		return
	}
	st, err := l.Status(r.Context(), time.Now().Add(-s.replicaSeenWithin()))
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, &api.Error{Code: api.CodeUnavailable, Message: "reading the leader from the store: " + err.Error()})
		return
	}
	out.Lease, out.Term, out.LeaderURL, out.LeaderHeld = true, st.Term, st.URL, st.Held
	if !st.Since.IsZero() {
		since := st.Since
		out.LeaderSince = &since
	}
	out.Answered, out.AnsweredIsLeader = l.ID(), s.isLeader()
	for _, rep := range st.Replicas {
		out.Replicas = append(out.Replicas, api.Replica{ID: rep.ID, Host: rep.Host, URL: rep.URL, Started: rep.Started, Seen: rep.Seen,
			Leader: st.Held && rep.ID == st.Holder})
	}
	writeJSON(w, http.StatusOK, out)
}
