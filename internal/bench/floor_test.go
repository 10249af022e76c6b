package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/auth"
)

// floorServerEnv, set in its environment to a directory holding a CA (auth.LoadOrCreateCA),
// makes this package's test binary the bare HTTPS server of BenchmarkPacedServerFloor
// instead of running tests.
const floorServerEnv = "ROTA_BENCH_FLOOR_CA"

// floorH2Env, set to 1 beside floorServerEnv, has the floor server offer HTTP/2 as well.
const floorH2Env = "ROTA_BENCH_FLOOR_H2"

func TestMain(m *testing.M) {
	if dir := os.Getenv(floorServerEnv); dir != "" {
		if err := serveFloor(dir, os.Getenv(floorH2Env) == "1"); err != nil {
			fmt.Fprintln(os.Stderr, "floor server:", err)
			os.Exit(1)
		}
		return
	}
	os.Exit(m.Run())
}

// floorAnswer is about the size of a heartbeat's answer.
var floorAnswer = []byte(strings.Repeat(`{"job_id":1,"attempt":1},`, 60))

// serveFloor serves HTTPS with net/http and a serving certificate from the CA in dir, as
// rota server does: a listener of crypto/tls with auth.ServerTLSConfig (a client
// certificate asked for and verified if given), served by http.Server.Serve. Its handler
// does nothing but read the request and write floorAnswer, except on two paths:
// /watch holds the request for ?wait= seconds (a long-poll, as an agent's watch), and
// /stats says, after a collection, the process's heap and stacks and its goroutines
// (floorStats). With h2 the server offers HTTP/2 too, which rota's agents ask for. It prints
// its URL on one line, and serves until it is killed.
func serveFloor(dir string, h2 bool) error {
	ca, _, err := auth.LoadOrCreateCA(dir, "")
	if err != nil {
		return err
	}
	cert, err := ca.ServerCertificate([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		return err
	}
	cfg := auth.ServerTLSConfig(ca, cert)
	if h2 {
		cfg.NextProtos = []string{"h2", "http/1.1"}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println("https://" + l.Addr().String())
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write(floorAnswer)
	})
	mux.HandleFunc("GET /watch", func(w http.ResponseWriter, r *http.Request) {
		secs, _ := strconv.ParseFloat(r.URL.Query().Get("wait"), 64)
		t := time.NewTimer(time.Duration(secs * float64(time.Second)))
		defer t.Stop()
		select {
		case <-t.C:
			w.Write([]byte(`{"version":1}`))
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		runtime.GC()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/stacks:bytes"}}
		metrics.Read(s)
		json.NewEncoder(w).Encode(floorStats{Heap: s[0].Value.Uint64(), Stacks: s[1].Value.Uint64(), Goroutines: runtime.NumGoroutine()})
	})
	srv := &http.Server{Handler: mux}
	return srv.Serve(tls.NewListener(l, cfg))
}

// floorStats is what the floor server's /stats says.
type floorStats struct {
	Heap       uint64 `json:"heap"`   // bytes of live objects, after a collection
	Stacks     uint64 `json:"stacks"` // bytes of goroutine stacks
	Goroutines int    `json:"goroutines"`
}

// startFloor starts the floor server (this test binary again) with a new CA, offering
// HTTP/2 if h2, and returns its process, its URL and the CA. The process is killed when
// the benchmark ends.
func startFloor(b *testing.B, h2 bool) (*exec.Cmd, string, *auth.CA) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	ca, _, err := auth.LoadOrCreateCA(dir, "")
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), floorServerEnv+"="+dir)
	if h2 {
		cmd.Env = append(cmd.Env, floorH2Env+"=1")
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("the floor server said nothing: %v", err)
	}
	return cmd, strings.TrimSpace(line), ca
}

// BenchmarkPacedServerFloor is what any Go HTTPS server pays on this machine for the
// heartbeats' load, so that the server CPU the scale suite's heartbeat-steady measures
// can be read against it: a bare net/http server, in a process of its own (this test
// binary again), answers b.N requests of 300 bytes with 1.5 KB, sent at 1,000 a second
// over 200 or 2,000 kept TLS connections, each one request at a time, as the suite's
// simulated agents send heartbeats. It reports the server process's CPU a request and
// per second.
//
//	go test -run XXX -bench BenchmarkPacedServerFloor -benchtime 10000x ./internal/bench/
func BenchmarkPacedServerFloor(b *testing.B) {
	for _, conns := range []int{200, 2000} {
		b.Run(fmt.Sprintf("conns=%d", conns), func(b *testing.B) { benchPacedServerFloor(b, conns) })
	}
}

func benchPacedServerFloor(b *testing.B, conns int) {
	const rate = 1000 // requests a second
	if err := raiseFileLimit(uint64(conns)+256, "BenchmarkPacedServerFloor"); err != nil {
		b.Skip(err)
	}
	cmd, url, ca := startFloor(b, false)
	var err error
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca.CertPEM()) {
		b.Fatal("the CA's certificate does not parse")
	}

	ctx := context.Background()
	body := []byte(`{"node":"n1","tasks":[` + strings.Repeat(`{"job_id":1,"attempt":1,"state":"RUNNING"},`, 6) + `{}]}`)
	clients := make([]*leanConn, conns)
	for i := range clients {
		if clients[i], err = newLeanConn(url, &tls.Config{RootCAs: roots}); err != nil {
			b.Fatal(err)
		}
		defer clients[i].Close()
		// The handshake and the first request, outside the measurement.
		if status, _, err := clients[i].do(ctx, http.MethodPost, "/heartbeat", body); err != nil || status != http.StatusOK {
			b.Fatalf("warm-up request: %d %v", status, err)
		}
	}

	each := max(1, b.N/conns)
	period := time.Duration(conns) * time.Second / rate
	start, err := startCPU(cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i, c := range clients {
		wg.Go(func() {
			// Spread evenly over the period, as paced agents are.
			next := time.Now().Add(time.Duration(i) * period / time.Duration(conns))
			for range each {
				time.Sleep(time.Until(next))
				next = next.Add(period)
				if status, _, err := c.do(ctx, http.MethodPost, "/heartbeat", body); err != nil || status != http.StatusOK {
					errs <- fmt.Errorf("request: %d %v", status, err)
					return
				}
			}
		})
	}
	wg.Wait()
	perSecond, took := endPaced(b, start, errs)
	b.ReportMetric(perSecond, "server-cpu-s/s")
	b.ReportMetric(perSecond*took/float64(each*conns)*1e6, "server-cpu-us/req")
	b.ReportMetric(float64(each*conns)/took, "req/s")
}

// BenchmarkAgentConnsFloor is what any Go HTTPS server holds in memory, and spends in CPU,
// for agents' connections, by how an agent holds its watch: the floor server
// (serveFloor), in a process of its own, and 2,000 agents as rota agent makes them, each
// its own http.Transport with a node certificate from the cluster's CA, asking for HTTP/2
// (ForceAttemptHTTP2), heartbeating at 1,000 a second in all, each at its own place in the
// interval. The cases:
//
//   - http1/no-watch: heartbeats only, over HTTP/1.1;
//   - http1/watch-between: the watch held between heartbeats, ending a tenth of the
//     interval before the next, so both take turns on one connection (rota agent now);
//   - http1/watch-across: the watch held for 30 s at a time, across heartbeats, which
//     over HTTP/1.1 go on a second connection (rota agent before);
//   - h2/watch-across: the same over HTTP/2, which carries both on one connection.
//
// After the agents have run for an interval, the server's live heap, stacks and
// goroutines are divided by the agents; then its CPU is measured over b.N heartbeats, per
// heartbeat, counting the watches' requests.
//
//	go test -run XXX -bench BenchmarkAgentConnsFloor -benchtime 10000x ./internal/bench/
func BenchmarkAgentConnsFloor(b *testing.B) {
	for _, c := range []struct {
		name  string
		h2    bool
		watch floorWatch
	}{
		{"http1/no-watch", false, noWatch},
		{"http1/watch-between", false, watchBetween},
		{"http1/watch-across", false, watchAcross},
		{"h2/watch-across", true, watchAcross},
	} {
		b.Run(c.name, func(b *testing.B) { benchAgentConnsFloor(b, 2000, c.h2, c.watch) })
	}
}

// floorWatch is how BenchmarkAgentConnsFloor's agents hold their watch.
type floorWatch int

const (
	noWatch floorWatch = iota
	watchBetween
	watchAcross
)

func benchAgentConnsFloor(b *testing.B, agents int, h2 bool, watch floorWatch) {
	const rate = 1000 // heartbeats a second
	if err := raiseFileLimit(uint64(2*agents)+256, "BenchmarkAgentConnsFloor"); err != nil {
		b.Skip(err)
	}
	cmd, url, ca := startFloor(b, h2)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca.CertPEM()) {
		b.Fatal("the CA's certificate does not parse")
	}
	// One node certificate for every agent: the server parses and keeps each
	// connection's certificate all the same.
	keyPEM, err := auth.NewNodeKey()
	if err != nil {
		b.Fatal(err)
	}
	csr, err := auth.NodeCSR(keyPEM, "n1")
	if err != nil {
		b.Fatal(err)
	}
	certPEM, _, _, err := ca.IssueNodeCert(csr, "n1", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		b.Fatal(err)
	}
	tlsCfg := &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}}
	clients := make([]*http.Client, agents)
	// Each transport has a configuration of its own: one asking for HTTP/2 adds "h2" to
	// the configuration it is given.
	for i := range clients {
		t := &http.Transport{TLSClientConfig: tlsCfg.Clone(), ForceAttemptHTTP2: true}
		clients[i] = &http.Client{Transport: t}
		defer t.CloseIdleConnections()
	}
	// stats asks on a connection of its own, over HTTP/1.1.
	statsClient := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg.Clone()}}

	body := []byte(`{"node":"n1","tasks":[` + strings.Repeat(`{"job_id":1,"attempt":1,"state":"RUNNING"},`, 6) + `{}]}`)
	do := func(ctx context.Context, c *http.Client, method, path string, body []byte) error {
		req, err := http.NewRequestWithContext(ctx, method, url+path, bytes.NewReader(body))
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s %s: status %d", method, path, resp.StatusCode)
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	var held sync.WaitGroup
	defer func() { cancel(); held.Wait() }()
	if watch == watchAcross {
		for _, c := range clients {
			held.Go(func() {
				for ctx.Err() == nil {
					do(ctx, c, http.MethodGet, "/watch?wait=30", nil)
				}
			})
		}
	}

	// Each agent beats at its place in the period, and with watchBetween watches until a
	// tenth of the period before its next beat. The measurement starts after one period.
	period := time.Duration(agents) * time.Second / rate
	each := max(1, b.N/agents)
	start := time.Now().Add(period)
	measured := start.Add(period)
	var beats sync.WaitGroup
	errs := make(chan error, agents)
	for i, c := range clients {
		beats.Go(func() {
			next := start.Add(time.Duration(i) * period / time.Duration(agents))
			for range each + 1 {
				time.Sleep(time.Until(next))
				next = next.Add(period)
				if err := do(ctx, c, http.MethodPost, "/heartbeat", body); err != nil {
					errs <- err
					return
				}
				if watch == watchBetween {
					wait := time.Until(next) - period/10
					wctx, stop := context.WithTimeout(ctx, wait+time.Second)
					err := do(wctx, c, http.MethodGet, fmt.Sprintf("/watch?wait=%.3f", wait.Seconds()), nil)
					stop()
					if err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	time.Sleep(time.Until(measured))
	var st floorStats
	if err := getJSON(statsClient, url+"/stats", &st); err != nil {
		b.Fatal(err)
	}
	meter, err := startCPU(cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	beats.Wait()
	perSecond, took := endPaced(b, meter, errs)
	b.ReportMetric(perSecond*took/float64(each*agents)*1e6, "server-cpu-us/beat")
	b.ReportMetric(float64(st.Heap)/float64(agents)/1024, "server-heap-KiB/agent")
	b.ReportMetric(float64(st.Stacks)/float64(agents)/1024, "server-stack-KiB/agent")
	b.ReportMetric(float64(st.Goroutines)/float64(agents), "server-goroutines/agent")
}

// endPaced ends a paced floor benchmark whose senders have all returned: it stops the
// timer, fails on the first error they sent on errs, and returns the server's CPU seconds
// a second and the seconds since meter started.
func endPaced(b *testing.B, meter cpuMeter, errs chan error) (perSecond, took float64) {
	b.StopTimer()
	perSecond, err := meter.rate()
	if err != nil {
		b.Fatal(err)
	}
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return perSecond, time.Since(meter.start).Seconds()
}

// getJSON decodes the answer to a GET of url into v.
func getJSON(c *http.Client, url string, v any) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
