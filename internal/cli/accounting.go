package cli

import (
	"context"
	"fmt"
)

// rota usage and rota admin price (issue 10): placeholders the accounting work replaces.

func runUsage(ctx context.Context, cfg Config, args []string) int { return notBuiltVerb(cfg, "usage") }
func runPriceSet(ctx context.Context, cfg Config, args []string) int {
	return notBuiltVerb(cfg, "admin price set")
}
func runPriceList(ctx context.Context, cfg Config, args []string) int {
	return notBuiltVerb(cfg, "admin price list")
}
func runPriceDelete(ctx context.Context, cfg Config, args []string) int {
	return notBuiltVerb(cfg, "admin price delete")
}

func notBuiltVerb(cfg Config, verb string) int {
	fmt.Fprintf(cfg.Stderr, "rota %s: not built yet\n", verb)
	return 1
}
