package cli

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Bounds of a job array, so a typo cannot submit millions of jobs.
const (
	maxArrayIndex = 999_999
	maxArraySize  = 10_000
)

// parseArray reads a job array spec (Slurm's --array syntax):
//
//	spec  = list [ "%" limit ]
//	list  = item { "," item }
//	item  = index | index "-" index [ ":" step ]
//
// index, limit and step are decimal numbers without a sign; a range includes both ends and
// its first index may not exceed its last; step and limit are 1 or more. Indices run from
// 0 to maxArrayIndex, no index may appear twice, and there are at most maxArraySize of
// them. It returns the indices in ascending order and the limit (0 when none is given).
func parseArray(spec string) (indices []int, limit int, err error) {
	list, lim, hasLimit := strings.Cut(spec, "%")
	if hasLimit {
		if limit, err = arrayNumber(lim, "limit"); err != nil {
			return nil, 0, fmt.Errorf("invalid array %q: %w", spec, err)
		}
		if limit < 1 {
			return nil, 0, fmt.Errorf("invalid array %q: the limit after %% must be 1 or more", spec)
		}
	}
	seen := map[int]bool{}
	for _, item := range strings.Split(list, ",") {
		first, last, step, err := arrayItem(item)
		if err != nil {
			return nil, 0, fmt.Errorf("invalid array %q: %w", spec, err)
		}
		// Count before expanding, so a huge range costs nothing.
		if len(indices)+(last-first)/step+1 > maxArraySize {
			return nil, 0, fmt.Errorf("invalid array %q: more than %d jobs", spec, maxArraySize)
		}
		for i := first; i <= last; i += step {
			if seen[i] {
				return nil, 0, fmt.Errorf("invalid array %q: index %d appears twice", spec, i)
			}
			seen[i] = true
			indices = append(indices, i)
		}
	}
	slices.Sort(indices)
	return indices, limit, nil
}

// arrayItem reads "N", "N-M" or "N-M:S".
func arrayItem(item string) (first, last, step int, err error) {
	if item == "" {
		return 0, 0, 0, errors.New("empty item; want e.g. 0-99, 1,3,5 or 0-10:2")
	}
	rng, st, hasStep := strings.Cut(item, ":")
	lo, hi, isRange := strings.Cut(rng, "-")
	if hasStep && !isRange {
		return 0, 0, 0, fmt.Errorf("%q: a step needs a range, e.g. 0-10:2", item)
	}
	if first, err = arrayNumber(lo, "index"); err != nil {
		return 0, 0, 0, err
	}
	last, step = first, 1
	if isRange {
		if last, err = arrayNumber(hi, "index"); err != nil {
			return 0, 0, 0, err
		}
		if last < first {
			return 0, 0, 0, fmt.Errorf("%q: the range runs backwards", item)
		}
	}
	if hasStep {
		if step, err = arrayNumber(st, "step"); err != nil {
			return 0, 0, 0, err
		}
		if step < 1 {
			return 0, 0, 0, fmt.Errorf("%q: the step must be 1 or more", item)
		}
	}
	return first, last, step, nil
}

// arrayNumber reads one unsigned decimal number of a spec, no larger than maxArrayIndex.
func arrayNumber(s, what string) (int, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%s %q is not a number", what, s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > maxArrayIndex {
		return 0, fmt.Errorf("%s %s is larger than %d", what, s, maxArrayIndex)
	}
	return n, nil
}
