package cli

import (
	"context"
	"flag"
	"fmt"
	"strings"
)

const adminUsage = `usage: rota admin COMMAND [flags] [arguments]

Commands:
  user list                       list users with their roles and teams
  user add NAME [--role R] [--unix-user U] [--allow-root]
                                  add a user, or change only the flags given
  user remove NAME                remove a user; their tokens stop working
  token list [--user U]           list API tokens
  token create [--user U] [--ttl 30d] [--description TEXT]
                                  make an API token, shown once
  token revoke ID                 revoke an API token
  join-token [--ttl 1h] [--uses N] [--node NAME]
                                  make a token for agents to join with, shown once
  join-token list                 list join tokens
  join-token revoke ID            revoke a join token
  audit [--since 24h] [--until T] [--actor U] [--kind K] [--limit N]
                                  list who changed what, when, from where
  queue list                      list queues with their idle policy and allowed images
  queue set NAME [flags]          create a queue, or change only the flags given
                                  (--idle-after 30m --idle-action warn|stop, --images P,P)
  queue delete NAME               delete a queue
  team list                       list teams: quotas, usage, GPUs in use, members
  team set NAME [flags]           create a team, or change only the flags given
  team delete NAME                delete a team
  drain NODE...                   start no new jobs on nodes; running ones finish
  resume NODE...                  let jobs start on drained nodes again
  node remove NAME [--force]      forget a node and revoke its certificate; --force
                                  requeues the jobs that run there
  reserve --team T --gpus N [--model M] [--pool P] --start TIME --end TIME [--name NAME]
                                  hold N GPUs for a team in a time window
  reserve --team T --nodes N1,N2 --start TIME --end TIME
                                  hold whole nodes for a team in a time window
  reserve list, reservations      list reservations, with held and used GPUs
  unreserve ID...                 delete reservations
  requests [--state S]            list members' requests for quota, queues, reservations
  requests approve ID [--note T]  approve a request, which applies it at once
  requests deny ID --note TEXT    deny a request, telling the asker why
  price list                      list the price of a GPU-hour by model
  price set MODEL RATE [--currency USD]
                                  set the price of a GPU-hour of a model (* for the rest)
  price delete MODEL              remove a model's price
  apply -f FILE                   apply a YAML file of queues and teams
  status                          show the servers, the leader, its term and the store

Commands that act on the store itself, on the machine they run on:
  backup [--store URL | --data-dir DIR] --to FILE
                                  copy a SQLite store to a new file while its server runs
  migrate --from URL --to URL     copy a whole store into an empty one, SQLite to
                                  PostgreSQL or back; the servers must be stopped

Every command takes -o table|json, and those that ask a server --server URL and
--token TOKEN. Run 'rota admin COMMAND -h' for a command's flags.
`

// adminCommands are the commands under `rota admin`, named by one or two words.
var adminCommands = []struct {
	name string
	run  verbFunc
}{
	{"user list", runUserList},
	{"user add", runUserAdd},
	{"user remove", runUserRemove},
	{"token list", runTokenList},
	{"token create", runTokenCreate},
	{"token revoke", runTokenRevoke},
	{"join-token", runJoinToken},
	{"join-token list", runJoinTokenList},
	{"join-token revoke", runJoinTokenRevoke},
	{"audit", runAudit},
	{"queue list", runQueueList},
	{"queue set", runQueueSet},
	{"queue delete", runQueueDelete},
	{"team list", runTeamList},
	{"team set", runTeamSet},
	{"team delete", runTeamDelete},
	{"drain", runDrain},
	{"resume", runResume},
	{"node remove", runNodeRemove},
	{"reserve", runReserve},
	{"reservations", runReservations},
	{"unreserve", runUnreserve},
	{"requests", runAdminRequests},
	{"requests approve", runAdminRequestsApprove},
	{"requests deny", runAdminRequestsDeny},
	{"apply", runApply},
	{"status", runStatus},
	{"backup", runBackup},
	{"migrate", runMigrate},
	{"price set", runPriceSet},
	{"price list", runPriceList},
	{"price delete", runPriceDelete},
}

func runAdmin(ctx context.Context, cfg Config, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(cfg.Stderr, adminUsage)
		return ExitUsage
	}
	if asksHelp(args[0]) {
		fmt.Fprint(cfg.Stderr, adminUsage)
		return ExitOK
	}
	for _, words := range []int{2, 1} {
		if len(args) < words {
			continue
		}
		name := strings.Join(args[:words], " ")
		for _, c := range adminCommands {
			if c.name == name {
				return c.run(ctx, cfg, args[words:])
			}
		}
	}
	switch subs := subcommands(args[0]); {
	case len(subs) > 0 && len(args) == 2 && asksHelp(args[1]):
		// rota admin user -h: the lines of the usage that start with the group's word.
		fmt.Fprintf(cfg.Stderr, "usage: rota admin %s COMMAND [flags] [arguments]\n\nCommands:\n%s\n"+
			"Run 'rota admin %s COMMAND -h' for a command's flags.\n", args[0], groupUsage(args[0]), args[0])
		return ExitOK
	case len(subs) > 0 && len(args) == 1:
		fmt.Fprintf(cfg.Stderr, "rota admin %s: want %s\n\n", args[0], orList(subs))
	case len(subs) > 0:
		fmt.Fprintf(cfg.Stderr, "rota admin: unknown command %q\n\n", args[0]+" "+args[1])
	default:
		fmt.Fprintf(cfg.Stderr, "rota admin: unknown command %q\n\n", args[0])
	}
	fmt.Fprint(cfg.Stderr, adminUsage)
	return ExitUsage
}

// asksHelp reports whether arg asks for help.
func asksHelp(arg string) bool {
	switch arg {
	case "-h", "--h", "-help", "--help", "help":
		return true
	}
	return false
}

// groupUsage is the lines of adminUsage's commands that begin with word, each with the
// lines that continue it.
func groupUsage(word string) string {
	var b strings.Builder
	in := false
	for line := range strings.Lines(adminUsage) {
		switch {
		case strings.HasPrefix(line, "  "+word+" "):
			in = true
		case !strings.HasPrefix(line, "   "):
			in = false
		}
		if in {
			b.WriteString(line)
		}
	}
	return b.String()
}

// subcommands lists the second words of the two-word commands that start with word, as
// "queue" starts "queue list".
func subcommands(word string) []string {
	var subs []string
	for _, c := range adminCommands {
		if group, sub, ok := strings.Cut(c.name, " "); ok && group == word {
			subs = append(subs, sub)
		}
	}
	return subs
}

// orList joins words as a sentence offers a choice: "list, set or delete".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// splitList reads a comma-separated list, dropping blanks; "" is the empty list.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// oneArg checks that an admin command got exactly one positional argument, its name or
// ID as what says.
func (cfg Config) oneArg(cmd, what string, pos []string) (string, bool) {
	switch {
	case len(pos) != 1:
		cfg.usageError(cmd, "want exactly one %s, got %d arguments", what, len(pos))
		return "", false
	case strings.TrimSpace(pos[0]) == "":
		cfg.usageError(cmd, "the %s is empty", what)
		return "", false
	}
	return pos[0], true
}

// runList runs a verb that fetches one list and prints it, as JSON or as a table. flags
// registers the verb's own flags (nil: none). fetch returns the list with empty slices
// rather than nil ones, so that JSON shows [] for none.
func runList[L any](ctx context.Context, cfg Config, args []string, cmd, usage string, flags func(*flag.FlagSet),
	fetch func(context.Context, *Client) (L, error), table func(context.Context, L) int) int {
	fs, g := newFlagSet(cfg, cmd, usage)
	if flags != nil {
		flags(fs)
	}
	if code, ok := cfg.parseNoArgs(cmd, fs, g, args); !ok {
		return code
	}
	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	list, err := fetch(ctx, c)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	if g.output == "json" {
		return cfg.printJSON(list)
	}
	return table(ctx, list)
}

// orEmpty is s, or an empty slice for nil.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
