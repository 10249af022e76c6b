package sim

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/sched"
)

// planHashes holds, per replay, one hash over every plan the scheduler made in it: what a
// change that must not alter any decision (a faster backfill, a cheaper order) is checked
// against. Write it anew with go test -update, only after a deliberate change of behaviour.
const planHashes = "testdata/plan_hashes.txt"

// planCase is one replay whose plans are hashed: a trace on a cluster under a config.
type planCase struct {
	name     string
	trace    string // path; "contended" for the contended Philly extract
	format   string
	cluster  string // path; "" for the format's default
	policies []string
	config   func(*Config)
	rows     int // with trace "contended": how many of the shared trace's rows
}

// planPolicies are the policies every replay case runs: the defaults, and each with greedy
// (no reservations) or strict order, so that the backfill, the ordering and the absence of
// both are all covered.
var planPolicies = []string{
	"default", "fifo", "sjf", "las", "worstfit",
	"default+greedy", "fifo+greedy", "sjf+greedy", "las+greedy", "fifo-strict", "default+nobackfill",
}

var planCases = []planCase{
	{name: "philly_excerpt", trace: "testdata/philly_excerpt.csv", format: "philly", policies: planPolicies},
	{name: "philly_excerpt_small", trace: "testdata/philly_excerpt.csv", format: "philly", cluster: "testdata/cluster.yaml", policies: planPolicies},
	{name: "philly_excerpt_busy", trace: "testdata/philly_excerpt.csv", format: "philly", cluster: "testdata/cluster.yaml", policies: planPolicies,
		config: func(c *Config) { c.Scale = 8 }},
	{name: "philly_failures", trace: "testdata/philly_excerpt.csv", format: "philly", cluster: "testdata/cluster.yaml", policies: planPolicies,
		config: func(c *Config) { c.NodeMTBF, c.NodeRepair, c.Seed = 24*time.Hour, 2*time.Hour, 7 }},
	{name: "alibaba_excerpt", trace: "testdata/alibaba_pods.csv", format: "alibaba-gpu2023", cluster: "testdata/alibaba_nodes.csv", policies: planPolicies},
	{name: "fifo_sjf", trace: "testdata/scenarios/fifo_sjf.csv", format: "rota", cluster: "testdata/scenarios/one_gpu.yaml", policies: planPolicies},
	{name: "backfill", trace: "testdata/scenarios/backfill.csv", format: "rota", cluster: "testdata/scenarios/four_gpus.yaml", policies: planPolicies},
	{name: "gang_preempt", trace: "testdata/scenarios/gang_preempt.csv", format: "rota", cluster: "testdata/scenarios/two_nodes.yaml", policies: planPolicies},
	{name: "preempt", trace: "testdata/scenarios/preempt.csv", format: "rota", cluster: "testdata/scenarios/preempt.yaml", policies: planPolicies,
		config: func(c *Config) { c.Checkpoint = 40 * time.Minute }},
	{name: "philly_contended", trace: "contended", format: "philly", cluster: "testdata/philly_contended.yaml", rows: 800, policies: planPolicies},
}

// TestPlanIdentity replays each case and compares the hash of all its plans with the one
// recorded in testdata: the simulator and the scheduler must make exactly the decisions
// they made when the hashes were written, plan by plan. A case on the shared Philly trace
// is skipped where the trace is absent.
func TestPlanIdentity(t *testing.T) {
	want := readPlanHashes(t)
	got := map[string]string{}
	for _, pc := range planCases {
		t.Run(pc.name, func(t *testing.T) {
			if testing.Short() && pc.trace == "contended" {
				t.Skip("the contended extract takes seconds")
			}
			w := planWorkload(t, pc)
			cfg := DefaultConfig()
			if pc.config != nil {
				pc.config(&cfg)
			}
			for _, policy := range pc.policies {
				key := pc.name + " " + policy
				sum, plans := planHash(t, w, cfg, policy)
				got[key] = sum
				if *update {
					continue
				}
				if w, ok := want[key]; !ok {
					t.Errorf("%s: no recorded hash in %s (go test -update writes it)", key, planHashes)
				} else if w != sum {
					t.Errorf("%s: the %d plans differ from those recorded in %s", key, plans, planHashes)
				}
			}
		})
	}
	if *update {
		for k, v := range want {
			if _, ok := got[k]; !ok {
				got[k] = v // a case skipped here (no shared trace) keeps its hash
			}
		}
		writePlanHashes(t, got)
	}
}

func planWorkload(t *testing.T, pc planCase) *Workload {
	t.Helper()
	if pc.trace == "contended" {
		return loadPhillyExtract(t, pc.rows)
	}
	tr, err := LoadTrace(pc.trace, pc.format, false)
	if err != nil {
		t.Fatal(err)
	}
	c, err := clusterFor(pc.cluster, pc.trace, pc.format)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Prepare(tr, c, false)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// planHash replays w under one policy and hashes every plan with the time it was made for.
func planHash(t *testing.T, w *Workload, cfg Config, policy string) (string, int) {
	t.Helper()
	plan, err := plannerFor(policy)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	var buf []byte
	plans := 0
	hashed := func(s *sched.Snapshot, now time.Time) sched.Plan {
		p := plan(s, now)
		buf = appendPlan(buf[:0], now, &p)
		h.Write(buf)
		plans++
		return p
	}
	if _, err := runWith(context.Background(), w, cfg, []string{policy}, []planFunc{hashed}); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil)), plans
}

// appendPlan encodes everything a plan says, in its order: placements, the pending jobs
// with their reasons, priorities and estimated starts, preemptions, claims, reservations
// and the recheck time.
func appendPlan(b []byte, now time.Time, p *sched.Plan) []byte {
	i64 := func(v int64) { b = binary.LittleEndian.AppendUint64(b, uint64(v)) }
	f64 := func(v float64) { b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v)) }
	str := func(s string) { i64(int64(len(s))); b = append(b, s...) }
	tm := func(t time.Time) {
		if t.IsZero() {
			i64(math.MinInt64)
			return
		}
		i64(t.UnixNano())
	}
	allocs := func(as []sched.Alloc) {
		i64(int64(len(as)))
		for _, a := range as {
			str(a.Node)
			i64(int64(len(a.GPUIndices)))
			for _, g := range a.GPUIndices {
				i64(int64(g))
			}
			i64(int64(a.CPUs))
			i64(a.MemoryMB)
			i64(int64(a.GPUShare))
			i64(a.GPUMemoryMB)
		}
	}
	tm(now)
	i64(int64(len(p.Placements)))
	for _, pl := range p.Placements {
		i64(pl.JobID)
		allocs(pl.Allocs)
		if pl.Borrowing {
			i64(1)
		} else {
			i64(0)
		}
	}
	i64(int64(len(p.Pending)))
	for _, pj := range p.Pending {
		i64(pj.JobID)
		r := &pj.Reason
		str(string(r.Code))
		str(r.Message)
		str(r.BestNode)
		keys := make([]string, 0, len(r.Missing))
		for k := range r.Missing {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			str(k)
			i64(r.Missing[k])
		}
		i64(int64(r.Ahead))
		str(r.Team)
		str(r.User)
		i64(int64(r.Used))
		i64(int64(r.Limit))
		i64(int64(len(r.Victims)))
		for _, v := range r.Victims {
			i64(v)
		}
		tm(pj.EstimatedStart)
		pr := &pj.Priority
		i64(int64(pr.Tier))
		for _, f := range []float64{pr.Score, pr.FairShare, pr.Age, pr.Size, pr.Deadline, pr.Service, pr.Nice} {
			f64(f)
		}
		i64(int64(pr.LASQueue))
	}
	i64(int64(len(p.Preemptions)))
	for _, pr := range p.Preemptions {
		i64(pr.JobID)
		i64(pr.ForJob)
		str(pr.Reason)
	}
	i64(int64(len(p.Claims)))
	for _, c := range p.Claims {
		i64(c.JobID)
		allocs(c.Allocs)
	}
	i64(int64(len(p.Reservations)))
	for _, r := range p.Reservations {
		i64(r.JobID)
		i64(int64(len(r.Nodes)))
		for _, n := range r.Nodes {
			str(n)
		}
		tm(r.Start)
		tm(r.End)
	}
	tm(p.Recheck)
	return b
}

func readPlanHashes(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	data, err := os.ReadFile(planHashes)
	if err != nil {
		if *update && os.IsNotExist(err) {
			return out
		}
		t.Fatalf("%v (go test -update writes it)", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			t.Fatalf("%s: bad line %q: want \"case policy: hash\"", planHashes, line)
		}
		out[k] = v
	}
	return out
}

func writePlanHashes(t *testing.T, m map[string]string) {
	t.Helper()
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString("# SHA-256 of every plan of each replay (case policy: hash); see TestPlanIdentity.\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s\n", k, m[k])
	}
	if err := os.WriteFile(filepath.FromSlash(planHashes), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
