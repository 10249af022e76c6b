package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rotahq/rota/internal/api"
)

const submitUsage = `rota submit [flags] [-f spec.yaml] -- CMD ARGS...
       rota submit [flags] SCRIPT [ARGS...]

Submits a job and prints its ID on the last line of output. Flags given explicitly
override the spec file; a command after -- overrides the file's command.
  SCRIPT, a file here that starts with #! or ends in .sh, is sent with the job and run
  by its #! interpreter (default /bin/bash) on the node, every attempt the same text.
  Its #ROTA lines (#ROTA --gpus 2) and, for migration, #SBATCH lines before its first
  command are read as flags; the command line overrides them. An #SBATCH option rota
  does not map is a warning (an error with --strict). docs/from-slurm.md has the table.
  -t, -J, -N, -p and -A are --time, --name, --nodes, --queue and --team, as in Slurm;
  --gres gpu:N asks for N GPUs on each node; --dependency afterok:ID[:ID],afterany:ID
  is --after-ok and --after.
  --export (default ALL) sends your environment but SSH_*, DISPLAY, ROTA_*, TERM,
  HOME, USER, PWD, TMPDIR, CUDA_VISIBLE_DEVICES and others of this session or machine;
  NONE sends none; VAR,VAR=VALUE,... only those. --env values win over it.
  --mem takes 512M, 16G, 1T, 16GiB, 16GB or a number of megabytes.
  --time takes Go durations (90m, 2h30m) or Slurm's MM, MM:SS, HH:MM:SS, D-HH,
  D-HH:MM and D-HH:MM:SS; 0 means the queue's default.
  --grace takes a Go duration (30s, 2m) or a number of seconds.
  --gpu-model takes one model or up to 8 separated by commas: A100,H100 runs on A100s
  or H100s (all of one model), whichever starts first, the first listed when both
  fit as well. A short name matches the one model whose full name contains it.
  --after and --after-ok take job IDs separated by commas.
  --array takes indices and ranges separated by commas, each range with an optional
  step, and an optional limit of jobs active at once after %: 0-99, 0-99%8, 1,3,5,
  0-10:2, 0-9,20-29%4. Indices run from 0 to 999999, at most 10000 of them. One job is
  submitted per index, with consecutive IDs; the first ID is printed last.
  --restart-policy says when an attempt that ended is followed by another: never,
  on-failure (after a non-zero exit or a failed start, up to --retries times, with
  backoff) or always (services: after any end but a cancel or the time limit).
  --image runs the job in that OCI container image (image: in a spec file), through
  the container runtime of the node it lands on, with its GPUs, working directory and
  ROTA_* variables; only nodes with a runtime take it, and the queue may limit which
  images its jobs run.
  --deadline says when the job must have finished: RFC 3339, a local time "2026-12-01
  18:00", or +DURATION from now (+6h, +2d); --deadline-kind start makes it the time
  it must have started by. A finish-by deadline needs a time limit that fits before it.
  As the deadline nears the job rises within its queue's tier; rota why and rota show
  warn when its estimated start cannot meet it, and the job records met or missed.
  --cuda and --driver take a version range the job's nodes must report a CUDA or
  driver version in (cuda:, driver: in a spec file): comparisons >=, >, <=, <, =
  joined by commas, all of which must hold, e.g. --cuda '>=12.4,<13' --driver '>=550'.
  Quote them: the shell reads > and < as redirections. A node that reports no version
  does not satisfy a range; rota why names the versions the nodes report.
  --notify URL or URL#EVENT,EVENT (repeatable) adds a webhook told of the job's events:
  started, succeeded, failed, ended, preempted, idle_warning, node_lost (default:
  started, ended, preempted, idle_warning and node_lost). Given, it replaces the spec
  file's notify list. Your own and your team's webhooks are told as well (rota notify).
The job runs as the user you are logged in as; only an admin may give --user.
Should the connection break while submitting, the submit is sent once more with the
same Idempotency-Key, so the job is never created twice.`

// envFlag collects repeated --env K=V.
type envFlag map[string]string

func (e envFlag) String() string {
	keys := make([]string, 0, len(e))
	for k := range e {
		keys = append(keys, k+"="+e[k])
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func (e envFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	e[k] = v
	return nil
}

// submitFlags are submit's own flags, as typed.
type submitFlags struct {
	gpus, gpusPerNode, nodes, cpus, retries int
	mem, timeLimit, grace                   string
	queue, name, team, workdir, gpuModel    string
	project                                 string
	signal, file, user, restartPolicy       string
	image, gres, dependency, export         string
	after, afterOK, array                   string
	deadline, deadlineKind                  string
	cuda, driver                            string
	hold, strict                            bool
	nice                                    int
	env                                     envFlag
	notify                                  notifyFlag

	// gpuShare is --gpus given as a share of one GPU (0.5); gpuMem is --gpu-mem.
	gpuShare float64
	gpuMem   string
}

// submitAliases are Slurm's short options that rota submit takes for its own flags. -o
// (sbatch's --output) is rota's output format and -c is not taken, so neither is here.
var submitAliases = map[string]string{"t": "time", "J": "name", "N": "nodes", "p": "queue", "A": "team"}

// register defines submit's flags on fs: on the command line (cmdline) with the Slurm
// aliases, -f and --strict; in a script's #ROTA lines without them.
func (f *submitFlags) register(fs *flag.FlagSet, cmdline bool) {
	fs.Var(gpusValue{&f.gpus, &f.gpuShare}, "gpus", "total number of whole `GPUs`, or a share of one below 1, e.g. 0.5, on a pool that allows sharing")
	fs.StringVar(&f.gpuMem, "gpu-mem", "", "a slice of one GPU's memory, a `SIZE` like 20G, on a pool that allows sharing")
	fs.IntVar(&f.gpusPerNode, "gpus-per-node", 0, "GPUs on each node of a multi-node job")
	fs.IntVar(&f.nodes, "nodes", 0, "number of `nodes` (default 1)")
	fs.StringVar(&f.gpuModel, "gpu-model", "", "GPU `model` the job needs, e.g. A100, or several it accepts, e.g. A100,H100")
	fs.StringVar(&f.gres, "gres", "", "Slurm's `gpu:N` or gpu:MODEL:N: N GPUs on each node")
	fs.IntVar(&f.cpus, "cpus", 0, "number of `CPUs` (default: the server's)")
	fs.StringVar(&f.mem, "mem", "", "memory `SIZE`, e.g. 64G")
	fs.StringVar(&f.timeLimit, "time", "", "time limit `DURATION`, e.g. 4h or 1-00:00:00")
	fs.StringVar(&f.queue, "queue", "", "`queue` to submit to (default: the server's)")
	fs.StringVar(&f.name, "name", "", "job `name`")
	fs.StringVar(&f.team, "team", "", "`team` the job is accounted to")
	fs.StringVar(&f.project, "project", "", "`project` of the team the job is accounted to (its quotas and budget apply)")
	fs.StringVar(&f.workdir, "workdir", "", "working `directory` (default: the current one)")
	fs.Var(f.env, "env", "environment variable `K=V` (repeatable)")
	fs.StringVar(&f.export, "export", "", "submitter's variables the job gets: ALL (default, less a deny-list), NONE or `VAR,VAR=VALUE,...`")
	fs.StringVar(&f.signal, "signal", "", "`signal` sent first when the job must stop (default SIGTERM)")
	fs.StringVar(&f.grace, "grace", "", "time from the stop signal to the kill, a `DURATION`")
	fs.IntVar(&f.retries, "retries", 0, "failed attempts to retry (non-zero exit); node loss and preemption never count")
	fs.StringVar(&f.restartPolicy, "restart-policy", "", "`POLICY` never, on-failure or always (default: the queue's)")
	fs.StringVar(&f.user, "user", "", "submit on behalf of `user` (admins only; default: you)")
	fs.StringVar(&f.after, "after", "", "start only after these `jobs` have ended, in any state")
	fs.StringVar(&f.afterOK, "after-ok", "", "start only after these `jobs` have succeeded; fail if one does not")
	fs.StringVar(&f.dependency, "dependency", "", "Slurm's `afterok:ID[:ID],afterany:ID`: --after-ok and --after")
	fs.StringVar(&f.array, "array", "", "submit one job per index of `SPEC`, e.g. 0-99%8")
	fs.BoolVar(&f.hold, "hold", false, "submit the job held, until rota release")
	fs.IntVar(&f.nice, "nice", 0, "lower the job's priority score by `N` points")
	fs.StringVar(&f.image, "image", "", "run the job in this container `IMAGE`, e.g. registry.example.com/ml/train:1.2")
	fs.StringVar(&f.deadline, "deadline", "", "finish (or with --deadline-kind start, start) by this `TIME`: RFC 3339, \"2026-12-01 18:00\" (local) or +DURATION from now (+6h, +2d)")
	fs.StringVar(&f.cuda, "cuda", "", "CUDA version `RANGE` the job's nodes must report, e.g. '>=12.4' or '>=12.4,<13'")
	fs.StringVar(&f.driver, "driver", "", "driver version `RANGE` the job's nodes must report, e.g. '>=550'")
	fs.StringVar(&f.deadlineKind, "deadline-kind", "", "`KIND` of --deadline: finish (default; start + time limit by it) or start")
	fs.Var(&f.notify, "notify", "webhook `URL[#EVENTS]` told of the job's events (repeatable)")
	fs.BoolVar(&f.strict, "strict", false, "make every warning about a batch script's directives an error")
	if !cmdline {
		return
	}
	fs.StringVar(&f.file, "f", "", "YAML job spec `file`")
	for alias, name := range submitAliases {
		fl := fs.Lookup(name)
		fs.Var(fl.Value, alias, "same as --"+name)
	}
}

func runSubmit(ctx context.Context, cfg Config, args []string) int {
	fs, g := newFlagSet(cfg, "submit", submitUsage)
	f := submitFlags{env: envFlag{}}
	f.register(fs, true)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if !checkOutput(fs, g) {
		return ExitUsage
	}
	rest := fs.Args()
	var script *batchScript
	// A first word after -- is always a command, as it was before scripts were read.
	if afterDashes := len(rest) < len(args) && args[len(args)-len(rest)-1] == "--"; len(rest) > 0 && !afterDashes && isScriptArg(rest[0]) {
		var err error
		if script, err = readScript(rest[0]); err != nil {
			fmt.Fprintf(cfg.Stderr, "rota submit: %v\n", err)
			return ExitUsage
		}
		rest = rest[1:]
	}
	spec, warns, err := buildSpec(cfg, fs, f, script, rest)
	for _, w := range warns {
		fmt.Fprintf(cfg.Stderr, "rota submit: warning: %s\n", w)
	}
	if err != nil {
		fmt.Fprintf(cfg.Stderr, "rota submit: %v\n", err)
		return ExitUsage
	}

	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	job, err := c.Submit(ctx, spec)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	if g.output == "json" {
		return cfg.printJSON(job)
	}
	if spec.Array != "" {
		fmt.Fprintln(cfg.Stdout, describeArraySubmit(job.ID, spec.Array))
	} else {
		image := ""
		if job.Spec.Image != "" {
			image = ", image " + clean(job.Spec.Image)
		}
		fmt.Fprintf(cfg.Stdout, "Submitted job %d (queue %s, %s%s)\n", job.ID, orDash(job.Spec.Queue), describeGPUs(job.Spec), image)
	}
	fmt.Fprintln(cfg.Stdout, job.ID)
	return ExitOK
}

// describeArraySubmit says what an array submit created: the first ID and how many
// consecutive ones follow it.
func describeArraySubmit(first int64, array string) string {
	// buildSpec has checked the spec already.
	indices, limit, _ := parseArray(array)
	n := len(indices)
	d := fmt.Sprintf("Submitted array job %d: %s (%d", first, plural(n, "job", "jobs"), first)
	if n > 1 {
		d += fmt.Sprintf("-%d", first+int64(n)-1)
	}
	d += ")"
	if limit > 0 && limit < n {
		d += fmt.Sprintf(", at most %d at once", limit)
	}
	return d
}

// specBuilder layers what a job asks for: the spec file, then a script's directives line
// by line, then the command line, each overriding the ones before.
type specBuilder struct {
	spec api.JobSpec
	// gres is the GPUs per node of the last --gres not overridden by --gpus or
	// --gpus-per-node; it becomes a count once the number of nodes is known.
	gres   int
	export string
	strict bool
	// now and loc read --deadline's relative and local times; now nil means time.Now.
	now func() time.Time
	loc *time.Location
}

// apply copies the flags set on fs into the spec.
func (b *specBuilder) apply(fs *flag.FlagSet, f submitFlags) error {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) {
		name := fl.Name
		if n, ok := submitAliases[name]; ok {
			name = n
		}
		set[name] = true
	})
	if set["gpu-mem"] && set["gpus"] && f.gpuShare > 0 {
		return errors.New("--gpus 0.5 asks for a share of a GPU and --gpu-mem for a slice of its memory: give one")
	}
	if set["gres"] && (set["gpus"] || set["gpus-per-node"]) {
		return errors.New("--gres gives the GPUs per node already; drop --gpus or --gpus-per-node")
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := b.applyFlag(f, name); err != nil {
			return err
		}
	}
	return nil
}

// buildSpec merges the spec file, a script's directives, the flags set explicitly and the
// command into a JobSpec with the working directory and the exported environment filled
// in. The user is left to the server, which knows who is asking. It returns warnings about
// the script and --export even with an error.
func buildSpec(cfg Config, fs *flag.FlagSet, f submitFlags, script *batchScript, command []string) (api.JobSpec, []string, error) {
	b := specBuilder{now: cfg.Now, loc: cfg.location()}
	var warns []string
	if f.file != "" {
		var err error
		if b.spec, err = readSpecFile(f.file); err != nil {
			return b.spec, nil, err
		}
	}
	if script != nil {
		for _, d := range script.directives {
			dfs := flag.NewFlagSet(d.text, flag.ContinueOnError)
			dfs.SetOutput(io.Discard)
			df := submitFlags{env: envFlag{}}
			df.register(dfs, false)
			err := dfs.Parse(d.args)
			if err == nil && dfs.NArg() > 0 {
				err = fmt.Errorf("%q is not a flag; a directive holds flags only", dfs.Arg(0))
			}
			if err == nil {
				err = b.apply(dfs, df)
			}
			if err != nil {
				if d.opt != "" {
					return b.spec, nil, fmt.Errorf("%s:%d: #SBATCH %s: %v", script.name, d.line, d.opt, err)
				}
				return b.spec, nil, fmt.Errorf("%s:%d: #ROTA: %v", script.name, d.line, err)
			}
		}
	}
	if err := b.apply(fs, f); err != nil {
		return b.spec, nil, err
	}
	if script != nil {
		for _, w := range script.warnings {
			warns = append(warns, fmt.Sprintf("%s:%d: %s", script.name, w.line, w.msg))
		}
		if b.strict && len(warns) > 0 {
			return b.spec, nil, fmt.Errorf("--strict: %s", strings.Join(warns, "; "))
		}
		b.spec.Command = scriptCommand(script.name, script.text, command)
	} else if len(command) > 0 {
		b.spec.Command = command
	}
	spec := &b.spec
	if len(spec.Command) == 0 {
		return *spec, warns, errors.New("no command: give it after --, e.g. rota submit --gpus 1 -- python train.py, or a script: rota submit train.sh")
	}
	if b.gres > 0 {
		if spec.Nodes > 1 {
			spec.GPUsPerNode, spec.GPUs = b.gres, b.gres*spec.Nodes
		} else {
			spec.GPUs = b.gres
		}
	}
	// Slurm's --gpus is the job's total; spread it over the nodes as rota needs.
	if spec.Nodes > 1 && spec.GPUsPerNode == 0 && spec.GPUs > 0 && spec.GPUs%spec.Nodes == 0 {
		spec.GPUsPerNode = spec.GPUs / spec.Nodes
	}
	cwd, cwdErr := cfg.Getwd()
	switch {
	case spec.WorkDir == "" && cwdErr != nil:
		return *spec, warns, fmt.Errorf("--workdir not given and the current directory is unknown: %w", cwdErr)
	case spec.WorkDir == "":
		spec.WorkDir = cwd
	case !filepath.IsAbs(spec.WorkDir) && cwdErr == nil:
		spec.WorkDir = filepath.Join(cwd, spec.WorkDir)
	}
	exported, w, err := exportEnv(b.export, cfg.environ())
	for _, m := range w {
		warns = append(warns, "--export: "+m)
	}
	if err != nil {
		return *spec, warns, fmt.Errorf("--export: %w", err)
	}
	if len(exported) > 0 {
		for k, v := range spec.Env {
			exported[k] = v // --env and the spec file name values on purpose
		}
		if n := envBytes(exported); n > maxExportBytes {
			return *spec, warns, fmt.Errorf("--export: the job's environment would be %d bytes, over the server's %d: send only what the job needs, e.g. --export PATH,CONDA_PREFIX, or --export NONE; largest: %s",
				n, maxExportBytes, largestVars(exported, 3))
		}
		spec.Env = exported
	}
	return *spec, warns, checkSpec(*spec)
}

// applyFlag copies one explicitly set flag into the spec.
func (b *specBuilder) applyFlag(f submitFlags, name string) error {
	spec := &b.spec
	var err error
	switch name {
	case "gpus":
		spec.GPUs, spec.GPUShare, b.gres = f.gpus, f.gpuShare, 0
		if f.gpuShare > 0 {
			spec.GPUs, spec.GPUMemoryMB = 1, 0
		}
	case "gpu-mem":
		if spec.GPUMemoryMB, err = ParseSize(f.gpuMem); err == nil && spec.GPUMemoryMB <= 0 {
			err = errors.New("a slice of a GPU's memory is more than 0, e.g. 20G")
		}
		spec.GPUShare = 0
		if spec.GPUs == 0 {
			spec.GPUs = 1
		}
	case "gpus-per-node":
		spec.GPUsPerNode, b.gres = f.gpusPerNode, 0
	case "gres":
		var model string
		if model, b.gres, err = parseGres(f.gres); err == nil && model != "" {
			spec.GPUModel = model
		}
	case "dependency":
		spec.After, spec.AfterOK, err = parseDependency(f.dependency)
	case "export":
		b.export = f.export
	case "strict":
		b.strict = f.strict
	case "nodes":
		spec.Nodes = f.nodes
	case "gpu-model":
		spec.GPUModel = f.gpuModel
	case "cpus":
		spec.CPUs = f.cpus
	case "retries":
		r := f.retries
		spec.Retries = &r
	case "restart-policy":
		spec.RestartPolicy = f.restartPolicy
	case "user":
		spec.User = f.user
	case "mem":
		spec.MemoryMB, err = ParseSize(f.mem)
	case "time":
		spec.TimeLimit, err = parseTimeLimit(f.timeLimit)
	case "grace":
		spec.Grace, err = parseGrace(f.grace)
	case "queue":
		spec.Queue = f.queue
	case "name":
		spec.Name = f.name
	case "team":
		spec.Team = f.team
	case "project":
		spec.Project = f.project
	case "workdir":
		spec.WorkDir = f.workdir
	case "signal":
		spec.Signal = normalizeSignal(f.signal)
	case "after":
		spec.After, err = parseJobIDs(f.after)
	case "after-ok":
		spec.AfterOK, err = parseJobIDs(f.afterOK)
	case "array":
		spec.Array = f.array
	case "hold":
		spec.Hold = f.hold
	case "nice":
		spec.Nice = f.nice
	case "image":
		spec.Image = strings.TrimSpace(f.image)
	case "deadline":
		var t time.Time
		now := time.Now
		if b.now != nil {
			now = b.now
		}
		if t, err = parseWhen(f.deadline, now(), b.loc); err == nil {
			spec.Deadline = &t
		}
	case "cuda":
		spec.CUDA = strings.TrimSpace(f.cuda)
	case "driver":
		spec.Driver = strings.TrimSpace(f.driver)
	case "deadline-kind":
		spec.DeadlineKind = strings.ToLower(strings.TrimSpace(f.deadlineKind))
	case "notify":
		spec.Notify = f.notify.list
	case "env":
		if spec.Env == nil {
			spec.Env = map[string]string{}
		}
		for k, v := range f.env {
			spec.Env[k] = v
		}
	}
	if err != nil {
		return fmt.Errorf("--%s: %w", name, err)
	}
	return nil
}

// gpusValue is --gpus: a whole number of GPUs, or a share of one GPU below 1.
type gpusValue struct {
	n     *int
	share *float64
}

func (v gpusValue) String() string {
	if v.share != nil && *v.share > 0 {
		return strconv.FormatFloat(*v.share, 'f', -1, 64)
	}
	if v.n != nil {
		return strconv.Itoa(*v.n)
	}
	return "0"
}

func (v gpusValue) Set(s string) error {
	if n, err := strconv.Atoi(s); err == nil {
		*v.n, *v.share = n, 0
		return nil
	}
	f, err := strconv.ParseFloat(s, 64)
	switch {
	case err != nil || math.IsNaN(f) || math.IsInf(f, 0):
		return fmt.Errorf("%q is not a number of GPUs; want a whole number, or a share of one GPU below 1 such as 0.5", s)
	case f <= 0 || f >= 1:
		return fmt.Errorf("%s: a share of a GPU is above 0 and below 1; more than one GPU is a whole number", s)
	case math.Abs(f*1000-math.Round(f*1000)) > 1e-9:
		return fmt.Errorf("%s: shares are counted in thousandths of a GPU", s)
	}
	*v.n, *v.share = 1, f
	return nil
}

// checkSpec rejects what the server would reject anyway, naming the flag at fault.
func checkSpec(spec api.JobSpec) error {
	for _, c := range []struct {
		flag string
		v    int64
	}{
		{"--gpus", int64(spec.GPUs)},
		{"--gpus-per-node", int64(spec.GPUsPerNode)},
		{"--nodes", int64(spec.Nodes)},
		{"--cpus", int64(spec.CPUs)},
		{"--mem", spec.MemoryMB},
		{"--time", spec.TimeLimit},
		{"--grace", spec.Grace},
	} {
		if c.v < 0 {
			return fmt.Errorf("%s must be 0 or more, got %d", c.flag, c.v)
		}
	}
	if spec.Retries != nil && *spec.Retries < 0 {
		return fmt.Errorf("--retries must be 0 or more, got %d", *spec.Retries)
	}
	switch spec.RestartPolicy {
	case "", api.RestartOnFailure, api.RestartAlways:
	case api.RestartNever:
		if spec.Retries != nil && *spec.Retries > 0 {
			return fmt.Errorf("--retries %d would never be used: under --restart-policy never no attempt is retried; use on-failure", *spec.Retries)
		}
	default:
		return fmt.Errorf("--restart-policy: unknown policy %q: want never, on-failure or always", spec.RestartPolicy)
	}
	for _, deps := range []struct {
		flag string
		ids  []int64
	}{{"--after", spec.After}, {"--after-ok", spec.AfterOK}} {
		for _, id := range deps.ids {
			if id <= 0 {
				return fmt.Errorf("%s: invalid job ID %d: want a positive number", deps.flag, id)
			}
		}
	}
	if spec.Array != "" {
		if _, _, err := parseArray(spec.Array); err != nil {
			return fmt.Errorf("--array: %w", err)
		}
	}
	if err := checkImageRef(spec.Image); err != nil {
		return fmt.Errorf("--image: %w", err)
	}
	return nil
}

// parseJobIDs reads job IDs separated by commas.
func parseJobIDs(s string) ([]int64, error) {
	var ids []int64
	for _, p := range strings.Split(s, ",") {
		id, err := parseJobID(strings.TrimSpace(p))
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// parseGres reads Slurm's GPU request, gpu, gpu:N or gpu:MODEL:N, into the model ("" any)
// and the GPUs per node.
func parseGres(s string) (model string, n int, err error) {
	parts := strings.Split(s, ":")
	if parts[0] != "gpu" || len(parts) > 3 {
		return "", 0, fmt.Errorf("invalid GPU request %q: want gpu:N or gpu:MODEL:N", s)
	}
	n = 1
	if len(parts) > 1 {
		if n, err = strconv.Atoi(parts[len(parts)-1]); err != nil || n < 1 {
			return "", 0, fmt.Errorf("invalid GPU request %q: want gpu:N or gpu:MODEL:N with N 1 or more", s)
		}
	}
	if len(parts) == 3 {
		if model = parts[1]; model == "" {
			return "", 0, fmt.Errorf("invalid GPU request %q: empty model", s)
		}
	}
	return model, n, nil
}

// parseDependency reads Slurm's dependency list, afterok:ID[:ID] and afterany:ID[:ID]
// separated by commas (all must hold), into --after and --after-ok. rota has no
// equivalent of Slurm's other kinds or of ? (any one of them).
func parseDependency(s string) (after, afterOK []int64, err error) {
	if strings.Contains(s, "?") {
		return nil, nil, fmt.Errorf("invalid dependency %q: rota waits for all of them; join them with commas", s)
	}
	for _, item := range strings.Split(s, ",") {
		kind, ids, ok := strings.Cut(item, ":")
		if !ok || ids == "" {
			return nil, nil, fmt.Errorf("invalid dependency %q: want afterok:ID[:ID] or afterany:ID[:ID]", item)
		}
		got, err := parseJobIDs(strings.ReplaceAll(ids, ":", ","))
		if err != nil {
			return nil, nil, fmt.Errorf("invalid dependency %q: %w", item, err)
		}
		switch kind {
		case "afterok":
			afterOK = append(afterOK, got...)
		case "afterany":
			after = append(after, got...)
		default:
			return nil, nil, fmt.Errorf("invalid dependency %q: rota has afterok (--after-ok) and afterany (--after), not %s", item, kind)
		}
	}
	return after, afterOK, nil
}

// unknownField matches yaml.v3's complaint about a field JobSpec lacks.
var unknownField = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^line (\d+): field (.+) not found in type `) })

// readSpecFile decodes a YAML JobSpec, refusing fields JobSpec does not have.
func readSpecFile(path string) (api.JobSpec, error) {
	var spec api.JobSpec
	data, err := os.ReadFile(path)
	if err != nil {
		return spec, fmt.Errorf("-f: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err = dec.Decode(&spec)
	if errors.Is(err, io.EOF) {
		return spec, nil // an empty file is an empty spec
	}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs := make([]string, len(te.Errors))
		for i, m := range te.Errors {
			if sub := unknownField().FindStringSubmatch(m); sub != nil {
				m = fmt.Sprintf("line %s: unknown field %q", sub[1], sub[2])
			}
			msgs[i] = m
		}
		return spec, fmt.Errorf("%s: %s", path, strings.Join(msgs, "; "))
	}
	if err != nil {
		return spec, fmt.Errorf("%s: %w", path, err)
	}
	return spec, nil
}

// sizeRE is a number with an optional unit: M, G or T, each optionally followed by B or iB.
var sizeRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(?i)(-?[0-9]*\.?[0-9]+)\s*(?:([MGT])(I?B)?)?$`) })

// ParseSize reads a memory size into megabytes: 512M, 16G, 1.5T, 16GiB, 16GB (taken as
// GiB, as Slurm does) or a bare number of megabytes.
func ParseSize(s string) (int64, error) {
	m := sizeRE().FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("invalid size %q: want e.g. 512M, 16G, 1T or a number of megabytes", s)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q: %w", s, err)
	}
	if v < 0 {
		return 0, fmt.Errorf("invalid size %q: must be 0 or more", s)
	}
	switch strings.ToUpper(m[2]) {
	case "G":
		v *= 1 << 10
	case "T":
		v *= 1 << 20
	}
	mb := math.Ceil(v)
	if mb > 1<<50 {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return int64(mb), nil
}

// slurmTime matches Slurm's time limit forms: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
var slurmTime = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^(?:(\d+)-(\d+)(?::(\d+)(?::(\d+))?)?|(\d+)(?::(\d+)(?::(\d+))?)?)$`)
})

// parseTimeLimit reads a time limit into seconds. It takes Go durations (90m, 2h30m) and
// Slurm's forms (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS; a bare number is minutes).
func parseTimeLimit(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if m := slurmTime().FindStringSubmatch(t); m != nil {
		var v [8]int64
		for i := 1; i < len(m); i++ {
			if m[i] == "" {
				continue
			}
			var err error
			// Nine digits per part keep the sum far from overflow.
			if v[i], err = strconv.ParseInt(m[i], 10, 64); err != nil || len(m[i]) > 9 {
				return 0, fmt.Errorf("invalid duration %q: too large", s)
			}
		}
		switch {
		case m[1] != "": // D-HH[:MM[:SS]]
			return v[1]*86400 + v[2]*3600 + v[3]*60 + v[4], nil
		case m[7] != "": // HH:MM:SS
			return v[5]*3600 + v[6]*60 + v[7], nil
		default: // MM[:SS]
			return v[5]*60 + v[6], nil
		}
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: want e.g. 90m, 2h30m, 04:00:00 or 1-12:00:00", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("invalid duration %q: must be 0 or more", s)
	}
	return ceilSeconds(d), nil
}

// ceilSeconds rounds d up to whole seconds without adding to d, which may be near its
// maximum.
func ceilSeconds(d time.Duration) int64 {
	secs := int64(d / time.Second)
	if d%time.Second != 0 {
		secs++
	}
	return secs
}

// parseGrace reads a grace period: a Go duration or a bare number of seconds.
func parseGrace(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if v, err := strconv.ParseInt(t, 10, 64); err == nil {
		if v < 0 {
			return 0, fmt.Errorf("invalid duration %q: must be 0 or more", s)
		}
		return v, nil
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: want e.g. 30s, 2m or a number of seconds", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("invalid duration %q: must be 0 or more", s)
	}
	return ceilSeconds(d), nil
}

// normalizeSignal turns "term" or "TERM" into "SIGTERM"; numbers pass unchanged.
func normalizeSignal(s string) string {
	s = strings.ToUpper(strings.TrimSpace(s))
	if s == "" || strings.HasPrefix(s, "SIG") {
		return s
	}
	if _, err := strconv.Atoi(s); err == nil {
		return s
	}
	return "SIG" + s
}
