package store

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// timeLayout is how every time is stored: UTC with all nine fractional digits, so stored
// times have one width and sort as strings (RFC3339Nano trims trailing zeros, which would
// put "…:05Z" after "…:05.5Z"). time.RFC3339Nano parses it.
const timeLayout = "2006-01-02T15:04:05.000000000Z"

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// formatTimePtr returns nil, which binds as NULL, for a nil time.
func formatTimePtr(t *time.Time) any {
	if t == nil {
		return nil
	}
	return formatTime(*t)
}

func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("parse stored time: %w", err)
	}
	return t, nil
}

func parseTimePtr(s sql.NullString) (*time.Time, error) {
	if !s.Valid {
		return nil, nil
	}
	t, err := parseTime(s.String)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// utcPtr returns a copy of *t in UTC, so normalizing never writes through the caller's pointer.
func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// encodeJob returns the JSON stored for j, with its times in UTC like every stored time,
// and without Priority, Checkpoints, Usage and the warnings, which are computed afresh for the API.
func encodeJob(j api.Job) ([]byte, error) {
	j.SubmitTime = j.SubmitTime.UTC()
	j.StartTime = utcPtr(j.StartTime)
	j.EndTime = utcPtr(j.EndTime)
	j.EstimatedStart = utcPtr(j.EstimatedStart)
	j.LastCheckpoint = utcPtr(j.LastCheckpoint)
	j.NotBefore = utcPtr(j.NotBefore)
	j.IdleSince = utcPtr(j.IdleSince)
	j.Spec.Deadline = utcPtr(j.Spec.Deadline)
	j.Priority, j.Checkpoints, j.Usage, j.DeadlineWarning, j.BudgetWarning, j.Array = nil, "", nil, "", "", nil
	data, err := json.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("encode job %d: %w", j.ID, err)
	}
	return data, nil
}

func decodeJob(data []byte) (api.Job, error) {
	var j api.Job
	if err := json.Unmarshal(data, &j); err != nil {
		return api.Job{}, fmt.Errorf("decode stored job: %w", err)
	}
	return j, nil
}

// encodeTeam returns the JSON stored for t: without the usage the API fills in from the
// live state.
func encodeTeam(t api.Team) (string, error) {
	t.UsageGPUHours = 0
	t.GPUsInUse = nil
	return encodeJSON(t)
}

// encodeReservation returns the JSON stored for r, with its times in UTC, without what the
// API fills in from the live state.
func encodeReservation(r api.Reservation) (string, error) {
	r.Start = r.Start.UTC()
	r.End = r.End.UTC()
	r.Used, r.Held = 0, 0
	return encodeJSON(r)
}

// encodeJSON returns v as a JSON string, the form TEXT columns bind from.
func encodeJSON(v any) (string, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode %T: %w", v, err)
	}
	return string(data), nil
}

func decodeJSON(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decode stored %T: %w", v, err)
	}
	return nil
}
