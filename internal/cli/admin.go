package cli

import (
	"context"
	"fmt"
	"strings"
)

const adminUsage = `usage: rota admin COMMAND [flags] [arguments]

Commands:
  queue list                      list queues
  queue set NAME [flags]          create a queue, or change only the flags given
  queue delete NAME               delete a queue
  team list                       list teams: quotas, usage, GPUs in use, members
  team set NAME [flags]           create a team, or change only the flags given
  team delete NAME                delete a team
  drain NODE...                   start no new jobs on nodes; running ones finish
  resume NODE...                  let jobs start on drained nodes again
  reserve --team T --gpus N --start TIME --end TIME [--name NAME]
                                  hold GPUs for a team in a time window
  reservations                    list reservations
  unreserve ID...                 delete reservations
  apply -f FILE                   apply a YAML file of queues and teams

Every command takes --server URL and -o table|json. Run 'rota admin COMMAND -h' for a
command's flags.
`

// adminCommands are the commands under `rota admin`, named by one or two words.
var adminCommands = []struct {
	name string
	run  verbFunc
}{
	{"queue list", runQueueList},
	{"queue set", runQueueSet},
	{"queue delete", runQueueDelete},
	{"team list", runTeamList},
	{"team set", runTeamSet},
	{"team delete", runTeamDelete},
	{"drain", runDrain},
	{"resume", runResume},
	{"reserve", runReserve},
	{"reservations", runReservations},
	{"unreserve", runUnreserve},
	{"apply", runApply},
}

func runAdmin(ctx context.Context, cfg Config, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(cfg.Stderr, adminUsage)
		return ExitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
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
	switch group := isAdminGroup(args[0]); {
	case group && len(args) == 1:
		fmt.Fprintf(cfg.Stderr, "rota admin %s: want list, set or delete\n\n", args[0])
	case group:
		fmt.Fprintf(cfg.Stderr, "rota admin: unknown command %q\n\n", args[0]+" "+args[1])
	default:
		fmt.Fprintf(cfg.Stderr, "rota admin: unknown command %q\n\n", args[0])
	}
	fmt.Fprint(cfg.Stderr, adminUsage)
	return ExitUsage
}

// isAdminGroup reports whether word starts two-word commands, as "queue" does.
func isAdminGroup(word string) bool {
	for _, c := range adminCommands {
		if group, _, ok := strings.Cut(c.name, " "); ok && group == word {
			return true
		}
	}
	return false
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

// oneName checks that an admin command got exactly one positional argument, its NAME.
func (cfg Config) oneName(cmd string, pos []string) (string, bool) {
	switch {
	case len(pos) != 1:
		cfg.usageError(cmd, "want exactly one name, got %d arguments", len(pos))
		return "", false
	case strings.TrimSpace(pos[0]) == "":
		cfg.usageError(cmd, "the name is empty")
		return "", false
	}
	return pos[0], true
}
