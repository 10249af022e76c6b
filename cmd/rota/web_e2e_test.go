package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"golang.org/x/sys/unix"

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

	b := newUIBrowser(t, chrome, shots, 90*time.Second)

	// Log in through the one-time link: the overview draws, the code leaves the address.
	b.problems.on("login")
	if err := chromedp.Do(b.ctx, chromedp.Navigate(link)); err != nil {
		t.Fatalf("open %s: %v", link, err)
	}
	b.wait("the overview after logging in", `document.querySelector('.page[data-page="overview"][data-ready]') !== null`, 20*time.Second)
	if h := b.eval(`location.href`); strings.Contains(h, "login=") {
		t.Errorf("the address still holds the one-time code: %s", h)
	}
	if who := b.eval(`document.getElementById("me").textContent`); who == "" {
		t.Errorf("the header does not say who is logged in")
	}
	b.wait("the overview's GPU counts", `document.querySelector('#gpu-stats .stat.used .n')?.textContent === "1"`, 10*time.Second)
	// Queue depth counts the queue's jobs from the server's glance: one waits, one runs.
	b.wait("the overview's queue depth", `[...document.querySelectorAll("tr[data-queue]")].some((r) => r.cells[1].textContent === "1" && r.cells[3].textContent === "1")`, 10*time.Second)
	b.shoot("overview")
	b.checkClean()

	b.visit("nodes", "#/nodes")
	b.wait("a cell per GPU", `document.querySelectorAll(".gpu-cell").length === 4 && document.querySelectorAll('.gpu-cell[data-state="used"]').length === 1`, 10*time.Second)
	if cell := b.eval(`document.querySelector('.gpu-cell[data-state="used"]').textContent`); !strings.Contains(cell, "job "+strconv.FormatInt(running, 10)) {
		t.Errorf("the used GPU's cell says %q; want it to name job %d", cell, running)
	}
	b.shoot("nodes")
	b.checkClean()

	b.visit("queue", "#/queue")
	sel := fmt.Sprintf(`#pending tr[data-job="%d"] .reason`, pending)
	b.wait("the pending job's reason", `document.querySelector(`+strconv.Quote(sel)+`)?.textContent.includes("free GPU")`, 10*time.Second)
	b.wait("the running job in the queue", fmt.Sprintf(`document.querySelector('#running tr[data-job="%d"]') !== null`, running), 5*time.Second)
	if h := b.eval(`document.querySelector("#pending h2").textContent + " / " + document.querySelector("#running h2").textContent`); h != "Pending (1) / Running (1)" {
		t.Errorf("the queue's headings say %q; want Pending (1) / Running (1)", h)
	}
	b.shoot("queue")
	b.checkClean()

	b.visit("job", "#/jobs/"+strconv.FormatInt(running, 10))
	b.wait("the job's log lines", `document.getElementById("log").textContent.includes("ui-line 3")`, 15*time.Second)
	b.wait("the job's utilisation chart", `document.querySelector("#util-chart svg path.line") !== null && document.querySelector("#mem-chart svg path.line") !== null`, 20*time.Second)
	b.wait("the job's timeline", `document.querySelectorAll("#timeline li").length >= 2`, 5*time.Second)
	b.shoot("job")
	b.checkClean()

	// The server restarts under the page: the log says it cannot be read and keeps
	// asking, and goes on from where it was once the server is back (the job runs on).
	b.problems.on("job, the server restarting")
	u.up.signal(syscall.SIGTERM)
	if _, ok := u.up.waitExit(30 * time.Second); !ok {
		t.Fatal("rota up did not stop on SIGTERM")
	}
	b.wait("the log saying it asks again", `document.getElementById("log-note").textContent.includes("trying again")`, 10*time.Second)
	seen := b.eval(`String(document.getElementById("log").textContent.split("\n").filter((l) => l.startsWith("ui-line")).length)`)
	u.up = startProc(t, u.dir, "up-again", u.env, u.args...)
	u.waitReady(4)
	n, _ := strconv.Atoi(seen)
	b.wait("the log going on after the restart", fmt.Sprintf(`document.getElementById("log").textContent.includes("ui-line %d\n")`, n+4), 30*time.Second)
	if got := b.eval(`(() => {
		const ls = document.getElementById("log").textContent.split("\n").filter((l) => l.startsWith("ui-line"));
		return ls.every((l, i) => l === "ui-line " + (i + 1)) ? "in order" : ls.join(", ");
	})()`); got != "in order" {
		t.Errorf("the log after the restart: %s; want every line once, in order", got)
	}
	b.checkClean()

	b.visit("reports", "#/reports")
	b.wait("a report or why there is none", `document.querySelector("#report table, #report-unavailable") !== null`, 10*time.Second)
	b.shoot("reports")
	b.checkClean()

	// The pending job's page explains the wait; its Cancel button (two clicks) cancels it.
	b.visit("pending job", "#/jobs/"+strconv.FormatInt(pending, 10))
	b.wait("why the job waits", `document.querySelector("#why li")?.textContent.includes("free GPU")`, 10*time.Second)
	b.shoot("job-pending")
	b.eval(`document.getElementById("cancel").click(); ""`)
	b.eval(`document.getElementById("cancel").click(); ""`)
	b.wait("the page to show the job cancelled", `document.querySelector(".jobhead .badge")?.textContent === "CANCELLED"`, 10*time.Second)
	if d, r := u.show(pending); r.code != 0 || d.State != api.StateCancelled {
		t.Errorf("job %d after Cancel in the UI: %s (%s); want CANCELLED", pending, d.State, r)
	}
	if b.eval(`document.getElementById("cancel") === null ? "gone" : "there"`) != "gone" {
		t.Errorf("the Cancel button is still shown for a cancelled job")
	}
	b.checkClean()

	// Logging out revokes the session token and shows the login form.
	b.problems.on("logout")
	b.eval(`document.getElementById("logout").click(); ""`)
	b.wait("the login form", `document.getElementById("login") !== null && sessionStorage.getItem("rota.token") === null`, 5*time.Second)
	b.checkClean()
}

// clusterBrowser is a browser logged in to c's UI with its admin token, showing the
// overview. The server's certificate is signed by the cluster's own CA, which the browser
// does not know: it is told to go on.
func clusterBrowser(t *testing.T, c *testCluster, chrome, shots string, timeout time.Duration) *uiBrowser {
	t.Helper()
	b := newUIBrowser(t, chrome, shots, timeout, chromedp.Flag("ignore-certificate-errors", true))
	b.problems.on("login")
	if err := chromedp.Do(b.ctx, chromedp.Navigate("https://"+c.addr+"/")); err != nil {
		t.Fatalf("open the UI: %v", err)
	}
	b.wait("the login form", `document.getElementById("token") !== null`, 15*time.Second)
	b.eval(`document.getElementById("token").value = ` + strconv.Quote(c.token) + `; document.getElementById("login").requestSubmit(); ""`)
	b.wait("the overview", `document.querySelector('.page[data-page="overview"][data-ready]') !== null`, 20*time.Second)
	return b
}

// uiBrowser is headless Chromium with the helpers the browser tests share. Its methods
// fail the test with what the page shows.
type uiBrowser struct {
	t        *testing.T
	ctx      context.Context
	problems *browserProblems
	shots    string
	began    time.Time
}

// newUIBrowser starts Chromium at 1280×900 for at most timeout; it stops with the test.
func newUIBrowser(t *testing.T, chrome, shots string, timeout time.Duration, extra ...chromedp.ExecAllocatorOption) *uiBrowser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()))
	opts = append(opts, extra...)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelTab)
	ctx, cancelTime := context.WithTimeout(ctx, timeout)
	t.Cleanup(cancelTime)
	b := &uiBrowser{t: t, ctx: ctx, problems: &browserProblems{}, shots: shots, began: time.Now()}
	b.problems.listen(ctx)
	return b
}

// wait polls a JavaScript predicate; on a timeout it fails with what the page shows.
func (b *uiBrowser) wait(what, expr string, d time.Duration) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(d), chromedp.WithPollingInterval(100*time.Millisecond))); err != nil {
		text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.innerText`))
		b.t.Fatalf("waiting for %s: %v\nthe page shows:\n%s", what, err, tail(text, 4000))
	}
}

func (b *uiBrowser) eval(expr string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return s
}

// shoot saves a full-page screenshot as name.png in the screenshot directory.
func (b *uiBrowser) shoot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot of %s: %v", name, err)
	}
	p := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot of the %s page: %s (%.1fs into the browser session)", name, p, time.Since(b.began).Seconds())
}

// visit goes to a page of the UI and waits until it has drawn.
func (b *uiBrowser) visit(name, hash string) {
	b.t.Helper()
	b.problems.on(name)
	b.eval(`location.hash = ` + strconv.Quote(hash) + `; ""`)
	b.wait("the "+name+" page", `document.querySelector(".page[data-ready]") !== null && location.hash === `+strconv.Quote(hash), 15*time.Second)
}

// checkClean fails the test for each problem the pages reported since the last call.
func (b *uiBrowser) checkClean() {
	b.t.Helper()
	for _, p := range b.problems.take() {
		b.t.Errorf("%s", p)
	}
}

// The pool's governance in the page: a member files requests in the form (a bad one
// refused naming the field), an admin approves one, which applies, and denies one with a
// note the member then reads; an admin's own request is refused in the page; a node whose
// driver is below its pool's wanted range is flagged; jobs show their deadlines, a met one
// and one whose estimated start makes it unreachable.
func TestWebUIGovernance(t *testing.T) {
	skipShort(t)
	chrome := findChrome(t)
	shots := screenshotDir(t)
	dir := t.TempDir()
	fake := filepath.Join(dir, "fake-gpus.yaml")
	if err := os.WriteFile(fake, []byte("count: 4\nmodel: NVIDIA H100 80GB HBM3\ndriver_version: \"535.104.05\"\ncuda_version: \"12.2\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	u := startUpWith(t, 4, "--fake-gpus-config", fake, "--labels", "pool=train", "--listen", addr)

	for _, user := range [][]string{{"alice", "member"}, {"olga", "admin"}, {"vera", "viewer"}} {
		if r := u.rota("admin", "user", "add", user[0], "--role", user[1]); r.code != 0 {
			t.Fatalf("rota admin user add %s: %s", user[0], r)
		}
	}
	token := func(user string) string {
		r := u.rota("admin", "token", "create", "--user", user, "-o", "json")
		var tok api.NewToken
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &tok) != nil || tok.Token == "" {
			t.Fatalf("rota admin token create --user %s: %s", user, r)
		}
		return tok.Token
	}
	alice, olga, vera := token("alice"), token("olga"), token("vera")
	// Team vision may borrow up to 2 GPUs; urgent is for team platform only; pool train
	// wants a driver and CUDA newer than the node's.
	cfg := filepath.Join(dir, "rota.yaml")
	if err := os.WriteFile(cfg, []byte(`queues:
  - name: urgent
    tier: 80
    default_time_limit_s: 86400
    max_time_limit_s: 259200
    grace_s: 120
    teams: [platform]
teams:
  - name: vision
    members: [alice]
    quotas:
      "*": {guaranteed: 1, limit: 2}
  - name: platform
pools:
  - name: train
    driver: ">=550"
    cuda: ">=12.4"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := u.rota("admin", "apply", "-f", cfg); r.code != 0 {
		t.Fatalf("rota admin apply: %s", r)
	}
	u.waitNode(20*time.Second, "the node drifting from pool train's versions", func(n api.Node) bool { return len(n.Drift) == 2 })

	// Deadlines: one met (it ends well before), one that waits for all four GPUs behind a
	// three-hour job while it must start within the hour.
	met := u.submit("--gpus", "1", "--name", "ui-deadline-met", "--time", "10m", "--deadline", "+2h", "--", "true")
	u.waitJob(met, 30*time.Second, api.StateSucceeded)
	blocker := u.submit("--gpus", "1", "--name", "ui-blocker", "--time", "3h", "--", "sleep", "600")
	u.waitJob(blocker, 30*time.Second, api.StateRunning)
	late := u.submit("--gpus", "4", "--name", "ui-deadline-late", "--time", "1h", "--deadline", "+2h", "--", "true")
	var warning string
	waitForf(t, 20*time.Second, func() string {
		return "a deadline warning on job " + strconv.FormatInt(late, 10) + "; last: " + warning
	}, func() bool {
		d, r := u.show(late)
		warning = d.DeadlineWarning
		return r.code == 0 && strings.Contains(warning, "looks unreachable")
	})

	b := newUIBrowser(t, chrome, shots, 150*time.Second)
	// logIn logs in through the login form with an API token.
	logIn := func(who, tok string) {
		t.Helper()
		b.problems.on("login as " + who)
		b.eval(`sessionStorage.clear(); history.replaceState(null, "", "/#/"); ""`)
		if err := chromedp.Do(b.ctx, chromedp.Reload()); err != nil {
			t.Fatalf("reload the page: %v", err)
		}
		b.wait("the login form", `document.getElementById("token") !== null`, 15*time.Second)
		b.eval(`document.getElementById("token").value = ` + strconv.Quote(tok) + `; document.getElementById("login").requestSubmit(); ""`)
		b.wait("the overview as "+who, `document.querySelector('.page[data-page="overview"][data-ready]') !== null && document.getElementById("me").textContent.startsWith(`+strconv.Quote(who+" ")+`)`, 20*time.Second)
		b.checkClean()
	}
	if err := chromedp.Do(b.ctx, chromedp.Navigate("http://"+addr+"/")); err != nil {
		t.Fatalf("open the UI: %v", err)
	}

	// A member files a quota raise: too big first, refused naming the field, then right.
	logIn("alice", alice)
	b.wait("the overview's drifting node", `document.querySelector("#drift-stat .n")?.textContent === "1"`, 10*time.Second)
	if h := b.eval(`document.getElementById("drift-stat").getAttribute("href")`); h != "#/nodes?drifting=true" {
		t.Errorf("the drift figure links to %s; want the drifting nodes, #/nodes?drifting=true", h)
	}
	// The admin's blocker holds a GPU: a member who may not read that job still sees the
	// GPU taken, not free.
	b.wait("a member's overview counting the GPU another's job holds",
		`Number(document.querySelector("#gpu-stats .stat.used .n")?.textContent) + Number(document.querySelector("#gpu-stats .stat.idle .n")?.textContent) === 1`, 10*time.Second)
	if b.eval(`document.getElementById("requests-stat") === null ? "none" : "shown"`) != "none" {
		t.Errorf("a member's overview counts the requests waiting for a decision; only deciders' should")
	}
	b.visit("requests (alice)", "#/requests")
	fill := func(values map[string]string) {
		t.Helper()
		js, _ := json.Marshal(values)
		b.eval(`(() => { const v = ` + string(js) + `;
			const kind = document.getElementById("request-kind");
			if (v.kind) { kind.value = v.kind; kind.dispatchEvent(new Event("change")); }
			for (const [k, x] of Object.entries(v)) if (k !== "kind") document.querySelector('#request-form [name="' + k + '"]').value = x;
			document.getElementById("request-form").requestSubmit(); return ""; })()`)
	}
	fill(map[string]string{"kind": "quota", "gpu_model": "*", "limit": "9", "reason": "paper deadline on the 12th"})
	b.wait("the API's refusal of a limit above the cluster's GPUs", `document.getElementById("request-message").textContent.startsWith("limit: must be between 1 and 4")`, 10*time.Second)
	if b.eval(`document.getElementById("request-limit").classList.contains("invalid") ? "marked" : "not"`) != "marked" {
		t.Errorf("the refused limit's input is not marked")
	}
	b.shoot("requests-refused")
	fill(map[string]string{"limit": "4", "for_s": "48"})
	b.wait("the quota request filed and listed pending", `document.getElementById("request-message").textContent.startsWith("Request 1 filed") && document.querySelector('#requests tr[data-request="1"][data-state="pending"]') !== null`, 10*time.Second)
	if got := b.eval(`document.querySelector('#requests tr[data-request="1"]').textContent`); !strings.Contains(got, "for 2d 0h from approval") {
		t.Errorf("the quota request asked for 48 hours reads %q; want it to last 2d 0h from approval", got)
	}
	// A reservation's times go to the API as instants; one that ends before it starts is
	// refused naming the end, and nothing is filed.
	start := time.Now().Add(2 * time.Hour)
	fill(map[string]string{"kind": "reservation", "gpus": "2", "start": start.Format("2006-01-02T15:04"), "end": start.Add(-time.Hour).Format("2006-01-02T15:04"), "reason": "release evaluation"})
	b.wait("the API's refusal of an end before the start", `document.getElementById("request-message").textContent.startsWith("end: ") && document.getElementById("request-message").textContent.includes("is not after the start")`, 10*time.Second)
	// What a user writes is shown as text, never as markup.
	fill(map[string]string{"kind": "queue", "queue": "urgent", "reason": "production model regressed <img src=x id=injected>"})
	b.wait("the queue request listed pending", `document.querySelector('#requests tr[data-request="2"][data-state="pending"]') !== null`, 10*time.Second)
	if got := b.eval(`document.getElementById("injected") === null ? document.querySelector('#requests tr[data-request="2"] .reason').textContent : "an img element"`); got != "production model regressed <img src=x id=injected>" {
		t.Errorf("the request's reason shows as %q; want the text as written", got)
	}
	if n := b.eval(`String(document.querySelectorAll("#requests button.approve").length)`); n != "0" {
		t.Errorf("a member sees %s Approve buttons; want none", n)
	}
	b.shoot("requests-member")
	b.checkClean()

	// An admin approves the quota raise, which applies, and denies the queue request.
	logIn("olga", olga)
	b.wait("the overview's count of requests waiting", `document.querySelector("#requests-stat .n")?.textContent === "2"`, 10*time.Second)
	b.shoot("overview-governance")
	b.visit("requests (olga)", "#/requests")
	row := func(id int) string {
		return fmt.Sprintf(`document.querySelector('#requests tr[data-request="%d"]')`, id)
	}
	b.eval(row(1) + `.querySelector("button.approve").click(); ""`)
	b.wait("request 1 approved", row(1)+`?.dataset.state === "approved" && `+row(1)+`.textContent.includes("olga")`, 10*time.Second)
	r := u.rota("admin", "team", "list", "-o", "json")
	var teams api.TeamList
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &teams) != nil {
		t.Fatalf("rota admin team list -o json: %s", r)
	}
	for _, tm := range teams.Teams {
		if tm.Name == "vision" && tm.Quotas["*"].Limit != 4 {
			t.Errorf("team vision's quota after the approval in the page: %+v; want the limit raised to 4", tm.Quotas)
		}
	}
	b.eval(row(2) + `.querySelector("button.deny").click(); ""`)
	b.wait("the API's refusal of a deny without a note", row(2)+`.querySelector(".decide-error").textContent.startsWith("note: is required to deny")`, 10*time.Second)
	b.eval(row(2) + `.querySelector("input.note").value = "the cluster is full this week; ask again on the 14th"; ` + row(2) + `.querySelector("button.deny").click(); ""`)
	b.wait("request 2 denied with its note", row(2)+`?.dataset.state === "denied" && `+row(2)+`.textContent.includes("the cluster is full this week")`, 10*time.Second)

	// Nobody decides their own request, an admin included: the page says so.
	fill(map[string]string{"kind": "queue", "queue": "urgent", "reason": "to try the queue"})
	b.wait("olga's own request listed", row(3)+` !== null`, 10*time.Second)
	b.eval(row(3) + `.querySelector("button.approve").click(); ""`)
	b.wait("the refusal to approve one's own request", row(3)+`.querySelector(".decide-error").textContent.includes("is your own; another operator or admin must decide it")`, 10*time.Second)
	if st := b.eval(row(3) + `.dataset.state`); st != "pending" {
		t.Errorf("olga's own request is %s after she tried to approve it; want pending", st)
	}
	b.shoot("requests-admin")
	b.checkClean()

	// The drifting node, and the deadlines in the queue and on the job pages.
	b.visit("nodes", "#/nodes?drifting=true")
	b.wait("the node flagged as drifting", `document.querySelector(".node .badge.drift") !== null && document.querySelector("#nodes-range .range")?.textContent === "Nodes 1–1 of 1"`, 10*time.Second)
	if txt := b.eval(`document.querySelector(".node dd.drift").textContent`); !strings.Contains(txt, "driver 535.104.05, pool train wants >=550") || !strings.Contains(txt, "CUDA 12.2, pool train wants >=12.4") {
		t.Errorf("the node's drift reads %q; want the driver and CUDA against pool train's ranges", txt)
	}
	b.shoot("nodes-drift")
	b.visit("queue", "#/queue")
	cell := fmt.Sprintf(`document.querySelector('#pending tr[data-job="%d"] .deadline')`, late)
	b.wait("the late job's deadline and warning in the queue", cell+`?.textContent.includes("finish by") && `+cell+`.querySelector(".deadline-warning")?.textContent.includes("looks unreachable")`, 10*time.Second)
	b.shoot("queue-deadline")
	b.visit("late job", "#/jobs/"+strconv.FormatInt(late, 10))
	b.wait("the late job's deadline warning", `document.getElementById("job-deadline")?.textContent.includes("finish by") && document.getElementById("deadline-warning")?.textContent.includes("looks unreachable")`, 10*time.Second)
	b.shoot("job-deadline")
	b.visit("met job", "#/jobs/"+strconv.FormatInt(met, 10))
	b.wait("the met deadline", `document.querySelector("#job-deadline .badge.deadline")?.textContent === "met"`, 10*time.Second)
	b.checkClean()

	// The member reads why the queue request was denied, and sees only her requests.
	logIn("alice", alice)
	b.visit("requests (alice again)", "#/requests")
	b.wait("the denied request's note", row(2)+`?.dataset.state === "denied" && `+row(2)+`.textContent.includes("ask again on the 14th")`, 10*time.Second)
	if n := b.eval(`String(document.querySelectorAll("#requests tr[data-request]").length)`); n != "2" {
		t.Errorf("alice sees %s requests; want her own 2", n)
	}
	b.shoot("requests-denied")
	b.checkClean()

	// A queue longer than a page: the headings count every job, the list shows a page of
	// 100 rows by job ID, an array as one row, and Next and Previous page through it.
	for range 2 {
		if r := u.rota("submit", "--array", "0-5099", "--hold", "--gpus", "1", "--", "true"); r.code != 0 {
			t.Fatalf("rota submit --array: %s", r)
		}
	}
	for range 110 {
		if r := u.rota("submit", "--hold", "--gpus", "1", "--", "true"); r.code != 0 {
			t.Fatalf("rota submit: %s", r)
		}
	}
	logIn("olga", olga)
	b.wait("the overview's queue depth past 10,000", `[...document.querySelectorAll("tr[data-queue]")].some((r) => Number(r.cells[1].textContent) >= 10310)`, 20*time.Second)
	b.visit("queue (long)", "#/queue")
	// page is the waiting list's heading, pager and first and last job IDs.
	page := `(() => {
		const ids = [...document.querySelectorAll("#pending tr[data-job]")].map((r) => Number(r.dataset.job));
		return document.querySelector("#pending h2").textContent + " | " + document.querySelector("#pending .range")?.textContent + " | " + ids.length + " " + ids[0] + "-" + ids[ids.length - 1];
	})()`
	first := b.eval(page)
	m := regexp.MustCompile(`^Pending \((\d+)\) \| showing ([\d,]+) of ([\d,]+) jobs, by job ID \| 100 (\d+)-(\d+)$`).FindStringSubmatch(first)
	if m == nil {
		t.Fatalf("the long queue's first page: %q; want the heading counting every job and 100 rows shown", first)
	}
	shown, _ := strconv.Atoi(strings.ReplaceAll(m[2], ",", ""))
	if n, _ := strconv.Atoi(m[1]); n < 10310 || strings.ReplaceAll(m[3], ",", "") != m[1] || shown < 10200 || shown >= n {
		t.Errorf("the long queue's first page: %q; want at least 10,310 counted, the two arrays' 10,200 among those shown", first)
	}
	if arrays := b.eval(`[...document.querySelectorAll("#pending .array")].map((c) => c.textContent).join(" / ")`); !regexp.MustCompile(`^\d+_\[0-5099\] 5100 jobs / \d+_\[0-5099\] 5100 jobs$`).MatchString(arrays) {
		t.Errorf("the arrays' rows say %q; want each as ID_[0-5099] of 5100 jobs", arrays)
	}
	if b.eval(`String(document.getElementById("pending-prev").disabled)`) != "true" {
		t.Errorf("Previous is enabled on the first page")
	}
	b.eval(`document.getElementById("pending-next").click(); ""`)
	b.wait("the second page of the queue", `location.hash === "#/queue?waiting_after=`+m[5]+`" && document.querySelector('.page[data-ready] #pending tr[data-job]')?.dataset.job > `+m[5], 15*time.Second)
	b.eval(`document.getElementById("pending-prev").click(); ""`)
	b.wait("the first page again, by Previous", `location.hash.startsWith("#/queue?waiting_before=") && document.querySelectorAll('.page[data-ready] #pending tr[data-job]').length === 100 && document.querySelector('#pending tr[data-job]').dataset.job === "`+m[4]+`"`, 15*time.Second)
	b.shoot("queue-long")
	b.checkClean()

	// A viewer may neither file nor read requests: the page shows the API's refusal.
	logIn("vera", vera)
	b.visit("requests (vera)", "#/requests")
	if msg := b.eval(`document.getElementById("requests-error")?.textContent ?? ""`); !strings.Contains(msg, "viewer") {
		t.Errorf("a viewer's Requests page says %q; want the API's refusal naming the role", msg)
	}
	b.checkClean()

	// Past the read budget an admin set (2 ms of server time, and 2 ms a second: two
	// reads, as each pays at least 1 ms), the server puts a user's reads off with 429 and
	// Retry-After. Logging in and drawing the overview takes more reads than that: the
	// page asks again when the server says, and draws all the same.
	budget := filepath.Join(dir, "budget.yaml")
	if err := os.WriteFile(budget, []byte("limits:\n  read_seconds_per_second: 0.002\n  read_burst_seconds: 0.002\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := u.rota("admin", "apply", "-f", budget); r.code != 0 {
		t.Fatalf("rota admin apply -f %s: %s", budget, r)
	}
	logIn("vera", vera)
	b.wait("the overview's GPU counts, read past the budget",
		`Number(document.querySelector("#gpu-stats .stat.used .n")?.textContent) + Number(document.querySelector("#gpu-stats .stat.idle .n")?.textContent) === 1`, 20*time.Second)
	if n := b.eval(`String(window.rotaReads.putOff)`); n == "0" {
		t.Errorf("no read was put off on a budget of two reads; the test no longer tests the page's asking again")
	}
	b.shoot("overview-budget")
	b.checkClean()
}

// The Nodes page of a cluster of several real agents lists a page of nodes at a time, by
// name, with the jobs on them and no listing of all jobs; Next and Previous page through,
// and the filters (state, pool, part of the name) each narrow the list, in the address.
func TestWebUINodesPages(t *testing.T) {
	skipShort(t)
	chrome := findChrome(t)
	shots := screenshotDir(t)
	c := newCluster(t, map[string]string{"n1": "2", "n2": "2", "n3": "2", "n4": "2"})
	// A fifth node of pool serve.
	c.runAgent("n5", "2", append(c.agentArgs("n5", "2", c.agentDir("n5")), "--labels", "pool=serve", "--join", c.joinToken("n5")))
	c.waitNodesReady("n1", "n2", "n3", "n4", "n5")
	if _, err := c.client.Drain(context.Background(), "n4", api.DrainRequest{Reason: "cabling"}); err != nil {
		t.Fatalf("drain n4: %v", err)
	}
	job := c.submit(api.JobSpec{Name: "ui-nodes", GPUs: 2, Command: []string{"sleep", "600"}})
	on := c.waitState(job.ID, 30*time.Second, api.StateRunning).Nodes[0]

	b := clusterBrowser(t, c, chrome, shots, 90*time.Second)
	b.checkClean()
	// The overview counts the nodes that need a look, drained n4 alone, and its figure
	// opens the Nodes page filtered to them.
	b.wait("the overview's figure of nodes that need a look", `document.querySelector("#problems-stat .n")?.textContent === "1"`, 10*time.Second)
	if h := b.eval(`document.getElementById("problems-stat").getAttribute("href")`); h != "#/nodes?problems=true" {
		t.Errorf("the figure of nodes that need a look links to %s; want #/nodes?problems=true", h)
	}

	// cards is what the page shows: the names of its node cards, and its range line.
	cards := func() string {
		return b.eval(`[...document.querySelectorAll(".node[data-node]")].map((c) => c.dataset.node).join(",") + " | " + document.querySelector("#nodes-range .range").textContent`)
	}
	shows := func(what, want string) {
		t.Helper()
		b.wait(what+": "+want, `(() => { const r = document.querySelector("#nodes-range .range"); return r !== null && [...document.querySelectorAll(".node[data-node]")].map((c) => c.dataset.node).join(",") + " | " + r.textContent === `+strconv.Quote(want)+` })()`, 15*time.Second)
	}
	click := func(id string) { b.eval(`document.getElementById(` + strconv.Quote(id) + `).click(); ""`) }

	b.visit("nodes", "#/nodes?limit=2")
	shows("the first page", "n1,n2 | Nodes 1–2 of 5")
	b.visit("the overview", "#/")
	b.wait("the overview's figure of nodes that need a look", `document.getElementById("problems-stat") !== null`, 10*time.Second)
	click("problems-stat")
	shows("the nodes that need a look, from the overview", "n4 | Nodes 1–1 of 1")
	if b.eval(`document.getElementById("node-problems").checked ? "checked" : "not"`) != "checked" {
		t.Errorf("the Nodes page opened from the overview's figure has Problems only unchecked")
	}
	b.eval(`performance.clearResourceTimings(); ""`)
	b.visit("nodes", "#/nodes?limit=2")
	shows("the first page", "n1,n2 | Nodes 1–2 of 5")
	if b.eval(`String(document.getElementById("nodes-prev").disabled)`) != "true" {
		t.Errorf("Previous is enabled on the first page")
	}
	click("nodes-next")
	shows("the second page", "n3,n4 | Nodes 3–4 of 5")
	if h := b.eval(`location.hash`); h != "#/nodes?after=n2&limit=2" {
		t.Errorf("the second page's address is %s; want #/nodes?after=n2&limit=2", h)
	}
	if d := b.eval(`document.querySelector('.node[data-node="n4"] .badge').textContent`); d != "DRAINED" && d != "DRAINING" {
		t.Errorf("n4's badge says %q; want it drained", d)
	}
	click("nodes-next")
	shows("the last page", "n5 | Nodes 5–5 of 5")
	if b.eval(`String(document.getElementById("nodes-next").disabled)`) != "true" {
		t.Errorf("Next is enabled on the last page")
	}
	click("nodes-prev")
	shows("the page before the last", "n3,n4 | Nodes 3–4 of 5")
	b.eval(`history.back(); ""`)
	shows("the last page again, by Back", "n5 | Nodes 5–5 of 5")
	// The page read nodes, not every job: a job's cell is named from the page's own.
	if reads := b.eval(`performance.getEntriesByType("resource").map((e) => new URL(e.name).pathname).filter((p) => p.startsWith("/api/v1/jobs")).join(",")`); reads != "" {
		t.Errorf("the Nodes page read %s; want no job listing", reads)
	}
	b.checkClean()

	// The node running the job, found by name: its cells name the job.
	b.visit("the job's node", "#/nodes?name="+on)
	b.wait("the job's cells", `document.querySelectorAll('.gpu-cell[data-state="used"]').length === 2 && [...document.querySelectorAll('.gpu-cell[data-state="used"]')].every((c) => c.textContent.includes("job `+strconv.FormatInt(job.ID, 10)+`"))`, 15*time.Second)
	b.shoot("nodes-page")

	// Filters from the controls: each goes into the address, back to the first page.
	b.visit("nodes", "#/nodes?limit=2")
	shows("the first page", "n1,n2 | Nodes 1–2 of 5")
	b.wait("pool serve to choose", `[...document.getElementById("node-pool").options].some((o) => o.value === "serve")`, 10*time.Second)
	b.eval(`const p = document.getElementById("node-pool"); p.value = "serve"; p.dispatchEvent(new Event("change")); ""`)
	shows("pool serve", "n5 | Nodes 1–1 of 1")
	b.eval(`const s = document.getElementById("node-state"); s.value = "READY"; s.dispatchEvent(new Event("change")); ""`)
	shows("pool serve and READY", "n5 | Nodes 1–1 of 1")
	if h := b.eval(`location.hash`); h != "#/nodes?state=READY&pool=serve&limit=2" {
		t.Errorf("the filtered address is %s; want #/nodes?state=READY&pool=serve&limit=2", h)
	}
	b.visit("nodes", "#/nodes?limit=2")
	shows("the first page", "n1,n2 | Nodes 1–2 of 5")
	b.eval(`const c = document.getElementById("node-problems"); c.checked = true; c.dispatchEvent(new Event("change")); ""`)
	shows("the nodes with a problem", "n4 | Nodes 1–1 of 1")
	// Where a 2-GPU job could start: the nodes with both GPUs free, not the job's node
	// nor drained n4.
	b.visit("nodes", "#/nodes")
	b.wait("the free GPU filter", `document.getElementById("node-free") !== null`, 10*time.Second)
	b.eval(`const f = document.getElementById("node-free"); f.value = "2"; f.dispatchEvent(new Event("change")); ""`)
	var free []string
	for _, n := range []string{"n1", "n2", "n3", "n5"} {
		if n != on {
			free = append(free, n)
		}
	}
	shows("the nodes with 2 GPUs free", strings.Join(free, ",")+" | Nodes 1–3 of 3")
	if h := b.eval(`location.hash`); h != "#/nodes?free=2" {
		t.Errorf("the address of the free GPU filter is %s; want #/nodes?free=2", h)
	}
	b.visit("drained nodes", "#/nodes?state=DRAINED,DRAINING")
	shows("the drained node", "n4 | Nodes 1–1 of 1")
	b.eval(`const n = document.getElementById("node-name"); n.value = "zz"; document.getElementById("node-filters").requestSubmit(); ""`)
	b.wait("no match", `document.querySelector("#nodes .notice")?.textContent === "No node matches these filters." && location.hash === "#/nodes?name=zz&state=DRAINED%2CDRAINING"`, 15*time.Second)
	if got := cards(); got != " | 0 nodes" {
		t.Errorf("the page with no match shows %q; want no card and 0 nodes", got)
	}
	b.checkClean()
}

// A running job whose log passed the server's limit (the node keeps more): the job page
// says the server shows no more of it and where the rest is, rather than that it follows.
func TestWebUIShowsALogPastTheServersLimit(t *testing.T) {
	skipShort(t)
	chrome := findChrome(t)
	shots := screenshotDir(t)
	c := newTestCluster(t, map[string]string{"n1": "1"}, clusterOpts{maxLogSize: "1M"})
	job := c.submit(api.JobSpec{Name: "ui-loud", Command: []string{"sh", "-c", "seq 400000; echo past-the-limit; sleep 600"}}) // 2.7 MB
	c.waitState(job.ID, 30*time.Second, api.StateRunning)

	b := clusterBrowser(t, c, chrome, shots, 60*time.Second)

	b.visit("job", "#/jobs/"+strconv.FormatInt(job.ID, 10))
	b.wait("the note that the server shows no more", `document.getElementById("log-note").textContent.includes("this server keeps the first 1 MiB of a rank's log")`, 30*time.Second)
	note := b.eval(`document.getElementById("log-note").textContent`)
	if !strings.Contains(note, "running;") || !strings.Contains(note, "the rest stays on node n1") || strings.Contains(note, "following") {
		t.Errorf("the log's note says %q; want that the job runs, that the rest stays on n1, and not that it follows", note)
	}
	if got := b.eval(`String(document.getElementById("log").textContent.includes("past-the-limit"))`); got != "false" {
		t.Errorf("the page shows the line past the server's limit")
	}
	b.shoot("job-log-full")
	b.checkClean()
}

// TestWebUIShowsALogHeldBack opens the page of a running job whose log the server takes
// no more of, its disk having less free than it keeps (--keep-free-disk): the page says
// that what the node printed lately waits there.
func TestWebUIShowsALogHeldBack(t *testing.T) {
	skipShort(t)
	chrome := findChrome(t)
	shots := screenshotDir(t)
	c := newTestCluster(t, map[string]string{"n1": "1"}, clusterOpts{dataTmpfs: "64m", keepFreeDisk: "24M"})
	job := c.submit(api.JobSpec{Name: "ui-held", Command: []string{"sh", "-c", "echo first; sleep 600"}})
	c.waitState(job.ID, 30*time.Second, api.StateRunning)
	waitFor(t, 30*time.Second, "the job's first line on the server", func() bool { return c.logBytes(job.ID) > 0 })
	var st unix.Statfs_t
	if err := unix.Statfs(c.dataDir, &st); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.dataDir, "fill"), make([]byte, int64(st.Bavail)*st.Bsize-16<<20), 0o600); err != nil {
		t.Fatal(err)
	}

	b := clusterBrowser(t, c, chrome, shots, 60*time.Second)
	b.visit("job", "#/jobs/"+strconv.FormatInt(job.ID, 10))
	b.wait("the note that the log waits on the node", `document.getElementById("log-note").textContent.includes("what node n1 printed lately waits there until there is room")`, 30*time.Second)
	if got := b.eval(`document.getElementById("log").textContent`); got != "first\n" {
		t.Errorf("the page shows the log %q, want the line the server took", got)
	}
	b.shoot("job-log-held")
	b.checkClean()
}
