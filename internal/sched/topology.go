package sched

import "slices"

// pickGPUs chooses n free GPUs of a group and returns their positions in it. Without
// NVLink information it takes the lowest free indices. With it, it takes the set with the
// most NVLink pairs inside, since collective operations within the job run over those
// links; ties go to the lowest indices.
func (st *state) pickGPUs(gi, n int) []int {
	g := &st.groups[gi]
	free := make([]int, 0, g.nfree)
	for p, f := range g.free {
		if f {
			free = append(free, p)
		}
	}
	return st.choose(g, free, n)
}

// choose is pickGPUs over a given list of positions of group g, ascending: a claim chooses
// among the free GPUs and those its victims hold.
func (st *state) choose(g *group, free []int, n int) []int {
	if n <= 1 || n >= len(free) {
		return free[:n]
	}
	link := st.links(g, free)
	if link == nil {
		return free[:n]
	}
	if binomial(len(free), n) <= maxCombinations {
		return bestCombination(free, n, link)
	}
	return greedySet(free, n, link)
}

// maxCombinations bounds the exhaustive search: C(8,4) = 70 and C(16,8) = 12870 sets, so
// every common node is searched exactly and only unusually large ones greedily.
const maxCombinations = 20000

// links returns which of the free GPUs (by their place in free) share an NVLink, or nil
// when the node reports no NVLink at all.
func (st *state) links(g *group, free []int) [][]bool {
	gpus := st.nodes[g.node].n.GPUs
	known := false
	for _, p := range free {
		if len(gpus[g.pos[p]].NVLinkPeers) > 0 {
			known = true
			break
		}
	}
	if !known {
		return nil
	}
	link := make([][]bool, len(free))
	for i := range link {
		link[i] = make([]bool, len(free))
	}
	for i, p := range free {
		for _, peer := range gpus[g.pos[p]].NVLinkPeers {
			if q, ok := slices.BinarySearch(g.index, peer); ok {
				if j := slices.Index(free, q); j >= 0 && j != i {
					link[i][j], link[j][i] = true, true
				}
			}
		}
	}
	return link
}

// bestCombination searches every n-subset of free, in lexicographic order, for the one
// with the most links inside.
func bestCombination(free []int, n int, link [][]bool) []int {
	cur := make([]int, 0, n) // places in free
	best, bestScore := []int(nil), -1
	var walk func(start, score int)
	walk = func(start, score int) {
		if len(cur) == n {
			if score > bestScore {
				best, bestScore = slices.Clone(cur), score
			}
			return
		}
		for i := start; i <= len(free)-(n-len(cur)); i++ {
			add := 0
			for _, j := range cur {
				if link[i][j] {
					add++
				}
			}
			cur = append(cur, i)
			walk(i+1, score+add)
			cur = cur[:len(cur)-1]
		}
	}
	walk(0, 0)
	out := make([]int, n)
	for k, i := range best {
		out[k] = free[i]
	}
	return out
}

// greedySet grows a set from the lowest free GPU, each time adding the GPU with the most
// links into the set (lowest on ties).
func greedySet(free []int, n int, link [][]bool) []int {
	in := make([]bool, len(free))
	set := []int{0}
	in[0] = true
	for len(set) < n {
		best, bestLinks := -1, -1
		for i := range free {
			if in[i] {
				continue
			}
			k := 0
			for _, j := range set {
				if link[i][j] {
					k++
				}
			}
			if k > bestLinks {
				best, bestLinks = i, k
			}
		}
		in[best] = true
		set = append(set, best)
	}
	slices.Sort(set)
	out := make([]int, n)
	for k, i := range set {
		out[k] = free[i]
	}
	return out
}

// binomial is C(n, k), saturating above maxCombinations.
func binomial(n, k int) int {
	k = min(k, n-k)
	r := 1
	for i := 1; i <= k; i++ {
		r = r * (n - k + i) / i
		if r > maxCombinations {
			return maxCombinations + 1
		}
	}
	return r
}
