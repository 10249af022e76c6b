package cli

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
)

// A batch script is submitted by content: the job's command carries the script's text, so
// an attempt requeued on another node runs the very script that was submitted, whatever
// has become of the file since (sbatch copies the script to the controller for the same
// reason).

// maxScriptBytes keeps a script, with its interpreter and arguments, within the server's
// default bound on a job's command (api.DefaultLimits().MaxCommandBytes, 128 KiB).
const maxScriptBytes = 120 << 10

// directive is one line of a script's header, translated into rota submit's arguments.
type directive struct {
	line int
	// text is the line as written, for messages.
	text string
	// opt is the #SBATCH option the arguments come from ("" for #ROTA).
	opt  string
	args []string
}

// scriptWarning is something in a script rota does not do as sbatch would; --strict makes
// it an error.
type scriptWarning struct {
	line int
	msg  string
}

// batchScript is a script read for submission.
type batchScript struct {
	name       string // as given on the command line
	text       string
	directives []directive
	warnings   []scriptWarning
}

// isScriptArg says whether the first word after rota submit's flags names a batch script:
// an existing regular file that starts with #! or whose name ends in .sh. Anything else is
// a command to run on the node, as before scripts were read.
func isScriptArg(arg string) bool {
	fi, err := os.Stat(arg)
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	if strings.HasSuffix(arg, ".sh") {
		return true
	}
	f, err := os.Open(arg)
	if err != nil {
		return false
	}
	defer f.Close()
	var head [2]byte
	n, _ := f.Read(head[:])
	return n == 2 && string(head[:]) == "#!"
}

// readScript reads a batch script and its directives.
func readScript(name string) (*batchScript, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	if len(data) > maxScriptBytes {
		return nil, fmt.Errorf("%s is %d bytes; a script travels with its job and may be at most %d", name, len(data), maxScriptBytes)
	}
	if strings.ContainsRune(string(data), 0) {
		return nil, fmt.Errorf("%s holds a NUL byte: not a script", name)
	}
	s := &batchScript{name: name, text: string(data)}
	s.directives, s.warnings, err = parseDirectives(s.text)
	if err != nil {
		return nil, fmt.Errorf("%s:%w", name, err)
	}
	return s, nil
}

// lineError is an error on one line of a script; its text starts with the line number, so
// that "NAME:" before it reads as NAME:LINE: like a compiler's.
func lineError(line int, format string, a ...any) error {
	return fmt.Errorf("%d: %s", line, fmt.Sprintf(format, a...))
}

// parseDirectives reads the #ROTA and #SBATCH lines of a script's header: the lines up to
// the first that is neither blank nor a comment, as sbatch reads them. A directive further
// down is ignored, with a warning, as sbatch ignores it silently.
func parseDirectives(text string) ([]directive, []scriptWarning, error) {
	var ds []directive
	var warns []scriptWarning
	header := true
	for i, raw := range strings.Split(text, "\n") {
		n := i + 1
		line := strings.TrimRight(raw, "\r")
		prefix, rest, ok := directivePrefix(line)
		if !header {
			if ok {
				warns = append(warns, scriptWarning{n, fmt.Sprintf("%s after the script's first command is ignored, as sbatch ignores it; move it above", prefix)})
			}
			continue
		}
		if !ok {
			t := strings.TrimSpace(line)
			if t != "" && !strings.HasPrefix(t, "#") {
				header = false
			}
			continue
		}
		words, err := splitWords(rest)
		if err != nil {
			return nil, nil, lineError(n, "%s: %v", prefix, err)
		}
		if prefix == "#ROTA" {
			if len(words) > 0 {
				ds = append(ds, directive{line: n, text: line, args: words})
			}
			continue
		}
		got, w, err := translateSbatch(words)
		if err != nil {
			return nil, nil, lineError(n, "#SBATCH %v", err)
		}
		for _, d := range got {
			d.line, d.text = n, line
			ds = append(ds, d)
		}
		for _, m := range w {
			warns = append(warns, scriptWarning{n, m})
		}
	}
	return ds, warns, nil
}

// directivePrefix recognises "#ROTA ..." and "#SBATCH ...": the prefix at the start of
// the line followed by white space or the end of the line ("#SBATCHX" is a comment).
func directivePrefix(line string) (prefix, rest string, ok bool) {
	for _, p := range []string{"#ROTA", "#SBATCH"} {
		if r, found := strings.CutPrefix(line, p); found && (r == "" || r[0] == ' ' || r[0] == '\t') {
			return p, r, true
		}
	}
	return "", "", false
}

// splitWords splits a directive's text into words as a shell would, for the quoting
// scripts use: white space separates, '…' and "…" quote, a backslash escapes the next
// character outside single quotes, and an unquoted word starting with # begins a comment.
func splitWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '#' && !inWord:
			return words, nil
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unterminated ' quote")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte(`"\$`+"`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, errors.New(`unterminated " quote`)
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// sbatchArg says whether an sbatch option takes a value.
type sbatchArg int

const (
	argNone     sbatchArg = iota
	argRequired           // --opt=V, --opt V, -oV or -o V
	argOptional           // --opt or --opt=V only
)

// sbatchOption is one option sbatch knows. to translates its value into rota submit's
// arguments and any warnings; a nil to means rota has no equivalent, and the option is a
// warning saying so (hint says what to do instead).
type sbatchOption struct {
	long  string
	short byte
	arg   sbatchArg
	to    func(v string) ([]string, []string, error)
	hint  string
}

// sbatchOptions maps sbatch's options to rota's. Options sbatch knows and rota does not
// are listed too, so their values are skipped correctly and the warning names them as
// unmapped rather than unknown.
var sbatchOptions = []sbatchOption{
	{long: "gres", arg: argRequired, to: sbatchGres},
	{long: "gpus", short: 'G', arg: argRequired, to: sbatchGPUCount("--gpus")},
	{long: "gpus-per-node", arg: argRequired, to: sbatchGPUCount("--gpus-per-node")},
	{long: "nodes", short: 'N', arg: argRequired, to: sbatchNodes},
	{long: "ntasks-per-node", arg: argRequired, to: sbatchTasks("--ntasks-per-node")},
	{long: "ntasks", short: 'n', arg: argRequired, to: sbatchTasks("--ntasks")},
	{long: "time", short: 't', arg: argRequired, to: sbatchTime},
	{long: "job-name", short: 'J', arg: argRequired, to: rename("--name")},
	{long: "partition", short: 'p', arg: argRequired, to: sbatchPartition},
	{long: "account", short: 'A', arg: argRequired, to: rename("--team")},
	{long: "mem", arg: argRequired, to: sbatchMem},
	{long: "cpus-per-task", short: 'c', arg: argRequired, to: rename("--cpus")},
	{long: "output", short: 'o', arg: argRequired, to: sbatchLog},
	{long: "error", short: 'e', arg: argRequired, to: sbatchLog},
	{long: "array", short: 'a', arg: argRequired, to: rename("--array")},
	{long: "dependency", short: 'd', arg: argRequired, to: rename("--dependency")},
	{long: "signal", arg: argRequired, to: sbatchSignal},
	{long: "requeue", arg: argNone, to: func(string) ([]string, []string, error) { return nil, nil, nil }},
	{long: "chdir", short: 'D', arg: argRequired, to: rename("--workdir")},
	{long: "export", arg: argRequired, to: rename("--export")},
	{long: "hold", short: 'H', arg: argNone, to: func(string) ([]string, []string, error) { return []string{"--hold"}, nil, nil }},
	{long: "nice", arg: argOptional, to: sbatchNice},

	{long: "no-requeue", arg: argNone, hint: "rota always requeues a job after its node is lost or it is preempted"},
	{long: "mail-type", arg: argRequired, hint: "use --notify URL or rota notify for webhooks"},
	{long: "mail-user", arg: argRequired, hint: "use --notify URL or rota notify for webhooks"},
	{long: "constraint", short: 'C', arg: argRequired, hint: "use --gpu-model for a GPU model"},
	{long: "qos", short: 'q', arg: argRequired, hint: "rota's queues carry priority and limits: use --queue"},
	{long: "exclusive", arg: argOptional, hint: "ask for all of a node's GPUs instead"},
	{long: "mem-per-cpu", arg: argRequired, hint: "use --mem, per node"},
	{long: "mem-per-gpu", arg: argRequired, hint: "use --mem, per node"},
	{long: "cpus-per-gpu", arg: argRequired, hint: "use --cpus, per node"},
	{long: "gpus-per-task", arg: argRequired, hint: "use --gpus-per-node"},
	{long: "reservation", arg: argRequired},
	{long: "begin", short: 'b', arg: argRequired},
	{long: "deadline", arg: argRequired},
	{long: "time-min", arg: argRequired},
	{long: "nodelist", short: 'w', arg: argRequired},
	{long: "exclude", short: 'x', arg: argRequired},
	{long: "licenses", short: 'L', arg: argRequired},
	{long: "gpu-bind", arg: argRequired},
	{long: "gpu-freq", arg: argRequired},
	{long: "gres-flags", arg: argRequired},
	{long: "distribution", short: 'm', arg: argRequired},
	{long: "hint", arg: argRequired},
	{long: "tmp", arg: argRequired},
	{long: "open-mode", arg: argRequired},
	{long: "input", short: 'i', arg: argRequired},
	{long: "comment", arg: argRequired},
	{long: "wckey", arg: argRequired},
	{long: "mincpus", arg: argRequired},
	{long: "sockets-per-node", arg: argRequired},
	{long: "cores-per-socket", arg: argRequired},
	{long: "threads-per-core", arg: argRequired},
	{long: "ntasks-per-gpu", arg: argRequired},
	{long: "ntasks-per-socket", arg: argRequired},
	{long: "ntasks-per-core", arg: argRequired},
	{long: "cluster", short: 'M', arg: argRequired},
	{long: "clusters", arg: argRequired},
	{long: "profile", arg: argRequired},
	{long: "acctg-freq", arg: argRequired},
	{long: "switches", arg: argRequired},
	{long: "priority", arg: argRequired},
	{long: "container", arg: argRequired, hint: "use --image"},
	{long: "get-user-env", arg: argOptional, hint: "rota sends your environment by default (--export)"},
	{long: "propagate", arg: argOptional},
	{long: "kill-on-invalid-dep", arg: argRequired},
	{long: "no-kill", short: 'k', arg: argOptional},
	{long: "parsable", arg: argNone},
	{long: "wait", short: 'W', arg: argNone, hint: "use rota logs -f ID"},
	{long: "overcommit", short: 'O', arg: argNone},
	{long: "oversubscribe", short: 's', arg: argNone},
	{long: "contiguous", arg: argNone},
	{long: "spread-job", arg: argNone},
	{long: "use-min-nodes", arg: argNone},
	{long: "quiet", short: 'Q', arg: argNone},
	{long: "verbose", short: 'v', arg: argNone},
	{long: "test-only", arg: argNone},
	{long: "reboot", arg: argNone},
}

// translateSbatch translates the words of one #SBATCH line.
func translateSbatch(words []string) ([]directive, []string, error) {
	var ds []directive
	var warns []string
	for i := 0; i < len(words); i++ {
		w := words[i]
		opt, value, hasValue, known, err := splitSbatchOption(w)
		if err != nil {
			return nil, nil, err
		}
		if !known {
			// An option sbatch may know and rota does not: skip its value as well.
			if !hasValue && i+1 < len(words) && !strings.HasPrefix(words[i+1], "-") {
				i++
			}
			warns = append(warns, fmt.Sprintf("#SBATCH %s is not an option rota knows; ignored", w))
			continue
		}
		if opt.arg == argRequired && !hasValue {
			if i+1 >= len(words) {
				return nil, nil, fmt.Errorf("--%s: needs a value", opt.long)
			}
			i++
			value, hasValue = words[i], true
		}
		if opt.arg == argNone && hasValue {
			return nil, nil, fmt.Errorf("--%s takes no value, got %q", opt.long, value)
		}
		if opt.to == nil {
			m := fmt.Sprintf("#SBATCH --%s has no rota equivalent; ignored", opt.long)
			if opt.hint != "" {
				m += " (" + opt.hint + ")"
			}
			warns = append(warns, m)
			continue
		}
		args, ws, err := opt.to(value)
		if err != nil {
			return nil, nil, fmt.Errorf("--%s=%s: %v", opt.long, value, err)
		}
		for _, m := range ws {
			warns = append(warns, fmt.Sprintf("#SBATCH --%s: %s", opt.long, m))
		}
		if len(args) > 0 {
			ds = append(ds, directive{opt: "--" + opt.long, args: args})
		}
	}
	return ds, warns, nil
}

// splitSbatchOption reads one word of an #SBATCH line as an option: --long, --long=V, -s
// or -sV (a value attached to a short option, as getopt takes it).
func splitSbatchOption(w string) (opt sbatchOption, value string, hasValue, known bool, err error) {
	switch {
	case strings.HasPrefix(w, "--") && len(w) > 2:
		name, v, has := strings.Cut(w[2:], "=")
		for _, o := range sbatchOptions {
			if o.long == name {
				return o, v, has, true, nil
			}
		}
		return sbatchOption{}, v, has, false, nil
	case strings.HasPrefix(w, "-") && len(w) > 1 && w[1] != '-':
		for _, o := range sbatchOptions {
			if o.short == w[1] {
				if len(w) > 2 {
					if o.arg == argNone {
						return o, "", false, true, fmt.Errorf("-%c takes no value, got %q", w[1], w[2:])
					}
					return o, w[2:], true, true, nil
				}
				return o, "", false, true, nil
			}
		}
		return sbatchOption{}, "", len(w) > 2, false, nil
	}
	return sbatchOption{}, "", false, false, fmt.Errorf("%q is not an option; an #SBATCH line holds options only", w)
}

// rename passes the value to a rota flag of another name, which checks it.
func rename(flag string) func(string) ([]string, []string, error) {
	return func(v string) ([]string, []string, error) { return []string{flag, v}, nil, nil }
}

// sbatchGres reads --gres: gpu, gpu:N or gpu:MODEL:N among other resources; each of the
// others is a warning. The count is per node, as in Slurm: rota's --gres says the same.
func sbatchGres(v string) ([]string, []string, error) {
	var args, warns []string
	for _, item := range strings.Split(v, ",") {
		name, _, _ := strings.Cut(item, ":")
		if name != "gpu" {
			warns = append(warns, fmt.Sprintf("generic resource %q has no rota equivalent; ignored", item))
			continue
		}
		if args != nil {
			return nil, nil, errors.New("gpu named twice")
		}
		if _, _, err := parseGres(item); err != nil {
			return nil, nil, err
		}
		args = []string{"--gres", item}
	}
	return args, warns, nil
}

// sbatchGPUCount reads --gpus and --gpus-per-node: N or MODEL:N.
func sbatchGPUCount(flag string) func(string) ([]string, []string, error) {
	return func(v string) ([]string, []string, error) {
		model, count, hasModel := strings.Cut(v, ":")
		if !hasModel {
			model, count = "", v
		}
		n, err := strconv.Atoi(count)
		if err != nil || n < 0 {
			return nil, nil, errors.New("want a number of GPUs, e.g. 4 or a100:4")
		}
		args := []string{flag, strconv.Itoa(n)}
		if model != "" {
			args = append(args, "--gpu-model", model)
		}
		return args, nil, nil
	}
}

// sbatchNodes reads -N: a count, or a range whose ends agree (rota takes an exact count).
func sbatchNodes(v string) ([]string, []string, error) {
	lo, hi, isRange := strings.Cut(v, "-")
	n, err := strconv.Atoi(lo)
	if err != nil || n < 1 {
		return nil, nil, errors.New("want a number of nodes, e.g. 2")
	}
	if isRange {
		if m, err := strconv.Atoi(hi); err != nil || m != n {
			return nil, nil, errors.New("rota takes an exact number of nodes, not a range")
		}
	}
	return []string{"--nodes", strconv.Itoa(n)}, nil, nil
}

// sbatchTasks reads --ntasks and --ntasks-per-node. rota starts one process per node,
// which a launcher in the script (torchrun, mpirun) fans out; one task per node is what
// rota does anyway, more is a warning.
func sbatchTasks(flag string) func(string) ([]string, []string, error) {
	return func(v string) ([]string, []string, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return nil, nil, errors.New("want a number of tasks, e.g. 1")
		}
		if n == 1 {
			return nil, nil, nil
		}
		return nil, []string{fmt.Sprintf("rota starts one process per node, not %d; start them from the script, e.g. torchrun --nproc-per-node %d, or srun-like with one rota node each", n, n)}, nil
	}
}

// sbatchTime reads a time limit in Slurm's forms; UNLIMITED and INFINITE leave the queue's
// default, with a warning.
func sbatchTime(v string) ([]string, []string, error) {
	switch strings.ToLower(v) {
	case "unlimited", "infinite":
		return nil, []string{"rota has no unlimited time; the queue's default limit applies"}, nil
	}
	if !slurmTime().MatchString(v) {
		return nil, nil, errors.New("want minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS")
	}
	if _, err := parseTimeLimit(v); err != nil {
		return nil, nil, err
	}
	return []string{"--time", v}, nil, nil
}

// sbatchPartition reads -p: rota submits to one queue.
func sbatchPartition(v string) ([]string, []string, error) {
	if strings.Contains(v, ",") {
		return nil, nil, errors.New("rota submits to one queue; name one")
	}
	return []string{"--queue", v}, nil, nil
}

// sbatchMem reads --mem as Slurm does: megabytes, or a number with K, M, G or T. It is per
// node in both. 0, Slurm's "all of the node's memory", has no equivalent.
func sbatchMem(v string) ([]string, []string, error) {
	mb, err := parseSlurmMem(v)
	if err != nil {
		return nil, nil, err
	}
	if mb == 0 {
		return nil, []string{"0 (all of the node's memory) has no rota equivalent; the default applies"}, nil
	}
	return []string{"--mem", strconv.FormatInt(mb, 10)}, nil, nil
}

// parseSlurmMem reads a Slurm memory size into megabytes, rounding kilobytes up.
func parseSlurmMem(v string) (int64, error) {
	num, unit := v, byte('M')
	if n := len(v); n > 0 && strings.IndexByte("KMGTkmgt", v[n-1]) >= 0 {
		num, unit = v[:n-1], v[n-1]&^0x20
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > 1<<40 {
		return 0, errors.New("want a size such as 4096, 500M, 64G or 1T")
	}
	switch unit {
	case 'K':
		return (n + 1023) / 1024, nil
	case 'G':
		return n << 10, nil
	case 'T':
		return n << 20, nil
	}
	return n, nil
}

// sbatchLog explains -o and -e: rota keeps a job's output itself.
func sbatchLog(v string) ([]string, []string, error) {
	return nil, []string{fmt.Sprintf("rota keeps the job's stdout and stderr together on the server, not in %s: read them with rota logs ID", v)}, nil
}

// sbatchSignal reads --signal=[{R|B}:]SIG[@SECONDS]. rota sends the job's signal when it
// must stop and kills it SECONDS later (its grace); Slurm sends it SECONDS before the
// limit. Either way the job has SECONDS to save its work.
func sbatchSignal(v string) ([]string, []string, error) {
	s := v
	if p, rest, ok := strings.Cut(s, ":"); ok && (p == "R" || p == "B") {
		s = rest
	}
	sig, secs, hasSecs := strings.Cut(s, "@")
	if sig == "" || strings.ContainsAny(sig, " :") {
		return nil, nil, errors.New("want [R:|B:]SIGNAL[@SECONDS], e.g. USR1@120")
	}
	args := []string{"--signal", sig}
	if hasSecs {
		n, err := strconv.Atoi(secs)
		if err != nil || n < 0 {
			return nil, nil, errors.New("want [R:|B:]SIGNAL[@SECONDS], e.g. USR1@120")
		}
		args = append(args, "--grace", strconv.Itoa(n))
	}
	return args, nil, nil
}

// sbatchNice reads --nice=N; without a value there is no rota equivalent.
func sbatchNice(v string) ([]string, []string, error) {
	if v == "" {
		return nil, []string{"give a number of points, e.g. --nice=10"}, nil
	}
	return []string{"--nice", v}, nil, nil
}

// scriptShells run a script given as text with -c, naming it $0.
var scriptShells = map[string]bool{"sh": true, "bash": true, "zsh": true, "dash": true, "ksh": true, "mksh": true}

// scriptCommand is the command that runs a script's text with its arguments: the shebang's
// interpreter (a script without one runs under /bin/bash, as most sbatch scripts expect). A
// shell gets the text with -c and the script's name as $0; any other interpreter (python,
// perl, Rscript) reads it from a file /bin/sh writes on the node and removes once the
// interpreter holds it open.
func scriptCommand(name, text string, args []string) []string {
	interp, arg := "/bin/bash", ""
	if first, _, _ := strings.Cut(text, "\n"); strings.HasPrefix(first, "#!") {
		f := strings.Fields(strings.TrimSpace(strings.TrimSuffix(first[2:], "\r")))
		if len(f) > 0 {
			interp = f[0]
			arg = strings.Join(f[1:], " ") // the kernel passes the rest as one argument
		}
	}
	prog := path.Base(interp)
	if prog == "env" {
		prog = ""
		for _, w := range strings.Fields(arg) {
			if !strings.HasPrefix(w, "-") && !strings.Contains(w, "=") {
				prog = path.Base(w)
				break
			}
		}
	}
	lead := []string{interp}
	if arg != "" {
		lead = append(lead, arg)
	}
	base := path.Base(name)
	if scriptShells[prog] {
		return append(append(lead, "-c", text, base), args...)
	}
	wrapper := `f=$(mktemp "${TMPDIR:-/tmp}/rota-script.XXXXXX") || exit 126
printf '%s' "$1" >"$f" && exec 3<"$f" && rm -f "$f" || exit 126
shift
exec ` + shellQuote(lead) + ` /dev/fd/3 "$@"`
	return append([]string{"/bin/sh", "-c", wrapper, base, text}, args...)
}
