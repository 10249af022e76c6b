package sched

import (
	"errors"
	"strings"
	"testing"

	"github.com/rotahq/rota/internal/fuzztest"
)

func TestParseVersionRange(t *testing.T) {
	for _, tc := range []struct {
		text, canon string
		match       []string
		miss        []string
	}{
		{"", "", []string{"12.4", "", "junk"}, nil},
		{">=12.4", ">=12.4", []string{"12.4", "12.4.0", "12.10", "13"}, []string{"12.3.99", "12", "", "12.4-beta"}},
		{" >= 12.4 , < 13 ", ">=12.4,<13", []string{"12.4", "12.9.1"}, []string{"13", "13.0.0", "11.8"}},
		{">550", ">550", []string{"550.0.1", "550.54.15", "551"}, []string{"550", "550.0", "549.99"}},
		{"<=535.104.05", "<=535.104.05", []string{"535.104.5", "535.104.05", "535.54.03", "470"}, []string{"535.104.6", "550"}},
		{"==12.2", "=12.2", []string{"12.2", "12.2.0"}, []string{"12.2.1", "12.20"}},
		{"12.2", "=12.2", []string{"12.2.0"}, []string{"12.3"}},
		{">=1.2.3.4.5.6.7.8", ">=1.2.3.4.5.6.7.8", []string{"1.2.3.4.5.6.7.9", "2"}, []string{"1.2.3.4.5.6.7.7"}},
		{">12,<12.0.0.1", ">12,<12.0.0.1", []string{"12.0.0.0.5"}, []string{"12", "12.0.0.1"}},
		{">=12,<=12", ">=12,<=12", []string{"12.0"}, []string{"12.0.1"}},
	} {
		t.Run(tc.text, func(t *testing.T) {
			r, err := ParseVersionRange(tc.text)
			if err != nil {
				t.Fatalf("ParseVersionRange(%q): %v", tc.text, err)
			}
			if r.String() != tc.canon {
				t.Errorf("String() = %q, want %q", r.String(), tc.canon)
			}
			for _, v := range tc.match {
				if !r.Match(v) {
					t.Errorf("%q does not match %q", tc.text, v)
				}
			}
			for _, v := range tc.miss {
				if r.Match(v) {
					t.Errorf("%q matches %q", tc.text, v)
				}
			}
		})
	}
}

func TestParseVersionRangeErrors(t *testing.T) {
	for _, tc := range []struct {
		text, want string
		empty      bool
	}{
		{">=13,<12", "matches no version", true},
		{">12,<=12", "matches no version", true},
		{"=12,=13", "matches no version", true},
		{"<0", "matches no version", true},
		{">=12,<12.0", "matches no version", true},
		{"abc", "use comparisons like >=12.4", false},
		{">=", "a comparison without a version", false},
		{">=12,", "a comparison without a version", false},
		{"=>12", "not dotted numbers", false},
		{"~12.4", "not dotted numbers", false},
		{"12..4", "not dotted numbers", false},
		{"12.4-1", "not dotted numbers", false},
		{">=1234567890", "at most 9 digits", false},
		{">=1.2.3.4.5.6.7.8.9", "at most 8 are allowed", false},
		{strings.Repeat(">1,", 9) + ">1", "at most 8 are allowed", false},
		{">=" + strings.Repeat("1", 200), "at most 128 are allowed", false},
	} {
		t.Run(tc.text, func(t *testing.T) {
			r, err := ParseVersionRange(tc.text)
			if err == nil {
				t.Fatalf("ParseVersionRange(%q) = %q, want an error", tc.text, r)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if errors.Is(err, ErrVersionRangeEmpty) != tc.empty {
				t.Errorf("error %q: errors.Is(ErrVersionRangeEmpty) = %v, want %v", err, !tc.empty, tc.empty)
			}
		})
	}
}

var versionRangeSeeds = []string{"", ">=12.4", ">=12.4,<13", "=535.104.05", "==12.2", ">550", "<=0", ">=13,<12",
	">12,<12.0.0.1", "12", " > 1 , < 2 ", "abc", ">=", "1.2.3.4.5.6.7.8"}

// FuzzVersionRange: parsing never panics; a parsed range prints as text that parses back
// to the same range, and matches its witness (it matches some version); a refused range
// is either bad text or one whose witness misses.
func FuzzVersionRange(f *testing.F) {
	for _, s := range versionRangeSeeds {
		f.Add(s, "12.4")
	}
	f.Fuzz(checkVersionRange)
}

func checkVersionRange(t *testing.T, text, reported string) {
	r, err := ParseVersionRange(text)
	if err != nil {
		if r.String() != "" || !r.IsZero() {
			t.Fatalf("ParseVersionRange(%q) failed (%v) but returned %q", text, err, r)
		}
		return
	}
	if !r.IsZero() && !r.matchVersion(r.witness()) {
		t.Fatalf("%q: accepted but matches no version", text)
	}
	again, err := ParseVersionRange(r.String())
	if err != nil {
		t.Fatalf("%q prints as %q, which does not parse: %v", text, r.String(), err)
	}
	if again.String() != r.String() || again.Match(reported) != r.Match(reported) {
		t.Fatalf("%q and its printed form %q differ on %q", text, r.String(), reported)
	}
	if v, err := parseVersion(reported); err == nil && r.Match(reported) != r.matchVersion(v) {
		t.Fatalf("%q: Match(%q) differs from matching its parsed version", text, reported)
	}
}

// TestVersionRangeFuzzMutations runs FuzzVersionRange's body on the fixed-seed mutator's
// inputs (scripts/fuzz runs the engine).
func TestVersionRangeFuzzMutations(t *testing.T) {
	for i, in := range fuzztest.Mutations(versionRangeSeeds, []string{">=", "<", ",", ".", "=="}, 500) {
		checkVersionRange(t, in, versionRangeSeeds[i%len(versionRangeSeeds)])
	}
}

// Match runs for every node the scheduler considers for a job with a range: it must not
// allocate.
func TestVersionMatchDoesNotAllocate(t *testing.T) {
	r, err := ParseVersionRange(">=12.4,<13")
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { r.Match("12.8.1") }); n != 0 {
		t.Errorf("Match allocates %v times", n)
	}
}
