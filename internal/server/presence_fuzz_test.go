package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// FuzzCheckPresence holds the one-pass walk of checkPresence to the walk it replaced,
// which decoded every level into maps (checkPresenceByMaps, kept here as the reference):
// both refuse the same bodies. (Which fault of several the reference named depended on
// the order of a map, so the field named is held by the unit tests of strict_test.go.)
// Bodies are anything encoding/json accepts as a heartbeat or a job spec.
func FuzzCheckPresence(f *testing.F) {
	const rest = `"tasks":[],"agent_time":"2026-11-01T09:00:00Z","instance":"agent-n1","synced":true`
	for _, seed := range []string{
		`{}`,
		`{"node":"n1","inventory":{"cpus":4,"memory_mb":1,"gpus":[],"device_source":"fake"},` + rest + `}`,
		`{"node":"n1","inventory":{"cpus":4,"memory_mb":1,"device_source":"fake","gpus":[{"index":0,"uuid":"u","model":null,"memory_mb":1,"healthy":true}]},` + rest + `}`,
		`{"node":"n1","inventory":{"cpus":4,"memory_mb":1,"gpus":[],"device_source":"fake"},"tasks":[{"job_id":1,"attempt":1}],"agent_time":"2026-11-01T09:00:00Z","instance":"agent-n1","synced":true}`,
		`{"node":"n\u0031","inventory":{"cpus":4,"memory_mb":1,"gpus":null,"device_source":"f\"ake"},"tasks":null,"agent_time":"2026-11-01T09:00:00Z","instance":"a","synced":true,"telemetry":{"time":"2026-11-01T09:00:00Z","gpus":[{"index":0,"utilization_pct":null}]}}`,
		`{"command":["x"],"gpus":null}`,
		`{"command":null}`,
		`{"command":["x"],"env":{"A":"1","B":null},"labels":{"k":"v"}}`,
		`{"command":["x"],"deps":[],"\u0067pus":2}`,
	} {
		f.Add([]byte(seed), true)
		f.Add([]byte(seed), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, heartbeat bool) {
		var v any = &api.JobSpec{}
		if heartbeat {
			v = &api.Heartbeat{}
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		// What follows the value may be JSON's whitespace alone, as decodeJSON has it: a
		// form feed, say, is refused there (the corpus keeps the body that showed it).
		if dec.Decode(v) != nil || len(bytes.TrimLeft(body[dec.InputOffset():], " \t\r\n")) > 0 || bytes.Equal(bytes.TrimSpace(body), []byte("null")) {
			return // decodeJSON refuses it before checkPresence
		}
		typ := reflect.TypeOf(v)
		got, want := checkPresence(body, typ, ""), checkPresenceByMaps(body, typ, "")
		if (got == nil) != (want == nil) && !hasDuplicateKeys(body) {
			t.Fatalf("%s: one-pass walk says %s, the walk by maps %s", body, describeErr(got), describeErr(want))
		}
	})
}

func describeErr(e *api.Error) string {
	if e == nil {
		return "nothing"
	}
	return fmt.Sprintf("%q (%s)", e.Field, e.Message)
}

// hasDuplicateKeys reports whether some object in body names a key twice: the walk by
// maps kept only the last, the one-pass walk checks each.
func hasDuplicateKeys(body []byte) bool {
	dup := false
	dec := json.NewDecoder(bytes.NewReader(body))
	depthKeys := []map[string]bool{}
	expectKey := []bool{}
	for {
		tok, err := dec.Token()
		if err != nil {
			break
		}
		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '{':
				depthKeys = append(depthKeys, map[string]bool{})
				expectKey = append(expectKey, true)
				continue
			case '[':
				depthKeys = append(depthKeys, nil)
				expectKey = append(expectKey, false)
				continue
			default:
				depthKeys, expectKey = depthKeys[:len(depthKeys)-1], expectKey[:len(expectKey)-1]
			}
		case string:
			if n := len(depthKeys); n > 0 && depthKeys[n-1] != nil && expectKey[n-1] {
				if depthKeys[n-1][tok] {
					dup = true
				}
				depthKeys[n-1][tok] = true
				expectKey[n-1] = false
				continue
			}
		}
		if n := len(expectKey); n > 0 && depthKeys[n-1] != nil {
			expectKey[n-1] = true
		}
	}
	return dup
}

func checkPresenceByMaps(data []byte, t reflect.Type, path string) *api.Error {
	null := bytes.Equal(bytes.TrimSpace(data), []byte("null"))
	for t.Kind() == reflect.Pointer {
		if null {
			return nil
		}
		t = t.Elem()
	}
	if null {
		switch t.Kind() {
		case reflect.Slice, reflect.Map, reflect.Interface:
			return nil
		}
		return invalid(path, "must not be null: leave the field out or give %s", jsonKind(t))
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil // a type that reads itself, like time.Time
	}
	if !bytes.Contains(data, []byte("null")) && !holdsRequired(t) {
		// Nothing below can be null or missing a required field: no need to walk it
		// (most of a heartbeat's telemetry, say, on every heartbeat).
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) != nil {
			return nil
		}
		fields := cachedJSONFields(t)
		nullable := cachedNullable(t)
		for _, name := range requiredFields[t] {
			raw, ok := obj[name]
			if !ok || (!nullable[name] && bytes.Equal(bytes.TrimSpace(raw), []byte("null"))) {
				return invalid(joinPath(path, name), "is required and must not be null")
			}
		}
		for key, raw := range obj {
			ft, ok := fields[key]
			if !ok {
				continue // matched case-insensitively by encoding/json; its value was checked then
			}
			if !nullable[key] && bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
				for ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				return invalid(joinPath(path, key), "must not be null: leave the field out or give %s", jsonKind(ft))
			}
			if e := checkPresenceByMaps(raw, ft, joinPath(path, key)); e != nil {
				return e
			}
		}
	case reflect.Slice, reflect.Array:
		var list []json.RawMessage
		if json.Unmarshal(data, &list) != nil {
			return nil
		}
		for i, raw := range list {
			if e := checkPresenceByMaps(raw, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); e != nil {
				return e
			}
		}
	case reflect.Map:
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) != nil {
			return nil
		}
		for key, raw := range obj {
			if e := checkPresenceByMaps(raw, t.Elem(), joinPath(path, key)); e != nil {
				return e
			}
		}
	}
	return nil
}

// BenchmarkCheckPresence checks a heartbeat like the scale suite's agents send (8 GPUs,
// four running tasks, a telemetry reading) with the one-pass walk and with the walk by maps
// it replaced, for the ratio.
func BenchmarkCheckPresence(b *testing.B) {
	hb := api.Heartbeat{Node: "n1", Instance: "agent-n1", Synced: true, AgentTime: time.Now(),
		Inventory: benchInventory("n1"), Telemetry: &api.Telemetry{Time: time.Now()}}
	for g := range 8 {
		hb.Telemetry.GPUs = append(hb.Telemetry.GPUs, api.GPUSample{Index: g, UtilizationPct: 50, MemoryUsedMB: 1000, PowerW: 300, TemperatureC: 60})
	}
	for k := range int64(4) {
		now := time.Now()
		hb.Tasks = append(hb.Tasks, api.TaskStatus{JobID: k + 1, Attempt: 1, State: api.StateRunning, StartTime: &now})
	}
	body, err := json.Marshal(hb)
	if err != nil {
		b.Fatal(err)
	}
	typ := reflect.TypeFor[*api.Heartbeat]()
	for _, c := range []struct {
		name  string
		check func([]byte, reflect.Type, string) *api.Error
	}{{"one-pass", checkPresence}, {"by-maps", checkPresenceByMaps}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if e := c.check(body, typ, ""); e != nil {
					b.Fatal(e.Message)
				}
			}
		})
	}
}

// The first bodies of a type checked at once, as the first heartbeats after a start are,
// each see the type's facts whole (run under -race: they were once published half made).
func TestPresenceFirstUseConcurrently(t *testing.T) {
	presenceTypes.Clear()
	body := []byte(`{"node":"n1","inventory":{"cpus":4,"memory_mb":1,"device_source":"fake","gpus":[{"index":0,"uuid":"u","model":null,"memory_mb":1,"healthy":true}]},"tasks":[],"agent_time":"2026-11-01T09:00:00Z","instance":"a","synced":true}`)
	var wg sync.WaitGroup
	errs := make(chan *api.Error, 8)
	for range 8 {
		wg.Go(func() { errs <- checkPresence(body, reflect.TypeFor[*api.Heartbeat](), "") })
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		if e == nil || e.Field != "inventory.gpus[0].model" {
			t.Errorf("a concurrent first check found %+v, want the null model", e)
		}
	}
}
