package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
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

func TestMain(m *testing.M) {
	if dir := os.Getenv(floorServerEnv); dir != "" {
		if err := serveFloor(dir); err != nil {
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
// rota server does, with a handler that does nothing but read the request and write
// floorAnswer. It prints its URL on one line, and serves until it is killed.
func serveFloor(dir string) error {
	ca, _, err := auth.LoadOrCreateCA(dir, "")
	if err != nil {
		return err
	}
	cert, err := ca.ServerCertificate([]string{"127.0.0.1"}, time.Hour)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println("https://" + l.Addr().String())
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Write(floorAnswer)
		}),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13},
	}
	return srv.ServeTLS(l, "", "")
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
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	ca, _, err := auth.LoadOrCreateCA(dir, "")
	if err != nil {
		b.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca.CertPEM()) {
		b.Fatal("the CA's certificate does not parse")
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), floorServerEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("the floor server said nothing: %v", err)
	}
	url := strings.TrimSpace(line)

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
	b.StopTimer()
	perSecond, err := start.rate()
	if err != nil {
		b.Fatal(err)
	}
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	took := time.Since(start.start).Seconds()
	b.ReportMetric(perSecond, "server-cpu-s/s")
	b.ReportMetric(perSecond*took/float64(each*conns)*1e6, "server-cpu-us/req")
	b.ReportMetric(float64(each*conns)/took, "req/s")
}
