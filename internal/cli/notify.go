package cli

import "context"

// rota notify (issue 10): placeholder.

func runNotify(ctx context.Context, cfg Config, args []string) int {
	return notBuiltVerb(cfg, "notify")
}
