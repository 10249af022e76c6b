package cli

import (
	"context"
	"net/http"
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
		mux := http.NewServeMux()
		mux.HandleFunc("POST /api/v1/jobs", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusCreated, api.Job{ID: 7, State: api.StatePending, Spec: api.JobSpec{Queue: "interactive", TTY: true}})
		})
		mux.HandleFunc("GET /api/v1/jobs/7", func(w http.ResponseWriter, r *http.Request) {
			j := api.Job{ID: 7, State: api.StateRunning, Spec: api.JobSpec{Queue: "interactive", TTY: true}, Attempts: 1}
			if closed.Load() {
				nine := 9
				j.State, j.ExitCode = api.StateFailed, &nine
			}
			writeJSON(w, http.StatusOK, api.JobDetail{Job: j})
		})
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

		ptm, pts, err := pty.Open()
		if err != nil {
			t.Fatal(err)
		}
		defer ptm.Close()
		defer pts.Close()
		var out, errOut strings.Builder
		cfg := Config{Stdout: &out, Stderr: &errOut, Stdin: pts, Now: time.Now, Location: time.UTC,
			Getenv:    func(k string) string { return map[string]string{"ROTA_SERVER": url, "ROTA_TOKEN": adminToken}[k] },
			ConfigDir: t.TempDir(), Getwd: func() (string, error) { return "/home/alice", nil }}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		code := cfg.Run(ctx, "run", []string{"--", "sh", "-c", "echo quick; exit 9"})
		cancel()
		if code != 9 {
			t.Errorf("streamed %v: exit %d, stderr %q; want the job's 9", streamed, code, errOut.String())
		}
		if got := strings.Count(out.String(), "quick"); got != 1 {
			t.Errorf("streamed %v: stdout %q; want the job's output once", streamed, out.String())
		}
	}
}
