package cli

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// maxExportBytes is the server's default bound on a job's environment
// (api.DefaultLimits().MaxEnvBytes), counted as the server counts it.
const maxExportBytes = 256 << 10

// exportDenied are the variables --export ALL leaves behind, each with why: they describe
// the submitting session, terminal or machine, or the node sets its own.
var exportDenied = []struct {
	pattern string // a name, or a prefix ending in *
	why     string
}{
	{"ROTA_*", "the node sets the job's ROTA_ variables, and your API token stays on your machine"},
	{"SSH_*", "it belongs to your login session on this machine"},
	{"DISPLAY", "it belongs to your login session on this machine"},
	{"XAUTHORITY", "it belongs to your login session on this machine"},
	{"WAYLAND_DISPLAY", "it belongs to your login session on this machine"},
	{"DBUS_SESSION_BUS_ADDRESS", "it belongs to your login session on this machine"},
	{"XDG_RUNTIME_DIR", "it belongs to your login session on this machine"},
	{"XDG_SESSION_*", "it belongs to your login session on this machine"},
	{"KRB5CCNAME", "it belongs to your login session on this machine"},
	{"GPG_AGENT_INFO", "it belongs to your login session on this machine"},
	{"TERM", "it describes your terminal; a batch job has none"},
	{"TERMCAP", "it describes your terminal; a batch job has none"},
	{"COLORTERM", "it describes your terminal; a batch job has none"},
	{"COLUMNS", "it describes your terminal; a batch job has none"},
	{"LINES", "it describes your terminal; a batch job has none"},
	{"TMUX", "it describes your terminal; a batch job has none"},
	{"TMUX_PANE", "it describes your terminal; a batch job has none"},
	{"STY", "it describes your terminal; a batch job has none"},
	{"WINDOW", "it describes your terminal; a batch job has none"},
	{"PWD", "the job's shell sets it (the working directory is --workdir)"},
	{"OLDPWD", "the job's shell sets it"},
	{"SHLVL", "the job's shell sets it"},
	{"_", "the job's shell sets it"},
	{"HOSTNAME", "it names this machine, not the node"},
	{"TMPDIR", "it names a directory of this machine"},
	{"HOME", "the node sets it for the job's account"},
	{"USER", "the node sets it for the job's account"},
	{"LOGNAME", "the node sets it for the job's account"},
	{"SHELL", "the node sets it for the job's account"},
	{"MAIL", "the node sets it for the job's account"},
	{"CUDA_VISIBLE_DEVICES", "the node sets the job's GPUs"},
	{"CUDA_DEVICE_ORDER", "the node numbers the job's GPUs"},
	{"NVIDIA_VISIBLE_DEVICES", "the node sets the job's GPUs"},
	{"ROCR_VISIBLE_DEVICES", "the node sets the job's GPUs"},
	{"HIP_VISIBLE_DEVICES", "the node sets the job's GPUs"},
	{"GPU_DEVICE_ORDINAL", "the node sets the job's GPUs"},
}

// deniedExport says why --export never sends the variable name, or "" when it may.
func deniedExport(name string) string {
	for _, d := range exportDenied {
		if p, ok := strings.CutSuffix(d.pattern, "*"); ok {
			if strings.HasPrefix(name, p) {
				return d.why
			}
		} else if name == d.pattern {
			return d.why
		}
	}
	return ""
}

// envName is a name a shell can export.
var envName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

// exportEnv reads --export as sbatch does and returns the variables it sends from environ
// (KEY=VALUE entries), with warnings:
//
//	ALL (or no --export)  every variable but the denied ones
//	NONE                  none; the job has the node's environment and --env
//	VAR,VAR=VALUE,...     only these: VAR with its value here, VAR=VALUE as given
//	ALL,VAR=VALUE,...     every variable but the denied ones, and these
//
// A variable named twice, or a denied one named at all, is an error saying so.
func exportEnv(spec string, environ []string) (map[string]string, []string, error) {
	here := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" && !strings.ContainsRune(v, 0) {
			here[k] = v
		}
	}
	out := map[string]string{}
	var warns []string
	if spec == "" || spec == "ALL" {
		return exportAll(here), nil, nil
	}
	if spec == "NONE" {
		return out, nil, nil
	}
	named := map[string]bool{}
	for _, item := range strings.Split(spec, ",") {
		k, v, hasValue := strings.Cut(item, "=")
		switch {
		case item == "ALL":
			for k, v := range exportAll(here) {
				if !named[k] {
					out[k] = v
				}
			}
			continue
		case item == "NONE":
			return nil, nil, fmt.Errorf("NONE stands alone; --export VAR,... sends only the variables it names")
		case !envName().MatchString(k):
			return nil, nil, fmt.Errorf("%q is not a variable name; want ALL, NONE or VAR,VAR=VALUE,...", item)
		case named[k]:
			return nil, nil, fmt.Errorf("%s is named twice", k)
		}
		if why := deniedExport(k); why != "" {
			return nil, nil, fmt.Errorf("%s is never exported: %s; give --env %s=VALUE if the job needs it", k, why, k)
		}
		named[k] = true
		if hasValue {
			out[k] = v
		} else if hv, ok := here[k]; ok {
			out[k] = hv
		} else {
			delete(out, k)
			warns = append(warns, fmt.Sprintf("%s is not set here, so it is not exported", k))
		}
	}
	return out, warns, nil
}

// exportAll is every variable of here but the denied ones.
func exportAll(here map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range here {
		if deniedExport(k) == "" {
			out[k] = v
		}
	}
	return out
}

// envBytes counts an environment as the server does against its limit.
func envBytes(env map[string]string) int {
	n := 0
	for k, v := range env {
		n += len(k) + len(v) + 2
	}
	return n
}

// largestVars names the n largest variables of env, for a message about its size.
func largestVars(env map[string]string, n int) string {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := len(keys[i])+len(env[keys[i]]), len(keys[j])+len(env[keys[j]])
		if a != b {
			return a > b
		}
		return keys[i] < keys[j]
	})
	if len(keys) > n {
		keys = keys[:n]
	}
	for i, k := range keys {
		keys[i] = fmt.Sprintf("%s (%d bytes)", k, len(k)+len(env[k])+2)
	}
	return strings.Join(keys, ", ")
}

// environ is the submitter's environment, none when Config.Environ is nil.
func (cfg Config) environ() []string {
	if cfg.Environ == nil {
		return nil
	}
	return cfg.Environ()
}
