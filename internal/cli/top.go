package cli

import "context"

// rota top (issue 10): placeholder.

func runTop(ctx context.Context, cfg Config, args []string) int { return notBuiltVerb(cfg, "top") }
