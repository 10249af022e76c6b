package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/rotahq/rota/internal/api"
)

// testUser is an unprivileged account for jobs, made with useradd when missing.
const testUser = "rota-test-job"

func needTestUser(t *testing.T) *user.User {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("starting jobs as other accounts needs root: run the tests as root to cover it")
	}
	u, err := user.Lookup(testUser)
	if err != nil {
		out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/bin/sh", testUser).CombinedOutput()
		if err != nil {
			t.Skipf("cannot create the test account %s: %v: %s", testUser, err, out)
		}
		t.Cleanup(func() { exec.Command("userdel", testUser).Run() })
		if u, err = user.Lookup(testUser); err != nil {
			t.Fatal(err)
		}
	}
	return u
}

// A job runs as the account it names, with that account's identity and a clean
// environment, and cannot read what only root can; the agent's own files stay root's.
func TestRunAsUser(t *testing.T) {
	u := needTestUser(t)
	r := newTestRunner(t)
	// The job traverses the data directory to reach its own directory.
	os.Chmod(r.dataDir, 0o755)
	os.Chmod(filepath.Dir(r.dataDir), 0o755)
	private := t.TempDir()
	os.Chmod(private, 0o755)
	secret := filepath.Join(private, "secret")
	os.WriteFile(secret, []byte("root only\n"), 0o600)

	task := shTask(1, `id -u; id -g; echo "HOME=$HOME USER=$USER LOGNAME=$LOGNAME PATH=$PATH AGENT=${ROTA_TEST_AGENT_VAR-unset}"
cat "$1" 2>/dev/null || echo cannot-read-secret
touch "$ROTA_CHECKPOINT_DIR/x" && echo checkpoint-writable
echo '{"progress": {"step": 1}}' >> "$ROTA_EVENTS_FILE" && echo events-writable
echo forged > "$(dirname "$ROTA_EVENTS_FILE")/../status.json" 2>/dev/null || echo cannot-forge-status`, secret)
	task.RunAs = testUser
	a := startTask(t, r, task)
	st := waitEnd(t, a)
	out := readFile(t, a.logPath)
	if st.State != api.StateSucceeded {
		t.Fatalf("got %s (%s):\n%s", st.State, st.Message, out)
	}
	want := []string{
		u.Uid + "\n" + u.Gid + "\n",
		"HOME=" + u.HomeDir + " USER=" + testUser + " LOGNAME=" + testUser + " PATH=" + cleanPath + " AGENT=unset",
		"cannot-read-secret", "checkpoint-writable", "events-writable", "cannot-forge-status",
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("job output lacks %q:\n%s", w, out)
		}
	}
	if strings.Contains(out, "root only") {
		t.Error("the job read a root-only file")
	}
	uid, _ := strconv.Atoi(u.Uid)
	for path, owner := range map[string]int{
		filepath.Join(a.dir, dirJob):                              uid,
		localCheckpointDir(r.dataDir, a.key):                      uid,
		filepath.Join(a.dir, fileStatus):                          0,
		filepath.Join(a.dir, fileTask):                            0,
		filepath.Join(a.dir, fileOutput):                          0,
		filepath.Join(a.dir, fileSupervisorPID):                   0,
		filepath.Join(a.dir, dirJob, fileEvents):                  uid,
		filepath.Dir(localCheckpointDir(r.dataDir, a.key)) + "/.": 0,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Error(err)
			continue
		}
		if got := int(fi.Sys().(*syscall.Stat_t).Uid); got != owner {
			t.Errorf("%s is owned by uid %d, want %d", path, got, owner)
		}
		if fi.IsDir() && owner != 0 && fi.Mode().Perm() != 0o700 {
			t.Errorf("%s has mode %v, want 0700", path, fi.Mode().Perm())
		}
	}
	if rec := statusOf(t, a); rec.State != api.StateSucceeded {
		t.Errorf("status.json was changed: %+v", rec)
	}
}

func TestRunAsRefusals(t *testing.T) {
	needTestUser(t)
	r := newTestRunner(t)
	tests := []struct {
		name string
		task api.Task
		// want is in the start error; empty means the job runs, as uid wantUID.
		want    string
		wantUID string
	}{
		{"root without allow_root", api.Task{RunAs: "root"}, `run as "root": that is root (uid 0), and jobs run as root only where an admin allows it (allow_root)`, ""},
		{"root with allow_root", api.Task{RunAs: "root", AllowRoot: true}, "", "0"},
		{"unknown account", api.Task{RunAs: "rota-no-such-user"}, `run as "rota-no-such-user": no such account on this node`, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			task := tt.task
			task.JobID, task.Attempt, task.Command = int64(i+1), 1, []string{"id", "-u"}
			a := startTask(t, r, task)
			st := waitEnd(t, a)
			if tt.want == "" {
				if st.State != api.StateSucceeded || readFile(t, a.logPath) != tt.wantUID+"\n" {
					t.Errorf("got %s (%s), output %q; want the job run as uid %s", st.State, st.Message, readFile(t, a.logPath), tt.wantUID)
				}
				return
			}
			if st.State != api.StateFailed || st.Reason != api.ReasonStartError || !strings.Contains(st.Message, tt.want) {
				t.Errorf("got %s reason %q (%s), want start_error saying %q", st.State, st.Reason, st.Message, tt.want)
			}
		})
	}
}

// An agent that does not run as root starts jobs of its own account only.
func TestResolveAccountWithoutRoot(t *testing.T) {
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	other := "root"
	if me.Uid == "0" {
		other = "nobody"
		if _, err := user.Lookup(other); err != nil {
			t.Skip("no account nobody to play another user")
		}
	}
	const euid = 54321 // an agent account no task names
	_, err = resolveAccount(api.Task{RunAs: other, AllowRoot: true}, euid)
	if err == nil || !strings.Contains(err.Error(), "must run as root to start jobs as other users") {
		t.Errorf("resolveAccount = %v, want the agent must run as root", err)
	}
	acct, err := resolveAccount(api.Task{}, euid)
	if err != nil || acct.switchTo || acct.uid != euid {
		t.Errorf("empty run_as: %+v, %v; want the agent's own account", acct, err)
	}
}

// A shared checkpoint directory is the same for every attempt of a job, wherever it runs;
// a node-local one stays on the node, and the notice says a requeued attempt elsewhere
// starts without it.
func TestCheckpointDirectories(t *testing.T) {
	r := newTestRunner(t)
	shared := filepath.Join(t.TempDir(), "ckpt", testCluster, "5")
	save := `trap 'cat "$ROTA_NOTICE_FILE" > "$1"; exit 0' TERM
echo "$ROTA_CHECKPOINT_DIR" > "$2"; echo step-1 > "$ROTA_CHECKPOINT_DIR/last"; echo ready
while :; do sleep 0.05; done`
	restore := `echo "$ROTA_CHECKPOINT_DIR"; cat "$ROTA_CHECKPOINT_DIR/last"`
	tests := []struct {
		name   string
		dir    string
		want   string
		shared bool
	}{
		{"shared", shared, shared, true},
		{"node-local", "", localCheckpointDir(r.dataDir, attemptKey{cluster: testCluster, job: 6}), false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job := int64(5 + i)
			tmp := t.TempDir()
			noticeSeen, dirSeen := filepath.Join(tmp, "notice"), filepath.Join(tmp, "dir")
			first := shTask(job, save, noticeSeen, dirSeen)
			first.CheckpointDir, first.GraceSeconds = tt.dir, 30
			a := startTask(t, r, first)
			waitLog(t, a, "ready")
			a.stop(api.ReasonPreempted)
			waitEnd(t, a)
			var n notice
			if err := json.Unmarshal([]byte(readFile(t, noticeSeen)), &n); err != nil {
				t.Fatal(err)
			}
			if n.CheckpointDir != tt.want || n.CheckpointsShared != tt.shared || strings.Contains(n.Checkpoints, "starts without them") == tt.shared {
				t.Errorf("notice = %+v, want checkpoints in %s, shared %v, and a warning only when not shared", n, tt.want, tt.shared)
			}

			second := shTask(job, restore)
			second.Attempt, second.CheckpointDir = 2, tt.dir
			b := startTask(t, r, second)
			if st := waitEnd(t, b); st.State != api.StateSucceeded {
				t.Fatalf("second attempt: %s (%s)", st.State, st.Message)
			}
			if got, want := readFile(t, b.logPath), tt.want+"\nstep-1\n"; got != want {
				t.Errorf("second attempt saw %q, want %q", got, want)
			}
		})
	}
}

// A shared checkpoint directory the node cannot create (NFS with root_squash, say) is
// not a reason to refuse the job: it may manage, and its log says what happened.
func TestCheckpointDirectoryNotCreatable(t *testing.T) {
	r := newTestRunner(t)
	blocker := filepath.Join(t.TempDir(), "file")
	os.WriteFile(blocker, nil, 0o644)
	task := shTask(1, "echo ran")
	task.CheckpointDir = filepath.Join(blocker, "ckpt")
	a := startTask(t, r, task)
	if st := waitEnd(t, a); st.State != api.StateSucceeded {
		t.Fatalf("got %s (%s), want the job to run anyway", st.State, st.Message)
	}
	want := fmt.Sprintf("rota: warning: cannot create the checkpoint directory %s", task.CheckpointDir)
	if out := readFile(t, a.logPath); !strings.Contains(out, want) || !strings.HasSuffix(out, "ran\n") {
		t.Errorf("log %q, want the warning and then the job's output", out)
	}
}
