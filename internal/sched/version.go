package sched

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Version ranges say which driver or CUDA versions a job accepts (Request.CUDA,
// Request.Driver) or a pool wants. A range is a comma-separated conjunction of
// comparisons, each an operator (>=, >, <=, <, = or ==; none means =) and a dotted
// numeric version of any depth: ">=12.4,<13", ">=550", "=535.104.05". Versions compare
// number by number, a missing number counting as 0: 12.4 = 12.4.0 < 12.4.1, and
// 535.104.05 = 535.104.5. A range that no version satisfies (">=13,<12") is refused.

// Bounds on a range's text, so that a range is cheap to parse and to show.
const (
	MaxVersionRange  = 128 // characters
	maxVersionTerms  = 8
	maxVersionDepth  = 8 // numbers in one version
	maxVersionDigits = 9 // digits in one number
)

// VersionRange is a parsed range. The zero value is no constraint: every version matches.
type VersionRange struct {
	text  string
	terms []versionTerm
}

type versionTerm struct {
	op string // ">=", ">", "<=", "<" or "="
	v  version
}

// version is a dotted numeric version without its trailing zeros, so that 12.4 and
// 12.4.0 are one version.
type version []uint32

// ErrVersionRangeEmpty is wrapped by ParseVersionRange's error for a range that no
// version satisfies.
var ErrVersionRangeEmpty = errors.New("matches no version")

// versionSyntax is what a range may hold, for error messages.
const versionSyntax = "comparisons like >=12.4 or >=550,<560: operators >=, >, <=, <, =, ==, " +
	"versions of dotted numbers like 535.104.05, several joined by commas"

// ParseVersionRange reads a range; empty text (or only spaces) is the zero range, no
// constraint. Its error says what is wrong and what is allowed, without naming a field.
func ParseVersionRange(text string) (VersionRange, error) {
	text = strings.TrimSpace(text)
	if text == "" {
		return VersionRange{}, nil
	}
	if len(text) > MaxVersionRange {
		return VersionRange{}, fmt.Errorf("is %d characters long; at most %d are allowed", len(text), MaxVersionRange)
	}
	parts := strings.Split(text, ",")
	if len(parts) > maxVersionTerms {
		return VersionRange{}, fmt.Errorf("%q has %d comparisons; at most %d are allowed", text, len(parts), maxVersionTerms)
	}
	r := VersionRange{terms: make([]versionTerm, 0, len(parts))}
	canon := make([]string, 0, len(parts))
	for _, p := range parts {
		p = strings.TrimSpace(p)
		op := ""
		for _, o := range []string{">=", "<=", "==", ">", "<", "="} {
			if strings.HasPrefix(p, o) {
				op = o
				break
			}
		}
		vtext := strings.TrimSpace(p[len(op):])
		v, err := parseVersion(vtext)
		if err != nil {
			return VersionRange{}, fmt.Errorf("%q is not a version range: %v; use %s", text, err, versionSyntax)
		}
		if op == "" || op == "==" {
			op = "="
		}
		r.terms = append(r.terms, versionTerm{op, v})
		canon = append(canon, op+vtext)
	}
	r.text = strings.Join(canon, ",")
	if !r.matchVersion(r.witness()) {
		return VersionRange{}, fmt.Errorf("%q %w", text, ErrVersionRangeEmpty)
	}
	return r, nil
}

// parseVersion reads a dotted numeric version.
func parseVersion(s string) (version, error) {
	if s == "" {
		return nil, errors.New("a comparison without a version")
	}
	var buf [maxVersionDepth]uint32
	v, ok := scanVersion(s, &buf)
	switch {
	case ok:
		return slices.Clone(v), nil
	case strings.Count(s, ".") >= maxVersionDepth:
		return nil, fmt.Errorf("version %q has %d numbers; at most %d are allowed", s, strings.Count(s, ".")+1, maxVersionDepth)
	}
	return nil, fmt.Errorf("version %q is not dotted numbers of at most %d digits each", s, maxVersionDigits)
}

// scanVersion reads a dotted numeric version into buf without allocating, since Match
// runs it for every node the scheduler considers; the version returned is buf's, without
// trailing zeros.
func scanVersion(s string, buf *[maxVersionDepth]uint32) (version, bool) {
	n, digits := 0, 0
	var x uint32
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			if digits == 0 || n == maxVersionDepth {
				return nil, false
			}
			buf[n], n, x, digits = x, n+1, 0, 0
			continue
		}
		c := s[i]
		if c < '0' || c > '9' || digits == maxVersionDigits {
			return nil, false
		}
		x, digits = x*10+uint32(c-'0'), digits+1
	}
	for n > 0 && buf[n-1] == 0 {
		n--
	}
	return buf[:n], true
}

// compareVersions orders two versions number by number, a missing number counting as 0.
func compareVersions(a, b version) int {
	for i := range max(len(a), len(b)) {
		var x, y uint32
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if c := cmp.Compare(x, y); c != 0 {
			return c
		}
	}
	return 0
}

// witness is a version the range matches if any version does: its greatest lower bound,
// or for a strict one a version just above it, deeper than any version of the range (so
// below every upper bound above the lower one); 0 without a lower bound.
func (r VersionRange) witness() version {
	var lo version
	strict, depth := false, 0
	for _, t := range r.terms {
		depth = max(depth, len(t.v))
		if t.op == "<" || t.op == "<=" {
			continue
		}
		switch c := compareVersions(t.v, lo); {
		case c > 0:
			lo, strict = t.v, t.op == ">"
		case c == 0 && t.op == ">":
			strict = true
		}
	}
	if !strict {
		return lo
	}
	w := make(version, depth+1)
	copy(w, lo)
	w[depth] = 1
	return w
}

// IsZero reports whether the range is no constraint.
func (r VersionRange) IsZero() bool { return len(r.terms) == 0 }

// String is the range as parsed, without spaces and with == written =; "" for the zero
// range. It parses back to the same range.
func (r VersionRange) String() string { return r.text }

// Match reports whether a reported version is in the range. A version that is empty or
// not dotted numbers matches only the zero range: a node that reports no version does
// not satisfy a constraint.
func (r VersionRange) Match(reported string) bool {
	if r.IsZero() {
		return true
	}
	var buf [maxVersionDepth]uint32
	v, ok := scanVersion(strings.TrimSpace(reported), &buf)
	return ok && r.matchVersion(v)
}

func (r VersionRange) matchVersion(v version) bool {
	for _, t := range r.terms {
		c := compareVersions(v, t.v)
		var ok bool
		switch t.op {
		case ">=":
			ok = c >= 0
		case ">":
			ok = c > 0
		case "<=":
			ok = c <= 0
		case "<":
			ok = c < 0
		default:
			ok = c == 0
		}
		if !ok {
			return false
		}
	}
	return true
}
