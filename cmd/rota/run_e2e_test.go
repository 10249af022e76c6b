package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cli"
)

// End-to-end tests of interactive jobs: rota run and rota attach on a real pseudo-terminal
// (the test holds its master, as a terminal emulator would), against a real server and
// agent, with the job on a pseudo-terminal of its own on the node.

// ptyProc is a rota CLI process whose stdin, stdout and stderr are a terminal the test
// holds.
type ptyProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	master *os.File
	done   chan struct{}
	code   int

	mu  sync.Mutex
	out bytes.Buffer
}

// rotaPTY starts the CLI with token on a new 30x100 terminal, whose output the test reads.
func (c *testCluster) rotaPTY(t *testing.T, token string, args ...string) *ptyProc {
	t.Helper()
	return c.startPTY(t, token, true, args...)
}

// startPTY is rotaPTY; without read nothing reads the terminal, so closing its master
// really closes it (a read blocked on it would hold it open).
func (c *testCluster) startPTY(t *testing.T, token string, read bool, args ...string) *ptyProc {
	t.Helper()
	return startPTY(t, read, []string{"ROTA_SERVER=https://" + c.addr, "ROTA_TOKEN=" + token, "ROTA_CA_FINGERPRINT=" + c.fingerprint,
		"HOME=" + filepath.Join(c.root, "home"), "XDG_CONFIG_HOME=" + filepath.Join(c.root, "home", ".config")}, args...)
}

// startPTY starts the CLI with env (beside the test's own, less its ROTA_ variables) on a
// new 30x100 terminal; with read the test reads what it shows.
func startPTY(t *testing.T, read bool, env []string, args ...string) *ptyProc {
	t.Helper()
	cmd := exec.Command(rotaBinary(t), args...)
	cmd.Env = processEnv(append(env, "TERM=xterm")...)
	master, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 30, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	p := &ptyProc{t: t, cmd: cmd, master: master, done: make(chan struct{})}
	go func() {
		if !read {
			return
		}
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			p.mu.Lock()
			p.out.Write(buf[:n])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() {
		err := cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.code = 128 + int(ws.Signal())
		}
		_ = err
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		master.Close()
		if t.Failed() {
			t.Logf("--- rota %v on a terminal ---\n%q", args, p.output())
		}
	})
	return p
}

func (p *ptyProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// waitOutput waits until the terminal has shown re.
func (p *ptyProc) waitOutput(re string) []string {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	var m []string
	waitForf(p.t, 30*time.Second, func() string { return "terminal output matching " + re + "; have " + strconv.Quote(p.output()) }, func() bool {
		m = rx.FindStringSubmatch(p.output())
		return m != nil
	})
	return m
}

func (p *ptyProc) typeText(s string) {
	p.t.Helper()
	if _, err := p.master.Write([]byte(s)); err != nil {
		p.t.Fatalf("type %q: %v", s, err)
	}
}

// exit waits for the process to exit and returns its code.
func (p *ptyProc) exit() int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(40 * time.Second):
		p.t.Fatalf("rota did not exit; terminal shows %q", p.output())
		return 0
	}
}

// jobID reads the job ID rota run announces.
func (p *ptyProc) jobID() int64 {
	p.t.Helper()
	m := p.waitOutput(`job (\d+) submitted`)
	id, _ := strconv.ParseInt(m[1], 10, 64)
	return id
}

func TestInteractiveRun(t *testing.T) {
	skipShort(t)
	t.Parallel()
	c := newTestCluster(t, map[string]string{"node-a": "2"}, clusterOpts{attachGrace: "4s"})
	top := t // processes started for the whole test, not one subtest, register with it

	t.Run("window size and exit code", func(t *testing.T) {
		c.t = t
		p := c.rotaPTY(t, c.token, "run", "--gpus", "1", "--", "sh", "-c",
			`echo "gpus=$CUDA_VISIBLE_DEVICES tty=$(tty)"; stty size; while read a; do [ "$a" = end ] && exit 7; stty size; done`)
		id := p.jobID()
		p.waitOutput(`gpus=\d tty=/dev/pts/\d+`)
		// The job may start before the terminal's size reaches it: only a resize is sure
		// to be seen.
		p.waitOutput(`(?m)^\d+ \d+\r?$`)
		if err := pty.Setsize(p.master, &pty.Winsize{Rows: 41, Cols: 123}); err != nil {
			t.Fatal(err)
		}
		waitForf(t, 30*time.Second, func() string { return "the job to see 41 123; terminal shows " + strconv.Quote(p.output()) }, func() bool {
			p.typeText("x\n")
			time.Sleep(100 * time.Millisecond)
			return strings.Contains(p.output(), "41 123")
		})
		p.typeText("end\n")
		if code := p.exit(); code != 7 {
			t.Errorf("rota run exited %d; want the job's 7", code)
		}
		if d := c.job(id); d.State != api.StateFailed || d.ExitCode == nil || *d.ExitCode != 7 || !d.Spec.TTY || d.Spec.Queue != "interactive" {
			t.Errorf("job %d: state %s exit %v tty %v queue %s; want FAILED, 7, a tty job of queue interactive", id, d.State, d.ExitCode, d.Spec.TTY, d.Spec.Queue)
		}
		// What the job wrote on its terminal is in its log too.
		if log := c.logs(id); !strings.Contains(log, "41 123") {
			t.Errorf("job %d's log lacks its terminal output: %q", id, log)
		}
	})

	t.Run("a job quicker than the relay still shows its output", func(t *testing.T) {
		c.t = t
		for i := range 3 {
			p := c.rotaPTY(t, c.token, "run", "--", "sh", "-c", fmt.Sprintf("echo quick-%d; exit 9", i))
			if code := p.exit(); code != 9 {
				t.Errorf("rota run of a quick job exited %d; want 9", code)
			}
			p.waitOutput(fmt.Sprintf("quick-%d", i))
		}
	})

	t.Run("Ctrl-C and signals to rota run reach the job", func(t *testing.T) {
		c.t = t
		p := c.rotaPTY(t, c.token, "run", "--", "sh", "-c",
			`n=0; trap 'n=$((n+1)); echo caught-$n; [ $n = 2 ] && exit 42' INT; echo armed; while :; do sleep 0.1; done`)
		p.waitOutput(`armed`)
		p.typeText("\x03") // Ctrl-C: through the node's terminal, SIGINT to its foreground group
		p.waitOutput(`caught-1`)
		if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		p.waitOutput(`caught-2`)
		if code := p.exit(); code != 42 {
			t.Errorf("rota run exited %d; want the job's 42", code)
		}
	})

	t.Run("closing the terminal cancels the job and frees its GPUs", func(t *testing.T) {
		c.t = t
		p := c.startPTY(t, c.token, false, "run", "--gpus", "2", "--", "sh", "-c", "echo holding; sleep 600")
		var id int64
		waitFor(t, 30*time.Second, "the job of rota run --gpus 2 running", func() bool {
			jobs, err := c.client.AllJobs(context.Background(), cli.ListOptions{})
			for _, j := range jobs {
				if err == nil && j.State == api.StateRunning && j.Spec.GPUs == 2 && j.Spec.TTY {
					id = j.ID
				}
			}
			return id != 0
		})
		time.Sleep(300 * time.Millisecond) // and attached
		p.master.Close()                   // the terminal window closes: rota run gets SIGHUP
		d := c.waitEnded(id, 30*time.Second)
		if d.State != api.StateCancelled {
			t.Fatalf("job %d is %s (%s) after its terminal closed; want CANCELLED", id, d.State, d.Message)
		}
		<-p.done
		waitFor(t, 20*time.Second, "node-a's GPUs free", func() bool { return c.node("node-a").GPUsUsed == 0 })
	})

	t.Run("no terminal: output is streamed and the exit code returned", func(t *testing.T) {
		c.t = t
		r := c.rota("run", "--", "sh", "-c", "echo streamed-line; test -t 0 || echo no-tty; exit 5")
		if r.code != 5 || !strings.Contains(r.stdout, "streamed-line") || !strings.Contains(r.stdout, "no-tty") {
			t.Errorf("rota run < /dev/null: want exit 5 with the job's output, got %s", r)
		}
	})

	var bob string
	t.Run("re-attach, take-over, and other users refused", func(t *testing.T) {
		c.t = t
		p := c.rotaPTY(t, c.token, "run", "--", "sh", "-c", `echo first; read a; echo "again $a"; exit 3`)
		id := p.jobID()
		p.waitOutput(`first`)
		sid := strconv.FormatInt(id, 10)

		if r := c.rota("admin", "user", "add", "bob"); r.code != 0 {
			t.Fatalf("rota admin user add bob: %s", r)
		}
		bob = c.newToken("bob").Token
		if code, body := c.request("GET", "/api/v1/jobs/"+sid+"/attach", bob, nil); code != 403 {
			t.Errorf("bob attaching to the admin's job: status %d %s; want 403", code, body)
		}
		if code, _ := c.request("GET", "/api/v1/jobs/"+sid+"/attach", "", nil); code != 401 {
			t.Errorf("attaching without credentials: status %d; want 401", code)
		}

		// The first client dies without a word (its laptop sleeps): the job waits out the grace.
		_ = p.cmd.Process.Kill()
		<-p.done
		q := c.rotaPTY(t, c.token, "attach", sid)
		q.waitOutput(`first`) // the recent output is replayed
		r := c.rotaPTY(t, c.token, "attach", sid)
		r.waitOutput(`first`)
		if code := q.exit(); code != 1 {
			t.Errorf("the terminal taken over: exit %d; want 1", code)
		}
		q.waitOutput(`another terminal attached`)
		r.typeText("yo\n")
		r.waitOutput(`again yo`)
		if code := r.exit(); code != 3 {
			t.Errorf("rota attach exited %d; want the job's 3", code)
		}
		if d := c.job(id); d.State != api.StateFailed || d.ExitCode == nil || *d.ExitCode != 3 {
			t.Errorf("job %d: %s exit %v; want FAILED with 3", id, d.State, d.ExitCode)
		}
	})

	t.Run("the session survives an agent restart", func(t *testing.T) {
		c.t = t
		p := c.rotaPTY(t, c.token, "run", "--", "sh", "-c", `echo one; read a; echo "two $a"; exit 4`)
		p.waitOutput(`one`)
		c.agents["node-a"].kill()
		c.t = top
		c.restartAgent("node-a")
		c.t = t
		c.waitNodesReady("node-a")
		p.typeText("zz\n") // kept by the server until the new agent's stream opens
		p.waitOutput(`two zz`)
		if code := p.exit(); code != 4 {
			t.Errorf("rota run exited %d after the agent restarted; want the job's 4", code)
		}
	})

	t.Run("after a server restart the job is attached again", func(t *testing.T) {
		c.t = t
		p := c.rotaPTY(t, c.token, "run", "--", "sh", "-c", `echo uno; read a; echo "dos $a"; read b; echo "tres $b"; exit 6`)
		id := p.jobID()
		p.waitOutput(`uno`)
		c.server.kill()
		p.waitOutput(`lost the server`)
		c.t = top
		c.startServer()
		c.t = t
		p.waitOutput(fmt.Sprintf(`reconnected to job %d`, id))
		p.typeText("x\n")
		p.waitOutput(`dos x`)
		// Another terminal takes the job over, and is shown its recent output first.
		q := c.rotaPTY(t, c.token, "attach", strconv.FormatInt(id, 10))
		q.waitOutput(`dos x`)
		if code := p.exit(); code != 1 {
			t.Errorf("rota run taken over by rota attach: exit %d; want 1", code)
		}
		p.waitOutput(`another terminal attached`)
		q.typeText("y\n")
		q.waitOutput(`tres y`)
		if code := q.exit(); code != 6 {
			t.Errorf("rota attach exited %d; want the job's 6", code)
		}
	})

	t.Run("a job nobody attaches to is cancelled after the grace", func(t *testing.T) {
		c.t = t
		p := c.rotaPTY(t, c.token, "run", "--", "sleep", "600")
		id := p.jobID()
		c.waitState(id, 30*time.Second, api.StateRunning)
		_ = p.cmd.Process.Kill()
		d := c.waitEnded(id, 30*time.Second)
		if d.State != api.StateCancelled {
			t.Errorf("job %d is %s after its client was killed; want CANCELLED after the attach grace", id, d.State)
		}
	})

	t.Run("a batch job has no terminal", func(t *testing.T) {
		c.t = t
		r := c.rota("submit", "--", "sleep", "600")
		id := lastLineID(t, r.stdout)
		c.waitState(id, 30*time.Second, api.StateRunning)
		if code, body := c.request("GET", "/api/v1/jobs/"+strconv.FormatInt(id, 10)+"/attach", c.token, nil); code != 409 || !strings.Contains(string(body), "no terminal") {
			t.Errorf("attaching to a batch job: %d %s; want 409 saying it has no terminal", code, body)
		}
		c.rota("cancel", strconv.FormatInt(id, 10))
	})
}

// A server restart under rota run on a terminal: rota run says it lost the server, waits,
// attaches again once `rota up` is back, and the session goes on where it was: the shell
// still reads the line typed, and rota run exits with its code.
func TestInteractiveRunOutlivesAServerRestart(t *testing.T) {
	u := startUp(t, 1)
	p := startPTY(t, true, u.env, "run", "--gpus", "1", "--", "sh", "-c", `echo "ready $$"; read line; echo "got $line"; exit 3`)
	id := p.jobID()
	p.waitOutput(`ready \d+`)

	u.up.signal(syscall.SIGTERM)
	if _, ok := u.up.waitExit(30 * time.Second); !ok {
		t.Fatal("rota up did not stop on SIGTERM")
	}
	p.waitOutput(`lost the server`)
	u.up = startProc(t, u.dir, "up-again", u.env, u.args...)
	p.waitOutput(fmt.Sprintf(`reconnected to job %d`, id))
	p.typeText("hello\r")
	p.waitOutput(`got hello`)
	if code := p.exit(); code != 3 {
		t.Fatalf("rota run exited %d; want the job's 3; terminal shows %q", code, p.output())
	}
	if d := u.waitJob(id, 30*time.Second, api.StateFailed); d.Job.Attempts != 1 {
		t.Errorf("job %d ran %d attempts; want the one it started with", id, d.Job.Attempts)
	}
}
