package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"

	"github.com/rotahq/rota/internal/api"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, e *api.Error) {
	writeJSON(w, status, e)
}

func invalid(field, format string, args ...any) *api.Error {
	return &api.Error{Code: api.CodeInvalid, Field: field, Message: fmt.Sprintf(format, args...)}
}

// checkContentType refuses a body of the wrong media type: JSON routes take only
// application/json, so that no web page can post a form or text/plain to them (browsers
// send those cross-origin without asking). Routes without a body accept none or JSON.
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
	case noBody:
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
	s.mu.Lock()
	limit := s.state.Limits().MaxBodyBytes
	s.mu.Unlock()
	return decodeJSON(w, r, v, limit)
}

// decodeJSON reads one JSON value into v, refusing unknown fields, trailing data and bodies
// over limit bytes, with an error that names the field at fault.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any, limit int64) (int, *api.Error) {
	body := http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		var typeErr *json.UnmarshalTypeError
		var syntaxErr *json.SyntaxError
		switch {
		case errors.As(err, &tooBig):
			return http.StatusRequestEntityTooLarge, &api.Error{Code: api.CodeTooLarge, Message: fmt.Sprintf("request body is larger than the %d-byte limit", limit)}
		case errors.As(err, &typeErr):
			return http.StatusBadRequest, invalid(typeErr.Field, "must be of type %s, not %s", typeErr.Type, typeErr.Value)
		case errors.As(err, &syntaxErr):
			return http.StatusBadRequest, invalid("", "malformed JSON at byte %d: %v", syntaxErr.Offset, err)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return http.StatusBadRequest, invalid(field, "unknown field %q", field)
		case errors.Is(err, io.EOF):
			return http.StatusBadRequest, invalid("", "empty request body: expected a JSON object")
		}
		return http.StatusBadRequest, invalid("", "bad JSON: %v", err)
	}
	if dec.More() {
		return http.StatusBadRequest, invalid("", "unexpected data after the JSON object")
	}
	return 0, nil
}

// validName checks a name of a user, team, queue or node against the pattern and the
// length limit in force. Names become parts of paths and log lines, so nothing else passes.
func (s *Server) validName(field, v string) *api.Error {
	limit := s.state.Limits().MaxNameLength
	if v == "" || len(v) > limit || !nameRE.MatchString(v) {
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
