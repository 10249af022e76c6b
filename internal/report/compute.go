package report

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// MaxWindow is the longest report window: a year and a month of margin. Longer windows
// are refused rather than paged: a report's rows are its groups, not its records.
const MaxWindow = 400 * 24 * time.Hour

// Query asks for one report: the attempts' use inside [Since, Until), grouped By.
type Query struct {
	By           string
	Since, Until time.Time
}

// QueryError is a query the report cannot answer; Param names the parameter at fault.
type QueryError struct {
	Param   string
	Message string
}

func (e *QueryError) Error() string { return e.Param + ": " + e.Message }

// Check reports what is wrong with q, naming the parameter and what is allowed.
func (q Query) Check() error {
	if !slices.Contains(api.UsageGroupings(), q.By) {
		return &QueryError{"by", fmt.Sprintf("unknown grouping %q: want one of %s", q.By, strings.Join(api.UsageGroupings(), ", "))}
	}
	if q.Since.IsZero() || q.Until.IsZero() {
		return &QueryError{"since", "the window needs both since and until"}
	}
	if !q.Since.Before(q.Until) {
		return &QueryError{"until", fmt.Sprintf("must be after since (%s), got %s", q.Since.UTC().Format(time.RFC3339), q.Until.UTC().Format(time.RFC3339))}
	}
	if d := q.Until.Sub(q.Since); d > MaxWindow {
		return &QueryError{"since", fmt.Sprintf("the window is %.0f days; at most %d days are allowed: ask for shorter windows", d.Hours()/24, int(MaxWindow.Hours()/24))}
	}
	return nil
}

// ParseTime reads a report bound: an RFC 3339 time, or a date YYYY-MM-DD meaning its
// midnight in UTC.
func ParseTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is not a time: want RFC 3339 (2026-11-01T00:00:00Z) or a date (2026-11-01, midnight UTC)", s)
}

// Compute reports the use of the attempts of in inside q's window, grouped by q.By.
//
// How each figure is split (api.UsageRow says what each means):
//   - GPU time (allocated, measured, effective, idle, cost) is clipped to the window,
//     split by the ranks of an attempt for node and gpu-model, and by the UTC day or
//     hour of week its seconds fall in for day and hour-of-week. Each second lands in
//     exactly one row, so these add up: the total is the sum of the rows.
//   - What happens at an instant lands in the group of that instant and of the
//     attempt's first rank: a wait at its assignment, an end (success, failure,
//     preemption and its whole waste) at its end, if the instant is in the window. The
//     counts add up too; waits are percentiles, over the group's attempts.
//   - Jobs and attempts count once per group they touch: a job that ran across
//     midnight counts in both days, and once in the total. For team, user and queue
//     they add up; for the other groupings the rows may sum to more than the total.
//   - Capacity is the GPUs of the nodes known now, lost ones excepted, over the part of
//     the window (or bucket) before Now. Rows carry it for node, gpu-model, day and
//     hour-of-week, the total for every grouping.
func Compute(in Input, q Query) (api.UsageReport, error) {
	if err := q.Check(); err != nil {
		return api.UsageReport{}, err
	}
	q.Since, q.Until = q.Since.UTC(), q.Until.UTC()
	c := newComputation(in, q)
	records := Account(in)
	for i := range records {
		c.add(&records[i])
	}
	c.deadlines(records)
	return c.report(records), nil
}

// deadlines counts the jobs whose deadline fell due in the window and is decided, met or
// missed, in the group of that instant and of the job's last attempt's first rank (team,
// user and queue need no attempt; a job that never started counts under "unknown" node
// and model).
func (c *computation) deadlines(records []AttemptUsage) {
	last := map[int64]*AttemptUsage{}
	for i := range records {
		if a := &records[i]; last[a.JobID] == nil || a.N > last[a.JobID].N {
			last[a.JobID] = a
		}
	}
	for i := range c.in.Jobs {
		j := &c.in.Jobs[i]
		if j.Spec.Deadline == nil || j.DeadlineResult == "" || !c.inWindow(*j.Spec.Deadline) {
			continue
		}
		a := last[j.ID]
		if a == nil {
			a = &AttemptUsage{JobID: j.ID, Team: j.Spec.Team, User: j.Spec.User, Queue: j.Spec.Queue}
		}
		first := Rank{Node: "unknown", Model: "unknown"}
		if len(a.Ranks) > 0 {
			first = a.Ranks[0]
		}
		for _, g := range []*group{c.total, c.row(c.g.key(a, first, *j.Spec.Deadline))} {
			if j.DeadlineResult == api.DeadlineMet {
				g.deadlinesMet++
			} else {
				g.deadlinesMissed++
			}
		}
	}
}

// computation accumulates the rows of one report and its total.
type computation struct {
	in     Input
	q      Query
	g      grouping
	rows   map[string]*group
	total  *group
	prices prices
	// capacity is the GPUs of each counted node; capEnd ends the part of the window
	// capacity is counted in (the window up to Now).
	capacity map[string]int
	capEnd   time.Time
	// howCap and modelCap cache the capacity of hours of the week and of models.
	howCap   map[string]float64
	modelCap map[string]int
}

func newComputation(in Input, q Query) *computation {
	c := &computation{in: in, q: q, g: groupings[q.By], rows: map[string]*group{}, total: newGroup(),
		prices: newPrices(in.Prices), capacity: map[string]int{}}
	for _, n := range in.Nodes {
		if n.State != api.NodeLost && len(n.GPUs) > 0 {
			c.capacity[n.Name] = len(n.GPUs)
		}
	}
	c.capEnd = q.Until
	if in.Now.Before(c.capEnd) {
		c.capEnd = in.Now
	}
	return c
}

// group is one row being accumulated, in GPU-seconds.
type group struct {
	jobs     map[int64]bool
	attempts map[attemptKey]bool
	waits    []float64
	failures map[string]int

	allocated, measured, effective, idle, waste float64
	// counted is the allocated GPU time on the nodes capacity counts.
	counted   float64
	cost      float64
	priced    bool
	succeeded int
	failed    int
	preempts  int
	// deadlinesMet and deadlinesMissed count decided deadlines that fell due here.
	deadlinesMet, deadlinesMissed int
}

func newGroup() *group {
	return &group{jobs: map[int64]bool{}, attempts: map[attemptKey]bool{}, failures: map[string]int{}}
}

func (c *computation) row(key string) *group {
	g := c.rows[key]
	if g == nil {
		g = newGroup()
		c.rows[key] = g
	}
	return g
}

// touch notes that the attempt has a share in the group.
func (g *group) touch(a *AttemptUsage) {
	g.jobs[a.JobID] = true
	g.attempts[attemptKey{a.JobID, a.N}] = true
}

// add accounts one attempt's share of the window to its rows and the total.
func (c *computation) add(a *AttemptUsage) {
	if a.End.Before(c.q.Since) || !a.Assign.Before(c.q.Until) {
		return
	}
	from, to := clip(a.Assign, a.End, c.q.Since, c.q.Until)
	var idleFrom, idleTo time.Time
	if a.IdleFrom != nil {
		idleFrom, idleTo = clip(*a.IdleFrom, a.End, c.q.Since, c.q.Until)
	}
	for _, r := range a.Ranks {
		c.spread(a, r, from, to, func(g *group, sec float64) {
			gs := float64(r.GPUs) * sec
			g.allocated += gs
			if _, ok := c.capacity[r.Node]; ok {
				g.counted += gs
			}
			if r.UtilPct != nil {
				g.measured += gs
				g.effective += gs * *r.UtilPct / 100
			}
			if price, ok := c.prices.of(r.Model); ok {
				g.cost += gs / 3600 * price
				g.priced = true
			}
		})
		if idleTo.After(idleFrom) {
			c.spread(a, r, idleFrom, idleTo, func(g *group, sec float64) { g.idle += float64(r.GPUs) * sec })
		}
	}
	c.instants(a)
}

// spread adds a rank's share of [from, to) to the groups its seconds fall in, and to the
// total.
func (c *computation) spread(a *AttemptUsage, r Rank, from, to time.Time, add func(*group, float64)) {
	if !to.After(from) {
		return
	}
	add(c.total, to.Sub(from).Seconds())
	c.total.touch(a)
	c.g.spread(a, r, from, to, func(key string, sec float64) {
		g := c.row(key)
		add(g, sec)
		g.touch(a)
	})
}

// instants adds what happened to the attempt at one moment: its wait at its assignment,
// its end. Each lands in the group of that moment and of the attempt's first rank.
func (c *computation) instants(a *AttemptUsage) {
	first := Rank{Node: "unknown", Model: "unknown"}
	if len(a.Ranks) > 0 {
		first = a.Ranks[0]
	}
	if c.inWindow(a.Assign) {
		for _, g := range []*group{c.total, c.row(c.g.key(a, first, a.Assign))} {
			g.waits = append(g.waits, a.WaitSeconds)
			g.touch(a)
		}
	}
	if a.Running || !c.inWindow(a.End) {
		return
	}
	for _, g := range []*group{c.total, c.row(c.g.key(a, first, a.End))} {
		g.touch(a)
		if a.Category == "" {
			g.succeeded++
			continue
		}
		g.failed++
		g.failures[a.Category]++
		if a.Preempted {
			g.preempts++
		}
	}
	if !a.Preempted {
		return
	}
	// The waste of a preemption is GPU time: per rank, so node and model rows add up.
	lost := 0.0
	if a.GPUs > 0 {
		lost = a.WasteGPUSeconds / float64(a.GPUs)
	}
	for _, r := range a.Ranks {
		c.row(c.g.key(a, r, a.End)).waste += float64(r.GPUs) * lost
	}
	c.total.waste += a.WasteGPUSeconds
}

func (c *computation) inWindow(t time.Time) bool {
	return !t.Before(c.q.Since) && t.Before(c.q.Until)
}

// clip returns [from, to) ∩ [since, until); from ≥ to when they do not meet.
func clip(from, to, since, until time.Time) (time.Time, time.Time) {
	if from.Before(since) {
		from = since
	}
	if to.After(until) {
		to = until
	}
	return from, to
}

// report turns the accumulated groups into the answer.
func (c *computation) report(records []AttemptUsage) api.UsageReport {
	c.addCapacityRows()
	rep := api.UsageReport{By: c.q.By, Since: c.q.Since, Until: c.q.Until, Rows: []api.UsageRow{}, Currency: c.prices.currency}
	keys := make([]string, 0, len(c.rows))
	for k := range c.rows {
		keys = append(keys, k)
	}
	c.g.sort(keys)
	rowCaps := c.g.capacity != nil
	var idleCapSum float64
	for _, k := range keys {
		row := c.rows[k].row(k)
		if rowCaps {
			capHours := c.g.capacity(c, k)
			row.CapacityGPUHours = round6(capHours)
			row.IdleCapacityGPUHours = round6(max(0, capHours-c.rows[k].counted/3600))
			idleCapSum += row.IdleCapacityGPUHours
		}
		rep.Rows = append(rep.Rows, row)
	}
	rep.Total = c.total.row("total")
	capHours := float64(c.gpus()) * hoursBetween(c.q.Since, c.capEnd)
	rep.Total.CapacityGPUHours = round6(capHours)
	rep.Total.IdleCapacityGPUHours = round6(max(0, capHours-c.total.counted/3600))
	if rowCaps {
		rep.Total.IdleCapacityGPUHours = round6(idleCapSum)
	}
	rep.Notes = c.notes(records)
	return rep
}

// addCapacityRows makes sure every group that has capacity has a row, so that idle
// nodes, nights and weekends show even when nobody used them.
func (c *computation) addCapacityRows() {
	if c.g.allKeys != nil {
		for _, k := range c.g.allKeys(c) {
			c.row(k)
		}
	}
}

// gpus counts the GPUs capacity counts.
func (c *computation) gpus() int {
	n := 0
	for _, g := range c.capacity {
		n += g
	}
	return n
}

// row is the group's figures, in hours, under key.
func (g *group) row(key string) api.UsageRow {
	r := api.UsageRow{Key: key, Jobs: len(g.jobs), Attempts: len(g.attempts),
		GPUHours: round6(g.allocated / 3600), EffectiveGPUHours: round6(g.effective / 3600), MeasuredGPUHours: round6(g.measured / 3600),
		IdleGPUHours: round6(g.idle / 3600), Succeeded: g.succeeded, Failed: g.failed, Preemptions: g.preempts,
		PreemptionWasteGPUHours: round6(g.waste / 3600), DeadlinesMet: g.deadlinesMet, DeadlinesMissed: g.deadlinesMissed}
	if g.measured > 0 {
		u := round6(g.effective / g.measured * 100)
		r.UtilizationPct = &u
	}
	if ended := g.succeeded + g.failed; ended > 0 {
		s := round6(float64(g.succeeded) / float64(ended))
		r.SuccessRate = &s
	}
	if len(g.failures) > 0 {
		r.Failures = g.failures
	}
	r.Assigned = len(g.waits)
	if len(g.waits) > 0 {
		r.WaitP50Seconds, r.WaitP95Seconds = percentile(g.waits, 50), percentile(g.waits, 95)
	}
	if g.priced {
		cost := round6(g.cost)
		r.Cost = &cost
	}
	return r
}

// percentile is the nearest-rank percentile: the smallest value with at least p% of
// the values at or below it. It sorts vs.
func percentile(vs []float64, p float64) float64 {
	sort.Float64s(vs)
	i := int(math.Ceil(p/100*float64(len(vs)))) - 1
	return vs[max(0, min(i, len(vs)-1))]
}

// round6 rounds to a millionth: GPU-hours to the 3.6 ms, which no one needs finer.
func round6(v float64) float64 { return math.Round(v*1e6) / 1e6 }

func hoursBetween(from, to time.Time) float64 {
	if !to.After(from) {
		return 0
	}
	return to.Sub(from).Hours()
}

// notes say what the figures cannot know.
func (c *computation) notes(records []AttemptUsage) []string {
	var notes []string
	t := c.total
	if t.allocated > 0 && t.measured < t.allocated {
		if t.measured == 0 {
			notes = append(notes, "no attempt in the window has telemetry: effective GPU-hours and utilisation are unknown")
		} else {
			notes = append(notes, fmt.Sprintf("telemetry covers %.1f of %.1f GPU-hours (%.0f%%): effective GPU-hours and utilisation are of that part only",
				t.measured/3600, t.allocated/3600, t.measured/t.allocated*100))
		}
	}
	running := 0
	for i := range records {
		if records[i].Running && records[i].Assign.Before(c.q.Until) {
			running++
		}
	}
	if running > 0 {
		notes = append(notes, fmt.Sprintf("attempts still running (%d) count up to now, %s", running, c.in.Now.UTC().Format(time.RFC3339)))
	}
	if c.q.Until.After(c.in.Now) {
		notes = append(notes, "the window ends after now: nothing after now is counted, capacity included")
	}
	if t.idle > 0 || running > 0 {
		notes = append(notes, "idle holding is known only for each job's current or last attempt and its last idle spell: a lower bound")
	}
	if unpriced := c.unpricedModels(records); len(unpriced) > 0 && len(c.prices.byModel) > 0 {
		notes = append(notes, "no price is set for "+strings.Join(unpriced, ", ")+": their GPU-hours have no cost")
	}
	if c.prices.mixed {
		notes = append(notes, "prices are in more than one currency: costs add them as if they were one")
	}
	notes = append(notes, fmt.Sprintf("capacity is today's inventory: %s on %s (lost nodes excepted)", plural(c.gpus(), "GPU"), plural(len(c.capacity), "node")))
	switch c.q.By {
	case api.ByTeam, api.ByProject, api.ByUser, api.ByQueue:
	default:
		notes = append(notes, "a job or attempt in several rows counts once in the total")
	}
	return notes
}

// unpricedModels lists the models used in the window that have no price.
func (c *computation) unpricedModels(records []AttemptUsage) []string {
	var out []string
	for i := range records {
		a := &records[i]
		if a.End.Before(c.q.Since) || !a.Assign.Before(c.q.Until) {
			continue
		}
		for _, r := range a.Ranks {
			if _, ok := c.prices.of(r.Model); !ok && !slices.Contains(out, r.Model) {
				out = append(out, r.Model)
			}
		}
	}
	slices.Sort(out)
	return out
}

// plural is "1 node", "2 nodes".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// prices looks up the price of a GPU-hour by model.
type prices struct {
	byModel  map[string]float64
	currency string
	// mixed is set when the prices name more than one currency.
	mixed bool
}

func newPrices(list []api.Price) prices {
	p := prices{byModel: map[string]float64{}}
	for i, pr := range list {
		p.byModel[pr.Model] = pr.PerGPUHour
		if i == 0 {
			p.currency = pr.Currency
		} else if pr.Currency != p.currency {
			p.mixed = true
		}
	}
	if p.mixed {
		p.currency = ""
	}
	return p
}

// of is the model's price, else the "*" price.
func (p prices) of(model string) (float64, bool) {
	if v, ok := p.byModel[model]; ok {
		return v, true
	}
	v, ok := p.byModel["*"]
	return v, ok
}
