package cli

import (
	"reflect"
	"sync"
)

// cleanStrings makes every string reachable from v (a pointer to a decoded answer) safe to
// print, as clean does: fields, list items, map keys and values, at any depth. The client
// runs it on every answer it decodes for table output, so that no renderer, present or
// future, can pass a control character or a line break the server relayed (a GPU model an
// agent made up, a job name, a reason) to the terminal. JSON output is left as sent: its
// encoder escapes control characters itself.
//
// It walks only what can hold a string, and leaves a string, or a map of strings, alone
// when it is already clean: a page of 500 jobs is mostly numbers, times and clean text.
func cleanStrings(v reflect.Value) {
	if !holdsStrings(v.Type()) {
		return
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return
		}
		if v.Kind() == reflect.Interface {
			// What an interface holds cannot be set in place: clean a copy.
			c := reflect.New(v.Elem().Type()).Elem()
			c.Set(v.Elem())
			cleanStrings(c)
			if v.CanSet() {
				v.Set(c)
			}
			return
		}
		cleanStrings(v.Elem())
	case reflect.String:
		if s := v.String(); v.CanSet() && !printable(s) {
			v.SetString(clean(s))
		}
	case reflect.Struct:
		for _, i := range stringFields(v.Type()) {
			cleanStrings(v.Field(i))
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			cleanStrings(v.Index(i))
		}
	case reflect.Map:
		if v.IsNil() || cleanStringMap(v) {
			return
		}
		out := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			k := reflect.New(v.Type().Key()).Elem()
			k.Set(it.Key())
			cleanStrings(k)
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(it.Value())
			cleanStrings(e)
			out.SetMapIndex(k, e)
		}
		if v.CanSet() {
			v.Set(out)
		} else {
			v.Clear()
			for it := out.MapRange(); it.Next(); {
				v.SetMapIndex(it.Key(), it.Value())
			}
		}
	}
}

// cleanStringMap reports whether m is a map of strings to strings that is clean already.
func cleanStringMap(m reflect.Value) bool {
	if m.Type().Key().Kind() != reflect.String || m.Type().Elem().Kind() != reflect.String {
		return false
	}
	for it := m.MapRange(); it.Next(); {
		if !printable(it.Key().String()) || !printable(it.Value().String()) {
			return false
		}
	}
	return true
}

// printable reports whether clean(s) == s: at once for plain ASCII text, else by asking
// clean.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == ' ':
			// clean trims blanks at the ends and makes a run of them one.
			if i == 0 || i == len(s)-1 || s[i+1] == ' ' {
				return false
			}
		case c < 0x21 || c > 0x7e: // a control character, or not ASCII
			return clean(s) == s
		}
	}
	return true
}

// Which types hold strings, and which fields of a struct type do, found once per type.
var (
	holding sync.Map // reflect.Type → bool
	fields  sync.Map // reflect.Type → []int
)

// holdsStrings reports whether a value of type t can hold a string cleanStrings would
// reach: through exported fields, elements, keys and values, and pointers; any interface
// may. Raw bytes ([]byte, json.RawMessage) are not walked: they are shown, if ever,
// through a renderer of their own.
func holdsStrings(t reflect.Type) bool {
	if h, ok := holding.Load(t); ok {
		return h.(bool)
	}
	h := reaches(t, map[reflect.Type]bool{})
	holding.Store(t, h)
	return h
}

// reaches is holdsStrings without the memo, seen being the types on the way to t: a type
// met again adds no string the first meeting does not find.
func reaches(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.String, reflect.Interface:
		return true
	case reflect.Pointer:
		return reaches(t.Elem(), seen)
	case reflect.Slice, reflect.Array:
		return t.Elem().Kind() != reflect.Uint8 && reaches(t.Elem(), seen)
	case reflect.Map:
		return reaches(t.Key(), seen) || reaches(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && reaches(f.Type, seen) {
				return true
			}
		}
	}
	return false
}

// stringFields is the indices of the exported fields of struct type t that can hold a
// string.
func stringFields(t reflect.Type) []int {
	if f, ok := fields.Load(t); ok {
		return f.([]int)
	}
	var out []int
	for i := range t.NumField() {
		if f := t.Field(i); f.IsExported() && holdsStrings(f.Type) {
			out = append(out, i)
		}
	}
	fields.Store(t, out)
	return out
}
