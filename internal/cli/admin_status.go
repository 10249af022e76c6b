package cli

import (
	"context"
	"fmt"
	"net/http"

	"github.com/rotahq/rota/internal/api"
)

const statusUsage = `rota admin status

Shows the cluster's servers: the store they share, the leader and its term, and every
server heard from recently, and what the server that answered finds wrong with itself
that needs an operator (its disk too full to take more job logs). Any server answers,
standbys included; with several, give them all (--server https://a:7070,https://b:7070).
-o json prints an api.ClusterStatus.`

// Status returns the cluster's servers, leader, term and store.
func (c *Client) Status(ctx context.Context) (api.ClusterStatus, error) {
	var st api.ClusterStatus
	err := c.do(ctx, http.MethodGet, "/api/v1/status", nil, nil, &st)
	return st, err
}

func runStatus(ctx context.Context, cfg Config, args []string) int {
	return runList(ctx, cfg, args, "admin status", statusUsage, nil,
		func(ctx context.Context, c *Client) (api.ClusterStatus, error) {
			st, err := c.Status(ctx)
			st.Replicas = orEmpty(st.Replicas)
			return st, err
		},
		cfg.printStatus)
}

func (cfg Config) printStatus(ctx context.Context, st api.ClusterStatus) int {
	loc := cfg.location()
	leader := st.LeaderURL
	switch {
	case !st.LeaderHeld && st.Term > 0:
		leader = "none: the last leader (" + st.LeaderURL + ") has lost its lease; a standby takes over within a few lease intervals"
	case !st.LeaderHeld:
		leader = "none yet"
	}
	fmt.Fprintf(cfg.Stdout, "Store:  %s\n", st.Store)
	if st.Lease {
		fmt.Fprintf(cfg.Stdout, "Leader: %s\n", leader)
		since := ""
		if st.LeaderSince != nil {
			since = " (since " + formatTime(st.LeaderSince, loc) + ")"
		}
		fmt.Fprintf(cfg.Stdout, "Term:   %d%s\n", st.Term, since)
	} else {
		fmt.Fprintf(cfg.Stdout, "Leader: %s (one server; no lease)\n", leader)
	}
	for _, p := range st.Problems {
		fmt.Fprintf(cfg.Stdout, "Problem: %s (said by %s)\n", p, st.Answered)
	}
	fmt.Fprintln(cfg.Stdout)
	tw := newTable(cfg.Stdout)
	fmt.Fprintln(tw, "REPLICA\tROLE\tHOST\tURL\tSTARTED\tLAST SEEN")
	for _, r := range st.Replicas {
		role := "standby"
		if r.Leader {
			role = "leader"
		}
		if r.ID == st.Answered {
			role += " (answered)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, role, orDash(r.Host), r.URL, formatTime(&r.Started, loc), formatTime(&r.Seen, loc))
	}
	if err := tw.Flush(); err != nil {
		return cfg.fail(ctx, err)
	}
	return ExitOK
}
