package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/rotahq/rota/internal/api"
)

// maxBody bounds every JSON request. A job spec with a long command and environment fits
// comfortably; anything larger is a mistake or an attack.
const maxBody = 1 << 20

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

// decodeJSON reads one JSON value into v, refusing unknown fields, trailing data and bodies
// over maxBody, with an error that names the field at fault.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) (int, *api.Error) {
	body := http.MaxBytesReader(w, r.Body, maxBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		var typeErr *json.UnmarshalTypeError
		var syntaxErr *json.SyntaxError
		switch {
		case errors.As(err, &tooBig):
			return http.StatusRequestEntityTooLarge, &api.Error{Code: api.CodeTooLarge, Message: fmt.Sprintf("request body is larger than the %d-byte limit", maxBody)}
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
