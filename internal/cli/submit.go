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
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rotahq/rota/internal/api"
)

const submitUsage = `rota submit [flags] [-f spec.yaml] -- CMD ARGS...

Submits a job and prints its ID on the last line of output. Flags given explicitly
override the spec file; a command after -- overrides the file's command.
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
	signal, file, user, restartPolicy       string
	image                                   string
	after, afterOK, array                   string
	hold                                    bool
	nice                                    int
	env                                     envFlag
	notify                                  notifyFlag
}

func runSubmit(ctx context.Context, cfg Config, args []string) int {
	fs, g := newFlagSet(cfg, "submit", submitUsage)
	f := submitFlags{env: envFlag{}}
	fs.IntVar(&f.gpus, "gpus", 0, "total number of whole `GPUs`")
	fs.IntVar(&f.gpusPerNode, "gpus-per-node", 0, "GPUs on each node of a multi-node job")
	fs.IntVar(&f.nodes, "nodes", 0, "number of `nodes` (default 1)")
	fs.StringVar(&f.gpuModel, "gpu-model", "", "GPU `model` the job needs, e.g. A100, or several it accepts, e.g. A100,H100")
	fs.IntVar(&f.cpus, "cpus", 0, "number of `CPUs` (default: the server's)")
	fs.StringVar(&f.mem, "mem", "", "memory `SIZE`, e.g. 64G")
	fs.StringVar(&f.timeLimit, "time", "", "time limit `DURATION`, e.g. 4h or 1-00:00:00")
	fs.StringVar(&f.queue, "queue", "", "`queue` to submit to (default: the server's)")
	fs.StringVar(&f.name, "name", "", "job `name`")
	fs.StringVar(&f.team, "team", "", "`team` the job is accounted to")
	fs.StringVar(&f.workdir, "workdir", "", "working `directory` (default: the current one)")
	fs.Var(f.env, "env", "environment variable `K=V` (repeatable)")
	fs.StringVar(&f.signal, "signal", "", "`signal` sent first when the job must stop (default SIGTERM)")
	fs.StringVar(&f.grace, "grace", "", "time from the stop signal to the kill, a `DURATION`")
	fs.IntVar(&f.retries, "retries", 0, "failed attempts to retry (non-zero exit); node loss and preemption never count")
	fs.StringVar(&f.restartPolicy, "restart-policy", "", "`POLICY` never, on-failure or always (default: the queue's)")
	fs.StringVar(&f.user, "user", "", "submit on behalf of `user` (admins only; default: you)")
	fs.StringVar(&f.after, "after", "", "start only after these `jobs` have ended, in any state")
	fs.StringVar(&f.afterOK, "after-ok", "", "start only after these `jobs` have succeeded; fail if one does not")
	fs.StringVar(&f.array, "array", "", "submit one job per index of `SPEC`, e.g. 0-99%8")
	fs.BoolVar(&f.hold, "hold", false, "submit the job held, until rota release")
	fs.IntVar(&f.nice, "nice", 0, "lower the job's priority score by `N` points")
	fs.StringVar(&f.image, "image", "", "run the job in this container `IMAGE`, e.g. registry.example.com/ml/train:1.2")
	fs.Var(&f.notify, "notify", "webhook `URL[#EVENTS]` told of the job's events (repeatable)")
	fs.StringVar(&f.file, "f", "", "YAML job spec `file`")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if !checkOutput(fs, g) {
		return ExitUsage
	}
	spec, err := buildSpec(cfg, fs, f, fs.Args())
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

// buildSpec merges the spec file, the flags set explicitly and the command into a JobSpec
// with the working directory filled in. The user is left to the server, which knows who
// is asking.
func buildSpec(cfg Config, fs *flag.FlagSet, f submitFlags, command []string) (api.JobSpec, error) {
	var spec api.JobSpec
	if f.file != "" {
		var err error
		if spec, err = readSpecFile(f.file); err != nil {
			return spec, err
		}
	}
	var err error
	fs.Visit(func(fl *flag.Flag) {
		if err != nil {
			return
		}
		err = applyFlag(&spec, f, fl.Name)
	})
	if err != nil {
		return spec, err
	}
	if len(command) > 0 {
		spec.Command = command
	}
	if len(spec.Command) == 0 {
		return spec, errors.New("no command: give it after --, e.g. rota submit --gpus 1 -- python train.py")
	}
	if spec.WorkDir == "" {
		if spec.WorkDir, err = cfg.Getwd(); err != nil {
			return spec, fmt.Errorf("--workdir not given and the current directory is unknown: %w", err)
		}
	}
	return spec, checkSpec(spec)
}

// applyFlag copies one explicitly set flag into spec.
func applyFlag(spec *api.JobSpec, f submitFlags, name string) error {
	var err error
	switch name {
	case "gpus":
		spec.GPUs = f.gpus
	case "gpus-per-node":
		spec.GPUsPerNode = f.gpusPerNode
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

// unknownField matches yaml.v3's complaint about a field JobSpec lacks.
var unknownField = regexp.MustCompile(`^line (\d+): field (.+) not found in type `)

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
			if sub := unknownField.FindStringSubmatch(m); sub != nil {
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
var sizeRE = regexp.MustCompile(`^(?i)(-?[0-9]*\.?[0-9]+)\s*(?:([MGT])(I?B)?)?$`)

// ParseSize reads a memory size into megabytes: 512M, 16G, 1.5T, 16GiB, 16GB (taken as
// GiB, as Slurm does) or a bare number of megabytes.
func ParseSize(s string) (int64, error) {
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(s))
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
var slurmTime = regexp.MustCompile(`^(?:(\d+)-(\d+)(?::(\d+)(?::(\d+))?)?|(\d+)(?::(\d+)(?::(\d+))?)?)$`)

// parseTimeLimit reads a time limit into seconds. It takes Go durations (90m, 2h30m) and
// Slurm's forms (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS; a bare number is minutes).
func parseTimeLimit(s string) (int64, error) {
	t := strings.TrimSpace(s)
	if m := slurmTime.FindStringSubmatch(t); m != nil {
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
