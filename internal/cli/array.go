package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/rotahq/rota/internal/api"
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

// jobRef names a job as a person types it: 42, #42, or 40_3 for index 3 of array 40
// (Slurm's notation).
type jobRef struct {
	id      int64
	element bool // id is an array's, and index the element's
	index   int
}

func (r jobRef) String() string {
	if r.element {
		return fmt.Sprintf("%d_%d", r.id, r.index)
	}
	return strconv.FormatInt(r.id, 10)
}

// parseJobRef reads a job ID or ARRAY_INDEX.
func parseJobRef(s string) (jobRef, error) {
	id, index, ok := strings.Cut(s, "_")
	if !ok {
		n, err := parseJobID(s)
		return jobRef{id: n}, err
	}
	n, err := parseJobID(id)
	if err != nil {
		return jobRef{}, fmt.Errorf("invalid job %q: want ID or ARRAY_INDEX, e.g. 42 or 40_3", s)
	}
	i, err := arrayNumber(index, "index")
	if err != nil {
		return jobRef{}, fmt.Errorf("invalid job %q: %w", s, err)
	}
	return jobRef{id: n, element: true, index: i}, nil
}

// isArrayHead reports whether j is the first job of an array, whose ID is the array's.
func isArrayHead(j api.Job) bool {
	return j.ArrayIndex != nil && j.ArrayID == j.ID
}

// jobID returns the ID of the job ref names, asking the server where ref names an element
// of an array.
func (c *Client) jobID(ctx context.Context, ref jobRef) (int64, error) {
	if !ref.element {
		return ref.id, nil
	}
	return c.arrayElement(ctx, ref.id, ref.index)
}

// arrayElement returns the job ID of the element of array id with the given index. An
// array's jobs have consecutive IDs in the order of its sorted indices, so the array's
// spec says where the element is; the job found there must then say it is that element,
// so that a spec read wrong can never act on some other job.
func (c *Client) arrayElement(ctx context.Context, id int64, index int) (int64, error) {
	d, err := c.GetJob(ctx, id)
	if err != nil {
		return 0, err
	}
	head := d.Job
	switch {
	case head.ArrayID == 0 || head.ArrayIndex == nil:
		return 0, fmt.Errorf("job %d is not an array", id)
	case head.ArrayID != id:
		return 0, fmt.Errorf("job %d is index %d of array %d; name it %d_%d", id, *head.ArrayIndex, head.ArrayID, head.ArrayID, *head.ArrayIndex)
	}
	pos := index - *head.ArrayIndex // an array without a spec to read is taken as dense, and checked
	if head.Spec.Array != "" {
		indices, _, err := parseArray(head.Spec.Array)
		if err != nil {
			return 0, fmt.Errorf("array %d: %w", id, err)
		}
		var found bool
		if pos, found = slices.BinarySearch(indices, index); !found {
			return 0, fmt.Errorf("array %d has no index %d (its indices are %s)", id, index, head.Spec.Array)
		}
	}
	if pos < 0 {
		return 0, fmt.Errorf("array %d has no index %d", id, index)
	}
	elem := head
	if pos > 0 {
		d, err := c.GetJob(ctx, id+int64(pos))
		if err != nil {
			return 0, fmt.Errorf("index %d of array %d: %w", index, id, err)
		}
		elem = d.Job
	}
	if elem.ArrayID != id || elem.ArrayIndex == nil || *elem.ArrayIndex != index {
		return 0, fmt.Errorf("array %d has no index %d: job %d is not it", id, index, elem.ID)
	}
	return elem.ID, nil
}
