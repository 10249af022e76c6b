package cli

import (
	"context"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"

	"github.com/rotahq/rota/internal/api"
)

// A job's terminal can close before any of its output reached the terminal attached to
// it (the job was quicker than the relay): rota run then shows the job's log, and exits
// with the job's code. Output that came over the stream is not shown twice.
func TestRunShowsTheLogOfAJobQuickerThanTheRelay(t *testing.T) {
	for _, streamed := range []bool{false, true} {
		var closed atomic.Bool
		mux := interactiveJob7(&closed, 9)
		mux.HandleFunc("GET /api/v1/jobs/7/attach", func(w http.ResponseWriter, r *http.Request) {
			c, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			if streamed {
				c.Write(r.Context(), websocket.MessageBinary, append([]byte{api.FrameData}, "quick\r\n"...))
			}
			closed.Store(true)
			c.Close(websocket.StatusNormalClosure, "the job's terminal closed")
		})
		mux.HandleFunc("GET /api/v1/jobs/7/logs", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Rota-Log-Size", "7")
			w.Header().Set("X-Rota-Log-Attempt", "1")
			w.Header().Set("X-Rota-Log-Done", "true")
			w.Write([]byte("quick\r\n"))
		})
		url := newHTTPServer(t, mux)
		code, out, errOut := runOnTerminal(t, url, nil, "--", "sh", "-c", "echo quick; exit 9")
		if code != 9 {
			t.Errorf("streamed %v: exit %d, stderr %q; want the job's 9", streamed, code, errOut)
		}
		if got := strings.Count(out, "quick"); got != 1 {
			t.Errorf("streamed %v: stdout %q; want the job's output once", streamed, out)
		}
	}
}

// A terminal's stream that breaks because the server went away (a restart, a failover) is
// opened again: rota run says so, holds the keys typed meanwhile and sends them, after the
// window's size, on the new stream, and goes on to the job's end. A job that ended while
// the server was away is reported with its exit code.
func TestRunReattachesAfterLosingTheServer(t *testing.T) {
	for _, endedMeanwhile := range []bool{false, true} {
		var (
			ended    atomic.Bool
			attaches atomic.Int32
			outage   = make(chan struct{})
			frames   = make(chan []byte, 16)
		)
		mux := interactiveJob7(&ended, 5)
		mux.HandleFunc("GET /api/v1/jobs/7/attach", func(w http.ResponseWriter, r *http.Request) {
			switch n := attaches.Add(1); {
			case n == 1:
				c, err := websocket.Accept(w, r, nil)
				if err != nil {
					return
				}
				c.Write(r.Context(), websocket.MessageBinary, append([]byte{api.FrameData}, "one\r\n"...))
				// The server goes away: the connection drops without a close frame.
				c.CloseNow()
			case n == 2 && endedMeanwhile:
				ended.Store(true)
				close(outage)
				writeJSON(w, http.StatusConflict, api.Error{Code: api.CodeConflict, Field: "id", Message: "job 7 has ended: FAILED"})
			case n <= 3:
				if n == 2 {
					close(outage)
				}
				writeJSON(w, http.StatusServiceUnavailable, api.Error{Code: api.CodeUnavailable, Message: "the server is starting"})
			default:
				c, err := websocket.Accept(w, r, nil)
				if err != nil {
					return
				}
				for range 2 {
					_, msg, err := c.Read(r.Context())
					if err != nil {
						return
					}
					frames <- msg
				}
				c.Write(r.Context(), websocket.MessageBinary, append([]byte{api.FrameData}, "two\r\n"...))
				ended.Store(true)
				c.Close(websocket.StatusNormalClosure, "the job's terminal closed")
			}
		})
		url := newHTTPServer(t, mux)
		code, out, errOut := runOnTerminal(t, url, func(ptm *os.File) {
			if err := pty.Setsize(ptm, &pty.Winsize{Rows: 30, Cols: 100}); err != nil {
				t.Error(err)
			}
			go func() {
				<-outage
				// Typed while there is no stream: held, and sent on the next one.
				ptm.Write([]byte("abc"))
			}()
		}, "--", "bash")
		if code != 5 {
			t.Errorf("ended meanwhile %v: exit %d, stderr %q; want the job's 5", endedMeanwhile, code, errOut)
		}
		if !strings.Contains(errOut, "lost the server") {
			t.Errorf("ended meanwhile %v: stderr %q; want it to say the server was lost", endedMeanwhile, errOut)
		}
		if endedMeanwhile {
			if !strings.Contains(errOut, "job 7 ended while the server was away") {
				t.Errorf("stderr %q; want it to say the job ended meanwhile", errOut)
			}
			continue
		}
		if got := out; got != "one\r\ntwo\r\n" {
			t.Errorf("stdout %q; want the output of both streams, once each", got)
		}
		if !strings.Contains(errOut, "reconnected to job 7") {
			t.Errorf("stderr %q; want it to say it reconnected", errOut)
		}
		if n := attaches.Load(); n != 4 {
			t.Errorf("%d attaches; want 4: the first, two refused while the server starts, the last", n)
		}
		want := [][]byte{api.ResizeFrame(30, 100), append([]byte{api.FrameData}, "abc"...)}
		for i, w := range want {
			select {
			case got := <-frames:
				if string(got) != string(w) {
					t.Errorf("frame %d on the new stream: %q; want %q", i, got, w)
				}
			default:
				t.Errorf("frame %d on the new stream missing; want %q", i, w)
			}
		}
	}
}

// A client of several servers that loses its terminal's server asks the leader a standby
// named, if it is one of them, else the next; a client of one stays with it.
func TestReattachMovesOnAmongServers(t *testing.T) {
	servers := []string{"https://a:7070", "https://b:7070", "https://c:7070"}
	for _, tc := range []struct {
		name    string
		servers []string
		base    string
		err     error
		want    string
	}{
		{"unreachable", servers, "https://a:7070", &UnreachableError{URL: "https://a:7070"}, "https://b:7070"},
		{"last wraps", servers, "https://c:7070", &UnreachableError{URL: "https://c:7070"}, "https://a:7070"},
		{"leader named", servers, "https://a:7070", &APIError{StatusCode: http.StatusServiceUnavailable, Leader: "https://c:7070"}, "https://c:7070"},
		{"leader not listed", servers, "https://a:7070", &APIError{StatusCode: http.StatusServiceUnavailable, Leader: "https://evil:7070"}, "https://b:7070"},
		{"one server", servers[:1], "https://a:7070", &UnreachableError{URL: "https://a:7070"}, "https://a:7070"},
	} {
		c := &Client{BaseURL: tc.base, Servers: tc.servers}
		c.moveOn(tc.err)
		if c.BaseURL != tc.want {
			t.Errorf("%s: moved to %s; want %s", tc.name, c.BaseURL, tc.want)
		}
	}
}

// interactiveJob7 is a fake server's mux with the submit and the read of job 7, an
// interactive job that runs until ended is set and then has FAILED with exit.
func interactiveJob7(ended *atomic.Bool, exit int) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusCreated, api.Job{ID: 7, State: api.StatePending, Spec: api.JobSpec{Queue: "interactive", TTY: true}})
	})
	mux.HandleFunc("GET /api/v1/jobs/7", func(w http.ResponseWriter, r *http.Request) {
		j := api.Job{ID: 7, State: api.StateRunning, Spec: api.JobSpec{Queue: "interactive", TTY: true}, Attempts: 1}
		if ended.Load() {
			j.State, j.ExitCode = api.StateFailed, &exit
		}
		writeJSON(w, http.StatusOK, api.JobDetail{Job: j})
	})
	return mux
}

// runOnTerminal runs rota run with args against the server at url, its stdin a new
// pseudo-terminal whose master setUp, if not nil, is given first, and returns its exit
// code, stdout and stderr.
func runOnTerminal(t *testing.T, url string, setUp func(ptm *os.File), args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ptm, pts, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptm.Close()
	defer pts.Close()
	if setUp != nil {
		setUp(ptm)
	}
	var out, errOut strings.Builder
	cfg := Config{Stdout: &out, Stderr: &errOut, Stdin: pts, Now: time.Now, Location: time.UTC,
		Getenv:    func(k string) string { return map[string]string{"ROTA_SERVER": url, "ROTA_TOKEN": adminToken}[k] },
		ConfigDir: t.TempDir(), Getwd: func() (string, error) { return "/home/alice", nil }}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code = cfg.Run(ctx, "run", args)
	return code, out.String(), errOut.String()
}
