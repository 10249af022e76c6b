package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/auth"
)

// measureQueueCLI times `rota queue` as its user runs it: a process of its own, started
// afresh, that connects, reads and prints. The first figures are the time from its start
// to the first job it shows, samples times over (each process is stopped there); then one
// whole listing with --expand (a job a line, so that the lines count the jobs), to the
// process's end, and the jobs it showed.
func measureQueueCLI(ctx context.Context, binary string, srv *serverProc, samples int) (map[string]float64, error) {
	env, err := srv.cliEnv()
	if err != nil {
		return nil, err
	}
	var first []time.Duration
	for range samples {
		d, _, err := runQueueCLI(ctx, binary, env, true, "queue")
		if err != nil {
			return nil, err
		}
		first = append(first, d)
	}
	slices.Sort(first)
	all, rows, err := runQueueCLI(ctx, binary, env, false, "queue", "--expand")
	if err != nil {
		return nil, err
	}
	return map[string]float64{
		"cli-first-jobs-p50-ms": percentileMS(first, .5), "cli-first-jobs-p99-ms": percentileMS(first, .99),
		"cli-all-s": all.Seconds(), "cli-jobs": float64(rows),
	}, nil
}

// runQueueCLI runs rota with env and args. With firstOnly it returns how long the process
// took to show its first line below the header, and stops it; else how long it took to
// exit, and how many lines it showed below the header.
func runQueueCLI(ctx context.Context, binary string, env []string, firstOnly bool, args ...string) (time.Duration, int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	sc := bufio.NewScanner(out)
	lines := 0
	for sc.Scan() {
		lines++
		if firstOnly && lines == 2 { // the header, then the first job
			took := time.Since(start)
			cancel()
			cmd.Wait()
			return took, 1, nil
		}
	}
	werr := cmd.Wait()
	took := time.Since(start)
	switch {
	case werr != nil:
		return 0, 0, fmt.Errorf("rota %s: %v: %s", strings.Join(args, " "), werr, strings.TrimSpace(stderr.String()))
	case firstOnly || lines == 0:
		return 0, 0, fmt.Errorf("rota %s showed no job: %s", strings.Join(args, " "), strings.TrimSpace(stderr.String()))
	}
	return took, lines - 1, nil
}

// cliEnv is the environment of a CLI of the server's first admin: its address, token and
// CA, and a home of its own, so that nothing of whoever runs the benchmark is read.
func (p *serverProc) cliEnv() ([]string, error) {
	pin, err := auth.PEMFingerprint(p.pin.CAPEM)
	if err != nil {
		return nil, fmt.Errorf("the server's CA: %w", err)
	}
	home := filepath.Join(p.dir, "cli-home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, err
	}
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "ROTA_SERVER=" + p.url,
		"ROTA_TOKEN=" + p.token, "ROTA_CA_FINGERPRINT=" + pin}, nil
}
