package server

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// Reservations by GPU count hold a number of GPUs of a model and pool, which the
// scheduler keeps free for the team wherever they are (internal/sched, hold.go); node
// reservations hold whole nodes. These checks keep the first kind within what the
// cluster has. Callers hold s.mu.

// inScope reports whether a GPU of model on a node of pool counts for a reservation of
// the model and pool given ("" for any).
func inScope(model, pool, gpuModel, nodePool string) bool {
	return (model == "" || model == gpuModel) && (pool == "" || pool == nodePool)
}

// scopesMeet reports whether two reservations by count may want the same GPUs.
func scopesMeet(a, b *api.Reservation) bool {
	return (a.Model == "" || b.Model == "" || a.Model == b.Model) && (a.Pool == "" || b.Pool == "" || a.Pool == b.Pool)
}

// capacityOf counts the GPUs on nodes that are not lost that any of the reservations
// could hold.
func (s *Server) capacityOf(rs ...*api.Reservation) int {
	n := 0
	for _, node := range s.state.Nodes() {
		if node.State == api.NodeLost {
			continue
		}
		for _, g := range node.GPUs {
			if slices.ContainsFunc(rs, func(r *api.Reservation) bool { return inScope(r.Model, r.Pool, g.Model, node.Labels["pool"]) }) {
				n++
			}
		}
	}
	return n
}

// scopeName says which GPUs a reservation by count holds: "H100 GPUs in pool train".
func scopeName(model, pool string) string {
	s := "GPUs"
	if model != "" {
		s = model + " GPUs"
	}
	if pool != "" {
		s += " in pool " + pool
	}
	return s
}

// checkCount validates a reservation by count against the cluster: a model and a pool
// some node has, no more GPUs than there are of them, and, with the reservations by count
// whose windows and GPUs overlap it, no more than there are at any moment. It names the
// field at fault; a conflict with other reservations is a 409.
func (s *Server) checkCount(r *api.Reservation) *api.Error {
	if r.GPUs < 1 || r.GPUs > maxGPUs {
		return invalid("gpus", "must be between 1 and %d, got %d", maxGPUs, r.GPUs)
	}
	var models, pools []string
	for _, n := range s.state.Nodes() {
		if n.State == api.NodeLost {
			continue
		}
		if p := n.Labels["pool"]; p != "" && !slices.Contains(pools, p) {
			pools = append(pools, p)
		}
		for _, g := range n.GPUs {
			if !slices.Contains(models, g.Model) {
				models = append(models, g.Model)
			}
		}
	}
	sort.Strings(models)
	sort.Strings(pools)
	if r.Model != "" && !slices.Contains(models, r.Model) {
		return invalid("model", "no node has GPUs of model %q; the models are %s", r.Model, joinOr(models, "none"))
	}
	if r.Pool != "" && !slices.Contains(pools, r.Pool) {
		return invalid("pool", "no node is in pool %q; the pools are %s", r.Pool, joinOr(pools, "none"))
	}
	if have := s.capacityOf(r); r.GPUs > have {
		return invalid("gpus", "the cluster has %d %s; %d asked", have, scopeName(r.Model, r.Pool), r.GPUs)
	}
	// The reservations that may want the same GPUs in the same time: at each moment one
	// of them (or this one) starts, those open together must fit in what they share.
	var others []*api.Reservation
	for _, o := range s.state.Reservations() {
		if o.ByCount() && o.ID != r.ID && o.Start.Before(r.End) && r.Start.Before(o.End) && scopesMeet(&o, r) {
			others = append(others, &o)
		}
	}
	starts := []time.Time{r.Start}
	for _, o := range others {
		if o.Start.After(r.Start) {
			starts = append(starts, o.Start)
		}
	}
	for _, t := range starts {
		set, total := []*api.Reservation{r}, r.GPUs
		var ids []string
		for _, o := range others {
			if !t.Before(o.Start) && t.Before(o.End) {
				set = append(set, o)
				total += o.GPUs
				ids = append(ids, fmt.Sprint(o.ID))
			}
		}
		if have := s.capacityOf(set...); total > have {
			return &api.Error{Code: api.CodeConflict, Field: "gpus", Message: fmt.Sprintf(
				"at %s, reservation%s %s hold%s %d of the %d GPUs this one could use; with its %d that makes %d",
				t.UTC().Format(time.RFC3339), pluralS(len(ids)), strings.Join(ids, ", "), verbS(len(ids)), total-r.GPUs, have, r.GPUs, total)}
		}
	}
	return nil
}

// checkReservedNodes validates a reservation of whole nodes: known nodes with GPUs, none named
// twice, none held by another node reservation in an overlapping window. It sets GPUs to
// what the nodes have.
func (s *Server) checkReservedNodes(r *api.Reservation) *api.Error {
	if r.Model != "" || r.Pool != "" {
		return invalid("nodes", "a reservation of nodes holds them whole; model and pool are for a reservation by GPU count, without nodes")
	}
	taken := map[string]int64{}
	for _, o := range s.state.Reservations() {
		if o.Start.Before(r.End) && r.Start.Before(o.End) {
			for _, n := range o.Nodes {
				taken[n] = o.ID
			}
		}
	}
	gpus := 0
	for i, name := range r.Nodes {
		n, ok := s.state.Node(name)
		switch {
		case !ok:
			return invalid("nodes", "unknown node %q", name)
		case slices.Contains(r.Nodes[:i], name):
			return invalid("nodes", "node %s is named twice", name)
		case len(n.GPUs) == 0:
			return invalid("nodes", "node %s has no GPUs", name)
		case taken[name] != 0:
			return &api.Error{Code: api.CodeConflict, Field: "nodes",
				Message: fmt.Sprintf("node %s is held by reservation %d in an overlapping window", name, taken[name])}
		}
		gpus += len(n.GPUs)
	}
	r.GPUs = gpus
	return nil
}

func pluralS(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func verbS(n int) string {
	if n == 1 {
		return "s"
	}
	return ""
}
