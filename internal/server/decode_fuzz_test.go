package server

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// requestTypes makes a zero value of each type a route decodes its body into.
var requestTypes = []func() any{
	func() any { return &api.JobSpec{} }, func() any { return &api.Heartbeat{} }, func() any { return &api.Queue{} },
	func() any { return &api.Team{} }, func() any { return &api.User{} }, func() any { return &api.Price{} },
	func() any { return &api.Reservation{} }, func() any { return &api.TokenRequest{} },
	func() any { return &api.JoinTokenRequest{} }, func() any { return &api.JoinRequest{} },
	func() any { return &api.RenewRequest{} }, func() any { return &api.UISessionRequest{} },
	func() any { return &[]api.Notify{} }, func() any { return &api.Request{} }, func() any { return &api.Decision{} },
	func() any { return &api.LogBatch{} },
}

// FuzzDecodeFast holds decodeJSON's fast path to encoding/json: a body the fast decoder
// accepts, encoding/json accepts too, with unknown fields refused and nothing after the
// value, and decodes to the same value. (What the fast decoder refuses goes to
// encoding/json, so only this direction can change what a route accepts.)
//
//	go test -run XXX -fuzz FuzzDecodeFast ./internal/server/
func FuzzDecodeFast(f *testing.F) {
	for i, mk := range requestTypes {
		_, full := filled(f, mk)
		empty, _ := json.Marshal(mk())
		for _, body := range [][]byte{full, empty, []byte(`{}`), []byte(`[]`), []byte(`null`), []byte(` {} `),
			bytes.ToUpper(full), bytes.Replace(full, []byte(`":`), []byte(`" :`), 1), append(full, full...),
			[]byte(strings.Replace(string(full), `"`, `"\u00`+`41`, 1))} {
			f.Add(uint8(i), body)
		}
	}
	for _, body := range []string{
		`{"node":"n1","node":"n2"}`, `{"Node":"n1"}`, `{"gpus":1.0}`, `{"gpus":1e2}`, `{"gpus":-0}`,
		`{"gpus":"1"}`, `{"command":["\ud800"]}`, "{\"command\":[\"\xff\"]}", `{"agent_time":"2026-11-30T09:00:00.Z"}`,
		`{"agent_time":"2026-11-30t09:00:00z"}`, `{"agent_time":"2026-11-30T09:00:00+24:00"}`, `{"env":{"A":"1","A":"2"}}`,
		`{"tasks":[]}`, `{"tasks":null}`, `{"labels":{}}`, `{"deadline":null}`, `{"nice":9223372036854775808}`,
		`{"share":1e-400}`, `{"gpu_share":0.5e1}`, `{"command":[]}{}`, `{"command":[]} x`,
		`{"chunks":[{"job_id":1,"attempt":1,"offset":0,"data":"aGk="}]}`, `{"chunks":[{"data":"aGk"}]}`,
		`{"chunks":[{"data":"aG\nk="}]}`, `{"chunks":[{"data":"aG\rk="}]}`, `{"chunks":[{"data":null}]}`,
		`{"chunks":[{"data":"_-8="}]}`, `{"chunks":[{"data":""}]}`, `{"chunks":[{"final":true}]}`,
	} {
		for i := range requestTypes {
			f.Add(uint8(i), []byte(body))
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		mk := requestTypes[int(which)%len(requestTypes)]
		fast := mk()
		if !decodeFast(body, fast) {
			return
		}
		slow := mk()
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(slow); err != nil {
			t.Fatalf("%T: the fast decoder accepts %q, encoding/json refuses it: %v", slow, body, err)
		}
		if rest := bytes.TrimLeft(body[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
			t.Fatalf("%T: the fast decoder accepts %q, which has data after its value", slow, body)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%T: %q decodes to\n%#v\nnot, as encoding/json decodes it,\n%#v", slow, body, fast, slow)
		}
	})
}

// filled makes a value with mk, fills it, and returns it with its JSON.
func filled(tb testing.TB, mk func() any) (any, []byte) {
	tb.Helper()
	v := mk()
	fill(reflect.ValueOf(v).Elem(), 0)
	body, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return v, body
}

// fill sets every field v reaches to a value that is not its zero: two elements per list,
// one key per map, to the depth of a few levels.
func fill(v reflect.Value, depth int) {
	if depth > 6 {
		return
	}
	if v.Type() == reflect.TypeFor[time.Time]() {
		v.Set(reflect.ValueOf(time.Date(2026, 11, 30, 9, 0, 0, 123456789, time.FixedZone("", 3600))))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("x é\u2028<>&\"")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(-7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(0.25)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), depth+1)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(v.Index(i), depth+1)
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, depth+1)
		fill(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	}
}

// The fast path serves what the Go clients send: every request type, every field set.
func TestDecodeFastTakesWhatClientsSend(t *testing.T) {
	for _, mk := range requestTypes {
		v, body := filled(t, mk)
		got := mk()
		if !decodeFast(body, got) {
			t.Errorf("%T: the fast decoder refuses what encoding/json wrote: %s", v, body)
		} else if !reflect.DeepEqual(got, v) {
			t.Errorf("%T: decoded to %#v, want %#v", v, got, v)
		}
	}
}

// TestDecodedValuesHoldNoBody checks that what decodeBody makes of a body keeps nothing of
// the body's bytes, for every request type with every field set, through the fast decoder
// and through encoding/json (a body that names its first member twice goes there):
// decodeJSON lends the buffer to the next request as soon as decodeBody returns.
func TestDecodedValuesHoldNoBody(t *testing.T) {
	for _, mk := range requestTypes {
		want, body := filled(t, mk)
		for _, path := range []string{"fast", "encoding/json"} {
			data := slices.Clone(body)
			if path == "encoding/json" {
				data = firstMemberTwice(data)
				if decodeFast(data, mk()) {
					t.Fatalf("%T: the fast decoder takes %s, which names a member twice", want, data)
				}
			}
			got := mk()
			if status, e := decodeBody(data, got); e != nil {
				t.Fatalf("%T (%s): %d %s", want, path, status, e.Message)
			}
			for i := range data {
				data[i] = 'x'
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%T (%s): after its body was written over, decoded to %#v, want %#v", want, path, got, want)
			}
		}
	}
}

// firstMemberTwice gives the first member of the body's first object once more, before
// the others: encoding/json takes the later one, and the fast decoder refuses the body.
func firstMemberTwice(body []byte) []byte {
	open := bytes.IndexByte(body, '{')
	w := jsonWalker{data: body, pos: open + 1}
	w.key()
	w.value()
	return slices.Concat(body[:open+1], body[open+1:w.pos], []byte(","), body[open+1:])
}

// TestAnnouncedBodySizeCostsNothing checks that a client announcing a large body and
// sending a small one makes decodeJSON allocate what it sent, not what it announced: a
// buffer sized from Content-Length alone would let a few connections take gigabytes.
func TestAnnouncedBodySizeCostsNothing(t *testing.T) {
	const limit = 64 << 20
	r := httptest.NewRequest("POST", "/api/v1/jobs", strings.NewReader(`{"command":["true"]}`))
	r.ContentLength = limit
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var spec api.JobSpec
	if _, e := decodeJSON(httptest.NewRecorder(), r, &spec, limit); e != nil {
		t.Fatalf("decoding: %s", e.Message)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Errorf("decoding 20 bytes announced as %d allocated %d bytes", limit, got)
	}
}
