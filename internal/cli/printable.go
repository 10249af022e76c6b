package cli

import "reflect"

// cleanStrings makes every string reachable from v (a pointer to a decoded answer) safe to
// print, as clean does: fields, list items, map keys and values, at any depth. The client
// runs it on every answer it decodes for table output, so that no renderer, present or
// future, can pass a control character or a line break the server relayed (a GPU model an
// agent made up, a job name, a reason) to the terminal. JSON output is left as sent: its
// encoder escapes control characters itself.
func cleanStrings(v reflect.Value) {
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
		if v.CanSet() {
			if s := v.String(); s != clean(s) {
				v.SetString(clean(s))
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				cleanStrings(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return // raw bytes (json.RawMessage): shown, if ever, through a renderer of their own
		}
		for i := range v.Len() {
			cleanStrings(v.Index(i))
		}
	case reflect.Map:
		if v.IsNil() {
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
