// Command rota is the whole of rota in one binary: the control plane (server), the node agent,
// both at once on one machine (up), the client verbs, and the trace simulator.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/rotahq/rota/internal/cli"
)

const usage = `rota: a GPU cluster scheduler

Start:
  rota up       [--data-dir DIR] [--listen ADDR] [--fake-gpus N[xMODEL]]   server and agent on this machine
  rota server   --data-dir DIR --listen ADDR [--store URL]                  the control plane
  rota agent    --server URL --name NODE [--labels k=v,…] [--fake-gpus N[xMODEL]]

Use:
  rota submit   [--gpus N] [--gpu-model M] [--cpus N] [--mem SIZE] [--time DURATION] [--queue Q] -- CMD ARGS…
  rota queue    list pending and running jobs
  rota show     JOB
  rota cancel   JOB…
  rota logs     [-f] JOB
  rota nodes    list nodes and their GPUs

Every client verb takes --server URL (default $ROTA_SERVER, else http://127.0.0.1:7070) and -o json.
Run 'rota VERB -h' for a verb's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	verb, rest := args[0], args[1:]
	switch verb {
	case "up":
		return runUp(ctx, rest, stderr)
	case "server":
		return runServer(ctx, rest, stderr)
	case "agent":
		return runAgent(ctx, rest, stderr)
	case "submit", "queue", "show", "cancel", "logs", "nodes":
		return cli.Main(ctx, verb, rest, stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "rota: unknown command %q\n\n%s", verb, usage)
	return 2
}
