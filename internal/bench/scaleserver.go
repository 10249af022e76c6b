package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rotahq/rota/internal/auth"
)

// serverProc is `rota server` running as a process of its own, so that the CPU time and
// memory the scale suite reports are the server's alone, not the load generator's. It
// serves TLS from its own CA on a loopback port with a SQLite store in a temporary
// directory, exactly as an operator would start it.
type serverProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	dir  string
	log  string
	url  string
	// token is the first admin's; pin recognises the server by its CA.
	token string
	pin   auth.Pin
	// client is a client's HTTPS client: the admin token, the pinned CA.
	client *http.Client
}

// serverStartTimeout bounds the wait for a started server to answer.
const serverStartTimeout = time.Minute

// startServerProc starts o.Binary as `rota server`, with the options' heartbeat
// interval, profiles and memory limit, and waits until it answers.
func startServerProc(ctx context.Context, o ScaleOptions) (*serverProc, error) {
	dir, err := os.MkdirTemp("", "rota-scale-")
	if err != nil {
		return nil, err
	}
	addr, err := freeLoopbackAddr()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	p := &serverProc{dir: dir, log: filepath.Join(dir, "server.log"), url: "https://" + addr, done: make(chan struct{})}
	logFile, err := os.Create(p.log)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logFile.Close()
	// The server's defaults allow 7.5 heartbeats of silence (2s, 15s) before a node takes
	// no new work; a longer interval keeps that margin, else every late answer would flip
	// nodes to NOT_READY and back, each flip a commit, which is not the load to measure.
	notReady := max(15*time.Second, o.Heartbeat*15/2)
	p.cmd = exec.Command(o.Binary, "server", "--data-dir", filepath.Join(dir, "data"), "--listen", addr, "--tls",
		"--heartbeat-interval", o.Heartbeat.String(), "--node-not-ready-after", notReady.String(),
		"--node-lost-after", max(5*time.Minute, 2*notReady).String())
	if o.ServerMemoryLimit != "" {
		p.cmd.Args = append(p.cmd.Args, "--memory-limit", o.ServerMemoryLimit)
	}
	if o.ServerMaxHeartbeats != "" {
		p.cmd.Args = append(p.cmd.Args, "--max-heartbeats-per-second", o.ServerMaxHeartbeats)
	}
	for flag, file := range map[string]string{"--cpu-profile": o.ServerCPUProfile, "--mem-profile": o.ServerMemProfile} {
		if file == "" {
			continue
		}
		if abs, err := filepath.Abs(file); err == nil {
			file = abs
		}
		p.cmd.Args = append(p.cmd.Args, flag, file)
	}
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	// The server must not pick up the settings of whoever runs the benchmark.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ROTA_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	if err := p.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s server: %w", o.Binary, err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	if err := p.waitReady(ctx); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitReady waits for the admin token and the CA the server writes on its first start,
// then for an answer over TLS.
func (p *serverProc) waitReady(ctx context.Context) error {
	data := filepath.Join(p.dir, "data")
	deadline := time.Now().Add(serverStartTimeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("the server exited at start: %s%s", p.cmd.ProcessState, p.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if p.client == nil {
			token, err1 := os.ReadFile(filepath.Join(data, "admin-token"))
			ca, err2 := os.ReadFile(filepath.Join(data, "ca", "ca.crt"))
			if last = errors.Join(err1, err2); last != nil {
				continue
			}
			p.token, p.pin = strings.TrimSpace(string(token)), auth.Pin{CAPEM: ca}
			c, err := p.newClient()
			if err != nil {
				return err
			}
			p.client = c
		}
		if last = p.do(ctx, http.MethodGet, "/api/v1/nodes", nil, nil, nil); last == nil {
			return nil
		}
	}
	return fmt.Errorf("the server did not answer within %s: %v%s", serverStartTimeout, last, p.logTail())
}

// newClient is one client's connection to the server, as a user's CLI would have: its own
// TLS connection, the pinned CA, HTTP/1.1 as the server speaks it.
func (p *serverProc) newClient() (*http.Client, error) {
	cfg, err := auth.ClientTLSConfig(p.pin, nil)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, MaxIdleConnsPerHost: 4}, Timeout: 5 * time.Minute}, nil
}

// newLeanConn is newClient as one leanConn.
func (p *serverProc) newLeanConn() (*leanConn, error) {
	cfg, err := auth.ClientTLSConfig(p.pin, nil)
	if err != nil {
		return nil, err
	}
	return newLeanConn(p.url, cfg)
}

// do sends one request with the admin token; body, if not nil, is sent as JSON (or as
// YAML when it is a string), and the answer is decoded into out when out is not nil.
func (p *serverProc) do(ctx context.Context, method, path string, header http.Header, body, out any) error {
	var rd io.Reader
	ctype := ""
	switch b := body.(type) {
	case nil:
	case string:
		rd, ctype = strings.NewReader(b), "application/yaml"
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return err
		}
		rd, ctype = bytes.NewReader(data), "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, method, p.url+path, rd)
	if err != nil {
		return err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: status %d: %s", method, path, resp.StatusCode, bytes.TrimSpace(msg))
	}
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// stop ends the server (SIGTERM, then SIGKILL after a grace) and removes its directory.
func (p *serverProc) stop() {
	if p.client != nil {
		p.client.CloseIdleConnections()
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
	os.RemoveAll(p.dir)
}

// logTail is the end of the server's log, as a suffix for an error message.
func (p *serverProc) logTail() string {
	data, _ := os.ReadFile(p.log)
	if len(data) > 2048 {
		data = data[len(data)-2048:]
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return ""
	}
	return "\nserver log ends:\n" + string(data)
}

// alive reports an error if the server has exited.
func (p *serverProc) alive() error {
	select {
	case <-p.done:
		return fmt.Errorf("the server exited: %s%s", p.cmd.ProcessState, p.logTail())
	default:
		return nil
	}
}

// clockTicks is the unit of CPU times in /proc/PID/stat (USER_HZ), 100 on every Linux
// platform Go supports.
const clockTicks = 100

// cpuSeconds is the CPU time, user and system, that process pid has used.
func cpuSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read the server's CPU time: %w", err)
	}
	// The command name, in parentheses, may hold spaces: fields are counted after it.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	// After the name: state (field 3 of proc(5)) … utime (14), stime (15).
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return (utime + stime) / clockTicks, nil
}

// machineIdleSeconds is the time every CPU of the machine has spent idle (or idle waiting
// for the disk), summed over CPUs, from the first line of /proc/stat.
func machineIdleSeconds() (float64, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("read the machine's idle time: %w", err)
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("/proc/stat: %w", err)
	}
	// cpu  user nice system idle iowait irq softirq …
	fields := strings.Fields(line)
	if len(fields) < 6 || fields[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: first line %q is not the CPUs' total", line)
	}
	idle, err1 := strconv.ParseFloat(fields[4], 64)
	iowait, err2 := strconv.ParseFloat(fields[5], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/stat: %w", err)
	}
	return (idle + iowait) / clockTicks, nil
}

// mb is a megabyte as the memory figures count it (a mebibyte, as /proc's kB are KiB).
const mb = 1 << 20

// memoryMB reads VmRSS (resident now) and VmHWM (the most ever resident) of process pid.
func memoryMB(pid int) (rss, hwm float64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("read the server's memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	found := 0
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status: %s: %w", pid, key, err)
		}
		if key == "VmRSS" {
			rss = kb / 1024
		} else {
			hwm = kb / 1024
		}
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no VmRSS and VmHWM", pid)
	}
	return rss, hwm, sc.Err()
}

// cpuMeter measures the CPU seconds per wall second of a process over an interval.
type cpuMeter struct {
	pid   int
	cpu   float64
	start time.Time
}

func startCPU(pid int) (cpuMeter, error) {
	c, err := cpuSeconds(pid)
	return cpuMeter{pid: pid, cpu: c, start: time.Now()}, err
}

// rate is CPU seconds per wall second since the meter started.
func (m cpuMeter) rate() (float64, error) {
	c, err := cpuSeconds(m.pid)
	if err != nil {
		return 0, err
	}
	return (c - m.cpu) / time.Since(m.start).Seconds(), nil
}

// promSample is one line of the Prometheus text format.
type promSample struct {
	name   string
	labels map[string]string
	value  float64
}

// promMetrics is one scrape of /metrics.
type promMetrics []promSample

// scrape reads the server's /metrics.
func (p *serverProc) scrape(ctx context.Context) (promMetrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+p.token)
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: status %d", resp.StatusCode)
	}
	return parseProm(resp.Body)
}

// parseProm reads the Prometheus text format as the server writes it: one sample a line,
// NAME{LABEL="VALUE",...} VALUE, comments starting with #.
func parseProm(r io.Reader) (promMetrics, error) {
	var out promMetrics
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			return nil, fmt.Errorf("metrics: line %q has no value", line)
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: line %q: %w", line, err)
		}
		s := promSample{name: line[:sp], value: v}
		if i := strings.IndexByte(s.name, '{'); i >= 0 {
			if !strings.HasSuffix(s.name, "}") {
				return nil, fmt.Errorf("metrics: line %q: unterminated labels", line)
			}
			s.labels = map[string]string{}
			for kv := range strings.SplitSeq(s.name[i+1:len(s.name)-1], ",") {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					continue
				}
				s.labels[k] = strings.Trim(v, `"`)
			}
			s.name = s.name[:i]
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// sum adds up the samples of name whose labels include every pair of want.
func (m promMetrics) sum(name string, want ...string) float64 {
	total := 0.0
	for _, s := range m {
		if s.name == name && hasLabels(s.labels, want) {
			total += s.value
		}
	}
	return total
}

// hasLabels reports whether labels hold every pair in want (name, value, name, value...).
func hasLabels(labels map[string]string, want []string) bool {
	for i := 0; i+1 < len(want); i += 2 {
		if labels[want[i]] != want[i+1] {
			return false
		}
	}
	return true
}

// histogram is the cumulative buckets, sum and count of one Prometheus histogram.
type histogram struct {
	le    []float64 // upper bounds, ascending, +Inf last
	count []float64 // cumulative counts per bound
	sum   float64
	n     float64
}

// histogram is the named histogram, summed over the series whose labels hold the pairs
// in want (name, value, name, value...), as sum does.
func (m promMetrics) histogram(name string, want ...string) histogram {
	var h histogram
	byBound := map[float64]float64{}
	for _, s := range m {
		if !hasLabels(s.labels, want) {
			continue
		}
		switch s.name {
		case name + "_bucket":
			le, err := strconv.ParseFloat(s.labels["le"], 64)
			if err != nil {
				le = math.Inf(1)
			}
			byBound[le] += s.value
		case name + "_sum":
			h.sum += s.value
		case name + "_count":
			h.n += s.value
		}
	}
	h.le = slices.Sorted(maps.Keys(byBound))
	for _, le := range h.le {
		h.count = append(h.count, byBound[le])
	}
	return h
}

// since is what was observed between an earlier scrape and this one.
func (h histogram) since(before histogram) histogram {
	out := histogram{le: h.le, count: slices.Clone(h.count), sum: h.sum - before.sum, n: h.n - before.n}
	for i := range out.count {
		if i < len(before.count) {
			out.count[i] -= before.count[i]
		}
	}
	return out
}

// mean is the average observation, 0 when there is none.
func (h histogram) mean() float64 {
	if h.n <= 0 {
		return 0
	}
	return h.sum / h.n
}

// reportBound is quantileBound as a report can hold it (JSON has no infinity): beyond the
// last finite bound, that bound, which docs/scale.md says to read as "at least".
func (h histogram) reportBound(q float64) float64 {
	b := h.quantileBound(q)
	if math.IsInf(b, 1) {
		for i := len(h.le) - 1; i >= 0; i-- {
			if !math.IsInf(h.le[i], 1) {
				return h.le[i]
			}
		}
		return 0
	}
	return b
}

// quantileBound is the upper bound of the bucket that holds quantile q: the histogram
// says no more precisely where it lies. +Inf when it lies beyond the last finite bound.
func (h histogram) quantileBound(q float64) float64 {
	if h.n <= 0 {
		return 0
	}
	for i, c := range h.count {
		if c >= q*h.n {
			return h.le[i]
		}
	}
	return math.Inf(1)
}

// raiseFileLimit makes sure this process and the server it starts may hold n open files,
// the connections of the simulated agents on both ends and some to spare. It raises the
// soft limit, and the hard one where it may (as root with CAP_SYS_RESOURCE); why is the
// reason given when it cannot.
func raiseFileLimit(n uint64, why string) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur >= n {
		return nil
	}
	want := lim
	want.Cur = n
	if want.Max < n {
		want.Max = n
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		return fmt.Errorf("%s: about %d open files in the generator and in the server, but the limit is %d and cannot be raised (%v): "+
			"raise it (ulimit -n; deploy/rota-server.service sets LimitNOFILE=65536), use fewer --nodes, or --watch=false", why, n, lim.Max, err)
	}
	return nil
}
