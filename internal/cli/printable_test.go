package cli

import (
	"encoding/json"
	"reflect"
	"testing"
)

var printableSeeds = []string{"", "a", " a", "a ", "a  b", "a b", "a\tb", "\x1b[31m", "Ünïcödé ok", "x\u202e", "del\x7f", "\xff", "~!", "  ", "a\u00a0b"}

// printable is the shortcut cleanStrings takes past clean: it must agree with clean on
// every string, or a dirty one would reach the terminal.
func FuzzPrintable(f *testing.F) {
	for _, s := range printableSeeds {
		f.Add(s)
	}
	f.Fuzz(checkPrintable)
}

func checkPrintable(t *testing.T, s string) {
	if got, want := printable(s), clean(s) == s; got != want {
		t.Errorf("printable(%q) = %v, but clean gives %q", s, got, clean(s))
	}
}

type strand struct {
	Next *strand
	N    int
}

type tree struct {
	Kids []tree
	Name string
}

type left struct {
	R *right
	S string
}

type right struct{ L *left }

func TestHoldsStrings(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want bool
	}{
		{0, false},
		{"", true},
		{[]byte(nil), false},
		{json.RawMessage(nil), false},
		{[4]uint8{}, false},
		{struct {
			N int
			s string
		}{}, false},
		{struct{ S []string }{}, true},
		{map[int]bool{}, false},
		{map[string]int{}, true},
		{map[int][]*string{}, true},
		{struct{ V any }{}, true},
		{strand{}, false},
		{tree{}, true},
		{right{}, true}, // through left, which is met on the way back to right
	} {
		if got := holdsStrings(reflect.TypeOf(tc.v)); got != tc.want {
			t.Errorf("holdsStrings(%T) = %v, want %v", tc.v, got, tc.want)
		}
	}
}

// cleanStrings reaches every string a decoded answer holds, however deep, and leaves a
// clean answer as it was.
func TestCleanStringsReachesEveryString(t *testing.T) {
	type inner struct {
		Env   map[string]string
		Tags  []string
		Any   any
		Bytes []byte
	}
	type outer struct {
		Name  string
		Ptr   *inner
		List  []inner
		ByKey map[string][]string
		Count int
	}
	dirty := "a\x1b[2J\nb"
	v := outer{
		Name:  dirty,
		Ptr:   &inner{Env: map[string]string{"K": dirty, dirty: "v", "ok": "fine"}, Tags: []string{"x", dirty}, Any: dirty, Bytes: []byte(dirty)},
		List:  []inner{{Any: map[string]any{"k": dirty}}},
		ByKey: map[string][]string{dirty: {dirty}},
		Count: 3,
	}
	cleanStrings(reflect.ValueOf(&v))
	raw, _ := json.Marshal(v)
	var seen []string
	var walk func(x any)
	walk = func(x any) {
		switch x := x.(type) {
		case string:
			seen = append(seen, x)
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			for k, e := range x {
				seen = append(seen, k)
				walk(e)
			}
		}
	}
	var back any
	json.Unmarshal(raw, &back)
	walk(back)
	for _, s := range seen {
		if !printable(s) {
			t.Errorf("%q left unclean in %s", s, raw)
		}
	}
	if string(v.Ptr.Bytes) != dirty {
		t.Errorf("raw bytes changed: %q", v.Ptr.Bytes)
	}
	if v.Count != 3 || v.Ptr.Env["ok"] != "fine" || v.Ptr.Env[`a\x1b[2J b`] != "v" {
		t.Errorf("what was clean changed, or a dirty key was lost: %+v", v.Ptr.Env)
	}

	clean := map[string]string{"a": "b"}
	before := reflect.ValueOf(clean).UnsafePointer()
	c := struct{ M map[string]string }{clean}
	cleanStrings(reflect.ValueOf(&c))
	if reflect.ValueOf(c.M).UnsafePointer() != before {
		t.Error("a clean map of strings was made again")
	}
}
