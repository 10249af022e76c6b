package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
)

// End-to-end tests of access through the real binary: the CLI as people run it, an agent's
// own certificate, jobs as their users, and the README's tour on `rota up`.

// newToken makes an API token for user with the admin's CLI and returns it.
func (c *testCluster) newToken(user string) api.NewToken {
	c.t.Helper()
	r := c.rota("admin", "token", "create", "--user", user, "-o", "json")
	if r.code != 0 {
		c.t.Fatalf("rota admin token create --user %s: %s", user, r)
	}
	var tok api.NewToken
	if err := json.Unmarshal([]byte(r.stdout), &tok); err != nil || tok.Token == "" {
		c.t.Fatalf("rota admin token create -o json printed %q: %v", r.stdout, err)
	}
	return tok
}

func TestSecurityThroughTheBinary(t *testing.T) {
	skipShort(t)
	t.Parallel()
	c := newCluster(t, map[string]string{"node-a": "1", "node-b": "1"})

	r := c.rota("whoami")
	if r.code != 0 || !strings.Contains(r.stdout, "admin") {
		t.Fatalf("rota whoami as the first admin: %s", r)
	}
	r = c.rota("submit", "--gpus", "1", "--", "sleep", "600")
	if r.code != 0 {
		t.Fatalf("rota submit as admin: %s", r)
	}
	adminJob := lastLineID(t, r.stdout)
	c.waitState(adminJob, 20*time.Second, api.StateRunning)

	if r := c.rota("admin", "user", "add", "bob"); r.code != 0 {
		t.Fatalf("rota admin user add bob: %s", r)
	}
	bob := c.newToken("bob")

	t.Run("a member cannot cancel another's job", func(t *testing.T) {
		c.t = t
		if r := c.rotaAs(bob.Token, "queue"); r.code != 0 {
			t.Fatalf("rota queue as bob: %s", r)
		}
		r := c.rotaAs(bob.Token, "cancel", strconv.FormatInt(adminJob, 10))
		if r.code != 1 || !strings.Contains(r.stderr, "permission denied") {
			t.Errorf("bob cancelling the admin's job: want exit 1 and \"permission denied\", got %s", r)
		}
		if d := c.job(adminJob); d.State != api.StateRunning || d.CancelRequested {
			t.Errorf("after bob's cancel the admin's job is %s (cancel requested %v); want RUNNING, untouched", d.State, d.CancelRequested)
		}
	})

	t.Run("a revoked token is refused at once", func(t *testing.T) {
		c.t = t
		tok := c.newToken("bob")
		if r := c.rotaAs(tok.Token, "whoami"); r.code != 0 || !strings.Contains(r.stdout, "bob") {
			t.Fatalf("rota whoami with bob's new token: %s", r)
		}
		if r := c.rota("admin", "token", "revoke", tok.ID); r.code != 0 {
			t.Fatalf("rota admin token revoke %s: %s", tok.ID, r)
		}
		r := c.rotaAs(tok.Token, "whoami")
		if r.code == 0 || !strings.Contains(r.stderr, "token not valid") {
			t.Errorf("the revoked token right after its revocation: want refused, got %s", r)
		}
		if r := c.rotaAs(bob.Token, "whoami"); r.code != 0 {
			t.Errorf("bob's other token stopped working with the revoked one: %s", r)
		}
	})

	t.Run("an agent's certificate speaks for its own node only", func(t *testing.T) {
		c.t = t
		id, found, err := auth.LoadNodeIdentity(c.agentDir("node-a"))
		if err != nil || !found {
			t.Fatalf("node-a's identity: found %v, %v", found, err)
		}
		cert, err := id.TLSCertificate()
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := auth.ClientTLSConfig(id.Pin(), &cert)
		if err != nil {
			t.Fatal(err)
		}
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 20 * time.Second}
		post := func(node string, hb api.Heartbeat) (int, string) {
			t.Helper()
			resp, err := hc.Post("https://"+c.addr+"/api/v1/agents/"+node+"/heartbeat", "application/json", jsonBody(t, hb))
			if err != nil {
				t.Fatalf("heartbeat for %s with node-a's certificate: %v", node, err)
			}
			defer resp.Body.Close()
			var e api.Error
			json.NewDecoder(resp.Body).Decode(&e)
			return resp.StatusCode, e.Message
		}
		// The identity works for its own node: its watch answers.
		resp, err := hc.Get("https://" + c.addr + "/api/v1/agents/node-a/watch?version=0&wait=1")
		if err != nil {
			t.Fatalf("node-a's watch with its own certificate: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("node-a's watch with its own certificate: %s; want 200", resp.Status)
		}
		before := c.node("node-b")
		status, msg := post("node-b", api.Heartbeat{Node: "node-b", Instance: "intruder", Inventory: before.Inventory,
			Tasks: []api.TaskStatus{}, AgentTime: time.Now(), Synced: true})
		if status != http.StatusForbidden && status != http.StatusUnauthorized {
			t.Errorf("node-b's heartbeat with node-a's certificate: %d %q; want 403", status, msg)
		}
		if after := c.node("node-b"); after.Agent == nil || before.Agent == nil || after.Agent.Instance != before.Agent.Instance {
			t.Errorf("node-b's agent changed to %+v after a report with node-a's certificate", after.Agent)
		}
	})

	t.Run("log paths stay in the log directory", func(t *testing.T) {
		c.t = t
		for _, q := range []string{"node=../../x", "node=..%2F..%2Fx", "node=/etc/passwd"} {
			path := fmt.Sprintf("/api/v1/jobs/%d/logs?%s", adminJob, q)
			if status, body := c.request(http.MethodGet, path, c.token, nil); status != http.StatusNotFound {
				t.Errorf("GET %s: %d %s; want 404", path, status, body)
			}
		}
		if status, body := c.request(http.MethodGet, "/api/v1/jobs/1/logs?node=../../x", c.token, nil); status != http.StatusNotFound {
			t.Errorf("GET /api/v1/jobs/1/logs?node=../../x: %d %s; want 404", status, body)
		}
	})

	t.Run("agents join over TLS only", func(t *testing.T) {
		c.t = t
		p := startProc(t, c.logDir, "agent-plain", nil, "agent", "--server", "http://"+c.addr, "--name", "node-plain",
			"--fake-gpus", "1", "--data-dir", filepath.Join(c.root, "agent-plain"), "--join", c.joinToken("node-plain"))
		code, ok := p.waitExit(20 * time.Second)
		if !ok || code == 0 || !strings.Contains(p.output(), "https") {
			t.Errorf("an agent joining over plain http: exited %v (code %d); want refused, saying https is needed:\n%s", ok, code, p.output())
		}
	})

	t.Run("no credentials, no answer", func(t *testing.T) {
		c.t = t
		if status, _ := c.request(http.MethodGet, "/api/v1/jobs", "", nil); status != http.StatusUnauthorized {
			t.Errorf("GET /api/v1/jobs without a token: %d; want 401", status)
		}
		if status, _ := c.request(http.MethodGet, "/api/v1/jobs", "rota_not-a-token", nil); status != http.StatusUnauthorized {
			t.Errorf("GET /api/v1/jobs with a made-up token: %d; want 401", status)
		}
	})
}

// testAccount is the Unix account jobs of a mapped rota user run as.
const testAccount = "rotatest"

// ensureAccount makes the test account unless it exists, and returns its uid.
func ensureAccount(t *testing.T) string {
	t.Helper()
	if out, err := exec.Command("id", "-u", testAccount).Output(); err == nil {
		return strings.TrimSpace(string(out))
	}
	if out, err := exec.Command("useradd", "--no-create-home", "--shell", "/bin/sh", testAccount).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v\n%s", testAccount, err, out)
	}
	out, err := exec.Command("id", "-u", testAccount).Output()
	if err != nil {
		t.Fatalf("id -u %s: %v", testAccount, err)
	}
	return strings.TrimSpace(string(out))
}

// A rota user mapped to a Unix account runs jobs as that account, with its rights and no
// more.
func TestJobsRunAsTheirUsers(t *testing.T) {
	skipShort(t)
	if os.Geteuid() != 0 {
		t.Skip("jobs switch to their users' accounts only where the agent runs as root; run the tests as root to cover it")
	}
	t.Parallel()
	uid := ensureAccount(t)
	c := newTestCluster(t, map[string]string{"node-a": "1"}, clusterOpts{shared: true})
	if r := c.rota("admin", "user", "add", "alice", "--unix-user", testAccount); r.code != 0 {
		t.Fatalf("rota admin user add alice: %s", r)
	}
	alice := c.newToken("alice")
	r := c.rotaAs(alice.Token, "submit", "--gpus", "1", "--", "sh", "-c",
		`echo "uid=$(id -u)"; if cat /etc/shadow >/dev/null 2>&1; then echo "shadow: readable"; else echo "shadow: refused"; fi`)
	if r.code != 0 {
		t.Fatalf("rota submit as alice: %s", r)
	}
	id := lastLineID(t, r.stdout)
	d := c.waitEnded(id, 20*time.Second)
	if d.State != api.StateSucceeded || d.Spec.User != "alice" {
		t.Fatalf("alice's job ended %s (%s: %s), user %q; want SUCCEEDED as alice", d.State, d.Reason, d.Message, d.Spec.User)
	}
	log := c.logs(id)
	if !strings.Contains(log, "uid="+uid+"\n") {
		t.Errorf("alice's job ran as another account than %s (uid %s):\n%s", testAccount, uid, log)
	}
	if !strings.Contains(log, "shadow: refused") {
		t.Errorf("alice's job could read /etc/shadow:\n%s", log)
	}
}
