package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
)

// The contract as github.com/getkin/kin-openapi reads it: api/openapi.yaml loaded and
// validated once, then every exchange of the contract and spec-fuzz tests checked with
// openapi3filter, the request against the operation's parameters and body, the response
// against the status and schema documented for it.

var kin struct {
	once sync.Once
	doc  *openapi3.T
	err  error
}

// kinSpec loads api/openapi.yaml with kin-openapi and validates it as OpenAPI 3.0.
func kinSpec(t testing.TB) *openapi3.T {
	t.Helper()
	kin.once.Do(func() {
		// PUT /config documents text/yaml, which kin-openapi decodes only when told how.
		openapi3filter.RegisterBodyDecoder("text/yaml", openapi3filter.YamlBodyDecoder)
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromFile("../../api/openapi.yaml")
		if err != nil {
			kin.err = fmt.Errorf("load api/openapi.yaml: %w", err)
			return
		}
		if err := doc.Validate(loader.Context); err != nil {
			kin.err = fmt.Errorf("api/openapi.yaml is not valid OpenAPI: %w", err)
			return
		}
		kin.doc = doc
	})
	if kin.err != nil {
		t.Fatal(kin.err)
	}
	return kin.doc
}

// The spec is valid OpenAPI 3.0 as kin-openapi reads it, and documents every route.
func TestSpecIsValidOpenAPI(t *testing.T) {
	doc := kinSpec(t)
	for _, rt := range routes {
		item := doc.Paths.Value(rt.path)
		if item == nil || item.GetOperation(rt.method) == nil {
			t.Errorf("kin-openapi finds no %s %s in api/openapi.yaml", rt.method, rt.path)
		}
	}
}

// kinExchange is one request and its answer, as the tests saw them.
type kinExchange struct {
	method, route  string // the route as the spec names it: /api/v1/jobs/{id}
	path, rawQuery string // as sent, escaped
	header         http.Header
	body           []byte
	status         int
	respHeader     http.Header
	respBody       []byte
}

// kinOptions: a readOnly property sent in a request is not an error, since the server
// ignores what it sets itself (the spec says so of each) and Go clients send every field.
var kinOptions = &openapi3filter.Options{
	AuthenticationFunc:         openapi3filter.NoopAuthenticationFunc,
	ExcludeReadOnlyValidations: true,
	IncludeResponseStatus:      true,
	MultiError:                 true,
}

// kinRoute is the spec's operation for x, with the path parameters taken from x's path.
func kinRoute(doc *openapi3.T, x kinExchange) (*routers.Route, map[string]string, error) {
	item := doc.Paths.Value(x.route)
	if item == nil {
		return nil, nil, fmt.Errorf("the spec has no path %s", x.route)
	}
	op := item.GetOperation(x.method)
	if op == nil {
		return nil, nil, fmt.Errorf("the spec has no %s %s", x.method, x.route)
	}
	tmpl, got := strings.Split(x.route, "/"), strings.Split(x.path, "/")
	if len(tmpl) != len(got) {
		return nil, nil, fmt.Errorf("path %s does not fit %s", x.path, x.route)
	}
	params := map[string]string{}
	for i, seg := range tmpl {
		if strings.HasPrefix(seg, "{") {
			v, err := url.PathUnescape(got[i])
			if err != nil {
				return nil, nil, fmt.Errorf("path %s: %v", x.path, err)
			}
			params[strings.Trim(seg, "{}")] = v
		}
	}
	return &routers.Route{Spec: doc, Path: x.route, PathItem: item, Method: x.method, Operation: op}, params, nil
}

// kinRequestInput rebuilds x's request for openapi3filter.
func kinRequestInput(doc *openapi3.T, x kinExchange) (*openapi3filter.RequestValidationInput, error) {
	route, params, err := kinRoute(doc, x)
	if err != nil {
		return nil, err
	}
	u := "http://rota.test" + x.path
	if x.rawQuery != "" {
		u += "?" + x.rawQuery
	}
	req, err := http.NewRequest(x.method, u, bytes.NewReader(x.body))
	if err != nil {
		return nil, err
	}
	req.Header = x.header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	return &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: kinOptions}, nil
}

// kinCheckRequest is nil when kin-openapi finds x's request valid for its operation.
func kinCheckRequest(doc *openapi3.T, x kinExchange) error {
	in, err := kinRequestInput(doc, x)
	if err != nil {
		return err
	}
	return openapi3filter.ValidateRequest(context.Background(), in)
}

// kinCheckResponse lists how x's answer departs from what the spec documents for its
// operation and status (an undocumented status included). 405, which the spec states
// once for every path, is checked against components/responses/MethodNotAllowed.
func kinCheckResponse(doc *openapi3.T, x kinExchange) []string {
	if x.status == http.StatusMethodNotAllowed {
		resp := doc.Components.Responses["MethodNotAllowed"]
		if resp == nil || resp.Value == nil {
			return []string{"the spec has no components/responses/MethodNotAllowed"}
		}
		if x.respHeader.Get("Allow") == "" {
			return []string{"405 without an Allow header"}
		}
		return kinCheckBody(resp.Value, x)
	}
	in, err := kinRequestInput(doc, x)
	if err != nil {
		return []string{err.Error()}
	}
	err = openapi3filter.ValidateResponse(context.Background(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: x.status, Header: x.respHeader, Body: io.NopCloser(bytes.NewReader(x.respBody)), Options: kinOptions,
	})
	return kinErrors(err)
}

// kinCheckBody checks a body against the JSON schema of a response outside any operation.
func kinCheckBody(resp *openapi3.Response, x kinExchange) []string {
	media := resp.Content.Get("application/json")
	if media == nil || media.Schema == nil {
		return nil
	}
	if ct := x.respHeader.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return []string{"Content-Type " + ct + " where the spec documents application/json"}
	}
	var v any
	if err := json.Unmarshal(x.respBody, &v); err != nil {
		return []string{"a body that is not JSON: " + err.Error()}
	}
	return kinErrors(media.Schema.Value.VisitJSON(v, openapi3.MultiErrors()))
}

// kinErrors flattens kin-openapi's errors into one line each.
func kinErrors(err error) []string {
	if err == nil {
		return nil
	}
	var out []string
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case openapi3.MultiError:
			for _, x := range e {
				walk(x)
			}
		case *openapi3filter.ResponseError:
			if e.Err != nil {
				if m, ok := e.Err.(openapi3.MultiError); ok {
					for _, x := range m {
						out = append(out, e.Reason+": "+kinLine(x))
					}
					return
				}
			}
			out = append(out, kinLine(e))
		default:
			out = append(out, kinLine(err))
		}
	}
	walk(err)
	slices.Sort(out)
	return slices.Compact(out)
}

// kinLine is one error on one line, with the schema it was checked against left out: it
// is in the spec, and it makes the line hundreds of lines long.
func kinLine(err error) string {
	if se, ok := err.(*openapi3.SchemaError); ok {
		p := "$"
		for _, part := range se.JSONPointer() {
			if _, err := strconv.Atoi(part); err == nil {
				p += "[]"
			} else {
				p += "." + part
			}
		}
		return fmt.Sprintf("%s: %s", p, se.Reason)
	}
	s := err.Error()
	if i := strings.Index(s, "\nSchema:"); i >= 0 {
		s = s[:i]
	}
	return strings.ReplaceAll(s, "\n", " ")
}

// kinVerdict checks one exchange both ways and lists the mismatches: the answer must be
// what the spec documents for its status, and a request the spec refuses must not be
// accepted (a 2xx); refusing one the spec allows may be the server's judgement of the
// state (an unknown team, a job that already ended), so it is not a mismatch by itself.
func kinVerdict(doc *openapi3.T, x kinExchange) []string {
	out := kinCheckResponse(doc, x)
	if x.status == http.StatusMethodNotAllowed {
		return out
	}
	if err := kinCheckRequest(doc, x); err != nil && x.status < 300 {
		for _, e := range kinErrors(err) {
			out = append(out, "accepted a request the spec refuses: "+e)
		}
	}
	return out
}

// sfKin checks a spec-fuzz exchange with kin-openapi.
func sfKin(doc *openapi3.T, r *sfRequest, code int, hdr http.Header, body []byte) []sfFailure {
	x := kinExchange{method: r.method, route: r.route, path: r.path, rawQuery: r.rawQuery, header: http.Header{},
		body: r.body, status: code, respHeader: hdr, respBody: body}
	if r.contentType != "" {
		x.header.Set("Content-Type", r.contentType)
	}
	for k, v := range r.header {
		x.header.Set(k, v)
	}
	var out []sfFailure
	for _, p := range kinVerdict(doc, x) {
		kind := "kin-openapi: " + sfIndexRE.ReplaceAllString(p, "[]")
		out = append(out, sfFailure{key: fmt.Sprintf("%s %s → %d: %s", r.method, r.route, code, kind), code: code, kind: kind, detail: p})
	}
	return out
}
