// Command rota is the whole of rota in one binary: the control plane (server), the node agent,
// both at once on one machine (up), the client verbs, and the trace simulator.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/rotahq/rota/internal/agent"
	"github.com/rotahq/rota/internal/cli"
	"github.com/rotahq/rota/internal/sim"
	"github.com/rotahq/rota/internal/store"
)

const usageHead = `rota: a GPU cluster scheduler

Start:
  rota up       [--data-dir DIR] [--listen ADDR] [--fake-gpus N[xMODEL] | --fake-gpus-config FILE]   server and agent on this machine
  rota server   --data-dir DIR --listen ADDR [--tls] [--store URL] [--config FILE]  the control plane
  rota agent    --server https://HOST:PORT --join TOKEN [--name NODE] [--labels k=v,…] [--fake-gpus N[xMODEL] | --fake-gpus-config FILE]
                [--health-check CMD] [--kill-leftovers-after DURATION] [--container-runtime podman|docker|apptainer|none]

Use:
`

const usageTail = `
Replay and account:
  rota sim      --trace FILE --format philly|alibaba-gpu2023|rota [--cluster FILE] [--policy P,…]
  rota history  export [--since 720h] [--out FILE]   ended jobs as a rota trace for rota sim
  rota bench    [--suite sched,e2e,sim] [--quick] [-o table|json]   benchmarks to compare across commits

Every client verb takes -o json, and --server URL, --token and --ca-fingerprint. The server
is --server, else $ROTA_SERVER, else what 'rota login' saved, else the local socket of
'rota up' in $ROTA_DATA_DIR (default ~/.rota), where no token is needed, else
http://127.0.0.1:7070. The token is --token, else $ROTA_TOKEN, else the saved login.
Run 'rota VERB -h' for a verb's flags, 'rota help' for the topics: the job contract, the
spec format, exit codes.
`

func usage() string {
	var b strings.Builder
	b.WriteString(usageHead)
	for _, v := range cli.Verbs() {
		fmt.Fprintf(&b, "  rota %-9s %s\n", v.Name, v.Summary)
	}
	b.WriteString(usageTail)
	return b.String()
}

// ownVerbs are the verbs run here rather than by internal/cli, for `rota completion`.
var ownVerbs = []cli.Verb{{Name: "up"}, {Name: "server"}, {Name: "agent"}, {Name: "sim"}, {Name: "history"}, {Name: "bench"}}

// binary tells the client verbs what only this package knows: the store schema this
// binary migrates to (internal/cli may not import the store) and the verbs above.
func binary() cli.Binary {
	schema, err := store.SchemaVersion()
	if err != nil {
		// rota version then says "unknown"; store's tests keep the embedded migrations valid.
		schema = 0
	}
	return cli.Binary{StoreSchema: schema, OtherVerbs: ownVerbs, Store: storeTools{}}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	verb, rest := args[0], args[1:]
	for _, v := range cli.Verbs() {
		if v.Name == verb {
			return cli.Main(ctx, verb, rest, stdout, stderr, binary())
		}
	}
	switch verb {
	case "sim":
		return sim.Main(ctx, rest, stdout, stderr)
	case "history":
		return runHistory(ctx, rest, stdout, stderr)
	case "bench":
		return runBench(ctx, rest, stdout, stderr)
	case "up":
		return runUp(ctx, rest, stderr)
	case "server":
		return runServer(ctx, rest, stderr)
	case "agent":
		return runAgent(ctx, rest, stderr)
	case "supervise":
		// Not in the usage: the agent starts one per job attempt (see internal/agent).
		return agent.SuperviseMain(rest, stderr)
	case "-h", "--help":
		fmt.Fprint(stdout, usage())
		return 0
	}
	fmt.Fprintf(stderr, "rota: unknown command %q\n\n%s", verb, usage())
	return 2
}
