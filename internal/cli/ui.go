package cli

import "context"

// rota ui (issue 10): placeholder.

func runUI(ctx context.Context, cfg Config, args []string) int { return notBuiltVerb(cfg, "ui") }
