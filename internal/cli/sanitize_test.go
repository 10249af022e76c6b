package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode"
)

// hostile is what a hostile agent or user puts in every string the server relays: an
// escape sequence that colours the terminal, a bell, a newline that would start a row of
// its own, a C1 CSI (U+009B, an escape on many terminals), a right-to-left override and a
// backspace.
const hostile = "\x1b[31mRED\x07\nrow\u009b2J\u202e\b"

// poison rewrites every string of a JSON answer, map keys included, to end in hostile,
// except the times and the enums the client needs to read the answer at all (a job's
// state, a node's state), which a real server could not send otherwise either.
func poison(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		body := rec.Body.Bytes()
		var v any
		if strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") && json.Unmarshal(body, &v) == nil {
			body, _ = json.Marshal(poisonValue(v, ""))
			w.Header().Del("Content-Length")
		}
		w.WriteHeader(rec.Code)
		w.Write(body)
	})
}

// keep are fields whose values the client parses rather than prints.
var keep = map[string]bool{"state": true, "to": true, "from": true, "next": true, "kind": true, "role": true,
	"restart_policy": true, "currency": true, "by": true, "code": true, "token": true, "command": false}

func poisonValue(v any, key string) any {
	switch x := v.(type) {
	case string:
		if _, err := time.Parse(time.RFC3339Nano, x); err == nil || keep[key] || x == "" {
			return x
		}
		return x + hostile
	case []any:
		for i := range x {
			x[i] = poisonValue(x[i], key)
		}
		return x
	case map[string]any:
		out := map[string]any{}
		for k, val := range x {
			nk := k
			if key == "labels" || key == "gpus_in_use" || key == "env" || key == "by_category" || key == "failures" {
				nk = k + hostile // keys that are data, not field names
			}
			out[nk] = poisonValue(val, k)
		}
		return out
	}
	return v
}

// terminalUnsafe finds what must never reach a terminal: control characters other than the
// newline that ends a line, and format characters that reorder text.
func terminalUnsafe(s string) (rune, bool) {
	for _, r := range s {
		if r == '\n' {
			continue
		}
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return r, true
		}
	}
	return 0, false
}

// Every table and show renderer prints server-provided strings (node names, GPU models,
// job names, reasons, messages, labels, users, queues, teams, events) without passing a
// control character to the terminal, and without a relayed newline starting a row of its
// own: each command prints as many lines as it does for the same answer without them.
func TestRenderersSanitiseServerStrings(t *testing.T) {
	clean := newFakeServer(t)
	dirty := newFakeServerWith(t, func(s *httptest.Server) {
		s.Config.Handler = poison(s.Config.Handler)
		s.Start()
	})
	// The accounting routes come from a fake of their own; the hostile copy stands in
	// front of it.
	acct := newAccountingFake(t)
	target, _ := url.Parse(acct.URL)
	dirtyAcct := httptest.NewServer(poison(httputil.NewSingleHostReverseProxy(target)))
	t.Cleanup(dirtyAcct.Close)
	for _, args := range [][]string{{"usage"}, {"usage", "--by", "node"}, {"admin", "price", "list"}} {
		_, cleanOut, _ := run(t, acct.URL, args[0], args[1:]...)
		_, out, errOut := run(t, dirtyAcct.URL, args[0], args[1:]...)
		if !strings.Contains(out, "RED") {
			t.Errorf("rota %s printed nothing the server sent\n%s%s", strings.Join(args, " "), out, errOut)
		}
		if r, bad := terminalUnsafe(out + errOut); bad {
			t.Errorf("rota %s passes %U to the terminal:\n%q", strings.Join(args, " "), r, out)
		}
		if got, want := strings.Count(out, "\n"), strings.Count(cleanOut, "\n"); got != want {
			t.Errorf("rota %s: %d lines with the hostile strings, %d without\n%s", strings.Join(args, " "), got, want, out)
		}
	}
	for _, args := range [][]string{
		{"queue"}, {"queue", "--all"}, {"queue", "--expand"},
		{"show", "42"}, {"show", "43"}, {"show", "44"}, {"show", "45"}, {"show", "47"}, {"show", "48"},
		{"why", "43"}, {"nodes"}, {"whoami"}, {"top", "--once"},
		{"admin", "queue", "list"}, {"admin", "team", "list"}, {"admin", "reservations"},
		{"admin", "user", "list"}, {"admin", "token", "list"}, {"admin", "join-token", "list"}, {"admin", "audit"},
		{"cancel", "42"}, {"admin", "drain", "node-a"},
		{"show", "999"}, {"hold", "42"},
	} {
		_, cleanOut, cleanErr := run(t, clean.URL, args[0], args[1:]...)
		_, out, errOut := run(t, dirty.URL, args[0], args[1:]...)
		if !strings.Contains(out+errOut, "RED") {
			t.Errorf("rota %s printed nothing the server sent: the test no longer covers it\n%s%s", strings.Join(args, " "), out, errOut)
		}
		for name, text := range map[string]string{"stdout": out, "stderr": errOut} {
			if r, bad := terminalUnsafe(text); bad {
				t.Errorf("rota %s: %s passes %U to the terminal:\n%q", strings.Join(args, " "), name, r, text)
			}
		}
		if got, want := bytes.Count([]byte(out), []byte("\n")), strings.Count(cleanOut, "\n"); got != want {
			t.Errorf("rota %s: %d lines with the hostile strings, %d without: a relayed newline broke a row\n%s", strings.Join(args, " "), got, want, out)
		}
		if got, want := strings.Count(errOut, "\n"), strings.Count(cleanErr, "\n"); got != want {
			t.Errorf("rota %s: stderr has %d lines with the hostile strings, %d without\n%s", strings.Join(args, " "), got, want, errOut)
		}
	}
}
