package cli

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"

	"github.com/rotahq/rota/internal/api"
)

const queueListUsage = `rota admin queue list

Lists the queues. A higher TIER is scheduled first. PREEMPTIBLE is "yes" when the
queue's jobs may always be preempted, "borrowing" when only while they run beyond their
team's guaranteed quota, "never" when not even then. MAX-TIME "unlimited" means no cap.
USERS/TEAMS says who may submit; USER-GPU-LIMIT caps the GPUs one user holds in the
queue at once. IDLE is the idle policy: "warn after 30m00s below 5%" flags and warns a
running job whose GPUs all stay below 5% utilisation for 30 minutes, "stop ..." also
stops it (reason idle_reclaimed), "off" does neither. IMAGES lists the image prefixes
the queue's jobs may run, "any" when it does not limit them. -o json prints an
api.QueueList.`

const queueSetUsage = `rota admin queue set NAME [flags]

Creates queue NAME from the flags, or changes only the flags given of an existing one.
Times take Go durations (90m, 4h) or Slurm's forms (HH:MM:SS, D-HH); --max-time 0 means
unlimited. Lists are comma-separated; an empty list ("") clears one. A boolean flag is
turned off with =false, e.g. --preemptible=false.
The idle policy: a running job whose GPUs all stay below --idle-threshold percent
utilisation (default 5) for --idle-after is flagged in rota queue and rota show and
warned through its notice file; with --idle-action stop it is then stopped after its
grace, with reason idle_reclaimed. --idle-after 0 or off turns the policy off.
--images lists the image prefixes (e.g. registry.example.com/ml/) the queue's jobs may
run; --images "" lets them run any image. -o json prints the queue as stored.`

const queueDeleteUsage = `rota admin queue delete NAME

Deletes a queue.`

func runQueueList(ctx context.Context, cfg Config, args []string) int {
	return runList(ctx, cfg, args, "admin queue list", queueListUsage, nil,
		func(ctx context.Context, c *Client) (api.QueueList, error) {
			queues, err := c.Queues(ctx)
			return api.QueueList{Queues: orEmpty(queues)}, err
		},
		func(ctx context.Context, l api.QueueList) int { return cfg.printQueues(ctx, l.Queues) })
}

func (cfg Config) printQueues(ctx context.Context, queues []api.Queue) int {
	tw := newTable(cfg.Stdout)
	fmt.Fprintln(tw, "NAME\tTIER\tPREEMPTIBLE\tDEFAULT-TIME\tMAX-TIME\tGRACE\tPOOLS\tUSERS/TEAMS\tUSER-GPU-LIMIT\tIDLE\tIMAGES")
	for _, q := range queues {
		maxTime := "unlimited"
		if q.MaxTimeLimit > 0 {
			maxTime = formatDuration(secondsDuration(q.MaxTimeLimit))
		}
		defaultTime := "-"
		if q.DefaultTimeLimit > 0 {
			defaultTime = formatDuration(secondsDuration(q.DefaultTimeLimit))
		}
		grace := formatDuration(secondsDuration(q.Grace))
		if q.MaxGrace > 0 {
			grace += ", max " + formatDuration(secondsDuration(q.MaxGrace))
		}
		gpuLimit := "-"
		if q.UserGPULimit > 0 {
			gpuLimit = strconv.Itoa(q.UserGPULimit)
		}
		images := "any"
		if len(q.Images) > 0 {
			images = clean(strings.Join(q.Images, ","))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			q.Name, q.Tier, preemptibility(q), defaultTime, maxTime, grace,
			joinOrDash(q.Pools), whoMaySubmit(q), gpuLimit, idlePolicy(q), images)
	}
	if err := tw.Flush(); err != nil {
		return cfg.fail(ctx, err)
	}
	return ExitOK
}

// preemptibility is the PREEMPTIBLE column (see queueListUsage).
func preemptibility(q api.Queue) string {
	switch {
	case q.NeverPreempt:
		return "never"
	case q.Preemptible:
		return "yes"
	}
	return "borrowing"
}

// idlePolicy is the IDLE column (see queueListUsage).
func idlePolicy(q api.Queue) string {
	if q.IdleAfter <= 0 {
		return "off"
	}
	action := q.IdleAction
	if action == "" {
		action = api.IdleWarn
	}
	threshold := q.IdleThresholdPct
	if threshold <= 0 {
		threshold = api.DefaultIdleThresholdPct
	}
	return fmt.Sprintf("%s after %s below %s", clean(action), formatDuration(secondsDuration(q.IdleAfter)),
		strconv.FormatFloat(threshold, 'f', -1, 64)+"%")
}

// whoMaySubmit is the USERS/TEAMS column: "anyone", or the users and teams named.
func whoMaySubmit(q api.Queue) string {
	var parts []string
	if len(q.Users) > 0 {
		parts = append(parts, "users "+strings.Join(q.Users, ","))
	}
	if len(q.Teams) > 0 {
		parts = append(parts, "teams "+strings.Join(q.Teams, ","))
	}
	if len(parts) == 0 {
		return "anyone"
	}
	return strings.Join(parts, "; ")
}

// queueFlags are queue set's own flags, as typed.
type queueFlags struct {
	tier, userGPULimit                    int
	preemptible, neverPreempt             bool
	defaultTime, maxTime, grace, maxGrace string
	pools, users, teams                   string
	idleAfter, idleAction, idleThreshold  string
	images                                string
}

func runQueueSet(ctx context.Context, cfg Config, args []string) int {
	const cmd = "admin queue set"
	fs, g := newFlagSet(cfg, cmd, queueSetUsage)
	var f queueFlags
	fs.IntVar(&f.tier, "tier", 0, "scheduling `tier`; a higher one goes first")
	fs.BoolVar(&f.preemptible, "preemptible", false, "the queue's jobs may always be preempted")
	fs.BoolVar(&f.neverPreempt, "never-preempt", false, "the queue's jobs are never preempted, even while borrowing")
	fs.StringVar(&f.defaultTime, "default-time", "", "time limit of jobs that give none, a `DURATION`")
	fs.StringVar(&f.maxTime, "max-time", "", "largest time limit a job may ask for, a `DURATION` (0: unlimited)")
	fs.StringVar(&f.grace, "grace", "", "default time from the stop signal to the kill, a `DURATION`")
	fs.StringVar(&f.maxGrace, "max-grace", "", "largest grace a job may ask for, a `DURATION`")
	fs.StringVar(&f.pools, "pools", "", "run only on nodes of these `pools`, comma-separated (\"\": any)")
	fs.StringVar(&f.users, "users", "", "only these `users` may submit, comma-separated")
	fs.StringVar(&f.teams, "teams", "", "only these `teams` may submit, comma-separated")
	fs.IntVar(&f.userGPULimit, "user-gpu-limit", 0, "most `GPUs` one user's jobs hold at once (0: no cap)")
	fs.StringVar(&f.idleAfter, "idle-after", "", "act on a job whose GPUs stay idle this long, a `DURATION` (0 or off: never)")
	fs.StringVar(&f.idleAction, "idle-action", "", "what to do with an idle job: `warn` or stop")
	fs.StringVar(&f.idleThreshold, "idle-threshold", "", "GPU utilisation `PERCENT` below which a GPU counts as idle (default 5)")
	fs.StringVar(&f.images, "images", "", "image `prefixes` the queue's jobs may run, comma-separated (\"\": any image)")
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code
	}
	name, ok := cfg.oneArg(cmd, "name", pos)
	if !ok {
		return ExitUsage
	}
	if f.preemptible && f.neverPreempt {
		return cfg.usageError(cmd, "--preemptible and --never-preempt exclude each other")
	}
	// Every flag is checked before the server is asked anything.
	edits, err := queueEdits(fs, f)
	if err != nil {
		return cfg.usageError(cmd, "%v", err)
	}

	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	queues, err := c.Queues(ctx)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	q, verb := api.Queue{Name: name}, "Created"
	for _, have := range queues {
		if have.Name == name {
			q, verb = have, "Updated"
		}
	}
	for _, edit := range edits {
		edit(&q)
	}
	q, err = c.SetQueue(ctx, q)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	if g.output == "json" {
		return cfg.printJSON(q)
	}
	fmt.Fprintf(cfg.Stdout, "%s queue %s\n", verb, q.Name)
	return cfg.printQueues(ctx, []api.Queue{q})
}

// queueEdits turns the flags set explicitly into changes to a queue, checking them all.
func queueEdits(fs *flag.FlagSet, f queueFlags) ([]func(*api.Queue), error) {
	var edits []func(*api.Queue)
	var err error
	fs.Visit(func(fl *flag.Flag) {
		if err != nil {
			return
		}
		var edit func(*api.Queue)
		var secs int64
		switch fl.Name {
		case "tier":
			edit = func(q *api.Queue) { q.Tier = f.tier }
		case "preemptible":
			edit = func(q *api.Queue) { q.Preemptible = f.preemptible }
		case "never-preempt":
			edit = func(q *api.Queue) { q.NeverPreempt = f.neverPreempt }
		case "default-time":
			secs, err = parseTimeLimit(f.defaultTime)
			edit = func(q *api.Queue) { q.DefaultTimeLimit = secs }
		case "max-time":
			secs, err = parseTimeLimit(f.maxTime)
			edit = func(q *api.Queue) { q.MaxTimeLimit = secs }
		case "grace":
			secs, err = parseGrace(f.grace)
			edit = func(q *api.Queue) { q.Grace = secs }
		case "max-grace":
			secs, err = parseGrace(f.maxGrace)
			edit = func(q *api.Queue) { q.MaxGrace = secs }
		case "pools":
			edit = func(q *api.Queue) { q.Pools = splitList(f.pools) }
		case "users":
			edit = func(q *api.Queue) { q.Users = splitList(f.users) }
		case "teams":
			edit = func(q *api.Queue) { q.Teams = splitList(f.teams) }
		case "user-gpu-limit":
			if f.userGPULimit < 0 {
				err = fmt.Errorf("must be 0 or more, got %d", f.userGPULimit)
			}
			edit = func(q *api.Queue) { q.UserGPULimit = f.userGPULimit }
		case "idle-after":
			secs, err = parseIdleAfter(f.idleAfter)
			edit = func(q *api.Queue) { q.IdleAfter = secs }
		case "idle-action":
			var action string
			action, err = parseIdleAction(f.idleAction)
			edit = func(q *api.Queue) { q.IdleAction = action }
		case "idle-threshold":
			var pct float64
			pct, err = parseIdleThreshold(f.idleThreshold)
			edit = func(q *api.Queue) { q.IdleThresholdPct = pct }
		case "images":
			var images []string
			images, err = parseImagePrefixes(f.images)
			edit = func(q *api.Queue) { q.Images = images }
		}
		if err != nil {
			err = fmt.Errorf("--%s: %w", fl.Name, err)
		}
		if edit != nil {
			edits = append(edits, edit)
		}
	})
	return edits, err
}

// parseIdleAfter reads --idle-after: a time limit's forms, or "off" (0) to turn the
// idle policy off.
func parseIdleAfter(s string) (int64, error) {
	if strings.EqualFold(strings.TrimSpace(s), "off") {
		return 0, nil
	}
	secs, err := parseTimeLimit(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: want e.g. 30m, 2h or 01:30:00, or 0 or off to turn the idle policy off", s)
	}
	return secs, nil
}

// parseIdleAction reads --idle-action.
func parseIdleAction(s string) (string, error) {
	switch a := strings.ToLower(strings.TrimSpace(s)); a {
	case api.IdleWarn, api.IdleStop:
		return a, nil
	}
	return "", fmt.Errorf("unknown action %q: want warn or stop", s)
}

// parseIdleThreshold reads --idle-threshold: a percentage, "5" or "5%", above 0 and at
// most 100.
func parseIdleThreshold(s string) (float64, error) {
	t := strings.TrimSuffix(strings.TrimSpace(s), "%")
	pct, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(pct) || pct <= 0 || pct > 100 {
		return 0, fmt.Errorf("invalid percentage %q: want a number above 0 and at most 100, e.g. 5", s)
	}
	return pct, nil
}

// parseImagePrefixes reads --images: image prefixes separated by commas; "" is none,
// which lets the queue's jobs run any image.
func parseImagePrefixes(s string) ([]string, error) {
	prefixes := splitList(s)
	for _, p := range prefixes {
		if err := checkImageRef(p); err != nil {
			return nil, err
		}
	}
	return prefixes, nil
}

// checkImageRef refuses what cannot be part of an image reference: whitespace and control
// characters, which would also break the tables that list it.
func checkImageRef(ref string) error {
	if i := strings.IndexFunc(ref, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
		return fmt.Errorf("invalid image %q: an image reference has no spaces or control characters, e.g. registry.example.com/ml/train:1.2", ref)
	}
	return nil
}

func runQueueDelete(ctx context.Context, cfg Config, args []string) int {
	return runDelete(ctx, cfg, args, deleteCommand{cmd: "admin queue delete", usage: queueDeleteUsage,
		arg: "name", done: "Deleted queue", del: (*Client).DeleteQueue})
}

// deleteCommand is an admin command that deletes, removes or revokes one thing named by
// its one argument.
type deleteCommand struct {
	cmd, usage string
	// arg is what the argument is: "name" or "ID".
	arg string
	// done is what table output says before the argument once it is done.
	done string
	// flags, if set, adds the command's own flags.
	flags func(fs *flag.FlagSet)
	del   func(c *Client, ctx context.Context, arg string) error
}

// runDelete serves a deleteCommand.
func runDelete(ctx context.Context, cfg Config, args []string, d deleteCommand) int {
	fs, g := newFlagSet(cfg, d.cmd, d.usage)
	if d.flags != nil {
		d.flags(fs)
	}
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code
	}
	arg, ok := cfg.oneArg(d.cmd, d.arg, pos)
	if !ok {
		return ExitUsage
	}
	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	if err := d.del(c, ctx, arg); err != nil {
		return cfg.fail(ctx, err)
	}
	if g.output == "table" {
		fmt.Fprintf(cfg.Stdout, "%s %s\n", d.done, arg)
	}
	return ExitOK
}
