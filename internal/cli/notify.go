package cli

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/rotahq/rota/internal/api"
)

const notifyUsage = `rota notify set URL[#EVENTS]... [--events started,ended]
rota notify list
rota notify clear

Your default webhooks: the server POSTs a JSON notification to each URL when one of your
jobs starts, ends, is preempted, is flagged idle or loses its node (docs/notifications.md
shows the body and how to check its signature). set replaces the list with the URLs
given; each is told of the events after its # (comma-separated), else of --events, else
of started, ended, preempted, idle_warning and node_lost. The events are ` + notifyEventList + `.
list shows the list and clear empties it. A job adds its own with rota submit --notify,
and a team's apply to all its jobs (rota admin team set --notify). -o json prints the
list.`

const notifyEventList = "started, succeeded, failed, ended (any end), preempted, idle_warning and node_lost"

func runNotify(ctx context.Context, cfg Config, args []string) int {
	if len(args) == 0 {
		fmt.Fprintf(cfg.Stderr, "usage: %s\n", notifyUsage)
		return ExitUsage
	}
	switch args[0] {
	case "set":
		return runNotifySet(ctx, cfg, args[1:])
	case "list":
		return runNotifyList(ctx, cfg, args[1:])
	case "clear":
		return runNotifyClear(ctx, cfg, args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Fprintf(cfg.Stderr, "usage: %s\n", notifyUsage)
		return ExitOK
	}
	fmt.Fprintf(cfg.Stderr, "rota notify: unknown command %q; want set, list or clear\n", args[0])
	return ExitUsage
}

func runNotifySet(ctx context.Context, cfg Config, args []string) int {
	const cmd = "notify set"
	fs, g := newFlagSet(cfg, cmd, notifyUsage)
	events := fs.String("events", "", "`EVENTS` of the URLs that name none after #, comma-separated")
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code
	}
	if len(pos) == 0 {
		return cfg.usageError(cmd, "give at least one URL; rota notify clear empties the list")
	}
	var list []api.Notify
	for _, arg := range pos {
		n, err := parseNotify(arg)
		if err != nil {
			return cfg.usageError(cmd, "%v", err)
		}
		if len(n.Events) == 0 && *events != "" {
			if n.Events, err = parseNotifyEvents(*events); err != nil {
				return cfg.usageError(cmd, "--events: %v", err)
			}
		}
		list = append(list, n)
	}
	return cfg.putNotify(ctx, g, list)
}

func runNotifyClear(ctx context.Context, cfg Config, args []string) int {
	fs, g := newFlagSet(cfg, "notify clear", notifyUsage)
	if code, ok := cfg.parseNoArgs("notify clear", fs, g, args); !ok {
		return code
	}
	return cfg.putNotify(ctx, g, []api.Notify{})
}

// putNotify replaces the caller's webhooks with list and prints them as stored.
func (cfg Config) putNotify(ctx context.Context, g *globalFlags, list []api.Notify) int {
	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	who, err := c.Whoami(ctx)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	u, err := c.SetUserNotify(ctx, who.User, list)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	return cfg.printNotify(ctx, g, u.Notify)
}

func runNotifyList(ctx context.Context, cfg Config, args []string) int {
	fs, g := newFlagSet(cfg, "notify list", notifyUsage)
	if code, ok := cfg.parseNoArgs("notify list", fs, g, args); !ok {
		return code
	}
	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	who, err := c.Whoami(ctx)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	return cfg.printNotify(ctx, g, who.Notify)
}

// printNotify prints webhooks as a table, or as JSON with -o json.
func (cfg Config) printNotify(ctx context.Context, g *globalFlags, list []api.Notify) int {
	if g.output == "json" {
		return cfg.printJSON(orEmpty(list))
	}
	if len(list) == 0 {
		fmt.Fprintln(cfg.Stdout, "No webhooks.")
		return ExitOK
	}
	tw := newTable(cfg.Stdout)
	fmt.Fprintln(tw, "URL\tEVENTS")
	for _, n := range list {
		events := "started,ended,preempted,idle_warning,node_lost (default)"
		if len(n.Events) > 0 {
			events = strings.Join(n.Events, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\n", clean(n.URL), events)
	}
	if err := tw.Flush(); err != nil {
		return cfg.fail(ctx, err)
	}
	return ExitOK
}

// SetUserNotify replaces a user's default webhooks and returns the user as stored.
func (c *Client) SetUserNotify(ctx context.Context, user string, list []api.Notify) (api.User, error) {
	var u api.User
	err := c.do(ctx, http.MethodPut, namePath("/api/v1/users/", user)+"/notify", nil, list, &u)
	return u, err
}

// notifyFlag collects repeated --notify URL[#EVENTS]. --notify "" adds nothing: given alone,
// it clears a list.
type notifyFlag struct {
	list []api.Notify
}

func (f *notifyFlag) String() string {
	var parts []string
	for _, n := range f.list {
		s := n.URL
		if len(n.Events) > 0 {
			s += "#" + strings.Join(n.Events, ",")
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// Set adds one webhook; an empty value adds none, which clears the list.
func (f *notifyFlag) Set(s string) error {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	n, err := parseNotify(s)
	if err != nil {
		return err
	}
	f.list = append(f.list, n)
	return nil
}

// parseNotify reads URL or URL#EVENT,EVENT. A webhook URL has no fragment of its own (it
// would never be sent), so everything after # is events.
func parseNotify(s string) (api.Notify, error) {
	u, events, hasEvents := strings.Cut(strings.TrimSpace(s), "#")
	if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return api.Notify{}, fmt.Errorf("%q: want an http or https URL, optionally with #EVENTS, e.g. https://hooks.example.com/rota#started,failed", s)
	}
	n := api.Notify{URL: u}
	if hasEvents {
		var err error
		if n.Events, err = parseNotifyEvents(events); err != nil {
			return api.Notify{}, fmt.Errorf("%q: %w", s, err)
		}
	}
	return n, nil
}

// parseNotifyEvents reads a comma-separated list of notification events.
func parseNotifyEvents(s string) ([]string, error) {
	events := splitList(s)
	if len(events) == 0 {
		return nil, fmt.Errorf("no events after #; name some of %s, or leave out the #", notifyEventList)
	}
	for _, e := range events {
		if !slices.Contains(api.NotifyEvents(), e) {
			return nil, fmt.Errorf("unknown event %q; the events are %s", e, notifyEventList)
		}
	}
	return events, nil
}
