package cli

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rotahq/rota/internal/api"
)

// TestJSONErrors checks that under -o json every kind of error reaches stderr as one JSON
// object in the API's error shape, with the exit code, and nothing else.
func TestJSONErrors(t *testing.T) {
	srv := newFakeServer(t)
	invalid := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusBadRequest, api.Error{Code: api.CodeInvalid, Message: "must be 1 or more", Field: "gpus"})
	}))
	t.Cleanup(invalid.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()

	for _, tc := range []struct {
		name   string
		server string
		verb   string
		args   []string
		want   jsonError
	}{
		{"api error", srv.URL, "show", []string{"999", "-o", "json"},
			jsonError{Error: api.Error{Code: api.CodeNotFound, Message: "no job 999"}, ExitCode: ExitError}},
		{"api error with field", invalid.URL, "queue", []string{"--output=json"},
			jsonError{Error: api.Error{Code: api.CodeInvalid, Message: "must be 1 or more", Field: "gpus"}, ExitCode: ExitError}},
		{"bad flag", srv.URL, "queue", []string{"-o", "json", "--bogus"},
			jsonError{Error: api.Error{Code: codeUsage, Message: "flag provided but not defined: -bogus"}, ExitCode: ExitUsage}},
		{"bad argument", srv.URL, "queue", []string{"-o", "json", "extra"},
			jsonError{Error: api.Error{Code: codeUsage, Message: `rota queue: unexpected argument "extra"`}, ExitCode: ExitUsage}},
		{"admin's own complaint", srv.URL, "admin", []string{"nonsense", "-o", "json"},
			jsonError{Error: api.Error{Code: codeUsage, Message: `rota admin: unknown command "nonsense"`}, ExitCode: ExitUsage}},
		{"unknown verb", srv.URL, "frobnicate", []string{"-o", "json"},
			jsonError{Error: api.Error{Code: codeUsage, Message: `rota: unknown command "frobnicate"`}, ExitCode: ExitUsage}},
		{"unreachable", closed, "queue", []string{"-o", "json"},
			jsonError{Error: api.Error{Code: codeUnreachable}, ExitCode: ExitError}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := testRun{env: map[string]string{"ROTA_SERVER": tc.server, "ROTA_TOKEN": adminToken}}
			code, out, errOut := tr.run(t, tc.verb, tc.args...)
			if code != tc.want.ExitCode {
				t.Errorf("exit %d, want %d", code, tc.want.ExitCode)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
			var got jsonError
			dec := json.NewDecoder(strings.NewReader(errOut))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&got); err != nil {
				t.Fatalf("stderr is not one JSON error: %v\n%s", err, errOut)
			}
			if dec.More() {
				t.Errorf("stderr holds more than one JSON object:\n%s", errOut)
			}
			if tc.want.Code == codeUnreachable {
				if !strings.Contains(got.Message, "cannot reach the rota server at "+closed) {
					t.Errorf("message %q does not say which server could not be reached", got.Message)
				}
				tc.want.Message = got.Message
			}
			if got != tc.want {
				t.Errorf("stderr %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestJSONErrorsOnlyWithJSON keeps errors plain text for a person.
func TestJSONErrorsOnlyWithJSON(t *testing.T) {
	srv := newFakeServer(t)
	code, _, errOut := run(t, srv.URL, "show", "999")
	if code != ExitError || errOut != "rota: no job 999\n" {
		t.Errorf("exit %d, stderr %q; want 1 and the plain message", code, errOut)
	}
	code, _, errOut = run(t, srv.URL, "queue", "-o", "table", "--bogus")
	if code != ExitUsage || !strings.HasPrefix(errOut, "flag provided but not defined: -bogus\nusage: ") {
		t.Errorf("exit %d, stderr %q; want 2 and the flag package's message with the usage", code, errOut)
	}
}

// TestJSONErrorsLeaveSuccessAlone: under -o json, what a verb that succeeds writes on
// stderr (its help, say) is passed on as it is.
func TestJSONErrorsLeaveSuccessAlone(t *testing.T) {
	code, _, errOut := testRun{}.run(t, "queue", "-o", "json", "-h")
	if code != ExitOK || !strings.HasPrefix(errOut, "usage: rota queue") {
		t.Errorf("exit %d, stderr %q; want the usage", code, errOut)
	}
}

func TestWantsJSON(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"-o", "json"}, true},
		{[]string{"42", "--output", "json"}, true},
		{[]string{"-o=json"}, true},
		{[]string{"--output=json"}, true},
		{[]string{"-o", "json", "-o", "table"}, false},
		{[]string{"--", "-o", "json"}, false},
		{[]string{"-o", "table"}, false},
		{[]string{"json"}, false},
		{nil, false},
	} {
		if got := wantsJSON(tc.args); got != tc.want {
			t.Errorf("wantsJSON(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}
