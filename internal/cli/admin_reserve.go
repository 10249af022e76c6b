package cli

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rotahq/rota/internal/api"
)

const reserveUsage = `rota admin reserve --team T --gpus N [--model M] [--pool P] --start TIME --end TIME [--name NAME]
rota admin reserve --team T --nodes NODE,... --start TIME --end TIME [--name NAME]
rota admin reserve list

Holds GPUs for a team from --start to --end. With --gpus, the scheduler keeps N GPUs of
the model and pool (any, without --model or --pool) free for the team, on whichever nodes
they are: during the window other teams' jobs may use only what the team does not need,
and before it only if their time limit ends them before --start. With --nodes, it holds
those whole nodes. Prints the reservation's ID on the last line.
  TIME is RFC 3339 (2026-12-01T09:00:00Z), a local time "2026-12-01 09:00" (seconds
  optional, or a date alone for its midnight), "now", or "+DURATION" from now (+2h, +1d).
  --end may also be a DURATION after --start: 4h, 90m, 2d, 1d12h.
  --start defaults to now.
"list" lists the reservations, as rota admin reservations does.`

const reservationsUsage = `rota admin reservations

Lists the reservations that have not ended: what each holds, and for one by GPU count
whose window is open, USED (the team's GPUs of its model and pool in use) and HELD (how
many more are free and kept for the team now). -o json prints an api.ReservationList.`

const unreserveUsage = `rota admin unreserve ID...

Deletes reservations; the GPUs they held are free for anyone at once.`

func runReserve(ctx context.Context, cfg Config, args []string) int {
	if len(args) > 0 && args[0] == "list" {
		return runReservations(ctx, cfg, args[1:])
	}
	const cmd = "admin reserve"
	fs, g := newFlagSet(cfg, cmd, reserveUsage)
	team := fs.String("team", "", "`team` the GPUs are held for")
	gpus := fs.Int("gpus", 0, "number of `GPUs` to hold")
	model := fs.String("model", "", "GPU `model` of the GPUs held with --gpus (default any)")
	pool := fs.String("pool", "", "`pool` of the GPUs held with --gpus (default any)")
	nodes := fs.String("nodes", "", "comma-separated `nodes` to hold whole, instead of --gpus")
	start := fs.String("start", "now", "when the reservation begins, a `TIME`")
	end := fs.String("end", "", "when it ends, a `TIME` or a DURATION after --start")
	name := fs.String("name", "", "`name` of the reservation")
	if code, ok := cfg.parseNoArgs(cmd, fs, g, args); !ok {
		return code
	}
	r, err := buildReservation(reserveFlags{team: *team, gpus: *gpus, model: *model, pool: *pool, nodes: *nodes, start: *start, end: *end},
		cfg.Now(), cfg.location())
	if err != nil {
		return cfg.usageError(cmd, "%v", err)
	}
	r.Name = *name

	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	r, err = c.Reserve(ctx, r)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	if g.output == "json" {
		return cfg.printJSON(r)
	}
	loc := cfg.location()
	fmt.Fprintf(cfg.Stdout, "Reserved %s for team %s from %s to %s (reservation %d)\n",
		holdsOf(r), r.Team, formatTime(&r.Start, loc), formatTime(&r.End, loc), r.ID)
	fmt.Fprintln(cfg.Stdout, r.ID)
	return ExitOK
}

// holdsOf says what a reservation holds: "4 GPUs of model H100 in pool train", or
// "16 GPUs on node-a,node-b".
func holdsOf(r api.Reservation) string {
	if !r.ByCount() {
		return plural(r.GPUs, "GPU", "GPUs") + " on " + strings.Join(r.Nodes, ",")
	}
	s := plural(r.GPUs, "GPU", "GPUs")
	if r.Model != "" {
		s += " of model " + r.Model
	}
	if r.Pool != "" {
		s += " in pool " + r.Pool
	}
	return s
}

// reserveFlags are reserve's flags as given.
type reserveFlags struct {
	team, model, pool, nodes, start, end string
	gpus                                 int
}

// buildReservation checks reserve's flags and turns them into the request.
func buildReservation(f reserveFlags, now time.Time, loc *time.Location) (api.Reservation, error) {
	var r api.Reservation
	switch {
	case f.team == "":
		return r, errors.New("--team is required")
	case f.nodes != "" && (f.gpus != 0 || f.model != "" || f.pool != ""):
		return r, errors.New("--nodes holds whole nodes; --gpus, --model and --pool are for a reservation by GPU count: give one or the other")
	case f.nodes == "" && f.gpus < 1:
		return r, fmt.Errorf("--gpus must be 1 or more, got %d (or give --nodes)", f.gpus)
	case f.end == "":
		return r, errors.New("--end is required: a time, or a duration after --start such as 4h")
	}
	var nodes []string
	if f.nodes != "" {
		for _, n := range strings.Split(f.nodes, ",") {
			if n = strings.TrimSpace(n); n == "" {
				return r, fmt.Errorf("--nodes %q: an empty node name", f.nodes)
			}
			nodes = append(nodes, n)
		}
	}
	from, err := parseWhen(f.start, now, loc)
	if err != nil {
		return r, fmt.Errorf("--start: %w", err)
	}
	to, err := parseEnd(f.end, from, now, loc)
	if err != nil {
		return r, fmt.Errorf("--end: %w", err)
	}
	if !to.After(from) {
		return r, fmt.Errorf("--end %s is not after --start %s", formatTime(&to, loc), formatTime(&from, loc))
	}
	return api.Reservation{Team: f.team, GPUs: f.gpus, Model: f.model, Pool: f.pool, Nodes: nodes, Start: from, End: to}, nil
}

// localLayouts are the forms of a time without a zone, read in the local zone.
var localLayouts = []string{"2006-01-02 15:04", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02"}

// parseWhen reads a point in time: RFC 3339, a local time in one of localLayouts, "now",
// or "+DURATION" from now.
func parseWhen(s string, now time.Time, loc *time.Location) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "now" {
		return now, nil
	}
	if rest, ok := strings.CutPrefix(s, "+"); ok {
		d, err := parseSpan(rest)
		if err != nil {
			return time.Time{}, err
		}
		return now.Add(d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	for _, layout := range localLayouts {
		if t, err := time.ParseInLocation(layout, s, loc); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf(`invalid time %q: want e.g. 2026-12-01T09:00:00Z, "2026-12-01 09:00" (local), now or +2h`, s)
}

// parseEnd reads the end of a window: a time as parseWhen reads it, or a duration after
// start.
func parseEnd(s string, start, now time.Time, loc *time.Location) (time.Time, error) {
	if d, err := parseSpan(strings.TrimSpace(s)); err == nil {
		return start.Add(d), nil
	}
	return parseWhen(s, now, loc)
}

// spanDays matches a duration that begins with whole days: 2d, 1d12h.
var spanDays = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(\d{1,5})d(.*)$`) })

// parseSpan reads a positive duration: a Go duration, optionally led by days (2d, 1d12h).
// It takes no sign, so that parseEnd leaves "+4h" to parseWhen.
func parseSpan(s string) (time.Duration, error) {
	if s == "" || s[0] < '0' || s[0] > '9' {
		return 0, fmt.Errorf("invalid duration %q: want e.g. 4h, 90m, 2d or 1d12h", s)
	}
	var days time.Duration
	rest := s
	if m := spanDays().FindStringSubmatch(s); m != nil {
		n, _ := strconv.Atoi(m[1])
		days, rest = time.Duration(n)*24*time.Hour, m[2]
	}
	var d time.Duration
	if rest != "" || days == 0 {
		var err error
		if d, err = time.ParseDuration(rest); err != nil {
			return 0, fmt.Errorf("invalid duration %q: want e.g. 4h, 90m, 2d or 1d12h", s)
		}
	}
	if d+days <= 0 {
		return 0, fmt.Errorf("invalid duration %q: must be more than 0", s)
	}
	return d + days, nil
}

func runReservations(ctx context.Context, cfg Config, args []string) int {
	return runList(ctx, cfg, args, "admin reservations", reservationsUsage, nil,
		func(ctx context.Context, c *Client) (api.ReservationList, error) {
			list, err := c.Reservations(ctx)
			list.Reservations = orEmpty(list.Reservations)
			return list, err
		},
		cfg.printReservations)
}

func (cfg Config) printReservations(ctx context.Context, list api.ReservationList) int {
	loc := cfg.location()
	now := cfg.Now()
	tw := newTable(cfg.Stdout)
	fmt.Fprintln(tw, "ID\tNAME\tTEAM\tHOLDS\tSTART\tEND\tUSED\tHELD")
	for _, r := range list.Reservations {
		used, held := "-", "-"
		if r.ByCount() && !now.Before(r.Start) {
			used, held = strconv.Itoa(r.Used), strconv.Itoa(r.Held)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			r.ID, orDash(r.Name), r.Team, holdsOf(r), formatTime(&r.Start, loc), formatTime(&r.End, loc), used, held)
	}
	if err := tw.Flush(); err != nil {
		return cfg.fail(ctx, err)
	}
	return ExitOK
}

func runUnreserve(ctx context.Context, cfg Config, args []string) int {
	const cmd = "admin unreserve"
	fs, g := newFlagSet(cfg, cmd, unreserveUsage)
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		return cfg.usageError(cmd, "no reservation ID given")
	}
	ids := make([]int64, len(pos))
	for i, p := range pos {
		id, err := strconv.ParseInt(p, 10, 64)
		if err != nil || id <= 0 {
			return cfg.usageError(cmd, "invalid reservation ID %q: want a positive number", p)
		}
		ids[i] = id
	}
	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	// A deletion has nothing to print as JSON; the exit code says how it went.
	_, exit := forEach(ctx, cfg, g, ids,
		func(id int64) string { return fmt.Sprintf("reservation %d", id) },
		func(id int64) (int64, error) { return id, c.Unreserve(ctx, id) },
		func(id int64) string { return fmt.Sprintf("Deleted reservation %d", id) })
	return exit
}
