package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/rotahq/rota/internal/cluster"
)

// Cluster is the virtual cluster a trace is replayed on.
type Cluster struct {
	// Source says where the cluster came from (a file, or "default …"), for the report.
	Source string
	// Nodes, one entry per node, names unique.
	Nodes  []NodeSpec
	Queues []QueueSpec
	// DefaultQueue takes the jobs whose trace names no queue.
	DefaultQueue string
	// Teams with their quotas and fair-share weights. A team of the trace that is not
	// listed has weight 1 and no quota.
	Teams []TeamSpec
	// Speeds maps a GPU model to its relative speed: a job whose trace duration is d runs
	// d/speed on that model. Models not listed run at 1. Nil when the file gives none.
	Speeds map[string]float64
}

// NodeSpec is one node of a cluster file. In the file, Count > 1 makes a group of nodes
// named NAME-000, NAME-001, …; after loading every entry is a single node.
type NodeSpec struct {
	Name        string            `yaml:"name"`
	Count       int               `yaml:"count,omitempty"`
	GPUs        int               `yaml:"gpus"`
	GPUModel    string            `yaml:"gpu_model,omitempty"`
	GPUMemoryMB int64             `yaml:"gpu_memory_mb,omitempty"`
	CPUs        int               `yaml:"cpus"`
	MemoryMB    int64             `yaml:"memory_mb"`
	Labels      map[string]string `yaml:"labels,omitempty"`
}

// QueueSpec is a queue of a cluster file: the part of a queue the scheduler uses.
type QueueSpec struct {
	Name         string `yaml:"name"`
	Tier         int    `yaml:"tier"`
	Preemptible  bool   `yaml:"preemptible"`
	NeverPreempt bool   `yaml:"never_preempt"`
}

// TeamSpec is a team of a cluster file.
type TeamSpec struct {
	Name string `yaml:"name"`
	// Weight is the fair-share weight (default 1).
	Weight float64 `yaml:"weight,omitempty"`
	// Quota by GPU model; the key "any" applies to models not named.
	Quota map[string]QuotaSpec `yaml:"quota,omitempty"`
}

// QuotaSpec is a team's quota of one GPU model, in GPUs.
type QuotaSpec struct {
	Guaranteed int `yaml:"guaranteed"`
	Limit      int `yaml:"limit"`
}

// clusterFile is the YAML layout of a cluster file (see doc.go).
type clusterFile struct {
	Nodes        []NodeSpec         `yaml:"nodes"`
	Queues       []QueueSpec        `yaml:"queues"`
	DefaultQueue string             `yaml:"default_queue"`
	Teams        []TeamSpec         `yaml:"teams"`
	Speeds       map[string]float64 `yaml:"speeds"`
}

// defaultQueues are used when a cluster file defines none: the server's own defaults, so a
// replay of a rota trace meets the queues its jobs named, with their tiers.
func defaultQueues() []QueueSpec {
	var out []QueueSpec
	for _, q := range cluster.DefaultQueues() {
		out = append(out, QueueSpec{Name: q.Name, Tier: q.Tier, Preemptible: q.Preemptible, NeverPreempt: q.NeverPreempt})
	}
	return out
}

// LoadCluster reads a cluster: an openb node list (a CSV whose header starts with "sn,") or a
// YAML cluster file.
func LoadCluster(path string) (*Cluster, error) {
	if isAlibabaNodeList(path) {
		return LoadAlibabaNodes(path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseCluster(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c.Source = path
	return c, nil
}

// ParseCluster reads a YAML cluster file. Unknown keys are errors, so a typo cannot silently
// change the cluster.
func ParseCluster(data []byte) (*Cluster, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f clusterFile
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty cluster file")
		}
		return nil, err
	}
	c := &Cluster{Queues: f.Queues, DefaultQueue: f.DefaultQueue, Teams: f.Teams, Speeds: f.Speeds}
	for i, g := range f.Nodes {
		if g.Count < 0 {
			return nil, fmt.Errorf("nodes[%d] (%s): negative count %d", i, g.Name, g.Count)
		}
		if g.Count <= 1 {
			g.Count = 0
			c.Nodes = append(c.Nodes, g)
			continue
		}
		for k := range g.Count {
			n := g
			n.Count = 0
			n.Name = fmt.Sprintf("%s-%03d", g.Name, k)
			c.Nodes = append(c.Nodes, n)
		}
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// validate fills in defaults and checks that the cluster can be simulated.
func (c *Cluster) validate() error {
	if len(c.Nodes) == 0 {
		return errors.New("cluster has no nodes")
	}
	seen := map[string]bool{}
	for _, n := range c.Nodes {
		switch {
		case n.Name == "":
			return errors.New("a node has no name")
		case seen[n.Name]:
			return fmt.Errorf("node %s is defined twice", n.Name)
		case n.GPUs < 0 || n.CPUs < 0 || n.MemoryMB < 0 || n.GPUMemoryMB < 0:
			return fmt.Errorf("node %s: negative capacity", n.Name)
		case n.GPUs > 0 && n.GPUModel == "":
			return fmt.Errorf("node %s: has GPUs but no gpu_model", n.Name)
		}
		seen[n.Name] = true
	}
	if len(c.Queues) == 0 {
		c.Queues = defaultQueues()
		if c.DefaultQueue == "" {
			c.DefaultQueue = cluster.DefaultQueue
		}
	}
	queues := map[string]bool{}
	for _, q := range c.Queues {
		if q.Name == "" {
			return errors.New("a queue has no name")
		}
		if queues[q.Name] {
			return fmt.Errorf("queue %s is defined twice", q.Name)
		}
		queues[q.Name] = true
	}
	teams := map[string]bool{}
	for i, t := range c.Teams {
		switch {
		case t.Name == "":
			return errors.New("a team has no name")
		case teams[t.Name]:
			return fmt.Errorf("team %s is defined twice", t.Name)
		case t.Weight < 0:
			return fmt.Errorf("team %s: negative weight", t.Name)
		case t.Weight == 0:
			c.Teams[i].Weight = 1
		}
		teams[t.Name] = true
		for model, q := range t.Quota {
			if q.Guaranteed < 0 || q.Limit < 0 {
				return fmt.Errorf("team %s: negative quota for %s", t.Name, model)
			}
		}
	}
	if c.DefaultQueue == "" {
		c.DefaultQueue = c.Queues[0].Name
	}
	if !queues[c.DefaultQueue] {
		return fmt.Errorf("default_queue %s is not one of the queues", c.DefaultQueue)
	}
	models := map[string]bool{}
	for _, n := range c.Nodes {
		models[n.GPUModel] = true
	}
	for _, model := range slices.Sorted(maps.Keys(c.Speeds)) {
		if err := checkSpeed(c.Speeds[model]); err != nil {
			return fmt.Errorf("speeds: %q: %v", model, err)
		}
		if model == "" || !models[model] {
			return fmt.Errorf("speeds: %q: no node of the cluster has that GPU model", model)
		}
	}
	return nil
}

// maxSpeed bounds a relative speed, so that a typo (100 for 1.00) does not pass.
const maxSpeed = 100

// checkSpeed says what is wrong with a relative speed, or nil.
func checkSpeed(v float64) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Errorf("speed %v is not a finite number", v)
	case v <= 0:
		return fmt.Errorf("speed %v: must be positive", v)
	case v > maxSpeed:
		return fmt.Errorf("speed %v: at most %d", v, maxSpeed)
	}
	return nil
}

// Speed returns the relative speed of GPU model for a job with the given per-job speeds
// (which may be nil): the job's own speed for the model, else the cluster's, else 1.
func (c *Cluster) Speed(jobSpeeds map[string]float64, model string) float64 {
	if v, ok := jobSpeeds[model]; ok {
		return v
	}
	if v, ok := c.Speeds[model]; ok {
		return v
	}
	return 1
}

// GPUs returns the number of GPUs in the cluster.
func (c *Cluster) GPUs() int {
	n := 0
	for _, nd := range c.Nodes {
		n += nd.GPUs
	}
	return n
}

// PhillyCluster is the cluster a Philly trace runs on when no --cluster is given: 300 nodes of
// 8 GPUs (2,400 GPUs; the Philly paper's cluster had about 2,490), 48 CPUs and 512 GiB each.
// The trace states no model, CPUs or memory, so only the GPU count can constrain a job.
func PhillyCluster() *Cluster {
	c := &Cluster{Source: "default philly cluster"}
	for i := range 300 {
		c.Nodes = append(c.Nodes, NodeSpec{
			Name: fmt.Sprintf("philly-%03d", i), GPUs: 8, GPUModel: "P100", GPUMemoryMB: 16384,
			CPUs: 48, MemoryMB: 512 * 1024,
		})
	}
	if err := c.validate(); err != nil {
		panic(err) // a fixed cluster; a failure here is a programming error
	}
	return c
}

var addNodesRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^([0-9]+)x([A-Za-z0-9._-]+)(?::([0-9]+))?$`) })

// AddNodes adds the nodes described by spec, "COUNTxMODEL" or "COUNTxMODEL:GPUS" (several
// separated by commas), e.g. "4xH100" or "2xA100:4". A new node copies the GPUs per node,
// GPU memory, CPUs, memory and labels of the first existing node of that model; for a model
// the cluster lacks it has 8 GPUs (or GPUS), 128 CPUs and 1 TiB of memory. New nodes are named
// add-MODEL-000, ….
func (c *Cluster) AddNodes(spec string) error {
	for part := range strings.SplitSeq(spec, ",") {
		m := addNodesRE().FindStringSubmatch(strings.TrimSpace(part))
		if m == nil {
			return fmt.Errorf("--add-nodes %q: want COUNTxMODEL[:GPUS], e.g. 4xH100", part)
		}
		count, err := strconv.Atoi(m[1])
		if err != nil || count < 1 || count > 100000 {
			return fmt.Errorf("--add-nodes %q: count must be 1..100000", part)
		}
		tmpl := NodeSpec{GPUs: 8, GPUModel: m[2], CPUs: 128, MemoryMB: 1 << 20}
		if i := slices.IndexFunc(c.Nodes, func(n NodeSpec) bool { return n.GPUModel == m[2] }); i >= 0 {
			tmpl = c.Nodes[i]
			tmpl.Labels = maps.Clone(tmpl.Labels)
		}
		if m[3] != "" {
			g, err := strconv.Atoi(m[3])
			if err != nil || g < 1 || g > 1024 {
				return fmt.Errorf("--add-nodes %q: GPUS must be 1..1024", part)
			}
			tmpl.GPUs = g
		}
		names := map[string]bool{}
		for _, n := range c.Nodes {
			names[n.Name] = true
		}
		prefix := "add-" + strings.ToLower(m[2])
		for k := 0; count > 0; k++ {
			n := tmpl
			n.Name = fmt.Sprintf("%s-%03d", prefix, k)
			if names[n.Name] {
				continue
			}
			c.Nodes = append(c.Nodes, n)
			count--
		}
	}
	return c.validate()
}
