package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/rotahq/rota/internal/api"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// Compact: the CLI and the web UI read it, and indenting a page of jobs or a
	// heartbeat's answer costs the server more than writing it.
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, e *api.Error) {
	writeJSON(w, status, e)
}

func invalid(field, format string, args ...any) *api.Error {
	return &api.Error{Code: api.CodeInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// checkContentType refuses a body of the wrong media type: JSON routes take only
// application/json, so that no web page can post a form or text/plain to them (browsers
// send those cross-origin without asking). Routes without a body, or with an optional
// one, accept none or JSON.
func checkContentType(r *http.Request, kind bodyKind) *api.Error {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if ct == "" {
		mt, err = "", nil
	}
	if err != nil {
		return &api.Error{Code: api.CodeUnsupportedMedia, Message: fmt.Sprintf("Content-Type %q cannot be parsed", ct)}
	}
	var want []string
	switch kind {
	case jsonBody:
		want = []string{"application/json"}
	case yamlBody:
		want = []string{"application/yaml", "application/x-yaml", "text/yaml", "application/json"}
	case bytesBody:
		want = []string{"application/octet-stream"}
	case noBody, optionalJSON:
		if mt == "" || mt == "application/json" {
			return nil
		}
		return &api.Error{Code: api.CodeUnsupportedMedia, Message: fmt.Sprintf("%s %s takes no body, and no Content-Type %s", r.Method, r.URL.Path, mt)}
	}
	if slices.Contains(want, mt) {
		return nil
	}
	if mt == "" {
		mt = "none"
	}
	return &api.Error{Code: api.CodeUnsupportedMedia, Message: fmt.Sprintf("%s %s takes Content-Type %s, not %s", r.Method, r.URL.Path, strings.Join(want, " or "), mt)}
}

// decodeJSON reads one JSON value into v under the body limit in force.
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, v any) (int, *api.Error) {
	return decodeJSON(w, r, v, s.view.maxBody())
}

// decodeJSON reads one JSON value into v, refusing unknown fields, trailing data, null
// where the Go type holds no null, required fields left out, and bodies over limit bytes,
// with an error that names the field at fault. Every JSON route decodes through it.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any, limit int64) (int, *api.Error) {
	buf := bodyBufs.Get().(*bytes.Buffer)
	defer putBodyBuf(buf)
	// Room for the body the client announces, and for the read that finds its end; but
	// never more than a kept buffer holds before any of it has come, so that a client
	// announcing a large body and sending little costs only what it sends.
	if n := r.ContentLength; n > 0 {
		buf.Grow(int(min(n, maxKeptBodyBuf-bytes.MinRead)) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	data := buf.Bytes()
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return http.StatusRequestEntityTooLarge, &api.Error{Code: api.CodeTooLarge, Message: fmt.Sprintf("request body is larger than the %d-byte limit", limit)}
		}
		return http.StatusBadRequest, invalid("", "reading the request body: %v", err)
	}
	return decodeBody(data, v)
}

// decodeBody is decodeJSON once the body is read. What it decodes into v holds nothing of
// data, which decodeJSON lends out again.
func decodeBody(data []byte, v any) (int, *api.Error) {
	if decodeFast(data, v) {
		if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
			return http.StatusBadRequest, invalid("", "the request body is null: expected a JSON object")
		}
		if e := checkPresence(data, reflect.TypeOf(v), ""); e != nil {
			return http.StatusBadRequest, e
		}
		return 0, nil
	}
	// Refused, or not decoded quite as encoding/json decodes it: encoding/json decides,
	// from the start, and words the error.
	reflect.ValueOf(v).Elem().SetZero()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return http.StatusBadRequest, decodeError(err, data, reflect.TypeOf(v))
	}
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return http.StatusBadRequest, invalid("", "the request body is null: expected a JSON object")
	}
	// Decoder.More misses a stray closing bracket, so look at what is left instead.
	if rest := bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return http.StatusBadRequest, invalid("", "unexpected data after the JSON value at byte %d", dec.InputOffset())
	}
	if e := checkPresence(data, reflect.TypeOf(v), ""); e != nil {
		return http.StatusBadRequest, e
	}
	return 0, nil
}

// bodyBufs lends decodeJSON the buffers it reads bodies into: read with io.ReadAll, every
// heartbeat's body was a new buffer grown from 512 bytes. Nothing a body decodes into keeps
// a reference to it (strings and lists are copied out), so a buffer is lent again as soon
// as its body is decoded.
var bodyBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxKeptBodyBuf is the largest buffer bodyBufs keeps: a rare large body (a full
// configuration, say) is left to the collector rather than held for the small ones.
const maxKeptBodyBuf = 64 << 10

func putBodyBuf(buf *bytes.Buffer) {
	if buf.Cap() <= maxKeptBodyBuf {
		buf.Reset()
		bodyBufs.Put(buf)
	}
}

// decodeFast decodes data into v with encoding/json/v2, which decodes a heartbeat in
// half the time encoding/json takes, with a fifth of the allocations, and reports whether
// it did. It accepts a subset of what encoding/json does, and decodes it to the same value
// (FuzzDecodeFast holds the two to that): names must match in case, appear once, and
// strings be valid UTF-8, and nothing may follow the value. What it refuses,
// encoding/json decides on, so what a route accepts has not changed.
func decodeFast(data []byte, v any) bool {
	return jsonv2.Unmarshal(data, v, jsonv2.RejectUnknownMembers(true)) == nil
}

// decodeError words what encoding/json refused in the API's terms: the field, and the JSON
// it takes, never a Go type ("json: cannot unmarshal string into Go struct field
// JobSpec.gpus of type int" is "gpus: must be an integer, not a string"). t is the type
// decoded into, where a bad time is looked for.
func decodeError(err error, data []byte, t reflect.Type) *api.Error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	var timeErr *time.ParseError
	switch {
	case errors.As(err, &typeErr):
		got, _, _ := strings.Cut(typeErr.Value, " ")
		got = map[string]string{"string": "a string", "number": "a number", "bool": "true or false", "array": "an array", "object": "an object"}[got]
		want := jsonKind(typeErr.Type)
		if typeErr.Field == "" {
			return invalid("", "the body must be %s, not %s", want, orWord(got, "that"))
		}
		if got == "a number" && want == "an integer" {
			lo, hi := intRange(typeErr.Type)
			return invalid(typeErr.Field, "must be a whole number from %d to %d", lo, hi)
		}
		return invalid(typeErr.Field, "must be %s, not %s", want, orWord(got, "that"))
	case errors.As(err, &syntaxErr):
		return invalid("", "malformed JSON at byte %d: %s", syntaxErr.Offset, strings.TrimPrefix(syntaxErr.Error(), "json: "))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return invalid(field, "unknown field %q", truncateName(field))
	case errors.Is(err, io.EOF):
		return invalid("", "empty request body: expected a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("", "the JSON body ends before its value does")
	case errors.As(err, &timeErr):
		return invalid(badTime(data, t, ""), "%q is not an RFC 3339 time such as 2026-11-30T09:00:00Z", truncateName(timeErr.Value))
	}
	if field := badTime(data, t, ""); field != "" {
		return invalid(field, "must be an RFC 3339 time, a string such as \"2026-11-30T09:00:00Z\"")
	}
	return invalid("", "the body is not JSON this route takes")
}

func orWord(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// intRange is the range of an integer type, for "must be an integer from MIN to MAX".
func intRange(t reflect.Type) (int64, int64) {
	bits := t.Bits()
	if t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uintptr {
		return 0, int64(min(uint64(math.MaxInt64), 1<<bits-1))
	}
	return -1 << (bits - 1), 1<<(bits-1) - 1
}

// badTime names the first time in data, decoded as t, that is not RFC 3339 ("" if none).
func badTime(data []byte, t reflect.Type, path string) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[time.Time]() {
		var tm time.Time
		if json.Unmarshal(data, &tm) != nil {
			return path
		}
		return ""
	}
	switch t.Kind() {
	case reflect.Struct:
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) != nil {
			return ""
		}
		fields := cachedJSONFields(t)
		for _, key := range slices.Sorted(maps.Keys(obj)) {
			if ft, ok := fields[key]; ok {
				if p := badTime(obj[key], ft, joinPath(path, key)); p != "" {
					return p
				}
			}
		}
	case reflect.Slice, reflect.Array:
		var list []json.RawMessage
		if json.Unmarshal(data, &list) != nil {
			return ""
		}
		for i, raw := range list {
			if p := badTime(raw, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); p != "" {
				return p
			}
		}
	case reflect.Map:
		var obj map[string]json.RawMessage
		if json.Unmarshal(data, &obj) != nil {
			return ""
		}
		for _, key := range slices.Sorted(maps.Keys(obj)) {
			if p := badTime(obj[key], t.Elem(), joinPath(path, key)); p != "" {
				return p
			}
		}
	}
	return ""
}

// requiredFields lists, per request type, the fields api/openapi.yaml marks required that
// a body must carry: every one the spec does not mark readOnly (a test holds the two to
// each other). The Go clients send them all; a list they send as null when it is nil
// (no omitempty) may be null.
var requiredFields = map[reflect.Type][]string{
	reflect.TypeFor[api.JobSpec]():          {"command"},
	reflect.TypeFor[api.Heartbeat]():        {"node", "tasks", "agent_time", "instance", "synced"},
	reflect.TypeFor[api.Inventory]():        {"cpus", "memory_mb", "gpus", "device_source"},
	reflect.TypeFor[api.GPU]():              {"index", "uuid", "model", "memory_mb", "healthy"},
	reflect.TypeFor[api.TaskStatus]():       {"job_id", "attempt", "state"},
	reflect.TypeFor[api.StoppedTask]():      {"job_id", "attempt", "reason"},
	reflect.TypeFor[api.Telemetry]():        {"time", "gpus"},
	reflect.TypeFor[api.GPUSample]():        {"index", "utilization_pct", "memory_used_mb", "power_w", "temperature_c"},
	reflect.TypeFor[api.GPUProcess]():       {"gpu", "pid", "memory_mb"},
	reflect.TypeFor[api.TaskUsage]():        {"job_id", "attempt", "gpu_util_pct", "gpu_memory_mb", "cpu_pct", "memory_mb"},
	reflect.TypeFor[api.HealthCheck]():      {"time", "ok", "exit_code"},
	reflect.TypeFor[api.Queue]():            {"name", "tier", "preemptible", "default_time_limit_s", "max_time_limit_s", "grace_s"},
	reflect.TypeFor[api.Team]():             {"name", "weight"},
	reflect.TypeFor[api.Quota]():            {"guaranteed", "limit"},
	reflect.TypeFor[api.User]():             {"name", "role"},
	reflect.TypeFor[api.Price]():            {"model", "per_gpu_hour"},
	reflect.TypeFor[api.Reservation]():      {"name", "team", "gpus", "start", "end"},
	reflect.TypeFor[api.JoinRequest]():      {"token", "node", "csr"},
	reflect.TypeFor[api.RenewRequest]():     {"csr"},
	reflect.TypeFor[api.UISessionRequest](): {"code"},
	reflect.TypeFor[api.Notify]():           {"url"},
	reflect.TypeFor[api.Request]():          {"kind", "reason"},
	reflect.TypeFor[api.LogBatch]():         {"chunks"},
	reflect.TypeFor[api.LogChunk]():         {"job_id", "attempt", "offset"},
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// checkPresence walks a decoded body alongside its Go type t and refuses null where t
// cannot hold one (encoding/json would leave the zero value, so `"gpus": null` would read
// as 0), and a required field (requiredFields) that is missing or null. path names the
// value in errors, like "inventory.gpus[0].model".
//
// The body has already been decoded, so it is valid JSON: the walk reads it once, in
// place, and builds a path only for the error it returns. It is on every heartbeat.
func checkPresence(data []byte, t reflect.Type, path string) *api.Error {
	w := jsonWalker{data: data}
	c := presenceCheck{root: path}
	return c.check(&w, presenceOf(t))
}

// presenceCheck is one walk of checkPresence: segs is the path to the value being checked,
// kept as a stack and made into a string only for an error.
type presenceCheck struct {
	root string
	segs []pathSeg
}

// pathSeg is a member's key, or a list element's index when key is nil.
type pathSeg struct {
	key   []byte
	index int
}

func (c *presenceCheck) path() string {
	p := c.root
	for _, seg := range c.segs {
		if seg.key == nil {
			p = fmt.Sprintf("%s[%d]", p, seg.index)
		} else {
			p = joinPath(p, string(seg.key))
		}
	}
	return p
}

var jsonNull = []byte("null")

// presenceType is what checkPresence needs to know of a Go type, worked out once per type
// (presenceOf) so that the walk of a body makes no reflect calls.
type presenceType struct {
	kind     reflect.Kind // with pointers taken off
	pointer  bool         // null stands for nil
	nullOK   bool         // a list, map or interface: null is nil
	reads    bool         // reads itself (json.Unmarshaler, like time.Time): not walked
	required bool         // has required fields, or holds a type that has
	kindName string       // what the JSON should be, for messages
	elem     *presenceType
	fields   map[string]presenceField
	// requiredNames are the struct's own required fields (requiredFields).
	requiredNames []string
}

type presenceField struct {
	t        *presenceType
	nullable bool
}

// presenceTypes holds every presenceType made, each whole: a type's facts (and those of
// the types inside it) are made under presenceMu and published only once complete, so a
// reader never sees one half filled in.
var (
	presenceTypes sync.Map // reflect.Type -> *presenceType
	presenceMu    sync.Mutex
)

func presenceOf(t reflect.Type) *presenceType {
	if v, ok := presenceTypes.Load(t); ok {
		return v.(*presenceType)
	}
	presenceMu.Lock()
	defer presenceMu.Unlock()
	made := map[reflect.Type]*presenceType{}
	p := makePresence(t, made)
	for typ, pt := range made {
		presenceTypes.Store(typ, pt)
	}
	return p
}

// makePresence works out t's facts, and those of the types inside it not yet published,
// into made; a type that holds itself finds its own entry there.
func makePresence(t reflect.Type, made map[reflect.Type]*presenceType) *presenceType {
	if v, ok := presenceTypes.Load(t); ok {
		return v.(*presenceType)
	}
	if p, ok := made[t]; ok {
		return p
	}
	p := &presenceType{}
	made[t] = p
	u := t
	for u.Kind() == reflect.Pointer {
		p.pointer = true
		u = u.Elem()
	}
	p.kind, p.kindName = u.Kind(), jsonKind(u)
	switch u.Kind() {
	case reflect.Slice, reflect.Map, reflect.Interface:
		p.nullOK = true
	}
	p.reads = reflect.PointerTo(u).Implements(unmarshalerType)
	p.required = holdsRequired(u)
	switch u.Kind() {
	case reflect.Slice, reflect.Array, reflect.Map:
		p.elem = makePresence(u.Elem(), made)
	case reflect.Struct:
		nullable := cachedNullable(u)
		p.fields = map[string]presenceField{}
		for name, ft := range cachedJSONFields(u) {
			p.fields[name] = presenceField{t: makePresence(ft, made), nullable: nullable[name]}
		}
		p.requiredNames = requiredFields[u]
	}
	return p
}

// check checks the value at w's position against t, and moves w past it, found at fault
// or not; c.segs is its path. The walk reads each byte of a part it must look inside once,
// and a part that can hold no fault (no required field below it, no null in it) only to
// find its end.
func (c *presenceCheck) check(w *jsonWalker, t *presenceType) *api.Error {
	w.space()
	start := w.pos
	if w.isNull() {
		w.value()
		if t.pointer || t.nullOK {
			return nil
		}
		return invalid(c.path(), "must not be null: leave the field out or give %s", t.kindName)
	}
	if t.reads {
		w.value()
		return nil
	}
	if !t.required {
		if !bytes.Contains(w.value(), jsonNull) {
			// Nothing below can be null or missing a required field: no need to walk it
			// (most of a heartbeat's telemetry, say, on every heartbeat).
			return nil
		}
		w.pos = start
	}
	open := byte(0)
	if w.pos < len(w.data) {
		open = w.data[w.pos]
	}
	switch {
	case t.kind == reflect.Struct && open == '{':
		return c.checkStruct(w, t)
	case (t.kind == reflect.Slice || t.kind == reflect.Array) && open == '[':
		w.pos++
		for i := 0; w.more(']'); i++ {
			c.segs = append(c.segs, pathSeg{index: i})
			e := c.check(w, t.elem)
			c.segs = c.segs[:len(c.segs)-1]
			if e != nil {
				w.pos = start
				w.value()
				return e
			}
			w.next()
		}
	case t.kind == reflect.Map && open == '{':
		w.pos++
		for w.more('}') {
			key := w.key()
			c.segs = append(c.segs, pathSeg{key: key})
			e := c.check(w, t.elem)
			c.segs = c.segs[:len(c.segs)-1]
			if e != nil {
				w.pos = start
				w.value()
				return e
			}
			w.next()
		}
	default:
		w.value()
	}
	return nil
}

// checkStruct checks the object at w's position against the struct type t.
func (c *presenceCheck) checkStruct(w *jsonWalker, t *presenceType) *api.Error {
	w.pos++
	required := t.requiredNames
	var present uint64 // bit i: required[i] is there and not a refused null
	var first *api.Error
	for w.more('}') {
		key := w.key()
		w.space()
		isNull := w.isNull()
		f, known := t.fields[string(key)]
		for i, name := range required {
			if name == string(key) && (f.nullable || !isNull) {
				present |= 1 << i
			}
		}
		switch {
		case !known || first != nil:
			// A key encoding/json matched case-insensitively had its value checked then;
			// after a fault, only the required fields are still looked for.
			w.value()
		case !f.nullable && isNull:
			c.segs = append(c.segs, pathSeg{key: key})
			first = invalid(c.path(), "must not be null: leave the field out or give %s", f.t.kindName)
			c.segs = c.segs[:len(c.segs)-1]
			w.value()
		default:
			c.segs = append(c.segs, pathSeg{key: key})
			first = c.check(w, f.t)
			c.segs = c.segs[:len(c.segs)-1]
		}
		w.next()
	}
	// A missing required field is named before anything wrong inside another.
	for i, name := range required {
		if present&(1<<i) == 0 {
			return invalid(joinPath(c.path(), name), "is required and must not be null")
		}
	}
	return first
}

// unquoteKey makes the key of an object member, as sent with its quotes, a string.
func unquoteKey(k []byte) string {
	key := string(k[1 : len(k)-1])
	if bytes.IndexByte(k, '\\') >= 0 {
		json.Unmarshal(k, &key)
	}
	return key
}

// jsonWalker reads JSON that encoding/json has already accepted, so it checks nothing of
// its syntax: it only finds where values start and end.
type jsonWalker struct {
	data []byte
	pos  int
}

func (w *jsonWalker) space() {
	for w.pos < len(w.data) {
		switch w.data[w.pos] {
		case ' ', '\t', '\r', '\n':
			w.pos++
		default:
			return
		}
	}
}

// value returns the next value and moves past it.
func (w *jsonWalker) value() []byte {
	w.space()
	start := w.pos
	if w.pos >= len(w.data) {
		return nil
	}
	switch w.data[w.pos] {
	case '"':
		w.str()
	case '{', '[':
		depth := 0
		for w.pos < len(w.data) {
			switch w.data[w.pos] {
			case '"':
				w.str()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			w.pos++
			if depth == 0 {
				break
			}
		}
	default: // a number, true, false or null
		for w.pos < len(w.data) {
			switch w.data[w.pos] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return w.data[start:w.pos]
			}
			w.pos++
		}
	}
	return w.data[start:w.pos]
}

// str moves past the string that starts at w.pos. A quote ends it unless an odd number
// of backslashes comes right before it.
func (w *jsonWalker) str() {
	w.pos++
	for {
		i := bytes.IndexByte(w.data[w.pos:], '"')
		if i < 0 {
			w.pos = len(w.data)
			return
		}
		end := w.pos + i
		escaped := false
		for k := end - 1; k >= w.pos && w.data[k] == '\\'; k-- {
			escaped = !escaped
		}
		w.pos = end + 1
		if !escaped {
			return
		}
	}
}

// more reports whether the object or list w is inside has another member or element,
// and moves past its closing bracket, close, when it has not.
func (w *jsonWalker) more(close byte) bool {
	w.space()
	if w.pos >= len(w.data) {
		return false
	}
	if w.data[w.pos] == close {
		w.pos++
		return false
	}
	return true
}

// key reads the key of the member at w's position, unescaped, and moves past its colon.
// A key without escapes (a Go type's never needs one) is not copied.
func (w *jsonWalker) key() []byte {
	key := w.value()
	if bytes.IndexByte(key, '\\') < 0 {
		key = key[1 : len(key)-1]
	} else {
		key = []byte(unquoteKey(key))
	}
	w.space()
	w.pos++ // the colon
	return key
}

// isNull reports whether the value at w's position is null: JSON that was accepted has
// nothing else that starts with n.
func (w *jsonWalker) isNull() bool {
	return w.pos < len(w.data) && w.data[w.pos] == 'n'
}

// next moves past the comma after a value, if there is one.
func (w *jsonWalker) next() {
	w.space()
	if w.pos < len(w.data) && w.data[w.pos] == ',' {
		w.pos++
	}
}

// holdsRequired reports whether t, or a type inside it, has fields in requiredFields.
func holdsRequired(t reflect.Type) bool {
	if v, ok := requiredInside.Load(t); ok {
		return v.(bool)
	}
	v := scanRequired(t, map[reflect.Type]bool{})
	requiredInside.Store(t, v)
	return v
}

// requiredInside caches holdsRequired by type; fieldsOf caches jsonFields.
var requiredInside, fieldsOf sync.Map

func scanRequired(t reflect.Type, seen map[reflect.Type]bool) bool {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return false
	}
	seen[t] = true
	if len(requiredFields[t]) > 0 {
		return true
	}
	for _, ft := range cachedJSONFields(t) {
		if scanRequired(ft, seen) {
			return true
		}
	}
	return false
}

func cachedJSONFields(t reflect.Type) map[string]reflect.Type {
	if v, ok := fieldsOf.Load(t); ok {
		return v.(map[string]reflect.Type)
	}
	f := jsonFields(t)
	fieldsOf.Store(t, f)
	return f
}

// cachedNullable is the set of t's JSON fields that may be null: the lists, maps and
// pointers a Go client sends as null when they are nil (no omitempty). Every other field
// is left out when it has no value, so a null there is refused.
func cachedNullable(t reflect.Type) map[string]bool {
	if v, ok := nullableOf.Load(t); ok {
		return v.(map[string]bool)
	}
	out := map[string]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for f := range t.Fields() {
			tag := f.Tag.Get("json")
			if !f.IsExported() || tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
				walk(f.Type)
				continue
			}
			if name == "" {
				name = f.Name
			}
			switch f.Type.Kind() {
			case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
				out[name] = !slices.Contains(strings.Split(opts, ","), "omitempty")
			}
		}
	}
	walk(t)
	nullableOf.Store(t, out)
	return out
}

var nullableOf sync.Map

// jsonFields maps the JSON names of a struct's fields to their types, with embedded
// untagged structs flattened as encoding/json does.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// jsonKind names what JSON value a Go type takes, for errors.
func jsonKind(t reflect.Type) string {
	if t == reflect.TypeFor[time.Time]() {
		return "an RFC 3339 time"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Struct:
		return "an object"
	case reflect.Array, reflect.Slice:
		return "an array"
	case reflect.Map:
		return "an object"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer"
	}
	return "a number"
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// validName checks a name of a user, team, queue or node against the pattern and the
// length limit in force. Names become parts of paths and log lines, so nothing else passes.
func (s *Server) validName(field, v string) *api.Error {
	limit := s.state.Limits().MaxNameLength
	if v == "" || len(v) > limit || !nameRE().MatchString(v) {
		return invalid(field, "%q is not a valid name: 1 to %d letters, digits and ._@+-, starting with a letter or digit", truncateName(v), limit)
	}
	return nil
}

// truncateName shortens a hostile value before it is echoed in an error.
func truncateName(v string) string {
	v = printable(v)
	if len(v) > 64 {
		return v[:64] + "…"
	}
	return v
}

// queryInt reads an integer query parameter that api/openapi.yaml bounds to lo..hi,
// answering def when it is absent. The error names the parameter and its bounds.
func queryInt(q url.Values, name string, lo, hi, def int64) (int64, *api.Error) {
	if len(q[name]) > 1 {
		return 0, invalid(name, "is given %d times; give it once", len(q[name]))
	}
	v := q.Get(name)
	if v == "" {
		if q.Has(name) {
			return 0, invalid(name, "is empty: give a whole number from %d, or leave the parameter out", lo)
		}
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		if hi == math.MaxInt64 {
			return 0, invalid(name, "%q is not a whole number of %d or more", truncateName(v), lo)
		}
		return 0, invalid(name, "%q is not a whole number from %d to %d", truncateName(v), lo, hi)
	}
	return n, nil
}

// queryString reads a text query parameter of at most max bytes: "" when it is absent. One
// given twice, given empty, too long or holding control characters is refused, naming it.
func queryString(q url.Values, name string, max int) (string, *api.Error) {
	vs, ok := q[name]
	switch {
	case !ok:
		return "", nil
	case len(vs) > 1:
		return "", invalid(name, "is given %d times; give it once", len(vs))
	case vs[0] == "":
		return "", invalid(name, "is empty: give a value or leave the parameter out")
	case len(vs[0]) > max:
		return "", invalid(name, "is %d bytes long; at most %d", len(vs[0]), max)
	case strings.ContainsFunc(vs[0], isControl):
		return "", invalid(name, "holds control characters")
	}
	return vs[0], nil
}

// queryTime reads an RFC 3339 time query parameter; zero when it is absent.
func queryTime(q url.Values, name string) (time.Time, *api.Error) {
	v, e := queryString(q, name, maxQueryTime)
	if e != nil || v == "" {
		return time.Time{}, e
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, invalid(name, "%q is not an RFC 3339 time such as 2026-11-30T09:00:00Z", truncateName(v))
	}
	return t, nil
}

// maxQueryTime bounds a time given in a query (api/openapi.yaml states it as maxLength).
const maxQueryTime = 64

// querySeconds reads a wait in seconds (a number, fractions allowed) from 0 to max,
// answering 0 when it is absent. NaN and infinities are refused like any other value out
// of bounds.
func querySeconds(q url.Values, name string, max time.Duration) (time.Duration, *api.Error) {
	if len(q[name]) > 1 {
		return 0, invalid(name, "is given %d times; give it once", len(q[name]))
	}
	v := q.Get(name)
	if v == "" {
		if q.Has(name) {
			return 0, invalid(name, "is empty: give a number of seconds from 0 to %d, or leave the parameter out", int(max.Seconds()))
		}
		return 0, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	// ParseFloat also reads hexadecimal, underscores, Inf and NaN, which are no JSON number.
	if strings.Trim(v, "0123456789.eE+-") != "" || err != nil || !(f >= 0 && f <= max.Seconds()) {
		return 0, invalid(name, "%q is not a number of seconds from 0 to %d", truncateName(v), int(max.Seconds()))
	}
	return time.Duration(f * float64(time.Second)), nil
}
