package sched

// addWindows attaches the administrative reservations to the nodes they cover. Windows
// already over are dropped; unknown or unschedulable nodes are skipped.
func (st *state) addWindows(rs []Reservation) {
	for _, r := range rs {
		w := window{team: r.Team, name: r.Name, start: nanos(r.Start), end: nanos(r.End)}
		if r.Start.IsZero() {
			w.start = 0
		}
		if w.end <= st.now || w.start >= w.end {
			continue
		}
		for _, name := range r.Nodes {
			if ni, ok := st.byName[name]; ok {
				st.nodes[ni].windows = append(st.nodes[ni].windows, w)
			}
		}
	}
}
