package server

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/sched"
	"github.com/rotahq/rota/internal/store"
)

// Version drift: a pool may want its nodes' driver and CUDA versions in ranges
// (api.Pool.Driver, CUDA). Each heartbeat compares the node's reported versions with its
// pool's ranges as they are then, so a changed configuration reaches a node at its next
// heartbeat. The result is stored with the node (Node.Drift) only when it changes, and
// each change is one event: starting to drift, drifting differently, back in range.
//
// With drain_on_drift, a ready node that starts to drift drains on its own (DriftDrain
// marks the drain as the server's). When its versions are back in range, the server
// returns it to service, unless an operator drained it meanwhile (a maintenance window);
// a node an operator resumed while it drifted is not drained again until it has been
// back in range and drifts anew.

// nodeDrift lists node n's versions outside the ranges its pool wants; nil when it has
// none, its pool wants none, or it has no pool.
func nodeDrift(n *api.Node, pools map[string]api.Pool) []api.VersionDrift {
	name := n.Labels["pool"]
	p, ok := pools[name]
	if !ok || name == "" {
		return nil
	}
	var out []api.VersionDrift
	for _, c := range []struct{ component, wanted, version string }{
		{api.DriftDriver, p.Driver, n.DriverVersion},
		{api.DriftCUDA, p.CUDA, n.CUDAVersion},
	} {
		// The ranges were validated when the configuration was applied; one that does not
		// parse (a store written by other means) wants nothing rather than everything.
		r, err := sched.ParseVersionRange(c.wanted)
		if err != nil || r.Match(c.version) {
			continue
		}
		out = append(out, api.VersionDrift{Component: c.component, Version: c.version, Wanted: r.String(), Pool: name})
	}
	return out
}

// driftText is the node's drift in one line: "driver 535.54 outside wanted >=550 for pool
// train; CUDA 12.2 outside wanted >=12.4 for pool train".
func driftText(ds []api.VersionDrift) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.String()
	}
	return strings.Join(parts, "; ")
}

// refreshDrift sets n.Drift from its versions and its pool's wanted ranges, recording what
// changed against old (the node before this heartbeat; known is false for a new node),
// and drains or returns it to service under drain_on_drift. It returns whether the
// change must be stored.
func (s *Server) refreshDrift(b *store.Batch, old api.Node, known bool, n *api.Node, now time.Time) bool {
	pools := s.state.Pools()
	n.Drift = nodeDrift(n, pools)
	var was []api.VersionDrift
	if known {
		was = old.Drift
	}
	event := func(kind, actor, format string, args ...any) {
		b.Events = append(b.Events, api.Event{Time: now, Actor: actor, Kind: kind, Node: n.Name, Message: fmt.Sprintf(format, args...)})
	}
	changed := !slices.Equal(was, n.Drift)
	switch {
	case !changed:
	case len(n.Drift) == 0:
		event(api.EventNode, "node:"+n.Name, "node %s: versions back within its pool's wanted ranges (was %s)", n.Name, driftText(was))
	default:
		event(api.EventNode, "node:"+n.Name, "node %s drifts: %s", n.Name, driftText(n.Drift))
	}
	draining := n.State == api.NodeDraining || n.State == api.NodeDrained
	switch {
	case len(n.Drift) == 0 && n.DriftDrain:
		if draining && n.Maintenance == nil {
			from := n.State
			n.State = api.NodeReady
			event(api.EventDrain, "system", "node %s: %s -> %s: returned to service on its own (drain_on_drift): its versions are back in range",
				n.Name, from, n.State)
		}
		n.DriftDrain, changed = false, true
	case len(n.Drift) > 0 && n.State == api.NodeReady && pools[n.Labels["pool"]].DrainOnDrift && (len(was) == 0 || n.DriftDrain):
		// A node that starts to drift, or one drained for it that came back from being
		// lost or not ready (which makes it READY) while it still drifts.
		n.State, n.DriftDrain, changed = api.NodeDraining, true, true
		event(api.EventDrain, "system", "node %s draining on its own (drain_on_drift): %s; its running jobs finish, it takes no new work",
			n.Name, driftText(n.Drift))
	}
	return changed
}
