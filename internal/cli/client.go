package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/auth"
)

// Client speaks rota's REST API. The CLI verbs use it, and so can end-to-end tests.
// Its methods return *APIError for answers outside 2xx and *UnreachableError when the
// server cannot be dialled.
type Client struct {
	// BaseURL is the server's root, e.g. http://127.0.0.1:7070 or
	// unix:///home/alice/.rota/rota.sock (no /api/v1).
	BaseURL string
	// HTTP sends the requests; nil means a client without an overall timeout (NewClient
	// builds one that dials a unix:// BaseURL and checks a pinned CA). It should have no
	// overall timeout: Logs with a wait holds a request open that long on purpose.
	HTTP *http.Client
	// Token is sent as "Authorization: Bearer" when not empty. The Client refuses to send
	// it over plain http to any host but this machine's loopback.
	Token string
	// Servers, when it holds more than one, lists the servers of a cluster with several
	// (BaseURL among them). A request no server could have acted on (the connection was
	// refused, or a standby answered 503) goes to the leader the standby named, if it is
	// listed, else to the next listed server; BaseURL then follows the one that answered.
	Servers []string
	// Printable makes every string of a decoded answer, and of an error's message, safe
	// to print in a table or a line (see clean): the CLI sets it for table output.
	Printable bool
	// Waiting, if set, hears of each wait for a request the server put off (429): how
	// long, and the server's reason.
	Waiting func(wait time.Duration, reason string)
	// Notice, if set, hears what a follow has to tell its reader on the side, such as
	// that the server keeps no more of the log it follows.
	Notice func(msg string)
}

// putOffFor is how long a request the server puts off with 429 (a user's read budget or
// change limit: see the server's limits) is asked again, as its Retry-After says, before
// the refusal is the answer. A 429 says nothing was done, so asking again is safe. A
// submit is not asked again: its 429 may say the user has as many jobs waiting as they
// may, which waiting a minute does not change, and the caller decides what it means.
var putOffFor = time.Minute

// followFor is how long a Client with several servers keeps looking for the leader
// while none answers, and a Client of one server asks again while it answers 503: long
// enough for a failover (a few lease intervals).
var followFor = 15 * time.Second

// Endpoint names a server and the credentials to use with it.
type Endpoint struct {
	// Server is http://HOST:PORT, https://HOST:PORT or unix:///path/to/rota.sock; a bare
	// HOST:PORT means http. A comma-separated list of http(s) URLs names the servers of
	// a cluster with several; requests follow the leader among them.
	Server string
	// Token is an API token; empty sends none, as the server's Unix socket needs none.
	Token string
	// CAFingerprint, "sha256:<hex>", pins the CA an https server's certificate must chain
	// to; empty trusts the system's roots.
	CAFingerprint string
}

// NewClient makes a Client for e, with an HTTP client that dials a unix:// server's
// socket and checks an https server against the pinned CA.
func NewClient(e Endpoint) (*Client, error) {
	list, err := normalizeServer(e.Server)
	if err != nil {
		return nil, err
	}
	servers := strings.Split(list, ",")
	server := servers[0]
	tr := http.DefaultTransport.(*http.Transport).Clone()
	u, _ := url.Parse(server) // normalizeServer has parsed it
	switch u.Scheme {
	case "unix":
		tr.DialContext = dialSocket(u.Path)
	case "https":
		if e.CAFingerprint != "" {
			if tr.TLSClientConfig, err = auth.ClientTLSConfig(auth.Pin{Fingerprint: e.CAFingerprint}, nil); err != nil {
				return nil, err // it names the fingerprint
			}
		}
	}
	c := &Client{BaseURL: server, HTTP: &http.Client{Transport: tr}, Token: e.Token}
	if len(servers) > 1 {
		c.Servers = servers
		// A server of several that does not answer is passed over for the next: a
		// machine that is off, or a process that is stopped, costs this long, not the
		// 30 s of a connection and the 10 s of a TLS handshake that a client with nowhere
		// else to go waits.
		tr.DialContext = (&net.Dialer{Timeout: passOverAfter, KeepAlive: 30 * time.Second}).DialContext
		tr.TLSHandshakeTimeout = passOverAfter
	}
	return c, nil
}

// passOverAfter is how long a Client of several servers waits for one to take a
// connection, and then for its TLS handshake, before it tries the next.
var passOverAfter = 5 * time.Second

// normalizeServer checks a server URL, or a comma-separated list of them, and puts it in
// the form every comparison uses: a scheme, no trailing slash, no blanks around commas.
// A list may hold only http(s) URLs, each once.
func normalizeServer(server string) (string, error) {
	if !strings.Contains(server, ",") {
		return normalizeOneServer(server)
	}
	var out []string
	for _, part := range strings.Split(server, ",") {
		if strings.TrimSpace(part) == "" {
			return "", fmt.Errorf("server list %q has an empty entry", server)
		}
		s, err := normalizeOneServer(part)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(s, "unix://") {
			return "", fmt.Errorf("server list %q: a list names the http:// or https:// servers of one cluster; a unix:// socket stands alone", server)
		}
		if slices.Contains(out, s) {
			return "", fmt.Errorf("server list %q names %s twice", server, s)
		}
		out = append(out, s)
	}
	return strings.Join(out, ","), nil
}

func normalizeOneServer(server string) (string, error) {
	s := strings.TrimRight(strings.TrimSpace(server), "/")
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("server URL %q: %w", server, err)
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return "", fmt.Errorf("server URL %q has no host", server)
		}
	case "unix":
		if u.Host != "" || !filepath.IsAbs(u.Path) {
			return "", fmt.Errorf("server URL %q: want unix:///absolute/path/to/rota.sock", server)
		}
	default:
		return "", fmt.Errorf("server URL %q: want http://, https:// or unix://", server)
	}
	return s, nil
}

// socketHost is the host of requests sent through a Unix socket: the socket is what is
// dialled, so the name only fills the URL and the Host header.
const socketHost = "rota"

// dialSocket dials the Unix socket at path whatever address a request names.
func dialSocket(path string) func(ctx context.Context, _, _ string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "unix", path)
	}
}

// APIError is an answer outside 2xx. Detail holds the server's api.Error; for a body that
// is not one (a proxy's error page, say) Detail.Message describes the status instead.
// Refusals (401, 403, 429) read as one plain sentence saying what to do.
type APIError struct {
	StatusCode int
	Detail     api.Error
	// Server is the BaseURL of the server that answered.
	Server string
	// RetryAfter is how long a 429 asked the client to wait, 0 when it did not say.
	RetryAfter time.Duration
	// Leader is the leader a standby named in a 503 (the Rota-Leader header), if any.
	Leader string
}

func (e *APIError) Error() string {
	msg := e.Detail.Message
	if e.Detail.Field != "" {
		msg += " (field " + e.Detail.Field + ")"
	}
	switch e.StatusCode {
	case http.StatusUnauthorized:
		server := e.Server
		if server == "" {
			server = "URL"
		}
		return "not logged in or token not valid: " + msg + " (rota login --server " + server + ")"
	case http.StatusForbidden:
		return "permission denied: " + msg + e.roleAndRule(msg)
	case http.StatusTooManyRequests:
		if e.RetryAfter > 0 {
			return fmt.Sprintf("too many requests; try again in %d s", int64((e.RetryAfter+time.Second-1)/time.Second))
		}
		return "too many requests; try again shortly"
	}
	return msg
}

// roleAndRule names the role and rule of a 403 that its message does not already name.
func (e *APIError) roleAndRule(msg string) string {
	var parts []string
	if r := e.Detail.Role; r != "" && !strings.Contains(msg, r) {
		parts = append(parts, "role "+r)
	}
	if r := e.Detail.Rule; r != "" && !strings.Contains(msg, r) {
		parts = append(parts, "rule "+r)
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
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

// lostAnswer is a failure after the request may have reached the server: the connection
// broke before a whole answer came back. Only a request that is safe to repeat, such as
// a submit with an Idempotency-Key, may be sent again after one.
type lostAnswer struct{ err error }

func (e *lostAnswer) Error() string { return e.err.Error() }
func (e *lostAnswer) Unwrap() error { return e.err }

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
	// CollapseArrays asks for each array as one entry, its first job with the summary of
	// all its listed jobs (api.Job.Array): only for jobs not ended. A server that does not
	// know it lists the jobs one by one, as without it.
	CollapseArrays bool
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
	if o.CollapseArrays {
		q.Set("arrays", "collapse")
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
	// Rank picks one rank of a multi-node attempt, Node the rank on that node; with
	// neither the server reads rank 0.
	Rank int
	Node string
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
	// Rank and Node are the rank the server read and its node (X-Rota-Log-Rank and
	// X-Rota-Log-Node); 0 and "" when it omits them.
	Rank int
	Node string
	// Incomplete, on a done log, says why the server holds less of it than its node
	// wrote (X-Rota-Log-Incomplete); "" for a whole log.
	Incomplete string
	// Full, on a log still being written, says that the server keeps no more of it
	// (X-Rota-Log-Full); "" otherwise.
	Full string
	// Held, on a log still being written, says that the server's disk is too full to take
	// more of it for now, so that the rest waits on the node (X-Rota-Log-Held).
	Held string
}

// Submit sends a job spec and returns the job the server created. The request carries a
// fresh Idempotency-Key; should the connection break after the request may have reached
// the server, Submit sends it once more, and the server answers with the job it created
// the first time instead of creating a second.
func (c *Client) Submit(ctx context.Context, spec api.JobSpec) (api.Job, error) {
	body, err := json.Marshal(spec)
	if err != nil {
		return api.Job{}, err
	}
	r := request{method: http.MethodPost, path: "/api/v1/jobs", body: body,
		header: http.Header{"Idempotency-Key": {api.NewIdempotencyKey(time.Now())}}}
	var job api.Job
	err = c.doRequest(ctx, r, &job)
	var lost *lostAnswer
	if errors.As(err, &lost) && ctx.Err() == nil {
		job = api.Job{}
		err = c.doRequest(ctx, r, &job)
	}
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
	err := c.EachJobsPage(ctx, opts, func(page []api.Job) error {
		jobs = append(jobs, page...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return jobs, nil
}

// EachJobsPage follows the pages of ListJobs from opts.After to the end, handing each
// page's jobs to f as it arrives, so that a caller can show the first jobs of a long list
// before the last are read. An error of f ends the walk and is returned.
func (c *Client) EachJobsPage(ctx context.Context, opts ListOptions, f func([]api.Job) error) error {
	seen := map[string]bool{}
	for {
		page, err := c.ListJobs(ctx, opts)
		if err != nil {
			return err
		}
		if err := f(page.Jobs); err != nil {
			return err
		}
		if page.Next == "" {
			return nil
		}
		// A server that hands back a cursor it already gave would keep us here forever.
		if seen[page.Next] {
			return fmt.Errorf("server repeated page cursor %q", page.Next)
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
	if opts.Rank > 0 {
		q.Set("rank", strconv.Itoa(opts.Rank))
	}
	if opts.Node != "" {
		q.Set("node", opts.Node)
	}
	resp, err := c.send(ctx, request{method: http.MethodGet, path: jobPath(id) + "/logs", query: q})
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
	if r := resp.Header.Get("X-Rota-Log-Rank"); r != "" {
		if chunk.Rank, err = strconv.Atoi(r); err != nil {
			return chunk, fmt.Errorf("server sent X-Rota-Log-Rank %q: %w", r, err)
		}
	}
	chunk.Node = resp.Header.Get("X-Rota-Log-Node")
	if c.Printable {
		chunk.Node = clean(chunk.Node)
	}
	chunk.Done = resp.Header.Get("X-Rota-Log-Done") == "true"
	chunk.Incomplete = resp.Header.Get("X-Rota-Log-Incomplete")
	chunk.Full = resp.Header.Get("X-Rota-Log-Full")
	chunk.Held = resp.Header.Get("X-Rota-Log-Held")
	if c.Printable {
		chunk.Incomplete, chunk.Full, chunk.Held = clean(chunk.Incomplete), clean(chunk.Full), clean(chunk.Held)
	}
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
	return c.NodesWhere(ctx, NodeFilter{})
}

// NodeFilter narrows a node list (GET /api/v1/nodes): each field given must match.
type NodeFilter struct {
	States   []string // node states, e.g. NOT_READY
	Pool     string   // the pool label
	Name     string   // a part of the name
	Drifting bool     // versions outside the pool's wanted ranges
	Problems bool     // with a problem (api.Node.HasProblem)
	Free     int      // with at least this many GPUs free; 0: any
}

// NodesWhere lists the nodes that match the filter, by name.
func (c *Client) NodesWhere(ctx context.Context, f NodeFilter) (api.NodeList, error) {
	q := url.Values{}
	if len(f.States) > 0 {
		q.Set("state", strings.Join(f.States, ","))
	}
	for k, v := range map[string]string{"pool": f.Pool, "name": f.Name} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Drifting {
		q.Set("drifting", "true")
	}
	if f.Problems {
		q.Set("problems", "true")
	}
	if f.Free > 0 {
		q.Set("free", strconv.Itoa(f.Free))
	}
	var list api.NodeList
	err := c.do(ctx, http.MethodGet, "/api/v1/nodes", q, nil, &list)
	return list, err
}

// Top reads the cluster at a glance: the first nodes of it (all of them when nodes is
// below 0) and at most jobs of each job list.
func (c *Client) Top(ctx context.Context, nodes, jobs int) (api.Top, error) {
	q := url.Values{"nodes": {"all"}, "jobs": {strconv.Itoa(jobs)}}
	if nodes >= 0 {
		q.Set("nodes", strconv.Itoa(nodes))
	}
	var top api.Top
	err := c.do(ctx, http.MethodGet, "/api/v1/top", q, nil, &top)
	var apiErr *APIError
	if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusNotFound && apiErr.Detail.Code == api.CodeNotFound {
		return top, fmt.Errorf("the server does not answer GET /api/v1/top: it runs an older rota than this one, and rota top needs the server upgraded (%w)", err)
	}
	return top, err
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

// GetArray returns every element of the array whose ID (its first element's job ID) is
// id, in ID order.
func (c *Client) GetArray(ctx context.Context, id int64) ([]api.Job, error) {
	var list api.JobList
	err := c.do(ctx, http.MethodGet, "/api/v1/arrays/"+strconv.FormatInt(id, 10), nil, nil, &list)
	return list.Jobs, err
}

// CancelArray cancels every element of the array whose ID (its first element's job ID) is
// id, and returns the elements as they stand afterwards.
func (c *Client) CancelArray(ctx context.Context, id int64) ([]api.Job, error) {
	return c.arrayAction(ctx, id, "cancel")
}

// HoldArray holds every element of array id that has not started, as Hold does.
func (c *Client) HoldArray(ctx context.Context, id int64) ([]api.Job, error) {
	return c.arrayAction(ctx, id, "hold")
}

// ReleaseArray releases every element of array id, as Release does.
func (c *Client) ReleaseArray(ctx context.Context, id int64) ([]api.Job, error) {
	return c.arrayAction(ctx, id, "release")
}

func (c *Client) arrayAction(ctx context.Context, id int64, action string) ([]api.Job, error) {
	var list api.JobList
	err := c.do(ctx, http.MethodPost, "/api/v1/arrays/"+strconv.FormatInt(id, 10)+"/"+action, nil, nil, &list)
	return list.Jobs, err
}

// History returns the accounting records of the jobs that ended from since to until; a
// zero until means now. It follows the pages to the end.
func (c *Client) History(ctx context.Context, since, until time.Time) (api.HistoryList, error) {
	q := url.Values{"since": {since.UTC().Format(time.RFC3339)}}
	if !until.IsZero() {
		q.Set("until", until.UTC().Format(time.RFC3339))
	}
	all := api.HistoryList{Records: []api.HistoryRecord{}}
	seen := map[string]bool{}
	for {
		var page api.HistoryList
		if err := c.do(ctx, http.MethodGet, "/api/v1/history", q, nil, &page); err != nil {
			return api.HistoryList{}, err
		}
		all.Records = append(all.Records, page.Records...)
		if page.Next == "" {
			return all, nil
		}
		// A server that hands back a cursor it already gave would keep us here forever.
		if seen[page.Next] {
			return api.HistoryList{}, fmt.Errorf("server repeated history cursor %q", page.Next)
		}
		seen[page.Next] = true
		q.Set("after", page.Next)
	}
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

// Drain stops new jobs from starting on a node, now or in the window req plans; the jobs on
// it run to their end. The node is DRAINING until they have, then DRAINED.
func (c *Client) Drain(ctx context.Context, node string, req api.DrainRequest) (api.Node, error) {
	var n api.Node
	var body any
	if req != (api.DrainRequest{}) {
		body = req
	}
	err := c.do(ctx, http.MethodPost, namePath("/api/v1/nodes/", node)+"/drain", nil, body, &n)
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

// Reserve holds GPUs for r.Team from r.Start to r.End: r.GPUs of r.Model in r.Pool by
// count, or the whole r.Nodes. The server sets the ID and returns the reservation.
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
	resp, err := c.send(ctx, request{method: http.MethodPut, path: "/api/v1/config", body: yamlDoc, contentType: "application/yaml"})
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
	resp, err := c.send(ctx, request{method: http.MethodGet, path: "/healthz"})
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

// request is one call of the API.
type request struct {
	method, path string
	query        url.Values
	// body is sent as contentType, application/json when that is empty; nil sends none.
	body        []byte
	contentType string
	header      http.Header
}

// do sends body as JSON (when not nil) and decodes a 2xx answer into out; with out nil
// (an answer such as 204 No Content) it reads and drops the body.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	r := request{method: method, path: path, query: q}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r.body = b
	}
	return c.doRequest(ctx, r, out)
}

// doRequest sends r and decodes a 2xx answer into out, as do does.
func (c *Client) doRequest(ctx context.Context, r request, out any) error {
	resp, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
	} else {
		// encoding/json's rules with a faster decoder: a page of 500 jobs decoded in
		// about a third of the time (BenchmarkQueueListing).
		err = jsonv1.NewDecoder(resp.Body).Decode(out)
	}
	if err != nil {
		// The server has acted on the request; only its answer was cut short.
		return &lostAnswer{fmt.Errorf("%s %s: reading the answer: %w", r.method, r.path, err)}
	}
	if c.Printable && out != nil {
		cleanStrings(reflect.ValueOf(out))
	}
	return nil
}

// send makes the request and turns failures into *UnreachableError, *APIError or
// *lostAnswer. On success the caller owns the response body. With several Servers it
// follows the leader (see Client.Servers), and asks again for a request the server put
// off (putOffFor).
func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	deadline := time.Now().Add(putOffFor)
	submit := r.method == http.MethodPost && r.path == "/api/v1/jobs"
	for {
		resp, err := c.sendFollowing(ctx, r)
		var apiErr *APIError
		if submit || !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests {
			return resp, err
		}
		wait := max(apiErr.RetryAfter, 250*time.Millisecond)
		if time.Now().Add(wait).After(deadline) {
			return nil, err
		}
		if c.Waiting != nil {
			c.Waiting(wait, apiErr.Detail.Message)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// sendFollowing is send without asking again for requests put off.
func (c *Client) sendFollowing(ctx context.Context, r request) (*http.Response, error) {
	if len(c.Servers) < 2 {
		return c.sendToOne(ctx, r)
	}
	base := strings.TrimRight(c.BaseURL, "/")
	tried := map[string]bool{}
	deadline := time.Now().Add(followFor)
	for {
		resp, err := c.sendTo(ctx, base, r)
		var (
			unreachable *UnreachableError
			apiErr      *APIError
		)
		switch {
		case err == nil:
			c.BaseURL = base
			return resp, nil
		case errors.As(err, &unreachable):
		case errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusServiceUnavailable:
			// Nothing was done: a standby refuses before acting, and a leader answers 503
			// only for a change it did not commit.
		default:
			return nil, err
		}
		tried[base] = true
		next := ""
		if l := c.leaderNamed(err); l != "" && !tried[l] {
			next = l
		}
		for _, s := range c.Servers {
			if next == "" && !tried[s] {
				next = s
			}
		}
		if next == "" {
			// Every server tried: an election is under way, or none is up. Look again
			// shortly, for a while.
			if time.Now().After(deadline) {
				return nil, err
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
			clear(tried)
			next = cmp.Or(c.leaderNamed(err), c.Servers[0])
		}
		base = next
	}
}

// leaderNamed is the server err, a standby's answer, named as the leader, when it is one
// of c.Servers; "" otherwise.
func (c *Client) leaderNamed(err error) string {
	var apiErr *APIError
	if errors.As(err, &apiErr) && slices.Contains(c.Servers, apiErr.Leader) {
		return apiErr.Leader
	}
	return ""
}

// sendToOne is send for a Client of one server. A rota server's 503 (code unavailable)
// says nothing was done (a standby that has not yet learned who leads, a leader
// re-reading the store): the request is sent again, as the answer's Retry-After asks, for up to followFor. A server that cannot be
// reached is said at once: with one server there is nowhere else to look.
func (c *Client) sendToOne(ctx context.Context, r request) (*http.Response, error) {
	deadline := time.Now().Add(followFor)
	for {
		resp, err := c.sendTo(ctx, c.BaseURL, r)
		var apiErr *APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable || apiErr.Detail.Code != api.CodeUnavailable {
			return resp, err
		}
		wait := min(max(apiErr.RetryAfter, 250*time.Millisecond), 2*time.Second)
		if time.Now().Add(wait).After(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// sendTo is send to the server at base alone.
func (c *Client) sendTo(ctx context.Context, base string, r request) (*http.Response, error) {
	base = strings.TrimRight(base, "/")
	target, err := c.requestBase(base)
	if err != nil {
		return nil, err
	}
	u := target + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		return nil, err
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json")
	if r.body != nil {
		ct := r.contentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	// Whether any of the request was written: until then the server cannot have acted on
	// it, whatever broke.
	var wrote atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaders: func() { wrote.Store(true) }}))
	resp, err := c.httpClient(base).Do(req)
	if err != nil {
		var op *net.OpError
		switch {
		case ctx.Err() != nil:
			return nil, err
		case errors.As(err, &op) && op.Op == "dial":
			return nil, &UnreachableError{URL: base, Err: op.Err}
		case !wrote.Load() && connectionFailed(err):
			// A server whose machine takes the connection but whose process does not
			// answer (stopped, or hung) fails the TLS handshake by timeout; one that
			// closes the connection fails it with EOF or a reset. Neither read a byte of
			// the request, so it may go to another server.
			return nil, &UnreachableError{URL: base, Err: err}
		}
		return nil, &lostAnswer{err}
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		e := readAPIError(resp)
		e.Server = base
		if c.Printable {
			cleanStrings(reflect.ValueOf(e))
		}
		if e.StatusCode == http.StatusBadGateway && e.Detail.Code == api.CodeForwardFailed {
			// A standby sent the request on to the leader and lost the connection to it
			// before the answer: the same as a connection of ours broken mid-way.
			return nil, &lostAnswer{e}
		}
		return nil, e
	}
	return resp, nil
}

// connectionFailed reports whether err is the connection's failure (a timeout, a close
// or a reset) rather than a refusal such as a certificate that does not verify.
func connectionFailed(err error) bool {
	var ne net.Error
	return (errors.As(err, &ne) && ne.Timeout()) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// requestBase is what request URLs start with: the BaseURL itself, or a stand-in host
// for a Unix socket. It refuses a token bound for plain http beyond this machine.
func (c *Client) requestBase(base string) (string, error) {
	if strings.HasPrefix(base, "unix://") {
		return "http://" + socketHost, nil
	}
	if c.Token != "" && strings.HasPrefix(base, "http://") && !isLoopback(base) {
		return "", fmt.Errorf("refusing to send the API token to %s over plain http, where anyone on the network path could read it; use the server's https:// URL", base)
	}
	return base, nil
}

// isLoopback reports whether the server URL names this machine's loopback interface.
func isLoopback(server string) bool {
	u, err := url.Parse(server)
	if err != nil {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// httpClient is c.HTTP, or for a Client built without one a plain client; for a Unix
// socket that one keeps no idle connections, as nothing would ever close them.
func (c *Client) httpClient(base string) *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	if path, ok := strings.CutPrefix(base, "unix://"); ok {
		return &http.Client{Transport: &http.Transport{DialContext: dialSocket(path), DisableKeepAlives: true}}
	}
	return http.DefaultClient
}

// readAPIError decodes an api.Error body, falling back to the status and the start of
// whatever else the body holds.
func readAPIError(resp *http.Response) *APIError {
	e := &APIError{StatusCode: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After")),
		Leader: strings.TrimRight(resp.Header.Get(api.LeaderHeader), "/")}
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

// retryAfter reads a Retry-After header: seconds, or an HTTP date (taken against the
// local clock, which is all a client has).
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}
