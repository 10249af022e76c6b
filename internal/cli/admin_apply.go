package cli

import (
	"context"
	"fmt"
	"os"
)

const applyUsage = `rota admin apply -f FILE

Sends a YAML file of queues and teams to the server, which applies it whole or not at
all; queues and teams it does not name stay as they are. A mistake is reported with its
line. The file reads like this:

  queues:
    - name: train
      tier: 1
      default_time_limit_s: 86400
      pools: [train]
  teams:
    - name: nlp
      weight: 2
      quotas:
        H100: {guaranteed: 8, limit: 16}
        "*": {guaranteed: 2, limit: 4}
      members: [alice, bob]

-o json prints the configuration as applied.`

// maxConfigSize bounds the file read, far above any real configuration.
const maxConfigSize = 4 << 20

func runApply(ctx context.Context, cfg Config, args []string) int {
	const cmd = "admin apply"
	fs, g := newFlagSet(cfg, cmd, applyUsage)
	file := fs.String("f", "", "YAML configuration `file`")
	if code, ok := cfg.parseNoArgs(cmd, fs, g, args); !ok {
		return code
	}
	if *file == "" {
		return cfg.usageError(cmd, "-f FILE is required")
	}
	data, err := os.ReadFile(*file)
	if err != nil {
		return cfg.usageError(cmd, "-f: %v", err)
	}
	if len(data) > maxConfigSize {
		return cfg.usageError(cmd, "%s is larger than %d MiB", *file, maxConfigSize>>20)
	}

	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	applied, err := c.ApplyConfig(ctx, data)
	if err != nil {
		// The server's message names the line; the file's name makes it clickable.
		return cfg.fail(ctx, fmt.Errorf("%s: %w", *file, err))
	}
	if g.output == "json" {
		return cfg.printJSON(applied)
	}
	pools := ""
	if len(applied.Pools) > 0 {
		pools = ", " + plural(len(applied.Pools), "pool", "pools")
	}
	fmt.Fprintf(cfg.Stdout, "Applied: %s, %s%s\n", plural(len(applied.Queues), "queue", "queues"), plural(len(applied.Teams), "team", "teams"), pools)
	return ExitOK
}
