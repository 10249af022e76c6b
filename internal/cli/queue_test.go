package cli

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
)

// firstWrites records what a verb writes, and closes shown at its first write.
type firstWrites struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	once  sync.Once
	shown chan struct{}
}

func (w *firstWrites) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.once.Do(func() { close(w.shown) })
	return w.buf.Write(p)
}

func (w *firstWrites) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// pagedJobs serves pages of jobs, each pointing to the next; before(i), if not nil, is
// called before page i (from 0) is served, and an error it returns is the answer instead.
func pagedJobs(t testing.TB, pages [][]api.Job, before func(int) error) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/jobs" {
			http.NotFound(w, r)
			return
		}
		i := 0
		if after := r.URL.Query().Get("after"); after != "" {
			i, _ = strconv.Atoi(after)
		}
		if before != nil {
			if err := before(i); err != nil {
				writeJSON(w, http.StatusInternalServerError, api.Error{Code: api.CodeInternal, Message: err.Error()})
				return
			}
		}
		list := api.JobList{Jobs: pages[i]}
		if i+1 < len(pages) {
			list.Next = strconv.Itoa(i + 1)
		}
		writeJSON(w, http.StatusOK, list)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func pendingJob(id int64, name string) api.Job {
	return api.Job{ID: id, State: api.StatePending, Reason: "Priority", SubmitTime: testNow.Add(-time.Minute),
		Spec: api.JobSpec{Name: name, User: "alice", Queue: "train", GPUs: 1}}
}

func sweepJob(id, array int64, index int) api.Job {
	j := pendingJob(id, "sweep")
	j.ArrayID, j.ArrayIndex = array, &index
	return j
}

// longQueuePages are two pages of jobs: 597 single jobs and the first three of array 598,
// then the array's last two and job 603, whose name is longer than any before it (and
// whose user is shorter than the first job's).
func longQueuePages() [][]api.Job {
	var first []api.Job
	for id := int64(1); id <= 597; id++ {
		first = append(first, pendingJob(id, fmt.Sprintf("job-%d", id)))
	}
	first[0].Spec.User = "alexandra" // the widest user, on the first page only
	first = append(first, sweepJob(598, 598, 0), sweepJob(599, 598, 1), sweepJob(600, 598, 2))
	second := []api.Job{sweepJob(601, 598, 3), sweepJob(602, 598, 4), pendingJob(603, "a-job-with-a-much-longer-name")}
	return [][]api.Job{first, second}
}

// queueAsItComes runs rota queue against pages, serving page gate only once something has
// been written (or after 10 s, which fails the test), and returns the lines it wrote.
func queueAsItComes(t *testing.T, pages [][]api.Job, gate int) []string {
	t.Helper()
	out := &firstWrites{shown: make(chan struct{})}
	var early atomic.Bool // set by the server's goroutine
	srv := pagedJobs(t, pages, func(i int) error {
		if i == gate {
			select {
			case <-out.shown:
			case <-time.After(10 * time.Second):
				early.Store(true)
			}
		}
		return nil
	})
	tr := testRun{env: map[string]string{"ROTA_SERVER": srv.URL, "ROTA_TOKEN": adminToken}, stdout: out}
	code, _, errOut := tr.run(t, "queue")
	if code != ExitOK || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if early.Load() {
		t.Errorf("page %d was read before anything was shown", gate)
	}
	return strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
}

// rota queue shows a long listing page by page: the first page's jobs are written before
// the second page is asked for, an array split between two pages is one line, and columns
// stay aligned across pages except where a later page holds a wider cell.
func TestQueueShowsPagesAsTheyCome(t *testing.T) {
	lines := queueAsItComes(t, longQueuePages(), 1)
	// The header, 597 jobs, the array's one line, job 603.
	if len(lines) != 600 {
		t.Fatalf("%d lines, want 600:\n%s", len(lines), strings.Join(lines[max(len(lines)-5, 0):], "\n"))
	}
	if !strings.HasPrefix(lines[1], "1 ") || !strings.HasPrefix(lines[597], "597 ") {
		t.Errorf("the first page's jobs are not lines 1 to 597:\n%s\n%s", lines[1], lines[597])
	}
	if !strings.HasPrefix(lines[598], "598_[0-4] ") || !strings.Contains(lines[598], "5 pending") {
		t.Errorf("array 598, split between the pages, is not one line: %q", lines[598])
	}
	if !strings.HasPrefix(lines[599], "603 ") {
		t.Errorf("last line %q, want job 603", lines[599])
	}
	// USER starts where the header's does on every line of the first page, and moves
	// right on the second, where a longer name came, and there on both of its lines.
	user := strings.Index(lines[0], "USER")
	for i, l := range lines[1:598] {
		if got := max(strings.Index(l, "alice"), strings.Index(l, "alexandra")); got != user {
			t.Fatalf("line %d: USER at %d, the header's at %d:\n%s\n%s", i+1, got, user, lines[0], l)
		}
	}
	later := strings.Index(lines[599], "alice")
	if later <= user || strings.Index(lines[598], "alice") != later {
		t.Errorf("the second page's USER column is at %d and %d, want both past %d:\n%s\n%s",
			strings.Index(lines[598], "alice"), later, user, lines[598], lines[599])
	}
	// USER keeps the width the first page gave it, though the second has no user as long.
	if gap, want := strings.Index(lines[599], "train")-later, strings.Index(lines[0], "QUEUE")-user; gap != want {
		t.Errorf("on the second page QUEUE is %d past USER, on the first %d:\n%s\n%s", gap, want, lines[0], lines[599])
	}
}

// A listing that breaks off keeps what it showed and says how far it got.
func TestQueueBrokenOffSaysWhere(t *testing.T) {
	srv := pagedJobs(t, longQueuePages(), func(i int) error {
		if i == 1 {
			return fmt.Errorf("the store went away")
		}
		return nil
	})
	code, out, errOut := run(t, srv.URL, "queue")
	if code != ExitError {
		t.Errorf("exit %d, want %d", code, ExitError)
	}
	if !strings.Contains(out, "\n597 ") || strings.Contains(out, "598") {
		t.Errorf("stdout lacks the first page, or shows the array it could not finish:\n%s", lastLine(out))
	}
	if !strings.Contains(errOut, "the listing stopped after 597 jobs") || !strings.Contains(errOut, "the store went away") {
		t.Errorf("stderr %q does not say where the listing stopped and why", errOut)
	}
}

// An array longer than a page is one line, written once its last job is read, and not
// held back to the end of the listing: a queue of large arrays starts showing after the
// page that ends the first of them.
func TestQueueShowsArraysAsTheyEnd(t *testing.T) {
	var pages [][]api.Job
	for p := range 3 { // array 1: jobs 1 to 1,000 on pages of 400
		var page []api.Job
		for i := p * 400; i < min((p+1)*400, 1000); i++ {
			page = append(page, sweepJob(int64(i+1), 1, i))
		}
		pages = append(pages, page)
	}
	pages[2] = append(pages[2], pendingJob(1001, "after"))
	pages = append(pages, []api.Job{pendingJob(1002, "last")})
	lines := queueAsItComes(t, pages, 3)
	if len(lines) != 4 || !strings.HasPrefix(lines[1], "1_[0-999] ") || !strings.Contains(lines[1], "1000 pending") ||
		!strings.HasPrefix(lines[2], "1001 ") || !strings.HasPrefix(lines[3], "1002 ") {
		t.Errorf("want the header, array 1 on one line, jobs 1001 and 1002:\n%s", strings.Join(lines, "\n"))
	}
}

// BenchmarkQueueListing is rota queue --expand reading and printing 20,000 waiting jobs,
// 40 pages of 500, from a server in the same process that answers from memory: the CLI's
// own cost for a long queue (decoding, cleaning, formatting).
func BenchmarkQueueListing(b *testing.B) {
	var pages [][]api.Job
	for p := range 40 {
		var page []api.Job
		for i := range 500 {
			j := pendingJob(int64(p*500+i+1), fmt.Sprintf("scale-wait-%d", p*500+i))
			j.Spec.Command = []string{"python", "train.py", "--lr", "3e-4"}
			j.Spec.Env = map[string]string{"WANDB_PROJECT": "sweep", "SEED": strconv.Itoa(i)}
			j.EstimatedStart = &testNow
			page = append(page, j)
		}
		pages = append(pages, page)
	}
	srv := pagedJobs(b, pages, nil)
	tr := testRun{env: map[string]string{"ROTA_SERVER": srv.URL, "ROTA_TOKEN": adminToken}, stdout: io.Discard}
	for b.Loop() {
		if code, _, errOut := tr.run(b, "queue", "--expand"); code != ExitOK {
			b.Fatalf("exit %d: %s", code, errOut)
		}
	}
}
