package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
)

const requestUsage = `rota request quota|queue|reservation|list [flags]

Asks an operator or admin for what only they may grant. The request waits up to 72 hours
for a decision (a reservation, until its start); an approved one applies at once and
undoes itself at its end.
  rota request quota --team T --gpu-model M --limit N [--for 7d] --reason TEXT
      raise team T's limit for GPU model M (* for any) to N GPUs, for --for from approval
  rota request queue NAME [--for 24h] --reason TEXT
      submit to the restricted queue NAME, for --for from approval
  rota request reservation --gpus N [--gpu-model M] [--pool P] [--team T] --start TIME --end TIME --reason TEXT
      hold N GPUs of model M in pool P (any, without them) for your team from --start to
      --end; granted as a reservation by GPU count, which the scheduler keeps free for
      the team on whichever nodes, and which ends by itself at --end
  rota request list [--state S]
      your requests, and what became of them
TIME is as for rota admin reserve: RFC 3339, "2026-12-01 09:00" (local), or +2h; --end may
be a duration after --start. The request's ID is printed on the last line.`

const adminRequestsUsage = `rota admin requests [--state S]
rota admin requests approve ID [--note TEXT]
rota admin requests deny ID --note TEXT

Lists the requests (all of them, for operators and admins), approves one (which applies
it at once) or denies one (the note tells the asker why). Nobody decides their own request.`

func runRequest(ctx context.Context, cfg Config, args []string) int {
	if len(args) == 0 {
		fmt.Fprintf(cfg.Stderr, "usage: %s\n", requestUsage)
		return ExitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprintf(cfg.Stderr, "usage: %s\n", requestUsage)
		return ExitOK
	case "list":
		return runRequestList(ctx, cfg, args[1:], "request list")
	case "quota", "queue", "reservation":
	default:
		return cfg.usageError("request", "unknown kind %q: use quota, queue, reservation or list", args[0])
	}
	kind := api.RequestKind(args[0])
	cmd := "request " + args[0]
	fs, g := newFlagSet(cfg, cmd, requestUsage)
	team := fs.String("team", "", "the `team` it is for (default: yours)")
	model := fs.String("gpu-model", "", "GPU `model` (* for any, for a quota)")
	limit := fs.Int("limit", 0, "the quota limit asked, in `GPUs`")
	gpus := fs.Int("gpus", 0, "number of `GPUs` to reserve")
	pool := fs.String("pool", "", "`pool` of the GPUs to reserve (default any)")
	forSpan := fs.String("for", "", "how long a quota raise or queue grant lasts from approval, a `DURATION` (7d, 24h)")
	start := fs.String("start", "", "when the reservation begins, a `TIME`")
	end := fs.String("end", "", "when it ends, a `TIME` or a DURATION after --start")
	reason := fs.String("reason", "", "why you need it, for whoever decides (required)")
	pos, code, ok := parseFlags(fs, g, args[1:])
	if !ok {
		return code
	}
	req := api.Request{Kind: kind, Team: *team, GPUModel: *model, Pool: *pool, Reason: strings.TrimSpace(*reason)}
	if err := buildRequest(&req, pos, *limit, *gpus, *forSpan, *start, *end, cfg.Now(), cfg.location()); err != nil {
		return cfg.usageError(cmd, "%v", err)
	}
	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	req, err = c.CreateRequest(ctx, req)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	if g.output == "json" {
		return cfg.printJSON(req)
	}
	fmt.Fprintf(cfg.Stdout, "Request %d filed: %s. It expires at %s unless an operator or admin decides it.\n",
		req.ID, describeAsk(req), formatTime(&req.Expires, cfg.location()))
	fmt.Fprintln(cfg.Stdout, req.ID)
	return ExitOK
}

// buildRequest checks the flags of one kind of request and fills req in.
func buildRequest(req *api.Request, pos []string, limit, gpus int, forSpan, start, end string, now time.Time, loc *time.Location) error {
	if req.Reason == "" {
		return errors.New("--reason is required: say why you need it, for whoever decides")
	}
	want := 0
	if req.Kind == api.RequestQueue {
		want = 1
	}
	if len(pos) != want {
		if want == 1 {
			return errors.New("name one queue: rota request queue NAME --reason TEXT")
		}
		return fmt.Errorf("unexpected argument %q", pos[0])
	}
	if req.Pool != "" && req.Kind != api.RequestReservation {
		return errors.New("--pool is for a reservation")
	}
	if forSpan != "" {
		if req.Kind == api.RequestReservation {
			return errors.New("--for is for a quota or a queue; a reservation takes --start and --end")
		}
		d, err := parseSpan(forSpan)
		if err != nil {
			return fmt.Errorf("--for: %w", err)
		}
		req.For = int64(d / time.Second)
	}
	switch req.Kind {
	case api.RequestQuota:
		switch {
		case req.Team == "":
			return errors.New("--team is required")
		case req.GPUModel == "":
			return errors.New("--gpu-model is required: a GPU model, or * for any")
		case limit < 1:
			return fmt.Errorf("--limit must be 1 or more, got %d", limit)
		}
		req.Limit = limit
	case api.RequestQueue:
		req.Queue = pos[0]
	case api.RequestReservation:
		if gpus < 1 {
			return fmt.Errorf("--gpus must be 1 or more, got %d", gpus)
		}
		if start == "" || end == "" {
			return errors.New("--start and --end are required")
		}
		from, err := parseWhen(start, now, loc)
		if err != nil {
			return fmt.Errorf("--start: %w", err)
		}
		to, err := parseEnd(end, from, now, loc)
		if err != nil {
			return fmt.Errorf("--end: %w", err)
		}
		if !to.After(from) {
			return fmt.Errorf("--end %s is not after --start %s", formatTime(&to, loc), formatTime(&from, loc))
		}
		req.GPUs, req.Start, req.End = gpus, &from, &to
	}
	return nil
}

// describeAsk says in a few words what r asks for, and for how long.
func describeAsk(r api.Request) string {
	if r.Kind == api.RequestQuota || r.Kind == api.RequestQueue {
		return r.Describe() + " for " + formatSpan(time.Duration(r.For)*time.Second)
	}
	return r.Describe()
}

func runRequestList(ctx context.Context, cfg Config, args []string, cmd string) int {
	var state *string
	return runList(ctx, cfg, args, cmd, adminRequestsUsage,
		func(fs *flag.FlagSet) {
			state = fs.String("state", "", "only requests in this `state`: pending, approved, denied, expired or ended")
		},
		func(ctx context.Context, c *Client) (api.RequestList, error) {
			list, err := c.Requests(ctx, *state)
			list.Requests = orEmpty(list.Requests)
			return list, err
		},
		cfg.printRequests)
}

func (cfg Config) printRequests(ctx context.Context, list api.RequestList) int {
	loc := cfg.location()
	tw := newTable(cfg.Stdout)
	fmt.Fprintln(tw, "ID\tSTATE\tUSER\tASKS\tUNTIL\tDECIDED BY\tREASON")
	for _, r := range list.Requests {
		until := &r.Expires // pending: when it expires
		if r.State != api.RequestPending {
			until = r.End
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.State, r.User, describeAsk(r),
			formatTime(until, loc), orDash(r.DecidedBy), truncate(r.Reason, 40))
	}
	if err := tw.Flush(); err != nil {
		return cfg.fail(ctx, err)
	}
	return ExitOK
}

func runAdminRequests(ctx context.Context, cfg Config, args []string) int {
	return runRequestList(ctx, cfg, args, "admin requests")
}

func runAdminRequestsApprove(ctx context.Context, cfg Config, args []string) int {
	return runDecide(ctx, cfg, args, true)
}

func runAdminRequestsDeny(ctx context.Context, cfg Config, args []string) int {
	return runDecide(ctx, cfg, args, false)
}

func runDecide(ctx context.Context, cfg Config, args []string, approve bool) int {
	cmd := "admin requests deny"
	if approve {
		cmd = "admin requests approve"
	}
	fs, g := newFlagSet(cfg, cmd, adminRequestsUsage)
	note := fs.String("note", "", "a `note` for the asker (required to deny)")
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		return cfg.usageError(cmd, "name one request ID")
	}
	id, err := strconv.ParseInt(pos[0], 10, 64)
	if err != nil || id <= 0 {
		return cfg.usageError(cmd, "invalid request ID %q: want a positive number", pos[0])
	}
	if !approve && strings.TrimSpace(*note) == "" {
		return cfg.usageError(cmd, "--note is required to deny: tell the asker why")
	}
	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	r, err := c.DecideRequest(ctx, id, approve, *note)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	if g.output == "json" {
		return cfg.printJSON(r)
	}
	verb := "Denied"
	if approve {
		verb = "Approved"
	}
	fmt.Fprintf(cfg.Stdout, "%s request %d of %s: %s", verb, r.ID, r.User, describeAsk(r))
	if r.Message != "" {
		fmt.Fprintf(cfg.Stdout, " (%s)", r.Message)
	}
	fmt.Fprintln(cfg.Stdout)
	return ExitOK
}

// CreateRequest files a request; the server answers with its ID and expiry.
func (c *Client) CreateRequest(ctx context.Context, r api.Request) (api.Request, error) {
	var out api.Request
	err := c.do(ctx, http.MethodPost, "/api/v1/requests", nil, r, &out)
	return out, err
}

// Requests lists the requests the caller may see, of one state if state is not "".
func (c *Client) Requests(ctx context.Context, state string) (api.RequestList, error) {
	var q url.Values
	if state != "" {
		q = url.Values{"state": {state}}
	}
	var list api.RequestList
	err := c.do(ctx, http.MethodGet, "/api/v1/requests", q, nil, &list)
	return list, err
}

// DecideRequest approves or denies a request.
func (c *Client) DecideRequest(ctx context.Context, id int64, approve bool, note string) (api.Request, error) {
	path := "/api/v1/requests/" + strconv.FormatInt(id, 10) + "/deny"
	if approve {
		path = "/api/v1/requests/" + strconv.FormatInt(id, 10) + "/approve"
	}
	var out api.Request
	err := c.do(ctx, http.MethodPost, path, nil, api.Decision{Note: note}, &out)
	return out, err
}

// formatSpan writes a grant's length as --for takes it: 7d, 36h, 90m.
func formatSpan(d time.Duration) string {
	switch {
	case d > 0 && d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d > 0 && d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d > 0 && d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	}
	return d.String()
}
