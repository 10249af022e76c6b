package sim

import (
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/cluster"
)

// RecordsFromHistory turns the server's accounting records (GET /api/v1/history) into the
// rows of a rota trace: what `rota history export` writes.
func RecordsFromHistory(list []api.HistoryRecord) []RotaRecord {
	recs := make([]RotaRecord, 0, len(list))
	for _, r := range list {
		rec := RotaRecord{
			ID: r.ID, Submit: r.Submit, Duration: time.Duration(r.RunSeconds * float64(time.Second)),
			TimeLimit: time.Duration(r.TimeLimit) * time.Second, GPUs: r.GPUs, Nodes: r.Nodes, GPUModel: r.GPUModel,
			CPUs: r.CPUs, MemoryMB: r.MemoryMB, Queue: r.Queue, Team: r.Team, User: r.User, State: r.State,
		}
		if r.Start != nil {
			rec.Start = *r.Start
		}
		if r.End != nil {
			rec.End = *r.End
		}
		recs = append(recs, rec)
	}
	return recs
}

// ClusterFile writes the live cluster, as the API lists it, as a cluster file: nodes,
// queues and teams with their quotas, so an exported history can be replayed on it as it
// is, or on an edited copy ("what if we add 4 nodes?").
func ClusterFile(nodes []api.Node, queues []api.Queue, teams []api.Team) ([]byte, error) {
	var file struct {
		Nodes        []NodeSpec  `yaml:"nodes"`
		Queues       []QueueSpec `yaml:"queues"`
		DefaultQueue string      `yaml:"default_queue"`
		Teams        []TeamSpec  `yaml:"teams,omitempty"`
	}
	for _, n := range nodes {
		spec := NodeSpec{Name: n.Name, GPUs: len(n.GPUs), CPUs: n.CPUs, MemoryMB: n.MemoryMB, Labels: n.Labels}
		if len(n.GPUs) > 0 {
			spec.GPUModel, spec.GPUMemoryMB = n.GPUs[0].Model, n.GPUs[0].MemoryMB
		}
		file.Nodes = append(file.Nodes, spec)
	}
	for _, q := range queues {
		file.Queues = append(file.Queues, QueueSpec{Name: q.Name, Tier: q.Tier, Preemptible: q.Preemptible, NeverPreempt: q.NeverPreempt})
	}
	file.DefaultQueue = cluster.DefaultQueue
	for _, t := range teams {
		ts := TeamSpec{Name: t.Name, Weight: t.Weight}
		for model, q := range t.Quotas {
			if ts.Quota == nil {
				ts.Quota = map[string]QuotaSpec{}
			}
			if model == "*" {
				model = "any"
			}
			ts.Quota[model] = QuotaSpec{Guaranteed: q.Guaranteed, Limit: q.Limit}
		}
		file.Teams = append(file.Teams, ts)
	}
	return yaml.Marshal(file)
}
