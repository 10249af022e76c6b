package cli

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/rotahq/rota/internal/api"
)

// decodeSeeds are answers as the server writes them: a page of jobs, a job with its
// attempts and events, and the nodes.
func decodeSeeds() []string {
	var out []string
	for _, v := range []any{api.JobList{Jobs: fixtureJobs(), Next: "45"}, fixtureDetail(), fixtureNodes()} {
		raw, _ := json.Marshal(v)
		out = append(out, string(raw))
	}
	return append(out, `{"jobs":null}`, `{"jobs":[{"ID":7,"SPEC":{"name":"case"}}]}`, `{"jobs":[{"id":1,"id":2}]}`,
		`{"jobs":[{"spec":{"name":"bad \xff utf-8"}}]}`, `{"jobs":[]} trailing`, `{"jobs":[{"id":"1"}]}`, `{"jobs":[{"nodes":{}}]}`)
}

// The client decodes answers with the faster decoder; it must read every answer as
// encoding/json does, or a renderer would be shown something else than the server sent.
// Both must accept or refuse alike, and what both accept must decode to the same values.
func FuzzDecodeLikeEncodingJSON(f *testing.F) {
	for _, s := range decodeSeeds() {
		f.Add(s)
	}
	f.Fuzz(checkDecodeLikeEncodingJSON)
}

func checkDecodeLikeEncodingJSON(t *testing.T, s string) {
	for _, typ := range []reflect.Type{reflect.TypeFor[api.JobList](), reflect.TypeFor[api.JobDetail](), reflect.TypeFor[api.NodeList]()} {
		want, got := reflect.New(typ), reflect.New(typ)
		errWant := json.NewDecoder(bytes.NewReader([]byte(s))).Decode(want.Interface())
		errGot := jsonv1.NewDecoder(bytes.NewReader([]byte(s))).Decode(got.Interface())
		if (errWant == nil) != (errGot == nil) {
			t.Fatalf("%s from %q: encoding/json says %v, the client's decoder %v", typ, s, errWant, errGot)
		}
		if errWant == nil && !reflect.DeepEqual(want.Interface(), got.Interface()) {
			t.Fatalf("%s from %q decodes differently:\nencoding/json %+v\nclient        %+v", typ, s, want.Elem(), got.Elem())
		}
	}
}
