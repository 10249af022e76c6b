package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// Client speaks rota's REST API. The CLI verbs use it, and so can end-to-end tests.
// Its methods return *APIError for answers outside 2xx and *UnreachableError when the
// server cannot be dialled.
type Client struct {
	// BaseURL is the server's root, e.g. http://127.0.0.1:7070 (no /api/v1).
	BaseURL string
	// HTTP sends the requests; nil means http.DefaultClient. It should have no overall
	// timeout: Logs with a wait holds a request open that long on purpose.
	HTTP *http.Client
}

// APIError is an answer outside 2xx. Detail holds the server's api.Error; for a body that
// is not one (a proxy's error page, say) Detail.Message describes the status instead.
type APIError struct {
	StatusCode int
	Detail     api.Error
}

func (e *APIError) Error() string {
	if e.Detail.Field != "" {
		return e.Detail.Message + " (field " + e.Detail.Field + ")"
	}
	return e.Detail.Message
}

// UnreachableError means no connection to the server could be made at all.
type UnreachableError struct {
	URL string
	Err error
}

func (e *UnreachableError) Error() string {
	return "cannot reach the rota server at " + e.URL + ": " + e.Err.Error()
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// ListOptions filters GET /api/v1/jobs. Zero values mean no filter.
type ListOptions struct {
	// States to include; empty means every non-terminal state, "all" every state.
	States []string
	Queue  string
	User   string
	// Limit is the page size; 0 leaves it to the server.
	Limit int
	// After is the cursor from a previous page's Next.
	After string
}

func (o ListOptions) query() url.Values {
	q := url.Values{}
	if len(o.States) > 0 {
		q.Set("state", strings.Join(o.States, ","))
	}
	if o.Queue != "" {
		q.Set("queue", o.Queue)
	}
	if o.User != "" {
		q.Set("user", o.User)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.After != "" {
		q.Set("after", o.After)
	}
	return q
}

// LogOptions selects part of a job's log.
type LogOptions struct {
	// Attempt is the attempt number; 0 means the latest.
	Attempt int
	// Offset is the byte position to read from.
	Offset int64
	// Wait, when positive, lets the server hold the request until there are bytes past
	// Offset or the log is done. It is sent in whole seconds.
	Wait time.Duration
}

// LogChunk describes what one Logs call delivered.
type LogChunk struct {
	// N is the number of bytes written; the next offset is Offset+N.
	N int64
	// Size is the log's total size so far (X-Rota-Log-Size), -1 when the server omits it.
	Size int64
	// Done is set once the attempt has ended and its whole log has arrived.
	Done bool
	// Attempt is the attempt the server read (X-Rota-Log-Attempt), 0 when it omits it.
	Attempt int
}

// Submit sends a job spec and returns the job the server created.
func (c *Client) Submit(ctx context.Context, spec api.JobSpec) (api.Job, error) {
	var job api.Job
	err := c.do(ctx, http.MethodPost, "/api/v1/jobs", nil, spec, &job)
	return job, err
}

// ListJobs returns one page of jobs; follow the list's Next with opts.After for the rest.
func (c *Client) ListJobs(ctx context.Context, opts ListOptions) (api.JobList, error) {
	var list api.JobList
	err := c.do(ctx, http.MethodGet, "/api/v1/jobs", opts.query(), nil, &list)
	return list, err
}

// AllJobs follows the pages of ListJobs from opts.After to the end.
func (c *Client) AllJobs(ctx context.Context, opts ListOptions) ([]api.Job, error) {
	jobs := []api.Job{}
	seen := map[string]bool{}
	for {
		page, err := c.ListJobs(ctx, opts)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, page.Jobs...)
		if page.Next == "" {
			return jobs, nil
		}
		// A server that hands back a cursor it already gave would keep us here forever.
		if seen[page.Next] {
			return nil, fmt.Errorf("server repeated page cursor %q", page.Next)
		}
		seen[page.Next] = true
		opts.After = page.Next
	}
}

// GetJob returns a job with its attempts and events.
func (c *Client) GetJob(ctx context.Context, id int64) (api.JobDetail, error) {
	var d api.JobDetail
	err := c.do(ctx, http.MethodGet, jobPath(id), nil, nil, &d)
	return d, err
}

// Cancel asks the server to cancel a job and returns the job as it stands afterwards.
// A pending job is cancelled at once; an active one has CancelRequested set until its
// agent reports it stopped.
func (c *Client) Cancel(ctx context.Context, id int64) (api.Job, error) {
	var job api.Job
	err := c.do(ctx, http.MethodPost, jobPath(id)+"/cancel", nil, nil, &job)
	return job, err
}

// Logs copies a job's log from opts.Offset to w and reports what it wrote.
func (c *Client) Logs(ctx context.Context, id int64, opts LogOptions, w io.Writer) (LogChunk, error) {
	q := url.Values{}
	if opts.Attempt > 0 {
		q.Set("attempt", strconv.Itoa(opts.Attempt))
	}
	if opts.Offset > 0 {
		q.Set("offset", strconv.FormatInt(opts.Offset, 10))
	}
	if opts.Wait > 0 {
		q.Set("wait", strconv.FormatInt(int64((opts.Wait+time.Second-1)/time.Second), 10))
	}
	resp, err := c.send(ctx, http.MethodGet, jobPath(id)+"/logs", q, nil, "")
	if err != nil {
		return LogChunk{}, err
	}
	defer resp.Body.Close()
	chunk := LogChunk{Size: -1}
	if s := resp.Header.Get("X-Rota-Log-Size"); s != "" {
		if chunk.Size, err = strconv.ParseInt(s, 10, 64); err != nil {
			return chunk, fmt.Errorf("server sent X-Rota-Log-Size %q: %w", s, err)
		}
	}
	if a := resp.Header.Get("X-Rota-Log-Attempt"); a != "" {
		if chunk.Attempt, err = strconv.Atoi(a); err != nil {
			return chunk, fmt.Errorf("server sent X-Rota-Log-Attempt %q: %w", a, err)
		}
	}
	chunk.Done = resp.Header.Get("X-Rota-Log-Done") == "true"
	chunk.N, err = io.Copy(w, resp.Body)
	if err != nil {
		// Bytes already written still count, so a follower resumes after them; but a log
		// cut short is not done.
		chunk.Done = false
		return chunk, fmt.Errorf("copying the log of job %d: %w", id, err)
	}
	return chunk, nil
}

// Nodes lists every node the server knows.
func (c *Client) Nodes(ctx context.Context) (api.NodeList, error) {
	var list api.NodeList
	err := c.do(ctx, http.MethodGet, "/api/v1/nodes", nil, nil, &list)
	return list, err
}

// Queues lists the configured queues.
func (c *Client) Queues(ctx context.Context) ([]api.Queue, error) {
	var list api.QueueList
	err := c.do(ctx, http.MethodGet, "/api/v1/queues", nil, nil, &list)
	return list.Queues, err
}

// Hold keeps a job that has not started from starting until Release. It returns the job
// as it stands afterwards.
func (c *Client) Hold(ctx context.Context, id int64) (api.Job, error) {
	var job api.Job
	err := c.do(ctx, http.MethodPost, jobPath(id)+"/hold", nil, nil, &job)
	return job, err
}

// Release undoes Hold. The job may stay HELD for other reasons, such as a dependency.
func (c *Client) Release(ctx context.Context, id int64) (api.Job, error) {
	var job api.Job
	err := c.do(ctx, http.MethodPost, jobPath(id)+"/release", nil, nil, &job)
	return job, err
}

// Why says in plain sentences why a job has not started, and when it may.
func (c *Client) Why(ctx context.Context, id int64) (api.Why, error) {
	var why api.Why
	err := c.do(ctx, http.MethodGet, jobPath(id)+"/why", nil, nil, &why)
	return why, err
}

// Teams lists the teams with their quotas, usage and GPUs in use.
func (c *Client) Teams(ctx context.Context) (api.TeamList, error) {
	var list api.TeamList
	err := c.do(ctx, http.MethodGet, "/api/v1/teams", nil, nil, &list)
	return list, err
}

// SetTeam creates team.Name or replaces it whole, and returns it as stored.
func (c *Client) SetTeam(ctx context.Context, team api.Team) (api.Team, error) {
	var out api.Team
	err := c.do(ctx, http.MethodPut, namePath("/api/v1/teams/", team.Name), nil, team, &out)
	return out, err
}

// DeleteTeam removes a team.
func (c *Client) DeleteTeam(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, namePath("/api/v1/teams/", name), nil, nil, nil)
}

// SetQueue creates queue.Name or replaces it whole, and returns it as stored.
func (c *Client) SetQueue(ctx context.Context, queue api.Queue) (api.Queue, error) {
	var out api.Queue
	err := c.do(ctx, http.MethodPut, namePath("/api/v1/queues/", queue.Name), nil, queue, &out)
	return out, err
}

// DeleteQueue removes a queue.
func (c *Client) DeleteQueue(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, namePath("/api/v1/queues/", name), nil, nil, nil)
}

// Drain stops new jobs from starting on a node; the jobs on it run to their end. The node
// is DRAINING until they have, then DRAINED.
func (c *Client) Drain(ctx context.Context, node string) (api.Node, error) {
	var n api.Node
	err := c.do(ctx, http.MethodPost, namePath("/api/v1/nodes/", node)+"/drain", nil, nil, &n)
	return n, err
}

// Resume lets jobs start on a drained or draining node again.
func (c *Client) Resume(ctx context.Context, node string) (api.Node, error) {
	var n api.Node
	err := c.do(ctx, http.MethodPost, namePath("/api/v1/nodes/", node)+"/resume", nil, nil, &n)
	return n, err
}

// Reservations lists the reservations that have not ended.
func (c *Client) Reservations(ctx context.Context) (api.ReservationList, error) {
	var list api.ReservationList
	err := c.do(ctx, http.MethodGet, "/api/v1/reservations", nil, nil, &list)
	return list, err
}

// Reserve asks for r.GPUs for r.Team from r.Start to r.End. The server picks the nodes and
// the ID, and returns the reservation with both.
func (c *Client) Reserve(ctx context.Context, r api.Reservation) (api.Reservation, error) {
	var out api.Reservation
	err := c.do(ctx, http.MethodPost, "/api/v1/reservations", nil, r, &out)
	return out, err
}

// Unreserve deletes a reservation.
func (c *Client) Unreserve(ctx context.Context, id int64) error {
	return c.do(ctx, http.MethodDelete, "/api/v1/reservations/"+strconv.FormatInt(id, 10), nil, nil, nil)
}

// ApplyConfig sends an administrative config file's YAML as it is, so the server can name
// the line of any mistake, and returns the configuration as applied.
func (c *Client) ApplyConfig(ctx context.Context, yamlDoc []byte) (api.Config, error) {
	var out api.Config
	resp, err := c.send(ctx, http.MethodPut, "/api/v1/config", nil, bytes.NewReader(yamlDoc), "application/yaml")
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return out, fmt.Errorf("PUT /api/v1/config: decoding the answer: %w", err)
	}
	return out, nil
}

// Health returns nil once the server answers /healthz with 200.
func (c *Client) Health(ctx context.Context) error {
	resp, err := c.send(ctx, http.MethodGet, "/healthz", nil, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

func jobPath(id int64) string { return "/api/v1/jobs/" + strconv.FormatInt(id, 10) }

// namePath appends a name to a collection's path, escaped so that no name can reach
// another route.
func namePath(collection, name string) string { return collection + url.PathEscape(name) }

// do sends body as JSON (when not nil) and decodes a 2xx answer into out; with out nil
// (an answer such as 204 No Content) it reads and drops the body.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	resp, err := c.send(ctx, method, path, q, r, "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, err := io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}

// send makes the request, with body of contentType when body is not nil, and turns
// failures into *UnreachableError or *APIError. On success the caller owns the response
// body.
func (c *Client) send(ctx context.Context, method, path string, q url.Values, body io.Reader, contentType string) (*http.Response, error) {
	base := strings.TrimRight(c.BaseURL, "/")
	u := base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		var op *net.OpError
		if ctx.Err() == nil && errors.As(err, &op) && op.Op == "dial" {
			return nil, &UnreachableError{URL: base, Err: op.Err}
		}
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, readAPIError(resp)
	}
	return resp, nil
}

// readAPIError decodes an api.Error body, falling back to the status and the start of
// whatever else the body holds.
func readAPIError(resp *http.Response) *APIError {
	e := &APIError{StatusCode: resp.StatusCode}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(raw, &e.Detail) == nil && e.Detail.Message != "" {
		return e
	}
	e.Detail = api.Error{Message: "server answered " + resp.Status}
	text := strings.TrimSpace(string(raw))
	if i := strings.IndexByte(text, '\n'); i >= 0 {
		text = text[:i]
	}
	if len(text) > 200 {
		text = text[:200] + "…"
	}
	if text != "" {
		e.Detail.Message += ": " + text
	}
	return e
}
