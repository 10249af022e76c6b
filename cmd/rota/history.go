package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rotahq/rota/internal/cli"
	"github.com/rotahq/rota/internal/sim"
)

// runHistory serves `rota history export`: the cluster's accounting records as a rota trace,
// so a team can replay its own last month with `rota sim --format rota`.
func runHistory(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "export" {
		fmt.Fprintln(stderr, "usage: rota history export [--since DURATION|TIME] [--until TIME] [--out FILE] [--cluster-out FILE] [--server URL] [--token TOKEN]")
		return 2
	}
	fs := newFlagSet("history export", stderr)
	var e cli.Endpoint
	fs.StringVar(&e.Server, "server", "", "server URL (default: as every client verb finds it)")
	fs.StringVar(&e.Token, "token", "", "API token (default $ROTA_TOKEN, else the saved login's)")
	fs.StringVar(&e.CAFingerprint, "ca-fingerprint", "", "pin an https server's CA, sha256:HEX")
	since := fs.String("since", "720h", "start of the window: a duration back from now (720h) or an RFC 3339 time")
	until := fs.String("until", "", "end of the window, RFC 3339 (default: now)")
	out := fs.String("out", "", "file to write (default: standard output)")
	clusterOut := fs.String("cluster-out", "", "also write the cluster (nodes, queues, teams) as a rota sim cluster file")
	if code := parseFlags(fs, args[1:]); code >= 0 {
		return code
	}
	start, err := parseSince(*since, time.Now())
	if err != nil {
		fmt.Fprintf(stderr, "rota history export: --since: %v\n", err)
		return 2
	}
	var end time.Time
	if *until != "" {
		if end, err = time.Parse(time.RFC3339, *until); err != nil {
			fmt.Fprintf(stderr, "rota history export: --until: want an RFC 3339 time such as 2026-11-01T00:00:00Z\n")
			return 2
		}
	}
	c, err := cli.NewClientFromEnv(e)
	if err != nil {
		fmt.Fprintf(stderr, "rota history export: %v\n", err)
		return 1
	}
	list, err := c.History(ctx, start, end)
	if err != nil {
		fmt.Fprintf(stderr, "rota: %v\n", err)
		return 1
	}
	recs := sim.RecordsFromHistory(list.Records)
	w := stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			fmt.Fprintf(stderr, "rota history export: %v\n", err)
			return 1
		}
		defer f.Close()
		w = f
	}
	if err := sim.WriteRotaTrace(w, recs); err != nil {
		fmt.Fprintf(stderr, "rota history export: %v\n", err)
		return 1
	}
	if *out != "" {
		fmt.Fprintf(stderr, "wrote %d jobs to %s\n", len(recs), *out)
	}
	if *clusterOut != "" {
		if err := exportCluster(ctx, c, *clusterOut); err != nil {
			fmt.Fprintf(stderr, "rota history export: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "wrote the cluster to %s\n", *clusterOut)
	}
	return 0
}

// exportCluster writes the live cluster as a rota sim cluster file, so the exported month
// can be replayed on it as it is, or on an edited copy ("what if we add 4 nodes?").
func exportCluster(ctx context.Context, c *cli.Client, path string) error {
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return err
	}
	queues, err := c.Queues(ctx)
	if err != nil {
		return err
	}
	teams, err := c.Teams(ctx)
	if err != nil {
		return err
	}
	data, err := sim.ClusterFile(nodes.Nodes, queues, teams.Teams)
	if err != nil {
		return err
	}
	return os.WriteFile(path, append([]byte("# Written by rota history export: the cluster as rota sim sees it. Edit freely.\n"), data...), 0o644)
}

func parseSince(v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither a duration (720h) nor an RFC 3339 time", v)
	}
	return t, nil
}
