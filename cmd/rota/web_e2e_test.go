package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/rotahq/rota/internal/api"
)

// The web UI's browser test: a real `rota up` with fake GPUs, a job using a GPU and one
// waiting for more GPUs than are free, and headless Chromium logging in through the
// one-time link of `rota ui`, then visiting every page. Each page must draw without a
// console error or an uncaught exception; the test saves a full-page screenshot of each
// (see screenshotDir) for a person to look at.

// chromeNames are the browsers the test looks for in PATH, Debian's first.
var chromeNames = []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}

func findChrome(t *testing.T) string {
	t.Helper()
	for _, name := range chromeNames {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skipf("no browser for the web UI test: none of %s is in PATH (Debian: apt-get install chromium)", strings.Join(chromeNames, ", "))
	return ""
}

// screenshotDir is where the test saves its screenshots: $ROTA_UI_SCREENSHOTS, else
// rota-ui-screenshots in the system's temporary directory.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("ROTA_UI_SCREENSHOTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "rota-ui-screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browserProblems collects what the page reported as wrong: console.error and assert
// calls, uncaught exceptions, and the browser's own error entries (a refused script or
// style is one), except failed network requests, which the pages show themselves.
type browserProblems struct {
	mu   sync.Mutex
	page string
	list []string
}

func (b *browserProblems) add(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.list = append(b.list, b.page+": "+fmt.Sprintf(format, args...))
}

func (b *browserProblems) on(page string) {
	b.mu.Lock()
	b.page = page
	b.mu.Unlock()
}

func (b *browserProblems) take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.list
	b.list = nil
	return l
}

func (b *browserProblems) listen(ctx context.Context) {
	console := chromedp.Events(ctx, runtime.ConsoleAPICalled)
	exceptions := chromedp.Events(ctx, runtime.ExceptionThrown)
	entries := chromedp.Events(ctx, cdplog.EntryAdded)
	go func() {
		for ev, err := range console {
			if err != nil {
				return
			}
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				b.add("console.%s: %s", ev.Type, strings.Join(args, " "))
			}
		}
	}()
	go func() {
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			b.add("%s", (&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error())
		}
	}()
	go func() {
		for ev, err := range entries {
			if err != nil {
				return
			}
			if e := ev.Entry; e.Level == cdplog.EntryLevelError && e.Source != cdplog.EntrySourceNetwork {
				b.add("browser %s error: %s (%s)", e.Source, e.Text, e.URL)
			}
		}
	}()
}

func TestWebUIInBrowser(t *testing.T) {
	skipShort(t)
	chrome := findChrome(t)
	shots := screenshotDir(t)
	addr := freePort(t)
	u := startUp(t, 4, "--listen", addr)

	// One job computes on a GPU (the fake layer's registration) and writes log lines; one
	// waits for all four GPUs while the first holds one.
	running := u.submit("--gpus", "1", "--name", "ui-running", "--", "sh", "-c",
		`echo "{\"gpu\": $CUDA_VISIBLE_DEVICES, \"memory_mb\": 300, \"utilization_pct\": 80}" > "$ROTA_FAKE_GPU_DIR/procs/$$"; `+
			`i=0; while [ $i -lt 600 ]; do i=$((i+1)); echo "ui-line $i"; sleep 0.5; done`)
	u.waitJob(running, 30*time.Second, api.StateRunning)
	pending := u.submit("--gpus", "4", "--name", "ui-pending", "--", "true")
	var reason string
	waitForf(t, 20*time.Second, func() string {
		return "a reason for pending job " + strconv.FormatInt(pending, 10) + "; last: " + reason
	}, func() bool {
		d, r := u.show(pending)
		reason = d.Message
		return r.code == 0 && d.State == api.StatePending && strings.Contains(d.Message, "free GPU")
	})

	r := u.rota("ui", "--no-open")
	if r.code != 0 {
		t.Fatalf("rota ui --no-open: %s", r)
	}
	link := strings.TrimSpace(r.stdout)
	if !strings.Contains(link, "#login=") {
		t.Fatalf("rota ui --no-open printed %q; want a link with #login=CODE", link)
	}
	if strings.HasPrefix(link, "/") { // a server not told its address answers a path
		link = "http://" + addr + link
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	defer cancelTab()
	ctx, cancelTime := context.WithTimeout(ctx, 90*time.Second)
	defer cancelTime()
	problems := &browserProblems{}
	problems.listen(ctx)

	// wait polls a JavaScript predicate; on a timeout it fails with what the page shows.
	wait := func(what, expr string, d time.Duration) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(d), chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
			text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("waiting for %s: %v\nthe page shows:\n%s", what, err, tail(text, 4000))
		}
	}
	eval := func(expr string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		return s
	}
	began := time.Now()
	shoot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot of %s: %v", name, err)
		}
		p := filepath.Join(shots, name+".png")
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot of the %s page: %s (%.1fs into the browser session)", name, p, time.Since(began).Seconds())
	}
	// visit goes to a page of the UI and waits until it has drawn.
	visit := func(name, hash string) {
		t.Helper()
		problems.on(name)
		eval(`location.hash = ` + strconv.Quote(hash) + `; ""`)
		wait("the "+name+" page", `document.querySelector(".page[data-ready]") !== null && location.hash === `+strconv.Quote(hash), 15*time.Second)
	}
	checkClean := func() {
		t.Helper()
		for _, p := range problems.take() {
			t.Errorf("%s", p)
		}
	}

	// Log in through the one-time link: the overview draws, the code leaves the address.
	problems.on("login")
	if err := chromedp.Do(ctx, chromedp.Navigate(link)); err != nil {
		t.Fatalf("open %s: %v", link, err)
	}
	wait("the overview after logging in", `document.querySelector('.page[data-page="overview"][data-ready]') !== null`, 20*time.Second)
	if h := eval(`location.href`); strings.Contains(h, "login=") {
		t.Errorf("the address still holds the one-time code: %s", h)
	}
	if who := eval(`document.getElementById("me").textContent`); who == "" {
		t.Errorf("the header does not say who is logged in")
	}
	wait("the overview's GPU counts", `document.querySelector('#gpu-stats .stat.used .n')?.textContent === "1"`, 10*time.Second)
	shoot("overview")
	checkClean()

	visit("nodes", "#/nodes")
	wait("a cell per GPU", `document.querySelectorAll(".gpu-cell").length === 4 && document.querySelectorAll('.gpu-cell[data-state="used"]').length === 1`, 10*time.Second)
	if cell := eval(`document.querySelector('.gpu-cell[data-state="used"]').textContent`); !strings.Contains(cell, "job "+strconv.FormatInt(running, 10)) {
		t.Errorf("the used GPU's cell says %q; want it to name job %d", cell, running)
	}
	shoot("nodes")
	checkClean()

	visit("queue", "#/queue")
	sel := fmt.Sprintf(`#pending tr[data-job="%d"] .reason`, pending)
	wait("the pending job's reason", `document.querySelector(`+strconv.Quote(sel)+`)?.textContent.includes("free GPU")`, 10*time.Second)
	wait("the running job in the queue", fmt.Sprintf(`document.querySelector('#running tr[data-job="%d"]') !== null`, running), 5*time.Second)
	shoot("queue")
	checkClean()

	visit("job", "#/jobs/"+strconv.FormatInt(running, 10))
	wait("the job's log lines", `document.getElementById("log").textContent.includes("ui-line 3")`, 15*time.Second)
	wait("the job's utilisation chart", `document.querySelector("#util-chart svg path.line") !== null && document.querySelector("#mem-chart svg path.line") !== null`, 20*time.Second)
	wait("the job's timeline", `document.querySelectorAll("#timeline li").length >= 2`, 5*time.Second)
	shoot("job")
	checkClean()

	visit("reports", "#/reports")
	wait("a report or why there is none", `document.querySelector("#report table, #report-unavailable") !== null`, 10*time.Second)
	shoot("reports")
	checkClean()

	// The pending job's page explains the wait; its Cancel button (two clicks) cancels it.
	visit("pending job", "#/jobs/"+strconv.FormatInt(pending, 10))
	wait("why the job waits", `document.querySelector("#why li")?.textContent.includes("free GPU")`, 10*time.Second)
	shoot("job-pending")
	eval(`document.getElementById("cancel").click(); ""`)
	eval(`document.getElementById("cancel").click(); ""`)
	wait("the page to show the job cancelled", `document.querySelector(".jobhead .badge")?.textContent === "CANCELLED"`, 10*time.Second)
	if d, r := u.show(pending); r.code != 0 || d.State != api.StateCancelled {
		t.Errorf("job %d after Cancel in the UI: %s (%s); want CANCELLED", pending, d.State, r)
	}
	if eval(`document.getElementById("cancel") === null ? "gone" : "there"`) != "gone" {
		t.Errorf("the Cancel button is still shown for a cancelled job")
	}
	checkClean()

	// Logging out revokes the session token and shows the login form.
	problems.on("logout")
	eval(`document.getElementById("logout").click(); ""`)
	wait("the login form", `document.getElementById("login") !== null && sessionStorage.getItem("rota.token") === null`, 5*time.Second)
	checkClean()
}
