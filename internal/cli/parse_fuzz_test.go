package cli

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var sizeSeeds = []string{
	"512M", "16G", "1T", "1.5T", "16GiB", "16GB", "16gb", "2048", "0", ".5", " 64G ", "1 G",
	"-1G", "-0", "16X", "1e3", "5.", "0x10", "", "G", "1125899906842624", "1125899906842625",
	"1099511627776G", "99999999999999999999999T", "NaN", "Inf", "1.0000000000000001M",
}

// FuzzParseSize reads a fuzzed memory size. Oracle: an accepted size is 0 to 2^50 MB, reads
// back the same from its own megabytes (bare and with M, and in G when whole), and does not
// depend on the case of its unit.
func FuzzParseSize(f *testing.F) {
	for _, s := range sizeSeeds {
		f.Add(s)
	}
	f.Fuzz(checkParseSize)
}

func checkParseSize(t *testing.T, s string) {
	mb, err := ParseSize(s)
	if err != nil {
		return
	}
	if mb < 0 || mb > 1<<50 {
		t.Fatalf("ParseSize(%q) = %d, outside 0..2^50", s, mb)
	}
	same := []string{strconv.FormatInt(mb, 10), strconv.FormatInt(mb, 10) + "M", strconv.FormatInt(mb, 10) + "MiB"}
	if mb%1024 == 0 {
		same = append(same, strconv.FormatInt(mb/1024, 10)+"G", strconv.FormatInt(mb/1024, 10)+"gb")
	}
	for _, v := range same {
		if got, err := ParseSize(v); err != nil || got != mb {
			t.Fatalf("ParseSize(%q) = %d, but ParseSize(%q) = %d, %v", s, mb, v, got, err)
		}
	}
	if isASCII(s) {
		lo, errLo := ParseSize(strings.ToLower(s))
		up, errUp := ParseSize(strings.ToUpper(s))
		if errLo != nil || errUp != nil || lo != mb || up != mb {
			t.Fatalf("ParseSize(%q) = %d, but lower case gives %d, %v and upper case %d, %v", s, mb, lo, errLo, up, errUp)
		}
	}
}

func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

var durationSeeds = []string{
	"90m", "2h30m", "4h", "30s", "1.5h", "1ns", "0", "0s", "90", "04:00:00", "10:30", "1-12",
	"1-12:30", "1-12:00:00", "0-00:00:01", " 2h ", "-1h", "-5", "soon", "", "1-", ":30", "1:2:3:4",
	"999999999-23:59:59", "9999999999", "2562047h", "2562047h47m17s", "9223372036", "9223372036854775807",
	"+5", "٣",
	// Within a second of the largest Go duration, where rounding up once overflowed.
	"2562047h47m16s", "2562047h47m16.854775807s",
}

// FuzzParseDuration reads a fuzzed time limit (--time) and grace period (--grace).
// Oracle: an accepted value is 0 or more seconds; a time limit reads back the same from
// its own seconds written as a Go duration and in Slurm's D-HH:MM:SS, and a grace from its
// bare seconds.
func FuzzParseDuration(f *testing.F) {
	for _, s := range durationSeeds {
		f.Add(s)
	}
	f.Fuzz(checkParseDuration)
}

func checkParseDuration(t *testing.T, s string) {
	if v, err := parseTimeLimit(s); err == nil {
		if v < 0 {
			t.Fatalf("parseTimeLimit(%q) = %d, a negative time limit", s, v)
		}
		if v <= int64(time.Duration(1<<63-1)/time.Second)-1 {
			goForm := strconv.FormatInt(v, 10) + "s"
			if got, err := parseTimeLimit(goForm); err != nil || got != v {
				t.Fatalf("parseTimeLimit(%q) = %d, but parseTimeLimit(%q) = %d, %v", s, v, goForm, got, err)
			}
		}
		slurm := fmt.Sprintf("%d-%02d:%02d:%02d", v/86400, v%86400/3600, v%3600/60, v%60)
		if got, err := parseTimeLimit(slurm); v/86400 < 1e9 && (err != nil || got != v) {
			t.Fatalf("parseTimeLimit(%q) = %d, but parseTimeLimit(%q) = %d, %v", s, v, slurm, got, err)
		}
	}
	if v, err := parseGrace(s); err == nil {
		if v < 0 {
			t.Fatalf("parseGrace(%q) = %d, a negative grace", s, v)
		}
		bare := strconv.FormatInt(v, 10)
		if got, err := parseGrace(bare); err != nil || got != v {
			t.Fatalf("parseGrace(%q) = %d, but parseGrace(%q) = %d, %v", s, v, bare, got, err)
		}
	}
}

var arraySeeds = []string{
	"0-99", "0-99%8", "1,3,5", "0-10:2", "0-9,20-29%4", "7", "0", "999999", "0-9999", "0-999999:100",
	"0-10000", "1000000", "0-999999", "9-0", "1,1", "0-4,2", "0-10:0", "5:2", "0-10:2:3", "%3", "1%0",
	"1%", "1%-1", ",", "1,", "-1", "+1", " 1", "1-", "-", "0x10", "1%99999999999999999999", "",
}

// FuzzParseArray reads a fuzzed --array spec. Oracle: accepted indices ascend strictly,
// lie in 0..maxArrayIndex and number 1 to maxArraySize; the limit is 0 or at least 1; the
// indices written back as a list read back the same; describing the submit never panics.
func FuzzParseArray(f *testing.F) {
	for _, s := range arraySeeds {
		f.Add(s)
	}
	f.Fuzz(checkParseArray)
}

func checkParseArray(t *testing.T, s string) {
	indices, limit, err := parseArray(s)
	if err != nil {
		if !strings.Contains(err.Error(), "invalid array") {
			t.Fatalf("parseArray(%q): error %q does not say what is wrong", s, err)
		}
		return
	}
	if len(indices) == 0 || len(indices) > maxArraySize {
		t.Fatalf("parseArray(%q): %d indices", s, len(indices))
	}
	for i, x := range indices {
		if x < 0 || x > maxArrayIndex || (i > 0 && x <= indices[i-1]) {
			t.Fatalf("parseArray(%q): indices %v not ascending within 0..%d", s, indices, maxArrayIndex)
		}
	}
	if limit < 0 || (strings.Contains(s, "%") && limit < 1) {
		t.Fatalf("parseArray(%q): limit %d", s, limit)
	}
	list := make([]string, len(indices))
	for i, x := range indices {
		list[i] = strconv.Itoa(x)
	}
	again := strings.Join(list, ",")
	if limit > 0 {
		again += "%" + strconv.Itoa(limit)
	}
	back, backLimit, err := parseArray(again)
	if err != nil || !slices.Equal(back, indices) || backLimit != limit {
		t.Fatalf("parseArray(%q) = %v %%%d, but written back as %q it reads as %v %%%d, %v", s, indices, limit, again, back, backLimit, err)
	}
	describeArraySubmit(1, s)
}

var jobRefSeeds = []string{
	"42", "#42", "40_3", "40_0", "1_999999", "1_1000000", "0", "-1", "0_1", "40_", "_3", "40_-1",
	"40_+1", "40_3_4", "#40_3", "9223372036854775807", "9223372036854775808", "40,41", " 42", "",
}

// FuzzParseJobRef reads a fuzzed job reference (ID, #ID or ARRAY_INDEX) and job ID list.
// Oracle: an accepted reference has a positive ID and, for an element, an index in
// 0..maxArrayIndex, and its String reads back the same; accepted ID lists are positive.
func FuzzParseJobRef(f *testing.F) {
	for _, s := range jobRefSeeds {
		f.Add(s)
	}
	f.Fuzz(checkParseJobRef)
}

func checkParseJobRef(t *testing.T, s string) {
	if ref, err := parseJobRef(s); err == nil {
		if ref.id <= 0 || (ref.element && (ref.index < 0 || ref.index > maxArrayIndex)) {
			t.Fatalf("parseJobRef(%q) = %+v, out of bounds", s, ref)
		}
		if back, err := parseJobRef(ref.String()); err != nil || back != ref {
			t.Fatalf("parseJobRef(%q) = %+v, but parseJobRef(%q) = %+v, %v", s, ref, ref.String(), back, err)
		}
	}
	if ids, err := parseJobIDs(s); err == nil {
		if len(ids) == 0 {
			t.Fatalf("parseJobIDs(%q) accepted no IDs", s)
		}
		for _, id := range ids {
			if id <= 0 {
				t.Fatalf("parseJobIDs(%q) = %v, not all positive", s, ids)
			}
		}
	}
}
