package cluster

import (
	"slices"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// ReservationUse fills in Used and Held of the reservations by GPU count whose window is
// open at now, as the scheduler counts them: Used is the team's GPUs of the reservation's
// model and pool in use by its active jobs, up to GPUs; Held is how many of the rest are
// free now, on ready nodes, and so kept from other teams.
func (s *State) ReservationUse(rs []api.Reservation, now time.Time) {
	type gpu struct {
		node  string
		index int
	}
	inUse := map[gpu]string{} // the team of the job holding each GPU
	for _, id := range s.ActiveIDs() {
		a, ok := s.CurrentAttempt(id)
		if !ok {
			continue
		}
		for _, p := range a.Placements {
			for _, i := range p.GPUIndices {
				inUse[gpu{p.Node, i}] = s.jobs[id].Spec.Team
			}
		}
	}
	for i := range rs {
		r := &rs[i]
		r.Used, r.Held = 0, 0
		if !r.ByCount() || now.Before(r.Start) || !now.Before(r.End) {
			continue
		}
		free := 0
		for _, n := range s.Nodes() {
			if r.Pool != "" && n.Labels["pool"] != r.Pool {
				continue
			}
			for _, g := range n.GPUs {
				if r.Model != "" && g.Model != r.Model {
					continue
				}
				team, busy := inUse[gpu{n.Name, g.Index}]
				switch {
				case busy && team == r.Team:
					r.Used++
				case !busy && n.State == api.NodeReady && g.Healthy && !g.Missing && !slices.Contains(n.HeldGPUs, g.Index):
					free++
				}
			}
		}
		r.Used = min(r.Used, r.GPUs)
		r.Held = min(r.GPUs-r.Used, free)
	}
}
