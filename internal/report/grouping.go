package report

import (
	"fmt"
	"slices"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// grouping says which row a share of an attempt lands in.
type grouping struct {
	// key names the row of a rank of an attempt at an instant.
	key func(a *AttemptUsage, r Rank, t time.Time) string
	// next is the end of the time bucket that holds t; nil for the groupings that do
	// not split by time.
	next func(t time.Time) time.Time
	// sort orders the row keys.
	sort func(keys []string)
	// allKeys, if set, lists the rows the report has even when nobody used them.
	allKeys func(c *computation) []string
	// capacity, if set, is a row's capacity in GPU-hours.
	capacity func(c *computation, key string) float64
}

// groupings by the by= value.
var groupings = map[string]grouping{
	api.ByTeam: byAttempt(func(a *AttemptUsage) string { return a.Team }),
	api.ByProject: byAttempt(func(a *AttemptUsage) string {
		if a.Project == "" {
			return a.Team + "/(none)"
		}
		return a.Team + "/" + a.Project
	}),
	api.ByUser:  byAttempt(func(a *AttemptUsage) string { return a.User }),
	api.ByQueue: byAttempt(func(a *AttemptUsage) string { return a.Queue }),
	api.ByNode: {
		key:  func(_ *AttemptUsage, r Rank, _ time.Time) string { return r.Node },
		sort: slices.Sort[[]string],
		allKeys: func(c *computation) []string {
			var keys []string
			for n := range c.capacity {
				keys = append(keys, n)
			}
			return keys
		},
		capacity: func(c *computation, key string) float64 {
			return float64(c.capacity[key]) * hoursBetween(c.q.Since, c.capEnd)
		},
	},
	api.ByGPUModel: {
		key:  func(_ *AttemptUsage, r Rank, _ time.Time) string { return r.Model },
		sort: slices.Sort[[]string],
		allKeys: func(c *computation) []string {
			var keys []string
			for model := range c.modelGPUs() {
				keys = append(keys, model)
			}
			return keys
		},
		capacity: func(c *computation, key string) float64 {
			return float64(c.modelGPUs()[key]) * hoursBetween(c.q.Since, c.capEnd)
		},
	},
	api.ByDay: {
		key:  func(_ *AttemptUsage, _ Rank, t time.Time) string { return t.UTC().Format(time.DateOnly) },
		next: nextDay,
		sort: slices.Sort[[]string], // ISO dates sort in time order
		allKeys: func(c *computation) []string {
			var keys []string
			for t := c.q.Since; t.Before(c.q.Until); t = nextDay(t) {
				keys = append(keys, t.Format(time.DateOnly))
			}
			return keys
		},
		capacity: func(c *computation, key string) float64 {
			day, _ := time.Parse(time.DateOnly, key)
			from, to := clip(day, nextDay(day), c.q.Since, c.capEnd)
			return float64(c.gpus()) * hoursBetween(from, to)
		},
	},
	api.ByHourOfWeek: {
		key:  func(_ *AttemptUsage, _ Rank, t time.Time) string { return hourOfWeek(t) },
		next: func(t time.Time) time.Time { return t.Truncate(time.Hour).Add(time.Hour) },
		sort: func(keys []string) {
			slices.SortFunc(keys, func(a, b string) int { return hourOfWeekIndex[a] - hourOfWeekIndex[b] })
		},
		allKeys:  func(*computation) []string { return hoursOfWeek },
		capacity: func(c *computation, key string) float64 { return c.hourOfWeekCapacity()[key] },
	},
}

// byAttempt groups by a property of the attempt's job; jobs without it are "(none)".
func byAttempt(prop func(*AttemptUsage) string) grouping {
	return grouping{
		key: func(a *AttemptUsage, _ Rank, _ time.Time) string {
			if k := prop(a); k != "" {
				return k
			}
			return "(none)"
		},
		sort: slices.Sort[[]string],
	}
}

// spread calls add with the row and the seconds of each part of [from, to) of rank r.
func (g grouping) spread(a *AttemptUsage, r Rank, from, to time.Time, add func(key string, sec float64)) {
	if g.next == nil {
		add(g.key(a, r, from), to.Sub(from).Seconds())
		return
	}
	for t := from; t.Before(to); {
		n := g.next(t)
		if n.After(to) {
			n = to
		}
		add(g.key(a, r, t), n.Sub(t).Seconds())
		t = n
	}
}

func nextDay(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
}

// hoursOfWeek are the hour-of-week keys in order, "Mon 00" to "Sun 23" (UTC), and
// hourOfWeekIndex their positions.
var hoursOfWeek, hourOfWeekIndex = func() ([]string, map[string]int) {
	days := []string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"}
	keys := make([]string, 0, 7*24)
	index := map[string]int{}
	for _, d := range days {
		for h := range 24 {
			index[fmt.Sprintf("%s %02d", d, h)] = len(keys)
			keys = append(keys, fmt.Sprintf("%s %02d", d, h))
		}
	}
	return keys, index
}()

// hourOfWeek is t's key, Monday first.
func hourOfWeek(t time.Time) string {
	t = t.UTC()
	day := (int(t.Weekday()) + 6) % 7 // Monday is 0
	return hoursOfWeek[day*24+t.Hour()]
}

// modelGPUs counts the counted GPUs by model.
func (c *computation) modelGPUs() map[string]int {
	if c.modelCap != nil {
		return c.modelCap
	}
	out := map[string]int{}
	c.modelCap = out
	for _, n := range c.in.Nodes {
		if _, ok := c.capacity[n.Name]; !ok {
			continue
		}
		for _, g := range n.GPUs {
			model := g.Model
			if model == "" {
				model = "unknown"
			}
			out[model]++
		}
	}
	return out
}

// hourOfWeekCapacity is the capacity of each hour of the week inside the window: the
// GPUs × the hours of the window that fall on it. It is worked out once per report.
func (c *computation) hourOfWeekCapacity() map[string]float64 {
	if c.howCap != nil {
		return c.howCap
	}
	c.howCap = map[string]float64{}
	gpus := float64(c.gpus())
	for t := c.q.Since; t.Before(c.capEnd); {
		n := t.Truncate(time.Hour).Add(time.Hour)
		if n.After(c.capEnd) {
			n = c.capEnd
		}
		c.howCap[hourOfWeek(t)] += gpus * n.Sub(t).Hours()
		t = n
	}
	return c.howCap
}
