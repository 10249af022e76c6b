package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
)

const auditUsage = `rota admin audit [--since 24h|TIME] [--until TIME] [--actor NAME] [--kind K] [--limit N]

Lists the audit trail, oldest first: every change made through the API and every
transition of a job, with who made it, in which role, from which address. SUBJECT is
the job or node it concerns; a changed setting shows its fields before → after.
  --since and --until take RFC 3339 times (2026-03-01T09:00:00Z) or a duration back
  from now: a Go duration (90m, 12h) or whole days (7d, 1d12h).
  --kind is one of submit, transition, checkpoint, preempt, cancel, hold, release,
  node, drain, queue, team, quota, user, token, join, reservation, config, admin.
-o json prints an api.EventList.`

func runAudit(ctx context.Context, cfg Config, args []string) int {
	const cmd = "admin audit"
	fs, g := newFlagSet(cfg, cmd, auditUsage)
	since := fs.String("since", "24h", "start of the window, a `TIME` or a duration back from now")
	until := fs.String("until", "", "end of the window, a `TIME` or a duration back from now (default: now)")
	actor := fs.String("actor", "", "only the events of `user`")
	kind := fs.String("kind", "", "only events of `kind` K")
	limit := fs.Int("limit", 0, "at most `N` events (default: all in the window)")
	if code, ok := cfg.parseNoArgs(cmd, fs, g, args); !ok {
		return code
	}
	now := cfg.Now()
	opts := AuditOptions{Actor: *actor, Kind: *kind}
	var err error
	if opts.Since, err = parseAgo(*since, now); err != nil {
		return cfg.usageError(cmd, "--since: %v", err)
	}
	if *until != "" {
		if opts.Until, err = parseAgo(*until, now); err != nil {
			return cfg.usageError(cmd, "--until: %v", err)
		}
		if !opts.Until.After(opts.Since) {
			return cfg.usageError(cmd, "--until is not after --since")
		}
	}
	if *kind != "" && !slices.Contains(api.EventKinds(), *kind) {
		return cfg.usageError(cmd, "--kind: unknown kind %q: want one of %s", *kind, strings.Join(api.EventKinds(), ", "))
	}
	if *limit < 0 {
		return cfg.usageError(cmd, "--limit must be 1 or more, got %d", *limit)
	}
	if *limit > 0 {
		opts.Limit = min(*limit, auditPage)
	}

	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	events, err := allEvents(ctx, c, opts, *limit)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	if g.output == "json" {
		return cfg.printJSON(api.EventList{Events: events})
	}
	loc := cfg.location()
	tw := newTable(cfg.Stdout)
	fmt.Fprintln(tw, "TIME\tACTOR\tROLE\tSOURCE\tKIND\tSUBJECT\tMESSAGE")
	for _, e := range events {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", formatTime(&e.Time, loc), orDash(e.Actor), orDash(e.Role),
			orDash(e.Source), e.Kind, eventSubject(e), orDash(auditMessage(e)))
	}
	if err := tw.Flush(); err != nil {
		return cfg.fail(ctx, err)
	}
	return ExitOK
}

// auditPage is the most events asked for at once, well within what a server answers.
const auditPage = 1000

// allEvents follows the pages of the audit trail to its end, or until it has limit events
// (0: no limit).
func allEvents(ctx context.Context, c *Client, opts AuditOptions, limit int) ([]api.Event, error) {
	events := []api.Event{}
	seen := map[string]bool{}
	for {
		page, err := c.Audit(ctx, opts)
		if err != nil {
			return nil, err
		}
		events = append(events, page.Events...)
		if limit > 0 && len(events) >= limit {
			return events[:limit], nil
		}
		if page.Next == "" {
			return events, nil
		}
		// As in AllJobs: a repeated cursor would keep us here forever.
		if seen[page.Next] {
			return nil, fmt.Errorf("server repeated page cursor %q", page.Next)
		}
		seen[page.Next] = true
		opts.After = page.Next
	}
}

// parseAgo reads a point in time: RFC 3339, or a duration back from now as parseSpan
// reads it.
func parseAgo(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := parseSpan(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("invalid time %q: want an RFC 3339 time such as 2026-03-01T09:00:00Z, or a duration back from now such as 24h or 7d", s)
	}
	return now.Add(-d), nil
}

// eventSubject is the job and node an event concerns: "job 42, node-a".
func eventSubject(e api.Event) string {
	var parts []string
	if e.JobID != 0 {
		s := "job " + strconv.FormatInt(e.JobID, 10)
		if e.Attempt > 0 {
			s += " attempt " + strconv.Itoa(e.Attempt)
		}
		parts = append(parts, s)
	}
	if e.Node != "" {
		parts = append(parts, "node "+e.Node)
	}
	return orDash(strings.Join(parts, ", "))
}

// auditMessage is the rest of an event in words: its transition, reason, message and the
// setting it changed.
func auditMessage(e api.Event) string {
	var parts []string
	switch {
	case e.From != "" && e.To != "":
		parts = append(parts, string(e.From)+" -> "+string(e.To))
	case e.To != "":
		parts = append(parts, "-> "+string(e.To))
	}
	if e.Reason != "" {
		parts = append(parts, e.Reason)
	}
	if e.Message != "" {
		parts = append(parts, e.Message)
	}
	if c := describeChange(e.Before, e.After); c != "" {
		parts = append(parts, clean(c)) // JSON leaves C1 controls and format characters raw
	}
	return strings.Join(parts, "; ")
}

// maxChangeValue bounds each value describeChange shows.
const maxChangeValue = 48

// describeChange shows a changed setting compactly as before → after. When both are
// JSON objects only the fields that differ are shown: "tier: 1 → 2, pools: - → ["a"]".
func describeChange(before, after json.RawMessage) string {
	if len(before) == 0 && len(after) == 0 {
		return ""
	}
	var b, a map[string]json.RawMessage
	if json.Unmarshal(before, &b) != nil || json.Unmarshal(after, &a) != nil || b == nil || a == nil {
		return compactJSON(before) + " → " + compactJSON(after)
	}
	keys := make([]string, 0, len(a)+len(b))
	for k := range b {
		keys = append(keys, k)
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		if !sameJSON(b[k], a[k]) {
			parts = append(parts, k+": "+compactJSON(b[k])+" → "+compactJSON(a[k]))
		}
	}
	if len(parts) == 0 {
		return "no change"
	}
	return strings.Join(parts, ", ")
}

// sameJSON reports whether two JSON values mean the same, whatever their spacing and key
// order; an absent value is the same as null.
func sameJSON(x, y json.RawMessage) bool {
	var vx, vy any
	if len(x) > 0 && json.Unmarshal(x, &vx) != nil {
		return bytes.Equal(x, y)
	}
	if len(y) > 0 && json.Unmarshal(y, &vy) != nil {
		return false
	}
	return reflect.DeepEqual(vx, vy)
}

// compactJSON prints a JSON value on one short line, "-" when it is absent or null.
func compactJSON(v json.RawMessage) string {
	var buf bytes.Buffer
	if len(v) == 0 || string(v) == "null" || json.Compact(&buf, v) != nil {
		return "-"
	}
	return truncate(buf.String(), maxChangeValue)
}
