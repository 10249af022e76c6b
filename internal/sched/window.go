package sched

// addWindows attaches the administrative reservations and the maintenance windows to the
// nodes they cover. Windows already over are dropped; unknown or unschedulable nodes are
// skipped. An open-ended maintenance window (zero End) lasts for ever.
func (st *state) addWindows(rs []Reservation, ms []Maintenance) {
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
	for _, m := range ms {
		w := window{name: m.Reason, maint: true, start: nanos(m.Start), end: forever}
		if m.Start.IsZero() {
			w.start = 0
		}
		if !m.End.IsZero() {
			w.end = nanos(m.End)
		}
		if w.end <= st.now || w.start >= w.end {
			continue
		}
		if ni, ok := st.byName[m.Node]; ok {
			st.nodes[ni].windows = append(st.nodes[ni].windows, w)
		}
	}
}
