package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/report"
)

// rota usage, rota usage report and rota admin price: where the GPU-hours went, what they
// cost, and the monthly review pack. The server computes the figures (GET /api/v1/usage);
// internal/report prints them and writes the pack.

const usageHelp = `rota usage [--by team|project|user|queue|gpu-model|node|day|hour-of-week] [--since T] [--until T] [-o table|json|csv]
       rota usage report --month YYYY-MM --out DIR

GPU-hours allocated and effective (allocated × measured utilisation), utilisation, jobs,
success rate, wait p50/p95, failures by category, preemptions with the GPU-hours they
lost since their last checkpoint, idle holding and cost, by group, with a total line.
--by hour-of-week and day also show capacity and what of it nobody held: nights and
weekends. --by project gives one row per team and project ("vision/det"), and one for
each team's jobs that name no project ("vision/(none)"). Running jobs count up to now.
Days and hours are UTC.
  --since and --until take RFC 3339 times (2026-11-01T00:00:00Z), dates (2026-11-01,
  midnight UTC) or a duration back from now (90m, 12h, 7d); by default the window is the
  30 days up to now, and at most 400 days.
-o json prints an api.UsageReport; -o csv one line per group and the total.

rota usage report writes the month's review pack into DIR: CSV files of resources (by GPU
model and node), tasks (by team, user and queue), governance (preemptions; for admins
also quota changes, preempt events and changes by kind from the audit trail) and
capacity (by hour of the week and day), and report.html, one page with the same tables
and charts that needs nothing else to open.`

func runUsage(ctx context.Context, cfg Config, args []string) int {
	if len(args) > 0 && args[0] == "report" {
		return runUsageReport(ctx, cfg, args[1:])
	}
	const cmd = "usage"
	fs, g := newFlagSet(cfg, cmd, usageHelp)
	by := fs.String("by", api.ByTeam, "group by `KEY`: "+strings.Join(api.UsageGroupings(), ", "))
	since := fs.String("since", "", "start of the window, a `TIME`, date or duration back from now (default: 30 days before --until)")
	until := fs.String("until", "", "end of the window, a `TIME`, date or duration back from now (default: now)")
	csv := csvOutput(fs, g)
	if code, ok := cfg.parseNoArgs(cmd, fs, g, args); !ok {
		return code
	}
	if !slices.Contains(api.UsageGroupings(), *by) {
		return cfg.usageError(cmd, "--by: unknown grouping %q: want one of %s", *by, strings.Join(api.UsageGroupings(), ", "))
	}
	w, err := cfg.parseWindow(*since, *until)
	if err != nil {
		return cfg.usageError(cmd, "%v", err)
	}
	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	rep, err := c.Usage(ctx, *by, w.since, w.until)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	switch {
	case *csv:
		err = report.WriteCSV(cfg.Stdout, rep)
	case g.output == "json":
		err = report.WriteJSON(cfg.Stdout, rep)
	default:
		err = report.WriteTable(cfg.Stdout, rep)
	}
	if err != nil {
		return cfg.fail(ctx, err)
	}
	return ExitOK
}

// window is a report's bounds as the flags gave them; a zero bound is the server's default.
type window struct{ since, until time.Time }

// parseWindow reads --since and --until: RFC 3339, a date, or a duration back from now.
func (cfg Config) parseWindow(since, until string) (window, error) {
	var w window
	now := cfg.Now()
	for _, f := range []struct {
		flag, value string
		dst         *time.Time
	}{{"--since", since, &w.since}, {"--until", until, &w.until}} {
		if f.value == "" {
			continue
		}
		t, err := report.ParseTime(f.value)
		if err != nil {
			if t, err = parseAgo(f.value, now); err != nil {
				return w, fmt.Errorf("%s: %q is not a time: want RFC 3339 (2026-11-01T00:00:00Z), a date (2026-11-01) or a duration back from now (7d)", f.flag, f.value)
			}
		}
		*f.dst = t
	}
	end := w.until
	if end.IsZero() {
		end = now
	}
	if !w.since.IsZero() && !w.since.Before(end) {
		return w, fmt.Errorf("--until (%s) is not after --since (%s)", end.UTC().Format(time.RFC3339), w.since.UTC().Format(time.RFC3339))
	}
	if !w.since.IsZero() && end.Sub(w.since) > report.MaxWindow {
		return w, fmt.Errorf("--since: the window is %.0f days; at most %.0f are allowed", end.Sub(w.since).Hours()/24, report.MaxWindow.Hours()/24)
	}
	return w, nil
}

// csvOutput lets -o (and --output) take csv besides the table and json every verb takes.
// The global flags' check knows only those two, so csv is noted here and the global
// flag is left at table. It returns whether csv was asked for.
func csvOutput(fs *flag.FlagSet, g *globalFlags) *bool {
	f := &outputFlag{g: g, csv: new(bool)}
	for _, name := range []string{"o", "output"} {
		fs.Lookup(name).Value = f
		fs.Lookup(name).Usage = "output `format`: table, json or csv"
	}
	return f.csv
}

// outputFlag is the -o of a verb that also writes CSV.
type outputFlag struct {
	g   *globalFlags
	csv *bool
}

func (o *outputFlag) String() string {
	switch {
	case o == nil || o.g == nil:
		return ""
	case *o.csv:
		return "csv"
	}
	return o.g.output
}

func (o *outputFlag) Set(v string) error {
	switch v {
	case "table", "json":
		o.g.output, *o.csv = v, false
	case "csv":
		o.g.output, *o.csv = "table", true
	default:
		return fmt.Errorf("unknown format %q: want table, json or csv", v)
	}
	return nil
}

const usageReportHelp = `rota usage report --month YYYY-MM --out DIR

Writes the month's review pack into DIR (created if needed) and lists the files written:
CSV files of resources, tasks, governance and capacity, and report.html, a page with the
same tables and charts that opens without a network. The governance part's audit counts,
quota changes and preempt events come from the audit trail, which only admins may read;
for others the pack says it was made without them.`

func runUsageReport(ctx context.Context, cfg Config, args []string) int {
	const cmd = "usage report"
	fs, g := newFlagSet(cfg, cmd, usageReportHelp)
	month := fs.String("month", "", "the `YYYY-MM` to report, in UTC (required)")
	out := fs.String("out", "", "the `DIR` to write the pack into (required)")
	if code, ok := cfg.parseNoArgs(cmd, fs, g, args); !ok {
		return code
	}
	since, err := time.Parse("2006-01", *month)
	switch {
	case *month == "":
		return cfg.usageError(cmd, "--month is required, e.g. --month %s", cfg.Now().UTC().Format("2006-01"))
	case err != nil:
		return cfg.usageError(cmd, "--month: %q is not a month: want YYYY-MM, e.g. 2026-11", *month)
	case *out == "":
		return cfg.usageError(cmd, "--out is required: the directory to write the pack into")
	case since.After(cfg.Now()):
		return cfg.usageError(cmd, "--month: %s has not begun", *month)
	}
	until := since.AddDate(0, 1, 0)
	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	p := report.Pack{Month: *month, Since: since, Until: until, Generated: cfg.Now().UTC(), Reports: map[string]api.UsageReport{}}
	for _, by := range api.PackGroupings() {
		if p.Reports[by], err = c.Usage(ctx, by, since, until); err != nil {
			return cfg.fail(ctx, err)
		}
	}
	if err := cfg.addAudit(ctx, c, &p); err != nil {
		return cfg.fail(ctx, err)
	}
	if err := report.WritePack(*out, p); err != nil {
		return cfg.fail(ctx, err)
	}
	for _, n := range p.Notes {
		fmt.Fprintln(cfg.Stderr, "note: "+n)
	}
	files := p.Files()
	if g.output == "json" {
		paths := make([]string, len(files))
		for i, f := range files {
			paths[i] = filepath.Join(*out, f)
		}
		return cfg.printJSON(map[string][]string{"files": paths})
	}
	for _, f := range files {
		fmt.Fprintln(cfg.Stdout, filepath.Join(*out, f))
	}
	return ExitOK
}

// addAudit adds the month's audit trail and preempt events to the pack. Only admins may
// read them: for anyone else the pack is made without, and a note says so.
func (cfg Config) addAudit(ctx context.Context, c *Client, p *report.Pack) error {
	opts := AuditOptions{Since: p.Since, Until: p.Until, Limit: auditPage}
	audit, err := allEvents(ctx, c, opts, 0)
	var apiErr *APIError
	if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusForbidden {
		p.Notes = append(p.Notes, "made without the audit trail (quota changes, preempt events, changes by kind): only admins may read it")
		return nil
	}
	if err != nil {
		return err
	}
	opts.Kind = api.EventPreempt
	pre, err := allEvents(ctx, c, opts, 0)
	if err != nil {
		return err
	}
	p.AuditKnown, p.Audit, p.Preemptions = true, audit, pre
	return nil
}

const priceSetHelp = `rota admin price set MODEL RATE [--currency USD]

Sets the price of one GPU-hour of MODEL (as nodes report it, e.g. H100; * for every model
without a price of its own) to RATE, a number from 0 to 1000000. rota usage shows the
cost of GPU-hours where a price is set. Every price is in one currency.`

func runPriceSet(ctx context.Context, cfg Config, args []string) int {
	const cmd = "admin price set"
	fs, g := newFlagSet(cfg, cmd, priceSetHelp)
	currency := fs.String("currency", "USD", "the `CODE` the rate is in, up to 8 letters")
	pos, code, ok := parseFlags(fs, g, args)
	if !ok {
		return code
	}
	if len(pos) != 2 {
		return cfg.usageError(cmd, "want MODEL and RATE, got %d arguments", len(pos))
	}
	model := strings.TrimSpace(pos[0])
	if model == "" {
		return cfg.usageError(cmd, "the MODEL is empty: give a GPU model such as H100, or *")
	}
	rate, err := strconv.ParseFloat(pos[1], 64)
	if err != nil || math.IsNaN(rate) || rate < 0 || rate > 1e6 {
		return cfg.usageError(cmd, "RATE: %q is not a price: want a number from 0 to 1000000, such as 2.50", pos[1])
	}
	c, err := cfg.client(g)
	if err != nil {
		return cfg.fail(ctx, err)
	}
	p, err := c.SetPrice(ctx, api.Price{Model: model, PerGPUHour: rate, Currency: *currency})
	if err != nil {
		return cfg.fail(ctx, err)
	}
	if g.output == "json" {
		return cfg.printJSON(p)
	}
	fmt.Fprintf(cfg.Stdout, "A %s GPU-hour costs %s %s\n", p.Model, strconv.FormatFloat(p.PerGPUHour, 'f', -1, 64), p.Currency)
	return ExitOK
}

const priceListHelp = `rota admin price list

Lists the price of a GPU-hour by model; * prices the models without their own.
-o json prints an api.PriceList.`

func runPriceList(ctx context.Context, cfg Config, args []string) int {
	return runList(ctx, cfg, args, "admin price list", priceListHelp, nil,
		func(ctx context.Context, c *Client) (api.PriceList, error) {
			list, err := c.Prices(ctx)
			list.Prices = orEmpty(list.Prices)
			return list, err
		},
		func(ctx context.Context, l api.PriceList) int {
			if len(l.Prices) == 0 {
				fmt.Fprintln(cfg.Stdout, "No prices are set: rota admin price set MODEL RATE sets one.")
				return ExitOK
			}
			tw := newTable(cfg.Stdout)
			fmt.Fprintln(tw, "MODEL\tPER GPU-HOUR\tCURRENCY")
			for _, p := range l.Prices {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Model, strconv.FormatFloat(p.PerGPUHour, 'f', 2, 64), orDash(p.Currency))
			}
			if err := tw.Flush(); err != nil {
				return cfg.fail(ctx, err)
			}
			return ExitOK
		})
}

const priceDeleteHelp = `rota admin price delete MODEL

Removes the price of MODEL; its GPU-hours then have no cost (or the * price, if set).`

func runPriceDelete(ctx context.Context, cfg Config, args []string) int {
	return runDelete(ctx, cfg, args, deleteCommand{cmd: "admin price delete", usage: priceDeleteHelp,
		arg: "model", done: "Removed the price of", del: (*Client).DeletePrice})
}

// Usage returns the usage report grouped by by over [since, until); a zero bound is the
// server's default (until now, since 30 days before until).
func (c *Client) Usage(ctx context.Context, by string, since, until time.Time) (api.UsageReport, error) {
	q := url.Values{"by": {by}}
	for k, t := range map[string]time.Time{"since": since, "until": until} {
		if !t.IsZero() {
			q.Set(k, t.UTC().Format(time.RFC3339))
		}
	}
	var rep api.UsageReport
	err := c.do(ctx, http.MethodGet, "/api/v1/usage", q, nil, &rep)
	return rep, err
}

// Prices lists the prices per GPU-hour by model.
func (c *Client) Prices(ctx context.Context) (api.PriceList, error) {
	var list api.PriceList
	err := c.do(ctx, http.MethodGet, "/api/v1/prices", nil, nil, &list)
	return list, err
}

// SetPrice sets the price of p.Model and returns it as stored.
func (c *Client) SetPrice(ctx context.Context, p api.Price) (api.Price, error) {
	var out api.Price
	err := c.do(ctx, http.MethodPut, namePath("/api/v1/prices/", p.Model), nil, p, &out)
	return out, err
}

// DeletePrice removes the price of a model.
func (c *Client) DeletePrice(ctx context.Context, model string) error {
	return c.do(ctx, http.MethodDelete, namePath("/api/v1/prices/", model), nil, nil, nil)
}
