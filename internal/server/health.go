package server

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/store"
)

// Node health comes from the agent's reports: a GPU it reports unhealthy (an XID, ECC
// errors) takes no new work, which the scheduler's snapshot reads from GPU.Healthy; a GPU
// that vanished, an unhealthy GPU or a failing health check make the node degraded, one
// sentence per problem in Node.Degraded. Degraded and the last health check are stored
// with the node (nodes.data) when what degrades it changes; the check's time and output
// alone change only memory, so a check every minute does not write every minute.

const (
	// maxHealthOutput bounds the tail of a health check's output that is kept.
	maxHealthOutput = 2048
	// maxHealthLine bounds the line of output a Degraded sentence quotes.
	maxHealthLine = 200
)

// problem is one thing that degrades a node: key identifies it across heartbeats, so an
// event is recorded when the set of problems changes, not when their wording does.
type problem struct{ key, text string }

// nodeProblems lists what degrades a node with these GPUs and this health check.
func nodeProblems(gpus []api.GPU, hc *api.HealthCheck, dataDir string) []problem {
	var out []problem
	if dataDir != "" {
		out = append(out, problem{"datadir", "its agent cannot run attempts: " + dataDir})
	}
	for _, g := range gpus {
		switch {
		case g.Missing:
			text := fmt.Sprintf("GPU %d (%s) is missing: it can no longer be found", g.Index, g.UUID)
			if g.Health != "" {
				text += " (" + g.Health + ")"
			}
			out = append(out, problem{fmt.Sprintf("missing/%d", g.Index), text})
		case !g.Healthy:
			why := g.Health
			if why == "" {
				why = "the device reported errors"
			}
			out = append(out, problem{fmt.Sprintf("unhealthy/%d", g.Index), fmt.Sprintf("GPU %d (%s) is unhealthy: %s", g.Index, g.UUID, why)})
		}
	}
	if hc != nil && !hc.OK {
		text := fmt.Sprintf("the health check failed with exit code %d", hc.ExitCode)
		if line := lastLine(hc.Output); line != "" {
			text += ": " + line
		}
		out = append(out, problem{fmt.Sprintf("check/%d", hc.ExitCode), text})
	}
	return out
}

func problemKeys(ps []problem) []string {
	keys := make([]string, len(ps))
	for i, p := range ps {
		keys[i] = p.key
	}
	return keys
}

func problemTexts(ps []problem) []string {
	if len(ps) == 0 {
		return nil
	}
	texts := make([]string, len(ps))
	for i, p := range ps {
		texts[i] = p.text
	}
	return texts
}

// lastLine is the last non-empty line of out, without control characters, shortened.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	line := printable(strings.TrimSpace(lines[len(lines)-1]))
	if len(line) > maxHealthLine {
		line = strings.ToValidUTF8(line[:maxHealthLine], "") + "…"
	}
	return line
}

// cleanHealthCheck returns the agent's health-check result fit to keep and show: the tail
// of its output, with line breaks but no other control characters.
func cleanHealthCheck(hc *api.HealthCheck) *api.HealthCheck {
	if hc == nil {
		return nil
	}
	c := *hc
	c.Output = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || !isControl(r) {
			return r
		}
		return -1
	}, c.Output)
	if len(c.Output) > maxHealthOutput {
		cut := len(c.Output) - maxHealthOutput
		for cut < len(c.Output) && !utf8.RuneStart(c.Output[cut]) {
			cut++
		}
		c.Output = c.Output[cut:]
	}
	c.Output = strings.ToValidUTF8(c.Output, "")
	if c.OK {
		c.ExitCode = 0
	}
	c.Time = c.Time.UTC()
	return &c
}

// maxProblemText bounds an agent's sentence on its data dir.
const maxProblemText = 300

// cleanProblem is an agent's sentence on its data dir as the server keeps it: printable,
// valid UTF-8, at most maxProblemText bytes.
func cleanProblem(text string) string {
	text = strings.ToValidUTF8(printable(text), "")
	if len(text) > maxProblemText {
		cut := maxProblemText
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut]
	}
	return text
}

// checkChanged reports whether a health check's outcome changed, which is worth a write;
// its time and output alone are not.
func checkChanged(a, b *api.HealthCheck) bool {
	if a == nil || b == nil {
		return (a == nil) != (b == nil)
	}
	return a.OK != b.OK || a.ExitCode != b.ExitCode
}

// nodeHealth sets n's health from its agent's report (n.GPUs are the new inventory) and
// records what changed against old: a GPU that turned unhealthy, the node becoming
// degraded, changing why, or recovering. With Execution.DrainOnHealthFailure a node that
// becomes degraded is drained. It returns whether the change must be stored.
func (s *Server) nodeHealth(b *store.Batch, old api.Node, known bool, n *api.Node, hc *api.HealthCheck, dataDir string, now time.Time) bool {
	n.HealthCheck = cleanHealthCheck(hc)
	n.DataDirProblem = cleanProblem(dataDir)
	was := nodeProblems(old.GPUs, old.HealthCheck, old.DataDirProblem)
	if !known {
		was = nil
	}
	is := nodeProblems(n.GPUs, n.HealthCheck, n.DataDirProblem)
	n.Degraded = problemTexts(is)
	event := func(kind, format string, args ...any) {
		b.Events = append(b.Events, api.Event{Time: now, Actor: "node:" + n.Name, Kind: kind, Node: n.Name, Message: fmt.Sprintf(format, args...)})
	}
	for _, g := range n.GPUs {
		if g.Healthy || g.Missing {
			continue
		}
		i := slices.IndexFunc(old.GPUs, func(o api.GPU) bool { return o.Index == g.Index })
		if !known || i < 0 || old.GPUs[i].Healthy {
			why := g.Health
			if why == "" {
				why = "the device reported errors"
			}
			event(api.EventHealth, "GPU %d (%s) of node %s is unhealthy: %s; it takes no new work", g.Index, g.UUID, n.Name, why)
		}
	}
	changed := !slices.Equal(problemKeys(was), problemKeys(is))
	switch {
	case !changed:
	case len(is) == 0:
		event(api.EventHealth, "node %s recovered: nothing degrades it any more", n.Name)
	default:
		event(api.EventHealth, "node %s is degraded: %s", n.Name, strings.Join(n.Degraded, "; "))
	}
	if len(was) == 0 && len(is) > 0 && n.State == api.NodeReady && s.state.Execution().DrainOnHealthFailure {
		n.State = api.NodeDraining
		b.Events = append(b.Events, api.Event{Time: now, Actor: "system", Kind: api.EventDrain, Node: n.Name,
			Message: fmt.Sprintf("node %s draining on its own (drain_on_health_failure): %s; its running jobs finish, it takes no new work",
				n.Name, strings.Join(n.Degraded, "; "))})
	}
	return changed || checkChanged(old.HealthCheck, n.HealthCheck)
}

// leftoverEvent describes the leftover processes new since the node's last reading, or
// that the last one is gone.
func leftoverEvent(old api.Node, rd *nodeReading, now time.Time) (api.Event, bool) {
	ev := api.Event{Time: now, Actor: "node:" + old.Name, Kind: api.EventHealth, Node: old.Name}
	if len(rd.leftovers) == 0 {
		if len(old.Leftovers) == 0 {
			return ev, false
		}
		ev.Message = fmt.Sprintf("node %s: no leftover GPU processes any more; GPUs %s take work again", old.Name, joinInts(old.HeldGPUs))
		return ev, true
	}
	before := map[[2]int]bool{}
	for _, p := range old.Leftovers {
		before[[2]int{p.GPU, p.PID}] = true
	}
	var news []string
	count := 0
	for _, p := range rd.leftovers {
		if before[[2]int{p.GPU, p.PID}] {
			continue
		}
		if count++; count <= leftoversNamed {
			news = append(news, describeLeftover(p))
		}
	}
	if count == 0 {
		return ev, false
	}
	if count > leftoversNamed {
		news = append(news, fmt.Sprintf("and %d more", count-leftoversNamed))
	}
	ev.Message = fmt.Sprintf("node %s: GPU processes of no live attempt: %s; GPUs %s take no new work until they are gone",
		old.Name, strings.Join(news, "; "), joinInts(rd.held))
	return ev, true
}

func describeLeftover(p api.GPUProcess) string {
	what := fmt.Sprintf("pid %d", p.PID)
	if p.Command != "" {
		what += " (" + p.Command + ")"
	}
	if p.JobID > 0 {
		what += fmt.Sprintf(" of job %d attempt %d, which has ended,", p.JobID, p.Attempt)
	}
	return fmt.Sprintf("%s holds %d MB on GPU %d", what, p.MemoryMB, p.GPU)
}

func joinInts(v []int) string {
	parts := make([]string, len(v))
	for i, n := range v {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}
