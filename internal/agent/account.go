package agent

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/user"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/rotahq/rota/internal/api"
)

// account is the Unix account a job runs as.
type account struct {
	name     string
	uid, gid int
	groups   []uint32
	home     string
	shell    string
	// switchTo is set when the supervisor runs as root and starts the job with the
	// account's credentials and a clean environment. Unset, the job runs as the
	// supervisor's own account with the agent's environment.
	switchTo bool
}

// cleanPath is the PATH of a job started as its own account.
const cleanPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// resolveAccount decides which account runs t, or says why none may. An empty RunAs means
// the agent's own account, for agents and servers that do not name one.
func resolveAccount(t api.Task, euid int) (account, error) {
	if t.RunAs == "" {
		return account{name: "", uid: euid, gid: os.Getegid(), home: os.Getenv("HOME")}, nil
	}
	u, err := user.Lookup(t.RunAs)
	if err != nil {
		var unknown user.UnknownUserError
		if errors.As(err, &unknown) {
			return account{}, fmt.Errorf("run as %q: no such account on this node", t.RunAs)
		}
		return account{}, fmt.Errorf("run as %q: %w", t.RunAs, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return account{}, fmt.Errorf("run as %q: uid %q or gid %q is not a number", t.RunAs, u.Uid, u.Gid)
	}
	if uid == 0 && !t.AllowRoot {
		return account{}, fmt.Errorf("run as %q: that is root (uid 0), and jobs run as root only where an admin allows it (allow_root)", t.RunAs)
	}
	acct := account{name: u.Username, uid: uid, gid: gid, home: u.HomeDir, shell: loginShell(u.Username)}
	if euid != 0 {
		if uid != euid {
			return account{}, fmt.Errorf("run as %q: the agent runs as uid %d and can start jobs only of its own account; it must run as root to start jobs as other users", t.RunAs, euid)
		}
		return acct, nil
	}
	ids, err := u.GroupIds()
	if err != nil {
		return account{}, fmt.Errorf("run as %q: supplementary groups: %w", t.RunAs, err)
	}
	for _, g := range ids {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil {
			acct.groups = append(acct.groups, uint32(n))
		}
	}
	acct.switchTo = true
	return acct, nil
}

// credential is what the job is started with; nil keeps the supervisor's own.
func (a account) credential() *syscall.Credential {
	if !a.switchTo {
		return nil
	}
	return &syscall.Credential{Uid: uint32(a.uid), Gid: uint32(a.gid), Groups: a.groups}
}

// loginShell reads the account's shell from /etc/passwd; os/user does not say it.
func loginShell(name string) string {
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) == 7 && fields[0] == name {
			return fields[6]
		}
	}
	return ""
}

// jobEnv layers a job's environment: a base (the agent's own, or a clean one for an
// account the job is switched to), then the task's, then what only this node knows, which
// wins over anything the task says.
func jobEnv(t api.Task, acct account, agentEnv []string, local map[string]string) []string {
	vars := map[string]string{}
	if acct.switchTo {
		shell := acct.shell
		if shell == "" {
			shell = "/bin/sh"
		}
		vars["PATH"] = cleanPath
		vars["HOME"] = acct.home
		vars["USER"] = acct.name
		vars["LOGNAME"] = acct.name
		vars["SHELL"] = shell
		for _, kv := range agentEnv {
			if k, v, ok := strings.Cut(kv, "="); ok && (k == "LANG" || k == "TZ") {
				vars[k] = v
			}
		}
	} else {
		for _, kv := range agentEnv {
			if k, v, ok := strings.Cut(kv, "="); ok {
				vars[k] = v
			}
		}
	}
	for k, v := range t.Env {
		vars[k] = v
	}
	for k, v := range local {
		vars[k] = v
	}
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

// lookPath finds a command the way a shell would with the job's PATH, not the agent's.
func lookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	for dir := range strings.SplitSeq(path, ":") {
		if !strings.HasPrefix(dir, "/") {
			continue
		}
		p := dir + "/" + name
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable file not found in $PATH (%s)", path)
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}
