package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotahq/rota/internal/api"
	"github.com/rotahq/rota/internal/notify"
)

// received is one webhook POST as a receiver saw it.
type received struct {
	header http.Header
	raw    []byte
	n      api.Notification
}

// receiver is a webhook endpoint: it answers status(n) to its n-th request (from 0) and
// records what it was sent.
type receiver struct {
	*httptest.Server
	mu     sync.Mutex
	got    []received
	status func(n int) int
}

func newReceiver(t *testing.T, status func(n int) int) *receiver {
	rc := &receiver{status: status}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var n api.Notification
		json.Unmarshal(raw, &n)
		rc.mu.Lock()
		i := len(rc.got)
		rc.got = append(rc.got, received{header: r.Header.Clone(), raw: raw, n: n})
		rc.mu.Unlock()
		code := 200
		if rc.status != nil {
			code = rc.status(i)
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// wait waits until the receiver has had n requests and returns them.
func (rc *receiver) wait(t *testing.T, n int) []received {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rc.mu.Lock()
		got := append([]received(nil), rc.got...)
		rc.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receiver got %d requests; want %d: %s", len(got), n, events(got))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// quiet checks that the receiver gets no more than n requests in a short while.
func (rc *receiver) quiet(t *testing.T, n int) {
	t.Helper()
	time.Sleep(100 * time.Millisecond)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.got) != n {
		t.Errorf("the receiver got %d requests; want %d: %s", len(rc.got), n, events(rc.got))
	}
}

func events(got []received) string {
	var out []string
	for _, r := range got {
		out = append(out, string(r.raw))
	}
	return strings.Join(out, " ")
}

// instantRetries is a notify.Clock whose waits between tries take no time.
type instantRetries struct{}

func (instantRetries) Now() time.Time { return time.Now() }

func (instantRetries) Sleep(ctx context.Context, d time.Duration) error { return ctx.Err() }

// useNotifier replaces the server's notifier with one made with opts.
func (h *harness) useNotifier(opts notify.Options) *notify.Queue {
	opts.Count = h.srv.countWebhook
	q := notify.New(opts)
	h.srv.mu.Lock()
	old := h.srv.notifier
	h.srv.notifier = &notifier{q: q}
	h.srv.mu.Unlock()
	old.close()
	return q
}

// setNotifications applies the cluster's webhook settings.
func (h *harness) setNotifications(n api.Notifications) {
	h.t.Helper()
	var e api.Error
	if code := h.do("PUT", "/api/v1/config", api.Config{Notifications: &n}, &e); code != 200 {
		h.t.Fatalf("set notifications: %d %s", code, e.Message)
	}
}

// finish reports the job's first attempt ended with code.
func (h *harness) finish(node string, gpus int, id int64, code int) {
	h.t.Helper()
	state := api.StateSucceeded
	if code != 0 {
		state = api.StateFailed
	}
	h.beat(node, gpus, api.TaskStatus{JobID: id, Attempt: 1, State: state, ExitCode: &code})
}

// The webhook of a job hears it start and end, signed with the cluster's secret, with the
// body docs/notifications.md shows; a webhook that asked for failures hears "failed".
func TestWebhookStartAndEnd(t *testing.T) {
	h := newHarness(t)
	const secret = "whsec-test"
	h.setNotifications(api.Notifications{Secret: secret})
	all := newReceiver(t, nil)
	failures := newReceiver(t, nil)
	h.beat("n1", 2)
	j := h.startJob("n1", 2, api.JobSpec{GPUs: 1, Name: "train", Command: []string{"train"}, Retries: intp(0), Notify: []api.Notify{
		{URL: all.URL + "/hook?src=rota"},
		{URL: failures.URL, Events: []string{api.NotifyFailed}},
	}})
	all.wait(t, 1)
	h.finish("n1", 2, j.ID, 3)
	got := all.wait(t, 2)
	all.quiet(t, 2)
	for i, want := range []struct {
		event string
		state api.JobState
	}{{api.NotifyStarted, api.StateRunning}, {api.NotifyEnded, api.StateFailed}} {
		r := got[i]
		n := r.n
		if n.Event != want.event || n.Job == nil || n.Job.ID != j.ID || n.Job.State != want.state || n.Job.Name != "train" ||
			n.Job.User != "admin" || n.Job.Queue == "" || n.Job.Attempt != 1 || n.ID == "" || n.Cluster != h.srv.ClusterID() {
			t.Errorf("notification %d: %s; want %s of job %d, %s", i, r.raw, want.event, j.ID, want.state)
		}
		if r.header.Get("Rota-Event") != want.event || r.header.Get("Rota-Delivery") != n.ID ||
			r.header.Get("Content-Type") != "application/json" || r.header.Get("User-Agent") != "rota" {
			t.Errorf("notification %d: headers %v", i, r.header)
		}
		// Verify the signature as docs/notifications.md tells receivers to.
		ts, mac, _ := strings.Cut(strings.TrimPrefix(r.header.Get("Rota-Signature"), "t="), ",v1=")
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte(ts + "." + string(r.raw)))
		if want := hex.EncodeToString(m.Sum(nil)); mac != want {
			t.Errorf("notification %d: Rota-Signature %q; want v1=%s", i, r.header.Get("Rota-Signature"), want)
		}
	}
	if end := got[1].n; end.Job.ExitCode == nil || *end.Job.ExitCode != 3 || len(end.Job.Nodes) != 1 || end.Message != "exited with code 3" {
		t.Errorf("end: %s; want exit code 3 on node n1", got[1].raw)
	}
	f := failures.wait(t, 1)
	failures.quiet(t, 1)
	if f[0].n.Event != api.NotifyFailed || f[0].n.Job.State != api.StateFailed {
		t.Errorf("the failures webhook got %s; want failed", f[0].raw)
	}
}

// A delivery that fails twice is retried with the same ID and delivered once; one that is
// refused (400) is not retried. Outcomes show in /metrics.
func TestWebhookRetries(t *testing.T) {
	h := newHarness(t)
	q := h.useNotifier(notify.Options{Clock: instantRetries{}})
	flaky := newReceiver(t, func(n int) int { return []int{500, 500, 200}[min(n, 2)] })
	refusing := newReceiver(t, func(int) int { return 400 })
	h.beat("n1", 2)
	h.startJob("n1", 2, api.JobSpec{GPUs: 1, Command: []string{"a"}, Notify: []api.Notify{{URL: flaky.URL}, {URL: refusing.URL}}})
	got := flaky.wait(t, 3)
	flaky.quiet(t, 3)
	refusing.quiet(t, 1)
	for _, r := range got {
		if r.header.Get("Rota-Delivery") != got[0].n.ID || r.n.ID != got[0].n.ID || r.n.Event != api.NotifyStarted {
			t.Errorf("try %s (delivery %s); want the first one's ID %s", r.raw, r.header.Get("Rota-Delivery"), got[0].n.ID)
		}
	}
	if s := q.Stats(); s != (notify.Stats{Delivered: 1, Retried: 2, Failed: 1}) {
		t.Errorf("stats %+v; want 1 delivered after 2 retries, 1 refused", s)
	}
	metrics := h.scrape()
	for _, want := range []string{"rota_webhook_deliveries_total 1", "rota_webhook_retries_total 2", "rota_webhook_drops_total 1"} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// scrape returns the server's /metrics page.
func (h *harness) scrape() string {
	h.t.Helper()
	req, _ := http.NewRequest("GET", h.http.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+h.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// An endpoint that never answers fills the queue and what does not fit is dropped and
// counted; the server commits and schedules as before.
func TestHangingWebhookDoesNotBlock(t *testing.T) {
	h := newHarness(t)
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hanging.Close)
	t.Cleanup(func() { close(release) })
	q := h.useNotifier(notify.Options{Size: 2, Workers: 1, Timeout: time.Hour})
	h.beat("n1", 8)
	var jobs []api.Job
	for range 8 {
		jobs = append(jobs, h.submit(api.JobSpec{GPUs: 1, Command: []string{"a"}, Notify: []api.Notify{{URL: hanging.URL}}}))
	}
	h.cycle()
	now := h.clock.Now()
	var running []api.TaskStatus
	for _, j := range jobs {
		running = append(running, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateRunning, PID: 1, StartTime: &now})
	}
	// Each heartbeat commits and queues notifications; none waits for the endpoint (the
	// test would hang for its hour-long timeout if one did).
	h.beat("n1", 8, running...)
	for _, j := range jobs {
		h.finish("n1", 8, j.ID, 0)
	}
	for _, j := range jobs {
		if got := h.job(j.ID); got.State != api.StateSucceeded {
			t.Errorf("job %d: %s; want SUCCEEDED", j.ID, got.State)
		}
	}
	// 16 notifications (8 starts, 8 ends): one is being sent, one waits, the rest dropped.
	if s := q.Stats(); s.Dropped != 14 || s.Delivered != 0 {
		t.Errorf("stats %+v; want 14 dropped", s)
	}
	if m := h.scrape(); !strings.Contains(m, "rota_webhook_drops_total 14\n") {
		t.Error("/metrics does not count the 14 drops")
	}
}

// The events a job's webhooks hear, from its own list, its user's and its team's: each URL
// once per notification, with the union of the events it was given.
func TestWebhookRecipients(t *testing.T) {
	h := newHarness(t)
	h.useNotifier(notify.Options{Clock: instantRetries{}})
	job, user, team, shared := newReceiver(t, nil), newReceiver(t, nil), newReceiver(t, nil), newReceiver(t, nil)
	var e api.Error
	if code := h.do("PUT", "/api/v1/teams/vision", api.Team{Notify: []api.Notify{
		{URL: team.URL, Events: []string{api.NotifySucceeded}},
		{URL: shared.URL, Events: []string{api.NotifyEnded}},
	}}, &e); code != 200 {
		t.Fatalf("put team: %d %s", code, e.Message)
	}
	alice := h.addUser("alice", "member", "vision")
	if code := h.doAs(alice, "PUT", "/api/v1/users/alice/notify", []api.Notify{
		{URL: user.URL, Events: []string{api.NotifyStarted}},
		{URL: shared.URL, Events: []string{api.NotifyStarted}},
	}, &e); code != 200 {
		t.Fatalf("alice sets her webhooks: %d %s", code, e.Message)
	}
	h.beat("n1", 2)
	body, _ := json.Marshal(api.JobSpec{GPUs: 1, Command: []string{"a"}, Notify: []api.Notify{{URL: job.URL}, {URL: shared.URL + "/other"}}})
	var j api.Job
	if code := h.doRaw(alice, "POST", "/api/v1/jobs", body, &j); code != 201 {
		t.Fatalf("alice's submit: %d", code)
	}
	h.cycle()
	now := h.clock.Now()
	h.beat("n1", 2, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateRunning, PID: 1, StartTime: &now})
	h.finish("n1", 2, j.ID, 0)
	for _, tc := range []struct {
		name string
		rc   *receiver
		want string
	}{
		{"job's (default events)", job, "ended started"},
		{"user's (started)", user, "started"},
		{"team's (succeeded)", team, "succeeded"},
		// shared is alice's for started, the team's for ended, and the job's own at /other.
		{"shared", shared, "ended ended started started"},
	} {
		got := tc.rc.wait(t, len(strings.Fields(tc.want)))
		tc.rc.quiet(t, len(got))
		// Deliveries go out in parallel: their order is not kept.
		var evs []string
		for _, r := range got {
			evs = append(evs, r.n.Event)
		}
		slices.Sort(evs)
		if strings.Join(evs, " ") != tc.want {
			t.Errorf("%s webhook heard %v; want %s", tc.name, evs, tc.want)
		}
	}
}

// Preemption, idle warnings and lost nodes reach the job's webhook.
func TestWebhookPreemptIdleNodeLost(t *testing.T) {
	t.Run("preempted", func(t *testing.T) {
		h := newHarness(t)
		rc := newReceiver(t, nil)
		h.beat("n1", 1)
		j := h.startJob("n1", 1, api.JobSpec{GPUs: 1, Queue: "batch", Command: []string{"sweep"}, Notify: []api.Notify{{URL: rc.URL, Events: []string{api.NotifyPreempted}}}})
		h.clock.Add(11 * time.Minute) // past the protection of a job that just started
		h.beat("n1", 1)
		h.submit(api.JobSpec{GPUs: 1, Queue: "urgent", Command: []string{"hotfix"}})
		h.cycle()
		if !h.job(j.ID).PreemptRequested {
			t.Fatal("the batch job was not chosen for preemption")
		}
		code := 143
		h.beat("n1", 1, api.TaskStatus{JobID: j.ID, Attempt: 1, State: api.StateFailed, ExitCode: &code, Reason: api.ReasonPreempted})
		got := rc.wait(t, 1)
		rc.quiet(t, 1)
		if n := got[0].n; n.Event != api.NotifyPreempted || n.Job.State != api.StatePending || n.Job.Reason != api.ReasonPreempted || n.Job.Attempt != 1 {
			t.Errorf("got %s; want preempted, PENDING", got[0].raw)
		}
	})
	t.Run("idle warning", func(t *testing.T) {
		h := newHarness(t)
		rc := newReceiver(t, nil)
		h.idleQueue(60, api.IdleWarn)
		h.beat("n1", 2)
		j := h.startJob("n1", 2, api.JobSpec{GPUs: 1, Queue: "dev", Command: []string{"sleep"}, Notify: []api.Notify{{URL: rc.URL, Events: []string{api.NotifyIdleWarning}}}})
		h.idleReading(j, 0, time.Second)
		h.idleReading(j, 0, time.Minute)
		got := rc.wait(t, 1)
		rc.quiet(t, 1)
		if n := got[0].n; n.Event != api.NotifyIdleWarning || n.Job.ID != j.ID || n.Job.State != api.StateRunning || !strings.Contains(n.Message, "flagged as idle") {
			t.Errorf("got %s; want idle_warning with the notice", got[0].raw)
		}
	})
	t.Run("node lost", func(t *testing.T) {
		h := newHarness(t)
		rc := newReceiver(t, nil)
		h.beat("n1", 1)
		j := h.startJob("n1", 1, api.JobSpec{GPUs: 1, Command: []string{"a"}, Notify: []api.Notify{{URL: rc.URL}}})
		rc.wait(t, 1) // started
		h.clock.Add(2 * time.Minute)
		h.srv.checkNodes(context.Background())
		got := rc.wait(t, 2)
		rc.quiet(t, 2)
		if n := got[1].n; n.Event != api.NotifyNodeLost || n.Node != "n1" || n.Job.ID != j.ID || n.Job.State != api.StatePending || n.Job.Reason != api.ReasonNodeLost {
			t.Errorf("got %s; want node_lost of n1, the job PENDING", got[1].raw)
		}
	})
}

// Webhook URLs are checked wherever they are set, naming the field at fault.
func TestWebhookValidation(t *testing.T) {
	h := newHarness(t)
	mia := h.addUser("mia", "member")
	h.addUser("bob", "member")
	h.beat("n1", 1)
	long := "https://hooks.example.com/" + strings.Repeat("a", 2048)
	nine := make([]api.Notify, 9)
	for i := range nine {
		nine[i] = api.Notify{URL: fmt.Sprintf("https://hooks.example.com/%d", i)}
	}
	cases := []struct {
		name   string
		notify []api.Notify
		field  string
	}{
		{"bad scheme", []api.Notify{{URL: "ftp://hooks.example.com/x"}}, "notify[0].url"},
		{"no scheme", []api.Notify{{URL: "hooks.example.com/x"}}, "notify[0].url"},
		{"userinfo", []api.Notify{{URL: "https://ok.example.com/"}, {URL: "https://u:pw@hooks.example.com/x"}}, "notify[1].url"},
		{"no host", []api.Notify{{URL: "https:///x"}}, "notify[0].url"},
		{"too long", []api.Notify{{URL: long}}, "notify[0].url"},
		{"fragment", []api.Notify{{URL: "https://hooks.example.com/x#started"}}, "notify[0].url"},
		{"unknown event", []api.Notify{{URL: "https://hooks.example.com/x", Events: []string{"started", "exploded"}}}, "notify[0].events[1]"},
		{"twice the same URL", []api.Notify{{URL: "https://hooks.example.com/x"}, {URL: "https://hooks.example.com/x"}}, "notify[1].url"},
		{"nine", nine, "notify"},
	}
	check := func(t *testing.T, what string, code int, e api.Error, field string) {
		t.Helper()
		if code != 400 || e.Field != field || e.Message == "" {
			t.Errorf("%s: %d %+v; want 400 naming %s", what, code, e, field)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var e api.Error
			code := h.do("POST", "/api/v1/jobs", api.JobSpec{GPUs: 1, Command: []string{"a"}, Notify: tc.notify}, &e)
			check(t, "submit", code, e, tc.field)
			e = api.Error{}
			code = h.doAs(mia, "PUT", "/api/v1/users/mia/notify", tc.notify, &e)
			check(t, "PUT user notify", code, e, tc.field)
			e = api.Error{}
			code = h.do("PUT", "/api/v1/teams/vision", api.Team{Notify: tc.notify}, &e)
			check(t, "PUT team", code, e, tc.field)
			e = api.Error{}
			code = h.do("PUT", "/api/v1/users/carol", api.User{Role: "member", Notify: tc.notify}, &e)
			check(t, "PUT user", code, e, tc.field)
		})
	}

	t.Run("url prefixes", func(t *testing.T) {
		var e api.Error
		code := h.do("PUT", "/api/v1/config", api.Config{Notifications: &api.Notifications{URLPrefixes: []string{"https://hooks.example.com"}}}, &e)
		check(t, "a prefix that ends in the host", code, e, "notifications.url_prefixes[0]")
		h.setNotifications(api.Notifications{Secret: "s", URLPrefixes: []string{"https://hooks.example.com/"}})
		outside := []api.Notify{{URL: "https://hooks.example.com.attacker.net/x"}}
		e = api.Error{}
		code = h.do("POST", "/api/v1/jobs", api.JobSpec{GPUs: 1, Command: []string{"a"}, Notify: outside}, &e)
		check(t, "submit outside the prefixes", code, e, "notify[0].url")
		e = api.Error{}
		code = h.doAs(mia, "PUT", "/api/v1/users/mia/notify", outside, &e)
		check(t, "PUT user notify outside the prefixes", code, e, "notify[0].url")
		if code := h.doAs(mia, "PUT", "/api/v1/users/mia/notify", []api.Notify{{URL: "https://hooks.example.com/mia"}}, &e); code != 200 {
			t.Errorf("inside the prefixes: %d %s", code, e.Message)
		}
		// The secret is not written to the audit trail.
		for _, ev := range h.events(api.EventConfig) {
			if strings.Contains(string(ev.After)+string(ev.Before), `"s"`) {
				t.Errorf("audit event shows the secret: %s", ev.After)
			}
		}
	})

	t.Run("who may set a user's webhooks", func(t *testing.T) {
		hooks := []api.Notify{{URL: "https://hooks.example.com/x", Events: []string{api.NotifyEnded}}}
		var e api.Error
		if code := h.doAs(mia, "PUT", "/api/v1/users/bob/notify", hooks, &e); code != 403 || e.Rule == "" {
			t.Errorf("mia sets bob's: %d %+v; want 403 with the rule", code, e)
		}
		var u api.User
		if code := h.doAs(mia, "PUT", "/api/v1/users/mia/notify", hooks, &u); code != 200 || len(u.Notify) != 1 || u.Role != "member" {
			t.Errorf("mia sets her own: %d %+v", code, u)
		}
		if code := h.do("PUT", "/api/v1/users/bob/notify", hooks, &u); code != 200 || u.Name != "bob" {
			t.Errorf("an admin sets bob's: %d %+v", code, u)
		}
		if code := h.do("PUT", "/api/v1/users/nobody/notify", hooks, &e); code != 404 {
			t.Errorf("an unknown user's: %d; want 404", code)
		}
		var list api.UserList
		h.do("GET", "/api/v1/users", nil, &list)
		for _, u := range list.Users {
			if (u.Name == "mia" || u.Name == "bob") && (len(u.Notify) != 1 || u.Notify[0].URL != hooks[0].URL) {
				t.Errorf("user %s stored with %+v", u.Name, u.Notify)
			}
		}
		// Each change is audited with the user before and after.
		var found bool
		for _, ev := range h.events(api.EventUser) {
			if ev.Actor == "mia" && strings.Contains(ev.Message, "webhooks of user mia") && strings.Contains(string(ev.After), hooks[0].URL) && len(ev.Before) > 0 {
				found = true
			}
		}
		if !found {
			t.Error("no audit event with mia's webhooks before and after")
		}
		// An empty list clears them.
		var cleared api.User
		if code := h.doAs(mia, "PUT", "/api/v1/users/mia/notify", []api.Notify{}, &cleared); code != 200 || cleared.Name != "mia" || cleared.Notify != nil {
			t.Errorf("clearing: %d %+v", code, cleared)
		}
	})
}
